#!/usr/bin/env python3
"""check_man.py: every option a tool's --help lists appears in its man page.

    tests/docs/check_man.py --src SRC --build BUILD

For each docs/man/NAME.1 whose tool BUILD/bin/NAME exists, every long option in
`NAME --help` must occur in the page (as roff writes it: \\-\\-name). The other way round
(options the docs name exist in --help) is check_docs.py's. The pages of ina-ps, ina-sched,
ina-mlf and ina-glm take their OPTIONS section from --help: scripts/man_options.py rewrites
it after a change to a tool's options.
"""
import argparse
import glob
import os
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    failed = checked = 0
    for page in sorted(glob.glob(os.path.join(a.src, "docs", "man", "*.1"))):
        name = os.path.basename(page)[:-2]
        tool = os.path.join(a.build, "bin", name)
        if not os.access(tool, os.X_OK):
            continue
        out = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=30)
        opts = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.stdout + out.stderr))
        text = open(page).read().replace("\\-", "-")
        missing = sorted(o for o in opts if not re.search(re.escape(o) + r"(?![a-z0-9-])", text))
        checked += 1
        if missing:
            failed += 1
            print("FAIL: docs/man/%s.1 lacks options of `%s --help`: %s (regenerate with "
                  "scripts/man_options.py where the page takes its options from --help)"
                  % (name, name, " ".join(missing)))
        else:
            print("ok: docs/man/%s.1 names every option of `%s --help` (%d)" % (name, name, len(opts)))
    if checked == 0:
        print("FAIL: no tool of docs/man/*.1 was built in %s" % a.build)
        return 1
    print("check_man: %d pages, %d failed" % (checked, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
