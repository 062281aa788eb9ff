#!/usr/bin/python3
"""check_map.py: docs/README.md's map of the sources and its table of documents are true.

The map ("## Source layout" in docs/README.md) has one heading per directory (a "room"),
`### \`src/lib/\`: what the room is`, each followed by a table whose rows name that
directory's files, `| \`ctx.c\` | what the file does |`. A row whose name ends in "/" names
a directory (tests/, bench/...: no file list needed). The map must:

  - name every source file: *.c and *.h under src/, tools/, apps/ and include/, *.py under
    apps/ and python/ina/ (SCOPE below), each exactly once, under its own directory;
  - name only files and directories that exist, with a purpose for each;
  - have a room for every directory that holds such a file.

Nothing here names a file or a room: the map follows the tree, so moving a file (say, the
switch's state machine to src/engine/) fails this check until the map says where it went.

The table of documents at the top of docs/README.md, and the one under "## Documentation"
in README.md, must list every docs/*.md (docs/README.md's own table: all but itself).

  check_map.py --src SRC

Prints ok:/FAIL: lines and exits 1 on failure. tests/docs/check_docs.py runs the same checks.
"""
import argparse
import fnmatch
import os
import re
import sys

# Where the sources are, and which files are sources: (directory, patterns), recursive.
SCOPE = (("src", ("*.c", "*.h")),
         ("tools", ("*.c", "*.h")),
         ("apps", ("*.c", "*.h", "*.py")),
         ("include", ("*.h",)),
         ("python/ina", ("*.py",)))
MAP_DOC = "docs/README.md"
MAP_SECTION = "Source layout"


def source_files(src):
    """Every source file in SCOPE, as a path relative to src."""
    found = set()
    for top, patterns in SCOPE:
        for d, dirs, files in os.walk(os.path.join(src, top)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                if any(fnmatch.fnmatch(f, p) for p in patterns):
                    found.add(os.path.relpath(os.path.join(d, f), src))
    return found


def section(text, title):
    """(first line number, lines) of the "## title" section, up to the next "## "."""
    lines = text.split("\n")
    start = None
    for i, line in enumerate(lines):
        if start is None and re.match(r"^##\s+%s\s*$" % re.escape(title), line):
            start = i + 1
        elif start is not None and re.match(r"^##\s", line):
            return start + 1, lines[start:i]
    return (start + 1, lines[start:]) if start is not None else (0, [])


def read_map(src):
    """The map: ({room: (line, purpose)}, {path: (line, purpose)}, problems)."""
    with open(os.path.join(src, MAP_DOC), encoding="utf-8") as f:
        first, lines = section(f.read(), MAP_SECTION)
    rooms, entries, probs = {}, {}, []
    if not lines:
        return rooms, entries, ["%s has no \"## %s\" section" % (MAP_DOC, MAP_SECTION)]
    room = None
    for n, line in enumerate(lines, first):
        m = re.match(r"^###\s+`([^`]+)`\s*[:\u2014-]?\s*(.*)$", line)
        if m:
            room = m.group(1).rstrip("/") + "/"
            if room in rooms:
                probs.append("line %d: room %s named twice" % (n, room))
            rooms[room] = (n, m.group(2).strip())
            continue
        m = re.match(r"^\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|\s*$", line)
        if not m:
            continue
        if room is None:
            probs.append("line %d: `%s` before any room heading" % (n, m.group(1)))
            continue
        path = os.path.normpath(room + m.group(1)) + ("/" if m.group(1).endswith("/") else "")
        if path in entries:
            probs.append("line %d: %s named twice (also line %d)" % (n, path, entries[path][0]))
        entries[path] = (n, m.group(2))
    return rooms, entries, probs


def check_source_map(src):
    """@return a list of problems with the map (empty: it is true)."""
    rooms, entries, probs = read_map(src)
    files = source_files(src)
    for room, (n, purpose) in sorted(rooms.items()):
        if not os.path.isdir(os.path.join(src, room)):
            probs.append("line %d: room %s does not exist" % (n, room))
        if not purpose:
            probs.append("line %d: room %s has no purpose after its name" % (n, room))
    for path, (n, purpose) in sorted(entries.items()):
        full = os.path.join(src, path)
        if path.endswith("/") and not os.path.isdir(full):
            probs.append("line %d: directory %s does not exist" % (n, path))
        elif not path.endswith("/") and not os.path.isfile(full):
            probs.append("line %d: %s does not exist" % (n, path))
        if not purpose:
            probs.append("line %d: %s has no purpose" % (n, path))
    for f in sorted(files - set(entries)):
        probs.append("%s is not in the map (add a row under its room, %s/)"
                     % (f, os.path.dirname(f)))
    for d in sorted({os.path.dirname(f) + "/" for f in files} - set(rooms)):
        probs.append("directory %s holds sources but has no room heading" % d)
    return probs


def check_documents(src):
    """@return problems: docs/*.md missing from the two tables of documents."""
    probs = []
    docs = sorted(f for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
    for doc, title, prefix, skip in ((MAP_DOC, None, "", "README.md"),
                                     ("README.md", "Documentation", "docs/", None)):
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            text = f.read()
        if title:
            _, lines = section(text, title)
        else:  # the first table of the document
            lines = text.split("\n")
            start = next((i for i, l in enumerate(lines) if l.startswith("|")), len(lines))
            end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")),
                       len(lines))
            lines = lines[start:end]
        listed = set(re.findall(r"^\|\s*\[[^\]]*\]\(([^)#]+)", "\n".join(lines), re.M))
        for d in docs:
            if d != skip and prefix + d not in listed:
                probs.append("%s: its table of documents does not list %s%s" % (doc, prefix, d))
    return probs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    src = os.path.abspath(ap.parse_args().src)
    failed = 0
    for what, probs in (("%s's source map names every source file, and only those" % MAP_DOC,
                         check_source_map(src)),
                        ("the tables of documents list every docs/*.md", check_documents(src))):
        print(("ok: " if not probs else "FAIL: ") + what)
        for p in probs:
            print("    " + p)
        failed += bool(probs)
    print("check_map: %d passed, %d failed" % (2 - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
