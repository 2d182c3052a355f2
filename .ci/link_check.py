#!/usr/bin/env python3
"""Checks the links of the markdown docs and of the API reference site.

  - Markdown (README.md, docs/**/*.md, and the other .md files git tracks):
    every relative link names a file or folder that exists, and a link to
    `page.md#anchor` (or `#anchor` on the same page) names a heading of that
    page, with GitHub's anchors (lowercase, punctuation dropped, spaces to
    hyphens).
  - HTML (--site DIR, the Doxygen output): every relative href and src names
    a file of the site, and every #anchor an id or name in it.

Links to other sites (http, https, mailto) are not followed: the checks run
offline.

Usage: link_check.py [--site build/docs/html]
"""
import argparse
import html.parser
import os
import re
import subprocess
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MD_LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def github_anchor(heading, seen):
    """GitHub's anchor of a heading's text (and -1, -2 ... for repeats)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def md_anchors(path, cache={}):
    if path not in cache:
        anchors, seen, fence = set(), {}, False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if re.match(r"^\s*```", line):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    anchors.add(github_anchor(m.group(1), seen))
        cache[path] = anchors
    return cache[path]


def markdown_files():
    out = subprocess.run(["git", "ls-files", "--cached", "--others",
                          "--exclude-standard", "*.md"],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return [os.path.join(ROOT, p) for p in out.stdout.split("\n") if p]


def check_markdown(errors):
    count = 0
    for page in markdown_files():
        rel = os.path.relpath(page, ROOT)
        fence = False
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            if re.match(r"^\s*```", line):
                fence = not fence
                continue
            if fence:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if target.startswith(EXTERNAL):
                    continue
                count += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page),
                                                     urllib.parse.unquote(path))) \
                    if path else page
                if not os.path.exists(dest):
                    errors.append(f"{rel}:{n}: {target}: no such file")
                elif anchor and dest.endswith(".md") and anchor not in md_anchors(dest):
                    errors.append(f"{rel}:{n}: {target}: no heading #{anchor}")
    return count


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if v is None:
                continue
            if k in ("id", "name"):
                self.ids.add(v)
            if k in ("href", "src"):
                self.links.append(v)


def parse_html(path, cache={}):
    if path not in cache:
        p = Links()
        with open(path, encoding="utf-8", errors="replace") as f:
            p.feed(f.read())
        cache[path] = p
    return cache[path]


def check_site(site, errors):
    count = 0
    for d, _, files in os.walk(site):
        for name in files:
            if not name.endswith(".html"):
                continue
            page = os.path.join(d, name)
            rel = os.path.relpath(page, site)
            for target in parse_html(page).links:
                if target.startswith(EXTERNAL) or target.startswith("javascript:"):
                    continue
                count += 1
                path, _, anchor = target.partition("#")
                path = path.partition("?")[0]
                dest = os.path.normpath(os.path.join(d, urllib.parse.unquote(path))) \
                    if path else page
                if not os.path.exists(dest):
                    errors.append(f"{rel}: {target}: no such file")
                elif anchor and dest.endswith(".html") and \
                        anchor not in parse_html(dest).ids:
                    errors.append(f"{rel}: {target}: no id #{anchor}")
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", help="the HTML site to check as well")
    args = ap.parse_args()
    errors = []
    n = check_markdown(errors)
    msg = f"link-check: {n} markdown links"
    if args.site:
        msg += f", {check_site(args.site, errors)} links of {args.site}"
    print(msg + f", {len(errors)} broken")
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
