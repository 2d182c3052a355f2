// TensorDicts between processes (tensordict/distributed.h): each test starts
// its peers (tensordict_dist_peer, ranks 1...) on loopback, joins the group
// as rank 0 and plays its side of a scenario. Every wait is bounded.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist_util.h"
#include "test_paths.h"
#include "test_util.h"

namespace {

using tensordict::Group;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;
using tensordict_test::WireDict;
using tensordict_test::ZeroWireDict;
using namespace std::chrono_literals;

bool Same(const TensorDict& a, const TensorDict& b) {
  return a.keys(true, true) == b.keys(true, true) && (a == b).all();
}

// Rank 0 of a group whose other ranks play `scenarios` (one per rank).
// The group's `timeout` bounds its rendezvous too: with a short one (a
// test of timeouts), a peer process that starts slowly (a sanitized build
// on a loaded machine took more than 1.5 s) misses the rendezvous, and the
// group is made again, with new peers, up to three times.
class Peers {
 public:
  explicit Peers(const std::vector<std::string>& scenarios,
                 std::chrono::milliseconds timeout = 20s) {
    const int attempts = timeout < 10s ? 3 : 1;
    for (int attempt = 1;; ++attempt) {
      try {
        Start(scenarios, timeout);
        return;
      } catch (const c10::Error& e) {
        for (pid_t pid : pids_) tensordict_test::Reap(pid, 0ms);
        pids_.clear();
        if (attempt == attempts || e.msg().rfind("make_gloo_group: ", 0) != 0) {
          throw;
        }
      }
    }
  }
  ~Peers() {
    for (pid_t pid : pids_) tensordict_test::Reap(pid, 0ms);
  }
  const Group& pg() const { return *pg_; }
  // The exit status of every peer (-1: killed after `wait`).
  std::vector<int> Finish(std::chrono::milliseconds wait = 30s) {
    std::vector<int> codes;
    for (pid_t pid : pids_) codes.push_back(tensordict_test::Reap(pid, wait));
    pids_.clear();
    return codes;
  }
  // Lets a peer waiting in its "done" receive exit.
  void Done(int rank = 1) {
    TensorDict done({}, {1});
    done.set("done", at::ones({1}, at::kBool));
    tensordict::send(done, rank, pg(), 1000);
  }

 private:
  void Start(const std::vector<std::string>& scenarios,
             std::chrono::milliseconds timeout) {
    const int port = tensordict_test::FreePort();
    const int size = static_cast<int>(scenarios.size()) + 1;
    for (size_t i = 0; i < scenarios.size(); ++i) {
      pids_.push_back(tensordict_test::Spawn(
          {tensordict_test::DistPeerPath(), scenarios[i], std::to_string(i + 1),
           std::to_string(size), std::to_string(port),
           std::to_string(timeout.count())}));
    }
    tensordict::GlooGroupOptions options;
    options.port = port;
    options.timeout = timeout;
    pg_ =
        std::make_unique<Group>(tensordict::make_gloo_group(0, size, options));
  }

  std::vector<pid_t> pids_;
  std::unique_ptr<Group> pg_;
};

TEST(Distributed, RecvEveryDtypeNestedInPlace) {
  Peers peers({"send"});
  TensorDict td = ZeroWireDict();
  const at::Tensor obs = td.get({"next", "obs"});
  const void* ptr = obs.data_ptr();
  tensordict::recv(td, 1, peers.pg());
  EXPECT_TRUE(Same(td, WireDict(1)));
  // Received in place: the stored tensors keep their identity and memory.
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_EQ(td.get({"next", "obs"}).data_ptr(), ptr);
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

// A message shorter than its leaf writes its bytes and leaves the rest of
// the leaf as it was, as Python's recv (into the leaf) does: never
// uninitialized memory. The leaf is large enough that a fresh staging
// buffer would come from new pages.
TEST(Distributed, AShortMessageLeavesTheRestOfTheLeafAsItWas) {
  Peers peers({"send_short"});
  const at::Tensor before =
      at::arange(2 * 300000, at::kFloat).reshape({2, 300000});
  TensorDict td({{"x", before.clone()}}, {2});
  tensordict::recv(td, 1, peers.pg());
  const at::Tensor x = td.get("x").reshape(-1);
  EXPECT_TRUE(at::equal(x.slice(0, 0, 4), at::full({4}, -1.0f)));
  EXPECT_TRUE(at::equal(x.slice(0, 4), before.reshape(-1).slice(0, 4)));
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, SendEveryDtypeNested) {
  Peers peers({"recv"});
  tensordict::send(WireDict(2), 1, peers.pg());
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, SendsNonContiguousLeavesAsTheirValues) {
  Peers peers({"recv"});
  TensorDict td = WireDict(2);
  // A transposed copy of the same values: the wire carries values, not
  // memory layout.
  const at::Tensor zeta = td.get("zeta");
  td.set("zeta", zeta.t().contiguous().t());
  ASSERT_FALSE(td.get("zeta").is_contiguous());
  tensordict::send(td, 1, peers.pg());
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, IsendAndIrecv) {
  {
    Peers peers({"isend"});
    TensorDict td = ZeroWireDict();
    tensordict::Work work = tensordict::irecv(td, 1, peers.pg());
    work.wait();
    EXPECT_TRUE(work.is_completed());
    EXPECT_TRUE(Same(td, WireDict(1)));
    work.wait();  // a second wait returns at once
    EXPECT_EQ(peers.Finish(), std::vector<int>{0});
  }
  {
    Peers peers({"irecv"});
    tensordict::Work work = tensordict::isend(WireDict(2), 1, peers.pg());
    work.wait();
    EXPECT_EQ(peers.Finish(), std::vector<int>{0});
  }
}

// Polls `work.is_completed()` for up to 20 s; whether it turned true.
bool CompletesWithoutWait(const tensordict::Work& work) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!work.is_completed()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A loop polling is_completed() ends once every message arrived, before any
// wait() (Gloo's own works say they completed only once waited on); a
// receive still writes only in wait().
TEST(Distributed, IsCompletedTurnsTrueOnceTheMessagesArrived) {
  {
    Peers peers({"send"});
    TensorDict td = ZeroWireDict();
    tensordict::Work work = tensordict::irecv(td, 1, peers.pg());
    EXPECT_TRUE(CompletesWithoutWait(work));
    EXPECT_TRUE(Same(td, ZeroWireDict()));
    work.wait();
    EXPECT_TRUE(Same(td, WireDict(1)));
    EXPECT_EQ(peers.Finish(), std::vector<int>{0});
  }
  {
    Peers peers({"recv"});
    tensordict::Work work = tensordict::isend(WireDict(2), 1, peers.pg());
    EXPECT_TRUE(CompletesWithoutWait(work));
    work.wait();
    EXPECT_EQ(peers.Finish(), std::vector<int>{0});
  }
}

TEST(Distributed, IrecvWritesOnlyInWait) {
  Peers peers({"send"});
  TensorDict td = ZeroWireDict();
  tensordict::Work work = tensordict::irecv(td, 1, peers.pg());
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});  // every message sent
  EXPECT_TRUE(Same(td, ZeroWireDict()));
  work.wait();
  EXPECT_TRUE(Same(td, WireDict(1)));
}

TEST(Distributed, RecvIntoARowOfABuffer) {
  Peers peers({"send"});
  TensorDict zero = ZeroWireDict();
  TensorDict buffer = tensordict::stack({zero, zero, zero});  // [3, 2]
  tensordict::recv(buffer[1], 1, peers.pg());
  EXPECT_TRUE(Same(buffer[1], WireDict(1)));
  EXPECT_TRUE(Same(buffer[0], zero));
  EXPECT_TRUE(Same(buffer[2], zero));
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, ConsolidatedDictsMoveAsOneMessage) {
  Peers peers({"send_consolidated"});
  TensorDict td = ZeroWireDict().consolidate();
  const void* storage = td.get("zeta").storage().data_ptr().get();
  ExpectThrowsMsg(
      [&] { tensordict::recv(ZeroWireDict(), 1, peers.pg(), 3, true); },
      "recv: consolidated=true needs a consolidated dict (see "
      "consolidate())");
  tensordict::recv(td, 1, peers.pg(), 3, /*consolidated=*/true);
  EXPECT_TRUE(Same(td, WireDict(1)));
  EXPECT_TRUE(td.is_consolidated());
  EXPECT_EQ(td.get("zeta").storage().data_ptr().get(), storage);
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, FromRemoteInitReceivesADictAndItsStructure) {
  Peers peers({"init_remote"});
  TensorDict td = tensordict::from_remote_init(1, peers.pg());
  EXPECT_TRUE(tensordict_test::SameDict(td, WireDict(1)));
  EXPECT_TRUE(td.is_consolidated());
  EXPECT_EQ(td.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>{2});
  // Python's order on arrival: a level's leaves, then its sub-dicts.
  EXPECT_EQ(td.keys().back(), tensordict::NestedKey("next"));
  tensordict::recv(td, 1, peers.pg(), 0, /*consolidated=*/true);
  EXPECT_TRUE(tensordict_test::SameDict(td, WireDict(2)));
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, InitRemoteRejectsKeysOfTheMetadataLayout) {
  Peers peers({"silent"});
  TensorDict td({}, {2});
  td.set({"leaves", "x"}, at::zeros({2}));
  ExpectThrowsMsg([&] { tensordict::init_remote(td, 1, peers.pg()); },
                  "init_remote: the key leaves names a field of Python's "
                  "metadata layout and cannot be a sub-dict");
  peers.Done();
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, FromRemoteInitRejectsMetadataThatIsNotPlainData) {
  Peers peers({"bad_metadata"});
  ExpectThrowsMsg(
      [&] { (void)tensordict::from_remote_init(1, peers.pg()); },
      "from_remote_init: unsupported pickle opcode 0x63 (only plain "
      "data is read)");
  peers.Done();
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, InitTag) {
  Peers peers({"send_tag7"});
  TensorDict td = ZeroWireDict();
  tensordict::recv(td, 1, peers.pg(), 7);
  EXPECT_TRUE(Same(td, WireDict(1)));
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, PeerDyingMidTransferLeavesTheDictUnchanged) {
  Peers peers({"die_after_3"});
  TensorDict td = ZeroWireDict();
  const auto snap = TakeSnapshot(td);
  // The peer sends the first three leaves in the wire order (alpha, c128,
  // c64) and exits: the fourth (empty, tag 3) never comes.
  ExpectThrowsMsgPrefix([&] { tensordict::recv(td, 1, peers.pg()); },
                        "recv: key empty (tag 3): ");
  ExpectUnchanged(td, snap);
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, SilentPeerTimesOutLeavingTheDictUnchanged) {
  Peers peers({"silent"}, 1500ms);
  TensorDict td = ZeroWireDict();
  const auto snap = TakeSnapshot(td);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    tensordict::recv(td, 1, peers.pg());
    ADD_FAILURE() << "recv returned";
  } catch (const c10::Error& e) {
    EXPECT_NE(e.msg().find("recv: key alpha (tag 0): "), std::string::npos)
        << e.msg();
    EXPECT_NE(e.msg().find("Timed out"), std::string::npos) << e.msg();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ExpectUnchanged(td, snap);
  peers.Finish(10s);  // the timed-out group is unusable: the peer fails too
}

TEST(Distributed, LocalErrorsComeBeforeAnyMessage) {
  Peers peers({"silent"});
  const Group& pg = peers.pg();
  ExpectThrowsMsg([&] { tensordict::send(WireDict(1), 2, pg); },
                  "send: destination rank 2 is out of range for a group of "
                  "size 2");
  ExpectThrowsMsg([&] { tensordict::send(WireDict(1), 0, pg); },
                  "send: destination rank 0 is this process");
  ExpectThrowsMsg([&] { tensordict::recv(ZeroWireDict(), -1, pg); },
                  "recv: source rank -1 is out of range for a group of size 2");
  ExpectThrowsMsg([&] { tensordict::send(WireDict(1), 1, pg, -1); },
                  "send: init_tag must be non-negative, got -1");
  {
    TensorDict td = WireDict(1);
    td.set({"next", "obs"}, at::zeros({2, 4}, at::kHalf).to(at::kMeta));
    ExpectThrowsMsg([&] { tensordict::send(td, 1, pg); },
                    "send: key ('next', 'obs'): Gloo moves CPU and CUDA "
                    "tensors, not meta ones");
  }
  {
    TensorDict td = ZeroWireDict();
    td.set("i64", at::zeros({2}, at::kLong).to_sparse());
    ExpectThrowsMsg([&] { tensordict::recv(td, 1, pg); },
                    "recv: key i64: only dense (strided) tensors can be sent");
  }
  {
    // The write plan's checks run before anything is received.
    TensorDict td = ZeroWireDict();
    td.set("zeta", at::zeros({1, 3}).expand({2, 3}));
    const auto snap = TakeSnapshot(td);
    ExpectThrowsMsgPrefix([&] { tensordict::recv(td, 1, pg); },
                          "recv: key zeta: ");
    ExpectUnchanged(td, snap);
  }
  {
    TensorDict td = ZeroWireDict();
    td.set("alpha", at::zeros({2}, at::kDouble).requires_grad_());
    const auto snap = TakeSnapshot(td);
    ExpectThrowsMsg([&] { tensordict::recv(td, 1, pg); },
                    "recv: key alpha: a leaf tensor that requires grad cannot "
                    "be modified in place (use torch::NoGradGuard, or detach "
                    "it first)");
    ExpectUnchanged(td, snap);
  }
  // Nothing went over the wire: the peer's receive at tag 1000 gets the
  // "done" message, not a leaf.
  peers.Done();
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

// ---- Collectives ------------------------------------------------------------

TEST(Distributed, CollectivesOverThreeRanks) {
  Peers peers({"collectives", "collectives"});
  EXPECT_EQ(tensordict_test::CollectiveRound(peers.pg()), "");
  EXPECT_EQ(peers.Finish(), (std::vector<int>{0, 0}));
}

TEST(Distributed, CollectivesOverTwoRanks) {
  Peers peers({"collectives"});
  EXPECT_EQ(tensordict_test::CollectiveRound(peers.pg()), "");
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, CollectivesRejectWhatTheyCannotReduce) {
  Peers peers({"partner_of_failing_rank0"});
  TensorDict td = tensordict_test::ReduceDict(0);
  td.set({"sub", "flag"}, at::zeros({3}, at::kBool));
  ExpectThrowsMsg(
      [&] {
        tensordict::all_reduce(td, tensordict::ReduceOp::kSum, peers.pg());
      },
      "all_reduce: key ('sub', 'flag'): cannot reduce torch.bool tensors");
  ExpectThrowsMsg(
      [&] {
        tensordict::all_reduce(tensordict_test::ReduceDict(0),
                               tensordict::ReduceOp::kMean, peers.pg());
      },
      "all_reduce: key i16: kMean needs floating-point leaves, got "
      "torch.int16");
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, StructureMismatchFailsOnEveryRankBeforeDataMoves) {
  Peers peers({"mismatch", "mismatch"});
  TensorDict td = tensordict_test::ReduceDict(0);
  const auto snap = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        tensordict::all_reduce(td, tensordict::ReduceOp::kSum, peers.pg());
      },
      tensordict_test::kMismatchMessage);
  ExpectUnchanged(td, snap);
  EXPECT_EQ(peers.Finish(), (std::vector<int>{0, 0}));
}

TEST(Distributed, ALocalCheckFailingOnOneRankFailsEveryRank) {
  Peers peers({"grad_leaf"});
  TensorDict td = tensordict_test::ReduceDict(0);
  ExpectThrowsMsg([&] { tensordict::broadcast(td, 0, peers.pg()); },
                  "broadcast: rank 1 failed its local checks (its error names "
                  "the key)");
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

TEST(Distributed, CollectiveLocalErrors) {
  Peers peers({"silent"});
  const Group& pg = peers.pg();
  ExpectThrowsMsg(
      [&] { tensordict::broadcast(tensordict_test::ReduceDict(0), 2, pg); },
      "broadcast: root rank 2 is out of range for a group of size 2");
  peers.Done();
  EXPECT_EQ(peers.Finish(), std::vector<int>{0});
}

}  // namespace

namespace {

// ---- Shared memory on one machine ---------------------------------------------

TEST(SharedMemory, ShareMemoryMovesEveryLeafInPlaceForForkedProcesses) {
  TensorDict td = WireDict(1);
  const TensorDict before = td.clone();
  const at::Tensor zeta = td.get("zeta");
  const at::Tensor view = zeta[1];  // a view keeps viewing the moved storage
  EXPECT_FALSE(td.is_shared());
  EXPECT_TRUE(td.share_memory_().is_shared());
  EXPECT_TRUE(td.is_locked());
  EXPECT_TRUE(td.get("zeta").is_same(zeta));
  EXPECT_TRUE(tensordict_test::SameDict(td, before));
  // A process forked now writes through the same memory.
  float* data = zeta.data_ptr<float>();
  const pid_t pid = ::fork();
  if (pid == 0) {
    data[3] = 42.0f;  // zeta[1][0]
    ::_exit(0);
  }
  ASSERT_EQ(tensordict_test::Reap(pid, 10s), 0);
  EXPECT_EQ(zeta[1][0].item<float>(), 42.0f);
  EXPECT_EQ(view[0].item<float>(), 42.0f);
  // Already shared: nothing moves again.
  const void* ptr = zeta.data_ptr();
  td.share_memory_();
  EXPECT_EQ(td.get("zeta").data_ptr(), ptr);
}

TEST(SharedMemory, ShareMemoryOfAnotherDeviceChangesNothing) {
  TensorDict td = WireDict(1);
  td.set("m", at::zeros({2}).to(at::kMeta));
  const void* ptr = td.get("zeta").data_ptr();
  ExpectThrowsMsg([&] { td.share_memory_(); },
                  "share_memory_: key m: only CPU and CUDA tensors can be "
                  "shared, not meta ones");
  EXPECT_EQ(td.get("zeta").data_ptr(), ptr);
  EXPECT_FALSE(td.is_locked());
}

}  // namespace
