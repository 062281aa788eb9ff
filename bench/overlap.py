#!/usr/bin/python3
"""overlap.py: how much of the gradient all-reduce is hidden behind backward, on CPU: the digits
example (examples/pytorch/train_ddp.py --breakdown) for each setting, rank 0's medians.

    flock /work/locks/bench.lock bench/overlap.py [--nproc 2,4] [--hidden 64,1024]
        [--backends gloo,ina-sync,ina,ina-pg] [--buckets default,64] [--epochs 3] [--out FILE]

Backends: gloo (DDP's default all-reduce on a gloo group), ina-sync (the ina hook, the
all-reduce inside the hook), ina (the hook returns at once, the all-reduce runs on a helper
thread), ina-pg (the torch.distributed backend 'ina', DDP's own all-reduce through it).
Buckets: 'default' (DDP's: 1 MiB for the first, 25 MiB after) or a size in KiB for all of
them (--bucket-kb). Each run trains --epochs epochs from the same seed; the figures are the
medians over the steps of epochs 2.. (the first has the bucket rebuild and warm-up): step,
forward, backward (compute until the last bucket was handed over, then waiting), optimizer,
all-reduce busy and hidden, and the share of the all-reduce time hidden over those epochs.
Every run's loss curve is printed beside: the backends must agree (check_training.py checks it).
Writes a markdown table to --out (default bench/results/overlap.md) and prints it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TRAIN = os.path.join(REPO, "examples", "pytorch", "train_ddp.py")


def run(n, hidden, backend, bucket, a):
    cmd = [sys.executable, TRAIN, "--nproc", str(n), "--hidden", str(hidden), "--epochs",
           str(a.epochs), "--json", "--breakdown", "--timeout", str(a.timeout)]
    if backend == "ina-sync":
        cmd += ["--backend", "ina", "--ina-sync"]
    else:
        cmd += ["--backend", backend]
    if bucket != "default":
        cmd += ["--bucket-kb", bucket]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout + 60)
    recs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or len(recs) != a.epochs:
        sys.exit("overlap: %s failed (%d):\n%s" % (" ".join(cmd), out.returncode,
                                                    out.stderr[-2000:]))
    later = recs[1:] or recs
    med = {k: statistics.median(r["breakdown_ms_median"][k] for r in later)
           for k in later[0]["breakdown_ms_median"]}
    hidden_frac = statistics.median(r["comm_hidden_frac"] for r in later)
    print("  N=%d hidden %d %-8s buckets %-7s step %7.2f ms, busy %6.2f, hidden %3.0f%%, "
          "losses %s (%.0f s)" % (n, hidden, backend, bucket, med["step"], med["comm_busy"],
                                  100 * hidden_frac,
                                  " ".join("%.6f" % r["loss"] for r in recs),
                                  time.monotonic() - t0), flush=True)
    return med, hidden_frac, recs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--hidden", default="64,1024")
    ap.add_argument("--backends", default="gloo,ina-sync,ina,ina-pg")
    ap.add_argument("--buckets", default="default,64")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "overlap.md"))
    a = ap.parse_args()
    load = open("/proc/loadavg").read().split()[0]
    print("# overlap.py: %s, load %s at the start" % (time.strftime("%Y-%m-%d %H:%M"), load),
          flush=True)
    lines = ["| N | model | buckets | backend | step ms | forward | backward: compute | "
             "backward: waiting | optimizer | all-reduce busy | hidden | hidden share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in [int(x) for x in a.nproc.split(",")]:
        for hidden in [int(x) for x in a.hidden.split(",")]:
            for bucket in a.buckets.split(","):
                for backend in a.backends.split(","):
                    med, frac, _ = run(n, hidden, backend, bucket, a)
                    lines.append("| %d | hidden %d | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f "
                                 "| %.2f | %.2f | %.0f%% |" % (
                                     n, hidden, bucket if bucket == "default" else
                                     bucket + " KiB", backend, med["step"], med["forward"],
                                     med["backward_compute"], med["comm_exposed"],
                                     med["optimizer"], med["comm_busy"], med["comm_hidden"],
                                     100 * frac))
    load_end = open("/proc/loadavg").read().split()[0]
    table = "\n".join(lines)
    note = ("Medians of rank 0's steps in epochs 2..%d (ms); load average %s at the start, %s "
            "at the end.\n" % (a.epochs, load, load_end))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(table + "\n\n" + note)
    print(table)
    print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
