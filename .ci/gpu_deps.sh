#!/usr/bin/env bash
# Gathers what the GPU machine lacks into third_party_local/ (git-ignored),
# for the device tool to carry there: fmt's and nlohmann's headers (fmt is
# used header-only), GoogleTest's sources, Gloo's headers, and Google
# Benchmark (headers, library and CMake package, laid out as under /usr so
# that its package finds itself), all from Debian's packages.
#   .ci/gpu_deps.sh            then carry: third_party_local
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$ROOT/third_party_local"
rm -rf "$out"
mkdir -p "$out/include"
cp -r /usr/include/fmt /usr/include/nlohmann "$out/include/"
cp -r /usr/src/googletest "$out/googletest"
# Gloo's headers (libgloo-dev), for a torch that does not ship them.
mkdir -p "$out/gloo/include"
cp -r /usr/include/gloo "$out/gloo/include/"
lib=lib/x86_64-linux-gnu
mkdir -p "$out/benchmark/include" "$out/benchmark/$lib/cmake"
cp -r /usr/include/benchmark "$out/benchmark/include/"
cp -r "/usr/$lib/cmake/benchmark" "$out/benchmark/$lib/cmake/"
cp -L /usr/$lib/libbenchmark.so* /usr/$lib/libbenchmark_main.a "$out/benchmark/$lib/"
du -sh "$out"
