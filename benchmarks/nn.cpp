// Benchmarks for TensorDictModule (tensordict/nn.h): the cost a call adds
// over calling the computation on the tensors directly, in the same run.
//
// Target: a TensorDictModule call adds <= 1 us (1000 ns) over the direct
// call. The cases: a torch::nn::Linear(4, 2) on [8, 4] observations (a
// policy head for 8 envs), a std::function, a TorchScript module, and a
// three-module TensorDictSequential against the three direct calls.
#include <benchmark/benchmark.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

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
  for (auto _ : state) benchmark::DoNotOptimize(actor(td));
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
  for (auto _ : state) benchmark::DoNotOptimize(m(td));
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
  for (auto _ : state) benchmark::DoNotOptimize(m(td));
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
  for (auto _ : state) benchmark::DoNotOptimize(seq(td));
}
BENCHMARK(BM_TdSequence);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"TensorDictModule(Linear) overhead", "BM_TdModuleLinear", "BM_RawLinear",
     1000, true},
    {"TensorDictModule(function) overhead", "BM_TdModuleFunction",
     "BM_RawFunction", 1000, true},
    {"TensorDictModule(jit) overhead", "BM_TdModuleJit", "BM_RawJit", 1000,
     true},
    {"TensorDictSequential(3) overhead", "BM_TdSequence", "BM_RawSequence", 0,
     true},
})
