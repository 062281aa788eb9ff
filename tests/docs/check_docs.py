#!/usr/bin/python3
"""check_docs.py: the documentation must agree with the code. Checks README.md, every
docs/**/*.md and the man pages' examples (docs/man/*.N), found anew on every run, so a new
document is checked without editing this file. docs/README.md ("Code blocks in the docs")
states the conventions for authors; in short:

  ```c          compiled (-std=c11 -Wall -Wextra -Werror, with include/); a block with main()
                is also linked with libina and run as a one-rank job against an ina-switch
  ```python     compiled (syntax)
  ```sh         bash -n; with `run` (```sh run) executed as written, in order with the other
                run blocks of the same document, in a directory that looks like a clone of
                the repository after `make` (build/ is the build under test), with $HOME a
                scratch home where ina is installed under $HOME/.local, in private network
                and PID namespaces (127.0.0.1:48864 and any leftover process are private)
  ```text output  every line (but "...") must appear in the output of the run block before
                it, hex runs of 8 digits and more matched as any
  file=NAME     (on a c, python or sh block) also written to NAME in that directory
  nocompile     (c, python, sh) do not compile this block (say why in the text)
  nosanitizer   (on a run block) not run in a sanitizer build (say why in the text)

In every block and in `inline code` of the prose: options given to the tools of TOOLS below
(ina-switch, ina-bench, ina-ctl, bench/compare.sh, ...) must appear in that tool's --help;
paths into the tree (build/..., docs/..., tests/...) must exist; `make TARGET` must be a
Makefile target; INA_* names must occur in the sources. Markdown links to files must resolve, with their #anchors. Every log
event ina-switch emits must be documented. docs/README.md's source map and the tables of
documents must be complete (check_map.py), and so must docs/INSTALL.md's list of what
`make install` installs (check_install.py: the build is installed into a scratch prefix).

  check_docs.py --src SRC --build BUILD [--scratch DIR] [--no-run]

Prints "ok: ..." / "FAIL: ..." lines like the script tests, and exits 1 if any check
failed, 77 if everything but the run blocks passed and they could not be run (no namespaces).
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_install  # noqa: E402 (beside this file)
import check_map  # noqa: E402

TOOLS = {  # command word (basename) -> how to get its --help, relative to src or build
    "ina-switch": ("build", "bin/ina-switch"),
    "ina-bench": ("build", "bin/ina-bench"),
    "ina-ctl": ("build", "bin/ina-ctl"),
    "compare.sh": ("src", "bench/compare.sh"),
    "ina-glm": ("build", "bin/ina-glm"),
    "glm.sh": ("src", "bench/glm.sh"),
    "device.sh": ("src", "bench/device.sh"),
    "mpi_route.sh": ("src", "bench/mpi_route.sh"),
    "ina-ps": ("build", "bin/ina-ps"),
    "ina-sched": ("build", "bin/ina-sched"),
    "ina-mlf": ("build", "bin/ina-mlf"),
}
TREE_ROOTS = ("apps", "bench", "cmake", "docs", "examples", "include", "python", "scripts", "src",
              "tests", "tools")
GENERATED = ("bench/build/", "bench/results/runs/",  # made by runs, not in a fresh tree
             "build/install_manifest.txt")
SHELLS = ("sh", "bash", "shell")
HEX = re.compile(r"\b[0-9a-f]{8,}\b")

passed = 0
failed = 0


def ok(what):
    global passed
    passed += 1
    print("ok: " + what)


def bad(what, detail=""):
    global failed
    failed += 1
    print("FAIL: " + what)
    for line in (detail or "").rstrip().splitlines()[-40:]:
        print("    " + line)


def check(what, cond, detail=""):
    if cond:
        ok(what)
    else:
        bad(what, detail)


# ---- reading the documents --------------------------------------------------------------


class Block:
    def __init__(self, doc, line, info, text):
        words = info.split()
        self.doc, self.line, self.text = doc, line, text
        self.lang = words[0].lower() if words else ""
        self.flags = set(w for w in words[1:] if "=" not in w)
        self.attrs = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        self.output = None  # for run blocks: what they printed

    def where(self):
        return "%s:%d (```%s%s)" % (self.doc, self.line, self.lang,
                                    "".join(" " + f for f in sorted(self.flags)))


def read_markdown(path, rel):
    """@return (blocks, prose): fenced blocks, and [(line, paragraph text)] outside them."""
    blocks, prose = [], []
    fence = None  # (indent, marker, info, start line, lines)
    para, para_line = [], 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines, 1):
        if fence:
            m = re.match(r"^(\s*)(`{3,}|~{3,})\s*$", line)
            if m and m.group(2)[0] == fence[1][0] and len(m.group(2)) >= len(fence[1]):
                blocks.append(Block(rel, fence[3], fence[2], "\n".join(fence[4]) + "\n"))
                fence = None
            else:
                ind = fence[0]
                fence[4].append(line[len(ind):] if line.startswith(ind) else line.lstrip())
            continue
        m = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", line)
        if m:
            if para:
                prose.append((para_line, " ".join(para)))
                para = []
            fence = (m.group(1), m.group(2), m.group(3).strip(), i, [])
            continue
        if line.strip():
            if not para:
                para_line = i
            para.append(line.strip())
        elif para:
            prose.append((para_line, " ".join(para)))
            para = []
    if para:
        prose.append((para_line, " ".join(para)))
    if fence:
        bad("%s:%d: code block never closed" % (rel, fence[3]))
    return blocks, prose


def unroff(s):
    return (s.replace("\\e", "\\").replace("\\-", "-").replace("\\(aq", "'")
            .replace("\\(dq", '"').replace("\\&", "").replace("\\(em", "--"))


def read_man(path, rel):
    """The .EX/.EE examples of a man page, as blocks: C if they #include, else shell."""
    blocks = []
    cur = None
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f.read().split("\n"), 1):
            if line.startswith(".EX"):
                cur = (i, [])
            elif line.startswith(".EE") and cur:
                text = "\n".join(cur[1]) + "\n"
                lang = "c" if re.search(r"^#include", text, re.M) else "sh"
                blocks.append(Block(rel, cur[0], lang, text))
                cur = None
            elif cur is not None:
                cur[1].append(unroff(line))
    return blocks


def inline_code(text):
    return [m.group(2).strip() for m in re.finditer(r"(`+)(.+?)\1", text)]


# ---- checks of words: tools, paths, make targets, INA_* names ----------------------------


class Context:
    def __init__(self, src, build):
        self.src, self.build = src, build
        self.help = {}
        self.targets = None
        self.corpus = None

    def tool_options(self, tool):
        if tool not in self.help:
            base, rel = TOOLS[tool]
            exe = os.path.join(self.build if base == "build" else self.src, rel)
            try:
                cmd = ["bash", exe] if exe.endswith(".sh") else [exe]
                out = subprocess.run(cmd + ["--help"], capture_output=True, text=True,
                                     timeout=30).stdout
            except (OSError, subprocess.TimeoutExpired) as e:
                out = ""
                bad("%s --help runs" % tool, str(e))
            self.help[tool] = set(re.findall(r"--[a-z0-9][a-z0-9-]*", out))
        return self.help[tool]

    def make_targets(self):
        if self.targets is None:
            with open(os.path.join(self.src, "Makefile")) as f:
                self.targets = set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", f.read(), re.M))
        return self.targets

    def ina_names(self):
        """All text of the sources, where every INA_* name a document uses must occur."""
        if self.corpus is None:
            parts = []
            for pat in ("src/**/*", "include/*", "python/**/*.py", "tools/**/*", "tests/**/*",
                        "bench/*", "scripts/*", "examples/**/*", "cmake/*", "CMakeLists.txt",
                        "Makefile"):
                for p in glob.glob(os.path.join(self.src, pat), recursive=True):
                    if os.path.isfile(p) and not p.endswith((".png", ".jsonl")) \
                            and "/tests/docs/" not in p:
                        try:
                            with open(p, encoding="utf-8", errors="replace") as f:
                                parts.append(f.read())
                        except OSError:
                            pass
            self.corpus = "\n".join(parts)
        return self.corpus


def commands(text):
    """Split shell-ish text into commands (lists of words): lines joined at a trailing
    backslash or before a line that continues a synopsis ("   [--opt ..."), split at ; & | &&
    and comments."""
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"\n\s+(?=\[--)", " ", text)
    out = []
    for line in text.split("\n"):
        line = re.sub(r"(^|\s)#.*$", "", line)
        for part in re.split(r"&&|\|\||[;&|()]|\$\(", line):
            words = part.split()
            if words:
                out.append(words)
    return out


def check_words(ctx, where, text):
    """Tool options, paths, make targets and INA_* names in a code block or inline code."""
    problems = []
    for words in commands(text):
        ws = [w for w in words if w not in ("sudo", "env", "exec", "timeout", "flock")]
        while ws and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", ws[0]):
            ws = ws[1:]  # VAR=value before the command
        for i, w in enumerate(ws):
            tool = os.path.basename(w.strip("`[]"))
            if tool in TOOLS and (i == 0 or ws[i - 1] in ("bash", "mpirun") or "/" in w):
                known = ctx.tool_options(tool)
                for o in ws[i + 1:]:
                    for opt in re.findall(r"(?:^|[\[|])(--[a-z0-9][a-z0-9-]*)", o.strip("`")):
                        if opt not in known:
                            problems.append("%s has no option %s" % (tool, opt))
                break
        if len(ws) >= 2 and ws[0] == "make":
            for t in ws[1:]:
                if "=" in t or t.startswith("-") or t.isupper():
                    continue  # a variable, an option, or a placeholder (make TARGET)
                if t.strip("`.,") not in ctx.make_targets():
                    problems.append("Makefile has no target '%s'" % t)
    for m in re.finditer(r"(?<![\w./$<-])(?:\$PWD/)?((?:build|%s)/[A-Za-z0-9_.+/-]*)" %
                         "|".join(TREE_ROOTS), text):
        p = m.group(1).rstrip(".,:")
        end = text[m.end():m.end() + 1]
        if end and end in "<*{$":
            continue  # a pattern (bench/results/runs/<time>/), not a path
        if p.startswith(GENERATED) or p in ("build/", "build"):
            continue
        full = (os.path.join(ctx.build, p[len("build/"):]) if p.startswith("build/")
                else os.path.join(ctx.src, p))
        if not os.path.exists(full):
            problems.append("no such path: %s" % p)
    for name in set(re.findall(r"\bINA_[A-Z0-9_]*[A-Z0-9]\b", text)):
        if name not in ctx.ina_names():
            problems.append("%s occurs nowhere in the sources" % name)
    return problems


# ---- compiling and running --------------------------------------------------------------


cache_value = check_install.cache_value


class Compiler:
    def __init__(self, src, build, scratch):
        self.cc = cache_value(build, "CMAKE_C_COMPILER") or "cc"
        self.sanitized = cache_value(build, "INA_SANITIZE") == "ON"
        self.san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"] \
            if self.sanitized else []
        self.src, self.build, self.scratch = src, build, scratch

    def compile_c(self, b, name):
        path = os.path.join(self.scratch, name + ".c")
        with open(path, "w") as f:
            f.write(b.text)
        has_main = re.search(r"\bint\s+main\s*\(", b.text) is not None
        exe = os.path.join(self.scratch, name)
        cmd = [self.cc, "-std=c11", "-Wall", "-Wextra", "-Werror"] + self.san + \
            ["-I" + os.path.join(self.src, "include")]
        if has_main:
            lib = os.path.join(self.build, "lib")
            cmd += [path, "-o", exe, "-L" + lib, "-lina", "-Wl,-rpath," + lib, "-lm",
                    "-pthread"]
        else:
            cmd += ["-c", path, "-o", exe + ".o"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        check("%s compiles%s" % (b.where(), " and links with libina" if has_main else ""),
              r.returncode == 0, " ".join(cmd) + "\n" + r.stderr)
        return exe if has_main and r.returncode == 0 else None


class Sandbox:
    """Runs a script in private network and PID namespaces (127.0.0.1 is its own, every
    process it leaves behind dies with it), in a directory that looks like a clone of the
    repository after `make`."""

    def __init__(self, src, build, scratch, comp):
        self.src, self.build, self.comp = src, build, comp
        self.dir = os.path.join(scratch, "clone")
        self.home = os.path.join(scratch, "home")
        self.bin = os.path.join(scratch, "bin")
        self.prefix = None
        self.why_not = None
        # --mount-proc: a /proc of the new PID namespace (LeakSanitizer reads /proc/PID/task).
        self.unshare = ["unshare", "--net", "--pid", "--fork", "--mount-proc"]
        if os.geteuid() != 0:
            self.unshare.insert(1, "--map-root-user")
        try:
            r = subprocess.run(self.unshare + ["true"], capture_output=True, text=True,
                               timeout=30)
            if r.returncode != 0:
                self.why_not = "cannot create namespaces (%s)" % r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            self.why_not = "cannot run unshare (%s)" % e

    def setup(self, files):
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs(self.home, exist_ok=True)
        os.makedirs(self.bin, exist_ok=True)
        for name in os.listdir(self.src):
            if name in (".git", "build", "build-asan") or name.startswith("."):
                continue
            os.symlink(os.path.join(self.src, name), os.path.join(self.dir, name))
        os.symlink(self.build, os.path.join(self.dir, "build"))
        for name, text in files.items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        if self.comp.sanitized:
            # The build under test is instrumented: programs linked with it must be too, so
            # `cc` here is this build's compiler with the sanitizers (the text is unchanged).
            with open(os.path.join(self.bin, "cc"), "w") as f:
                f.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (self.comp.cc, " ".join(self.comp.san)))
            os.chmod(os.path.join(self.bin, "cc"), 0o755)
        # ina installed under $HOME/.local, as `make install PREFIX=$HOME/.local` does.
        prefix = os.path.join(self.home, ".local")
        r = subprocess.run(["cmake", "--install", self.build, "--prefix", prefix],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, DESTDIR=""))
        check("ina installed into the scratch $HOME/.local", r.returncode == 0, r.stdout + r.stderr)

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("INA_", "PKG_CONFIG", "CMAKE_", "LD_")) and k != "PYTHONPATH"}
        env.update(HOME=self.home, LC_ALL="C", PATH=self.bin + ":" + env.get("PATH", "/usr/bin:/bin"),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        return env

    def run(self, script, timeout=120):
        path = os.path.join(self.dir, ".docs-run.sh")
        with open(path, "w") as f:
            f.write(script)
        inner = "ip link set lo up && cd %s && exec bash %s" % (shlex.quote(self.dir),
                                                                shlex.quote(path))
        cmd = ["timeout", "-k", "5", str(timeout)] + self.unshare + ["bash", "-c", inner]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=self.env(), stdin=subprocess.DEVNULL)
        return r.returncode, r.stdout


MARK = "@@docs-block@@"


def run_doc(sb, doc, runs):
    """Run a document's run blocks in order in one shell, as a reader would type them."""
    parts = ["set -e"]
    for k, b in enumerate(runs):
        parts.append("echo '%s %d'" % (MARK, k))
        parts.append(b.text)
    parts.append("echo '%s end'" % MARK)
    rc, out = sb.run("\n".join(parts) + "\n")
    pieces = re.split(r"^%s (\S+)\n" % MARK, out, flags=re.M)
    # pieces: [before, "0", text0, "1", text1, ..., "end", after]
    got = {}
    for i in range(1, len(pieces) - 1, 2):
        got[pieces[i]] = pieces[i + 1]
    for k, b in enumerate(runs):
        b.output = got.get(str(k))
        done = str(k + 1) in got or (k == len(runs) - 1 and "end" in got)
        check("%s runs as written" % b.where(), done and (rc == 0 or k < len(runs) - 1),
              "exit status %d; output:\n%s" % (rc, b.output if b.output is not None else out))
        if not done:
            break


def normalize(line):
    return HEX.sub("H", line.strip())


# ---- main -------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--no-run", action="store_true", help="compile only; run nothing")
    a = ap.parse_args()
    src, build = os.path.abspath(a.src), os.path.abspath(a.build)
    scratch = os.path.abspath(a.scratch)
    os.makedirs(scratch, exist_ok=True)
    ctx = Context(src, build)
    comp = Compiler(src, build, scratch)

    docs = ["README.md"] + sorted(os.path.relpath(p, src) for p in
                                  glob.glob(os.path.join(src, "docs/**/*.md"), recursive=True))
    mans = sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs/man/*.[1-9]")))
    blocks, prose, headings = [], {}, {}
    for d in docs:
        bl, pr = read_markdown(os.path.join(src, d), d)
        blocks += bl
        prose[d] = pr
    for m in mans:
        blocks += read_man(os.path.join(src, m), m)
    print("check_docs: %d documents, %d man pages, %d code blocks" % (len(docs), len(mans),
                                                                       len(blocks)))

    # Files named by blocks (file=NAME), shared by all documents: one content per name.
    files = {}
    for b in blocks:
        name = b.attrs.get("file")
        if name:
            if name in files and files[name][1] != b.text:
                bad("%s: file=%s differs from %s's" % (b.where(), name, files[name][0].where()))
            files.setdefault(name, (b, b.text))

    # 1. Compile.
    mains = []
    for n, b in enumerate(blocks):
        if "nocompile" in b.flags:
            print("note: %s: not compiled (nocompile)" % b.where())
            continue
        if b.lang == "c":
            exe = comp.compile_c(b, "block%d" % n)
            if exe:
                mains.append((b, exe))
        elif b.lang == "python":
            try:
                compile(b.text, b.where(), "exec")
                ok("%s compiles" % b.where())
            except SyntaxError as e:
                bad("%s compiles" % b.where(), str(e))
        elif b.lang in SHELLS:
            r = subprocess.run(["bash", "-n"], input=b.text, capture_output=True, text=True)
            check("%s is valid shell" % b.where(), r.returncode == 0, r.stderr)

    # 2. Words in blocks and inline code.
    for b in blocks:
        if b.lang in ("", "text", "c", "python", "cmake", "json") or b.lang in SHELLS:
            probs = check_words(ctx, b.where(), b.text if b.lang != "c" else "")
            check("%s: tools, options, paths and names exist" % b.where(), not probs,
                  "\n".join(probs))
    for d, paras in prose.items():
        probs = []
        for line, text in paras:
            for code in inline_code(text):
                probs += ["line %d: %s" % (line, p) for p in check_words(ctx, d, code)]
        check("%s: inline code names existing tools, options, paths and names" % d, not probs,
              "\n".join(probs))

    # 3. Links and anchors.
    for d in docs:
        slugs_cache = {}
        probs = []
        for line, text in prose[d]:
            for m in re.finditer(r"\]\(([^)\s]+)\)", text):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(src, os.path.dirname(d), path)) \
                    if path else os.path.join(src, d)
                if not os.path.exists(full):
                    probs.append("line %d: link to a missing file: %s" % (line, target))
                    continue
                if anchor and full.endswith(".md"):
                    if full not in slugs_cache:
                        slugs_cache[full] = heading_slugs(full)
                    if anchor not in slugs_cache[full]:
                        probs.append("line %d: no heading #%s in %s" %
                                     (line, anchor, os.path.relpath(full, src)))
        check("%s: links and anchors resolve" % d, not probs, "\n".join(probs))

    # 4. Log events of ina-switch: each one documented (in `code`) somewhere.
    events = switch_log_events(src)
    documented = set()
    for d in docs:
        for _, text in prose[d]:
            documented.update(inline_code(text))
        with open(os.path.join(src, d), encoding="utf-8") as f:
            documented.update(re.findall(r"`([a-z_]+)`", f.read()))
    check("the log events are found in the sources (%d)" % len(events),
          {"listening", "job_started", "job_ended"} <= events, "\n".join(sorted(events)))
    missing = sorted(events - documented)
    check("every log event of ina-switch is documented", not missing,
          "not in any document: " + ", ".join(missing))

    # 4'. The source map and the tables of documents (check_map.py, docs/README.md).
    probs = check_map.check_source_map(src)
    check("docs/README.md's source map names every source file, and only those", not probs,
          "\n".join(probs))
    probs = check_map.check_documents(src)
    check("the tables of documents list every docs/*.md", not probs, "\n".join(probs))

    # 4''. INSTALL.md's list of what is installed is complete (check_install.py).
    probs = check_install.check_install_list(src, build, scratch)
    check("docs/INSTALL.md lists everything make install installs", not probs,
          "\n".join(probs))

    # 5. Run: C programs as one-rank jobs, then each document's run blocks.
    runs = [b for b in blocks if b.lang in SHELLS and "run" in b.flags]
    rc = 0
    if a.no_run:
        print("note: --no-run: %d programs and %d run blocks not run" % (len(mains), len(runs)))
    else:
        sb = Sandbox(src, build, scratch, comp)
        if sb.why_not:
            print("SKIP: running the documents' commands: %s" % sb.why_not)
            rc = 77
        else:
            # The run blocks install (make install): keep the build's install_manifest.txt.
            with check_install.manifest_kept(build):
                run_all(sb, comp, blocks, files, mains, runs)

    print("check_docs: %d passed, %d failed" % (passed, failed))
    if failed:
        return 1
    return rc


def run_all(sb, comp, blocks, files, mains, runs):
    """Step 5: the C programs as one-rank jobs, each document's run blocks, then the
    sample outputs against what the run blocks printed."""
    sb.setup({k: v[1] for k, v in files.items()})
    for b, exe in mains:
        code, out = sb.run("build/bin/ina-switch --quiet &\n"
                           "INA_WORLD_SIZE=1 INA_RANK=0 %s\n" % shlex.quote(exe), 60)
        check("%s runs as a one-rank job against ina-switch" % b.where(), code == 0,
              "exit status %d\n%s" % (code, out))
    by_doc = {}
    for b in runs:
        if "nosanitizer" in b.flags and comp.sanitized:
            print("note: %s: not run in a sanitizer build (nosanitizer)" % b.where())
            continue
        by_doc.setdefault(b.doc, []).append(b)
    for doc, rb in by_doc.items():
        run_doc(sb, doc, rb)
    # Sample output against what the run block before it printed.
    for i, b in enumerate(blocks):
        if b.lang == "text" and "output" in b.flags:
            prev = next((p for p in reversed(blocks[:i]) if p.doc == b.doc
                         and p.lang in SHELLS and "run" in p.flags), None)
            if prev is None or prev.output is None:
                if not (prev is not None and "nosanitizer" in prev.flags
                        and comp.sanitized):
                    bad("%s: no run block before it printed anything" % b.where())
                continue
            have = set(normalize(l) for l in prev.output.split("\n"))
            want = [l for l in b.text.split("\n") if l.strip() and l.strip() != "..."]
            miss = [l for l in want if normalize(l) not in have]
            check("%s: every line appears in the output of %s" % (b.where(), prev.where()),
                  not miss, "not printed:\n" + "\n".join(miss) +
                  "\nprinted:\n" + prev.output)


def heading_slugs(path):
    """GitHub's anchors for the headings of a markdown file."""
    slugs, seen = set(), {}
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^\s*(```|~~~)", line):
                in_fence = not in_fence
            if in_fence:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
            n = seen.get(s, 0)
            seen[s] = n + 1
            slugs.add(s if n == 0 else "%s-%d" % (s, n))
    return slugs


def switch_log_events(src):
    """Event names ina-switch logs, the daemon's and its engine's: ina__log(level, "event", ...)
    and ina__log_job(level, job, "event", reason), including a choice of names (cond ? "a" : "b")."""
    events = set()
    for p in sorted(glob.glob(os.path.join(src, "src/switch/*.c")) +
                    glob.glob(os.path.join(src, "src/engine/*.c"))):
        with open(p, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"\bina__log\(\s*[^,]+,([^;]*?)INA_KV", text, re.S):
            events.update(re.findall(r'"([a-z][a-z0-9_]*)"', m.group(1)))
        for m in re.finditer(r"\b(?:ina__)?log_job\(\s*[^,]+,\s*[^,]+,([^,]*)", text, re.S):
            events.update(re.findall(r'"([a-z][a-z0-9_]*)"', m.group(1)))
    return events


if __name__ == "__main__":
    sys.exit(main())
