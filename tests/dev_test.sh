#!/usr/bin/env bash
# How ./dev chooses the LibTorch (TORCH_DIR, LIBTORCH), checked without
# building: each case stops with its error before CMake runs.
#   tests/dev_test.sh <repository root>
set -uo pipefail
root="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect <case> <expected stderr line> -- <env assignments...>
expect() {
  local name="$1" want="$2"; shift 3
  local out rc
  out="$(cd "$root" && env "$@" ./dev test 2>&1)"
  rc=$?
  if ((rc == 0)) || [[ "$out" != *"$want"* ]]; then
    echo "FAIL $name: exit $rc, expected the line: $want"
    echo "got: $out"
    failed=1
  else
    echo "ok   $name"
  fi
}

expect "a TORCH_DIR without TorchConfig.cmake" \
  "dev: no TorchConfig.cmake in $tmp/none, $tmp/none/Torch or $tmp/none/share/cmake/Torch" \
  -- TORCH_DIR="$tmp/none"

expect "TORCH_DIR and LIBTORCH together" \
  "dev: set TORCH_DIR or LIBTORCH, not both" \
  -- TORCH_DIR="$tmp" LIBTORCH="$tmp"

# An unpacked archive's layout, and a build folder configured for another
# LibTorch: ./dev refuses to mix them.
mkdir -p "$tmp/libtorch/share/cmake/Torch" "$tmp/b"
touch "$tmp/libtorch/share/cmake/Torch/TorchConfig.cmake"
echo "Torch_DIR:PATH=/elsewhere/Torch" > "$tmp/b/CMakeCache.txt"
expect "a build folder configured for another LibTorch" \
  "dev: $tmp/b/ was configured with the LibTorch in /elsewhere/Torch; remove it or set BUILD_DIR to build with $tmp/libtorch/share/cmake/Torch" \
  -- LIBTORCH="$tmp/libtorch" BUILD_DIR="$tmp/b"

# TORCH_DIR may name the Torch folder itself (pip: cmake_prefix_path/Torch).
expect "TORCH_DIR naming the Torch folder" \
  "dev: $tmp/b/ was configured with the LibTorch in /elsewhere/Torch; remove it or set BUILD_DIR to build with $tmp/libtorch/share/cmake/Torch" \
  -- TORCH_DIR="$tmp/libtorch/share/cmake/Torch" BUILD_DIR="$tmp/b"

exit "$failed"
