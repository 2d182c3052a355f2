#!/usr/bin/env python3
"""The doc-test harness: every C++ block of README.md and docs/**/*.md,
compiled against the installed package and run, with every shown output
compared byte for byte.

Each page becomes one program, its blocks in the page's order:
  - a block whose code lines are all indented (by two spaces or more) is a
    statement block: it goes into the page's main(), so its variables stay
    in scope for the blocks after it, as in the page's prose;
  - any other block (includes, usings, helpers, structs) goes at namespace
    scope, before main(), in the page's order.
An HTML comment on the line just before a fence (only blank lines between)
overrides that:
    <!-- doc-test: fragment -->     not compiled (a synopsis, a sketch)
    <!-- doc-test: top -->          at namespace scope
    <!-- doc-test: main -->         in main()
    <!-- doc-test: compile-only -->  in main(), compiled but not run (it needs
                                    what CI does not have: a Python peer, a
                                    GPU)
    <!-- doc-test: not-output -->   (on a text block) not the output of the
                                    code block before it
    <!-- doc-test: same-as PATH -->  not compiled in the page: the block must
                                    be the file PATH (relative to the
                                    repository), which CI builds
Two more markers, anywhere on a page, are about the whole page:
<!-- doc-test: sections --> gives each "## " section's statements a scope
of their own in main(), for pages whose sections stand alone;
<!-- doc-test: not-run --> compiles the page's program but does not run it
(a page whose program runs as two processes, which an example runs);
<!-- doc-test: aoti --> tests the page only where the installed package has
AOTInductor's loader (TENSORDICT_HAS_AOTI: LibTorch 2.6 and later; CI's
trixie and sid stages test those pages) and skips it elsewhere, saying so.
A ```text block is the output of the statement block before it (the
previous fenced block): what that block prints to stdout must be exactly the
text block's content. A text block that is no output (a formula, a format)
says so with not-output; any other text block is an error.

A program runs in a fresh temporary directory, where examples/ links to the
repository's (pages load the examples' data); a block that throws fails
its page. #line directives point compile errors at the markdown.

Usage: doc_test.py --prefix INSTALL_PREFIX [--build DIR] [--launcher CCACHE]
                   [--jobs N] [PAGE.md ...]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*([a-z-]+)(?:\s+(\S+))?\s*-->\s*$")
KINDS = {"fragment", "top", "main", "compile-only", "not-output", "same-as"}
PAGE_MARKERS = {"sections", "not-run", "aoti"}
BLOCK_MARK = "@@doc-test-block {}@@"


class Block:
    def __init__(self, lang, line, code, marker):
        self.lang = lang      # "cpp", "text", ...
        self.line = line      # 1-based line of the first code line
        self.code = code      # the lines, without the fence
        self.marker = marker  # the doc-test marker before it, or None
        self.arg = None       # the marker's argument (same-as: the path)
        self.kind = None      # cpp: "top" / "main" / "fragment"
        self.index = None     # main blocks: their number in main()
        self.section = 0      # the number of "## " headings before it


def parse(path):
    """The fenced blocks of a markdown file, and its page markers."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i, marker, arg, section, page = [], 0, None, None, 0, set()
    while i < len(lines):
        if lines[i].startswith("## "):
            section += 1
        m = MARKER.match(lines[i])
        if m and m.group(1) in PAGE_MARKERS:
            page.add(m.group(1))
            i += 1
            continue
        if m:
            if m.group(1) not in KINDS:
                sys.exit(f"{path}:{i + 1}: unknown doc-test marker '{m.group(1)}'")
            marker, arg = m.group(1), m.group(2)
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip():
                marker = None
            i += 1
            continue
        indent, lang = f.group(1), f.group(2)
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if j == len(lines):
            sys.exit(f"{path}:{i + 1}: unterminated fence")
        code = [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]]
        blocks.append(Block(lang, i + 2, code, marker))
        blocks[-1].section = section
        blocks[-1].arg = arg
        marker, arg = None, None
        i = j + 1
    return blocks, page


def classify(path, blocks):
    for b in blocks:
        if b.lang != "cpp":
            if b.marker not in (None, "not-output"):
                sys.exit(f"{path}:{b.line - 1}: '{b.marker}' marks a {b.lang or 'plain'} block")
            continue
        if b.marker == "not-output":
            sys.exit(f"{path}:{b.line - 1}: 'not-output' marks a cpp block")
        if b.marker == "same-as":
            b.kind = "same-as"
            other = os.path.join(ROOT, b.arg or "")
            if not b.arg or not os.path.isfile(other):
                sys.exit(f"{path}:{b.line - 1}: same-as names no file: {b.arg}")
            with open(other, encoding="utf-8") as f:
                if f.read() != "\n".join(b.code) + "\n":
                    sys.exit(f"{path}:{b.line}: the block is not {b.arg} as it stands")
        elif b.marker == "compile-only":
            b.kind = "main"
        elif b.marker:
            b.kind = b.marker
        else:
            code = [l for l in b.code if l.strip()]
            b.kind = "main" if code and all(l.startswith("  ") for l in code) else "top"


def c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def program(page, blocks, sections):
    rel = os.path.relpath(page, ROOT)
    out = [f"// Generated by .ci/doc_test.py from {rel}: do not edit.",
           "#include <cstdio>", "#include <exception>", "#include <iostream>", ""]
    for b in blocks:
        if b.kind == "top":
            out.append(f"#line {b.line} {c_string(rel)}")
            out.extend(b.code)
    out += ["", "int main() {", "  try {"]
    n, scope = 0, None
    for b in blocks:
        if b.kind != "main":
            continue
        if sections and b.section != scope:
            out.append("  }" if scope is not None else "")
            out.append("  {")
            scope = b.section
        b.index = n
        out.append(f'  std::cout << "{BLOCK_MARK.format(n)}" << std::flush;')
        if b.marker == "compile-only":
            out.append("  if (false) {")
        out.append(f"#line {b.line} {c_string(rel)}")
        out.extend(b.code)
        if b.marker == "compile-only":
            out.append("  }")
        n += 1
    if scope is not None:
        out.append("  }")
    out.append(f'  std::cout << "{BLOCK_MARK.format(n)}" << std::flush;')
    out += ["  } catch (const std::exception& e) {",
            '    std::cout << std::flush;',
            f'    std::fprintf(stderr, "{rel}: a block threw: %s\\n", e.what());',
            "    return 1;", "  }", "  return 0;", "}", ""]
    return "\n".join(out), n


def outputs(stdout, n):
    """Each main block's stdout, by the markers printed before each one."""
    res = []
    for k in range(n):
        start = stdout.find(BLOCK_MARK.format(k))
        end = stdout.find(BLOCK_MARK.format(k + 1))
        if start < 0 or end < 0:
            return None
        res.append(stdout[start + len(BLOCK_MARK.format(k)):end])
    return res


def expected(path, blocks):
    """(text block, the main block it shows the output of) pairs. Every other
    text block must say it is no output."""
    pairs, prev = [], None
    for b in blocks:
        if b.lang == "text" and b.marker != "not-output":
            if prev is None or prev.kind != "main":
                sys.exit(f"{path}:{b.line - 1}: a text block that follows no code block: "
                         "show the code that prints it, or mark it not-output")
            pairs.append((b, prev))
        prev = b
    return pairs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", required=True, help="the installed package's prefix")
    ap.add_argument("--build", default=os.path.join(ROOT, "build-doctest"))
    ap.add_argument("--launcher", default=shutil.which("ccache") or "")
    ap.add_argument("--jobs", default=str(os.cpu_count() or 2))
    ap.add_argument("pages", nargs="*")
    args = ap.parse_args()

    pages = [os.path.abspath(p) for p in args.pages]
    if not pages:
        pages = [os.path.join(ROOT, "README.md")]
        for d, _, files in sorted(os.walk(os.path.join(ROOT, "docs"))):
            pages += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]

    configs = glob.glob(os.path.join(args.prefix, "lib*", "**", "tensordictConfig.cmake"),
                        recursive=True)
    has_aoti = any("set(TENSORDICT_HAS_AOTI ON)" in open(c, encoding="utf-8").read()
                   for c in configs)

    src = os.path.join(args.build, "src")
    os.makedirs(src, exist_ok=True)
    programs = []  # (target, page, blocks, number of main blocks, not run)
    compiled = skipped = 0
    for page in pages:
        blocks, page_markers = parse(page)
        if "aoti" in page_markers and not has_aoti:
            print(f"doc_test: {os.path.relpath(page, ROOT)}: skipped (this LibTorch "
                  "has no AOTInductor package loader; CI tests it on 2.6 and 2.14)")
            continue
        classify(page, blocks)
        expected(os.path.relpath(page, ROOT), blocks)  # every text block placed
        compiled += sum(1 for b in blocks if b.kind in ("top", "main"))
        skipped += sum(1 for b in blocks if b.kind == "fragment")
        if not any(b.kind in ("top", "main") for b in blocks):
            continue
        target = "doc_" + re.sub(r"[^A-Za-z0-9]+", "_",
                                 os.path.splitext(os.path.relpath(page, ROOT))[0])
        text, n = program(page, blocks, "sections" in page_markers)
        path = os.path.join(src, target + ".cpp")
        # Rewritten only when changed, so that make rebuilds only those.
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        programs.append((target, page, blocks, n, "not-run" in page_markers))

    cmake = ["cmake_minimum_required(VERSION 3.25)",
             "project(tensordict_doc_test LANGUAGES CXX)",
             "find_package(tensordict REQUIRED)"]
    for target, *_ in programs:
        cmake.append(f"add_executable({target} src/{target}.cpp)")
        cmake.append(f"target_link_libraries({target} PRIVATE tensordict::tensordict)")
    cmake_text = "\n".join(cmake) + "\n"
    cml = os.path.join(args.build, "CMakeLists.txt")
    if not os.path.exists(cml) or open(cml).read() != cmake_text:
        with open(cml, "w") as f:
            f.write(cmake_text)
    configure = ["cmake", "-S", args.build, "-B", os.path.join(args.build, "out"),
                 "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={args.prefix}"]
    if args.launcher:
        configure.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={args.launcher}")
    subprocess.run(configure, check=True, stdout=subprocess.DEVNULL)
    # Relinked every run (the objects stay), so that a program that no longer
    # compiles is missing, not stale.
    for target, *_ in programs:
        exe = os.path.join(args.build, "out", target)
        if os.path.exists(exe):
            os.remove(exe)
    subprocess.run(["cmake", "--build", os.path.join(args.build, "out"),
                            "-j", args.jobs, "--", "-k"])

    failures = []
    compared = 0
    for target, page, blocks, n, not_run in programs:
        rel = os.path.relpath(page, ROOT)
        exe = os.path.join(args.build, "out", target)
        if not os.path.exists(exe):
            failures.append(f"{rel}: does not compile (see above)")
            continue
        if not_run:
            continue
        with tempfile.TemporaryDirectory(prefix="doc_test_") as cwd:
            # Pages load the examples' data by relative path.
            os.symlink(os.path.join(ROOT, "examples"), os.path.join(cwd, "examples"))
            run = subprocess.run([exe], cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, timeout=600)
        if run.returncode != 0:
            failures.append(f"{rel}: exited with {run.returncode}\n{run.stderr}")
            continue
        outs = outputs(run.stdout, n)
        if outs is None:
            failures.append(f"{rel}: the block markers are missing from its output")
            continue
        for text, code in expected(rel, blocks):
            compared += 1
            want = "\n".join(text.code) + "\n"
            got = outs[code.index]
            if got != want:
                failures.append(
                    f"{rel}:{text.line}: the output of the block at line {code.line} differs\n"
                    f"--- shown\n{want}--- printed\n{got}---")
    print(f"doc-test: {len(programs)} pages, {compiled} blocks compiled, "
          f"{skipped} fragments skipped, {compared} outputs compared")
    if failures:
        print("\n\n".join(failures), file=sys.stderr)
        print(f"doc-test: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
