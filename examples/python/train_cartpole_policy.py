"""Trains the CartPole policy that examples/deploy_torchscript.cpp runs in
C++, and saves it as TorchScript (docs/tutorials/torchscript.md).

The policy is a small MLP whose forward takes and returns a
Dict[str, Tensor], the TorchScript form of a TensorDict: it reads
"observation" and writes "logits" and "action". It learns, by supervised
imitation, a linear controller that balances the pole (no RL needed for a
deployment demo, and it trains in about a second on a CPU).

Usage: python3 train_cartpole_policy.py OUT.pt   (torch >= 1.13)
"""
import math
import sys
from typing import Dict

import torch


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )

    def forward(self, td: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        logits = self.net(td["observation"])
        return {"logits": logits, "action": logits.argmax(-1)}


def teacher(obs: torch.Tensor) -> torch.Tensor:
    """Push right when the pole falls right (angle and angular velocity),
    corrected for the cart's drift."""
    w = torch.tensor([0.1, 0.5, 10.0, 2.0])
    return (obs @ w > 0).long()


def main(out: str) -> None:
    torch.manual_seed(0)
    policy = Policy()
    optim = torch.optim.Adam(policy.parameters(), lr=1e-2)
    scale = torch.tensor([2.4, 2.0, 12 * 2 * math.pi / 360, 2.0])
    for step in range(1500):
        obs = (torch.rand(512, 4) * 2 - 1) * scale
        loss = torch.nn.functional.cross_entropy(
            policy({"observation": obs})["logits"], teacher(obs)
        )
        optim.zero_grad()
        loss.backward()
        optim.step()
    obs = (torch.rand(10000, 4) * 2 - 1) * scale
    accuracy = (policy({"observation": obs})["action"] == teacher(obs)).float().mean()
    print(f"imitation accuracy {accuracy:.3f}, loss {loss.item():.4f}")
    torch.jit.save(torch.jit.script(policy), out)


if __name__ == "__main__":
    main(sys.argv[1])
