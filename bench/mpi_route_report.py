#!/usr/bin/python3
"""mpi_route_report.py: the tables of bench/mpi_route.sh.

  table  --raw RAW --setting S --placement onehost|hosts --np N --table PATH
         phase 1's forced runs as route table lines "PLACEMENT N BYTES MPI_US INA_US"
         (docs/MPI.md#routing): MPI_US the median of PMPI_Allreduce's time, INA_US that times
         the median paired ratio; merged into PATH:
         its lines for other placements or rank counts are kept, those for this one replaced.
  report --raw RAW --np N --runs R --load L --out MD [--docs docs/MPI.md]
         one Markdown table per setting: plain Open MPI, ina forced, routed by the table,
         routed by the interposer's calibration, and their paired ratios to PMPI_Allreduce in
         the same runs (mpi_allreduce --pair); with --docs, also between docs/MPI.md's
         bench:mpi-route markers.
"""
import argparse
import json
import os
import re
import statistics
import sys

BEGIN, END = "<!-- bench:mpi-route begin -->", "<!-- bench:mpi-route end -->"
HEADER = "# ina-mpi route table: PLACEMENT RANKS BYTES MPI_US INA_US"
PLACE_WORDS = {"onehost": "one host", "hosts": "several hosts"}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def medians(rows, setting, variant, phase, key="time_s", scale=1e6):
    """{bytes: median over rounds of a run's KEY (rank 0's median time, in microseconds, or
    its pair_ratio with scale 1)}"""
    by = {}
    for r in rows:
        if (r.get("setting") == setting and r.get("variant") == variant
                and r.get("phase") == phase and key in r):
            by.setdefault(r["bytes"], []).append(r[key] * scale)
    return {b: statistics.median(v) for b, v in by.items()}


def human(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return "%d %s" % (b >> shift, unit)
    return "%d B" % b


def route_path(route, b):
    """The path a logged route ("MPI below 1281 B, ina from 1281 B") takes at b bytes."""
    m = re.match(r"(MPI|ina) (for every size|below)", route)
    if not m:
        return "?"
    path = m.group(1)
    for name, at in re.findall(r"(MPI|ina) from (\d+) B", route):
        if b >= int(at):
            path = name
    return path


def cmd_table(a):
    rows = load(a.raw)
    # From the forced runs: MPI's own time, and ina's as that times the paired ratio.
    mpi = medians(rows, a.setting, "ina", 1, "pmpi_time_s")
    ratio = medians(rows, a.setting, "ina", 1, "pair_ratio", 1)
    ina = {b: mpi[b] * ratio[b] for b in mpi if b in ratio}
    sizes = sorted(set(mpi) & set(ina))
    if not sizes:
        sys.exit("mpi_route_report: no phase-1 results for %s" % a.setting)
    ours = "# %s, %d ranks:" % (a.placement, a.np)
    keep = []
    if os.path.exists(a.table):
        with open(a.table) as f:
            for line in f:
                line = line.rstrip("\n")
                if (line.split("#")[0].split()[:2] == [a.placement, str(a.np)]
                        or line.startswith(HEADER) or line.startswith(ours) or not line.strip()):
                    continue
                keep.append(line)
    rounds = len({r["round"] for r in rows if r.get("setting") == a.setting
                  and r.get("phase") == 1})
    out = [HEADER + " (docs/MPI.md#routing)"] + keep
    out.append("%s bench/mpi_route.sh, medians of %d rounds" % (ours, rounds))
    out += ["%s %d %d %.2f %.2f" % (a.placement, a.np, b, mpi[b], ina[b]) for b in sizes]
    tmp = a.table + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, a.table)


def setting_table(rows, setting, runs):
    def t(variant, phase):
        return medians(rows, setting, variant, phase)

    def x(variant, phase):
        return medians(rows, setting, variant, phase, "pair_ratio", 1)
    mpi, ina, tab, cal = t("plain", 2), t("ina", 1), t("table", 2), t("calibrate", 2)
    ctl, xina, xtab, xcal = x("plain", 2), x("ina", 1), x("table", 2), x("calibrate", 2)
    routes = [r for r in rows if r.get("kind") == "route" and r.get("setting") == setting]
    table_route = next((r["route"] for r in routes if r["variant"] == "table"), "")
    cal_routes = {}
    for r in routes:
        if r["variant"] == "calibrate":
            cal_routes[r["route"]] = cal_routes.get(r["route"], 0) + 1
    place = next((r["placement"] for r in routes), "")
    sizes = sorted(mpi or ina)
    lines = ["**%s** (%s as the interposer sees it), np %d, µs per MPI_Allreduce (int32 SUM), "
             "medians of %d rounds; \u00d7: the paired ratio to PMPI_Allreduce in the same "
             "run:" % (setting, place or "?", rows[0].get("np", 0), runs), "",
             "| bytes | Open MPI | control \u00d7 | ina forced | \u00d7 | routed (table) | "
             "\u00d7 | path | routed (calibrated) | \u00d7 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    worst = (0.0, None)
    for b in sizes:
        def cell(d, b=b):
            return "%.1f" % d[b] if b in d else "-"

        def rx(d, b=b):
            return "%.2f" % d[b] if b in d else "-"
        path = route_path(table_route.split(": ", 1)[-1], b) if table_route else "-"
        if b in xtab and xtab[b] > worst[0]:
            worst = (xtab[b], b)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            human(b), cell(mpi), rx(ctl), cell(ina), rx(xina), cell(tab), rx(xtab), path,
            cell(cal), rx(xcal)))
    lines.append("")
    if table_route:
        lines.append("- route from the table: %s" % table_route.split(": ", 1)[-1])
    for route, n in sorted(cal_routes.items(), key=lambda kv: -kv[1]):
        lines.append("- route calibrated at MPI_Init (%d of %d rounds): %s" % (
            n, sum(cal_routes.values()), route))
    if worst[1] is not None:
        lines.append("- worst routed (table) \u00d7: %.2f at %s" % (worst[0], human(worst[1])))
    return lines


def cmd_report(a):
    rows = load(a.raw)
    settings = [s for s in ("onehost", "cluster") if any(r.get("setting") == s for r in rows)]
    md = ["Measured by `bench/mpi_route.sh` (load average at the end: %s). Times: medians "
          "over rounds of rank 0's median per run. \u00d7: in each run, every iteration "
          "times the program's MPI_Allreduce (through the interposer) and PMPI_Allreduce "
          "(MPI's own) one after the other; a run's ratio is the median over iterations, and "
          "the column the median over rounds. \"control\" is that ratio without the "
          "interposer (both calls are MPI's): the method's noise floor. Times from different "
          "runs differ by up to 2x on this machine; the paired ratios do not." % a.load, ""]
    for s in settings:
        md += setting_table(rows, s, a.runs) + [""]
    text = "\n".join(md).rstrip() + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    if a.docs:
        with open(a.docs) as f:
            doc = f.read()
        i, j = doc.find(BEGIN), doc.find(END)
        if i < 0 or j < i:
            sys.exit("mpi_route_report: %s has no %s ... %s markers" % (a.docs, BEGIN, END))
        doc = doc[:i + len(BEGIN)] + "\n" + text + doc[j:]
        with open(a.docs, "w") as f:
            f.write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("--raw", required=True)
    t.add_argument("--setting", required=True)
    t.add_argument("--placement", required=True, choices=sorted(PLACE_WORDS))
    t.add_argument("--np", type=int, required=True)
    t.add_argument("--table", required=True)
    r = sub.add_parser("report")
    r.add_argument("--raw", required=True)
    r.add_argument("--np", type=int, required=True)
    r.add_argument("--runs", type=int, required=True)
    r.add_argument("--load", default="?")
    r.add_argument("--out", required=True)
    r.add_argument("--docs")
    a = ap.parse_args()
    (cmd_table if a.cmd == "table" else cmd_report)(a)


if __name__ == "__main__":
    main()
