#!/usr/bin/python3
"""check_install.py: docs/INSTALL.md's "What is installed" names everything `make install`
installs.

The list is the code block under "## What is installed": one path per line under
`$PREFIX/`, relative to the prefix, then a comment. A path ending in "/" stands for the
files under it; a path with "*" is a pattern (fnmatch). `lib` stands for CMake's
CMAKE_INSTALL_LIBDIR, whatever the build chose (INSTALL.md says so).

The truth is what the build installs: `cmake --install BUILD --prefix SCRATCH/prefix`, its
files walked. Every file installed (binaries, libraries and their links, man pages, the
systemd unit, the Python package's files, the CMake and pkg-config files) must match a
line, else the check fails naming it. (The other direction is not checked: some lines
are conditional, e.g. libina-mpi.so only where MPI was found.) The build's
install_manifest.txt, which `make uninstall` reads, is kept as it was.

  check_install.py --src SRC --build BUILD [--scratch DIR]

Prints ok:/FAIL: lines and exits 1 on failure. tests/docs/check_docs.py runs the same check.
"""
import argparse
import contextlib
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOC = "docs/INSTALL.md"
SECTION = "What is installed"


def listed(src):
    """The paths of INSTALL.md's list (relative to the prefix)."""
    with open(os.path.join(src, DOC), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## %s\n(.*?)^## " % re.escape(SECTION), text, re.S | re.M)
    if not m:
        return None
    block = re.search(r"^```[a-z]*\n(.*?)^```", m.group(1), re.S | re.M)
    if not block:
        return None
    paths = []
    for line in block.group(1).splitlines():
        if line.startswith("  ") and line.strip():
            paths.append(line.split()[0])
    return paths


def cache_value(build, key):
    """KEY's value in BUILD's CMakeCache.txt, or None."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            m = re.search(r"^%s:[A-Z]*=(.*)$" % re.escape(key), f.read(), re.M)
            return m.group(1) if m else None
    except OSError:
        return None


@contextlib.contextmanager
def manifest_kept(build):
    """cmake --install records what it installed in the build's install_manifest.txt, which
    `make uninstall` reads: put the user's back (or none, if there was none) afterwards."""
    manifest = os.path.join(build, "install_manifest.txt")
    saved = open(manifest, "rb").read() if os.path.exists(manifest) else None
    try:
        yield
    finally:
        if saved is None:
            if os.path.exists(manifest):
                os.remove(manifest)
        else:
            with open(manifest, "wb") as f:
                f.write(saved)


def installed(build, prefix):
    """(files relative to prefix, error text or None) of `cmake --install BUILD`."""
    with manifest_kept(build):
        r = subprocess.run(["cmake", "--install", build, "--prefix", prefix],
                           capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return [], "cmake --install failed:\n" + r.stdout[-2000:] + r.stderr[-2000:]
    files = []
    for root, _, names in os.walk(prefix):
        for n in names:
            files.append(os.path.relpath(os.path.join(root, n), prefix))
    return sorted(files), None


def matches(path, entries):
    for e in entries:
        if e.endswith("/"):
            if path.startswith(e):
                return True
        elif "*" in e or "?" in e:
            if fnmatch.fnmatchcase(path, e):
                return True
        elif path == e:
            return True
    return False


def check_install_list(src, build, scratch):
    """@return the problems (strings); empty if INSTALL.md's list is complete."""
    entries = listed(src)
    if not entries:
        return ["%s has no code block under '## %s'" % (DOC, SECTION)]
    os.makedirs(scratch, exist_ok=True)
    prefix = tempfile.mkdtemp(prefix="install-list-", dir=scratch)
    try:
        files, err = installed(build, prefix)
        if err:
            return [err]
        if not files:
            return ["cmake --install installed nothing"]
        libdir = cache_value(build, "CMAKE_INSTALL_LIBDIR") or "lib"
        probs = []
        for f in files:
            norm = "lib/" + f[len(libdir) + 1:] if libdir != "lib" and \
                f.startswith(libdir + "/") else f
            if not matches(norm, entries):
                probs.append("installed but not in %s's list: %s" % (DOC, f))
        return probs
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", default=None)
    a = ap.parse_args()
    scratch = a.scratch or tempfile.mkdtemp(prefix="check-install-")
    probs = check_install_list(os.path.abspath(a.src), os.path.abspath(a.build), scratch)
    if a.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)
    if probs:
        print("FAIL: %s lists everything make install installs\n%s" % (DOC, "\n".join(probs)))
        print("check_install: 0 passed, 1 failed")
        return 1
    print("ok: %s lists everything make install installs" % DOC)
    print("check_install: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
