#!/usr/bin/env bash
# benchmarks/envs.cpp's Pendulum cases and benchmarks/collectors.cpp's
# TorchRL case next to TorchRL 0.14's (benchmarks/python/torchrl_envs.py,
# torchrl_collectors.py), in the same run, inside the Debian sid root
# (LibTorch 2.14 for this library; TorchRL 0.14 on torch 2.14):
#   benchmarks/compare_torchrl_envs.sh
# Builds bench_envs and bench_collectors in build-sid-bench/, runs both
# sides one after the other on a quiet machine, and prints frames per
# second and the ratios.
#
# BLAS: Debian's LibTorch and python3-torch call the system's BLAS, the
# libblas.so.3 alternative: the reference BLAS (libblas3, Debian's default)
# unless another is installed. `BLAS=openblas` runs both sides on OpenBLAS
# (Debian's libopenblas0-pthread, installed in the root by this script,
# the root's default left as it was; one BLAS thread), as pytorch.org's
# builds run on MKL; the policy's matrix products are then 10x faster.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CHROOT="$ROOT/../shared/debian-chroot/chroot.sh"
SETUP="$ROOT/../shared/python-reference/setup-newest.sh"
BLAS_ENV=""
if [[ "${BLAS:-}" == openblas ]]; then
  bash "$CHROOT" sid setup libopenblas0-pthread
  # Installing it makes it the default: put the reference BLAS back.
  bash "$CHROOT" sid run "
    update-alternatives --set libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/blas/libblas.so.3
    update-alternatives --set liblapack.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3" > /dev/null
  BLAS_ENV="export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread OPENBLAS_NUM_THREADS=1"
elif [[ -n "${BLAS:-}" ]]; then
  echo "BLAS must be empty (the system's) or openblas, got '$BLAS'" >&2
  exit 2
fi
bash "$CHROOT" sid run "set -e
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  cmake -S . -B build-sid-bench -DCMAKE_BUILD_TYPE=Release \
    -DTENSORDICT_BUILD_TESTS=OFF -DTENSORDICT_BUILD_EXAMPLES=OFF \
    -DTENSORDICT_BUILD_BENCHMARKS=ON -DTENSORDICT_INSTALL=OFF > /dev/null
  cmake --build build-sid-bench -j2 --target bench_envs bench_collectors > /dev/null
  $BLAS_ENV
  ./build-sid-bench/bench_envs --benchmark_filter=Pendulum \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out=build-sid-bench/envs.csv --benchmark_out_format=csv \
    > /dev/null 2>&1
  ./build-sid-bench/bench_collectors --benchmark_filter=Pendulum \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_out=build-sid-bench/collectors.csv --benchmark_out_format=csv \
    > /dev/null 2>&1
  ours=\$(grep -h '_median' build-sid-bench/envs.csv build-sid-bench/collectors.csv)
  pyref=\"\$(bash '$SETUP' | tail -n 1)\"
  theirs=\$(env \$pyref benchmarks/python/torchrl_envs.py; env \$pyref benchmarks/python/torchrl_collectors.py)
  python3 - \"\$ours\" \"\$theirs\" <<'PY'
import csv, io, sys
ours = {}
rows = list(csv.reader(io.StringIO(sys.argv[1])))
for row in rows:
    name = row[0].strip('\"').split('/')[0].replace('BM_', '').replace('_median', '')
    # The frames_per_s counter is the last column Google Benchmark wrote.
    values = [v for v in row[1:] if v]
    ours[name] = float(values[-1])
theirs = {l.split()[0]: float(l.split()[1]) for l in sys.argv[2].splitlines() if l.strip()}
targets = {'PendulumBatched16Rollout200': 30, 'PendulumSerialEnv16Rollout200': 50,
           'PendulumParallelEnv2Rollout200': 50, 'CollectorSerialEnv16PendulumMLP': 50}
# TorchRL's ParallelEnv runs processes: ours on processes is compared too.
rows = list(theirs.items())
if 'PendulumParallelEnv2Rollout200' in theirs:
    # For information (docs/performance.md): the target is the threads'.
    rows.append(('PendulumParallelEnv2ProcessesRollout200',
                 theirs['PendulumParallelEnv2Rollout200']))
for name, fps in rows:
    mine = ours.get(name)
    if mine is None:
        continue
    ratio = mine / fps
    t = targets.get(name)
    verdict = '' if t is None else f'  (target >= {t}x: {\"met\" if ratio >= t else \"NOT met\"})'
    print(f'{name:41s} ours {mine:12,.0f} frames/s  TorchRL 0.14 {fps:10,.0f} frames/s  {ratio:7.1f}x{verdict}')
PY
"
