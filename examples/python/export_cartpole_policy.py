"""Exports the CartPole policy of examples/data/cartpole_policy.pt (the
TorchScript that train_cartpole_policy.py trained) with torch.export and
compiles it with AOTInductor into examples/data/cartpole_policy.pt2, the
package that examples/deploy_export.cpp runs (docs/tutorials/export.md).

The same weights, a plain torch.nn.Module (no tensordict needed): forward
takes the keyword "observation" (float32 [batch, 4], batch 1 to 1024) and
returns a dict {"logits": float32 [batch, 2], "action": int64 [batch]}.
Compiled with the oldest torch that has AOTInductor's package loader (2.6:
Debian trixie's python3-torch), the package loads on LibTorch 2.6 and later:
its model calls LibTorch only through AOTInductor's C shim, which later
versions keep, and the script makes it need "libtorch_cpu.so" rather than
the compiling torch's own soname (Debian's are versioned:
libtorch_cpu.so.2.6), so that whichever LibTorch the program has serves it.

Rebuild (from the repository root):
  ../shared/debian-chroot/chroot.sh trixie run \
      'python3 examples/python/export_cartpole_policy.py'
(or python3 examples/python/export_cartpole_policy.py [SCRIPTED.pt OUT.pt2]
with any torch >= 2.6.)
"""
import os
import re
import sys
import zipfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aoti_package import compile_package  # noqa: E402


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )

    def forward(self, observation):
        logits = self.net(observation)
        return {"logits": logits, "action": logits.argmax(-1)}


INPUTS = [{"name": "observation", "dtype": "float32", "shape": [None, 4],
           "dynamic": {"0": [1, 1024]}}]


def portable(path):
    """Rewrites the package's model library to need "libtorch_cpu.so"
    (the soname padded with NULs in place: the string table keeps its
    size)."""
    with zipfile.ZipFile(path) as package:
        entries = [(info, package.read(info)) for info in package.infolist()]
    with zipfile.ZipFile(path, "w") as package:
        for info, data in entries:
            if info.filename.endswith(".so"):
                needed = re.findall(rb"\0libtorch_cpu\.so\.[0-9.]+\0", data)
                assert len(needed) == 1, needed
                name = b"\0libtorch_cpu.so\0"
                data = data.replace(needed[0], name.ljust(len(needed[0]), b"\0"))
            package.writestr(info, data)


def main(scripted, out):
    policy = Policy()
    policy.load_state_dict(torch.jit.load(scripted).state_dict())
    policy.eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        program = torch.export.export(
            policy,
            args=(),
            kwargs={"observation": torch.zeros(8, 4)},
            dynamic_shapes={"observation": {0: batch}},
        )
        compile_package(program, out, INPUTS)
    portable(out)
    print(f"wrote {out} (torch {torch.__version__})")


if __name__ == "__main__":
    args = sys.argv[1:] or ["examples/data/cartpole_policy.pt",
                            "examples/data/cartpole_policy.pt2"]
    main(*args)
