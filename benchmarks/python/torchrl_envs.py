"""TorchRL 0.14's side of benchmarks/envs.cpp's Pendulum cases, in frames
per second (one thread; the median of 5 timed runs after a warm-up).

Run by benchmarks/compare_torchrl_envs.sh inside the Debian sid root, with
the newest reference Python (../shared/python-reference/setup-newest.sh).
Prints one "<case> <frames per second>" line per case.
"""
import statistics
import time

import torch
from torchrl.envs import ParallelEnv, PendulumEnv, SerialEnv


def frames_per_second(run, frames, repeats=5):
    run()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return frames / statistics.median(times)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)

    batched = PendulumEnv(seed=0)

    def batched_rollout():
        td = batched.reset(batched.gen_params(batch_size=[16]))
        batched.rollout(200, tensordict=td, auto_reset=False,
                        break_when_any_done=False)

    print("PendulumBatched16Rollout200",
          frames_per_second(batched_rollout, 16 * 200))

    single = PendulumEnv(seed=0)
    print("PendulumRollout1000",
          frames_per_second(
              lambda: single.rollout(1000, break_when_any_done=False), 1000))

    serial = SerialEnv(16, PendulumEnv)
    serial.set_seed(0)
    print("PendulumSerialEnv16Rollout200",
          frames_per_second(
              lambda: serial.rollout(200, break_when_any_done=False), 16 * 200))
    serial.close()

    parallel = ParallelEnv(2, PendulumEnv)
    parallel.set_seed(0)
    print("PendulumParallelEnv2Rollout200",
          frames_per_second(
              lambda: parallel.rollout(200, break_when_any_done=False), 2 * 200,
              repeats=3))
    parallel.close()


if __name__ == "__main__":
    main()
