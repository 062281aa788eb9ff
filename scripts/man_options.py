#!/usr/bin/env python3
"""man_options.py: write the OPTIONS section of a man page from a tool's --help.

    scripts/man_options.py BINARY MANPAGE

The man pages of ina-ps, ina-sched, ina-mlf and ina-glm keep their OPTIONS section as the
tool's --help says it, so that the two cannot drift apart: this rewrites the lines between
".SH OPTIONS" and the next ".SH" from the option lines of `BINARY --help` (lines that start
with two spaces and a dash; the indented lines below one continue it). The docs test checks
the other way round for every man page: each option of --help appears in its page.
"""
import re
import subprocess
import sys


def roff(text):
    return text.replace("\\", "\\e").replace("-", "\\-")


def options(help_text):
    """[(option words, description)] from the option lines of --help, and (None, heading)
    for a heading of a group of options (an unindented line ending with ':' just above
    an option line)."""
    out, heading, cont = [], None, False
    for line in help_text.splitlines():
        m = re.match(r"^  (-[^ ].*?)(?:\s{2,}(.*))?$", line)
        if m and not line.startswith("   "):
            if heading and heading not in ("Options", "options"):
                out.append([None, heading])
            heading = None
            out.append([m.group(1).strip(), (m.group(2) or "").strip()])
            cont = True
        elif cont and line.startswith("   ") and line.strip():
            out[-1][1] = (out[-1][1] + " " + line.strip()).strip()
        else:
            cont = False
            heading = line[:-1] if re.match(r"^[A-Za-z].*:$", line) else None
    return out


def entry(words, desc):
    if words is None:
        return ".SS \"" + roff(desc) + "\"\n"
    # "--listen ADDR[:PORT]" -> bold option, italic argument
    parts = words.split(" ", 1)
    head = "\\fB" + roff(parts[0]) + "\\fR"
    if len(parts) > 1:
        head += " \\fI" + roff(parts[1]) + "\\fR"
    return ".TP\n" + head + "\n" + roff(desc) + "\n"


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print("usage: scripts/man_options.py BINARY MANPAGE\n" + __doc__.strip().split("\n\n")[0])
        sys.exit(0 if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help") else 2)
    binary, page = sys.argv[1], sys.argv[2]
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    opts = options(help_text)
    if not opts:
        sys.exit("man_options: no options in %s --help" % binary)
    src = open(page).read()
    start = src.index(".SH OPTIONS\n") + len(".SH OPTIONS\n")
    end = src.index("\n.SH ", start) + 1
    body = "".join(entry(w, d) for w, d in opts)
    open(page, "w").write(src[:start] + body + src[end:])


if __name__ == "__main__":
    main()
