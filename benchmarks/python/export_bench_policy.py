"""The policy of benchmarks/export.cpp, in the forms it compares: an MLP
4 -> 64 -> 64 -> 2 (tanh) as a tensordict TensorDictModule exported with
torch.export (dynamic batch 1 to 1024) and compiled by AOTInductor
(mlp.pt2, as examples/python/export_policy.py compiles its packages), and
the same network as TorchScript (mlp_ts.pt).

Usage: python3 export_bench_policy.py OUT_DIR   (the Debian sid root, with
../shared/python-reference/setup-newest.sh; run by
benchmarks/compare_export.sh)
"""
import os
import runpy
import sys

import torch
from tensordict.nn import TensorDictModule


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    example = runpy.run_path(
        os.path.join(here, "..", "..", "examples", "python", "export_policy.py")
    )
    torch.manual_seed(0)
    net = example["mlp"](2)
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])
    example["export"](policy, os.path.join(out_dir, "mlp.pt2"))
    torch.jit.save(torch.jit.script(net), os.path.join(out_dir, "mlp_ts.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
