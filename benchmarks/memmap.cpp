// Benchmarks for persistence, as ratios in the same run.
//
// - memmap_ of a 50 MB dict (5 leaves of 10 MB) vs writing the same bytes to
//   5 files with plain open/write/close. Both write into the page cache of the
//   same file system (a temp dir); neither calls fsync.
// - load_memmap of a 1 GB dict vs a 1 MB dict with the same 10 keys (files
//   made sparse by memmap_like): loading maps, it does not read.
// - consolidate() of a 100-leaf dict (100 x 256 KB) vs allocating one buffer
//   and memcpy-ing the leaves into it.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "../tests/fs_util.h"
#include "ratio_main.h"

namespace {

using tensordict::TensorDict;

// A scratch directory under the system temp dir, removed at exit.
std::string ScratchDir() {
  static const tensordict_test::TempDir dir("td_bench_memmap");
  return dir.str();
}

TensorDict MakeDict(int64_t leaves, int64_t leaf_bytes) {
  TensorDict td({}, {1024});
  for (int64_t i = 0; i < leaves; ++i) {
    td.set("leaf" + std::to_string(i), torch::rand({1024, leaf_bytes / 4096}));
  }
  return td;
}

// ---- memmap_ vs write(2) ----------------------------------------------------

constexpr int64_t kWriteLeaves = 5;
constexpr int64_t kWriteLeafBytes = 10 << 20;

void BM_RawWrite50MB(benchmark::State& state) {
  TensorDict td = MakeDict(kWriteLeaves, kWriteLeafBytes);
  const std::string dir = ScratchDir() + "/raw";
  ::mkdir(dir.c_str(), 0755);
  for (auto _ : state) {
    int64_t i = 0;
    for (const auto& k : td.keys()) {
      const at::Tensor t = td.get(k);
      const std::string path = dir + "/leaf" + std::to_string(i++) + ".memmap";
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const char* p = static_cast<const char*>(t.data_ptr());
      size_t n = static_cast<size_t>(t.numel()) * t.element_size();
      while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w <= 0) std::abort();
        p += w;
        n -= static_cast<size_t>(w);
      }
      ::close(fd);
    }
  }
  state.SetBytesProcessed(state.iterations() * kWriteLeaves * kWriteLeafBytes);
}
BENCHMARK(BM_RawWrite50MB)->Unit(benchmark::kMillisecond);

void BM_Memmap50MB(benchmark::State& state) {
  TensorDict td = MakeDict(kWriteLeaves, kWriteLeafBytes);
  const std::string dir = ScratchDir() + "/td";
  for (auto _ : state) {
    TensorDict c = td.copy();  // memmap_ replaces the copy's leaves, not td's
    c.memmap_(dir);
    benchmark::DoNotOptimize(&c);
  }
  state.SetBytesProcessed(state.iterations() * kWriteLeaves * kWriteLeafBytes);
}
BENCHMARK(BM_Memmap50MB)->Unit(benchmark::kMillisecond);

// ---- load_memmap: 1 MB vs 1 GB ---------------------------------------------

constexpr int64_t kLoadLeaves = 10;

void LoadBench(benchmark::State& state, int64_t total_bytes, const char* name) {
  const std::string dir = ScratchDir() + "/" + name;
  {
    // Shapes only: memmap_like of an expanded row, with sparse files.
    TensorDict spec({}, {1024});
    for (int64_t i = 0; i < kLoadLeaves; ++i) {
      spec.set("leaf" + std::to_string(i),
               torch::zeros({1, total_bytes / kLoadLeaves / 1024 / 4})
                   .expand({1024, total_bytes / kLoadLeaves / 1024 / 4}));
    }
    (void)spec.memmap_like(dir, /*sparse=*/true);
  }
  for (auto _ : state) {
    TensorDict td = TensorDict::load_memmap(dir);
    benchmark::DoNotOptimize(&td);
  }
}

void BM_LoadMemmap1MB(benchmark::State& state) {
  LoadBench(state, 1 << 20, "load1mb");
}
BENCHMARK(BM_LoadMemmap1MB)->Unit(benchmark::kMicrosecond);

void BM_LoadMemmap1GB(benchmark::State& state) {
  LoadBench(state, 1 << 30, "load1gb");
}
BENCHMARK(BM_LoadMemmap1GB)->Unit(benchmark::kMicrosecond);

// ---- memmap_like of 1 GB: reserved space vs sparse files --------------------

void MemmapLikeBench(benchmark::State& state, bool sparse) {
  constexpr int64_t kRows = 1 << 18;  // [2^18, 1024] float32: 1 GiB
  TensorDict spec({{"x", torch::zeros({1, 1024}).expand({kRows, 1024})}},
                  {kRows});
  const std::string dir =
      ScratchDir() + (sparse ? "/like_sparse" : "/like_reserved");
  for (auto _ : state) {
    TensorDict td = spec.memmap_like(dir, sparse);
    benchmark::DoNotOptimize(&td);
    state.PauseTiming();
    td = TensorDict({}, {});
    tensordict_test::RemoveTree(dir);  // each iteration creates the files anew
    state.ResumeTiming();
  }
}

void BM_MemmapLike1GBReserved(benchmark::State& state) {
  MemmapLikeBench(state, false);
}
BENCHMARK(BM_MemmapLike1GBReserved)->Unit(benchmark::kMillisecond);

void BM_MemmapLike1GBSparse(benchmark::State& state) {
  MemmapLikeBench(state, true);
}
BENCHMARK(BM_MemmapLike1GBSparse)->Unit(benchmark::kMillisecond);

// ---- consolidate vs memcpy ----------------------------------------------------

constexpr int64_t kConsLeaves = 100;
constexpr int64_t kConsLeafBytes = 256 << 10;

void BM_MemcpyLeaves100(benchmark::State& state) {
  TensorDict td = MakeDict(kConsLeaves, kConsLeafBytes);
  std::vector<at::Tensor> leaves;
  for (const auto& k : td.keys()) leaves.push_back(td.get(k));
  for (auto _ : state) {
    at::Tensor buf = at::empty({kConsLeaves * kConsLeafBytes}, at::kByte);
    auto* p = static_cast<char*>(buf.data_ptr());
    for (const auto& t : leaves) {
      const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
      std::memcpy(p, t.data_ptr(), n);
      p += n;
    }
    benchmark::DoNotOptimize(buf.data_ptr());
  }
}
BENCHMARK(BM_MemcpyLeaves100)->Unit(benchmark::kMicrosecond);

void BM_Consolidate100(benchmark::State& state) {
  TensorDict td = MakeDict(kConsLeaves, kConsLeafBytes);
  for (auto _ : state) {
    TensorDict c = td.consolidate();
    benchmark::DoNotOptimize(&c);
  }
}
BENCHMARK(BM_Consolidate100)->Unit(benchmark::kMicrosecond);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"memmap_ 50 MB vs write(2)", "BM_Memmap50MB", "BM_RawWrite50MB", 1.3},
    {"load_memmap 1 GB vs 1 MB (same keys)", "BM_LoadMemmap1GB",
     "BM_LoadMemmap1MB", 1.3},
    {"consolidate 100 leaves vs memcpy", "BM_Consolidate100",
     "BM_MemcpyLeaves100", 1.2},
    {"memmap_like 1 GB, reserved vs sparse (info)", "BM_MemmapLike1GBReserved",
     "BM_MemmapLike1GBSparse", 0.0},
})
