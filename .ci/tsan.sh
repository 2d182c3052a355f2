#!/usr/bin/env bash
# ThreadSanitizer over the library's threads: the library and the tests
# built with -fsanitize=thread (CMake's TENSORDICT_SANITIZE_THREAD) in
# build-tsan/, then the tests that run threads, which must finish with no
# report (halt_on_error: the first report fails the run).
#   .ci/tsan.sh              the default suites below
#   .ci/tsan.sh FILTER       a gtest filter instead
# What runs by default: the environments (Envs.*), SerialEnv and the thread
# ParallelEnv (BatchedEnvs: every test but those that fork worker processes,
# which TSan does not follow), the transforms, and the collectors (their
# worker threads feeding replay buffers while a learner samples), and
# HERReplayBuffer written and sampled by threads together. LibTorch itself is not
# instrumented: TSan sees the library's own memory accesses and its locks,
# and LibTorch's intra-op threads are kept to one (OMP_NUM_THREADS=1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="$(nproc 2>/dev/null || echo 2)"
BUILD="${BUILD_DIR:-build-tsan}"
FILTER="${1:-Envs.*:BatchedEnvs.*:BatchedEnvs/ParallelModes.*/Threads:Transforms.*:Collector.*:MultiCollectors.*:HERReplayBuffer.ThreadsWriteWhileOthersSample:-BatchedEnvs.AKilled*:BatchedEnvs.AStuckWorkerProcess*:BatchedEnvs.TheDestructorReapsEveryWorkerProcess}"

export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTENSORDICT_SANITIZE_THREAD=ON -DTENSORDICT_BUILD_TESTS=ON \
  -DTENSORDICT_BUILD_EXAMPLES=OFF -DTENSORDICT_BUILD_BENCHMARKS=OFF \
  -DTENSORDICT_INSTALL=OFF > /dev/null
cmake --build "$BUILD" -j"$JOBS" --target tensordict_tests

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
(cd tests && OMP_NUM_THREADS=1 \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4" \
  "$ROOT/$BUILD/tests/tensordict_tests" --gtest_filter="$FILTER") 2>&1 |
  tee "$log" || status=$?
reports="$(grep -c '^WARNING: ThreadSanitizer' "$log" || true)"
echo "ThreadSanitizer reports: $reports"
if ((status != 0 || reports != 0)); then
  exit 1
fi
