#!/usr/bin/python3
"""test_abi.py: the ctypes mirrors of python/ina/_lib.py against include/ina.h and libina.

  1. Every mirror (ina_config, ina_stats, ina_info) has the size of its C struct, and each
     field its C offset and size: a small C program, generated from the mirrors' field lists
     and compiled against include/ina.h, prints sizeof and offsetof. A field the header no
     longer has fails to compile, which is reported too.
  2. The library of this build says the same sizes (ina_config_size() ...), and the package
     loads it (check_abi()).
  3. A stale library is refused with a message that names it: two stand-in libraries are
     compiled, one without the size functions (a libina before 0.6), one whose ina_config is
     8 bytes larger (a libina whose struct grew); `import ina` on them must fail naming the
     path, the library's version and, for the second, the struct.

  test_abi.py --src SRC --build BUILD [--no-load]

--no-load skips step 2 (a sanitizer build, whose libina Python can only load with the ASan
runtime preloaded: tests/scripts/test_python.sh runs this file that way). INA_SANITIZE=ON in
the environment without LD_PRELOAD implies it. Prints ok:/FAIL: lines and exits 1 on failure.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

passed = failed = 0


def check(what, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok: " + what)
    else:
        failed += 1
        print("FAIL: " + what)
        for line in str(detail).rstrip().splitlines()[-30:]:
            print("    " + line)


def plain_env():
    """The environment for compilers and child interpreters: without the ASan runtime that
    test_python.sh may preload into this one (they run uninstrumented code)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def cc(args, what):
    r = subprocess.run(["cc"] + args, capture_output=True, text=True, env=plain_env())
    check(what, r.returncode == 0, r.stdout + r.stderr)
    return r.returncode == 0


def c_layout(src, tmp, mirrors):
    """{(struct, field or None): (offset, size)} from the C compiler: None is the whole
    struct (offset 0)."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "ina.h"', "int main(void)",
             "{"]
    for _, cls, cname in mirrors:
        lines.append('    printf("%s - 0 %%zu\\n", sizeof(%s));' % (cname, cname))
        for f in cls._fields_:
            lines.append('    printf("%s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (cname, f[0], cname, f[0], cname, f[0]))
    lines += ["    return 0;", "}"]
    c = os.path.join(tmp, "layout.c")
    exe = os.path.join(tmp, "layout")
    with open(c, "w") as f:
        f.write("\n".join(lines) + "\n")
    if not cc(["-std=gnu11", "-Wall", "-Werror", "-I", os.path.join(src, "include"), c, "-o",
               exe], "the layout probe compiles against include/ina.h (every mirrored field "
              "exists in C)"):
        return None
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    layout = {}
    for line in out.splitlines():
        struct, field, off, size = line.split()
        layout[(struct, None if field == "-" else field)] = (int(off), int(size))
    return layout


def check_mirrors(src, tmp, lib):
    layout = c_layout(src, tmp, lib.MIRRORS)
    if layout is None:
        return None
    for _, cls, cname in lib.MIRRORS:
        want = layout[(cname, None)][1]
        check("%s: the mirror is %d bytes, as in C" % (cname, want), ctypes.sizeof(cls) == want,
              "ctypes: %d bytes, C: %d (python/ina/_lib.py is stale: mirror include/ina.h)"
              % (ctypes.sizeof(cls), want))
        wrong = []
        for f in cls._fields_:
            d = getattr(cls, f[0])
            c_off, c_size = layout[(cname, f[0])]
            if (d.offset, d.size) != (c_off, c_size):
                wrong.append("%s: offset %d size %d in ctypes, offset %d size %d in C"
                             % (f[0], d.offset, d.size, c_off, c_size))
        check("%s: each of its %d fields has its C offset and size" % (cname, len(cls._fields_)),
              not wrong, "\n".join(wrong))
    return layout


def check_library(build, lib, layout):
    path = os.path.join(build, "lib", "libina.so")
    handle = ctypes.CDLL(path)
    for fn, _, cname in lib.MIRRORS:
        f = getattr(handle, fn)
        f.restype, f.argtypes = ctypes.c_size_t, []
        check("%s() of %s says %s's size in ina.h" % (fn, path, cname),
              layout is None or f() == layout[(cname, None)][1],
              "library: %d, header: %d" % (f(), layout[(cname, None)][1]))
    try:
        lib.check_abi(handle, path)
        check("the package accepts this build's libina", True)
    except OSError as e:
        check("the package accepts this build's libina", False, e)


STUB_OLD = r'''
const char *ina_version_string(void) { return "0.5.0"; }
unsigned ina_version_number(void) { return 500; }
'''
STUB_GROWN = r'''
#include <stddef.h>
#include "ina.h"
const char *ina_version_string(void) { return "0.7.0"; }
unsigned ina_version_number(void) { return 700; }
size_t ina_config_size(void) { return sizeof(ina_config) + 8; }
size_t ina_stats_size(void) { return sizeof(ina_stats); }
size_t ina_info_size(void) { return sizeof(ina_info); }
'''


def check_stale(src, tmp):
    pkg = os.path.join(src, "python")
    for name, code, want in (
            ("old", STUB_OLD, ["libina 0.5.0", "ina_config_size() is new in 0.6"]),
            ("grown", STUB_GROWN, ["libina 0.7.0", "ina_config is"])):
        c = os.path.join(tmp, "stub_%s.c" % name)
        so = os.path.join(tmp, "libina_%s.so" % name)
        with open(c, "w") as f:
            f.write(code)
        if not cc(["-shared", "-fPIC", "-I", os.path.join(src, "include"), c, "-o", so],
                  "the stand-in %s library compiles" % name):
            continue
        env = plain_env()
        env["INA_LIBRARY"] = so
        r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, %r); import ina; "
                            "print(ina.strerror(0))" % pkg], capture_output=True, text=True,
                           env=env, timeout=60)
        err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        check("the %s libina is refused, the error names it (%s)" % (name, ", ".join(want)),
              r.returncode != 0 and err.startswith("OSError: ina: " + so) and
              all(w in err for w in want), "exit status %d\n%s%s" % (r.returncode, r.stdout,
                                                                     r.stderr))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--no-load", action="store_true")
    a = ap.parse_args()
    src, build = os.path.abspath(a.src), os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(src, "python"))
    from ina import _lib as lib  # noqa: E402 (the package under test, not an installed one)

    no_load = a.no_load or (os.environ.get("INA_SANITIZE") == "ON" and
                            not os.environ.get("LD_PRELOAD"))
    with tempfile.TemporaryDirectory(prefix="ina-abi.") as tmp:
        layout = check_mirrors(src, tmp, lib)
        if no_load:
            print("note: not loading %s/lib/libina.so (--no-load, or a sanitizer build: "
                  "script_test_python loads it with the ASan runtime)" % build)
        else:
            check_library(build, lib, layout)
        check_stale(src, tmp)
    print("test_abi: %d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
