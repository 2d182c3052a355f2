// Replay at scale (issue 28 §2): the rlox layout (obs f32[4], action f32[1],
// reward f32[1], done bool[1], ("next", "obs") f32[4]; 45 bytes a row) in
// buffers of `--rows` rows, in RAM and in a `storage_dir`:
//   - fill with `extend` of 64k-row batches (GB/s of rows written);
//   - uniform `sample(256)`;
//   - `PrioritizedSampler`: `sample(256)` and `update_priority` of 256 rows;
//   - `SliceSampler` and `PrioritizedSliceSampler`: 32 slices of 8 steps
//     (trajectories of 1000 rows);
//   - reopening a full `storage_dir` (rows, cursor, priorities);
//   - the samplers' memory beyond the rows, in bytes per row (the growth of
//     the process's anonymous memory while a disk-backed buffer fills: its
//     rows are file pages, so what grows is the sampler's).
// Each number is printed with the machine's memory bandwidth (a memcpy of 1
// GB) measured in the same run, and the RAM fill and the reopen with this
// machine's first-touch rate: the GB/s of writing fresh memory, advised to
// use huge pages as the storage and the trees are, the raw baseline of a
// process that must take new memory from the system.
//
// On a VM whose kernel returns free memory to the hypervisor (free page
// reporting, a virtio-balloon feature), memory freed a few seconds ago and
// memory never used cost very differently to touch. At 1 GB or more a buffer
// the benchmark therefore pauses (kSettle) before the first touch, the RAM
// fill and the reopen, so that each meets the state a new process meets,
// rather than memory the previous step has just freed.
//
// Not a Google Benchmark: one fill per buffer costs seconds at 10^8 rows.
// Without arguments (CI's smoke run) it uses 2^18 rows; the case is
//   bench_scale --rows=100000000 [--dir=/path/with/5GB/free]
// (about 4.5 GB of RAM and 9 GB of disk at 10^8 rows; the buffers are made
// one at a time).
#include <ATen/Parallel.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "replay_case.h"

namespace {

using tensordict::PrioritizedSampler;
using tensordict::PrioritizedSliceSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::SamplerConfig;
using tensordict::SliceSampler;
using tensordict::TensorDict;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 65536;
constexpr int64_t kRowBytes = 45;
constexpr int64_t kTrajectory = 1000;
constexpr auto kSettle = std::chrono::seconds(5);

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The process's anonymous resident memory, in bytes (RssAnon).
int64_t rss_anon() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("RssAnon:", 0) == 0) {
      return std::atoll(line.c_str() + 8) * 1024;
    }
  }
  return -1;
}

// The process's minor page faults so far.
int64_t minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// GB/s of one memcpy of `bytes` (the pages touched first).
double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);  // warm
  const auto t0 = Clock::now();
  std::memcpy(b.data(), a.data(), bytes);
  const double s = seconds_since(t0);
  if (b[bytes / 2] != 1) std::abort();
  return static_cast<double>(bytes) / s / 1e9;
}

// GB/s of the first write of `bytes` of fresh anonymous memory, advised to
// use huge pages as ReplayBuffer's large RAM leaves and trees are.
double first_touch_gbps(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  (void)::madvise(p, bytes, MADV_HUGEPAGE);
  const auto t0 = Clock::now();
  std::memset(p, 1, bytes);
  const double s = seconds_since(t0);
  ::munmap(p, bytes);
  return static_cast<double>(bytes) / s / 1e9;
}

// Median and mean of `iters` timed calls of `f`, in microseconds.
struct Timing {
  double median_us, mean_us;
};
Timing time_us(int iters, const std::function<void()>& f) {
  for (int i = 0; i < std::max(1, iters / 20); ++i) f();  // warm
  std::vector<double> t(static_cast<size_t>(iters));
  double sum = 0;
  for (auto& x : t) {
    const auto t0 = Clock::now();
    f();
    x = seconds_since(t0) * 1e6;
    sum += x;
  }
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return {t[static_cast<size_t>(iters / 2)], sum / iters};
}

// One line of the report: a case against its target (`at_most`: the value
// may not exceed it, else it may not fall below it), or information.
void report(const std::string& what, double value, const char* unit,
            double target, bool at_most = true) {
  const bool met = at_most ? value <= target : value >= target;
  std::printf("  %-52s %10.2f %-5s (target %s %g: %s)\n", what.c_str(), value,
              unit, at_most ? "<=" : ">=", target, met ? "met" : "NOT met");
}
void info(const std::string& what, double value, const char* unit) {
  std::printf("  %-52s %10.2f %s\n", what.c_str(), value, unit);
}

// The 64k-row batch every fill writes; `done` ends a trajectory every
// kTrajectory rows (kBatch is not a multiple of it, so the ends move from
// batch to batch as they would in a stream).
TensorDict fill_batch() {
  auto leaves = tensordict_bench::make_leaves(kBatch, /*obs=*/4, /*action=*/1);
  leaves[3] = (at::arange(kBatch) % kTrajectory == kTrajectory - 1)
                  .unsqueeze(1)
                  .contiguous();
  return tensordict_bench::make_batch(leaves, kBatch);
}

// Fills `rb` to capacity with extend of kBatch rows; returns GB/s, and the
// seconds of the first extend (which allocates the storage) in `first_s`.
double fill(ReplayBuffer& rb, const TensorDict& batch,
            double* first_s = nullptr) {
  const int64_t rows = rb.capacity();
  const auto t0 = Clock::now();
  for (int64_t done = 0; done < rows; done += kBatch) {
    if (rows - done >= kBatch) {
      rb.extend(batch);
    } else {
      rb.extend(batch.index({at::indexing::Slice(0, rows - done)}));
    }
    if (done == 0 && first_s != nullptr) *first_s = seconds_since(t0);
  }
  return static_cast<double>(rows * kRowBytes) / seconds_since(t0) / 1e9;
}

ReplayBufferOptions options(int64_t rows, const SamplerConfig& sampler,
                            const std::string& dir) {
  auto o = ReplayBufferOptions(rows).sampler(sampler).seed(0);
  if (!dir.empty()) o.storage_dir(dir);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = int64_t{1} << 18;
  std::string root =
      (std::filesystem::temp_directory_path() /
       ("td-scale-" + std::to_string(static_cast<long>(::getpid()))))
          .string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--rows=", 0) == 0) rows = std::atoll(a.c_str() + 7);
    if (a.rfind("--dir=", 0) == 0) root = a.substr(6);
    // Other flags (CI passes Google Benchmark's) are ignored.
  }
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  at::set_num_threads(1);
  std::printf("bench_scale: %lld rows of %lld bytes (%.2f GB a buffer)\n",
              static_cast<long long>(rows), static_cast<long long>(kRowBytes),
              static_cast<double>(rows * kRowBytes) / 1e9);
  info("memcpy of 1 GB (this machine's bandwidth)",
       memcpy_gbps(size_t{1} << 30), "GB/s");
  const auto buffer_bytes = static_cast<size_t>(rows * kRowBytes);
  const bool large = buffer_bytes >= (size_t{1} << 30);
  const auto settle = [&] {
    malloc_trim(0);
    if (large) std::this_thread::sleep_for(kSettle);
  };
  settle();
  const double touch = first_touch_gbps(buffer_bytes);
  info("first touch of fresh memory (this machine's limit)", touch, "GB/s");
  const TensorDict batch = fill_batch();
  const int iters = 2000;
  tensordict_bench::Generator rng(1);
  const auto draw = [&] {
    return tensordict_bench::draw_indices(rng, 256, rows);
  };

  for (const bool disk : {false, true}) {
    const std::string where = disk ? "storage_dir" : "RAM";
    const auto dir = [&](const char* name) {
      return disk ? root + "/" + name : std::string();
    };
    std::printf("\n%s:\n", where.c_str());
    {
      ReplayBuffer rb(
          options(rows, tensordict::RandomSampler(), dir("uniform")));
      double first_s = 0;
      settle();
      const double gbps = fill(rb, batch, &first_s);
      report("fill, extend of 64k-row batches", gbps, "GB/s", 1.0,
             /*at_most=*/false);
      info("  of which the first extend (allocates the storage)", first_s, "s");
      if (!disk) info("  ratio to the first touch above", gbps / touch, "x");
      report("uniform sample(256), median",
             time_us(iters, [&] { (void)rb.sample(256); }).median_us, "us", 50);
    }
    {
      malloc_trim(0);  // what earlier buffers freed, back to the system
      const int64_t anon0 = rss_anon();
      ReplayBuffer rb(options(rows, PrioritizedSampler(), dir("prioritized")));
      const double gbps = fill(rb, batch);
      malloc_trim(0);  // the fill's freed batches, back to the system
      const int64_t anon1 = rss_anon();
      info("fill of a PrioritizedSampler buffer", gbps, "GB/s");
      report("PrioritizedSampler sample(256), median",
             time_us(iters, [&] { (void)rb.sample(256); }).median_us, "us",
             200);
      const at::Tensor prio = at::rand({256}, at::kDouble);
      const int64_t faults0 = minor_faults();
      report(
          "update_priority of 256 rows, median",
          time_us(iters, [&] { rb.update_priority(draw(), prio); }).median_us,
          "us", 100);
      // Each call's writes into pages the kernel has just written back to
      // the files fault (the shared mappings' dirty tracking).
      info("  page faults a call",
           static_cast<double>(minor_faults() - faults0) / (iters + iters / 20),
           "");
      if (disk) {
        // The rows are file pages: the anonymous memory that grew is the
        // sampler's (its trees; the priorities are a file too, 8 B/row).
        report("prioritized trees beyond the rows, bytes/row",
               static_cast<double>(anon1 - anon0) / static_cast<double>(rows),
               "B/row", 32);
      }
    }
    if (disk) {
      // Right after the buffer above freed its trees, then as a new process
      // finds the memory (after kSettle).
      for (const bool settled : {false, true}) {
        if (settled) settle();
        const int64_t anon0 = rss_anon();
        const auto t0 = Clock::now();
        ReplayBuffer rb(
            options(rows, PrioritizedSampler(), dir("prioritized")));
        const double s = seconds_since(t0);
        if (rb.size() != rows) std::abort();
        const auto trees = static_cast<double>(rss_anon() - anon0);
        if (!settled) {
          info("reopen (Prioritized), just after a buffer was freed", s, "s");
          continue;
        }
        report("reopen a full storage_dir (PrioritizedSampler)", s, "s", 1.0);
        info("  its trees, bytes/row", trees / static_cast<double>(rows),
             "B/row");
        info("  first touching that many bytes would take", trees / touch / 1e9,
             "s");
        // The reopened trees read their leaves from TorchRL's mapped file.
        report("  sample(256) of the reopened buffer, median",
               time_us(iters, [&] { (void)rb.sample(256); }).median_us, "us",
               200);
        const at::Tensor prio = at::rand({256}, at::kDouble);
        report(
            "  update_priority of 256 of its rows, median",
            time_us(iters, [&] { rb.update_priority(draw(), prio); }).median_us,
            "us", 100);
      }
      const auto t1 = Clock::now();
      ReplayBuffer rb2(
          options(rows, tensordict::RandomSampler(), dir("uniform")));
      report("reopen a full storage_dir (RandomSampler)", seconds_since(t1),
             "s", 1.0);
    }
    {
      ReplayBuffer rb(
          options(rows, SliceSampler(8).end_key("done"), dir("slice")));
      fill(rb, batch);
      report("SliceSampler 32 x 8, median",
             time_us(iters, [&] { (void)rb.sample(256); }).median_us, "us",
             100);
    }
    {
      ReplayBuffer rb(options(rows, PrioritizedSliceSampler(8).end_key("done"),
                              dir("pslice")));
      fill(rb, batch);
      report("PrioritizedSliceSampler 32 x 8, median",
             time_us(iters, [&] { (void)rb.sample(256); }).median_us, "us",
             250);
    }
    if (disk) std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  std::filesystem::remove_all(root);
  return 0;
}
