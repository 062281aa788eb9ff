#!/usr/bin/python3
"""dtype_report.py: the section "By dtype" of bench/compare.sh --dtype LIST: for each setting,
N and size, every system's time per dtype, each beside its ideal (the bytes per rank at the
link rate: S x 8 / B, cluster only), and the ratios: a dtype's time against the first dtype's
at the same element count, and ina against OpenMPI and Gloo on the same bytes and dtype (for
bfloat16 where Gloo has none: against Gloo's float16 ring, the same bytes, marked).

Usage: dtype_report.py --raw RUN/raw.jsonl --rate 1gbit --dtypes float32,bfloat16,float16
Prints markdown on stdout.
"""
import argparse
import json

PEERS = ("openmpi-tcp", "gloo")


def parse_rate(r):
    units = {"g": 1e9, "m": 1e6, "k": 1e3}
    r = r.lower().replace("bit", "")
    return float(r[:-1]) * units[r[-1]] if r and r[-1] in units else float(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--dtypes", required=True)
    a = ap.parse_args()
    rate = parse_rate(a.rate)
    dtypes = a.dtypes.split(",")
    recs = []
    with open(a.raw) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if "kind" not in r and "time_s" in r and r.get("part", "main") == "main":
                    recs.append(r)
    by = {(r["setting"], r["workers"], r["label"], r.get("dtype", dtypes[0]), r["count"]): r
          for r in recs}
    out = ["## By dtype", "",
           "Median ms per all-reduce, every result verified (FAIL: not); ideal = bytes per "
           "rank x 8 / link rate (cluster). \"vs %s\": time over the %s time of the same "
           "element count. ina/peer: the same bytes and dtype (gloo bfloat16 missing: its "
           "float16 ring, marked *)." % (dtypes[0], dtypes[0]), ""]
    head = ["setting", "N", "system", "dtype", "elements", "bytes", "ms", "ideal ms",
            "x ideal", "vs %s" % dtypes[0], "ina/OpenMPI", "ina/Gloo"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    keys = sorted({(k[0], k[1], k[2]) for k in by})
    for setting, n, label in keys:
        for dt in dtypes:
            for count in sorted({k[4] for k in by if k[:4] == (setting, n, label, dt)}):
                r = by[(setting, n, label, dt, count)]
                ms = r["time_s"] * 1e3
                ideal = r["bytes"] * 8 / rate * 1e3 if setting == "cluster" else None
                base = by.get((setting, n, label, dtypes[0], count))
                cells = [setting, str(n), label, dt, str(count), str(r["bytes"]),
                         "%.2f%s" % (ms, "" if r.get("ok") else " FAIL"),
                         "%.2f" % ideal if ideal else "-",
                         "%.2f" % (ms / ideal) if ideal else "-",
                         "%.2f" % (r["time_s"] / base["time_s"]) if base and dt != dtypes[0]
                         else "-"]
                for peer in PEERS:
                    p = by.get((setting, n, peer, dt, count))
                    mark = ""
                    if p is None and peer == "gloo" and dt == "bfloat16":
                        p = by.get((setting, n, peer, "float16", count))
                        mark = "*"
                    if label.startswith("ina") and p:
                        cells.append("%.2f%s" % (r["time_s"] / p["time_s"], mark))
                    else:
                        cells.append("-")
                out.append("| " + " | ".join(cells) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
