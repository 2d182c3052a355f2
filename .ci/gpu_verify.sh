#!/usr/bin/env bash
# The GPU verification of the LibTorch 2.x / CUDA work, in one go on a GPU
# machine whose python3 has torch with CUDA (the device tool's machine):
# builds the library and tests against that torch in C++17 and C++20 (fmt,
# nlohmann and GoogleTest from third_party_local/, see .ci/gpu_deps.sh), runs
# the whole suite, then the CUDA tests under compute-sanitizer, then the GPU
# benchmarks (benchmarks/cuda.cpp, C++17 build) and the PPO example on the
# GPU. Logs go to
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

# TORCH_DIR overrides the torch (a folder with TorchConfig.cmake).
if [[ -z "${TORCH_DIR:-}" ]]; then
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' \
    | tee "$logs/versions.txt"
fi
torch_dir="${TORCH_DIR:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch}"
{ cmake --version | head -1; g++ --version | head -1; nvidia-smi -L; } \
  >> "$logs/versions.txt" 2>&1

configure() {  # configure <build dir> <std> [extra args...]
  local dir="$1" std="$2"; shift 2
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD="$std" \
    -DTorch_DIR="$torch_dir" -DTENSORDICT_BUILD_EXAMPLES=ON \
    -DTENSORDICT_BUILD_BENCHMARKS="$([[ $std == 17 ]] && echo ON || echo OFF)" \
    -Dbenchmark_DIR="$deps/benchmark/lib/x86_64-linux-gnu/cmake/benchmark" \
    -DTENSORDICT_INSTALL=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
    -DTENSORDICT_FMT_INCLUDE_DIR="$deps/include" \
    -DTENSORDICT_JSON_INCLUDE_DIR="$deps/include" \
    -DTENSORDICT_GTEST_SOURCE_DIR="$deps/googletest" "$@"
}

# GPU_VERIFY_STD picks the standards (the device tool allows 10 minutes a
# command: one standard per call fits).
for std in ${GPU_VERIFY_STD:-17 20}; do
  b="build-gpu-cxx$std"
  # With the CUDA paths (on by default with a CUDA torch); without them if
  # this machine has no nvcc, so that LibTorch 2.x is verified either way.
  if ! configure "$b" "$std" > "$logs/configure-cxx$std.log" 2>&1; then
    rm -rf "$b"
    if configure "$b" "$std" -DTENSORDICT_CUDA=OFF \
        > "$logs/configure-cxx$std-nocuda.log" 2>&1; then
      summary+=("C++$std: configured WITHOUT the CUDA paths (configure-cxx$std.log says why)")
    else
      summary+=("C++$std: configure failed (configure-cxx$std*.log)"); continue
    fi
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
# The three tests that need queued GPU work to outlast host calls are left
# out: memcheck serializes kernel launches, and their kernels (LibTorch's
# matrix products, and the fused copies the other tests cover) add nothing.
san_filter='Cuda.*:-Cuda.RecordStreamKeepsMemoryUntilTheStreamIsDone:Cuda.ReplayBufferOrdersCallsFromDifferentStreams:Cuda.ReplayBufferCallsDoNotWaitForTheGpu'
if [[ -x "$san" && -x build-gpu-cxx17/tests/tensordict_tests ]]; then
  (cd tests && "$san" --tool memcheck --error-exitcode 1 \
     "$ROOT/build-gpu-cxx17/tests/tensordict_tests" --gtest_filter="$san_filter") \
    > "$logs/compute-sanitizer.log" 2>&1
  summary+=("compute-sanitizer memcheck over Cuda.* (but the 3 stream-timing tests): exit $? ($(tail -1 "$logs/compute-sanitizer.log"))")
else
  summary+=("compute-sanitizer: not run (no sanitizer or no C++17 build)")
fi

b=build-gpu-cxx17
if [[ -x $b/bench_cuda ]]; then
  LD_LIBRARY_PATH="$deps/benchmark/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" \
    "$b/bench_cuda" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    > "$logs/bench_cuda.log" 2>&1
  summary+=("bench_cuda: exit $?; $(grep -E 'x  \(target' "$logs/bench_cuda.log" | tr -s ' ' | tr '\n' ';')")
fi
if [[ -x $b/ppo_cartpole ]]; then
  "$b/ppo_cartpole" --device cuda > "$logs/ppo_cuda.log" 2>&1
  summary+=("ppo_cartpole --device cuda: exit $?; $(tail -1 "$logs/ppo_cuda.log")")
  "$b/ppo_cartpole" > "$logs/ppo_cpu.log" 2>&1
  summary+=("ppo_cartpole (cpu, same machine): exit $?; $(tail -1 "$logs/ppo_cpu.log")")
fi

printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
