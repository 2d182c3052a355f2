// Benchmarks for ReplayBuffer, as ratios against raw LibTorch in
// the same run, plus absolute numbers (prioritized sampling at capacity 1e6,
// peak memory while filling, and the allocation of a 4.3 GB disk-backed
// buffer). The disk-backed (storage_dir) add/extend/sample are compared with
// the in-RAM ones (informational).
//
// The case: capacity 100000, rows of the 5-leaf rollout step obs[64] f32,
// action[4] f32, reward[1] f32, done[1] bool, ("next", "obs")[64] f32
// (536 bytes a row), the buffer full of random data.
//
// Mixed replay: `ReplayBufferEnsemble::sample(256)` over two such buffers
// at a fixed 1:1 ratio, against the two `sample(128)`s it runs (target
// <= 1.2x: the rest is the concatenation of the two samples).
//
// Index generation. `sample(256)` draws its indices with the buffer's own
// generator (xoshiro256++). The main baseline draws the same kind of
// indices with the same generator code and then runs one `index_select` per
// key, so both sides include index generation and the ratio compares the
// gathers (plus the buffer's lock and dict construction). A second baseline
// uses `at::randint` for the indices instead (informational), and a third
// gathers with one memcpy per row and key (the floor, informational).
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <tensordict/replay_ensemble.h>
#include <tensordict/tensordict.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "../tests/fs_util.h"
#include "ratio_main.h"
#include "replay_case.h"

namespace {

using tensordict::NestedKey;
using tensordict::PrioritizedSampler;
using tensordict::PrioritizedSliceSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

constexpr int64_t kCapacity = 100000;
constexpr int64_t kSample = 256;
constexpr int64_t kExtend = 64;

std::vector<at::Tensor> make_leaves(int64_t n) {
  return tensordict_bench::make_leaves(n, /*obs=*/64, /*action=*/4);
}

using tensordict_bench::make_batch;

// A full buffer and the same data as raw per-key tensors.
struct Filled {
  ReplayBuffer rb{ReplayBufferOptions(kCapacity).seed(0)};
  std::vector<at::Tensor> raw;
  Filled() {
    raw = make_leaves(kCapacity);
    rb.extend(make_batch(raw, kCapacity));
  }
};

Filled& filled() {
  static Filled f;
  return f;
}

// `rb` filled once to capacity before the timed writes: a large storage's
// pages are first touched by the writes themselves (rl/storage.cpp), while
// the raw baselines write into buffers made and filled up front.
void touch_all(ReplayBuffer& rb) {
  rb.extend(make_batch(filled().raw, kCapacity));
}

// ---- sample(256), uniform ---------------------------------------------------

void BM_RawIndexSelect256(benchmark::State& state) {
  auto& raw = filled().raw;
  tensordict_bench::Generator rng(0);
  for (auto _ : state) {
    at::Tensor idx = tensordict_bench::draw_indices(rng, kSample, kCapacity);
    for (const auto& t : raw) benchmark::DoNotOptimize(t.index_select(0, idx));
  }
}
BENCHMARK(BM_RawIndexSelect256);

void BM_RawRandintIndexSelect256(benchmark::State& state) {
  auto& raw = filled().raw;
  at::Generator gen = at::detail::createCPUGenerator(0);
  for (auto _ : state) {
    at::Tensor idx = at::randint(kCapacity, {kSample}, gen, at::kLong);
    for (const auto& t : raw) benchmark::DoNotOptimize(t.index_select(0, idx));
  }
}
BENCHMARK(BM_RawRandintIndexSelect256);

void BM_RawMemcpyGather256(benchmark::State& state) {
  auto& raw = filled().raw;
  tensordict_bench::Generator rng(0);
  for (auto _ : state) {
    at::Tensor idx = tensordict_bench::draw_indices(rng, kSample, kCapacity);
    const int64_t* ip = idx.data_ptr<int64_t>();
    for (const auto& t : raw) {
      auto shape = t.sizes().vec();
      shape[0] = kSample;
      at::Tensor out = at::empty(shape, t.options());
      const size_t row = static_cast<size_t>(t.stride(0)) * t.element_size();
      char* d = static_cast<char*>(out.data_ptr());
      const char* s = static_cast<const char*>(t.data_ptr());
      for (int64_t q = 0; q < kSample; ++q) {
        std::memcpy(d + q * row, s + ip[q] * row, row);
      }
      benchmark::DoNotOptimize(out);
    }
  }
}
BENCHMARK(BM_RawMemcpyGather256);

void BM_RbSample256(benchmark::State& state) {
  auto& rb = filled().rb;
  for (auto _ : state) benchmark::DoNotOptimize(rb.sample(kSample));
}
BENCHMARK(BM_RbSample256);

// A second full buffer, and the ensemble of the two at a fixed 1:1 ratio
// (the ensemble shares the buffers, which the statics own).
ReplayBuffer& second_rb() {
  static Filled f;
  return f.rb;
}

tensordict::ReplayBufferEnsemble& ensemble() {
  static tensordict::ReplayBufferEnsemble e(
      {std::shared_ptr<ReplayBuffer>(std::shared_ptr<void>(), &filled().rb),
       std::shared_ptr<ReplayBuffer>(std::shared_ptr<void>(), &second_rb())},
      tensordict::ReplayBufferEnsembleOptions().ratios({1, 1}));
  return e;
}

void BM_RbTwoSample128(benchmark::State& state) {
  auto& a = filled().rb;
  auto& b = second_rb();
  for (auto _ : state) {
    benchmark::DoNotOptimize(a.sample(kSample / 2));
    benchmark::DoNotOptimize(b.sample(kSample / 2));
  }
}
BENCHMARK(BM_RbTwoSample128);

void BM_EnsembleSample256(benchmark::State& state) {
  auto& e = ensemble();
  for (auto _ : state) benchmark::DoNotOptimize(e.sample(kSample));
}
BENCHMARK(BM_EnsembleSample256);

// The same buffer with a rate limiter that allows every call (target:
// within 5% of BM_RbSample256).
void BM_RbSample256RateLimited(benchmark::State& state) {
  static ReplayBuffer rb = [] {
    ReplayBuffer b(ReplayBufferOptions(kCapacity).seed(0).rate_limiter(
        tensordict::RateLimiter(1.0).error_buffer(1e15)));
    b.extend(make_batch(filled().raw, kCapacity));
    return b;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(rb.sample(kSample));
}
BENCHMARK(BM_RbSample256RateLimited);

// ---- extend(64) ------------------------------------------------------------

void BM_RawNarrowCopy64(benchmark::State& state) {
  auto bufs = make_leaves(kCapacity);
  auto batch = make_leaves(kExtend);
  int64_t c = 0;
  for (auto _ : state) {
    if (c + kExtend > kCapacity) c = 0;
    for (size_t k = 0; k < bufs.size(); ++k) {
      bufs[k].narrow(0, c, kExtend).copy_(batch[k]);
    }
    c += kExtend;
  }
}
BENCHMARK(BM_RawNarrowCopy64);

void BM_RbExtend64(benchmark::State& state) {
  ReplayBuffer rb(ReplayBufferOptions(kCapacity).seed(0));
  touch_all(rb);
  TensorDict batch = make_batch(make_leaves(kExtend), kExtend);
  for (auto _ : state) benchmark::DoNotOptimize(rb.extend(batch));
}
BENCHMARK(BM_RbExtend64);

// ---- add(row) --------------------------------------------------------------

void BM_RawRowCopyLoop(benchmark::State& state) {
  auto bufs = make_leaves(kCapacity);
  auto row = make_leaves(1);
  for (auto& r : row) r = r[0];
  int64_t i = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < bufs.size(); ++k) bufs[k][i].copy_(row[k]);
    i = (i + 1) % kCapacity;
  }
}
BENCHMARK(BM_RawRowCopyLoop);

void BM_RbAdd(benchmark::State& state) {
  ReplayBuffer rb(ReplayBufferOptions(kCapacity).seed(0));
  touch_all(rb);
  TensorDict row = make_batch(make_leaves(1), 1)[0];
  for (auto _ : state) benchmark::DoNotOptimize(rb.add(row));
}
BENCHMARK(BM_RbAdd);

// ---- Disk-backed storage (storage_dir): the same add/extend/sample ----------
// The files live under the system temp dir; the page cache holds them, so
// these measure the mapped-memory write path, not the disk.

void BM_RbDiskAdd(benchmark::State& state) {
  tensordict_test::TempDir dir("td_rb_bench");
  ReplayBuffer rb(
      ReplayBufferOptions(kCapacity).storage_dir(dir.str()).seed(0));
  touch_all(rb);
  TensorDict row = make_batch(make_leaves(1), 1)[0];
  for (auto _ : state) benchmark::DoNotOptimize(rb.add(row));
}
BENCHMARK(BM_RbDiskAdd);

void BM_RbDiskExtend64(benchmark::State& state) {
  tensordict_test::TempDir dir("td_rb_bench");
  ReplayBuffer rb(
      ReplayBufferOptions(kCapacity).storage_dir(dir.str()).seed(0));
  touch_all(rb);
  TensorDict batch = make_batch(make_leaves(kExtend), kExtend);
  for (auto _ : state) benchmark::DoNotOptimize(rb.extend(batch));
}
BENCHMARK(BM_RbDiskExtend64);

void BM_RbDiskSample256(benchmark::State& state) {
  tensordict_test::TempDir dir("td_rb_bench");
  ReplayBuffer rb(
      ReplayBufferOptions(kCapacity).storage_dir(dir.str()).seed(0));
  rb.extend(make_batch(filled().raw, kCapacity));
  for (auto _ : state) benchmark::DoNotOptimize(rb.sample(kSample));
}
BENCHMARK(BM_RbDiskSample256);

// ---- Prioritized sample(256) at capacity 1e6 -------------------------------

void BM_RbPrioritizedSample256Cap1M(benchmark::State& state) {
  constexpr int64_t kBig = 1000000;
  static ReplayBuffer* rb = [] {
    auto* b = new ReplayBuffer(
        ReplayBufferOptions(kBig).sampler(PrioritizedSampler()).seed(0));
    for (int64_t k = 0; k < kBig / 100000; ++k) {
      b->extend(make_batch(make_leaves(100000), 100000));
    }
    // Distinct priorities, as after training (not a flat tree).
    for (int64_t k = 0; k < kBig; k += 100000) {
      b->update_priority(torch::arange(k, k + 100000),
                         torch::rand({100000}, at::kDouble) * 10);
    }
    return b;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(rb->sample(kSample));
}
BENCHMARK(BM_RbPrioritizedSample256Cap1M);

// Prioritized slices: sample(256) as 32 slices of 8 steps, at capacity 1e6,
// episodes of 50 steps ("done" ends them).
void BM_RbPrioritizedSliceSample256Cap1M(benchmark::State& state) {
  constexpr int64_t kBig = 1000000;
  static ReplayBuffer* rb = [] {
    auto* b = new ReplayBuffer(
        ReplayBufferOptions(kBig)
            .sampler(PrioritizedSliceSampler(8).end_key(NestedKey("done")))
            .seed(0));
    for (int64_t k = 0; k < kBig / 100000; ++k) {
      auto leaves = make_leaves(100000);
      leaves[3] = (torch::arange(100000) % 50 == 49).unsqueeze(1);
      b->extend(make_batch(leaves, 100000));
    }
    for (int64_t k = 0; k < kBig; k += 100000) {
      b->update_priority(torch::arange(k, k + 100000),
                         torch::rand({100000}, at::kDouble) * 10);
    }
    return b;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(rb->sample(kSample));
}
BENCHMARK(BM_RbPrioritizedSliceSample256Cap1M);

// Same storage size and batch, uniform sampler: what the gather alone costs
// at this size (informational).
void BM_RbUniformSample256Cap1M(benchmark::State& state) {
  constexpr int64_t kBig = 1000000;
  static ReplayBuffer* rb = [] {
    auto* b = new ReplayBuffer(ReplayBufferOptions(kBig).seed(0));
    for (int64_t k = 0; k < kBig / 100000; ++k) {
      b->extend(make_batch(make_leaves(100000), 100000));
    }
    return b;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(rb->sample(kSample));
}
BENCHMARK(BM_RbUniformSample256Cap1M);

// ---- Memory while filling --------------------------------------------------

size_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

size_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0) return std::stoul(line.substr(n + 1));
  }
  return 0;
}

void report_memory() {
  const int64_t batches = kCapacity / kExtend + 10;  // fill, then wrap a bit
  auto leaves = make_leaves(kExtend);
  TensorDict batch = make_batch(leaves, kExtend);
  const size_t heap0 = heap_in_use();
  const size_t hwm0 = status_kb("VmHWM:");
  const size_t rss0 = status_kb("VmRSS:");
  size_t peak = 0;
  size_t storage_bytes = 0;
  {
    ReplayBuffer rb(ReplayBufferOptions(kCapacity).seed(0));
    for (int64_t b = 0; b < batches; ++b) {
      rb.extend(batch);
      peak = std::max(peak, heap_in_use() - heap0);
    }
    for (const auto& k : rb.storage().keys(true, true)) {
      storage_bytes += rb.storage().get(k).nbytes();
    }
    const size_t hwm = status_kb("VmHWM:");
    const auto storage = static_cast<double>(storage_bytes);
    const auto heap = static_cast<double>(peak);
    const auto grown =
        static_cast<double>((hwm > hwm0 ? hwm - hwm0 : 0) * 1024);
    // A large storage is its own mapping (rl/storage.cpp), outside the
    // heap: the peak RSS is what holds it.
    std::printf(
        "Memory while filling a capacity-%lld buffer with %lld extends of %lld "
        "rows:\n  storage %.2f MB; peak RSS (VmHWM) grew by %.2f MB = %.3fx "
        "storage (target <= 1.10x: %s; RSS before: %.1f MB)\n  peak heap in "
        "use (mallinfo2, after each extend) +%.2f MB = %.3fx storage\n\n",
        static_cast<long long>(kCapacity), static_cast<long long>(batches),
        static_cast<long long>(kExtend), storage / 1e6, grown / 1e6,
        grown / storage, grown <= 1.1 * storage ? "met" : "NOT met",
        static_cast<double>(rss0) / 1024.0, heap / 1e6, heap / storage);
  }
}

// A disk buffer whose storage is ~4.3 GB (8M rows of 536 bytes): the first
// write allocates it with sparse files, so it takes little time and memory,
// and only the written pages reach RSS or the disk.
void report_big_disk() {
  constexpr int64_t kBigRows = 8000000;
  tensordict_test::TempDir dir("td_rb_bench");
  TensorDict batch = make_batch(make_leaves(kExtend), kExtend);
  const size_t rss0 = status_kb("VmRSS:");
  ReplayBuffer rb(ReplayBufferOptions(kBigRows).storage_dir(dir.str()).seed(0));
  const auto t0 = std::chrono::steady_clock::now();
  rb.extend(batch);  // allocates
  const auto t1 = std::chrono::steady_clock::now();
  for (int k = 0; k < 1000; ++k) rb.extend(batch);  // 64k rows, ~34 MB
  size_t apparent = 0, on_disk = 0;
  for (const std::string& rel : tensordict_test::ListTree(dir.str())) {
    struct stat st {};
    if (::stat((dir / rel).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      apparent += static_cast<size_t>(st.st_size);
      on_disk += static_cast<size_t>(st.st_blocks) * 512;
    }
  }
  std::printf(
      "Disk-backed buffer, capacity %lld rows of 536 bytes (storage %.2f GB "
      "apparent):\n  first extend (allocation) %.2f ms; after %lld rows "
      "written: files use %.1f MB on disk; RSS %.1f MB -> %.1f MB\n\n",
      static_cast<long long>(kBigRows), static_cast<double>(apparent) / 1e9,
      std::chrono::duration<double, std::milli>(t1 - t0).count(),
      static_cast<long long>(rb.size()), static_cast<double>(on_disk) / 1e6,
      static_cast<double>(rss0) / 1024.0,
      static_cast<double>(status_kb("VmRSS:")) / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  report_memory();  // first: its peak RSS (VmHWM) is then its own
  report_big_disk();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  tensordict_bench::CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& t = reporter.times();
  auto ratio = [&](const char* what, const char* m, const char* b,
                   double target) {
    auto mi = t.find(m), bi = t.find(b);
    if (mi == t.end() || bi == t.end()) return;
    const double r = mi->second / bi->second;
    if (target > 0) {
      std::printf("  %-52s %8.3fx  (target <= %.2fx: %s)\n", what, r, target,
                  r <= target ? "met" : "NOT met");
    } else {
      std::printf("  %-52s %8.3fx\n", what, r);
    }
  };
  std::printf("\nRatios (measured / raw-LibTorch baseline, same run):\n");
  ratio("sample(256) / (same RNG + index_select per key)", "BM_RbSample256",
        "BM_RawIndexSelect256", 0.7);
  ratio("sample(256) / (at::randint + index_select per key)", "BM_RbSample256",
        "BM_RawRandintIndexSelect256", 0);
  ratio("sample(256) / (same RNG + memcpy gather per key)", "BM_RbSample256",
        "BM_RawMemcpyGather256", 0);
  ratio("ensemble sample(256) / two sample(128)s", "BM_EnsembleSample256",
        "BM_RbTwoSample128", 1.2);
  ratio("rate-limited sample(256) / sample(256)", "BM_RbSample256RateLimited",
        "BM_RbSample256", 1.05);
  ratio("extend(64) / narrow().copy_() per key", "BM_RbExtend64",
        "BM_RawNarrowCopy64", 0.3);
  ratio("add(row) / buf[key][i].copy_(row[key]) per key", "BM_RbAdd",
        "BM_RawRowCopyLoop", 0.05);
  ratio("disk add(row) / buf[key][i].copy_(row[key]) per key", "BM_RbDiskAdd",
        "BM_RawRowCopyLoop", 0);
  ratio("disk add(row) / in-RAM add(row)", "BM_RbDiskAdd", "BM_RbAdd", 0);
  ratio("disk extend(64) / in-RAM extend(64)", "BM_RbDiskExtend64",
        "BM_RbExtend64", 0);
  ratio("disk sample(256) / in-RAM sample(256)", "BM_RbDiskSample256",
        "BM_RbSample256", 0);
  // Times are in the benchmark's default unit (ns).
  std::printf("\nAbsolute:\n");
  auto absolute = [&](const char* what, const char* m, double target_us) {
    auto mi = t.find(m);
    if (mi == t.end()) return;
    std::printf("  %-52s %8.1f us  (target <= %.0f us: %s)\n", what,
                mi->second / 1e3, target_us,
                mi->second / 1e3 <= target_us ? "met" : "NOT met");
  };
  absolute("prioritized sample(256) at capacity 1e6",
           "BM_RbPrioritizedSample256Cap1M", 100);
  absolute("prioritized slice sample(32 x 8 rows) at capacity 1e6",
           "BM_RbPrioritizedSliceSample256Cap1M", 150);
  benchmark::Shutdown();
  return 0;
}
