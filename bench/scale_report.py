"""scale_report.py: the section of bench/results/latest.md on ina past one aggregator host
(bench/scale.sh, docs/SCALE.md): every case against the rings on the same links, each time
beside its ideal. Imported by report.py: section(...) -> markdown lines.
"""
import re

INA_HDR, UDP_IP_ETH = 32, 8 + 20 + 14
TCP_PAYLOAD, TCP_FRAME = 8948, 9014  # MTU 9000 with TCP timestamps, Ethernet header


def case_of(label):
    """(kind, k) of a scale label, or None."""
    if label == "ina":
        return ("hw", None)
    m = re.fullmatch(r"ina-(one|ded|dedmc|tree)-k(\d+)", label)
    if m:
        return (m.group(1), int(m.group(2)))
    if label == "ina-colo":
        return ("colo", None)
    return None


def describe(kind, k, n):
    if kind == "hw":
        return "one switch, link unshaped: the model of a hardware switch"
    if kind == "one":
        return "one switch, its link %s" % kb(k)
    if kind == "ded":
        return "%d dedicated shard hosts, links %s" % (n, kb(k))
    if kind == "dedmc":
        return "%d dedicated shard hosts, results multicast, links %s" % (n, kb(k))
    if kind == "colo":
        return "%d colocated shards (one per worker host)" % n
    return "tree: %d nodes of 2 ranks + a child each; parent on %d hosts, links %s" % (
        n // 2, n // 2, kb(k))


def kb(k):
    return "B" if k == 1 else "%d x B" % k


def ideal_s(kind, k, n, size, rate, eff):
    """Ideal time (s) of an ina case: the busiest link's bytes / its rate."""
    s = size * 8.0 / (rate * eff)
    if kind == "hw":
        return s
    if kind == "one":
        return max(s, n * s / k)
    if kind in ("ded", "dedmc"):
        return max(s, s / k)  # M = N shards: N x S / (N x k B) in (multicast: out S / N)
    if kind == "colo":
        return 2.0 * (n - 1) / n * s
    if kind == "tree":
        return max(s, (n // 2) * s / ((n // 2) * k))
    return float("nan")


def section(by, scale, config, rate, human, fmt_ms):
    """by: (setting, workers, label, bytes, part) -> record; scale: the "scale" and
    "scale_cpu" records; human and fmt_ms: report.py's formatting of sizes and times."""
    cpu = {(r["workers"], r["label"]): r.get("cpu_busy") for r in scale if r["kind"] == "scale"}
    own = {(r["workers"], r["label"]): (r["ranks_cpu_s"] + r["aggregators_cpu_s"]) / r["wall_s"]
           for r in scale if r["kind"] == "scale_cpu" and r.get("wall_s")}
    keys = sorted({(k[1], k[3]) for k in by if k[0] == "cluster" and k[4] == "main"
                   and case_of(k[2]) and case_of(k[2])[0] != "hw"})
    if not keys:
        return []
    md = ["### Past one aggregator host: every aggregator link shaped like a host's NIC",
          "",
          "Emulated cluster, every worker link B = %s both ways (tbf), MTU %s; the links of "
          "the aggregator hosts (switch, shards, parents) shaped to k x B as the row says "
          "(bench/scale.sh, docs/SCALE.md). Each ina time is beside its ideal (the busiest "
          "link's bytes at its rate) and beside the rings (OpenMPI TCP, Gloo) measured on the "
          "same links in the same run: the tree's rings ran with the same ranks on the same "
          "nodes (2 per node). Ratios below 1: ina is faster. CPU: the cores ina's processes "
          "(ranks and aggregators) kept busy on average over the case's launches (from their "
          "user + system time; the ranks' includes generating and verifying the data), and in "
          "brackets the share of the machine's %s cores busy meanwhile (everyone's)." %
          (config.get("rate", "?"), config.get("mtu", "?"), config.get("ncores", "?")), ""]
    head = ["N", "size", "case", "ina ms", "ideal ms", "% of ideal", "OpenMPI ms", "Gloo ms",
            "ina/OpenMPI", "ina/Gloo", "ideal ina/ring", "retx", "CPU"]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "---|" * len(head))
    targets = []
    for n, size in keys:
        ring_ideal = 2.0 * (n - 1) / n * size * 8.0 / (rate * TCP_PAYLOAD / TCP_FRAME)
        labels = sorted({k[2] for k in by if k[0] == "cluster" and k[1] == n and k[3] == size
                         and k[4] == "main" and case_of(k[2])},
                        key=lambda l: (["hw", "one", "ded", "dedmc", "colo", "tree"].index(case_of(l)[0]),
                                       case_of(l)[1] or 0))
        for label in labels:
            r = by[("cluster", n, label, size, "main")]
            kind, k = case_of(label)
            sfx = "-nodes" if kind == "tree" else ""
            mpi = by.get(("cluster", n, "openmpi-tcp" + sfx, size, "main"))
            gloo = by.get(("cluster", n, "gloo" + sfx, size, "main"))
            pay = 4 * r.get("elems_per_packet", 2048)
            eff = pay / (pay + INA_HDR + UDP_IP_ETH)
            ideal = ideal_s(kind, k, n, size, rate, eff)
            ratio = lambda p: "%.2f" % (r["time_s"] / p["time_s"]) if p else "-"
            busy, cores = cpu.get((n, label)), own.get((n, label))
            md.append("| %d | %s | %s | %s%s | %s | %.0f%% | %s | %s | %s | %s | %.2f | %s | %s |" % (
                n, human(size), describe(kind, k, n), fmt_ms(r["time_s"]),
                "" if r.get("ok") else " FAIL", fmt_ms(ideal), 100 * ideal / r["time_s"],
                fmt_ms(mpi["time_s"]) if mpi else "-", fmt_ms(gloo["time_s"]) if gloo else "-",
                ratio(mpi), ratio(gloo), ideal / ring_ideal, r.get("retransmits", "-"),
                ("%.2f" % cores if cores is not None else "-") +
                (" (%.0f%%)" % (100 * busy) if busy is not None else "")))
            ring = min([p["time_s"] for p in (mpi, gloo) if p] or [float("nan")])
            goal = 1.05 if kind == "colo" else {4: 0.75, 8: 0.65}.get(n)  # issue 10's
            if size == 64 << 20 and kind in ("ded", "dedmc", "colo") and (k or 1) == 1 and goal:
                got = r["time_s"] / ring
                targets.append("- N=%d, %s: ina/ring = %.2f (the faster ring), target <= %.2f "
                               "(ideal %.2f): %s." % (
                                   n, describe(kind, k, n), got, goal, ideal / ring_ideal,
                                   "met" if got <= goal else "missed"))
    md.append("")
    md.append("- Ideals: S bytes per rank, B the worker link, payload efficiency e = "
              "payload/(payload + 74 B of headers): one switch with link k B: max(S, N S / k) / "
              "(e B); M = N dedicated shards with links k B: max(S, S / k) / (e B), with results "
              "unicast or multicast (a shard's link then carries S/N out instead of S); colocated "
              "shards: 2 (N-1)/N S / (e B) (each host's link carries its worker's parts out and "
              "its shard's results out); tree with N/2 parents of k B: max(S, S / k) / (e B); "
              "ring (OpenMPI, Gloo): 2 (N-1)/N S / B at TCP's payload efficiency.")
    if any(case_of(k[2]) and case_of(k[2])[0] == "dedmc" for k in by):
        md.append("- Results multicast: every shard runs `ina-switch --multicast=BASE` with a "
                  "base of its own, and sends each finished sum once; the bridge copies it to "
                  "the worker ports only (no floods toward the aggregator hosts: scripts/netns.sh), "
                  "as a switch with IGMP snooping would. Everything else is the unicast row's.")
    if targets:
        md.append("- Issue 10's targets at 64 MiB (against the faster of the two rings):")
        md += ["  " + t for t in targets]
    md.append("")
    return md

