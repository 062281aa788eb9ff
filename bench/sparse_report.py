#!/usr/bin/python3
"""sparse_report.py: the tables of bench/sparse.sh (time against density) from its raw JSON lines.

    sparse_report.py --raw RUN/raw.jsonl --out bench/results [--rate 1gbit] [--readme README.md]
                     [--doc docs/SPARSE.md]

Writes OUT/sparse.md (every table) and OUT/sparse.jsonl (a copy of the raw lines). With --readme
and --doc, replaces the text between the "bench:sparse" markers of those files: the README gets
the cluster's table and the crossovers, the doc every table.
"""
import argparse
import json
import math
import os
import re
import shutil

SYSTEMS = [("ina-on", "ina sparse"), ("ina-auto", "ina auto"), ("ina-off", "ina dense"),
           ("openmpi", "OpenMPI")]
SETTING_TITLE = {
    "cluster": "Emulated cluster: namespaces + bridge, tbf {rate} on every link both ways "
               "(the switch's too), MTU {mtu}",
    "loopback": "Loopback: everything on 127.0.0.1, 2 cores shared{shm}",
}


def rate_bps(rate):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", rate.strip().lower())
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def union_density(d, n, pattern):
    if pattern == "overlap":
        return d
    if pattern == "disjoint":
        return min(1.0, d * n)
    return 1 - (1 - d) ** n


def fmt_ms(t):
    return "-" if t is None else ("%.3g" % (t * 1e3) if t * 1e3 < 100 else "%.0f" % (t * 1e3))


def fmt_ratio(a, b):
    if a is None or b is None or b <= 0:
        return "-"
    return "%.2f" % (a / b)


def crossover(rows):
    """The densities between which sparse stops being faster than dense (highest first)."""
    pts = sorted(((d, r.get("ina-on"), r.get("ina-off")) for d, r in rows.items()), reverse=True)
    faster = [d for d, s, k in pts if s is not None and k is not None and s < k]
    slower = [d for d, s, k in pts if s is not None and k is not None and s >= k]
    if not faster:
        return "sparse was not faster than dense at any density measured"
    if not slower:
        return "sparse was faster than dense at every density measured (up to %g)" % max(faster)
    lo = max(faster)
    above = [d for d in slower if d > lo]
    if not above:
        return "sparse was faster than dense up to density %g" % lo
    hi = min(above)
    # Interpolate the ratio sparse/dense linearly in density between the two points.
    s_lo, k_lo = rows[lo]["ina-on"], rows[lo]["ina-off"]
    s_hi, k_hi = rows[hi]["ina-on"], rows[hi]["ina-off"]
    r_lo, r_hi = s_lo / k_lo, s_hi / k_hi
    x = lo + (hi - lo) * (1 - r_lo) / (r_hi - r_lo) if r_hi != r_lo else lo
    return ("sparse is faster than dense up to density %g and slower from %g: crossover near "
            "%.2g (per-rank density of non-zero blocks)" % (lo, hi, x))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--readme")
    ap.add_argument("--doc")
    a = ap.parse_args()

    cfg, end, cells = {}, {}, {}
    with open(a.raw) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("kind") == "config":
                cfg = j
            elif j.get("kind") == "end":
                end = j
            elif "setting" in j:
                cells.setdefault(j["setting"], {}).setdefault(float(j["density"]), {})[
                    j["system"]] = j
    n = int(cfg.get("workers", 4))
    pattern = cfg.get("pattern", "random")
    block = int(cfg.get("block", 256))
    bps = rate_bps(a.rate)
    out = []
    out.append("Run %s, build %s, %s cores (\"the 2-core VM\"), N=%d, %s bytes per rank "
               "(float32), pattern %s, blocks of %d elements, %s timed + %s warmup iterations."
               % (cfg.get("date", "?"), cfg.get("git", "?"), cfg.get("ncores", "?"), n,
                  cfg.get("size", "?"), pattern, block, cfg.get("iters", "?"),
                  cfg.get("warmup", "?")))
    out.append("Load average (1/5/15 min) at start %s, at end %s; the machine is shared."
               % (cfg.get("loadavg_start", "?"), end.get("loadavg_end", "?")))
    out.append("Each cell: rank 0's median time per all-reduce in ms; every result verified on "
               "every rank (FAIL where not). Ratios: the other system's time / ina sparse's "
               "(above 1: sparse is faster).")
    out.append("")
    readme = []
    crossovers = {}
    for setting in ("cluster", "loopback"):
        if setting not in cells:
            continue
        rows = {}
        for d, systems in cells[setting].items():
            rows[d] = {}
            for key, _ in SYSTEMS:
                j = systems.get(key)
                if j is not None and j.get("ok"):
                    rows[d][key] = float(j["time_s"])
        title = SETTING_TITLE[setting].format(
            rate=a.rate, mtu=cfg.get("mtu", "?"),
            shm=" (ina-switch --shm: shared-memory rings)" if cfg.get("lo_shm") else "")
        table = ["#### " + title, ""]
        hdr = ["density", "union", "ina sparse", "ina auto (chose)", "ina dense", "OpenMPI",
               "dense / sparse", "OpenMPI / sparse", "blocks sent / dense"]
        if setting == "cluster" and bps:
            hdr += ["ideal sparse", "ideal dense ina", "ideal OpenMPI"]
        table.append("| " + " | ".join(hdr) + " |")
        table.append("|" + "---|" * len(hdr))
        size_bytes = None
        for d in sorted(rows, reverse=True):
            sy = cells[setting][d]
            r = rows[d]

            def cell(key):
                j = sy.get(key)
                if j is None:
                    return "-"
                if not j.get("ok"):
                    return "FAIL"
                return fmt_ms(float(j["time_s"]))

            auto = sy.get("ina-auto")
            chose = ""
            if auto and auto.get("ok"):
                chose = " (sparse)" if auto.get("sparse_ops", 0) > 0 else " (dense)"
            on = sy.get("ina-on")
            blocks = "-"
            if on and on.get("ok") and on.get("count"):
                size_bytes = int(on["bytes"])
                nb = math.ceil(int(on["count"]) / block)
                iters = int(on.get("iters", 1)) or 1
                blocks = "%.3g" % (on.get("sparse_blocks_sent", 0) / iters / (n * nb))
            u = union_density(d, n, pattern)
            row = ["%g" % d, "%.3g" % u, cell("ina-on"), cell("ina-auto") + chose, cell("ina-off"),
                   cell("openmpi"), fmt_ratio(r.get("ina-off"), r.get("ina-on")),
                   fmt_ratio(r.get("openmpi"), r.get("ina-on")), blocks]
            if setting == "cluster" and bps:
                sb = size_bytes or next((int(j["bytes"]) for j in sy.values() if "bytes" in j), 0)
                # The switch's link carries, each way: up every rank's own blocks, down the
                # union to every rank (payload only); dense ina carries N tensors each way; a
                # ring moves 2(N-1)/N of the tensor over each worker's link.
                ideal_sp = max(d, u) * n * sb * 8 / bps
                row += [fmt_ms(ideal_sp), fmt_ms(n * sb * 8 / bps),
                        fmt_ms(2 * (n - 1) / n * sb * 8 / bps)]
            table.append("| " + " | ".join(row) + " |")
        table.append("")
        crossovers[setting] = crossover(rows)
        table.append("- Crossover (%s): %s." % (setting, crossovers[setting]))
        if setting == "cluster" and bps:
            table.append("- Ideals at B = %s, payload only: ina sparse = max(own density, union "
                         "density) x N x S / B (the switch's link carries every rank's blocks "
                         "up and the union to every rank down); dense ina = N x S / B; "
                         "OpenMPI's ring = 2(N-1)/N x S / B on each worker's link." % a.rate)
        table.append("")
        out += table
        if setting == "cluster":
            readme = table
    if "loopback" in crossovers and "cluster" not in crossovers:
        readme = out[4:]
    text = "\n".join(out) + "\n"
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sparse.md"), "w") as f:
        f.write(text)
    shutil.copyfile(a.raw, os.path.join(a.out, "sparse.jsonl"))
    for path, body in ((a.readme, "\n".join(out[:3] + [""] + readme) + "\n"), (a.doc, text)):
        if not path:
            continue
        with open(path) as f:
            doc = f.read()
        begin, stop = "<!-- bench:sparse:begin -->", "<!-- bench:sparse:end -->"
        if begin not in doc or stop not in doc:
            print("sparse_report: no %s ... %s markers in %s: not updated" % (begin, stop, path))
            continue
        doc = doc[:doc.index(begin) + len(begin)] + "\n" + body + doc[doc.index(stop):]
        with open(path, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
