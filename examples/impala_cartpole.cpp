// examples/impala_cartpole.cpp — IMPALA-style actor-learner training on
// CartPole-v1, with V-trace correcting for the actors' stale policy.
//
// Two actor threads (a MultiAsyncCollector, tensordict/collectors.h) each
// step 8 of the library's CartPoleEnv (with RewardSum for the episodes'
// returns) with the actors' copy of the policy, a Categorical over the
// actor network's logits that writes "action" and its log-probability
// "sample_log_prob" (the behaviour policy's, mu). The learner takes each
// worker's batch as it comes (`[8, 32]`: 8 envs, 32 steps), runs its own
// critic over the batch and its "next" observations, scores the taken
// actions under its own policy (pi), and lets ValueEstimator::vtrace
// (tensordict/returns.h, TorchRL's VTrace) turn the log-ratio
// log pi - log mu into the V-trace targets "value_target" and the
// policy-gradient advantages "advantage", both clipped at rho = c = 1. One
// gradient step per batch:
//
//   loss = -mean(log pi * advantage) + 0.5 * mean((V - value_target)^2)
//          - 0.01 * mean(entropy of pi)
//
// The learner pushes its weights to the actors (`update_policy_weights_`)
// only every kSyncEvery batches, and the actors run ahead of the learner:
// the batches come from a policy a few updates old, which is what V-trace
// corrects for. The two threads interleave as the scheduler lets them, so
// runs with one seed differ.
//
// Usage: impala_cartpole [seed] (default 0).
//
// Success: the mean return of the last 20 finished episodes reaches 475
// (CartPole-v1's threshold; exit code 0), which took 90,000-212,000 env
// steps (3-8 s) over seeds 0-13; otherwise the program exits with 1 after
// kMaxEnvSteps.
// Under TENSORDICT_EXAMPLE_QUICK=1 (sanitized CI runs) it trains on a few
// batches and does not require the target.
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "ppo.h"

using tensordict::TensorDict;

namespace {

constexpr uint64_t kDefaultSeed = 0;
constexpr int64_t kWorkers = 2;
constexpr int64_t kEnvsPerWorker = 8;
constexpr int64_t kSteps = 32;  // per env and batch
constexpr int64_t kMaxEnvSteps = 600000;
constexpr int64_t kSyncEvery = 4;  // batches between two weight pushes
constexpr double kLr = 1e-3;
constexpr double kGamma = 0.99;
constexpr double kValueCoef = 0.5;
constexpr double kEntropyCoef = 0.01;
constexpr double kMaxGradNorm = 0.5;
constexpr size_t kWindow = 20;  // episodes in the success criterion
constexpr double kTarget = 475.0;

}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed =
      argc > 1 ? std::strtoull(argv[1], nullptr, 10) : kDefaultSeed;
  const bool quick = std::getenv("TENSORDICT_EXAMPLE_QUICK") != nullptr;
  at::set_num_threads(1);  // tiny networks: threads cost more than they give
  torch::manual_seed(seed);

  // The learner's actor-critic and the actors' copy of it (examples/ppo.h:
  // tanh MLPs, a Categorical policy writing "action" and
  // "sample_log_prob", a critic writing "state_value"); the actors start
  // from the learner's weights.
  ppo::Agent learner(/*obs_dim=*/4, ppo::Discrete{2}, kLr,
                     at::make_generator<at::CPUGeneratorImpl>(seed));
  ppo::Agent actors(/*obs_dim=*/4, ppo::Discrete{2}, kLr,
                    at::make_generator<at::CPUGeneratorImpl>(seed + 1));
  {
    torch::NoGradGuard no_grad;
    tensordict::from_module(actors.policy)
        .update_(tensordict::from_module(learner.policy));
  }

  const tensordict::EnvFactory make_env = [] {
    return std::make_unique<tensordict::TransformedEnv>(
        std::make_unique<tensordict::CartPoleEnv>(
            std::vector<int64_t>{kEnvsPerWorker},
            /*categorical_action_encoding=*/true),
        std::make_shared<tensordict::RewardSum>());
  };
  const int64_t frames_per_batch = kWorkers * kEnvsPerWorker * kSteps;
  tensordict::MultiAsyncCollector collector(
      std::vector<tensordict::EnvFactory>(kWorkers, make_env), actors.policy,
      tensordict::CollectorOptions(frames_per_batch)
          .total_frames(quick ? 4 * frames_per_batch : kMaxEnvSteps));
  collector.set_seed(seed);
  const tensordict::ValueEstimator vtrace =
      tensordict::ValueEstimator::vtrace(kGamma);

  std::vector<double> returns;  // of every finished episode, in order
  const auto t0 = std::chrono::steady_clock::now();
  int64_t updates = 0;
  int64_t next_report = 20000;
  double last_loss = 0.0;
  bool solved = false;

  while (!collector.finished()) {
    // One worker's batch, [kEnvsPerWorker, kSteps], lent until the next
    // call: the learner works on a copy.
    TensorDict data = collector.next().clone();
    ppo::episode_returns(data, returns);

    // ---- V-trace targets, without grad: the learner's values of the
    // observations and the next ones, and its log-probabilities of the
    // taken actions next to the actors'. The estimator takes them shaped
    // like the values, [E, T, 1].
    const std::shared_ptr<tensordict::distributions::Distribution> pi =
        learner.policy.get_dist(data);
    const at::Tensor log_pi = pi->log_prob(data.get("action")).unsqueeze(-1);
    {
      torch::NoGradGuard no_grad;
      learner.value(data);
      learner.value(data.get_tensordict("next"));
      data.set("log_prob", log_pi.detach());
      data.set("sample_log_prob", data.get("sample_log_prob").unsqueeze(-1));
      vtrace(data);  // sets "advantage" and "value_target"
    }

    // ---- One gradient step on the learner ---------------------------------
    const at::Tensor value = learner.critic->forward(data.get("observation"));
    const at::Tensor loss =
        -(log_pi * data.get("advantage")).mean() +
        kValueCoef * (value - data.get("value_target")).pow(2).mean() -
        kEntropyCoef * pi->entropy().mean();
    learner.opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(learner.params, kMaxGradNorm);
    learner.opt.step();
    last_loss = loss.item<double>();
    if (++updates % kSyncEvery == 0) {
      collector.update_policy_weights_(tensordict::from_module(learner.policy));
    }

    // ---- Progress -----------------------------------------------------------
    const double mean = ppo::mean_last(returns, kWindow);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (collector.frames() >= next_report) {
      next_report += 20000;
      std::printf(
          "env steps %7lld  episodes %5zu  mean return (last %zu) %6.1f  "
          "loss %8.4f  %6.0f steps/s\n",
          static_cast<long long>(collector.frames()), returns.size(), kWindow,
          mean, last_loss, static_cast<double>(collector.frames()) / secs);
      std::fflush(stdout);
    }
    if (returns.size() >= kWindow && mean >= kTarget) {
      solved = true;
      break;
    }
  }

  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf(
      "\n%s after %lld env steps, %lld gradient steps, %zu episodes, %.1fs: "
      "mean return of the last %zu episodes %.1f (target %.0f)\n",
      solved ? "Solved" : (quick ? "Quick run done" : "NOT solved"),
      static_cast<long long>(collector.frames()),
      static_cast<long long>(updates), returns.size(), secs, kWindow,
      ppo::mean_last(returns, kWindow), kTarget);
  if (quick) return 0;
  return solved ? 0 : 1;
}
