// Benchmarks for stacking, as ratios against raw LibTorch in the
// same run.
//
// The case: 1000 rollout rows, each with leaves obs[64] f32, action[4] f32,
// reward[1] f32, done[1] bool, ("next", "obs")[64] f32, stacked into one
// batch of [1000].
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>

#include "ratio_main.h"

namespace {

using tensordict::TensorDict;
constexpr int64_t kRows = 1000;

std::vector<at::Tensor> make_row_tensors() {
  return {torch::rand({64}), torch::rand({4}), torch::rand({1}),
          torch::ones({1}, torch::kBool), torch::rand({64})};
}

// rows[k][i]: leaf k of row i.
std::vector<std::vector<at::Tensor>> make_row_lists() {
  std::vector<std::vector<at::Tensor>> lists(5);
  for (int64_t i = 0; i < kRows; ++i) {
    auto r = make_row_tensors();
    for (size_t k = 0; k < r.size(); ++k) lists[k].push_back(r[k]);
  }
  return lists;
}

std::vector<TensorDict> make_row_dicts() {
  std::vector<TensorDict> rows;
  rows.reserve(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    auto r = make_row_tensors();
    rows.push_back(TensorDict({{"obs", r[0]},
                               {"action", r[1]},
                               {"reward", r[2]},
                               {"done", r[3]},
                               {{"next", "obs"}, r[4]}},
                              {}));
  }
  return rows;
}

// ---- stack ------------------------------------------------------------------

void BM_TorchStackPerKey(benchmark::State& state) {
  auto lists = make_row_lists();
  for (auto _ : state) {
    std::vector<at::Tensor> out;
    out.reserve(lists.size());
    for (const auto& l : lists) out.push_back(torch::stack(l, 0));
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_TorchStackPerKey);

void BM_TdStack(benchmark::State& state) {
  auto rows = make_row_dicts();
  for (auto _ : state) {
    TensorDict out = tensordict::stack(rows, 0);
    benchmark::DoNotOptimize(&out);
  }
}
BENCHMARK(BM_TdStack);

// ---- stack_out into a preallocated buffer -------------------------------------

void BM_TorchStackOutPerKey(benchmark::State& state) {
  auto lists = make_row_lists();
  std::vector<at::Tensor> bufs;
  for (const auto& l : lists) bufs.push_back(torch::stack(l, 0));
  for (auto _ : state) {
    for (size_t k = 0; k < lists.size(); ++k) {
      at::stack_out(bufs[k], lists[k], 0);
    }
    benchmark::DoNotOptimize(bufs.data());
  }
}
BENCHMARK(BM_TorchStackOutPerKey);

void BM_TdStackOut(benchmark::State& state) {
  auto rows = make_row_dicts();
  TensorDict buf = tensordict::stack(rows, 0);
  for (auto _ : state) {
    tensordict::stack_out(buf, rows, 0);
    benchmark::DoNotOptimize(&buf);
  }
}
BENCHMARK(BM_TdStackOut);

// The general path (one non-contiguous leaf per row disables the byte copy
// for that key), for information.
void BM_TdStackGeneralPath(benchmark::State& state) {
  auto rows = make_row_dicts();
  for (auto& r : rows) r.set("obs", torch::rand({128}).slice(0, 0, 128, 2));
  for (auto _ : state) {
    TensorDict out = tensordict::stack(rows, 0);
    benchmark::DoNotOptimize(&out);
  }
}
BENCHMARK(BM_TdStackGeneralPath);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"stack of 1000 rows", "BM_TdStack", "BM_TorchStackPerKey", 0.25},
    {"stack_out into a preallocated buffer", "BM_TdStackOut",
     "BM_TorchStackOutPerKey", 0.25},
    {"stack, one key on the general path (info)", "BM_TdStackGeneralPath",
     "BM_TorchStackPerKey", 0.0},
})
