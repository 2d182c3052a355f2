// Benchmarks for the environment layer (tensordict/envs.h), as ratios
// against raw baselines in the same run.
//
// 1. rollout of CartPoleEnv({16}) for 1,000 steps with random actions,
//    against a hand-written loop over the same env's hooks that draws the
//    actions into a preallocated tensor, resets finished envs and writes
//    every step into preallocated [T, 16, ...] tensors by bytes. Target:
//    <= 1.3x.
// 2. ParallelEnv(8) on threads over an env whose step takes about 20 us,
//    against SerialEnv(8) of the same env. Target: >= 1.8x SerialEnv's
//    speed, i.e. <= 0.556x its time. The synchronisation overhead per step
//    is printed: ParallelEnv's time per step minus the busiest worker's
//    share of the envs' own time.
// 3. Pendulum frames per second, the cases measured for TorchRL 0.14 by
//    benchmarks/python/torchrl_envs.py (run both with
//    benchmarks/compare_torchrl_envs.sh in the Debian sid root): a batched
//    PendulumEnv({16}) rollout(200), one PendulumEnv rollout(1000),
//    SerialEnv(16) and ParallelEnv(2) rollouts (threads, and processes as
//    TorchRL's).
#include <benchmark/benchmark.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "envs/env_access.h"
#include "ratio_main.h"

namespace {

using tensordict::CartPoleEnv;
using tensordict::Composite;
using tensordict::EnvBase;
using tensordict::ParallelEnv;
using tensordict::ParallelEnvOptions;
using tensordict::PendulumEnv;
using tensordict::RolloutOptions;
using tensordict::SerialEnv;
using tensordict::TensorDict;
using tensordict::detail::EnvAccess;

constexpr int64_t kEnvs = 16;
constexpr int64_t kSteps = 1000;

const RolloutOptions kNoBreak = RolloutOptions().break_when_any_done(false);

// ---- 1. rollout against a hand-written loop --------------------------------

void BM_CartPoleRollout(benchmark::State& state) {
  CartPoleEnv env({kEnvs});
  env.set_seed(0);
  for (auto _ : state) {
    TensorDict data = env.rollout(kSteps, kNoBreak);
    benchmark::DoNotOptimize(data);
  }
  state.SetItemsProcessed(state.iterations() * kSteps * kEnvs);
}

// The loop a user writes by hand over the env's hooks: preallocated inputs,
// outputs and [T, 16, ...] storage, written by bytes.
void BM_RawCartPoleLoop(benchmark::State& state) {
  CartPoleEnv env({kEnvs});
  env.set_seed(0);
  const TensorDict fake = env.fake_tensordict();
  const TensorDict next = fake.get_tensordict("next");
  TensorDict work = env.reset();
  const at::Tensor action = fake.get("action");
  work.set("action", action);
  const auto& action_spec = env.action_spec().leaf("action");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  // What is stored per step: the root's observation, action and flags, and
  // the next step's observation, reward and flags.
  const std::vector<at::Tensor> sources = {
      work.get("observation"), action,
      work.get("done"),        work.get("terminated"),
      work.get("truncated"),   next.get("observation"),
      next.get("reward"),      next.get("done"),
      next.get("terminated"),  next.get("truncated")};
  std::vector<at::Tensor> storage;
  for (const at::Tensor& s : sources) {
    std::vector<int64_t> shape = {kSteps};
    shape.insert(shape.end(), s.sizes().begin(), s.sizes().end());
    storage.push_back(at::zeros(shape, s.options()));
  }
  const at::Tensor reset_mask = at::zeros({kEnvs, 1}, at::kBool);
  const std::vector<std::pair<at::Tensor, at::Tensor>> moved = {
      {work.get("observation"), next.get("observation")},
      {work.get("done"), next.get("done")},
      {work.get("terminated"), next.get("terminated")},
      {work.get("truncated"), next.get("truncated")}};
  for (auto _ : state) {
    for (int64_t t = 0; t < kSteps; ++t) {
      action_spec.rand_(action, gen);
      for (const char* flag : {"done", "terminated", "truncated"}) {
        const at::Tensor f = next.get(flag);
        std::memset(f.data_ptr(), 0, f.nbytes());
      }
      EnvAccess::step(env, work, next);
      EnvAccess::complete_done(env, next);
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
        EnvAccess::reset(env, work);
        work.erase("_reset");
        for (const char* flag : {"done", "terminated", "truncated"}) {
          bool* f = work.get(flag).data_ptr<bool>();
          for (int64_t e = 0; e < kEnvs; ++e) f[e] = f[e] && !done[e];
        }
      }
    }
    benchmark::DoNotOptimize(storage[0].data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * kSteps * kEnvs);
}

// ---- 2. ParallelEnv against SerialEnv ----------------------------------------

constexpr double kStepSeconds = 20e-6;
constexpr int64_t kParallelEnvs = 8;
constexpr int64_t kParallelSteps = 200;

// An env whose step takes about 20 us of CPU (a busy wait).
class SlowEnv final : public EnvBase {
 public:
  SlowEnv() {
    set_observation_spec(
        Composite({{"observation", tensordict::Unbounded({4})}}, {}));
    set_action_spec(tensordict::Categorical(2, {}));
  }
  [[nodiscard]] std::string name() const override { return "SlowEnv"; }

 protected:
  void reset_impl(const TensorDict& /*td*/) override {}
  void step_impl(const TensorDict& /*td*/, const TensorDict& next) override {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::duration<double>(kStepSeconds));
    while (std::chrono::steady_clock::now() < until) {
    }
    next.get("observation").data_ptr<float>()[0] += 1.0F;
  }
  void set_seed_impl(uint64_t /*seed*/) override {}
};

tensordict::EnvFactory slow_factory() {
  return [] { return std::make_unique<SlowEnv>(); };
}

void BM_SlowSerialEnv(benchmark::State& state) {
  SerialEnv env(kParallelEnvs, slow_factory());
  for (auto _ : state) {
    TensorDict data = env.rollout(kParallelSteps, kNoBreak);
    benchmark::DoNotOptimize(data);
  }
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kParallelSteps) * 1e-6,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_SlowParallelEnv(benchmark::State& state) {
  ParallelEnv env(kParallelEnvs, slow_factory());
  for (auto _ : state) {
    TensorDict data = env.rollout(kParallelSteps, kNoBreak);
    benchmark::DoNotOptimize(data);
  }
  state.counters["us_per_step"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kParallelSteps) * 1e-6,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---- 3. Pendulum frames per second ---------------------------------------------

// Rollouts of `steps` steps of `env` (seeded 0), as frames per second: its
// batch's numel per step.
void rollout_frames(benchmark::State& state, EnvBase& env, int64_t steps) {
  env.set_seed(0);
  for (auto _ : state) {
    TensorDict data = env.rollout(steps, kNoBreak);
    benchmark::DoNotOptimize(data);
  }
  const int64_t frames = steps * c10::multiply_integers(env.batch_size());
  state.counters["frames_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * frames),
                         benchmark::Counter::kIsRate);
}

tensordict::EnvFactory pendulum_factory() {
  return [] { return std::make_unique<PendulumEnv>(); };
}

void BM_PendulumBatched16Rollout200(benchmark::State& state) {
  PendulumEnv env({16});
  rollout_frames(state, env, 200);
}

void BM_PendulumRollout1000(benchmark::State& state) {
  PendulumEnv env;
  rollout_frames(state, env, 1000);
}

void BM_PendulumSerialEnv16Rollout200(benchmark::State& state) {
  SerialEnv env(16, pendulum_factory());
  rollout_frames(state, env, 200);
}

void BM_PendulumParallelEnv2Rollout200(benchmark::State& state) {
  ParallelEnv env(2, pendulum_factory());
  rollout_frames(state, env, 200);
}

// The same on two worker processes (TorchRL's ParallelEnv runs processes).
void BM_PendulumParallelEnv2ProcessesRollout200(benchmark::State& state) {
  ParallelEnv env(2, pendulum_factory(), ParallelEnvOptions().processes(true));
  rollout_frames(state, env, 200);
}

}  // namespace

BENCHMARK(BM_RawCartPoleLoop)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CartPoleRollout)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SlowSerialEnv)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_SlowParallelEnv)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_PendulumBatched16Rollout200)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PendulumRollout1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PendulumSerialEnv16Rollout200)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PendulumParallelEnv2Rollout200)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_PendulumParallelEnv2ProcessesRollout200)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

TENSORDICT_BENCHMARK_MAIN({
    {"rollout CartPole x16, 1000 steps", "BM_CartPoleRollout",
     "BM_RawCartPoleLoop", 1.3},
    {"ParallelEnv(8) / SerialEnv(8), 20 us steps",
     "BM_SlowParallelEnv/real_time", "BM_SlowSerialEnv/real_time", 1 / 1.8},
})
