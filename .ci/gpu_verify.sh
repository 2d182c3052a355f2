#!/usr/bin/env bash
# The GPU verification of the LibTorch 2.x / CUDA work, in one go on a GPU
# machine whose python3 has torch with CUDA (the device tool's machine):
# builds the library and tests against that torch in C++17 and C++20 (fmt,
# nlohmann and GoogleTest from third_party_local/, see .ci/gpu_deps.sh), runs
# the whole suite, then the CUDA tests under compute-sanitizer. Logs go to
# $1 (default: gpu-logs/); the last lines summarize.
#   .ci/gpu_verify.sh "$OUT"
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
logs="${1:-gpu-logs}"
mkdir -p "$logs"
deps="$ROOT/third_party_local"
jobs="$(nproc 2>/dev/null || echo 8)"
summary=()

python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' \
  | tee "$logs/versions.txt"
torch_dir="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch"
{ cmake --version | head -1; g++ --version | head -1; nvidia-smi -L; } \
  >> "$logs/versions.txt" 2>&1

for std in 17 20; do
  b="build-gpu-cxx$std"
  if ! cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD="$std" \
      -DTorch_DIR="$torch_dir" -DTENSORDICT_BUILD_EXAMPLES=ON \
      -DTENSORDICT_BUILD_BENCHMARKS=OFF -DTENSORDICT_INSTALL=OFF \
      -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
      -DTENSORDICT_FMT_INCLUDE_DIR="$deps/include" \
      -DTENSORDICT_JSON_INCLUDE_DIR="$deps/include" \
      -DTENSORDICT_GTEST_SOURCE_DIR="$deps/googletest" \
      > "$logs/configure-cxx$std.log" 2>&1; then
    summary+=("C++$std: configure failed (configure-cxx$std.log)"); continue
  fi
  if ! cmake --build "$b" -j"$jobs" > "$logs/build-cxx$std.log" 2>&1; then
    grep -m 20 -E "error|Error" "$logs/build-cxx$std.log"
    summary+=("C++$std: build failed (build-cxx$std.log)"); continue
  fi
  (cd tests && "$ROOT/$b/tests/tensordict_tests") > "$logs/tests-cxx$std.log" 2>&1
  rc=$?
  summary+=("C++$std: tests exit $rc; $(grep -E '^\[  (PASSED|FAILED)  \]' "$logs/tests-cxx$std.log" | tr '\n' ' ')")
done

san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ -x "$san" && -x build-gpu-cxx17/tests/tensordict_tests ]]; then
  (cd tests && "$san" --tool memcheck --error-exitcode 1 \
     "$ROOT/build-gpu-cxx17/tests/tensordict_tests" --gtest_filter='Cuda.*') \
    > "$logs/compute-sanitizer.log" 2>&1
  summary+=("compute-sanitizer memcheck over Cuda.*: exit $? ($(tail -1 "$logs/compute-sanitizer.log"))")
else
  summary+=("compute-sanitizer: not run (no sanitizer or no C++17 build)")
fi

printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
