// Tests of ReplayBuffer on disk: the disk-backed storage
// (ReplayBufferDiskTest: reopening, other processes, sparse allocation) and
// the checkpoints (dumps / loads).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "replay_test_util.h"
#include "test_util.h"

namespace {

using tensordict::PrioritizedSampler;
using tensordict::PrioritizedSliceSampler;
using tensordict::RandomSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::SamplerWithoutReplacement;
using tensordict::SliceSampler;
using tensordict::SliceSamplerWithoutReplacement;
using tensordict::TensorDict;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::FileSize;
using tensordict_test::ListDir;
using tensordict_test::RemoveTree;
using tensordict_test::replay_test::Capture;
using tensordict_test::replay_test::ExpectSame;
using tensordict_test::replay_test::ObsValues;
using tensordict_test::replay_test::Ranked;
using tensordict_test::replay_test::Row;
using tensordict_test::replay_test::Rows;
using tensordict_test::replay_test::State;
using tensordict_test::replay_test::StoredKeys;
using tensordict_test::replay_test::Trajectories;
using tensordict_test::replay_test::Vec;

// ---- Disk-backed storage ------------------------------------------------------

using tensordict_test::TempDir;

ReplayBufferOptions DiskOptions(int64_t capacity, const std::string& dir) {
  return ReplayBufferOptions(capacity).storage_dir(dir).seed(0);
}

TEST(ReplayBufferDiskTest, TheFilesAreCreatedByTheFirstWriteAndNotBefore) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  ReplayBuffer rb(DiskOptions(8, dir));
  EXPECT_FALSE(Exists(dir));
  EXPECT_TRUE(rb.storage().keys().empty());
  rb.add(Row(1.f));
  for (const char* f :
       {"storage/meta.json", "storage/obs.memmap", "storage/done.memmap",
        "storage/next/meta.json", "storage/next/obs.memmap", "state/meta.json",
        "state/rows_written.memmap", "priority/meta.json",
        "priority/priority.memmap"}) {
    EXPECT_TRUE(Exists(dir + "/" + f)) << f;
  }
  EXPECT_EQ(FileSize(dir + "/storage/obs.memmap"), 8u * 3 * 4);
  EXPECT_TRUE(rb.storage().is_memmap());
  EXPECT_EQ(rb.storage().saved_path(),
            c10::optional<std::string>(dir + "/storage"));
  EXPECT_EQ(ObsValues(rb.storage()),
            (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0}));
  // Python-readable: the storage directory loads as a plain memmap dict.
  TensorDict loaded = TensorDict::load_memmap(dir + "/storage");
  EXPECT_EQ(ObsValues(loaded)[0], 1.f);
}

TEST(ReplayBufferDiskTest,
     AnEmptyExistingDirectoryStaysEmptyUntilTheFirstWrite) {
  TempDir tmp;
  ReplayBuffer rb(DiskOptions(4, tmp.str()));
  EXPECT_TRUE(ListDir(tmp.str()).empty());
  EXPECT_TRUE(rb.empty());
  rb.extend(Rows(2, 0.f));
  EXPECT_TRUE(Exists(tmp / "state/meta.json"));
}

TEST(ReplayBufferDiskTest, ContentsCursorAndSizeSurviveReopeningAfterAWrap) {
  TempDir tmp;
  {
    ReplayBuffer rb(DiskOptions(5, tmp.str()));
    rb.extend(Rows(3, 0.f));
    EXPECT_EQ(rb.size(), 3);
  }
  {
    ReplayBuffer rb(DiskOptions(5, tmp.str()));
    EXPECT_EQ(rb.size(), 3);
    EXPECT_EQ(rb.cursor(), 3);
    EXPECT_TRUE(rb.storage().is_memmap());
    EXPECT_EQ(ObsValues(rb.storage()), (std::vector<float>{0, 1, 2, 0, 0}));
    rb.extend(Rows(4, 10.f));  // wraps: rows 3, 4, 0, 1
    rb.add(Row(20.f));         // row 2
    rb.add(Row(21.f));         // row 3
  }
  ReplayBuffer rb(DiskOptions(5, tmp.str()));
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.cursor(), 4);
  EXPECT_EQ(ObsValues(rb.storage()), (std::vector<float>{12, 13, 20, 21, 11}));
  at::Tensor next_obs = rb.storage().get({"next", "obs"}).select(1, 0);
  EXPECT_EQ(Vec(next_obs), (std::vector<int64_t>{12, 13, 20, 21, 11}));
}

TEST(ReplayBufferDiskTest, ALongBatchAndClearArePersisted) {
  TempDir tmp;
  {
    ReplayBuffer rb(DiskOptions(4, tmp.str()));
    rb.extend(Rows(10, 0.f));  // keeps rows 6..9 where row-by-row puts them
  }
  {
    ReplayBuffer rb(DiskOptions(4, tmp.str()));
    EXPECT_EQ(rb.size(), 4);
    EXPECT_EQ(rb.cursor(), 2);
    EXPECT_EQ(ObsValues(rb.storage()), (std::vector<float>{8, 9, 6, 7}));
    rb.clear();
  }
  ReplayBuffer rb(DiskOptions(4, tmp.str()));
  EXPECT_TRUE(rb.empty());
  EXPECT_EQ(rb.cursor(), 0);
  EXPECT_TRUE(rb.storage().is_memmap());  // clear() keeps the storage
  ExpectThrowsMsg([&] { (void)rb.sample(1); },
                  "ReplayBuffer::sample: the buffer is empty");
}

// Runs `child` in a forked process; returns its wait status.
template <typename Fn>
int InChild(Fn&& child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      child();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(ReplayBufferDiskTest, ABufferFilledByAnotherProcessReopensIntact) {
  TempDir tmp;
  const TensorDict batch = Rows(6, 0.f);
  const int status = InChild([&] {
    ReplayBuffer rb(DiskOptions(4, tmp.str()));
    rb.extend(batch);
    rb.add(batch[0]);
    ::_exit(rb.size() == 4 ? 0 : 2);  // no destructor runs
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ReplayBuffer rb(DiskOptions(4, tmp.str()));
  EXPECT_EQ(rb.size(), 4);
  EXPECT_EQ(rb.cursor(), 3);
  EXPECT_EQ(ObsValues(rb.storage()), (std::vector<float>{4, 5, 0, 3}));
}

TEST(ReplayBufferDiskTest, AWriterKilledBySigkillLeavesEveryCompletedWrite) {
  TempDir tmp;
  const TensorDict batch = Rows(3, 7.f);
  const int status = InChild([&] {
    ReplayBuffer rb(DiskOptions(16, tmp.str()));
    rb.extend(batch);
    rb.add(batch[1]);
    ::kill(::getpid(), SIGKILL);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ReplayBuffer rb(DiskOptions(16, tmp.str()));
  EXPECT_EQ(rb.size(), 4);
  EXPECT_EQ(rb.cursor(), 4);
  std::vector<float> obs = ObsValues(rb.storage());
  EXPECT_EQ(std::vector<float>(obs.begin(), obs.begin() + 5),
            (std::vector<float>{7, 8, 9, 8, 0}));
  rb.add(Row(1.f));  // the reopened buffer keeps writing at the cursor
  EXPECT_EQ(ObsValues(rb.storage())[4], 1.f);
}

TEST(ReplayBufferDiskTest, ReopeningWithAnotherCapacityThrowsNamingBoth) {
  TempDir tmp;
  {
    ReplayBuffer rb(DiskOptions(8, tmp.str()));
    rb.add(Row(0.f));
  }
  ExpectThrowsMsg<c10::ValueError>(
      [&] { ReplayBuffer rb(DiskOptions(16, tmp.str())); },
      "ReplayBuffer: the buffer in '" + tmp.str() +
          "' has capacity 8, but ReplayBufferOptions asks for capacity 16; "
          "reopen it with capacity 8 or use another storage_dir");
}

TEST(ReplayBufferDiskTest, ADirectoryThatIsNotABufferThrowsClearly) {
  TempDir tmp;
  std::ofstream(tmp / "notes.txt") << "hello";
  ExpectThrowsMsg([&] { ReplayBuffer rb(DiskOptions(8, tmp.str())); },
                  "ReplayBuffer: storage_dir '" + tmp.str() +
                      "' is not empty and holds no replay buffer (no "
                      "state/meta.json; found 'notes.txt'); use a new or "
                      "empty directory");
  ExpectThrowsMsg([&] { ReplayBuffer rb(DiskOptions(8, tmp / "notes.txt")); },
                  "ReplayBuffer: storage_dir '" + (tmp / "notes.txt") +
                      "' exists and is not a directory");
  EXPECT_TRUE(Exists(tmp / "notes.txt"));
}

TEST(ReplayBufferDiskTest, ACorruptStateThrowsClearlyInsteadOfCrashing) {
  TempDir tmp;
  {
    ReplayBuffer rb(DiskOptions(8, tmp.str()));
    rb.add(Row(0.f));
  }
  // A truncated leaf file.
  ASSERT_EQ(::truncate((tmp / "state/rows_written.memmap").c_str(), 3), 0);
  ExpectThrowsMsgPrefix([&] { ReplayBuffer rb(DiskOptions(8, tmp.str())); },
                        "ReplayBuffer: cannot reopen the buffer in '" +
                            tmp.str() + "': load_memmap: ");
  // Malformed JSON.
  std::ofstream(tmp / "state/meta.json", std::ios::trunc) << "{not json";
  ExpectThrowsMsgPrefix([&] { ReplayBuffer rb(DiskOptions(8, tmp.str())); },
                        "ReplayBuffer: cannot reopen the buffer in '" +
                            tmp.str() + "': load_memmap: ");
  // A state dict without the buffer's keys.
  RemoveTree(tmp / "state");
  TensorDict({{"capacity", torch::tensor(int64_t{8})}}, {})
      .memmap_(tmp / "state");
  ExpectThrowsMsg([&] { ReplayBuffer rb(DiskOptions(8, tmp.str())); },
                  "ReplayBuffer: cannot reopen the buffer in '" + tmp.str() +
                      "': state/format_version is missing or is not a "
                      "torch.int64 tensor of shape []");
}

TEST(ReplayBufferDiskTest, SamplingAReopenedBufferMatchesTheOriginal) {
  TempDir tmp;
  std::vector<int64_t> index;
  std::vector<float> values;
  {
    ReplayBuffer rb(DiskOptions(32, tmp.str()));
    rb.extend(Rows(40, 0.f));
    rb.manual_seed(5);
    auto [data, info] = rb.sample(16);
    index = Vec(info.index);
    values = ObsValues(data);
  }
  ReplayBuffer rb(DiskOptions(32, tmp.str()));
  rb.manual_seed(5);
  auto [data, info] = rb.sample(16);
  EXPECT_EQ(Vec(info.index), index);
  EXPECT_EQ(ObsValues(data), values);
  std::vector<float> stored = ObsValues(rb.storage());
  for (size_t q = 0; q < index.size(); ++q) {
    EXPECT_EQ(values[q], stored[static_cast<size_t>(index[q])]);
  }
}

TEST(ReplayBufferDiskTest, PrioritiesArePersistedAndResetWhenWrittenWithout) {
  TempDir tmp;
  auto opts = [&] {
    return DiskOptions(8, tmp.str()).sampler(PrioritizedSampler().beta(1.0));
  };
  std::vector<int64_t> index;
  std::vector<float> weight;
  {
    ReplayBuffer rb(opts());
    rb.extend(Rows(8, 0.f));
    rb.update_priority(torch::tensor({0, 1, 2}),
                       torch::tensor({5.0, 0.0, 2.0}));
    rb.manual_seed(9);
    auto [data, info] = rb.sample(64);
    index = Vec(info.index);
    weight = std::vector<float>(info.weight.data_ptr<float>(),
                                info.weight.data_ptr<float>() + 64);
  }
  {
    ReplayBuffer rb(opts());
    rb.manual_seed(9);
    auto [data, info] = rb.sample(64);
    EXPECT_EQ(Vec(info.index), index);
    EXPECT_EQ(std::vector<float>(info.weight.data_ptr<float>(),
                                 info.weight.data_ptr<float>() + 64),
              weight);
    rb.add(Row(50.f));  // gets the largest priority so far, 5
  }
  {
    // Written without a PrioritizedSampler: the priorities are stale.
    ReplayBuffer rb(DiskOptions(8, tmp.str()));
    rb.add(Row(60.f));
  }
  ReplayBuffer rb(opts());
  auto [data, info] = rb.sample(32);
  EXPECT_TRUE(torch::equal(info.weight, torch::ones({32})));  // all equal
}

TEST(ReplayBufferDiskTest, ADiskBufferOnAnotherDeviceThrows) {
  TempDir tmp;
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBuffer rb(DiskOptions(8, tmp.str()).device(at::Device("meta")));
      },
      "ReplayBuffer: a disk-backed storage (storage_dir '" + tmp.str() +
          "') lives on the CPU, but ReplayBufferOptions::device is meta");
}

TEST(ReplayBufferDiskTest, ByDefaultTheStorageFilesReserveTheirSpace) {
  TempDir tmp;
  constexpr int64_t kRows = 4096;  // 4 MiB of float32[256] rows
  ReplayBuffer rb(DiskOptions(kRows, tmp.str()));
  rb.add(TensorDict({{"obs", torch::ones({256})}}, {}));
  struct stat st {};
  ASSERT_EQ(::stat((tmp / "storage/obs.memmap").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, kRows * 256 * 4);
  EXPECT_GE(static_cast<int64_t>(st.st_blocks) * 512, kRows * 256 * 4);
}

TEST(ReplayBufferDiskTest, ASparseStorageLargerThanItsWrittenRowsStaysSparse) {
  TempDir tmp;
  constexpr int64_t kRows = int64_t{1} << 22;  // 4 GiB of float32[256] rows
  ReplayBuffer rb(DiskOptions(kRows, tmp.str()).sparse_storage(true));
  rb.add(TensorDict({{"obs", torch::ones({256})}}, {}));
  const std::string file = tmp / "storage/obs.memmap";
  EXPECT_EQ(FileSize(file), static_cast<uint64_t>(kRows) * 256 * 4);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_LT(static_cast<int64_t>(st.st_blocks) * 512, int64_t{16} << 20);
  EXPECT_EQ(rb.storage().get("obs")[0][255].item<float>(), 1.f);
  EXPECT_EQ(rb.storage().get("obs")[kRows - 1][0].item<float>(), 0.f);
}

TEST(ReplayBufferDiskTest, AFirstWriteCutOffBeforeItsStateIsReplaced) {
  TempDir tmp;
  // What a process killed between storage/ and state/ leaves behind.
  (void)Rows(4, 9.f).memmap_like(tmp / "storage");
  ReplayBuffer rb(DiskOptions(6, tmp.str()));
  EXPECT_TRUE(rb.empty());
  rb.add(TensorDict({{"x", torch::full({2}, 3.f)}}, {}));
  ReplayBuffer reopened(ReplayBufferOptions(6).storage_dir(tmp.str()));
  EXPECT_EQ(reopened.size(), 1);
  EXPECT_EQ(reopened.storage().get("x")[0][1].item<float>(), 3.f);
  EXPECT_EQ(reopened.storage().keys(), std::vector<tensordict::NestedKey>{"x"});
}

}  // namespace

// ---- Checkpoints (dumps / loads)
// ---------------------------------------------------------

namespace {

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "rb_checkpoint_" + name + "_" +
                    std::to_string(::getpid());
  RemoveTree(dir);
  return dir;
}

// Samples `calls` batches of `n` and writes a few rows in between, keeping
// what came out.
std::vector<std::vector<int64_t>> Continue(ReplayBuffer& rb, int64_t n,
                                           int calls, bool prioritized) {
  std::vector<std::vector<int64_t>> out;
  for (int k = 0; k < calls; ++k) {
    auto [data, info] = rb.sample(n);
    out.push_back(Vec(info.index));
    out.push_back(Vec(data.get("t")));
    if (prioritized) {
      rb.update_priority(info.index, torch::arange(n, torch::kDouble) + k);
      out.push_back(Vec((info.weight * 1e6).to(torch::kLong)));
    }
    if (k % 3 == 2) rb.extend(Trajectories({2, 3}, 100 + k, 1000 + 10 * k));
  }
  return out;
}

}  // namespace

TEST(ReplayBufferTest, ACheckpointResumesEverySamplerExactly) {
  const std::vector<tensordict::SamplerConfig> samplers = {
      RandomSampler(),
      SamplerWithoutReplacement(),
      PrioritizedSampler().alpha(0.7).beta(0.5),
      SliceSampler(2),
      SliceSamplerWithoutReplacement(2),
      PrioritizedSliceSampler(2)};
  for (const auto& sampler : samplers) {
    SCOPED_TRACE(sampler.index());
    const bool prioritized = sampler.index() == 2 || sampler.index() == 5;
    auto options = ReplayBufferOptions(24).sampler(sampler).seed(11);
    ReplayBuffer a(options);
    a.extend(Trajectories({5, 3, 7, 2, 6, 4}, 0, 0));  // wraps: 27 rows
    (void)Continue(a, 4, 4, prioritized);  // mid-epoch, priorities set
    const std::string dir = FreshDir(std::to_string(sampler.index()));
    a.dumps(dir);
    const auto expected = Continue(a, 4, 9, prioritized);

    ReplayBuffer b(ReplayBufferOptions(24).sampler(sampler).seed(99));
    b.extend(Trajectories({3}, 50, 500));  // replaced by the checkpoint
    b.loads(dir);
    EXPECT_EQ(b.size(), 24);
    EXPECT_EQ(Continue(b, 4, 9, prioritized), expected);
    // The directory is a storage_dir too.
    ReplayBuffer reopened(
        ReplayBufferOptions(24).sampler(sampler).storage_dir(dir));
    EXPECT_EQ(reopened.size(), 24);
    RemoveTree(dir);
  }
}

TEST(ReplayBufferTest, ACheckpointOfABufferNeverWrittenLoads) {
  // Its checkpoint holds no storage, only checkpoint/ (this used to throw
  // "storage_dir ... holds no replay buffer").
  ReplayBuffer empty(ReplayBufferOptions(24).seed(11));
  const std::string dir = FreshDir("never_written");
  empty.dumps(dir);
  ReplayBuffer b(ReplayBufferOptions(24).seed(99));
  b.extend(Trajectories({3}, 50, 500));
  b.loads(dir);
  EXPECT_EQ(b.size(), 0);
  EXPECT_EQ(b.cursor(), 0);
  // The generator came with it: the same rows give the same samples.
  empty.extend(Trajectories({3}, 50, 500));
  b.extend(Trajectories({3}, 50, 500));
  EXPECT_TRUE(
      at::equal(empty.sample(8).second.index, b.sample(8).second.index));
  RemoveTree(dir);
}

TEST(ReplayBufferTest, ACheckpointKeepsTheRateLimiterAndTheMaxValueWriter) {
  using tensordict::MaxValueWriter;
  auto options =
      ReplayBufferOptions(3)
          .writer(MaxValueWriter().rank_key(tensordict::NestedKey("key")))
          .rate_limiter(tensordict::RateLimiter(1.0).error_buffer(10))
          .seed(1);
  ReplayBuffer a(options);
  a.extend(Ranked({4, 1, 6}));
  (void)a.sample(2);
  const std::string dir = FreshDir("max_value");
  a.dumps(dir);
  ReplayBuffer b(options);
  b.loads(dir);
  EXPECT_EQ(b.rate_limiter_info().inserted, 3);
  EXPECT_EQ(b.rate_limiter_info().sampled, 2);
  // The ranking came back: 5 replaces the 1 (row 1), 0 is dropped.
  EXPECT_EQ(Vec(b.extend(Ranked({5, 0}))), std::vector<int64_t>({1, -1}));
  EXPECT_EQ(StoredKeys(b), std::multiset<float>({4, 5, 6}));
  RemoveTree(dir);
}

TEST(ReplayBufferTest, ACheckpointThatDoesNotFitChangesNothing) {
  auto options = ReplayBufferOptions(10).sampler(SamplerWithoutReplacement());
  ReplayBuffer a(options.seed(3));
  a.extend(Rows(6, 0));
  (void)a.sample(2);
  const std::string dir = FreshDir("mismatch");
  a.dumps(dir);
  ExpectThrowsMsg(
      [&] { a.dumps(dir); },
      "ReplayBuffer::dumps: '" + dir +
          "' is not empty; dumps writes a checkpoint into a new or empty "
          "directory only");

  ReplayBuffer b(options);
  b.extend(Rows(2, 50));
  const State before = Capture(b);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBuffer(
            ReplayBufferOptions(12).sampler(SamplerWithoutReplacement()))
            .loads(dir);
      },
      "ReplayBuffer::loads: '" + dir +
          "' holds a buffer of capacity 10, this buffer has capacity 12");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { ReplayBuffer(ReplayBufferOptions(10)).loads(dir); },
      "ReplayBuffer::loads: '" + dir +
          "' holds a buffer with sampler SamplerWithoutReplacement, this "
          "buffer's is RandomSampler");
  ExpectThrowsMsg([&] { b.loads(dir + "/storage"); },
                  "ReplayBuffer::loads: '" + dir +
                      "/storage' holds no checkpoint (no checkpoint/meta.json; "
                      "ReplayBuffer::dumps writes one)");
  // Rows of another structure.
  ReplayBuffer other(options);
  other.extend(Trajectories({2}, 0, 0));
  const State other_before = Capture(other);
  ExpectThrowsMsgPrefix([&] { other.loads(dir); }, "ReplayBuffer::loads: ");
  ExpectSame(other, other_before);
  // A damaged epoch: not a permutation.
  auto perm = TensorDict::load_memmap(dir + "/checkpoint").get("epoch_perm");
  perm[0] = perm[1].item<int64_t>();
  ExpectThrowsMsgPrefix(
      [&] { b.loads(dir); },
      "ReplayBuffer::loads: the checkpoint's epoch is not a permutation of "
      "its size");
  ExpectSame(b, before);
  RemoveTree(dir);
}

namespace {

// `dir`'s checkpoint with its generator state replaced by `text`.
void SetCheckpointRng(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/checkpoint";
  TensorDict state = TensorDict::load_memmap(path).clone();
  at::Tensor bytes =
      torch::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  state.set("rng", bytes);
  RemoveTree(path);
  state.memmap_(path);
}

// The checkpoint, in a fresh directory `name`, of a buffer of `options`
// holding Rows(6, 0).
std::string DumpSixRows(const ReplayBufferOptions& options, const char* name) {
  ReplayBuffer a(options);
  a.extend(Rows(6, 0));
  const std::string dir = FreshDir(name);
  a.dumps(dir);
  return dir;
}

}  // namespace

TEST(ReplayBufferTest, ACheckpointOf010WithAMersenneTwisterStateLoads) {
  // 0.1.0 saved a std::mt19937_64 state: the generator is seeded from its
  // next draw.
  const auto options = ReplayBufferOptions(10).seed(3);
  const std::string dir = DumpSixRows(options, "mt19937");
  std::mt19937_64 mt(42);
  (void)mt();
  std::ostringstream text;
  text << mt;
  SetCheckpointRng(dir, text.str());

  ReplayBuffer b(options);
  b.loads(dir);
  ReplayBuffer expected(options);
  expected.extend(Rows(6, 0));
  expected.manual_seed(mt());
  EXPECT_EQ(Vec(b.sample(8).second.index),
            Vec(expected.sample(8).second.index));
  RemoveTree(dir);
}

TEST(ReplayBufferTest, ACheckpointWithoutAGeneratorStateChangesNothing) {
  const auto options = ReplayBufferOptions(10).seed(3);
  const std::string dir = DumpSixRows(options, "bad_rng");
  ReplayBuffer b(options);
  b.extend(Rows(2, 50));
  ReplayBuffer twin(options);  // b's generator, untouched
  twin.extend(Rows(2, 50));
  const State before = Capture(b);
  for (const std::string text :
       {"xoshiro256++ 1 2 3", "xoshiro256++ 0 0 0 0", "mt19937 1 2 3", ""}) {
    SCOPED_TRACE(text);
    SetCheckpointRng(dir, text);
    ExpectThrowsMsg([&] { b.loads(dir); },
                    "ReplayBuffer::loads: '" + dir +
                        "': the checkpoint's rng is not a generator state");
    ExpectSame(b, before);
  }
  EXPECT_EQ(Vec(b.sample(8).second.index), Vec(twin.sample(8).second.index));
  RemoveTree(dir);
}
