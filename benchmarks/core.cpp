// Benchmarks for the TensorDict core, as ratios against raw
// LibTorch in the same run.
//
// The case: a buffer with batch [1000] and leaves obs[64] f32, action[4] f32,
// reward[1] f32, done[1] bool, ("next", "obs")[64] f32, written or read one
// row at a time.
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>

#include "ratio_main.h"

namespace {

using tensordict::TensorDict;
constexpr int64_t kRows = 1000;

std::vector<at::Tensor> make_buffers() {
  return {torch::zeros({kRows, 64}), torch::zeros({kRows, 4}),
          torch::zeros({kRows, 1}), torch::zeros({kRows, 1}, torch::kBool),
          torch::zeros({kRows, 64})};
}

std::vector<at::Tensor> make_row_tensors() {
  return {torch::rand({64}), torch::rand({4}), torch::rand({1}),
          torch::ones({1}, torch::kBool), torch::rand({64})};
}

TensorDict make_row() {
  auto r = make_row_tensors();
  return TensorDict({{"obs", r[0]},
                     {"action", r[1]},
                     {"reward", r[2]},
                     {"done", r[3]},
                     {{"next", "obs"}, r[4]}},
                    {});
}

TensorDict make_buffer_td() {
  TensorDict td({}, {kRows});
  td[0] = make_row();
  return td;
}

// ---- Indexed row write ----------------------------------------------------

void BM_RawRowWrite(benchmark::State& state) {
  auto bufs = make_buffers();
  auto row = make_row_tensors();
  int64_t i = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < bufs.size(); ++k) bufs[k].select(0, i).copy_(row[k]);
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_RawRowWrite);

void BM_TdRowWrite(benchmark::State& state) {
  TensorDict td = make_buffer_td();
  TensorDict row = make_row();
  int64_t i = 0;
  for (auto _ : state) {
    td[i] = row;
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_TdRowWrite);

// The general path (a non-contiguous source row disables the byte copy).
void BM_TdRowWriteGeneralPath(benchmark::State& state) {
  TensorDict td = make_buffer_td();
  TensorDict row = make_row();
  row.set("obs", torch::rand({128}).slice(0, 0, 128, 2));
  int64_t i = 0;
  for (auto _ : state) {
    td[i] = row;
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_TdRowWriteGeneralPath);

// ---- Row read -------------------------------------------------------------

void BM_RawRowRead(benchmark::State& state) {
  auto bufs = make_buffers();
  std::vector<at::Tensor> out(bufs.size());
  int64_t i = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < bufs.size(); ++k) out[k] = bufs[k].select(0, i);
    benchmark::DoNotOptimize(out.data());
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_RawRowRead);

void BM_TdRowRead(benchmark::State& state) {
  TensorDict td = make_buffer_td();
  int64_t i = 0;
  for (auto _ : state) {
    TensorDict r = td[i];
    benchmark::DoNotOptimize(&r);
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_TdRowRead);

// One leaf of a row: `td[i].get(key)` builds only that leaf's view.
void BM_RawRowLeaf(benchmark::State& state) {
  at::Tensor obs = make_buffers()[0];
  int64_t i = 0;
  for (auto _ : state) {
    at::Tensor out = obs.select(0, i);
    benchmark::DoNotOptimize(&out);
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_RawRowLeaf);

void BM_TdRowLeaf(benchmark::State& state) {
  TensorDict td = make_buffer_td();
  int64_t i = 0;
  for (auto _ : state) {
    at::Tensor out = td[i].get("obs");
    benchmark::DoNotOptimize(&out);
    i = (i + 1) % kRows;
  }
}
BENCHMARK(BM_TdRowLeaf);

// ---- First write (allocation) ----------------------------------------------

void BM_RawFirstWrite(benchmark::State& state) {
  auto row = make_row_tensors();
  const std::vector<std::vector<int64_t>> shapes = {
      {kRows, 64}, {kRows, 4}, {kRows, 1}, {kRows, 1}, {kRows, 64}};
  for (auto _ : state) {
    std::vector<at::Tensor> bufs(row.size());
    for (size_t k = 0; k < row.size(); ++k) {
      bufs[k] = torch::zeros(shapes[k], row[k].options());
      bufs[k].select(0, 0).copy_(row[k]);
    }
    benchmark::DoNotOptimize(bufs.data());
  }
}
BENCHMARK(BM_RawFirstWrite);

void BM_TdFirstWrite(benchmark::State& state) {
  TensorDict row = make_row();
  for (auto _ : state) {
    TensorDict td({}, {kRows});
    td[0] = row;
    benchmark::DoNotOptimize(&td);
  }
}
BENCHMARK(BM_TdFirstWrite);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"indexed row write td[i] = row", "BM_TdRowWrite", "BM_RawRowWrite", 0.06},
    {"row read td[i]", "BM_TdRowRead", "BM_RawRowRead", 0.55},
    {"one leaf td[i].get(key) (info)", "BM_TdRowLeaf", "BM_RawRowLeaf", 0.0},
    {"first write (allocation)", "BM_TdFirstWrite", "BM_RawFirstWrite", 2.0},
    {"row write, general path (info)", "BM_TdRowWriteGeneralPath",
     "BM_RawRowWrite", 0.0},
})
