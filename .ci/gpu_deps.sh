#!/usr/bin/env bash
# Gathers what the GPU machine lacks into third_party_local/ (git-ignored),
# for the device tool to carry there: fmt's and nlohmann's headers (fmt is
# used header-only) and GoogleTest's sources, all from Debian's packages.
#   .ci/gpu_deps.sh            then carry: third_party_local
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$ROOT/third_party_local"
rm -rf "$out"
mkdir -p "$out/include"
cp -r /usr/include/fmt /usr/include/nlohmann "$out/include/"
cp -r /usr/src/googletest "$out/googletest"
du -sh "$out"
