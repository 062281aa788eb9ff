#!/usr/bin/python3
"""check-layers.py: the architecture's arrows run one way (issue 31; docs/README.md's map).

  (a) a room includes only its own headers and those of the rooms below it (ROOMS): the
      order is common < engine < the switch daemon and libina; common < ina-ps; common <
      ina-sched. The library (src/lib) includes of the engine only its one public header
      (src/engine/engine.h), and no daemon's; a room's internal.h is its own (private);
  (b) the #include graph within each directory (a room) has no cycle;
  (c) the link graph within each room has no cycle: file A depends on file B when A's
      object file leaves undefined a global symbol (a function or a variable) that B's
      defines, read with nm from the object files of the build (TARGETS below);
  (d) across rooms, the link graph runs the same way as (a): a room's objects use only
      symbols of the rooms below it.

Today's violations are listed, with why, in scripts/layers-allowlist.txt. The check fails
on a violation that is not listed, and on a listed one that no longer occurs exactly as
written: a cycle that shrank must be rewritten as its smaller self, a fixed one deleted.
So the list only shrinks as the refactor lands.

  check-layers.py --src SRC --build BUILD [--allowlist FILE]

Without the build's object files, (c) is skipped with a note. Prints each cycle with the
edges that close it (and one symbol per call edge), ok:/FAIL: lines; exits 1 on failure.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
from collections import defaultdict

# (a), (d): the rooms and, for each, what lies below it: the rooms (directories) it may use,
# or of a room only named files (its public header), relative to the source tree. Every room
# may use its own files and include/ (the public API). A room not named here is not checked;
# a new room gets a line, and the rooms that may use it name it. The arrows (docs/DESIGN.md,
# "Architecture"):
#
#   src/common <- src/engine <- src/switch (the daemon; src/switch/ebpf, its eBPF dataplane)
#                            <- src/lib (libina: its host aggregator runs the engine)
#   src/common <- src/ps;  src/common <- src/sched;  include/ina.h <- src/mpi
ROOMS = {
    "src/common": (),
    "src/engine": ("src/common",),
    "src/switch/ebpf": ("src/engine", "src/common"),
    "src/switch": ("src/switch/ebpf", "src/engine", "src/common"),
    "src/lib": ("src/engine/engine.h", "src/common"),
    "src/ps": ("src/common",),
    "src/sched": ("src/common",),
    "src/mpi": (),
}
PUBLIC = "include"
PRIVATE_HEADER = "internal.h"  # a room's private header: no other room includes it
# Where the sources are (b); include paths as CMake gives them (INA_INTERNAL_INCLUDES).
SOURCE_DIRS = ("src", "tools", "apps", "include")
INCLUDE_PATH = ("include", "src", "tests")
# (c): CMake targets whose object files make the link graph (a source compiled into several
# is read once).
TARGETS = ("ina_common", "ina_engine", "ina_obj", "ina-switch", "ina_trace", "ina_ebpf",
           "ina_ps_core", "ina-ps", "ina_sched_core", "ina-sched")
DEFAULT_ALLOWLIST = "scripts/layers-allowlist.txt"


def sources(src):
    out = []
    for top in SOURCE_DIRS:
        for d, dirs, files in os.walk(os.path.join(src, top)):
            dirs.sort()
            out += [os.path.relpath(os.path.join(d, f), src) for f in sorted(files)
                    if f.endswith((".c", ".h"))]
    return out


def room_of(path):
    return os.path.dirname(path)


def room_in_order(path):
    """The room of ROOMS that holds path (the longest that does), or None."""
    return next((r for r in sorted(ROOMS, key=len, reverse=True)
                 if path.startswith(r + "/")), None)


def within(path, entry):
    """path is the file entry, or lies in the room (directory) entry."""
    return path == entry or path.startswith(entry + "/")


def may_include(room, header):
    """(a): room's files may include header: their own room's, the public API, or what ROOMS
    puts below the room; never another room's internal.h."""
    own = room_in_order(header) == room
    if os.path.basename(header) == PRIVATE_HEADER and not own:
        return False
    return own or within(header, PUBLIC) or any(within(header, e) for e in ROOMS[room])


def may_use(room, other):
    """(d): objects of room may use symbols defined in room other (a file entry of ROOMS
    stands for its room here: a header's functions are defined beside it)."""
    return other == room or any(within(other, e) or room_of(e) == other and e.endswith(".h")
                                for e in ROOMS[room])


def includes(src, path):
    """The files of the tree that path #includes "..." (resolved as the compiler would:
    its own directory first, then the include path); others (system, generated) left out."""
    found = []
    with open(os.path.join(src, path), encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            for base in (os.path.dirname(path),) + INCLUDE_PATH:
                cand = os.path.normpath(os.path.join(base, m.group(1)))
                if os.path.isfile(os.path.join(src, cand)):
                    found.append(cand)
                    break
    return found


def sccs(nodes, edges):
    """Strongly connected components with a cycle (2+ nodes, or a self-edge), Tarjan's."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # Iterative: rooms are small, but recursion limits are not worth trusting.
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in edges.get(node, ()):
                        out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def one_cycle(comp, edges):
    """A shortest cycle through the component's first node, as a list of nodes."""
    start, members = comp[0], set(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def describe(kind, room, comp, edges, why):
    """Readable lines for one cycle: a shortest loop, then every edge inside it."""
    short = lambda p: os.path.relpath(p, room) if room else p  # noqa: E731
    lines = ["%s cycle in %s/ (%d files): %s" % (kind, room, len(comp),
                                                  " -> ".join(short(p) for p in
                                                              one_cycle(comp, edges)))]
    members = set(comp)
    for a in comp:
        outs = [b for b in sorted(edges.get(a, ())) if b in members]
        if outs:
            lines.append("    %s -> %s" % (short(a), ", ".join(
                short(b) + (" (%s)" % why[(a, b)] if (a, b) in why else "") for b in outs)))
    return lines


# ---- (c) the link graph from nm --------------------------------------------------------------


def objects(src, build):
    """{source path: object file} of TARGETS, the first target that compiles a source; an
    object whose source is gone (a file moved since that build) is left out."""
    out = {}
    for t in TARGETS:
        d = os.path.join(build, "CMakeFiles", t + ".dir")
        for o in sorted(glob.glob(os.path.join(d, "**", "*.o"), recursive=True)):
            rel = os.path.normpath(os.path.relpath(o, d)[:-2])  # src/lib/ctx.c
            if rel.endswith(".c") and os.path.isfile(os.path.join(src, rel)):
                out.setdefault(rel, o)
    return out


def link_graph(objs):
    """(edges {a: {b}}, why {(a, b): 'symbol, +n'}) from nm's defined and undefined globals:
    a uses a symbol that b defines (a and b in any rooms)."""
    defined, undefined = {}, defaultdict(set)
    for path, o in objs.items():
        r = subprocess.run(["nm", "-P", o], capture_output=True, text=True, check=True)
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            name, typ = parts[0], parts[1]
            if typ == "U":
                undefined[path].add(name)
            elif typ.isupper():
                defined.setdefault(name, path)
    edges, why = defaultdict(set), {}
    for a, names in undefined.items():
        by = defaultdict(list)
        for n in names:
            b = defined.get(n)
            if b and b != a:
                by[b].append(n)
        for b, ns in by.items():
            edges[a].add(b)
            ns.sort()
            why[(a, b)] = ns[0] + (", +%d" % (len(ns) - 1) if len(ns) > 1 else "")
    return edges, why


# ---- the allowlist -----------------------------------------------------------------------------


def read_allowlist(path):
    """Entries: ('include', 'FILE -> HEADER') or ('include-cycle'|'link-cycle', 'ROOM: f g')
    with their line numbers. '#' starts a comment."""
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            kind, _, rest = line.partition(" ")
            rest = " ".join(rest.split())
            if kind == "include":
                a, sep, b = rest.partition(" -> ")
                if not sep:
                    sys.exit("%s:%d: want 'include FILE -> HEADER'" % (path, n))
                entries.append((n, kind, (a.strip(), b.strip())))
            elif kind in ("include-cycle", "link-cycle"):
                room, sep, files = rest.partition(":")
                if not sep or not files.split():
                    sys.exit("%s:%d: want '%s ROOM: FILE FILE ...'" % (path, n, kind))
                room = room.strip().rstrip("/")
                entries.append((n, kind, (room, tuple(sorted(os.path.normpath(
                    os.path.join(room, x)) for x in files.split())))))
            else:
                sys.exit("%s:%d: unknown kind %r (include, include-cycle, link-cycle)"
                         % (path, n, kind))
    return entries


def allowlist_line(kind, room, comp):
    return "%s %s: %s" % (kind, room, " ".join(os.path.relpath(p, room) for p in comp))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build")
    ap.add_argument("--allowlist")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    allow = read_allowlist(a.allowlist or os.path.join(src, DEFAULT_ALLOWLIST))
    used = set()
    failed = 0

    def allowed(kind, key):
        for n, k, v in allow:
            if k == kind and v == key:
                used.add(n)
                return n
        return None

    def shrunk(kind, room, comp):
        """An allowed cycle of which comp is a strict part: (line, entry) or None."""
        for n, k, (r, files) in ((n, k, v) for n, k, v in allow if k == kind):
            if r == room and set(comp) < set(files):
                return n
        return None

    files = sources(src)
    inc = {f: includes(src, f) for f in files}

    # (a) includes across rooms
    bad = []
    for f in files:
        room = room_in_order(f)
        if room is None:
            continue
        for h in inc[f]:
            if not may_include(room, h):
                n = allowed("include", (f, h))
                print("%s: %s includes %s%s" % ("allowed" if n else "FAIL", f, h,
                                                " (allowlist line %d)" % n if n else ""))
                if not n:
                    bad.append((f, h))
    failed += bool(bad)
    print("%s: (a) every room includes only the rooms below it (%d files checked)"
          % ("FAIL" if bad else "ok", len(files)))

    # (b) include cycles within a room, (c) link cycles within a room
    graphs = []
    by_room = defaultdict(set)
    for f in files:
        by_room[room_of(f)].add(f)
    inc_edges = {f: {h for h in inc[f] if room_of(h) == room_of(f)} for f in files}
    graphs.append(("include-cycle", "(b) the #include graph of every room has no cycle",
                   by_room, inc_edges, {}))
    objs = objects(src, os.path.abspath(a.build)) if a.build else {}
    if objs:
        edges, why = link_graph(objs)
        obj_rooms = defaultdict(set)
        for p in objs:
            obj_rooms[room_of(p)].add(p)
        graphs.append(("link-cycle", "(c) the link graph of every room has no cycle "
                       "(%d object files of %s)" % (len(objs), ", ".join(TARGETS)),
                       obj_rooms, edges, why))
    else:
        print("note: (c) skipped: no object files of %s%s (build first)"
              % (", ".join(TARGETS), " under %s/CMakeFiles" % a.build if a.build else ""))
        used.update(n for n, k, _ in allow if k == "link-cycle")

    for kind, title, rooms, edges, why in graphs:
        new = 0
        for room in sorted(rooms):
            sub = {v: edges.get(v, set()) & rooms[room] for v in rooms[room]}
            for comp in sccs(rooms[room], sub):
                n = allowed(kind, (room, tuple(comp)))
                lines = describe(kind.split("-")[0], room, comp, sub, why)
                if n:
                    print("allowed (allowlist line %d): %s" % (n, lines[0]))
                    for line in lines[1:]:
                        print(line)
                    continue
                new += 1
                s = shrunk(kind, room, comp)
                print("FAIL: " + lines[0])
                for line in lines[1:]:
                    print(line)
                if s:
                    used.add(s)
                    print("    it is part of the cycle of allowlist line %d, which no longer "
                          "occurs as written: replace that line with\n    %s"
                          % (s, allowlist_line(kind, room, comp)))
        failed += bool(new)
        print("%s: %s" % ("FAIL" if new else "ok", title))

    # (d) calls across rooms
    if objs:
        bad = []
        for a in sorted(edges):
            ra = room_in_order(a)
            for b in sorted(edges[a]):
                rb = room_in_order(b)
                if ra and rb and not may_use(ra, rb):
                    bad.append(b)
                    print("FAIL: %s uses %s of %s, a room not below %s/" % (a, why[(a, b)], b, ra))
        failed += bool(bad)
        print("%s: (d) every room's objects use only the rooms below it" % ("FAIL" if bad else "ok"))

    stale = [(n, k, v) for n, k, v in allow if n not in used]
    for n, k, v in stale:
        what = "%s -> %s" % v if k == "include" else "%s: %s" % (v[0], " ".join(
            os.path.relpath(p, v[0]) for p in v[1]))
        print("FAIL: allowlist line %d (%s %s) no longer occurs: delete it (or write it as it "
              "now is)" % (n, k, what))
    failed += bool(stale)
    print("%s: every allowlist entry is still a violation (%d entries)"
          % ("FAIL" if stale else "ok", len(allow)))
    print("check-layers: %s" % ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
