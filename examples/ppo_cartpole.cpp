// examples/ppo_cartpole.cpp — PPO solves CartPole-v1 with RolloutBuffer.
//
// A complete on-policy training loop built on TensorDict: every env step is
// one `[E]` dict written into a `[T, E]` RolloutBuffer, the critic's values
// are computed in one batched forward pass over the whole rollout, GAE fills
// "advantage" and "value_target", and the PPO epochs iterate over shuffled
// minibatch dicts.
//
// Usage: ppo_cartpole [--seed N] [--max-steps N]
//
// It stops as soon as the mean return of the last 20 finished episodes
// reaches 475 (CartPole-v1's "solved" threshold; episodes are truncated at
// 500 steps), and exits 1 if that does not happen within --max-steps env
// steps. With TENSORDICT_EXAMPLE_QUICK=1 (sanitizer CI) it runs two
// iterations and exits 0.
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cartpole.h"

using tensordict::RolloutBuffer;
using tensordict::TensorDict;

namespace {

struct Config {
  uint64_t seed = 1;
  int64_t max_steps = 500000;
  int64_t num_envs = 8;
  int64_t num_steps = 128;  // per env and rollout: 1024 transitions
  int64_t epochs = 10;
  int64_t minibatches = 4;
  double lr = 1e-3;  // annealed linearly to 0 over max_steps
  double gamma = 0.99;
  double lambda = 0.95;
  double clip = 0.2;
  double value_coef = 0.5;
  double entropy_coef = 0.01;
  double max_grad_norm = 0.5;
  double solved_return = 475.0;
  size_t solved_window = 20;
};

// tanh MLP with orthogonal init (hidden gain sqrt(2), bias 0), as in the
// reference PPO implementations.
torch::nn::Sequential mlp(int64_t in, int64_t out, double out_gain) {
  torch::nn::Sequential net(torch::nn::Linear(in, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, out));
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& module : net->modules(/*include_self=*/false)) {
    if (auto* lin = module->as<torch::nn::Linear>()) {
      const double gain = ++i == 3 ? out_gain : std::sqrt(2.0);
      torch::nn::init::orthogonal_(lin->weight, gain);
      torch::nn::init::zeros_(lin->bias);
    }
  }
  return net;
}

double mean_last(const std::vector<double>& v, size_t n) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(n, v.size());
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(k), v.end(),
                         0.0) /
         static_cast<double>(k);
}

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
    } else {
      std::fprintf(stderr, "usage: %s [--seed N] [--max-steps N]\n", argv[0]);
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
  cartpole::CartPoleVec env(E, cfg.seed);
  torch::nn::Sequential actor =
      mlp(cartpole::CartPoleVec::kObsDim, cartpole::CartPoleVec::kNumActions,
          0.01);
  torch::nn::Sequential critic = mlp(cartpole::CartPoleVec::kObsDim, 1, 1.0);
  std::vector<torch::Tensor> params = actor->parameters();
  for (const auto& p : critic->parameters()) params.push_back(p);
  torch::optim::Adam opt(params,
                         torch::optim::AdamOptions(cfg.lr).eps(1e-5));

  RolloutBuffer buffer(T, E);
  at::Tensor obs = env.observation();
  int64_t env_steps = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  auto solved = [&] {
    return env.finished_returns().size() >= cfg.solved_window &&
           mean_last(env.finished_returns(), cfg.solved_window) >=
               cfg.solved_return;
  };

  const int64_t max_iters = quick ? 2 : cfg.max_steps / (T * E);
  std::printf("PPO on CartPole-v1: %lld envs x %lld steps per rollout, "
              "seed %llu, budget %lld env steps%s\n",
              static_cast<long long>(E), static_cast<long long>(T),
              static_cast<unsigned long long>(cfg.seed),
              static_cast<long long>(cfg.max_steps),
              quick ? " (quick mode: 2 iterations)" : "");
  int64_t iter = 0;
  for (; iter < max_iters && !solved(); ++iter) {
    // ---- Rollout: one [E] dict per step, written into the [T, E] buffer.
    {
      torch::NoGradGuard no_grad;
      for (int64_t t = 0; t < T; ++t) {
        const at::Tensor log_probs =
            torch::log_softmax(actor->forward(obs), /*dim=*/-1);
        const at::Tensor action =
            torch::multinomial(log_probs.exp(), 1, false, gen).squeeze(-1);
        TensorDict step = env.step(action);  // ("next", ...) keys, [E]
        step.set("observation", obs);
        step.set("action", action);
        step.set("sample_log_prob",
                 log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1));
        buffer.step(t, step);
        obs = env.observation();  // already reset where an episode ended
      }
      env_steps += T * E;

      // ---- Values in one batched forward each, then GAE.
      const TensorDict data = buffer.data();
      data.set("state_value", critic->forward(data.get("observation")));
      data.set({"next", "state_value"},
               critic->forward(data.get({"next", "observation"})));
      buffer.compute_gae(cfg.gamma, cfg.lambda);
    }

    // ---- PPO epochs over shuffled minibatches of the flat [T * E] batch.
    const double frac = 1.0 - static_cast<double>(env_steps - T * E) /
                                  static_cast<double>(cfg.max_steps);
    for (auto& group : opt.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options())
          .lr(cfg.lr * std::max(frac, 0.0));
    }
    double last_loss = 0.0;
    for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
      for (const TensorDict& mb : buffer.minibatches(cfg.minibatches, gen)) {
        const at::Tensor mb_obs = mb.get("observation");
        at::Tensor adv = mb.get("advantage").squeeze(-1);
        adv = (adv - adv.mean()) / (adv.std() + 1e-8);
        const at::Tensor log_probs =
            torch::log_softmax(actor->forward(mb_obs), -1);
        const at::Tensor log_prob =
            log_probs.gather(-1, mb.get("action").unsqueeze(-1)).squeeze(-1);
        const at::Tensor entropy = -(log_probs.exp() * log_probs).sum(-1).mean();
        const at::Tensor ratio = (log_prob - mb.get("sample_log_prob")).exp();
        const at::Tensor policy_loss =
            -torch::min(ratio * adv,
                        ratio.clamp(1.0 - cfg.clip, 1.0 + cfg.clip) * adv)
                 .mean();
        const at::Tensor value = critic->forward(mb_obs);
        const at::Tensor value_loss =
            0.5 * (value - mb.get("value_target")).pow(2).mean();
        const at::Tensor loss = policy_loss + cfg.value_coef * value_loss -
                                cfg.entropy_coef * entropy;
        opt.zero_grad();
        loss.backward();
        torch::nn::utils::clip_grad_norm_(params, cfg.max_grad_norm);
        opt.step();
        last_loss = loss.item<double>();
      }
    }

    const double secs = elapsed();
    std::printf("iter %4lld  env steps %7lld  episodes %5zu  "
                "mean return (last %zu) %6.1f  loss %8.4f  %6.0f steps/s\n",
                static_cast<long long>(iter + 1),
                static_cast<long long>(env_steps),
                env.finished_returns().size(), cfg.solved_window,
                mean_last(env.finished_returns(), cfg.solved_window),
                last_loss, static_cast<double>(env_steps) / secs);
    std::fflush(stdout);
  }

  const double secs = elapsed();
  const double ret = mean_last(env.finished_returns(), cfg.solved_window);
  if (quick) {
    std::printf("quick mode: %lld iterations, %lld env steps in %.1f s\n",
                static_cast<long long>(iter),
                static_cast<long long>(env_steps), secs);
    return 0;
  }
  if (solved()) {
    std::printf("SOLVED: mean return %.1f over the last %zu episodes after "
                "%lld env steps, %lld iterations, %.1f s (%.0f steps/s)\n",
                ret, cfg.solved_window, static_cast<long long>(env_steps),
                static_cast<long long>(iter), secs,
                static_cast<double>(env_steps) / secs);
    return 0;
  }
  std::printf("NOT SOLVED: mean return %.1f over the last %zu episodes after "
              "%lld env steps (budget %lld), %.1f s\n",
              ret, cfg.solved_window, static_cast<long long>(env_steps),
              static_cast<long long>(cfg.max_steps), secs);
  return 1;
}
