#!/usr/bin/python3
"""mpi_route_report.py: the tables of bench/mpi_route.sh.

  table  --raw RAW --setting S --placement onehost|hosts --np N --table PATH
         the medians of phase 1 (plain Open MPI, interposer forced to ina) as route table
         lines "PLACEMENT N BYTES MPI_US INA_US" (docs/MPI.md#routing), merged into PATH:
         its lines for other placements or rank counts are kept, those for this one replaced.
  report --raw RAW --np N --runs R --load L --out MD [--docs docs/MPI.md]
         one Markdown table per setting: plain Open MPI, ina forced, routed by the table,
         routed by the interposer's calibration, and their ratios to plain Open MPI (phase 2's
         plain for the routed ones: measured in the same rounds); with --docs, also between
         docs/MPI.md's bench:mpi-route markers.
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


def medians(rows, setting, variant, phase):
    """{bytes: median over rounds of rank 0's median time, in microseconds}"""
    by = {}
    for r in rows:
        if (r.get("setting") == setting and r.get("variant") == variant
                and r.get("phase") == phase and "time_s" in r):
            by.setdefault(r["bytes"], []).append(r["time_s"] * 1e6)
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
    mpi = medians(rows, a.setting, "plain", 1)
    ina = medians(rows, a.setting, "ina", 1)
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
    mpi1 = medians(rows, setting, "plain", 1)
    ina = medians(rows, setting, "ina", 1)
    mpi2 = medians(rows, setting, "plain", 2)
    tab = medians(rows, setting, "table", 2)
    cal = medians(rows, setting, "calibrate", 2)
    routes = [r for r in rows if r.get("kind") == "route" and r.get("setting") == setting]
    table_route = next((r["route"] for r in routes if r["variant"] == "table"), "")
    cal_routes = {}
    for r in routes:
        if r["variant"] == "calibrate":
            cal_routes[r["route"]] = cal_routes.get(r["route"], 0) + 1
    place = next((r["placement"] for r in routes), "")
    sizes = sorted(mpi2 or mpi1)
    lines = ["**%s** (%s as the interposer sees it), np %d, µs per MPI_Allreduce (int32 SUM), "
             "medians of %d rounds:" % (setting, place or "?", rows[0].get("np", 0), runs), "",
             "| bytes | Open MPI | Open MPI again | / MPI | ina forced | / MPI | routed (table) | "
             "/ MPI | path | routed (calibrated) | / MPI |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    worst = (0.0, None)
    for b in sizes:
        def cell(d, b=b):
            return "%.1f" % d[b] if b in d else "-"

        def ratio(d, ref, b=b):
            return "%.2f" % (d[b] / ref[b]) if b in d and b in ref and ref[b] > 0 else "-"
        path = route_path(table_route.split(": ", 1)[-1], b) if table_route else "-"
        if b in tab and b in mpi2 and tab[b] / mpi2[b] > worst[0]:
            worst = (tab[b] / mpi2[b], b)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            human(b), cell(mpi2), cell(mpi1), ratio(mpi1, mpi2), cell(ina), ratio(ina, mpi1),
            cell(tab), ratio(tab, mpi2), path, cell(cal), ratio(cal, mpi2)))
    lines.append("")
    if table_route:
        lines.append("- route from the table: %s" % table_route.split(": ", 1)[-1])
    for route, n in sorted(cal_routes.items(), key=lambda kv: -kv[1]):
        lines.append("- route calibrated at MPI_Init (%d of %d rounds): %s" % (
            n, sum(cal_routes.values()), route))
    if worst[1] is not None:
        lines.append("- worst routed (table) / Open MPI: %.2f at %s" % (worst[0], human(worst[1])))
    return lines


def cmd_report(a):
    rows = load(a.raw)
    settings = [s for s in ("onehost", "cluster") if any(r.get("setting") == s for r in rows)]
    md = ["Measured by `bench/mpi_route.sh` (load average at the end: %s). \"/ MPI\": the "
          "time over plain Open MPI's. \"Open MPI\" is phase 2's plain Open MPI, measured in "
          "the same rounds as the routed runs, which are compared with it; \"Open MPI again\" "
          "is phase 1's, measured with ina forced, which is compared with it. Their ratio is "
          "the noise of the machine: the same program, the same path, other rounds." % a.load,
          ""]
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
