#!/usr/bin/python3
"""run.py: calibrate bench/sim/ina_sim against the emulated cluster's measured times, then
simulate a two-level fat tree of 100 Gbit/s links from N = 8 to 4096 workers (docs/CLUSTER.md,
"At scale").

1. Calibration: the emulated cluster of scripts/netns.sh (every host link 1 Gbit/s each way,
   all CPU work on the VM's 2 shared cores), N = 4 and 8, 16 MiB and 64 MiB, against the times
   `make bench` measured (bench/results/latest.jsonl): ina with a hardware-switch model (the
   aggregator's link unshaped), one switch on a host NIC, N dedicated shard hosts, colocated
   shards, a tree (nodes of 2 ranks, a parent tier on N/2 hosts), and OpenMPI's ring. Fitted:
   one CPU cost per packet (aggregators and workers alike, on the shared cores) by a grid over
   the ina rows, and the ring's bandwidth efficiency and per-step cost by least squares over
   the OpenMPI rows. Prints every row with its error; the target is within 15%.
2. Scale: N = 8..4096 (powers of 2), 16 MiB per worker, on a fat tree (leaves of 32 hosts):
   a hardware switch at the top (N ports at line rate), one software aggregator on a host NIC,
   M = N dedicated aggregator hosts (and M = N/8), colocated shards, node-level children
   (nodes of 8 workers) under 8 dedicated parent shards, and the ring (with the fitted
   per-step cost, and with its bandwidth term only). Prints the table and writes a PNG plot.
   A shard is at least one packet: 16 MiB is 2048 packets of 8 KiB, so at N = 4096 there are
   2048 dedicated aggregators (or colocated shards), not N.
   Dedicated and colocated shards from N = 256 on: the symmetry reduction (ina_sim --group,
   32 groups of N/32 alike hosts, docs/CLUSTER.md); N x M messages a chunk otherwise.
3. The reduction's check: at N = 32, 64 and 128 (M = N/8: 64, 128, 256; --quick: 16) the
   full model and a reduced one coarser than the sweep's (4 groups of workers; M = N/8: 16)
   must agree within 3% (run.py exits 1 otherwise).

Options: --sim PATH (default build/bin/ina-sim), --measured PATH (default
bench/results/latest.jsonl), --out DIR (default bench/results: sim.md, sim.png),
--max-n N (default 4096), --quick (calibration only at 16 MiB, sweep to N = 64; for tests).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20
SWEEP_BYTES = 16 * MiB  # per worker at scale (64 MiB: 4x the messages; over 5 minutes)
PAYLOAD = 8192  # ina_sim's default --payload
GROUP_FROM = 256  # the sweep reduces dedicated and colocated shards from this N on
GROUPS = 32  # ... to this many groups of alike hosts
CHECK_TOLERANCE = 0.03  # the full and the reduced model agree within this
PLATFORM = os.path.join(HERE, "sim_platform.py")

# measured label -> (layout arguments for ina_sim, what it is)
CAL_CASES = [
    ("ina", "one --m 1 --agg-host hw", "hardware-switch model (aggregator link unshaped)"),
    ("ina-one-k1", "one --m 1", "one switch, its link B"),
    ("ina-ded-k1", "dedicated --m {n}", "N dedicated shard hosts"),
    ("ina-colo", "colocated", "colocated shards"),
    ("ina-tree-k1", "tree --per-node 2 --m {half}", "tree: nodes of 2, parents on N/2 hosts"),
]


def sim(args, platform, layout, n, nbytes, extra=()):
    cmd = [args.sim, platform, "--layout"] + layout.split() + [
        "--n", str(n), "--bytes", str(nbytes), "--log=root.thres:critical"] + list(extra)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    return float(out.split()[5])


def platform_file(tmp, kind, *nums):
    path = os.path.join(tmp, "%s-%s.xml" % (kind, "-".join(map(str, nums))))
    if not os.path.exists(path):
        with open(path, "w") as f:
            subprocess.run([sys.executable, PLATFORM, kind] + [str(x) for x in nums], stdout=f,
                           check=True)
    return path


def load_measured(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("setting") == "cluster" and "time_s" in r and r.get("part") == "main":
            rows[(r["label"], r["workers"], r["bytes"])] = r["time_s"]
    return rows


def calibrate(args, tmp, measured, sizes):
    points = [(n, s) for n in (4, 8) for s in sizes]
    # The ina rows: the CPU cost per packet on the shared cores, by a grid.
    best = None
    for cost in (0, 0.5e-6, 1e-6, 1.5e-6, 2e-6, 3e-6):
        rows = []
        for n, s in points:
            plat = platform_file(tmp, "emulated", n, n)
            for label, layout, what in CAL_CASES:
                if (label, n, s) not in measured:
                    continue
                lay = layout.format(n=n, half=n // 2)
                t = sim(args, plat, lay, n, s, ["--cpu-host", "vm", "--agg-cost", str(cost),
                                                "--worker-cost", str(cost)])
                rows.append((label, what, n, s, measured[(label, n, s)], t))
        worst = max(abs(t / m - 1) for *_, m, t in rows)
        print("  cpu cost %.1f us/packet: worst ina error %.1f%%" % (cost * 1e6, worst * 100),
              flush=True)
        if best is None or worst < best[0]:
            best = (worst, cost, rows)
    _, cost, rows = best
    # The ring: t = ideal_sim / eff + steps * c, least squares over OpenMPI's rows.
    xs = []
    for n, s in points:
        if ("openmpi-tcp", n, s) not in measured:
            continue
        plat = platform_file(tmp, "emulated", n, n)
        base = sim(args, plat, "ring", n, s)
        xs.append((n, s, base, 2 * (n - 1), measured[("openmpi-tcp", n, s)]))
    # normal equations for a = 1/eff, c
    saa = sum(b * b for _, _, b, _, _ in xs)
    sac = sum(b * k for _, _, b, k, _ in xs)
    scc = sum(k * k for _, _, _, k, _ in xs)
    say = sum(b * y for _, _, b, _, y in xs)
    scy = sum(k * y for _, _, _, k, y in xs)
    det = saa * scc - sac * sac
    a = (say * scc - sac * scy) / det
    c = max(0.0, (saa * scy - sac * say) / det)
    eff = 1 / a
    ring = ["--ring-efficiency", "%.4f" % eff, "--ring-step-cost", "%.6g" % c]
    for n, s, _, _, m in xs:
        plat = platform_file(tmp, "emulated", n, n)
        rows.append(("openmpi-tcp", "OpenMPI ring (TCP)", n, s, m, sim(args, plat, "ring", n, s, ring)))
    return cost, eff, c, rows


def shards_of(n, nbytes):
    """How many shards N hosts can have: a shard is at least one packet."""
    return min(n, -(-nbytes // PAYLOAD))


def dedicated(m, group, n):
    """M dedicated aggregator hosts: (layout, platform); group > 1: the reduction."""
    if group > 1:
        return "dedicated --m %d --group %d" % (m, group), ("grouped", n, m, group, 0)
    return "dedicated --m %d" % m, ("fattree", n, m, 32)


def colocated(group, n, nbytes):
    if group > 1:
        return "colocated --group %d" % group, ("grouped", n, 0, group, shards_of(n, nbytes))
    return "colocated", ("fattree", n, 1, 32)


def reduced(n):
    """The sweep's group size at N: the full model below GROUP_FROM."""
    return n // GROUPS if n >= GROUP_FROM else 1


def sweep(args, tmp, eff, step_cost, cost, max_n, nbytes):
    ns = [n for n in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n <= max_n]
    # name -> N -> (layout, platform); "*" marks a cell where a shard count is capped
    options = [
        ("hardware switch at the top", lambda n: ("one --m 1 --agg-host hw", ("fattree", n, 1, 32))),
        ("one software aggregator (host NIC)", lambda n: ("one --m 1", ("fattree", n, 1, 32))),
        ("M = N dedicated aggregators",
         lambda n: dedicated(shards_of(n, nbytes), reduced(n), n)),
        # fewer aggregator hosts: each one's link carries N/M = 8 times a worker's bytes
        ("M = N/8 dedicated aggregators", lambda n: dedicated(n // 8, reduced(n), n)),
        ("colocated shards", lambda n: colocated(reduced(n), n, nbytes)),
        ("node children (8/node) + 8 parents", lambda n: ("tree --per-node 8 --m 8", ("fattree", n // 8, 8, 32))),
        ("ring (OpenMPI-calibrated)", lambda n: ("ring --ring-steps 4 --ring-efficiency %.4f "
                                                 "--ring-step-cost %.6g" % (eff, step_cost),
                                                 ("fattree", n, 1, 32))),
        # The fitted per-step cost is the VM's (TCP and OpenMPI on loaded cores, tbf queues):
        # the ring without it, for a fabric where steps cost only their bytes.
        ("ring (bandwidth term only)", lambda n: ("ring --ring-steps 4 --ring-efficiency %.4f"
                                                  % eff, ("fattree", n, 1, 32))),
    ]
    res = {}
    for name, geo in options:
        for n in ns:
            layout, plat = geo(n)
            t0 = time.monotonic()
            t = run_option(args, tmp, layout, plat, n, nbytes, cost)
            res[(name, n)] = t
            print("  %-38s N=%-5d %9.2f ms  (%.1f s)%s" % (name, n, t * 1e3, time.monotonic() - t0,
                  "  [reduced: groups of %d]" % reduced(n) if "--group" in layout else ""), flush=True)
    return ns, options, res


def run_option(args, tmp, layout, plat, n, nbytes, cost):
    path = platform_file(tmp, *plat)
    # A hardware switch adds at line rate: no CPU cost per packet.
    agg_cost = 0 if "--agg-host hw" in layout else cost
    return sim(args, path, layout, n, nbytes, ["--agg-cost", str(agg_cost), "--worker-cost", "0"])


def check_reduction(args, tmp, cost, quick, res, nbytes):
    """The full model against the reduced one, coarser than the sweep's (4 groups of workers;
    M = N/8: 16), at the largest N where the full model runs in seconds."""
    def cases(n):
        m = shards_of(n, nbytes)
        return [("M = N dedicated aggregators", n, n // 4, dedicated(m, 1, n), dedicated(m, n // 4, n)),
                ("colocated shards", n, n // 4, colocated(1, n, nbytes), colocated(n // 4, n, nbytes))]
    def fewer(n):
        g = max(2, n // 16)
        return [("M = N/8 dedicated aggregators", n, g, dedicated(n // 8, 1, n), dedicated(n // 8, g, n))]
    todo = (cases(16) + fewer(16)) if quick else (
        [c for n in (32, 64, 128) for c in cases(n)] + [c for n in (64, 128, 256) for c in fewer(n)])
    rows = []
    for name, n, g, full, red in todo:
        t_full = res.get((name, n)) if reduced(n) == 1 else None
        if t_full is None:
            t_full = run_option(args, tmp, full[0], full[1], n, nbytes, cost)
        t_red = run_option(args, tmp, red[0], red[1], n, nbytes, cost)
        rows.append((name, n, g, t_full, t_red))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--sim", default=os.path.join(REPO, "build", "bin", "ina-sim"))
    ap.add_argument("--measured", default=os.path.join(REPO, "bench", "results", "latest.jsonl"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("--max-n", type=int, default=4096)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not os.access(args.sim, os.X_OK):
        sys.exit("run.py: no simulator at %s (build with SimGrid: libsimgrid-dev)" % args.sim)
    measured = load_measured(args.measured)
    sizes = [16 * MiB] if args.quick else [16 * MiB, 64 * MiB]
    max_n = min(64, args.max_n) if args.quick else args.max_n
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ina-sim.") as tmp:
        print("calibration on the emulated cluster (1 Gbit/s, N = 4 and 8):", flush=True)
        cost, eff, step_cost, rows = calibrate(args, tmp, measured, sizes)
        lines = ["### Calibration: the emulated cluster (1 Gbit/s links, the VM's 2 cores)", "",
                 "Fitted: CPU %.1f us per packet (aggregator and worker, on the shared cores); "
                 "OpenMPI's ring at %.0f%% of the link bandwidth plus %.3g ms per step." %
                 (cost * 1e6, eff * 100, step_cost * 1e3), "",
                 "| N | size | case | measured ms | simulated ms | error |", "|---|---|---|---|---|---|"]
        worst = 0
        for label, what, n, s, m, t in rows:
            err = t / m - 1
            worst = max(worst, abs(err))
            lines.append("| %d | %dM | %s | %.0f | %.0f | %+.1f%% |" % (n, s // MiB, what, m * 1e3,
                                                                    t * 1e3, err * 100))
        lines += ["", "Worst error: %.1f%% (target: within 15%%): %s." %
                  (worst * 100, "met" if worst <= 0.15 else "missed"), ""]
        print("\n".join(lines), flush=True)
        print("fat tree of 100 Gbit/s links, %d MiB per worker:" % (SWEEP_BYTES // MiB), flush=True)
        ns, options, res = sweep(args, tmp, eff, step_cost, cost, max_n, SWEEP_BYTES)
        print("the symmetry reduction against the full model:", flush=True)
        checks = check_reduction(args, tmp, cost, args.quick, res, SWEEP_BYTES)
    head = "| option | " + " | ".join("N=%d" % n for n in ns) + " |"
    lines += ["### At scale: two-level fat tree, 100 Gbit/s links, %d MiB per worker (ms)"
              % (SWEEP_BYTES // MiB), "",
              head, "|---|" + "---|" * len(ns)]
    packets = -(-SWEEP_BYTES // PAYLOAD)
    for name, _ in options:
        capped = "M = N ded" in name or "colocated" in name
        cells = ["%.1f%s" % (res[(name, n)] * 1e3, "*" if capped and n > packets else "")
                 if (name, n) in res else "-" for n in ns]
        lines.append("| %s | %s |" % (name, " | ".join(cells)))
    grouped = [n for n in ns if reduced(n) > 1]
    lines += ["", "Ideal for one worker link: %.2f ms (%d MiB at 100 Gbit/s, headers aside)."
              % (SWEEP_BYTES * 8 / 100e9 * 1e3, SWEEP_BYTES // MiB)]
    if any(n > packets for n in ns):
        lines.append("\\*: %d shards, not N: a shard is at least one packet (%d MiB = %d packets "
                     "of %d bytes); the hosts with a shard carry N/%d times a worker's bytes."
                     % (packets, SWEEP_BYTES // MiB, packets, PAYLOAD, packets))
    if grouped:
        lines.append("Dedicated aggregators and colocated shards at N = %s: the symmetry reduction "
                     "(%d groups of N/%d alike hosts, ina_sim --group; checked below)."
                     % (", ".join(map(str, grouped)), GROUPS, GROUPS))
    lines += ["", "### The symmetry reduction against the full model (16 MiB, fat tree, ms)", "",
              "| option | N | group of | full model | reduced | difference |",
              "|---|---|---|---|---|---|"]
    worst_red = 0
    for name, n, g, t_full, t_red in checks:
        d = t_red / t_full - 1
        worst_red = max(worst_red, abs(d))
        lines.append("| %s | %d | %d | %.3f | %.3f | %+.2f%% |" % (name, n, g, t_full * 1e3,
                                                                t_red * 1e3, d * 100))
    lines += ["", "Worst difference: %.2f%% (target: within %.0f%%): %s." %
              (worst_red * 100, CHECK_TOLERANCE * 100,
               "met" if worst_red <= CHECK_TOLERANCE else "missed"), "",
              "Simulated in %.0f s." % (time.monotonic() - t_start)]
    os.makedirs(args.out, exist_ok=True)
    md = os.path.join(args.out, "sim.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[lines.index(head) - 2:]))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, geo in options:
            xs = [n for n in ns if (name, n) in res]
            # open markers: the points simulated with the symmetry reduction
            red = [n for n in xs if "--group" in geo(n)[0]]
            line, = ax.plot(xs, [res[(name, n)] * 1e3 for n in xs], marker="o", label=name)
            if red:
                ax.plot(red, [res[(name, n)] * 1e3 for n in red], marker="o", linestyle="none",
                        markerfacecolor="white", color=line.get_color())
        ax.text(0.99, 0.01, "open markers: the symmetry reduction", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers N")
        ax.set_ylabel("all-reduce time, ms (%d MiB per worker)" % (SWEEP_BYTES // MiB))
        ax.set_title("ina_sim: two-level fat tree, 100 Gbit/s links")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "sim.png"), dpi=110)
        print("wrote %s and %s" % (md, os.path.join(args.out, "sim.png")))
    except ImportError:
        print("wrote %s (no matplotlib: no plot)" % md)
    return 0 if worst <= 0.15 and worst_red <= CHECK_TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
