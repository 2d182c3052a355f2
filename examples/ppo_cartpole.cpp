// examples/ppo_cartpole.cpp — PPO solves CartPole-v1 with a Collector and
// a RolloutBuffer.
//
// A complete on-policy training loop built on TensorDict: a Collector
// (tensordict/collectors.h) runs the policy in the library's CartPoleEnv
// (batched over E envs, with RewardSum for the episodes' returns) and
// writes each of the T steps of a batch straight into a `[T, E]`
// RolloutBuffer; the critic's values are computed in one batched forward
// pass over the whole rollout, GAE fills "advantage" and "value_target",
// and the PPO epochs iterate over shuffled minibatch dicts.
//
// Usage: ppo_cartpole [--seed N] [--max-steps N] [--device cpu|cuda]
//
// With --device cuda the policy, the critic and the rollout buffer live on
// the GPU (the collector's `policy_device`); the environments stay on the
// CPU, and each step's observations cross over to the GPU and its actions
// back.
//
// It stops as soon as the mean return of the last 20 finished episodes
// reaches 475 (CartPole-v1's "solved" threshold; episodes are truncated at
// 500 steps), and exits 1 if that does not happen within --max-steps env
// steps. With TENSORDICT_EXAMPLE_QUICK=1 (sanitizer CI) it runs two
// iterations and exits 0.
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ppo.h"

using tensordict::RolloutBuffer;

namespace {

struct Config {
  uint64_t seed = 1;
  at::Device device = at::kCPU;
  int64_t max_steps = 500000;
  int64_t num_envs = 8;
  int64_t num_steps = 128;  // per env and rollout: 1024 transitions
  ppo::Hyper hyper;
};

using ppo::mean_last;

bool parse_args(int argc, char** argv, Config& cfg) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seed" || arg == "--max-steps") && i + 1 < argc) {
      const long long v = std::atoll(argv[++i]);
      if (arg == "--seed") {
        cfg.seed = static_cast<uint64_t>(v);
      } else {
        cfg.max_steps = v;
      }
    } else if (arg == "--device" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "cpu" && d != "cuda") {
        std::fprintf(stderr, "--device: expected cpu or cuda, got %s\n",
                     d.c_str());
        return false;
      }
      if (d == "cuda" && !torch::cuda::is_available()) {
        std::fprintf(stderr, "--device cuda: no CUDA device is available\n");
        return false;
      }
      cfg.device =
          d == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seed N] [--max-steps N] [--device cpu|cuda]\n",
                   argv[0]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!parse_args(argc, argv, cfg)) return 2;
  const char* quick_env = std::getenv("TENSORDICT_EXAMPLE_QUICK");
  const bool quick = quick_env != nullptr && std::strcmp(quick_env, "1") == 0;
  // The networks are tiny: intra-op threads cost more than they give (with
  // 2 threads on a shared 2-core machine one run took 39 s instead of 7 s).
  at::set_num_threads(1);
  torch::manual_seed(cfg.seed);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);

  const int64_t E = cfg.num_envs;
  const int64_t T = cfg.num_steps;
  const ppo::Hyper& h = cfg.hyper;
  const at::Device device = cfg.device;
  ppo::Agent agent(/*obs_dim=*/4, ppo::Discrete{2}, h.lr, gen, device);
  // E CartPoles with categorical actions (0: push left, 1: push right);
  // RewardSum keeps each episode's return in "episode_reward".
  auto env = std::make_unique<tensordict::TransformedEnv>(
      std::make_unique<tensordict::CartPoleEnv>(
          std::vector<int64_t>{E}, /*categorical_action_encoding=*/true),
      std::make_shared<tensordict::RewardSum>());
  env->set_seed(cfg.seed);
  // Each batch: T steps of the E envs, written into the [T, E] buffer.
  RolloutBuffer buffer(T, E, device);
  const int64_t max_iters = quick ? 2 : cfg.max_steps / (T * E);
  tensordict::Collector collector(std::move(env), agent.policy,
                                  tensordict::CollectorOptions(T * E)
                                      .total_frames(max_iters * T * E)
                                      .policy_device(device)
                                      .rollout_buffer(&buffer));

  std::vector<double> returns;  // of every finished episode, in order
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  auto solved = [&] {
    return returns.size() >= h.solved_window &&
           mean_last(returns, h.solved_window) >= h.solved_return;
  };

  std::printf(
      "PPO on CartPole-v1: %lld envs x %lld steps per rollout, "
      "seed %llu, device %s, budget %lld env steps%s\n",
      static_cast<long long>(E), static_cast<long long>(T),
      static_cast<unsigned long long>(cfg.seed), device.str().c_str(),
      static_cast<long long>(cfg.max_steps),
      quick ? " (quick mode: 2 iterations)" : "");
  int64_t iter = 0;
  for (; !collector.finished() && !solved(); ++iter) {
    (void)collector.next();  // T steps of the E envs, now in `buffer`
    ppo::episode_returns(buffer.data(), returns);
    // ---- Values in one batched forward each, then GAE.
    agent.gae(buffer, h);
    // ---- PPO epochs over shuffled minibatches of the flat [T * E] batch.
    const double last_loss =
        agent.learn(buffer, h, collector.frames(), T * E, cfg.max_steps, gen);

    std::printf(
        "iter %4lld  env steps %7lld  episodes %5zu  "
        "mean return (last %zu) %6.1f  loss %8.4f  %6.0f steps/s\n",
        static_cast<long long>(iter + 1),
        static_cast<long long>(collector.frames()), returns.size(),
        h.solved_window, mean_last(returns, h.solved_window), last_loss,
        static_cast<double>(collector.frames()) / elapsed());
    std::fflush(stdout);
  }
  const int64_t env_steps = collector.frames();

  const double secs = elapsed();
  const double ret = mean_last(returns, h.solved_window);
  if (quick) {
    std::printf("quick mode: %lld iterations, %lld env steps in %.1f s\n",
                static_cast<long long>(iter), static_cast<long long>(env_steps),
                secs);
    return 0;
  }
  if (solved()) {
    std::printf(
        "SOLVED: mean return %.1f over the last %zu episodes after "
        "%lld env steps, %lld iterations, %.1f s (%.0f steps/s)\n",
        ret, h.solved_window, static_cast<long long>(env_steps),
        static_cast<long long>(iter), secs,
        static_cast<double>(env_steps) / secs);
    return 0;
  }
  std::printf(
      "NOT SOLVED: mean return %.1f over the last %zu episodes after "
      "%lld env steps (budget %lld), %.1f s\n",
      ret, h.solved_window, static_cast<long long>(env_steps),
      static_cast<long long>(cfg.max_steps), secs);
  return 1;
}
