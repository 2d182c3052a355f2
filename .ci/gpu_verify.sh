#!/usr/bin/env bash
# The GPU verification, in one go on a GPU machine whose python3 has torch
# with CUDA (the device tool's machine, 16 cores): builds the library, the
# test suite, bench_cuda and the PPO example against that torch (fmt,
# nlohmann, GoogleTest, Google Benchmark and, where torch lacks them, Gloo's
# headers from third_party_local/, see .ci/gpu_deps.sh), then runs
#   1. the CUDA tests alone (the GPU to themselves),
#   2. every other suite in a process of its own, in parallel (a crash or
#      a hang costs one suite; its test gets a backtrace and the suite runs
#      again without it),
#   3. compute-sanitizer memcheck over the CUDA tests,
#   4. bench_cuda (C++17 build only: Google Benchmark is a C++17 build),
#   5. PPO on CartPole with the policy on the GPU, then on the CPU.
# Every step has a time limit, so a hang costs its step, not the lease. Logs
# go to $1 (default gpu-logs/), at most 8 files; the last lines (summary.txt)
# summarize.
#   .ci/gpu_verify.sh "$OUT"
# Environment: GPU_VERIFY_STD (standards, default "17"; LibTorch 2.13 and
# later need 20), TORCH_DIR (a folder with TorchConfig.cmake, default the
# python3 torch's), GPU_VERIFY_TESTS_ONLY=1 (the build and the suite alone,
# for a rerun after a fix), GPU_VERIFY_BACKTRACES=0 (no backtraces of
# crashed tests).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
logs="$(mkdir -p "${1:-gpu-logs}" && cd "${1:-gpu-logs}" && pwd)"
deps="$ROOT/third_party_local"
jobs="$(nproc 2>/dev/null || echo 8)"
summary=()
t_start=$SECONDS
elapsed() { echo "$((SECONDS - t_start)) s"; }

versions="$logs/versions.txt"
if [[ -z "${TORCH_DIR:-}" ]]; then
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
"parallel:", torch.__config__.parallel_info().splitlines()[-3:])' > "$versions" 2>&1
fi
torch_dir="${TORCH_DIR:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')/Torch}"
torch_include="$(cd "$torch_dir/../../.." 2>/dev/null && pwd)/include"
{
  echo "torch_dir $torch_dir"; echo "nproc $jobs"
  cmake --version | head -1; g++ --version | head -1
  command -v nvcc >/dev/null && nvcc --version | tail -2
  command -v ninja >/dev/null && echo "ninja $(ninja --version)"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | head -2
  ls "$torch_include/gloo/config.h" 2>&1
  echo "torch's include: $(ls "$torch_include" | tr '\n' ' ')"
} >> "$versions" 2>&1
cat "$versions"

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# Gloo's headers: torch's own or the system's where there are any, else
# Debian 12's (gpu_deps.sh).
gloo=()
if [[ ! -f "$torch_include/gloo/config.h" && ! -f /usr/include/gloo/config.h &&
      -f "$deps/gloo/include/gloo/config.h" ]]; then
  gloo=(-DTENSORDICT_GLOO_INCLUDE_DIR="$deps/gloo/include")
fi

configure() {  # configure <build dir> <std> [extra args...]
  local dir="$1" std="$2"; shift 2
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD="$std" \
    -DTorch_DIR="$torch_dir" -DTENSORDICT_BUILD_EXAMPLES=ON \
    -DTENSORDICT_BUILD_BENCHMARKS="$([[ $std == 17 ]] && echo ON || echo OFF)" \
    -Dbenchmark_DIR="$deps/benchmark/lib/x86_64-linux-gnu/cmake/benchmark" \
    -DTENSORDICT_INSTALL=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
    -DTENSORDICT_FMT_INCLUDE_DIR="$deps/include" \
    -DTENSORDICT_JSON_INCLUDE_DIR="$deps/include" \
    -DTENSORDICT_GTEST_SOURCE_DIR="$deps/googletest" "${gloo[@]}" "$@"
}

# gtest's counts over logs: "<ok> passed, <failed> failed, <skipped> skipped"
# (tests by name, so a shard killed at its time limit still counts what ran).
counts() {
  local ok failed skipped
  ok="$(cat "$@" | grep -o '^\[       OK \] [A-Za-z0-9_]*\.[A-Za-z0-9_/]*' | sort -u | wc -l)"
  failed="$(cat "$@" | grep -o '^\[  FAILED  \] [A-Za-z0-9_]*\.[A-Za-z0-9_/]*' | sort -u | wc -l)"
  skipped="$(cat "$@" | grep -o '^\[  SKIPPED \] [A-Za-z0-9_]*\.[A-Za-z0-9_/]*' | sort -u | wc -l)"
  echo "$ok passed, $failed failed, $skipped skipped"
}

b17=""
for std in ${GPU_VERIFY_STD:-17}; do
  b="build-gpu-cxx$std"
  blog="$logs/build-cxx$std.log"
  # With the CUDA paths (on by default with a CUDA torch); without them if
  # this machine has no nvcc, so that LibTorch 2.x is verified either way.
  if ! configure "$b" "$std" > "$blog" 2>&1; then
    rm -rf "$b"
    if configure "$b" "$std" -DTENSORDICT_CUDA=OFF >> "$blog" 2>&1; then
      summary+=("C++$std: configured WITHOUT the CUDA paths (build-cxx$std.log says why)")
    else
      tail -30 "$blog"
      summary+=("C++$std: configure failed (build-cxx$std.log)"); continue
    fi
  fi
  grep -E "tensordict:|CUDA" "$blog" | grep -v "^--.*Looking" | head -20
  targets=(tensordict_tests tensordict_dist_peer ppo_cartpole)
  [[ $std == 17 ]] && targets+=(bench_cuda)
  if ! timeout 420 cmake --build "$b" -j"$jobs" --target "${targets[@]}" >> "$blog" 2>&1; then
    grep -m 20 -E "error|Error" "$blog"
    summary+=("C++$std: build failed (build-cxx$std.log)"); continue
  fi
  summary+=("C++$std: built at $(elapsed)")
  grep -m1 -o '"command": "[^"]*memmap.cpp' "$b/compile_commands.json" >> "$versions"
  [[ $std == 17 ]] && b17="$b"
  tlog="$logs/tests-cxx$std.log"
  bin="$ROOT/$b/tests/tensordict_tests"
  # 1. The CUDA tests alone.
  (cd tests && timeout 180 "$bin" --gtest_filter='Cuda.*') > "$tlog.cuda" 2>&1
  rc_cuda=$?
  # 2. Every other suite in a process of its own, $jobs at a time, each with
  #    a time limit: a crash or a hang costs its suite, not the run.
  parts="$tlog.d"
  rm -rf "$parts"; mkdir -p "$parts"
  "$bin" --gtest_list_tests --gtest_filter='-Cuda.*' |
    sed -n 's/^\([A-Za-z0-9_]*\)\.$/\1/p' > "$parts/suites"
  xargs -P "$jobs" -I{} bash -c 'cd "$0/tests" && timeout 300 "$1" \
      --gtest_filter="{}.*" > "$2/{}.log" 2>&1; echo "{} $?" >> "$2/exits"' \
    "$ROOT" "$bin" "$parts" < "$parts/suites"
  # A suite that crashed or hung: the test it was running gets a backtrace
  # (cuda-gdb, which also debugs host code), and the suite runs again
  # without it, up to 4 times, so that its other tests still count.
  marks='^\[ RUN      \]|^\[       OK \]|^\[  FAILED  \]|^\[  SKIPPED \]'
  for suite in $(awk '$2 != 0 && $2 != 1 {print $1}' "$parts/exits"); do
    skip="" log="$parts/$suite.log"
    for ((k = 1; k <= 4; ++k)); do
      t="$(grep -E "$marks" "$log" | tail -1 | sed -n 's/^\[ RUN      \] //p')"
      [[ -z "$t" ]] && break  # no test was running: the crash came after them
      skip="${skip:+$skip:}$t"
      if ((k <= 2)) && [[ "${GPU_VERIFY_BACKTRACES:-1}" == 1 ]] &&
         command -v cuda-gdb > /dev/null; then
        echo "=== $t crashed or hung; its backtrace:" >> "$logs/backtraces.txt"
        (cd tests && timeout 120 cuda-gdb -q -batch -ex run -ex bt \
           --args "$bin" --gtest_filter="$t") 2>&1 |
          grep -v '^\[New Thread\|^\[Thread\|^\[Detaching' | tail -60 >> "$logs/backtraces.txt"
      fi
      log="$parts/$suite.again$k.log"
      (cd tests && timeout 300 "$bin" --gtest_filter="$suite.*:-$skip") > "$log" 2>&1
      rc=$?
      ((rc == 0 || rc == 1)) && break
    done
    summary+=("C++$std suite $suite crashed or hung in: ${skip:-(no test running)}")
  done
  cat "$tlog.cuda" "$parts"/*.log > "$tlog"
  summary+=("C++$std CUDA tests: exit $rc_cuda; $(counts "$tlog.cuda")")
  summary+=("C++$std other suites: $(wc -l < "$parts/suites") run, not passing: $(awk '$2 != 0 {print $1 " (exit " $2 ")"}' "$parts/exits" | tr '\n' ' ')")
  summary+=("C++$std whole suite: $(counts "$tlog") at $(elapsed); failed: $(grep -o '^\[  FAILED  \] [A-Za-z0-9_]*\.[A-Za-z0-9_/]*' "$tlog" | sort -u | cut -c14- | tr '\n' ' ')")
  rm -rf "$tlog.cuda" "$parts"
done

if [[ "${GPU_VERIFY_TESTS_ONLY:-0}" == 1 ]]; then
  summary+=("GPU_VERIFY_TESTS_ONLY: compute-sanitizer, bench_cuda and PPO not run; total $(elapsed)")
  printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
  exit 0
fi

san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
# The four tests that need queued GPU work to outlast host calls are left
# out: memcheck serializes kernel launches, and their kernels (LibTorch's
# matrix products, and the fused copies the other tests cover) add nothing.
san_filter='Cuda.*:-Cuda.RecordStreamKeepsMemoryUntilTheStreamIsDone:Cuda.ReplayBufferOrdersCallsFromDifferentStreams:Cuda.ReplayBufferCallsDoNotWaitForTheGpu:Cuda.NonBlockingMoveOfALargeDictRunsOnTheCurrentStream'
if [[ -x "$san" && -n "$b17" ]] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  (cd tests && timeout 240 "$san" --tool memcheck --error-exitcode 1 \
     "$ROOT/$b17/tests/tensordict_tests" --gtest_filter="$san_filter") \
    > "$logs/compute-sanitizer.log" 2>&1
  summary+=("compute-sanitizer memcheck over Cuda.* (but the 4 stream-timing tests): exit $?; $(counts "$logs/compute-sanitizer.log"); $(grep -E '^========= (ERROR SUMMARY|Target application returned)' "$logs/compute-sanitizer.log" | tr '\n' ' ') at $(elapsed)")
else
  summary+=("compute-sanitizer: not run (no sanitizer, no C++17 build or no GPU)")
fi

if [[ -n "$b17" && -x $b17/bench_cuda ]]; then
  LD_LIBRARY_PATH="$deps/benchmark/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" \
    timeout 180 "$b17/bench_cuda" --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true > "$logs/bench_cuda.log" 2>&1
  summary+=("bench_cuda: exit $? at $(elapsed); $(grep -E 'x  \(target|ns  \(target' "$logs/bench_cuda.log" | tr -s ' ' | tr '\n' ';')")
fi
b="${b17:-build-gpu-cxx${GPU_VERIFY_STD:-17}}"
if [[ -x $b/ppo_cartpole ]]; then
  plog="$logs/ppo.log"
  : > "$plog"
  for dev in cuda cpu; do
    echo "=== ppo_cartpole --device $dev" >> "$plog"
    timeout 90 "$b/ppo_cartpole" --device "$dev" > "$logs/ppo_$dev.tmp" 2>&1
    rc=$?
    cat "$logs/ppo_$dev.tmp" >> "$plog"
    summary+=("ppo_cartpole --device $dev: exit $rc; $(grep -v '^=' "$logs/ppo_$dev.tmp" | tail -1)")
    rm -f "$logs/ppo_$dev.tmp"
  done
fi

summary+=("total $(elapsed)")
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
