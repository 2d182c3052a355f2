// DQN on CartPole-v1 with n-step returns and a prioritized ReplayBuffer.
//
// Double DQN with a Polyak-averaged target network and epsilon-greedy
// exploration over 4 of the library's CartPoleEnv (tensordict/envs.h, with
// RewardSum for the episodes' returns). A Collector (tensordict/collectors.h)
// steps them with the epsilon-greedy policy, 8 steps of the 4 envs per
// batch; a MultiStepTransform turns each step's reward into its 3-step
// return across batches (TorchRL's, tensordict/multi_step.h: the last steps
// of a batch wait for the next one) before the batch goes into a
// ReplayBuffer with a PrioritizedSampler. Each gradient step samples a
// batch and runs the library's DQNLoss (tensordict/objectives.h: double
// DQN, Huber loss weighted by the importance weights, the bootstrap
// discounted by gamma^steps_to_next_obs), writes the new |TD errors| back
// as the rows' priorities, and moves the target network with SoftUpdate.
//
// Usage: dqn_cartpole [seed] (default 0).
//
// Success: the mean return of the last 20 finished episodes reaches 195
// (exit code 0); otherwise the program exits with 1 after `kMaxEnvSteps`.
// Under TENSORDICT_EXAMPLE_QUICK=1 (sanitized CI runs) it trains for a few
// hundred steps and does not require the target.
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/multi_step.h>
#include <tensordict/objectives.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

using tensordict::PrioritizedSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

namespace {

constexpr uint64_t kDefaultSeed = 0;
constexpr int64_t kEnvs = 4;
constexpr int64_t kStepsPerBatch = 8;  // per env, in each collector batch
constexpr int64_t kNSteps = 3;         // n-step returns
constexpr int64_t kMaxEnvSteps = 200000;
constexpr int64_t kLearningStarts = 1000;  // env steps before training
constexpr int64_t kEpsilonSteps = 12000;   // env steps of epsilon decay
constexpr double kEpsilonEnd = 0.03;
constexpr int64_t kBatch = 128;
constexpr double kGamma = 0.99;
constexpr double kTau = 0.01;  // target network Polyak factor per update
constexpr double kLr = 1e-3;
constexpr int64_t kWindow = 20;  // episodes in the success criterion
constexpr double kTarget = 195.0;
constexpr int64_t kObsDim = 4;
constexpr int64_t kActions = 2;

torch::nn::Sequential make_qnet() {
  return torch::nn::Sequential(torch::nn::Linear(kObsDim, 64),
                               torch::nn::ReLU(), torch::nn::Linear(64, 64),
                               torch::nn::ReLU(),
                               torch::nn::Linear(64, kActions));
}

double mean_last(const std::vector<double>& v, size_t n) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(n, v.size());
  return std::accumulate(v.end() - static_cast<int64_t>(k), v.end(), 0.0) /
         static_cast<double>(k);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed =
      argc > 1 ? std::strtoull(argv[1], nullptr, 10) : kDefaultSeed;
  const bool quick = std::getenv("TENSORDICT_EXAMPLE_QUICK") != nullptr;
  const int64_t max_env_steps = quick ? 2 * kLearningStarts : kMaxEnvSteps;
  at::set_num_threads(1);  // tiny networks: threads cost more than they give
  torch::manual_seed(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unif(0.0, 1.0);

  ReplayBuffer rb(ReplayBufferOptions(50000)
                      .sampler(PrioritizedSampler().alpha(0.6).beta(0.4))
                      .seed(seed));
  torch::nn::Sequential qnet = make_qnet();
  // The loss: double DQN with a target network of the same structure (the
  // loss copies the online weights into it), the Huber loss, and TD(0) on
  // the n-step rows; SoftUpdate moves the target by kTau after each step.
  const tensordict::DQNLoss loss(
      tensordict::TensorDictModule(qnet, {"observation"}, {"action_value"}),
      tensordict::TensorDictModule(make_qnet(), {"observation"},
                                   {"action_value"}),
      tensordict::DQNLossOptions()
          .double_dqn(true)
          .loss_function(tensordict::DistanceLoss::SMOOTH_L1)
          .action_space(tensordict::DQNActionSpace::CATEGORICAL)
          .value_estimator(tensordict::ValueEstimator::td0(kGamma)));
  const tensordict::SoftUpdate target_update(
      loss, tensordict::SoftUpdateOptions().tau(kTau));
  torch::optim::Adam opt(qnet->parameters(), torch::optim::AdamOptions(kLr));

  // Epsilon-greedy on the online network, epsilon decayed over the first
  // kEpsilonSteps env steps (`env_steps`, the collector's frames).
  int64_t env_steps = 0;
  double epsilon = 1.0;
  const tensordict::Policy act = [&](const TensorDict& td) {
    const double frac =
        std::min(1.0, static_cast<double>(env_steps) / kEpsilonSteps);
    epsilon = 1.0 + frac * (kEpsilonEnd - 1.0);
    const at::Tensor greedy = qnet->forward(td.get("observation")).argmax(1);
    at::Tensor action = torch::empty({kEnvs}, torch::kLong);
    const int64_t* g = greedy.data_ptr<int64_t>();
    int64_t* a = action.data_ptr<int64_t>();
    for (int64_t e = 0; e < kEnvs; ++e) {
      a[e] = unif(rng) < epsilon ? static_cast<int64_t>(rng() % 2) : g[e];
    }
    td.set("action", action);
  };
  // Categorical actions (int64 [E]: 0 pushes left, 1 right); RewardSum
  // keeps each episode's return in "episode_reward". Each batch is one step
  // of the kEnvs envs, [kEnvs, kStepsPerBatch].
  auto env = std::make_unique<tensordict::TransformedEnv>(
      std::make_unique<tensordict::CartPoleEnv>(
          std::vector<int64_t>{kEnvs}, /*categorical_action_encoding=*/true),
      std::make_shared<tensordict::RewardSum>());
  env->set_seed(seed);
  tensordict::Collector collector(
      std::move(env), act,
      tensordict::CollectorOptions(kEnvs * kStepsPerBatch)
          .total_frames(max_env_steps));
  std::vector<double> returns;  // of every finished episode, in order

  const auto t0 = std::chrono::steady_clock::now();
  int64_t updates = 0;
  double last_loss = 0.0;
  bool solved = false;
  int64_t next_report = 5000;

  tensordict::MultiStepTransform n_step(kNSteps, kGamma);
  for (const TensorDict& steps : collector) {
    env_steps = collector.frames();
    const at::Tensor ended = at::masked_select(
        steps.get({"next", "episode_reward"}), steps.get({"next", "done"}));
    for (int64_t i = 0; i < ended.numel(); ++i) {
      returns.push_back(ended[i].item<double>());
    }
    // Each step's n-step return (shorter only at an episode's end), with
    // "steps_to_next_obs" for the discount; the batch's last steps come out
    // with the next batch.
    rb.extend(n_step(steps).reshape({-1}));

    // ---- Learn: one gradient step per vectorized env step ------------------
    for (int64_t k = 0; k < kStepsPerBatch && env_steps >= kLearningStarts;
         ++k) {
      auto [batch, info] = rb.sample(kBatch);
      batch.set("priority_weight", info.weight);
      const at::Tensor l = tensordict::total_loss(loss(batch));
      opt.zero_grad();
      l.backward();
      torch::nn::utils::clip_grad_norm_(qnet->parameters(), 10.0);
      opt.step();
      // The loss wrote the squared TD errors; the priorities are |TD|.
      rb.update_priority(info.index, batch.get("td_error").squeeze(-1).sqrt());
      target_update.step();
      last_loss = l.item<double>();
      ++updates;
    }

    // ---- Progress ---------------------------------------------------------
    const double mean = mean_last(returns, kWindow);
    if (env_steps >= next_report) {
      next_report += 5000;
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      std::printf(
          "env steps %6lld  episodes %4zu  mean return (last %lld) %6.1f  "
          "epsilon %.2f  loss %.4f  buffer %lld  %.1fs\n",
          static_cast<long long>(env_steps), returns.size(),
          static_cast<long long>(kWindow), mean, epsilon, last_loss,
          static_cast<long long>(rb.size()), secs);
      std::fflush(stdout);
    }
    if (returns.size() >= static_cast<size_t>(kWindow) && mean >= kTarget) {
      solved = true;
      break;
    }
  }

  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf(
      "\n%s after %lld env steps, %lld gradient steps, %zu episodes, %.1fs: "
      "mean return of the last %lld episodes %.1f (target %.0f)\n",
      solved ? "Solved" : (quick ? "Quick run done" : "NOT solved"),
      static_cast<long long>(env_steps), static_cast<long long>(updates),
      returns.size(), secs, static_cast<long long>(kWindow),
      mean_last(returns, kWindow), kTarget);
  if (quick) return 0;
  return solved ? 0 : 1;
}
