// Benchmarks for RolloutBuffer and gae(), as ratios against raw
// LibTorch in the same run.
//
// The case: a PPO rollout of T = 2048 steps x E = 64 envs (CPU, float32), with
// TorchRL's [T, E, 1] reward/done/terminated/truncated and state values.
//
// Target: gae() on [2048, 64] in <= 2 ms absolute (read the BM_Gae time, in
// ms). The "raw LibTorch" baseline for it is the usual per-timestep loop of
// tensor ops, which is what the plain C++ recurrence replaces.
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>

#include "ratio_main.h"

namespace {

using tensordict::RolloutBuffer;
using tensordict::TensorDict;
constexpr int64_t kT = 2048;
constexpr int64_t kE = 64;
constexpr double kGamma = 0.99;
constexpr double kLambda = 0.95;

struct Inputs {
  at::Tensor reward, value, next_value, done, terminated;
};

Inputs make_inputs(std::vector<int64_t> shape) {
  torch::manual_seed(0);
  Inputs in;
  in.reward = torch::randn(shape);
  in.value = torch::randn(shape);
  in.next_value = torch::randn(shape);
  in.done = torch::rand(shape) < 0.01;
  in.terminated = in.done.logical_and(torch::rand(shape) < 0.5);
  return in;
}

// ---- gae on [T, E] ---------------------------------------------------------

// The per-timestep tensor-op loop that a straightforward LibTorch port of
// GAE writes.
void BM_RawGaeTensorLoop(benchmark::State& state) {
  const Inputs in = make_inputs({kT, kE});
  for (auto _ : state) {
    const at::Tensor not_done = in.done.logical_not().to(at::kFloat);
    const at::Tensor not_term = in.terminated.logical_not().to(at::kFloat);
    const at::Tensor delta =
        in.reward + kGamma * in.next_value * not_term - in.value;
    at::Tensor adv = torch::empty_like(in.value);
    at::Tensor last = torch::zeros({kE});
    for (int64_t t = kT - 1; t >= 0; --t) {
      last = delta[t] + kGamma * kLambda * not_done[t] * last;
      adv[t] = last;
    }
    at::Tensor target = adv + in.value;
    benchmark::DoNotOptimize(target.data_ptr());
  }
}
BENCHMARK(BM_RawGaeTensorLoop)->Unit(benchmark::kMillisecond);

void BM_Gae(benchmark::State& state) {
  const Inputs in = make_inputs({kT, kE});
  for (auto _ : state) {
    auto res = tensordict::gae(in.reward, in.value, in.next_value, in.done,
                               in.terminated, kGamma, kLambda);
    benchmark::DoNotOptimize(res.advantage.data_ptr());
  }
}
BENCHMARK(BM_Gae)->Unit(benchmark::kMillisecond);

// compute_gae on a [T, E] buffer with [T, E, 1] keys (adds the done |
// truncated merge and the copy into the stored advantage/value target).
void BM_TdComputeGae(benchmark::State& state) {
  const Inputs in = make_inputs({kT, kE, 1});
  RolloutBuffer buf(kT, kE);
  const TensorDict d = buf.data();
  d.set("state_value", in.value);
  d.set({"next", "state_value"}, in.next_value);
  d.set({"next", "reward"}, in.reward);
  d.set({"next", "done"}, in.done);
  d.set({"next", "terminated"}, in.terminated);
  d.set({"next", "truncated"},
        in.done.logical_and(in.terminated.logical_not()));
  for (auto _ : state) {
    buf.compute_gae(kGamma, kLambda);
  }
}
BENCHMARK(BM_TdComputeGae)->Unit(benchmark::kMillisecond);

// ---- One env step written into the buffer ----------------------------------

constexpr int64_t kStepT = 128;
constexpr int64_t kStepE = 8;

std::vector<at::Tensor> step_tensors() {
  return {torch::rand({kStepE, 4}),
          torch::zeros({kStepE}, torch::kLong),
          torch::rand({kStepE}),
          torch::rand({kStepE, 4}),
          torch::ones({kStepE, 1}),
          torch::zeros({kStepE, 1}, torch::kBool),
          torch::zeros({kStepE, 1}, torch::kBool),
          torch::zeros({kStepE, 1}, torch::kBool)};
}

void BM_RawStepWrite(benchmark::State& state) {
  const std::vector<at::Tensor> row = step_tensors();
  std::vector<at::Tensor> bufs;
  for (const auto& r : row) {
    std::vector<int64_t> shape{kStepT};
    for (int64_t s : r.sizes()) shape.push_back(s);
    bufs.push_back(torch::zeros(shape, r.options()));
  }
  int64_t t = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < bufs.size(); ++k) bufs[k].select(0, t).copy_(row[k]);
    t = (t + 1) % kStepT;
  }
}
BENCHMARK(BM_RawStepWrite);

// One step of the rollout as a `[kStepE]` dict, from step_tensors().
TensorDict step_dict() {
  const std::vector<at::Tensor> r = step_tensors();
  return TensorDict({{"observation", r[0]},
                     {"action", r[1]},
                     {"sample_log_prob", r[2]},
                     {{"next", "observation"}, r[3]},
                     {{"next", "reward"}, r[4]},
                     {{"next", "done"}, r[5]},
                     {{"next", "terminated"}, r[6]},
                     {{"next", "truncated"}, r[7]}},
                    {kStepE});
}

void BM_TdStepWrite(benchmark::State& state) {
  const TensorDict row = step_dict();
  RolloutBuffer buf(kStepT, kStepE);
  buf.step(0, row);
  int64_t t = 0;
  for (auto _ : state) {
    buf.step(t, row);
    t = (t + 1) % kStepT;
  }
}
BENCHMARK(BM_TdStepWrite);

// ---- Minibatches of the flat [T * E] batch ---------------------------------

void BM_RawMinibatches(benchmark::State& state) {
  std::vector<at::Tensor> bufs;
  for (const auto& r : step_tensors()) {
    std::vector<int64_t> shape{kStepT * kStepE};
    for (int64_t i = 1; i < r.dim(); ++i) shape.push_back(r.size(i));
    bufs.push_back(torch::zeros(shape, r.options()));
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  const int64_t n = 4, size = kStepT * kStepE / n;
  for (auto _ : state) {
    const at::Tensor perm = at::randperm(kStepT * kStepE, gen, at::kLong);
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor idx = perm.narrow(0, i * size, size);
      for (const auto& b : bufs) {
        benchmark::DoNotOptimize(b.index_select(0, idx));
      }
    }
  }
}
BENCHMARK(BM_RawMinibatches);

void BM_TdMinibatches(benchmark::State& state) {
  const TensorDict row = step_dict();
  RolloutBuffer buf(kStepT, kStepE);
  buf.step(0, row);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(buf.minibatches(4, gen));
  }
}
BENCHMARK(BM_TdMinibatches);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"gae [2048x64] vs per-step tensor ops", "BM_Gae", "BM_RawGaeTensorLoop",
     0.0},
    {"compute_gae [2048x64x1] vs tensor ops", "BM_TdComputeGae",
     "BM_RawGaeTensorLoop", 0.0},
    {"RolloutBuffer::step vs per-key copy_", "BM_TdStepWrite",
     "BM_RawStepWrite", 0.0},
    {"minibatches(4) vs per-key index_select", "BM_TdMinibatches",
     "BM_RawMinibatches", 0.0},
})
