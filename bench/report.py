#!/usr/bin/python3
"""report.py: turn the JSON lines of a bench/compare.sh run into results/latest.md (tables,
ratios, ideals, memory, failures), results/latest.png (algbw against size, one line per system
and worker count, one panel per setting) and results/latest.jsonl (the records used).

  report.py --raw RUN/raw.jsonl --out bench/results [--merge OLD.jsonl] [--rate 1gbit] [--no-plot]
            [--benchmarks docs/BENCHMARKS.md] [--readme README.md]

--merge keeps OLD's records of the systems this run did not measure (e.g. after
`compare.sh --systems ina --merge`). --benchmarks also copies the tables into that file between
its <!-- bench:latest:begin --> and <!-- bench:latest:end --> markers; --readme writes the
headline figures (the largest size of each setting, and the latency row) into that file between
its <!-- bench:headline:begin --> and <!-- bench:headline:end --> markers. Nothing else in
either file changes, and both name the run (date, build, machine) that produced the figures.
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale_report  # noqa: E402  (bench/scale_report.py)

INA_HDR = 32      # ina header
UDP_IP_ETH = 8 + 20 + 14
WIRE_EXTRA = 20   # preamble + SFD + inter-frame gap (a real Ethernet link; tbf does not count it)

LABEL_NAMES = {
    "ina": "ina",
    "ina-f32": "ina (float add)",
    "ina-mac": "ina (integrity)",
    "openmpi-tcp": "OpenMPI TCP",
    "openmpi-shm": "OpenMPI shm (vader)",
    "gloo": "Gloo",
}
ORDER = ["ina", "ina-f32", "ina-mac", "openmpi-tcp", "openmpi-shm", "gloo"]


def system_of(label):
    if label.startswith("ina"):
        return "ina"
    if label.startswith("openmpi"):
        return "openmpi"
    if label.startswith("gloo"):
        return "gloo"
    return label


def parse_rate(r):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(bit|bps)?", r.strip().lower())
    if not m:
        return None
    v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    if m.group(3) == "bps":  # tc: bps = bytes per second
        v *= 8
    return v


def parse_tc_size(v):
    """tc size ("128kb", "64k", "1mb", "9000") -> bytes (tc's k = 1024)."""
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)(b|bit)?", (v or "").strip().lower())
    if not m:
        return None
    n = float(m.group(1)) * {"": 1, "k": 1024, "m": 1 << 20, "g": 1 << 30}[m.group(2)]
    return n / 8 if m.group(3) == "bit" else n


def human(b):
    for suf, sh in (("G", 30), ("M", 20), ("K", 10)):
        if b >= (1 << sh) and b % (1 << sh) == 0:
            return "%d%s" % (b >> sh, suf)
    return "%d" % b


def fmt_ms(t):
    ms = t * 1e3
    if ms >= 100:
        return "%.0f" % ms
    if ms >= 10:
        return "%.1f" % ms
    if ms >= 1:
        return "%.2f" % ms
    return "%.3f" % ms


def fmt_gbps(g):
    return "%.3g" % g


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except ValueError:
                print("report: skipping a malformed line in %s: %s" % (path, line[:120]),
                      file=sys.stderr)
    return recs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--merge")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--benchmarks", help="also copy the tables into this file (docs/BENCHMARKS.md) "
                    "between the markers <!-- bench:latest:begin --> and <!-- bench:latest:end -->")
    ap.add_argument("--readme", help="also write the headline figures into this file (README.md) "
                    "between <!-- bench:headline:begin --> and <!-- bench:headline:end -->")
    a = ap.parse_args()

    recs = load(a.raw)
    config = next((r for r in recs if r.get("kind") == "config"), {})
    # Each record remembers the run (date, build) it was measured in, so merged rows keep
    # their provenance through later merges.
    for r in recs:
        if r.get("kind") not in ("config", "end"):
            r.setdefault("run_date", config.get("date"))
            r.setdefault("run_git", config.get("git"))
    systems_now = set((config.get("systems") or "ina,openmpi,gloo").split(","))
    settings_now = set((config.get("settings") or "cluster,loopback").split(","))
    merged_from = None
    if a.merge and os.path.exists(a.merge):
        old = load(a.merge)
        old_cfg = next((r for r in old if r.get("kind") == "config"), {})
        kept = []
        for r in old:
            if r.get("kind") in ("config", "end"):
                continue
            lab = r.get("label", "")
            # Keep what this run did not measure: other systems, or other settings.
            if system_of(lab) not in systems_now or r.get("setting") not in settings_now:
                kept.append(r)
        recs += kept
        merged_from = (old_cfg.get("date"), old_cfg.get("git"), len(kept))
        if not config.get("memcpy") and old_cfg.get("memcpy"):
            config["memcpy"] = old_cfg["memcpy"]
        config["merged_from"] = {"date": old_cfg.get("date"), "git": old_cfg.get("git"),
                                 "records": len(kept)}

    # The tables are of one dtype, the run's first (--dtype LIST); the others are compared
    # with it by bench/dtype_report.py.
    primary = config.get("dtype", "float32")
    results = [r for r in recs if "kind" not in r and "time_s" in r
               and r.get("dtype", primary) == primary]
    mems = [r for r in recs if r.get("kind") == "mem"]
    fails = [r for r in recs if r.get("kind") == "failure"]
    rate = parse_rate(config.get("rate") or a.rate) or 1e9
    memcpy = (config.get("memcpy") or {}).get("memcpy_gbps")
    ncores = config.get("ncores") or os.cpu_count() or 1

    # index: (setting, workers, label, bytes, part) -> record
    by = {}
    for r in results:
        part = "latency" if r.get("part") == "latency" else "main"
        by[(r["setting"], r["workers"], r["label"], r["bytes"], part)] = r

    md = []
    md.append("## Results: ina vs OpenMPI vs Gloo (all-reduce, %s, SUM)" %
              config.get("dtype", "float32"))
    md.append("")
    merged_note = ""
    if merged_from and merged_from[2]:
        prov = {}
        for r in recs:
            if r.get("kind") in (None, "mem", "failure") and r.get("run_date") != config.get("date"):
                key = "%s %s" % (system_of(r.get("label", "")), r.get("setting", "?"))
                prov.setdefault(key, set()).add((r.get("run_date") or "?",
                                                 r.get("run_git") or "?"))
        merged_note = " (merged: %s)" % "; ".join(
            "%s rows from the run of %s" % (key, ", ".join("%s, build %s" % p
                                                           for p in sorted(v)))
            for key, v in sorted(prov.items()))
    md.append("Run %s, build %s, kernel %s, %s cores, mode `%s`%s." % (
        config.get("date", "?"), config.get("git", "?"), config.get("kernel", "?"), ncores,
        config.get("mode", "?"), merged_note))
    end = next((r for r in recs if r.get("kind") == "end"), {})
    if config.get("loadavg_start"):
        md.append("Load average (1/5/15 min) at start %s, at end %s: the machine is shared, so "
                  "other jobs' load adds noise." % (config.get("loadavg_start"),
                                                    end.get("loadavg_end", "?")))
    md.append("Each cell: median time in ms / algbw in Gbit/s (algbw = bytes per rank x 8 / "
              "time). Ratios are ina's time / the peer's time (below 1: ina is faster). "
              "Every result of every system verified on every rank (a cell marked FAIL did "
              "not).")
    md.append("")

    settings = [s for s in ("cluster", "loopback") if any(k[0] == s for k in by)]
    for setting in settings:
        for n in sorted({k[1] for k in by if k[0] == setting and k[4] == "main"}):
            labels = [l for l in ORDER if any(k[0] == setting and k[1] == n and k[2] == l
                                              and k[4] == "main" for k in by)]
            sizes = sorted({k[3] for k in by if k[0] == setting and k[1] == n
                            and k[4] == "main"})
            peers = [l for l in labels if not l.startswith("ina")]
            inas = [l for l in labels if l.startswith("ina")]
            if setting == "cluster":
                md.append("### Emulated cluster, N=%d: namespaces + bridge, tbf %s each worker "
                          "link both ways, MTU %s" % (n, config.get("rate", a.rate),
                                                        config.get("mtu", "?")))
            else:
                md.append("### Loopback, N=%d: everything on 127.0.0.1, %d cores shared" %
                          (n, ncores))
            md.append("")
            head = ["size"] + [LABEL_NAMES[l] for l in labels]
            head += ["%s/%s" % (LABEL_NAMES[i], LABEL_NAMES[p]) for i in inas for p in peers]
            if "ina" in labels:
                head += ["ina retx"]
                if setting == "cluster":
                    head += ["ina % of payload ideal"]
                elif memcpy:
                    head += ["copy bound ms", "ina % of copy bound"]
            md.append("| " + " | ".join(head) + " |")
            md.append("|" + "---|" * len(head))
            burst = parse_tc_size(config.get("tbf_burst") or "128kb") or 131072
            any_burst = False
            for b in sizes:
                row = [human(b)]
                if setting == "cluster" and b <= burst:
                    row[0] += " †"
                    any_burst = True
                for l in labels:
                    r = by.get((setting, n, l, b, "main"))
                    if not r:
                        row.append("-")
                        continue
                    cell = "%s / %s" % (fmt_ms(r["time_s"]), fmt_gbps(r["algbw_gbps"]))
                    if not r.get("ok"):
                        cell += " FAIL"
                    row.append(cell)
                ina = by.get((setting, n, "ina", b, "main"))
                for i in inas:
                    ir = by.get((setting, n, i, b, "main"))
                    for p in peers:
                        pr = by.get((setting, n, p, b, "main"))
                        row.append("%.2f" % (ir["time_s"] / pr["time_s"])
                                   if ir and pr and pr["time_s"] > 0 else "-")
                if "ina" in labels:
                    row.append(str(ina.get("retransmits", "-")) if ina else "-")
                    if setting == "cluster":
                        if ina:
                            pay = 4 * ina.get("elems_per_packet", 2048)
                            ideal = rate * pay / (pay + INA_HDR + UDP_IP_ETH) / 1e9
                            row.append("%.0f%%" % (100 * ina["algbw_gbps"] / ideal))
                        else:
                            row.append("-")
                    elif memcpy:
                        limit = 4 * n * b / (memcpy * 1e9 * ncores)
                        row.append(fmt_ms(limit))
                        row.append("%.0f%%" % (100 * limit / ina["time_s"]) if ina else "-")
                md.append("| " + " | ".join(row) + " |")
            md.append("")
            if any_burst:
                md.append("- †: the message fits in the tbf bucket (burst %s), which refills "
                          "between iterations, so it can cross the link faster than B: the "
                          "ideals below do not apply to it." % human(int(burst)))
            if setting == "cluster":
                ina_any = next((by[k] for k in by if k[0] == setting and k[1] == n
                                and k[2] == "ina"), None)
                epp = ina_any.get("elems_per_packet", 2048) if ina_any else 2048
                pay = 4 * epp
                eff = pay / (pay + INA_HDR + UDP_IP_ETH)
                eff_w = pay / (pay + INA_HDR + UDP_IP_ETH + WIRE_EXTRA)
                md.append("- Ideals at B = %s: ina (each worker sends S once and receives the "
                          "sum once) algbw = B x payload/(payload+headers) = %.0f/(%.0f+%d) -> "
                          "**%.4g Gbit/s** (%.2f%%; with preamble/IFG on a real wire %.4g Gbit/s); "
                          "ring all-reduce (OpenMPI, Gloo) algbw <= B x N/(2(N-1)) = %.3g "
                          "Gbit/s." % (config.get("rate", a.rate), pay, pay,
                                       INA_HDR + UDP_IP_ETH, rate * eff / 1e9, 100 * eff,
                                       rate * eff_w / 1e9, rate * n / (2 * (n - 1)) / 1e9))
                md.append("")
            elif memcpy and "ina" in labels:
                md.append("- Copy bound: ina pushes about 4·N·S bytes through copies (the "
                          "kernel's over UDP, the rings' with --shm); "
                          "limit = 4·N·S / (memcpy rate %.1f GB/s x %d cores)." %
                          (memcpy, ncores))
                md.append("")

    # Past one aggregator host (bench/scale.sh).
    md += scale_report.section(by, [r for r in recs if r.get("kind") in ("scale", "scale_cpu")],
                               config, rate, human, fmt_ms)

    # Latency part.
    lat = [(k, r) for k, r in by.items() if k[4] == "latency"]
    if lat:
        md.append("### Latency: %s B, loopback" % human(lat[0][0][3]))
        md.append("")
        md.append("| system | N | median µs | min µs | iterations | verified |")
        md.append("|---|---|---|---|---|---|")
        lat.sort(key=lambda kr: (kr[0][1], ORDER.index(kr[0][2]) if kr[0][2] in ORDER else 9))
        for k, r in lat:
            md.append("| %s | %d | %.1f | %.1f | %d | %s |" % (
                LABEL_NAMES.get(k[2], k[2]), k[1], r["time_s"] * 1e6,
                r.get("time_min_s", float("nan")) * 1e6, r.get("iters", 0),
                "yes" if r.get("ok") else "FAIL"))
        mpi_l = {k[1]: r for k, r in lat if k[2] == "openmpi-tcp"}
        for il in ("ina", "ina-f32"):
            ina_l = {k[1]: r for k, r in lat if k[2] == il}
            for n in sorted(set(ina_l) & set(mpi_l)):
                md.append("")
                md.append("- %s / OpenMPI TCP latency at N=%d: %.2f" %
                          (LABEL_NAMES[il], n, ina_l[n]["time_s"] / mpi_l[n]["time_s"]))
        md.append("")

    # Memory: one row per (setting, N), MiB.
    if mems:
        md.append("### Memory (peak RSS, MiB)")
        md.append("")
        mib = lambda kib: "%.1f" % (float(kib) / 1024) if kib not in (None, "null") else "-"
        rows = {}
        largest = {}
        for m in mems:
            key = (m.get("setting", ""), m.get("workers", 0))
            row = rows.setdefault(key, {})
            if m.get("label") == "ina-switch":
                row["ina-switch"] = m.get("vmhwm_kib")
                continue
            if "maxrss_kib_max" not in m or m.get("part") == "latency":
                continue
            big = max(int(re.sub(r"\D", "", x) or 0) * {"K": 1 << 10, "M": 1 << 20,
                                                        "G": 1 << 30}.get(x[-1:], 1)
                      for x in m.get("sizes", "0").split(","))
            lab = m["label"]
            if lab not in row or big > largest[(key, lab)]:
                row[lab] = m["maxrss_kib_max"]
                largest[(key, lab)] = big
        cols = [("ina-switch", "ina-switch (VmHWM)"), ("ina-worker", "ina worker"),
                ("openmpi-tcp-rank", "OpenMPI TCP rank"),
                ("openmpi-shm-rank", "OpenMPI shm rank"), ("gloo-rank", "Gloo rank")]
        cols = [c for c in cols if any(c[0] in r for r in rows.values())]
        md.append("| setting | N | " + " | ".join(c[1] for c in cols) + " |")
        md.append("|---|---|" + "---|" * len(cols))
        for key in sorted(rows):
            md.append("| %s | %d | " % key + " | ".join(mib(rows[key].get(c[0]))
                                                      for c in cols) + " |")
        md.append("")
        big_all = max(largest.values()) if largest else 0
        md.append("- Workers and ranks: max over ranks of `/usr/bin/time -f %%M` over the whole "
                  "launch, whose largest size (%s) means 2 x %s of send and receive buffers "
                  "(%s) in every process. ina-switch: VmHWM from /proc just before it "
                  "is stopped (its pool is slots x 2 x max-elems x 4 B, 16 MiB by default; "
                  "pages it never touched are not resident)." % (human(big_all), human(big_all),
                                                    ("%.0f MiB" % (2 * big_all / 1048576)
                                                     if big_all >= 1 << 19 else
                                                     "%.0f KiB" % (2 * big_all / 1024))))
        own = {}
        for k, r in by.items():
            if k[2] == "ina" and "worker_peak_rss_kib" in r:
                if (k[0], k[1]) not in own or k[3] > own[(k[0], k[1])][0]:
                    own[(k[0], k[1])] = (k[3], r)
        for (setting, n), (b, r) in sorted(own.items()):
            md.append("- ina-bench's own report (rank 0), %s N=%d, %s: peak RSS %.1f MiB, "
                      "%.1f MiB beyond the user buffers." % (
                          setting, n, human(b), r["worker_peak_rss_kib"] / 1024,
                          (r["worker_peak_rss_kib"] - r.get("buffers_kib", 0)) / 1024))
        md.append("")

    # Failures.
    md.append("### Failures")
    md.append("")
    if not fails and all(r.get("ok") for r in results):
        md.append("None: every run exited 0 and verified.")
    for f in fails:
        md.append("- **%s**, %s N=%d, exit status %s. Command:" % (
            f.get("label"), f.get("setting"), f.get("workers", 0), f.get("rc")))
        md.append("")
        md.append("  ```")
        for line in f.get("cmd", "").splitlines():
            md.append("  " + line)
        md.append("  ```")
        for fn, tail in (f.get("output_tail") or {}).items():
            if tail.strip():
                md.append("  Output (%s, last lines):" % os.path.basename(fn))
                md.append("")
                md.append("  ```")
                for line in tail.splitlines():
                    md.append("  " + line)
                md.append("  ```")
    md.append("")

    md.append("### How these were measured")
    md.append("")
    fa = config.get("float_add", "quantized")
    md.append("- ina adds floats with %s. Row \"ina\": block floating point as in SwitchML, "
              "the default; row \"ina (float add)\": the switch adds float32 values as floats "
              "(`INA_FLOAT_ADD=switch`, ina.h). `compare.sh --float-add` chooses "
              "(quantized, switch, or quantized,switch for both)." %
              {"quantized": "the default only", "switch": "float adds at the switch only"}
              .get(fa, "both methods, one after the other"))
    if "loopback" in settings:
        md.append("- Loopback ina: %s." % (
            "ina-switch --shm, so the workers pass DATA and results through shared-memory rings "
            "(PROTOCOL.md §5.9; the switch is still a separate process)"
            if config.get("lo_shm", 0) else "over UDP on lo (`--no-shm`)"))
    md.append("- Same tensors for all systems (ina-bench's deterministic generator; "
              "bench/benchdata.c for the peers), bytes per rank, dtype %s, SUM. "
              "Iterations (timed + warmup): <=64K 50+5, <=1M 20+2, <=16M 10+1, larger 5+1%s." %
              (config.get("dtype", "float32"),
               "" if str(config.get("iters_scale", "1")) in ("1", "1.0")
               else " (timed x%s)" % config.get("iters_scale")))
    md.append("- ina retx: ina-bench's retransmissions summed over all ranks during the timed "
              "iterations (a retransmission that was not needed still costs link time).")
    md.append("- Time: rank 0's median. The peers run a barrier (not timed) before each "
              "iteration and time the all-reduce call on each rank; ina-bench does the same, "
              "with a 1-element all-reduce through the switch as its barrier.")
    if "cluster" in settings:
        md.append("- Cluster: switch and workers in network namespaces on one Linux bridge, each "
                  "worker's veth shaped with tbf (rate B) on both ends, switch link unshaped; "
                  "OpenMPI (`--mca pml ob1 --mca btl tcp,self`) and Gloo ranks run in the same "
                  "worker namespaces over the same links; ina asks for %s elements per packet "
                  "(granted: %s). The "
                  "namespaces share the machine's %d cores: at N=8 the switch alone forwards N x B "
                  "each way, and the ranks' verification competes for the same cores." %
                  (config.get("elems", 2048),
                   ", ".join(sorted({str(r.get("elems_per_packet")) for k, r in by.items()
                                     if k[0] == "cluster" and k[2] == "ina"})) or "-", ncores))
    if "loopback" in settings:
        md.append("- Loopback: OpenMPI TCP (`btl tcp,self`, lo), OpenMPI shared memory "
                  "(`btl vader,self`), Gloo on lo; all ranks and the switch share the "
                  "machine's %d cores (N > cores: oversubscribed, `--bind-to none`)." % ncores)
    if memcpy:
        mc = config.get("memcpy") or {}
        md.append("- memcpy on one core (bench/memcpy_rate.c, 64 MiB buffers): best %.1f GB/s, "
                  "median %.1f GB/s; the copy bound uses the best." %
                  (memcpy, mc.get("memcpy_median_gbps", float("nan"))))
    md.append("")

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "latest.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(a.out, "latest.jsonl"), "w") as f:
        f.write(json.dumps(dict(config, kind="config")) + "\n")
        for r in recs:
            if r.get("kind") not in ("config",):
                f.write(json.dumps(r) + "\n")

    if not a.no_plot:
        plot(by, settings, config, rate, os.path.join(a.out, "latest.png"))
    rc = 0
    if a.benchmarks:
        # The document has its own "## Latest results" heading in place of the title; the
        # subsections (###) stay below it.
        body = "\n".join(md[1:] if md and md[0].startswith("## ") else md)
        rc |= replace_between(a.benchmarks, "bench:latest", body)
    if a.readme:
        rc |= replace_between(a.readme, "bench:headline",
                              "\n".join(headline(by, config, rate, memcpy, ncores, fails)))
    return rc


def replace_between(path, marker, body):
    """Replace the text between <!-- MARKER:begin --> and <!-- MARKER:end --> (only there)."""
    begin, end = "<!-- %s:begin -->" % marker, "<!-- %s:end -->" % marker
    with open(path) as f:
        text = f.read()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        print("report: %s has no %s ... %s markers; not changed" % (path, begin, end),
              file=sys.stderr)
        return 1
    with open(path, "w") as f:
        f.write(text[:i + len(begin)] + "\n" + body.strip("\n") + "\n" + text[j:])
    return 0


def headline(by, config, rate, memcpy, ncores, fails):
    """A few lines for the README: per setting and N, the largest size's median times, the
    ratios and ina's ideal; then the latency row. @return a list of markdown lines."""
    out = ["Run %s, build %s, %s cores, kernel %s, mode `%s`, load average %s at start; "
           "float32 SUM, median time per all-reduce, every result verified on every rank%s." %
           (config.get("date", "?"), config.get("git", "?"), ncores, config.get("kernel", "?"),
            config.get("mode", "?"), config.get("loadavg_start", "?"),
            "" if not fails else " (**%d runs failed**: see the full tables)" % len(fails)), ""]
    cols = [l for l in ORDER if any(k[2] == l and k[4] == "main" for k in by)]
    peers = [l for l in cols if not l.startswith("ina") and l != "openmpi-shm"]
    head = ["setting", "N", "size"] + [LABEL_NAMES[l] for l in cols]
    head += ["ina / %s" % LABEL_NAMES[p] for p in peers] + ["ideal for ina"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    ms = lambda r: ("%s ms" % fmt_ms(r["time_s"])) + ("" if r.get("ok") else " FAIL")
    for setting in ("cluster", "loopback"):
        for n in sorted({k[1] for k in by if k[0] == setting and k[4] == "main"}):
            b = max(k[3] for k in by if k[0] == setting and k[1] == n and k[4] == "main")
            row = {l: by.get((setting, n, l, b, "main")) for l in cols}
            ina = row.get("ina")
            if setting == "cluster":
                pay = 4 * (ina or {}).get("elems_per_packet", config.get("elems", 2048))
                ideal = "%s ms (link rate)" % fmt_ms(
                    8 * b / (rate * pay / (pay + INA_HDR + UDP_IP_ETH)))
                # The switch's own veth is not shaped: the model of a hardware switch, whose
                # every port runs at the workers' rate.
                name = ("emulated cluster, %s worker links, switch link unshaped (a hardware "
                        "switch's model)" % config.get("rate", "?"))
            else:
                ideal = ("%s ms (copy bound)" % fmt_ms(4 * n * b / (memcpy * 1e9 * ncores))
                         if memcpy else "-")
                name = "loopback"
            cells = [name, str(n), human(b)] + [ms(row[l]) if row[l] else "-" for l in cols]
            cells += ["%.2f" % (ina["time_s"] / row[p]["time_s"]) if ina and row[p] else "-"
                      for p in peers]
            out.append("| " + " | ".join(cells + [ideal]) + " |")
    lat = {k[2]: r for k, r in by.items() if k[4] == "latency"}
    if lat:
        k0 = next(k for k in by if k[4] == "latency")
        us = lambda r: ("%.1f µs" % (r["time_s"] * 1e6)) + ("" if r.get("ok") else " FAIL")
        cells = ["latency, loopback", str(k0[1]), human(k0[3]) + " B"]
        cells += [us(lat[l]) if l in lat else "-" for l in cols]
        cells += ["%.2f" % (lat["ina"]["time_s"] / lat[p]["time_s"]) if "ina" in lat and p in lat
                  else "-" for p in peers]
        out.append("| " + " | ".join(cells + ["-"]) + " |")
    out.append("")
    out.append("Ratios below 1: ina is faster. The ideal is ina's bound: on the cluster each "
               "worker sends S once and receives the sum once at the link rate; on loopback "
               "4·N·S bytes go through memory copies. The machine is shared: repeat a run "
               "before trusting a difference under about 20%.")
    return out


def plot(by, settings, config, rate, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not settings:
        return
    fig, axes = plt.subplots(1, len(settings), figsize=(7 * len(settings), 5), squeeze=False)
    colors = {"ina": "tab:red", "ina-f32": "tab:orange", "ina-mac": "tab:brown",
              "openmpi-tcp": "tab:blue", "openmpi-shm": "tab:cyan",
              "gloo": "tab:green"}
    styles = ["-", "--", ":", "-."]
    for ax, setting in zip(axes[0], settings):
        ns = sorted({k[1] for k in by if k[0] == setting and k[4] == "main"})
        for ni, n in enumerate(ns):
            for l in ORDER:
                pts = sorted((k[3], r["algbw_gbps"]) for k, r in by.items()
                             if k[0] == setting and k[1] == n and k[2] == l and k[4] == "main")
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        color=colors.get(l), linestyle=styles[ni % len(styles)],
                        label="%s N=%d" % (LABEL_NAMES.get(l, l), n))
        xs = sorted({k[3] for k in by if k[0] == setting and k[4] == "main"}) or [4096]
        if setting == "cluster":
            epps = [r.get("elems_per_packet") for k, r in by.items()
                    if k[0] == setting and k[2] == "ina" and r.get("elems_per_packet")]
            pay = 4 * int(epps[0] if epps else config.get("elems", 2048))
            ideal = rate * pay / (pay + INA_HDR + UDP_IP_ETH) / 1e9
            ax.axhline(ideal, color="tab:red", alpha=0.4, linewidth=1)
            ax.text(xs[0], ideal * 1.03,
                    "ina ideal %.3g Gbit/s" % ideal, color="tab:red", fontsize=8)
            for ni, n in enumerate(ns):
                ring = rate * n / (2 * (n - 1)) / 1e9
                ax.axhline(ring, color="gray", alpha=0.4, linewidth=1,
                           linestyle=styles[ni % len(styles)])
                ax.text(xs[-1], ring * (1.03 if ni % 2 == 0 else 0.90),
                        "ring ideal N=%d %.3g" % (n, ring), color="gray", fontsize=8,
                        ha="right", va="bottom" if ni % 2 == 0 else "top")
            ax.set_title("Emulated cluster: tbf %s per worker link, MTU %s" %
                         (config.get("rate"), config.get("mtu")))
        else:
            ax.set_title("Loopback (127.0.0.1), %s cores" % config.get("ncores"))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("algbw (Gbit/s)")
        ticks = sorted({k[3] for k in by if k[0] == setting and k[4] == "main"})
        ax.set_xticks(ticks)
        ax.set_xticklabels([human(t) for t in ticks])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("all-reduce %s SUM, algbw vs size (build %s, %s)" %
                 (config.get("dtype", "float32"), config.get("git", "?"),
                  config.get("date", "?")), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
