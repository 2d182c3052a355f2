// Benchmarks for the collectors (tensordict/collectors.h), as ratios against
// baselines in the same run.
//
// 1. Collector over CartPoleEnv({16}) with a 2-layer MLP policy (64 units,
//    argmax action), 102,400 frames in batches of 1,024, against a
//    hand-written loop doing the same work over the env's hooks: the MLP on
//    the observations, the action written into a preallocated tensor, the
//    step, every step's entries copied into preallocated [T, 16, ...]
//    tensors by bytes, step_mdp by bytes, finished envs reset. Target:
//    >= 0.9x the loop's throughput, i.e. <= 1.11x its time.
// 2. MultiSyncCollector with 2 workers, each with its own CartPoleEnv({16})
//    and the same policy, against one Collector, both collecting 102,400
//    frames, on worker threads and on worker processes. Target: >= 1.6x
//    one collector's throughput, i.e. <= 0.625x its time.
// 3. Collector(SerialEnv(16, PendulumEnv), MLP 64x64) frames per second,
//    the case measured for TorchRL 0.14's Collector by
//    benchmarks/python/torchrl_collectors.py (run both with
//    benchmarks/compare_torchrl_collectors.sh in the Debian sid root).
//    Target: >= 50x TorchRL's.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "envs/env_access.h"
#include "ratio_main.h"

namespace {

using tensordict::CartPoleEnv;
using tensordict::Collector;
using tensordict::CollectorOptions;
using tensordict::MultiSyncCollector;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using tensordict::detail::EnvAccess;

constexpr int64_t kEnvs = 16;
constexpr int64_t kFramesPerBatch = 1024;
constexpr int64_t kFrames = 100 * kFramesPerBatch;

torch::nn::Sequential mlp(int64_t in, int64_t out) {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(in, 64), torch::nn::Tanh(),
                               torch::nn::Linear(64, 64), torch::nn::Tanh(),
                               torch::nn::Linear(64, out));
}

// The CartPole policy: the MLP's logits, then their argmax as the action.
TensorDictSequential cartpole_policy(const torch::nn::Sequential& net) {
  const TensorDictModule logits(net, {"observation"}, {"logits"});
  const TensorDictModule argmax(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0].argmax(-1)};
      },
      {"logits"}, {"action"});
  return TensorDictSequential({logits, argmax});
}

std::unique_ptr<CartPoleEnv> cartpole(uint64_t seed) {
  auto env = std::make_unique<CartPoleEnv>(std::vector<int64_t>{kEnvs},
                                           /*categorical_action_encoding=*/
                                           true);
  env->set_seed(seed);
  return env;
}

void frames_counter(benchmark::State& state) {
  state.counters["frames_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kFrames),
                         benchmark::Counter::kIsRate);
}

// ---- 1. Collector against a hand-written loop ---------------------------------

void BM_CollectorCartPoleMLP(benchmark::State& state) {
  const torch::nn::Sequential net = mlp(4, 2);
  const TensorDictSequential policy = cartpole_policy(net);
  for (auto _ : state) {
    Collector collector(
        cartpole(0), policy,
        CollectorOptions(kFramesPerBatch).total_frames(kFrames));
    for (TensorDict batch : collector) benchmark::DoNotOptimize(batch);
  }
  frames_counter(state);
}

void BM_HandLoopCartPoleMLP(benchmark::State& state) {
  torch::nn::Sequential net = mlp(4, 2);
  const int64_t steps = kFramesPerBatch / kEnvs;
  for (auto _ : state) {
    const std::unique_ptr<CartPoleEnv> env = cartpole(0);
    const TensorDict fake = env->fake_tensordict();
    const TensorDict next = fake.get_tensordict("next");
    const TensorDict work = env->reset();
    const at::Tensor action = fake.get("action");
    work.set("action", action);
    // What is stored per step: the root's observation, action and flags,
    // the policy's logits, and the step's observation, reward and flags.
    const at::Tensor logits = at::zeros({kEnvs, 2});
    const std::vector<at::Tensor> sources = {work.get("observation"),
                                             action,
                                             logits,
                                             work.get("done"),
                                             work.get("terminated"),
                                             work.get("truncated"),
                                             next.get("observation"),
                                             next.get("reward"),
                                             next.get("done"),
                                             next.get("terminated"),
                                             next.get("truncated")};
    std::vector<at::Tensor> storage;
    for (const at::Tensor& s : sources) {
      std::vector<int64_t> shape = {steps};
      shape.insert(shape.end(), s.sizes().begin(), s.sizes().end());
      storage.push_back(at::zeros(shape, s.options()));
    }
    const at::Tensor reset_mask = at::zeros({kEnvs, 1}, at::kBool);
    const std::vector<std::pair<at::Tensor, at::Tensor>> moved = {
        {work.get("observation"), next.get("observation")},
        {work.get("done"), next.get("done")},
        {work.get("terminated"), next.get("terminated")},
        {work.get("truncated"), next.get("truncated")}};
    const at::NoGradGuard no_grad;
    for (int64_t batch = 0; batch < kFrames / kFramesPerBatch; ++batch) {
      for (int64_t t = 0; t < steps; ++t) {
        logits.copy_(net->forward(work.get("observation")));
        action.copy_(logits.argmax(-1));
        for (const char* flag : {"done", "terminated", "truncated"}) {
          const at::Tensor f = next.get(flag);
          std::memset(f.data_ptr(), 0, f.nbytes());
        }
        EnvAccess::step(*env, work, next);
        EnvAccess::complete_done(*env, next);
        for (size_t k = 0; k < sources.size(); ++k) {
          const size_t bytes = sources[k].nbytes();
          std::memcpy(static_cast<char*>(storage[k].data_ptr()) + t * bytes,
                      sources[k].data_ptr(), bytes);
        }
        for (const auto& [dst, src] : moved) {
          std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
        }
        const bool* done = next.get("done").data_ptr<bool>();
        bool any = false;
        for (int64_t e = 0; e < kEnvs; ++e) any = any || done[e];
        if (any) {
          std::memcpy(reset_mask.data_ptr(), done, kEnvs);
          work.set("_reset", reset_mask);
          EnvAccess::reset(*env, work);
          work.erase("_reset");
          for (const char* flag : {"done", "terminated", "truncated"}) {
            bool* f = work.get(flag).data_ptr<bool>();
            for (int64_t e = 0; e < kEnvs; ++e) f[e] = f[e] && !done[e];
          }
        }
      }
      benchmark::DoNotOptimize(storage[0].data_ptr());
    }
  }
  frames_counter(state);
}

// ---- 2. MultiSyncCollector(2) against one Collector ------------------------------

// state.range(0): worker processes (1) or threads (0).
void BM_MultiSync2CartPoleMLP(benchmark::State& state) {
  const torch::nn::Sequential net = mlp(4, 2);
  const TensorDictSequential policy = cartpole_policy(net);
  for (auto _ : state) {
    MultiSyncCollector collector(
        {[] { return cartpole(0); }, [] { return cartpole(1); }}, policy,
        CollectorOptions(2 * kFramesPerBatch)
            .total_frames(kFrames)
            .processes(state.range(0) != 0));
    for (TensorDict batch : collector) benchmark::DoNotOptimize(batch);
  }
  frames_counter(state);
}

// ---- 3. TorchRL 0.14's case ------------------------------------------------------

// The Pendulum policy: an MLP from [th, thdot] to the torque, clipped.
TensorDictSequential pendulum_policy(const torch::nn::Sequential& net) {
  const TensorDictModule features(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {at::stack({in[0], in[1]}, -1)};
      },
      {"th", "thdot"}, {"x"});
  const TensorDictModule torque(net, {"x"}, {"action"});
  return TensorDictSequential({features, torque});
}

void BM_CollectorSerialEnv16PendulumMLP(benchmark::State& state) {
  const torch::nn::Sequential net = mlp(2, 1);
  const TensorDictSequential policy = pendulum_policy(net);
  constexpr int64_t kPendulumFrames = 16000;
  for (auto _ : state) {
    auto env = std::make_unique<tensordict::SerialEnv>(
        16, [] { return std::make_unique<tensordict::PendulumEnv>(); });
    env->set_seed(0);
    Collector collector(std::move(env), policy,
                        CollectorOptions(1600).total_frames(kPendulumFrames));
    for (TensorDict batch : collector) benchmark::DoNotOptimize(batch);
  }
  state.counters["frames_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kPendulumFrames),
      benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_HandLoopCartPoleMLP)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CollectorCartPoleMLP)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MultiSync2CartPoleMLP)
    ->ArgName("processes")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_CollectorSerialEnv16PendulumMLP)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  // One intra-op thread: the workers are the parallelism (and the policy is
  // tiny).
  at::set_num_threads(1);
  return tensordict_bench::run(
      argc, argv,
      {
          {"Collector / hand-written loop, CartPole x16 + MLP",
           "BM_CollectorCartPoleMLP/real_time",
           "BM_HandLoopCartPoleMLP/real_time", 1 / 0.9},
          {"MultiSyncCollector(2 threads) / Collector, CartPole x16 + MLP",
           "BM_MultiSync2CartPoleMLP/processes:0/real_time",
           "BM_CollectorCartPoleMLP/real_time", 1 / 1.6},
          {"MultiSyncCollector(2 processes) / Collector, CartPole x16 + MLP",
           "BM_MultiSync2CartPoleMLP/processes:1/real_time",
           "BM_CollectorCartPoleMLP/real_time", 1 / 1.6},
      });
}
