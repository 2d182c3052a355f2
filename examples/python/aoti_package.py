"""Compiles a torch.export program into an AOTInductor package that
tensordict::AOTIModule (<tensordict/export.h>) reads fully: its weights stay
replaceable constants, batch 1 passes, and metadata describes its inputs and
weights (docs/tutorials/export.md). Shared by export_policy.py and
export_cartpole_policy.py; torch >= 2.6.
"""
import json

import torch


def inductor_configs(program, inputs):
    """`inputs`: what AOTIModule checks each input against, in call order:
    [{"name": keyword or "" for a positional one, "dtype": "float32",
      "shape": [None, 4], "dynamic": {"0": [1, 1024]}}]  (None: a dynamic
    dim, whose range "dynamic" gives).

    Runtime constant folding keeps every parameter a constant that
    update_weights can replace (without it, AOTInductor folds some away:
    they could not be updated). check_lowerbound=False lets batch 1 pass
    the model's own checks (torch.export specializes 0 and 1). The weights'
    shapes go into the metadata for LibTorch versions whose runner cannot
    tell them (before 2.10)."""
    constants = {
        name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
        for name, t in program.state_dict.items()
    }
    configs = {
        "aot_inductor.use_runtime_constant_folding": True,
        "aot_inductor.metadata": {
            "tensordict.inputs": json.dumps(inputs),
            "tensordict.constants": json.dumps(constants),
        },
    }
    if hasattr(torch._inductor.config.aot_inductor, "check_lowerbound"):
        configs["aot_inductor.check_lowerbound"] = False  # torch >= 2.8
    return configs


def compile_package(program, path, inputs):
    """aoti_compile_and_package with inductor_configs(program, inputs)."""
    return torch._inductor.aoti_compile_and_package(
        program, package_path=path, inductor_configs=inductor_configs(program, inputs)
    )
