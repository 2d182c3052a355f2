#!/usr/bin/env bash
# benchmarks/export.cpp inside the Debian sid root (LibTorch 2.14; Python
# torch 2.14 with tensordict 0.14 makes the package and the TorchScript
# file, benchmarks/python/export_bench_policy.py):
#   benchmarks/compare_export.sh
# Builds bench_export in build-sid-bench/, exports the policy into
# build-sid-bench/export/, and runs the benchmarks (3 repetitions, medians).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CHROOT="$ROOT/../shared/debian-chroot/chroot.sh"
SETUP="$ROOT/../shared/python-reference/setup-newest.sh"
bash "$CHROOT" sid run "set -e
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  cmake -S . -B build-sid-bench -DCMAKE_BUILD_TYPE=Release \
    -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF \
    -DTENSORDICT_BUILD_BENCHMARKS=ON -DTENSORDICT_INSTALL=OFF > /dev/null
  cmake --build build-sid-bench -j2 --target bench_export > /dev/null
  pyref=\"\$(bash '$SETUP' | tail -n 1)\"
  env \$pyref -W ignore benchmarks/python/export_bench_policy.py build-sid-bench/export > /dev/null 2>&1
  TENSORDICT_BENCH_EXPORT=build-sid-bench/export ./build-sid-bench/bench_export \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true"
