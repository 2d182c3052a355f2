"""TorchRL 0.14's side of benchmarks/collectors.cpp's third case:
Collector(SerialEnv(16, PendulumEnv), MLP 64x64), in frames per second
(one thread; the median of 3 timed runs of 16,000 frames after a warm-up).

Run by benchmarks/compare_torchrl_collectors.sh inside the Debian sid root,
with the newest reference Python (../shared/python-reference/
setup-newest.sh). Prints "<case> <frames per second>".
"""
import statistics
import time

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.envs import PendulumEnv, SerialEnv


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 1))
    policy = TensorDictSequential(
        TensorDictModule(lambda th, thdot: torch.stack([th, thdot], -1),
                         in_keys=["th", "thdot"], out_keys=["x"]),
        TensorDictModule(net, in_keys=["x"], out_keys=["action"]))
    frames = 16000

    def run():
        env = SerialEnv(16, PendulumEnv)
        env.set_seed(0)
        collector = Collector(env, policy, frames_per_batch=1600,
                              total_frames=frames)
        for _ in collector:
            pass
        collector.shutdown()

    run()  # warm-up
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    print("CollectorSerialEnv16PendulumMLP", frames / statistics.median(times))


if __name__ == "__main__":
    main()
