"""Exports tensordict policies with torch.export and compiles them with
AOTInductor into .pt2 packages, for tensordict::AOTIModule
(<tensordict/export.h>, docs/tutorials/export.md).

Two policies, seeded, reading "observation" (float32 [batch, 4]):
  - mlp: a TensorDictModule, MLP 4 -> 64 -> 64 -> 2 (tanh), writing
    "logits";
  - tanh_normal: a ProbabilisticTensorDictSequential, the MLP's 4 outputs
    split into "loc" and "scale" (NormalParamExtractor), then a TanhNormal
    in deterministic mode (its mode), writing "action".
Each is exported with a dynamic batch dim (1 to 1024) and compiled for the
CPU. With --check DIR, the script also writes, as memmap directories under
DIR, what a C++ test compares against: the inputs at batch 1 and 64 and
each policy's outputs; the MLP's parameters changed (from_module's layout,
"mlp_params") and its outputs with them.

Usage: python3 export_policy.py OUT_DIR [--check DIR]
  (torch >= 2.6 and tensordict >= 0.6; writes OUT_DIR/mlp.pt2 and
  OUT_DIR/tanh_normal.pt2)
"""
import argparse
import os
import sys

import torch
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torchrl.modules import TanhNormal
from tensordict.nn import InteractionType, set_interaction_type

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aoti_package import compile_package  # noqa: E402


def mlp(out_features):
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, out_features),
    )


def policies():
    torch.manual_seed(0)
    logits = TensorDictModule(mlp(2), in_keys=["observation"], out_keys=["logits"])
    params = TensorDictModule(
        torch.nn.Sequential(mlp(4), NormalParamExtractor()),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    actor = ProbabilisticTensorDictSequential(
        params,
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -2.0, "high": 2.0},
        ),
    )
    return {"mlp": logits, "tanh_normal": actor}


# What AOTIModule checks its inputs against (aoti_package.inductor_configs).
INPUTS = [{"name": "observation", "dtype": "float32", "shape": [None, 4],
           "dynamic": {"0": [1, 1024]}}]


def export(policy, path):
    batch = torch.export.Dim("batch", min=1, max=1024)
    obs = torch.zeros(8, 4)
    with set_interaction_type(InteractionType.DETERMINISTIC), torch.no_grad():
        program = torch.export.export(
            policy,
            args=(),
            kwargs={"observation": obs},
            dynamic_shapes={"observation": {0: batch}},
        )
        compile_package(program, path, INPUTS)


def outputs(policy, obs):
    with set_interaction_type(InteractionType.DETERMINISTIC), torch.no_grad():
        return policy(TensorDict({"observation": obs}, batch_size=obs.shape[:1]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--check")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    made = policies()
    for name, policy in made.items():
        export(policy, os.path.join(args.out_dir, name + ".pt2"))
    if args.check is None:
        return
    torch.manual_seed(1)
    for batch in (1, 64):
        obs = torch.randn(batch, 4)
        out = TensorDict({"observation": obs}, batch_size=[batch])
        for name, policy in made.items():
            out[name] = outputs(policy, obs).exclude("observation")
        out.memmap(os.path.join(args.check, f"batch{batch}"))
    # New weights for the MLP, as a learner would send them.
    params = TensorDict.from_module(made["mlp"])
    new = params.apply(lambda p: p * 0.5 + 0.01)
    new.memmap(os.path.join(args.check, "mlp_params"))
    new.to_module(made["mlp"])
    obs = torch.randn(64, 4)
    check = TensorDict({"observation": obs}, batch_size=[64])
    check["mlp"] = outputs(made["mlp"], obs).exclude("observation")
    check.memmap(os.path.join(args.check, "mlp_new_weights"))


if __name__ == "__main__":
    main()
