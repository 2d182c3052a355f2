#!/usr/bin/env python3
"""Fails when a file under src/ includes a header of a layer below its own.

The layers, top to bottom, are those of docs/architecture.md ("Layers"): a
layer uses only the layers above it. This script reads that list from the
page, so the page and the check cannot disagree, and checks every
`#include "<layer>/..."` of every file under src/.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("## Layers", 1)[1].split("```", 2)[1]
    order = re.findall(r"^src/([a-z_]+)/", block, re.M)
    if not order:
        sys.exit("layer_check: no src/ layers found under docs/architecture.md's Layers")
    return order


def main():
    order = layers()
    rank = {name: i for i, name in enumerate(order)}
    bad = []
    for path in sorted((ROOT / "src").rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu") or not path.is_file():
            continue
        layer = path.relative_to(ROOT / "src").parts[0]
        if layer not in rank:
            bad.append(f"src/{layer}/ is not a layer of docs/architecture.md")
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m and m.group(1) in rank and rank[m.group(1)] > rank[layer]:
                bad.append(f"{path.relative_to(ROOT)}:{n}: {layer}/ includes "
                           f"{m.group(1)}/, a layer below it: {line.strip()}")
    for b in sorted(set(bad)):
        print(b)
    if bad:
        sys.exit(1)
    print(f"layer_check: src/ follows the layers {' > '.join(order)}")


if __name__ == "__main__":
    main()
