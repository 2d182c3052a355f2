// Tests of ReplayBufferOptions::shared: a ReplayBuffer that processes
// forked after its construction write into while another samples (TorchRL's
// shared=True), its lazy allocation across processes, the robust
// cross-process lock (a writer killed while holding it blocks nobody) and
// the lifetime of its /dev/shm directory.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/fork_safety.h"
#include "dist_util.h"
#include "test_util.h"

namespace {

using tensordict::NestedKey;
using tensordict::PrioritizedSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::IsDirectory;
using tensordict_test::ParentPath;
using tensordict_test::Reap;
using tensordict_test::TempDir;

constexpr int64_t kWidth = 4096;  // floats per leaf: a torn row is likely

// A row whose every element is `v`: two float leaves and an int64 scalar.
TensorDict Row(int64_t v) {
  return TensorDict(
      {{"obs", torch::full({kWidth}, static_cast<float>(v))},
       {{"next", "obs"}, torch::full({kWidth}, static_cast<float>(v))},
       {"step", torch::scalar_tensor(v, torch::kLong)}},
      {});
}

// The number of rows of `batch` whose elements are not all equal to the
// row's "step" (torn rows).
int64_t TornRows(const TensorDict& batch) {
  const at::Tensor step = batch.get("step").to(torch::kFloat).unsqueeze(1);
  const at::Tensor ok = batch.get("obs").eq(step).all(1).logical_and(
      batch.get(NestedKey({"next", "obs"})).eq(step).all(1));
  return ok.logical_not().sum().item<int64_t>();
}

// Forks a process that runs `body`, then exits 0 (3 if it threw). No
// destructor of the parent's objects runs in the child.
template <typename Fn>
pid_t Fork(Fn&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      body();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  return pid;
}

std::string SharedDir(const ReplayBuffer& rb) {
  return ParentPath(rb.storage().saved_path().value_or(""));
}

TEST(ReplayBufferSharedTest, ForkedActorsWriteWhileALearnerSamplesNoTornRows) {
  constexpr int kActors = 3;
  constexpr int64_t kRowsEach = 300;
  ReplayBuffer rb(ReplayBufferOptions(50).shared(true).seed(0));
  // Forked before any write: whichever actor writes first allocates the
  // storage, and the others (and the learner) map it.
  std::vector<pid_t> actors;
  for (int a = 0; a < kActors; ++a) {
    actors.push_back(Fork([&rb, a] {
      for (int64_t k = 0; k < kRowsEach; ++k) rb.add(Row(a * 100000 + k));
    }));
  }
  int64_t sampled = 0;
  int64_t torn = 0;
  int running = kActors;
  while (running > 0) {
    for (pid_t& pid : actors) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        pid = 0;
        --running;
      }
    }
    if (rb.size() == 0) continue;
    auto [batch, info] = rb.sample(16);
    torn += TornRows(batch);
    sampled += 16;
  }
  EXPECT_GT(sampled, 0);
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(rb.size(), 50);
  EXPECT_EQ(rb.cursor(), (kActors * kRowsEach) % 50);
  // Every stored row is whole and is the latest rows' of some actor.
  const TensorDict st = rb.storage();
  EXPECT_EQ(TornRows(st), 0);
  const at::Tensor step = st.get("step");
  EXPECT_TRUE(step.remainder(100000).ge(kRowsEach - 50).all().item<bool>());
}

TEST(ReplayBufferSharedTest, AWriterKilledHoldingTheLockBlocksNobody) {
  ReplayBuffer rb(ReplayBufferOptions(8).shared(true).seed(0));
  for (int64_t v = 0; v < 10; ++v) rb.add(Row(v));  // full: cursor 2
  ASSERT_EQ(rb.cursor(), 2);
  // The writer's source is unreadable memory: the write faults after taking
  // the lock and validating the row, and the fault handler kills the
  // process there, mid-copy.
  const pid_t writer = ::fork();
  if (writer == 0) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { ::kill(::getpid(), SIGKILL); };
    ::sigaction(SIGSEGV, &sa, nullptr);
    ::sigaction(SIGBUS, &sa, nullptr);
    void* p = ::mmap(nullptr, kWidth * sizeof(float), PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TensorDict row = Row(77);
    row.set({"next", "obs"}, torch::from_blob(p, {kWidth}, torch::kFloat));
    rb.add(row);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(writer, &status, 0), writer);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the writer was expected to die inside add()";
  // Another process takes the lock over (bounded: a deadlock fails here).
  const pid_t checker = Fork([&rb] {
    if (rb.size() != 8 || rb.cursor() != 2) ::_exit(4);  // not counted
    rb.add(Row(100));
    auto [batch, info] = rb.sample(64);
    if (TornRows(batch) != 0 || rb.cursor() != 3) ::_exit(5);
  });
  ASSERT_EQ(Reap(checker, std::chrono::seconds(20)), 0);
  EXPECT_EQ(rb.size(), 8);
  EXPECT_EQ(rb.cursor(), 3);
  EXPECT_EQ(rb.storage().get("step")[2].item<int64_t>(), 100);
  rb.add(Row(101));
  EXPECT_EQ(rb.cursor(), 4);
}

TEST(ReplayBufferSharedTest, TheSharedDirectoryGoesWithItsCreatorsBuffer) {
  auto rb = std::make_unique<ReplayBuffer>(ReplayBufferOptions(4).shared(true));
  rb->add(Row(1));
  const std::string dir = SharedDir(*rb);
  EXPECT_EQ(dir.rfind("/dev/shm/tensordict-replay-", 0), 0u) << dir;
  EXPECT_TRUE(IsDirectory(dir + "/storage"));
  // A forked process that destroys its copy leaves the directory alone.
  const pid_t child = Fork([&rb] { rb.reset(); });
  ASSERT_EQ(Reap(child, std::chrono::seconds(20)), 0);
  EXPECT_TRUE(IsDirectory(dir + "/storage"));
  rb.reset();
  EXPECT_FALSE(Exists(dir));
}

TEST(ReplayBufferSharedTest, AStorageDirIsSharedInPlace) {
  TempDir tmp;
  ReplayBuffer rb(ReplayBufferOptions(16).shared(true).storage_dir(tmp.str()));
  const pid_t child = Fork([&rb] {
    for (int64_t v = 0; v < 5; ++v) rb.add(Row(v));
  });
  ASSERT_EQ(Reap(child, std::chrono::seconds(20)), 0);
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.storage().saved_path().value_or(""), tmp.str() + "/storage");
  EXPECT_EQ(rb.storage().get("step")[4].item<int64_t>(), 4);
  rb.add(Row(5));
  EXPECT_EQ(ReplayBuffer(ReplayBufferOptions(16).storage_dir(tmp.str())).size(),
            6);  // the directory outlives the buffer
  EXPECT_TRUE(Exists(tmp.str() + "/storage"));
}

TEST(ReplayBufferSharedTest, RejectsThePrioritizedSampler) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ReplayBuffer rb(
            ReplayBufferOptions(4).shared(true).sampler(PrioritizedSampler()));
      },
      "ReplayBufferOptions: a shared buffer cannot use PrioritizedSampler "
      "(its trees live in one process's memory); use RandomSampler, "
      "SamplerWithoutReplacement or SliceSampler");
}

// Sets LibTorch's intra-op thread count for one scope.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int n) : saved_(at::get_num_threads()) {
    at::set_num_threads(n);
  }
  ~IntraOpThreads() { at::set_num_threads(saved_); }
  IntraOpThreads(const IntraOpThreads&) = delete;
  IntraOpThreads& operator=(const IntraOpThreads&) = delete;

 private:
  int saved_;
};

// Work that LibTorch splits across its intra-op threads (well over one
// grain of elements per op).
bool ParallelWork() {
  const at::Tensor big = torch::rand({1 << 22});
  return big.eq(big).all().item<bool>() &&
         big.add(1).gt(0.5).any().item<bool>();
}

// core/fork_safety.h: with OpenMP, a child forked after this thread ran
// parallel regions would wait forever in its first one.
TEST(ForkSafety,
     ChildrenForkedAfterParallelWorkRunTensorDictOpsAndTheSharedBuffer) {
  IntraOpThreads threads(4);
  ReplayBuffer rb(ReplayBufferOptions(64).shared(true).seed(0));
  rb.add(Row(1));
  ASSERT_TRUE(ParallelWork());
  const bool openmp = tensordict::detail::register_fork_handler();
  const pid_t child = Fork([&rb, openmp] {
    if (!ParallelWork()) ::_exit(5);
    if (openmp && at::get_num_threads() != 1) ::_exit(4);
    // Dict ops over leaves large enough to be split across threads.
    TensorDict td({{"a", torch::rand({256, 4096})},
                   {{"n", "b"}, torch::rand({256, 4096})}},
                  {256});
    const TensorDict twice =
        td.apply([](const at::Tensor& t) { return t * 2; });
    const TensorDict both = tensordict::stack({td, twice}, 0);
    if (!(both[1] == twice).all() || !(td.clone() == td).all()) ::_exit(6);
    if (!torch::equal(twice.get({"n", "b"}), td.get({"n", "b"}) * 2))
      ::_exit(7);
    for (int64_t v = 2; v < 40; ++v) rb.add(Row(v));
    auto [batch, info] = rb.sample(32);
    if (TornRows(batch) != 0) ::_exit(8);
  });
  EXPECT_EQ(Reap(child, std::chrono::seconds(60)), 0)
      << "-1: the child hung (killed after 60 s) or died of a signal; "
         "another code: the check above that exits with it failed";
  EXPECT_EQ(rb.size(), 39);
}

}  // namespace
