"""Makes the TorchScript modules of tests/jit_test.cpp (run from this folder
with Debian's python3-torch 1.13: `python3 make_modules.py`). The .pt files
are checked in next to this script; LibTorch 1.13 and 2.x both load them."""
from typing import Dict, Tuple

import torch


class Policy(torch.nn.Module):
    """Dict[str, Tensor] -> Dict[str, Tensor]: logits from "obs", and the
    observation passed through."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, td: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {"logits": self.linear(td["obs"]), "obs": td["obs"]}


class Nested(torch.nn.Module):
    """Dict[str, Dict[str, Tensor]] -> Dict[str, Tensor]: the sum of each
    sub-dict's leaves."""

    def forward(
        self, td: Dict[str, Dict[str, torch.Tensor]]
    ) -> Dict[str, torch.Tensor]:
        out: Dict[str, torch.Tensor] = {}
        for k, sub in td.items():
            total = torch.zeros(1)
            for v in sub.values():
                total = total + v.sum()
            out[k] = total
        return out


class Mean(torch.nn.Module):
    """The batch mean of "obs" (drops the batch dim) and its batch sum."""

    def forward(self, td: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        return {"mean": td["obs"].mean(0), "sum": td["obs"].sum(0)}


torch.manual_seed(0)
torch.jit.save(torch.jit.script(Policy()), "policy.pt")
torch.jit.save(torch.jit.script(Nested()), "nested.pt")
torch.jit.save(torch.jit.script(Mean()), "mean.pt")


class TwoOut(torch.nn.Module):
    """Two tensors in, a tuple of two out (for TensorDictModule)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return x + y, x * y


torch.jit.save(torch.jit.script(TwoOut()), "two_out.pt")
