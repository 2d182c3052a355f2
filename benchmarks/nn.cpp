// Benchmarks for TensorDictModule (tensordict/nn.h): the cost a call adds
// over calling the computation on the tensors directly, in the same run.
//
// Target: a TensorDictModule call adds <= 1 us (1000 ns) over the direct
// call. The cases: a torch::nn::Linear(4, 2) on [8, 4] observations (a
// policy head for 8 envs), a std::function, a TorchScript module, and a
// three-module TensorDictSequential against the three direct calls.
//
// Soft target updates: `target.lerp_(online, tau)` over 100 parameters (50
// layers of a [64, 64] weight and a [64] bias: 208k floats, a DQN- or
// SAC-sized network) against a per-parameter `lerp_` loop over the same
// tensors. Target: no slower than the loop (ratio <= 1).
#include <ATen/Context.h>
#include <benchmark/benchmark.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "ratio_main.h"

namespace {

using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using Tensors = std::vector<at::Tensor>;

TensorDict Obs() { return TensorDict({{"obs", torch::rand({8, 4})}}, {8}); }

void BM_RawLinear(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  torch::nn::Linear linear(4, 2);
  const at::Tensor obs = torch::rand({8, 4});
  for (auto _ : state) benchmark::DoNotOptimize(linear(obs));
}
BENCHMARK(BM_RawLinear);

void BM_TdModuleLinear(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  TensorDictModule actor(torch::nn::Linear(4, 2), {"obs"}, {"logits"});
  const TensorDict td = Obs();
  for (auto _ : state) {
    TensorDict out = actor(td);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_TdModuleLinear);

Tensors Double(const Tensors& in) { return {in[0] * 2}; }

void BM_RawFunction(benchmark::State& state) {
  const TensorDictModule::Function fn = Double;
  const at::Tensor obs = torch::rand({8, 4});
  for (auto _ : state) benchmark::DoNotOptimize(fn({obs}));
}
BENCHMARK(BM_RawFunction);

void BM_TdModuleFunction(benchmark::State& state) {
  TensorDictModule m(Double, {"obs"}, {"y"});
  const TensorDict td = Obs();
  for (auto _ : state) {
    TensorDict out = m(td);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_TdModuleFunction);

// A scripted x -> (x + x, x * x) made here (no file needed).
torch::jit::Module Scripted() {
  torch::jit::Module m("m");
  m.define(R"(
    def forward(self, x: Tensor, y: Tensor):
        return x + y, x * y
  )");
  return m;
}

void BM_RawJit(benchmark::State& state) {
  torch::jit::Module m = Scripted();
  const at::Tensor obs = torch::rand({8, 4});
  for (auto _ : state) benchmark::DoNotOptimize(m.forward({obs, obs}));
}
BENCHMARK(BM_RawJit);

void BM_TdModuleJit(benchmark::State& state) {
  TensorDictModule m(Scripted(), {"obs", "obs2"}, {"s", "p"});
  const TensorDict td(
      {{"obs", torch::rand({8, 4})}, {"obs2", torch::rand({8, 4})}}, {8});
  for (auto _ : state) {
    TensorDict out = m(td);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_TdModuleJit);

void BM_RawSequence(benchmark::State& state) {
  const at::Tensor obs = torch::rand({8, 4});
  for (auto _ : state) {
    const at::Tensor h = Double({obs})[0];
    const at::Tensor l = Double({h})[0];
    benchmark::DoNotOptimize(Double({l}));
  }
}
BENCHMARK(BM_RawSequence);

void BM_TdSequence(benchmark::State& state) {
  const TensorDictSequential seq({TensorDictModule(Double, {"obs"}, {"h"}),
                                  TensorDictModule(Double, {"h"}, {"l"}),
                                  TensorDictModule(Double, {"l"}, {"a"})});
  const TensorDict td = Obs();
  for (auto _ : state) {
    TensorDict out = seq(td);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_TdSequence);

// 100 parameters: 50 layers of a [64, 64] weight and a [64] bias.
TensorDict Params() {
  TensorDict td;
  for (int i = 0; i < 50; ++i) {
    td.set({"layer" + std::to_string(i), "weight"}, torch::rand({64, 64}));
    td.set({"layer" + std::to_string(i), "bias"}, torch::rand({64}));
  }
  return td;
}

Tensors Leaves(const TensorDict& td) {
  Tensors out;
  for (const auto& e : td.values(true, true)) out.push_back(e.tensor());
  return out;
}

constexpr double kTau = 0.005;

void BM_LerpLoop(benchmark::State& state) {
  // The two sides converge: keep their differences out of denormals.
  at::globalContext().setFlushDenormal(true);
  const Tensors target = Leaves(Params());
  const Tensors online = Leaves(Params());
  for (auto _ : state) {
    for (size_t i = 0; i < target.size(); ++i) target[i].lerp_(online[i], kTau);
  }
}
BENCHMARK(BM_LerpLoop);

void BM_TdLerp(benchmark::State& state) {
  at::globalContext().setFlushDenormal(true);
  const TensorDict target = Params();
  const TensorDict online = Params();
  for (auto _ : state) target.lerp_(online, kTau);
}
BENCHMARK(BM_TdLerp);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"lerp_ of 100 parameters vs a per-parameter loop", "BM_TdLerp",
     "BM_LerpLoop", 1.0},
    {"TensorDictModule(Linear) overhead", "BM_TdModuleLinear", "BM_RawLinear",
     1000, true},
    {"TensorDictModule(function) overhead", "BM_TdModuleFunction",
     "BM_RawFunction", 1000, true},
    {"TensorDictModule(jit) overhead", "BM_TdModuleJit", "BM_RawJit", 1000,
     true},
    {"TensorDictSequential(3) overhead", "BM_TdSequence", "BM_RawSequence", 0,
     true},
})
