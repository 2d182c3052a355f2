// AOTIModule (tensordict/export.h) against what it wraps and what it
// replaces, on an MLP 4 -> 64 -> 64 -> 2 (tanh) at batch 1 and 256
// (benchmarks/python/export_bench_policy.py makes the package and the
// TorchScript file; benchmarks/compare_export.sh runs it all in the sid
// root):
// 1. AOTIModule(td) against AOTIModelPackageLoader::run on the same
//    tensors. Target: <= 1 us more per call.
// 2. AOTIModule at batch 1 against TorchScript's forward (torch::jit::load)
//    of the same network. Target: <= 0.6x its time. Eager torch::nn too.
// 3. update_weights of the whole MLP against a copy_ of the same bytes.
//    Target: <= 2x.
// The files come from the directory TENSORDICT_BENCH_EXPORT; without it (or
// without AOTInductor's loader) the benchmarks are skipped.
#include <benchmark/benchmark.h>
#include <tensordict/config.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ratio_main.h"

#if TENSORDICT_HAS_AOTI
#include <ATen/ATen.h>
#include <tensordict/export.h>
#include <tensordict/tensordict.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

#include <vector>

namespace {

std::string dir() {
  const char* d = std::getenv("TENSORDICT_BENCH_EXPORT");
  return d == nullptr ? std::string() : std::string(d);
}

at::Tensor observations(int64_t batch) { return at::randn({batch, 4}); }

void BM_AOTILoaderRun(benchmark::State& state) {
  torch::inductor::AOTIModelPackageLoader loader(dir() + "/mlp.pt2", "model");
  const std::vector<at::Tensor> in = {observations(state.range(0))};
  for (auto _ : state) benchmark::DoNotOptimize(loader.run(in));
}

// The loader's other entry points: boxed_run (takes the inputs) and a
// runner made for one thread (run_single_threaded).
void BM_AOTILoaderBoxedRun(benchmark::State& state) {
  torch::inductor::AOTIModelPackageLoader loader(dir() + "/mlp.pt2", "model");
  const at::Tensor obs = observations(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(loader.boxed_run(std::vector<at::Tensor>{obs}));
  }
}

void BM_AOTILoaderSingleThreaded(benchmark::State& state) {
  torch::inductor::AOTIModelPackageLoader loader(dir() + "/mlp.pt2", "model",
                                                 /*run_single_threaded=*/true);
  const std::vector<at::Tensor> in = {observations(state.range(0))};
  for (auto _ : state) benchmark::DoNotOptimize(loader.run(in));
}

void BM_AOTIModule(benchmark::State& state) {
  const tensordict::AOTIModule policy(dir() + "/mlp.pt2", {"observation"},
                                      {"logits"});
  tensordict::TensorDict td({state.range(0)});
  td.set("observation", observations(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(policy(td));
}

void BM_TorchScript(benchmark::State& state) {
  torch::jit::Module net = torch::jit::load(dir() + "/mlp_ts.pt");
  const std::vector<c10::IValue> in = {observations(state.range(0))};
  for (auto _ : state) benchmark::DoNotOptimize(net.forward(in));
}

void BM_Eager(benchmark::State& state) {
  torch::nn::Sequential net(torch::nn::Linear(4, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 2));
  const at::NoGradGuard no_grad;
  const at::Tensor in = observations(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(net->forward(in));
}

// The MLP's parameters in from_module's layout.
tensordict::TensorDict mlp_params() {
  tensordict::TensorDict p;
  const std::vector<std::pair<const char*, std::vector<int64_t>>> layers = {
      {"0", {64, 4}}, {"2", {64, 64}}, {"4", {2, 64}}};
  for (const auto& [name, shape] : layers) {
    p.set({"module", name, "weight"}, at::randn(shape));
    p.set({"module", name, "bias"}, at::randn({shape[0]}));
  }
  return p;
}

void BM_UpdateWeights(benchmark::State& state) {
  tensordict::AOTIModule policy(dir() + "/mlp.pt2", {"observation"},
                                {"logits"});
  const tensordict::TensorDict params = mlp_params();
  for (auto _ : state) policy.update_weights(params);
}

// What the runner itself does for an update (write the inactive buffer,
// fold it, swap), given a ready map: the floor under update_weights.
void BM_RunnerUpdate(benchmark::State& state) {
  torch::inductor::AOTIModelPackageLoader loader(dir() + "/mlp.pt2", "model");
  auto* runner = loader.get_runner();
  const tensordict::TensorDict params = mlp_params();
  std::vector<at::Tensor> tensors;
  tensors.reserve(6);
  torch::inductor::TensorConstantMap map;
  for (const auto& [name, fqn] : runner->getConstantNamesToOriginalFQNs()) {
    if (fqn.rfind("module.", 0) != 0) continue;
    const std::string layer = fqn.substr(7, 1);
    tensors.push_back(params.get({"module", layer, fqn.substr(9)}));
    map[name] = &tensors.back();
  }
  for (auto _ : state) {
    runner->update_constant_buffer(map, /*use_inactive=*/true,
                                   /*validate_full_updates=*/false);
    runner->run_const_fold(/*use_inactive=*/true);
    runner->swap_constant_buffer();
  }
}

void BM_CopyWeights(benchmark::State& state) {
  const tensordict::TensorDict params = mlp_params();
  const tensordict::TensorDict dest = params.clone();
  for (auto _ : state) {
    for (const tensordict::NestedKey& key : params.keys(true, true)) {
      dest.get(key).copy_(params.get(key));
    }
  }
}

}  // namespace

#endif  // TENSORDICT_HAS_AOTI

int main(int argc, char** argv) {
#if TENSORDICT_HAS_AOTI
  if (!dir().empty()) {
    at::set_num_threads(1);
    for (const int64_t batch : {1, 256}) {
      benchmark::RegisterBenchmark("BM_AOTILoaderRun", BM_AOTILoaderRun)
          ->Arg(batch);
      benchmark::RegisterBenchmark("BM_AOTILoaderBoxedRun",
                                   BM_AOTILoaderBoxedRun)
          ->Arg(batch);
      benchmark::RegisterBenchmark("BM_AOTILoaderSingleThreaded",
                                   BM_AOTILoaderSingleThreaded)
          ->Arg(batch);
      benchmark::RegisterBenchmark("BM_AOTIModule", BM_AOTIModule)->Arg(batch);
      benchmark::RegisterBenchmark("BM_TorchScript", BM_TorchScript)
          ->Arg(batch);
      benchmark::RegisterBenchmark("BM_Eager", BM_Eager)->Arg(batch);
    }
    benchmark::RegisterBenchmark("BM_UpdateWeights", BM_UpdateWeights);
    benchmark::RegisterBenchmark("BM_RunnerUpdate", BM_RunnerUpdate);
    benchmark::RegisterBenchmark("BM_CopyWeights", BM_CopyWeights);
    return tensordict_bench::run(
        argc, argv,
        {
            {"AOTIModule - loader.run, batch 1 (ns)", "BM_AOTIModule/1",
             "BM_AOTILoaderRun/1", 1000, true},
            // The wrapper's work does not depend on the batch; at batch 256
            // a call's run-to-run spread (tens of us) hides it.
            {"AOTIModule - loader.run, batch 256 (ns)", "BM_AOTIModule/256",
             "BM_AOTILoaderRun/256", 0, true},
            {"AOTIModule / TorchScript, batch 1", "BM_AOTIModule/1",
             "BM_TorchScript/1", 0.6},
            {"loader.boxed_run / loader.run, batch 1",
             "BM_AOTILoaderBoxedRun/1", "BM_AOTILoaderRun/1", 0},
            {"loader (run_single_threaded) / loader.run, batch 1",
             "BM_AOTILoaderSingleThreaded/1", "BM_AOTILoaderRun/1", 0},
            {"AOTIModule / eager torch::nn, batch 1", "BM_AOTIModule/1",
             "BM_Eager/1", 0},
            {"AOTIModule / TorchScript, batch 256", "BM_AOTIModule/256",
             "BM_TorchScript/256", 0},
            {"update_weights / copy_ of the same bytes", "BM_UpdateWeights",
             "BM_CopyWeights", 2},
            {"the runner's own update / copy_ of the same bytes",
             "BM_RunnerUpdate", "BM_CopyWeights", 0},
        });
  }
#endif
  std::printf("bench_export: skipped (%s)\n",
              TENSORDICT_HAS_AOTI
                  ? "set TENSORDICT_BENCH_EXPORT to benchmarks/python/"
                    "export_bench_policy.py's output directory"
                  : "this LibTorch has no AOTInductor package loader");
  (void)argc;
  (void)argv;
  return 0;
}
