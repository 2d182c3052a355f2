#!/usr/bin/env python3
"""clang-tidy over the files of a compile_commands.json, with a cache of the
files it found clean (./dev tidy runs it; CI's tidy stage).

    tidy.py -p BUILD_DIR [-j JOBS] [REGEX...]

Each file whose path matches one of the regular expressions (all files
without any) is checked with `clang-tidy -p BUILD_DIR -quiet FILE`. A file
that passed is remembered under a key that covers everything its result can
depend on: clang-tidy's version, .clang-tidy, the compile command and the
file preprocessed by clang (every header it includes, as included), with
the checkout's path taken out so that a clone elsewhere (CI's) shares the
cache. A file with the same key is not checked again; a file with findings
never goes into the cache. The cache lives in $TENSORDICT_TIDY_CACHE, by
default ~/.cache/tensordict-tidy; TENSORDICT_TIDY_CACHE=off turns it off.
Prints the findings and a summary; exits 1 on any finding.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE = re.compile(r"^\d+ warnings? generated\.$|^Suppressed \d+ warnings|"
                   r"^Use -header-filter=|^\d+ warnings? treated as errors$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cache_dir():
    where = os.environ.get("TENSORDICT_TIDY_CACHE", "")
    if where == "off":
        return None
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "tensordict-tidy")
    os.makedirs(where, exist_ok=True)
    return where


def entry_args(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def cache_key(entry, salt):
    """The key of `entry`'s result, or None when clang cannot preprocess it
    (clang-tidy then runs and reports why)."""
    args = entry_args(entry)
    pre = ["clang++"]
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        if arg == "-c":
            continue
        pre.append(arg)
    pre += ["-E", "-w"]
    try:
        out = subprocess.run(pre, cwd=entry["directory"], capture_output=True,
                             check=False).stdout
    except OSError:
        return None
    if not out:
        return None
    h = hashlib.sha256(salt)
    h.update(" ".join(pre).replace(ROOT, "<root>").encode())
    h.update(b"\0")
    h.update(out.replace(ROOT.encode(), b"<root>"))
    return h.hexdigest()


def check(entry, build, salt, where):
    key = cache_key(entry, salt) if where else None
    if key and os.path.exists(os.path.join(where, key)):
        return entry["file"], 0, "", True
    proc = subprocess.run(["clang-tidy", "-p", build, "-quiet", entry["file"]],
                          capture_output=True, text=True, check=False)
    lines = [ANSI.sub("", l) for l in (proc.stdout + proc.stderr).splitlines()]
    text = "\n".join(l for l in lines if l.strip() and not NOISE.match(l))
    if proc.returncode == 0 and key:
        with open(os.path.join(where, key), "w", encoding="utf-8"):
            pass
    return entry["file"], proc.returncode, text, False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", dest="build", required=True)
    parser.add_argument("-j", dest="jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("regex", nargs="*")
    opts = parser.parse_args()

    with open(os.path.join(opts.build, "compile_commands.json"),
              encoding="utf-8") as f:
        entries = json.load(f)
    pats = [re.compile(r) for r in opts.regex]
    entries = [e for e in entries
               if not pats or any(p.search(e["file"]) for p in pats)]

    version = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                             check=True).stdout
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        config = f.read()
    salt = version + b"\0" + config + b"\0"
    where = cache_dir()

    failed = cached = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        jobs = [pool.submit(check, e, opts.build, salt, where) for e in entries]
        for job in jobs:
            path, rc, text, hit = job.result()
            cached += hit
            if rc != 0:
                failed += 1
                print(f"--- {os.path.relpath(path, ROOT)}")
                print(text or f"clang-tidy exited with {rc}")
    summary = f"clang-tidy: {len(entries)} files ({cached} clean in the cache)"
    if failed:
        print(f"{summary}, findings in {failed} (above; .clang-tidy lists the "
              "checks)", file=sys.stderr)
        return 1
    print(f"{summary}, no findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
