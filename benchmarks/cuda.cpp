// The GPU benchmarks of the CUDA paths, as ratios against raw LibTorch in the
// same run. Each benchmark skips, with a message, where LibTorch has no CUDA
// device (the CI smoke run on CPU); the numbers come from a GPU machine.
//
// The row case is the one of benchmarks/core.cpp: leaves obs[64] f32,
// action[4] f32, reward[1] f32, done[1] bool, ("next", "obs")[64] f32.
// Every iteration ends with a device synchronization (a one-element read
// back), on both sides.
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "ratio_main.h"

namespace {

using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

const at::Device kCuda(at::kCUDA, 0);
constexpr int64_t kCapacity = 1'000'000;
constexpr int64_t kSample = 256;

bool skip_without_cuda(benchmark::State& state) {
  if (at::hasCUDA()) return false;
  state.SkipWithError(
      "no CUDA device: the GPU benchmarks run on a GPU machine");
  return true;
}

// Waits for the device: reads one element of `t` back.
void sync(const at::Tensor& t) {
  benchmark::DoNotOptimize(t.reshape(-1).slice(0, 0, 1).cpu());
}

std::vector<at::Tensor> row_leaves(int64_t rows, at::Device device) {
  auto lead = [&](std::vector<int64_t> trailing) {
    trailing.insert(trailing.begin(), rows);
    return trailing;
  };
  const auto f = at::TensorOptions().device(device);
  return {at::rand(lead({64}), f), at::rand(lead({4}), f),
          at::rand(lead({1}), f), at::zeros(lead({1}), f.dtype(at::kBool)),
          at::rand(lead({64}), f)};
}

TensorDict as_dict(const std::vector<at::Tensor>& l,
                   std::vector<int64_t> batch) {
  return TensorDict({{"obs", l[0]},
                     {"action", l[1]},
                     {"reward", l[2]},
                     {"done", l[3]},
                     {{"next", "obs"}, l[4]}},
                    batch);
}

// ---- gather of 256 rows from a 1M-row CUDA buffer ---------------------------

struct Filled {
  std::vector<at::Tensor> raw;  // the raw baseline's buffers
  ReplayBuffer rb{ReplayBufferOptions(kCapacity).device(kCuda).seed(0)};
};
Filled& filled() {
  static Filled f = [] {
    Filled x;
    x.raw = row_leaves(kCapacity, kCuda);
    (void)x.rb.extend(as_dict(x.raw, {kCapacity}));
    return x;
  }();
  return f;
}

void BM_RawIndexSelect256(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  const auto& bufs = filled().raw;
  at::Generator gen = at::detail::createCPUGenerator(0);
  for (auto _ : state) {
    const at::Tensor idx =
        at::randint(kCapacity, {kSample}, gen, at::kLong).to(kCuda);
    std::vector<at::Tensor> out;
    out.reserve(bufs.size());
    for (const auto& b : bufs) out.push_back(b.index_select(0, idx));
    sync(out.back());
  }
}
BENCHMARK(BM_RawIndexSelect256);

void BM_RbSample256Cuda(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  auto& rb = filled().rb;
  for (auto _ : state) {
    auto s = rb.sample(kSample);
    sync(s.first.get({"next", "obs"}));
  }
}
BENCHMARK(BM_RbSample256Cuda);

// ---- td[i] = row, a CPU row into a CUDA buffer -------------------------------

void BM_RawRowCopyNonBlocking(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  const auto bufs = row_leaves(1000, kCuda);
  const auto row = row_leaves(1, at::kCPU);
  int64_t i = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < bufs.size(); ++k) {
      bufs[k].select(0, i).copy_(row[k].squeeze(0), /*non_blocking=*/true);
    }
    sync(bufs.back());
    i = (i + 1) % 1000;
  }
}
BENCHMARK(BM_RawRowCopyNonBlocking);

void BM_TdRowWriteCuda(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  TensorDict buf = as_dict(row_leaves(1000, kCuda), {1000});
  std::vector<at::Tensor> r = row_leaves(1, at::kCPU);
  for (auto& t : r) t = t.squeeze(0);
  const TensorDict row = as_dict(r, {});
  const at::Tensor last = buf.get({"next", "obs"});
  int64_t i = 0;
  for (auto _ : state) {
    buf[i] = row;
    sync(last);
    i = (i + 1) % 1000;
  }
}
BENCHMARK(BM_TdRowWriteCuda);

// ---- host to device moves -----------------------------------------------------

TensorDict many_leaves(int64_t count, int64_t elements) {
  std::vector<tensordict::Item> items;
  for (int64_t k = 0; k < count; ++k) {
    items.emplace_back("leaf" + std::to_string(k), at::rand({elements}));
  }
  return TensorDict(items, {});
}

void per_leaf_to(benchmark::State& state, const TensorDict& td) {
  const std::vector<at::Tensor> leaves = [&] {
    std::vector<at::Tensor> v;
    for (const auto& k : td.keys(true, true)) v.push_back(td.get(k));
    return v;
  }();
  for (auto _ : state) {
    std::vector<at::Tensor> out;
    out.reserve(leaves.size());
    for (const auto& t : leaves) out.push_back(t.to(kCuda));
    sync(out.back());
  }
}

void td_to(benchmark::State& state, const TensorDict& td) {
  const auto last = td.keys(true, true).back();
  for (auto _ : state) {
    const TensorDict out = td.to(kCuda, /*non_blocking=*/true);
    sync(out.get(last));
  }
}

void BM_RawToPerLeaf100(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  per_leaf_to(state, many_leaves(100, 256));
}
BENCHMARK(BM_RawToPerLeaf100);

void BM_TdConsolidatedTo100(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  td_to(state, many_leaves(100, 256).consolidate());
}
BENCHMARK(BM_TdConsolidatedTo100);

constexpr int64_t kMiB = (1 << 20) / 4;  // float elements in 1 MiB

void BM_RawToPerLeaf1000x1MiB(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  per_leaf_to(state, many_leaves(1000, kMiB));
}
BENCHMARK(BM_RawToPerLeaf1000x1MiB)->Unit(benchmark::kMillisecond);

void BM_TdTo1000x1MiB(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  td_to(state, many_leaves(1000, kMiB));
}
BENCHMARK(BM_TdTo1000x1MiB)->Unit(benchmark::kMillisecond);

// The pinning alone, of the same leaves (several threads).
void BM_TdPinMemory1000x1MiB(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  const TensorDict td = many_leaves(1000, kMiB);
  for (auto _ : state) benchmark::DoNotOptimize(td.pin_memory());
}
BENCHMARK(BM_TdPinMemory1000x1MiB)->Unit(benchmark::kMillisecond);

// The bandwidth bound of the case above: the same 1000 MiB, already pinned
// and in one piece, in one async copy into memory allocated beforehand.
void BM_RawPinnedCopy1000MiB(benchmark::State& state) {
  if (skip_without_cuda(state)) return;
  const at::Tensor host = at::rand({1000 * kMiB}).pin_memory();
  const at::Tensor device = at::empty_like(host, at::device(kCuda));
  for (auto _ : state) {
    device.copy_(host, /*non_blocking=*/true);
    sync(device);
  }
}
BENCHMARK(BM_RawPinnedCopy1000MiB)->Unit(benchmark::kMillisecond);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"sample(256) from a 1M-row CUDA buffer", "BM_RbSample256Cuda",
     "BM_RawIndexSelect256", 0.3},
    {"td[i] = row, CPU row into a CUDA buffer", "BM_TdRowWriteCuda",
     "BM_RawRowCopyNonBlocking", 0.3},
    {"consolidated H2D of 100 leaves", "BM_TdConsolidatedTo100",
     "BM_RawToPerLeaf100", 0.2},
    {"to(cuda, non_blocking), 1000 x 1 MiB", "BM_TdTo1000x1MiB",
     "BM_RawToPerLeaf1000x1MiB", 0.5},
    // At least 80% of the pinned copy's bandwidth: at most 1 / 0.8 its time.
    {"to(cuda, non_blocking), 1000 x 1 MiB, against one pinned copy",
     "BM_TdTo1000x1MiB", "BM_RawPinnedCopy1000MiB", 1.25},
})
