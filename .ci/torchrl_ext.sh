#!/usr/bin/env bash
# Builds TorchRL 0.4's C++ extension, torchrl._torchrl (the segment trees of
# its PrioritizedSampler), which ../shared/python-reference/setup.sh does not
# build, into OUT_DIR (skipped when it is there). The Python reference tests
# put OUT_DIR on torchrl's package path (TENSORDICT_TORCHRL_EXT); without it,
# their PrioritizedSampler cases skip.
#
# Usage: .ci/torchrl_ext.sh PYREF_PYTHONPATH OUT_DIR
#   PYREF_PYTHONPATH: the PYTHONPATH of the prefix setup.sh prints last.
set -euo pipefail
pydir="$1"
out="$2"
PY=/usr/bin/python3
src="$(readlink -f "$pydir/torchrl")/csrc/pybind.cpp"
suffix="$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
so="$out/_torchrl$suffix"
if [[ ! -f "$so" ]]; then
  torch_dir="$($PY -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  abi="$($PY -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
  mkdir -p "$out"
  g++ -O1 -std=c++17 -shared -fPIC -w $($PY -m pybind11 --includes) \
    -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" \
    -DTORCH_EXTENSION_NAME=_torchrl -DTORCH_API_INCLUDE_EXTENSION_H \
    -D_GLIBCXX_USE_CXX11_ABI="$abi" "$src" -o "$so.tmp" \
    -L"$torch_dir/lib" -ltorch_python -Wl,-rpath,"$torch_dir/lib"
  mv "$so.tmp" "$so"
fi
echo "$out"
