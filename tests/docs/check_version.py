#!/usr/bin/python3
"""check_version.py: every place that states ina's version agrees with include/ina.h.

include/ina.h's INA_VERSION_MAJOR, _MINOR and _PATCH are the one source: CMake reads them
(project(VERSION)), so the built library's file name and SONAME, ina.pc and the CMake
package follow by construction, and this checks that they did. What cannot be generated is
checked against it: the Python package's VERSION, the man pages' headers, every name
libina.so.N[.N[.N]] and find_package(ina N.N) in the documents and the package, and the
"Since vM.m" notes of ina.h (none may name a version later than the header's: a new field
or function comes with the bump, include/ina.h "ABI").

  check_version.py --src SRC [--build BUILD]

Without --build only the sources are checked. Prints ok:/FAIL: lines; exits 1 on failure.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_docs  # noqa: E402 (beside this file: its ok:/FAIL: lines and counters)
from check_docs import check  # noqa: E402


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def header_version(src):
    text = read(os.path.join(src, "include/ina.h"))
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(r"^#define INA_VERSION_%s +(\d+)\s*$" % part, text, re.M)
        if not m:
            sys.exit("FAIL: include/ina.h has no '#define INA_VERSION_%s N' line" % part)
        parts.append(int(m.group(1)))
    return tuple(parts)


def soname_of(v):
    """docs/API.md#abi: libina.so.0.MINOR before 1.0, libina.so.MAJOR from 1.0."""
    return "libina.so.%d.%d" % v[:2] if v[0] == 0 else "libina.so.%d" % v[0]


def check_sources(src, v):
    ver = "%d.%d.%d" % v
    soname = soname_of(v)
    lib = read(os.path.join(src, "python/ina/_lib.py"))
    m = re.search(r'^VERSION = "([^"]*)"', lib, re.M)
    check("python/ina/_lib.py: VERSION = %s" % ver, m and m.group(1) == ver,
          m.group(0) if m else "no VERSION line")
    for page in sorted(glob.glob(os.path.join(src, "docs/man/*.[1-9]"))):
        m = re.search(r'^\.TH .*"ina ([^"]*)"', read(page), re.M)
        check("%s: .TH says ina %s" % (os.path.relpath(page, src), ver),
              m and m.group(1) == ver, m.group(0) if m else "no .TH line with \"ina VERSION\"")
    # Library names and find_package versions wherever a reader meets them.
    places = ["README.md"] + sorted(glob.glob(os.path.join(src, "docs/**/*.md"), recursive=True))
    places += sorted(glob.glob(os.path.join(src, "python/ina/*.py")))
    good_names = {soname, "libina.so.%s" % ver}
    for p in places:
        rel = os.path.relpath(p, src)
        text = read(os.path.join(src, p))
        wrong = []
        for n, line in enumerate(text.splitlines(), 1):
            for name in re.findall(r"libina\.so(?:\.\d+)+(?!\.?[A-Za-z])", line):
                if name not in good_names:
                    wrong.append("line %d: %s (this version: %s)" % (n, name, " or ".join(
                        sorted(good_names))))
            for want in re.findall(r"find_package\(ina (\d+(?:\.\d+)*)", line):
                if want != "%d.%d" % v[:2]:
                    wrong.append("line %d: find_package(ina %s) (this version: %d.%d)"
                                 % (n, want, v[0], v[1]))
        check("%s: library names and find_package versions are %s's" % (rel, ver), not wrong,
              "\n".join(wrong))
    later = sorted({s for s in re.findall(r"[Ss]ince v(\d+\.\d+)",
                                           read(os.path.join(src, "include/ina.h")))
                    if tuple(int(x) for x in s.split(".")) > v[:2]})
    check("include/ina.h: no \"Since v\" note later than %d.%d" % v[:2], not later,
          "later: %s (bump INA_VERSION_MINOR with the first new thing of a release)"
          % ", ".join(later))


def check_build(build, v):
    ver = "%d.%d.%d" % v
    soname = soname_of(v)
    so = os.path.join(build, "lib", "libina.so.%s" % ver)
    check("%s exists" % os.path.relpath(so, build), os.path.exists(so))
    if os.path.exists(so):
        out = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
        m = re.search(r"\(SONAME\).*\[([^\]]*)\]", out)
        check("its SONAME is %s" % soname, m and m.group(1) == soname,
              m.group(0) if m else out)
        link = os.path.join(build, "lib", "libina.so")
        check("lib/libina.so leads to it", os.path.realpath(link) == os.path.realpath(so),
              os.path.realpath(link))
    pc = os.path.join(build, "generated", "ina.pc.in")
    check("ina.pc: Version: %s" % ver,
          os.path.exists(pc) and re.search(r"^Version: %s$" % re.escape(ver), read(pc), re.M))
    cv = os.path.join(build, "generated", "inaConfigVersion.cmake")
    check("inaConfigVersion.cmake: PACKAGE_VERSION %s" % ver,
          os.path.exists(cv) and 'set(PACKAGE_VERSION "%s")' % ver in read(cv))
    for tool, want in (("ina-switch", "ina-switch %s " % ver),
                       ("ina-bench", "linked libina %s" % ver)):
        exe = os.path.join(build, "bin", tool)
        out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=30).stdout if os.path.exists(exe) else ""
        check("%s --version says %s" % (tool, ver), want in out, out or "%s missing" % exe)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    v = header_version(src)
    print("check_version: include/ina.h says %d.%d.%d" % v)
    check_sources(src, v)
    if a.build:
        check_build(os.path.abspath(a.build), v)
    print("check_version: %d passed, %d failed" % (check_docs.passed, check_docs.failed))
    return 1 if check_docs.failed else 0


if __name__ == "__main__":
    sys.exit(main())
