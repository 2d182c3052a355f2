// MultiSyncCollector and MultiAsyncCollector on worker processes
// (CollectorOptions::processes, tensordict/collectors.h): the same batches
// as worker threads, replay buffers fed whole batches, weights pushed into
// every process, and the failure model: a worker that throws, dies or
// hangs, shutdown and the destructor. (Not under ThreadSanitizer, which
// does not follow forks.)
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <tensordict/transforms.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "count_env.h"
#include "multi_collector_util.h"
#include "test_util.h"

using tensordict::CartPoleEnv;
using tensordict::CollectorOptions;
using tensordict::EnvFactory;
using tensordict::MultiAsyncCollector;
using tensordict::MultiSyncCollector;
using tensordict::NestedKey;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict_test::Counters;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::Fault;
using tensordict_test::FaultyEnv;
using tensordict_test::Ids;
using tensordict_test::SecondsSince;

namespace {

const NestedKey& kTrajIds = tensordict_test::TrajIdsKey();

EnvFactory Faulty(int64_t at, Fault fault) {
  return [at, fault] { return std::make_unique<FaultyEnv>(at, fault); };
}

EnvFactory CartPoles() {
  return [] { return std::make_unique<CartPoleEnv>(std::vector<int64_t>{4}); };
}

// The policy of the weight tests: a linear layer's argmax.
TensorDictModule ArgmaxActor(const TensorDictModule& linear) {
  const TensorDictModule act(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0].argmax(-1)};
      },
      {"logits"}, {"action"});
  return tensordict::TensorDictSequential({linear, act});
}

}  // namespace

// Seeded worker processes give the batches worker threads give (but the
// ids, which the workers draw from one counter in their own order), in
// both modes; the ids are unique across workers.
TEST(CollectorProcesses, GiveTheBatchesOfWorkerThreads) {
  auto first_batches = [](bool processes) {
    MultiSyncCollector collector(
        {CartPoles(), CartPoles()}, nullptr,
        CollectorOptions(64).total_frames(128).processes(processes));
    EXPECT_EQ(collector.worker_pids().size(), processes ? 2U : 0U);
    collector.set_seed(7);
    std::vector<TensorDict> out;
    for (const TensorDict& batch : collector) {
      EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({2, 4, 8}));
      const std::set<int64_t> first = Ids(batch.get(kTrajIds)[0]);
      for (int64_t id : Ids(batch.get(kTrajIds)[1])) {
        EXPECT_EQ(first.count(id), 0U) << id;
      }
      out.push_back(batch.exclude({kTrajIds}).clone());
    }
    EXPECT_EQ(collector.frames(), 128);
    return out;
  };
  const std::vector<TensorDict> threads = first_batches(false);
  const std::vector<TensorDict> processes = first_batches(true);
  ASSERT_EQ(threads.size(), 2U);
  ASSERT_EQ(processes.size(), 2U);
  for (size_t b = 0; b < threads.size(); ++b) {
    EXPECT_EQ(processes[b].keys(true, true), threads[b].keys(true, true));
    for (const NestedKey& key : threads[b].keys(true, true)) {
      EXPECT_TRUE(at::equal(processes[b].get(key), threads[b].get(key)))
          << key.str();
    }
  }
}

// Counters whose first step meets the other worker's over two pipes: each
// writes a byte to the other and waits for the other's (5 s at most), so
// both workers have begun a batch before either finishes one.
class Meet final : public tensordict::Transform {
 public:
  Meet(int in, int out) : in_(in), out_(out) {}
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override {
    if (!met_) {
      char byte = 1;
      pollfd p{in_, POLLIN, 0};
      TORCH_CHECK(::write(out_, &byte, 1) == 1 && ::poll(&p, 1, 5000) == 1 &&
                      ::read(in_, &byte, 1) == 1,
                  "Meet: the other worker never stepped");
      met_ = true;
    }
    Transform::step(td, inner_next, next);
  }

 private:
  int in_;
  int out_;
  bool met_ = false;
};

TEST(CollectorProcesses, AsyncYieldsOneWorkersBatchAtATime) {
  int to0[2];
  int to1[2];
  ASSERT_EQ(::pipe(to0), 0);
  ASSERT_EQ(::pipe(to1), 0);
  auto meet = [](int in, int out) -> EnvFactory {
    return [in, out] {
      return std::make_unique<tensordict::TransformedEnv>(
          Counters()(), std::make_shared<Meet>(in, out));
    };
  };
  MultiAsyncCollector collector(
      {meet(to0[0], to1[1]), meet(to1[0], to0[1])}, nullptr,
      CollectorOptions(24).total_frames(96).processes(true));
  for (int fd : {to0[0], to0[1], to1[0], to1[1]}) ::close(fd);
  int batches = 0;
  std::set<int64_t> workers;
  for (const TensorDict& batch : collector) {
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({3, 4}));
    workers.insert(collector.last_worker());
    // The counters' steps: obs goes 0, 1, 2, ... along each trajectory.
    EXPECT_TRUE(at::equal(batch.get({"next", "obs"}), batch.get("obs") + 1));
    ++batches;
  }
  EXPECT_EQ(batches, 8);
  EXPECT_EQ(collector.frames(), 96);
  EXPECT_EQ(workers, std::set<int64_t>({0, 1}));
}

// The caller writes each worker's whole batch into the buffer (split and
// post-processed), within total_frames, and yields empty dicts.
TEST(CollectorProcesses, WholeBatchesReachTheBuffer) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    ReplayBuffer rb(ReplayBufferOptions(1000));
    const auto options = CollectorOptions(24)
                             .total_frames(240)
                             .replay_buffer(&rb)
                             .processes(true)
                             .postproc([](const TensorDict& b) {
                               TensorDict out = b.clone();
                               out.set("seen", at::ones(b.batch_size()));
                               return out;
                             });
    auto run = [&](auto& collector) {
      for (const TensorDict& batch : collector) EXPECT_TRUE(batch.empty());
    };
    if (sync) {
      MultiSyncCollector collector({Counters(), Counters()}, nullptr, options);
      run(collector);
    } else {
      MultiAsyncCollector collector({Counters(), Counters()}, nullptr, options);
      run(collector);
    }
    EXPECT_EQ(rb.size(), 240);
    const TensorDict all = rb.sample(240).first;
    EXPECT_TRUE(all.get("seen").eq(1).all().item<bool>());
  }
}

// Weights pushed into the worker processes: the next batch's actions are
// the learner's policy's; a bad update changes nothing.
TEST(CollectorProcesses, UpdatePolicyWeightsReachesEveryProcess) {
  torch::manual_seed(0);
  const TensorDictModule linear(torch::nn::Linear(1, 2), {"obs"}, {"logits"});
  const TensorDictModule learner(torch::nn::Linear(1, 2), {"obs"}, {"logits"});
  MultiSyncCollector collector({Counters(), Counters()}, ArgmaxActor(linear),
                               CollectorOptions(24).processes(true));
  auto actions_of = [](const TensorDictModule& m, const TensorDict& batch) {
    const at::NoGradGuard no_grad;
    const TensorDict td = batch.select({"obs"}).clone();
    m(td);
    return td.get("logits").argmax(-1);
  };
  const TensorDict first = collector.next().clone();
  EXPECT_TRUE(at::equal(first.get("action"), actions_of(linear, first)));
  // The first policy's logits negated: every argmax flips.
  {
    const at::NoGradGuard no_grad;
    (void)tensordict::from_module(learner).update_(
        tensordict::from_module(linear).apply(
            [](const at::Tensor& t) { return -t; }));
  }
  TensorDict params;
  params.set({"module", "0"}, tensordict::from_module(learner));
  // A bad update first: nothing changes, in the caller or the workers.
  TensorDict bad = params.clone();
  bad.set({"module", "0", "module", "weight"}, at::zeros({3, 1}));
  const at::Tensor before =
      tensordict::from_module(linear).get({"module", "weight"}).clone();
  EXPECT_THROW(collector.update_policy_weights_(bad), c10::Error);
  EXPECT_TRUE(at::equal(
      tensordict::from_module(linear).get({"module", "weight"}), before));
  const TensorDict second = collector.next().clone();
  EXPECT_TRUE(at::equal(second.get("action"), actions_of(linear, second)));
  const TensorDict old = tensordict::from_module(linear).clone();
  collector.update_policy_weights_(params);
  const TensorDict third = collector.next();
  EXPECT_TRUE(at::equal(third.get("action"), actions_of(learner, third)));
  // The old policy would have acted otherwise on this batch (the check
  // above can fail), and the caller's policy has the new weights too.
  const at::Tensor old_logits =
      at::linear(third.get("obs"), old.get({"module", "weight"}),
                 old.get({"module", "bias"}));
  EXPECT_FALSE(at::equal(third.get("action"), old_logits.argmax(-1)));
  EXPECT_TRUE(
      (tensordict::from_module(linear) == tensordict::from_module(learner))
          .all());
}

// A worker that throws is named with its message, at once.
TEST(CollectorProcesses, AWorkerThatThrowsIsNamed) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    const auto collector = tensordict_test::MakeMulti(
        sync, {Faulty(0, Fault::kThrow), Faulty(6, Fault::kThrow)},
        CollectorOptions(8).processes(true));
    tensordict_test::ExpectFailsWithinASecond(
        *collector,
        std::string(sync ? "MultiSyncCollector" : "MultiAsyncCollector") +
            ": worker 1 failed: the simulator broke at step 6");
  }
}

// A worker process that dies (an abort in its env, or a kill from outside)
// makes the call raise within a second, naming it, its pid and the signal.
TEST(CollectorProcesses, AWorkerThatDiesIsNamed) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    const std::string name =
        sync ? "MultiSyncCollector" : "MultiAsyncCollector";
    const auto options = CollectorOptions(8).processes(true);
    auto expected = [&](const tensordict::MultiCollector& c, int signal) {
      return name + ": worker 1 (pid " + std::to_string(c.worker_pids()[1]) +
             ") died: signal " + std::to_string(signal);
    };
    const auto aborts = tensordict_test::MakeMulti(
        sync, {Faulty(0, Fault::kThrow), Faulty(6, Fault::kAbort)}, options);
    tensordict_test::ExpectFailsWithinASecond(*aborts,
                                              expected(*aborts, SIGABRT));
    const auto killed = tensordict_test::MakeMulti(
        sync, {Faulty(0, Fault::kThrow), Faulty(0, Fault::kThrow)}, options);
    (void)killed->next();
    ASSERT_EQ(kill(static_cast<pid_t>(killed->worker_pids()[1]), SIGKILL), 0);
    tensordict_test::ExpectFailsWithinASecond(*killed,
                                              expected(*killed, SIGKILL));
  }
}

// A worker stuck in its env makes the call raise after `timeout`, naming
// it; shutdown kills it and returns; the destructor reaps every worker.
TEST(CollectorProcesses, AStuckWorkerTimesOutAndShutdownReturns) {
  std::vector<int64_t> pids;
  {
    MultiSyncCollector collector(
        {Faulty(0, Fault::kThrow), Faulty(6, Fault::kHang)}, nullptr,
        CollectorOptions(8).timeout(0.5).processes(true));
    pids = collector.worker_pids();
    (void)collector.next();
    ExpectThrowsMsg([&] { (void)collector.next(); },
                    "MultiSyncCollector: worker 1 did not finish its batch "
                    "within 0.5 s");
    const auto start = std::chrono::steady_clock::now();
    collector.shutdown();
    EXPECT_LT(SecondsSince(start), 2.0);
    ExpectThrowsMsg([&] { (void)collector.next(); },
                    "MultiSyncCollector: worker 1 did not finish its batch "
                    "within 0.5 s");
  }
  // Reaped: no such processes.
  for (int64_t pid : pids) {
    EXPECT_NE(kill(static_cast<pid_t>(pid), 0), 0) << pid;
  }
  MultiAsyncCollector stopped({Counters()}, nullptr,
                              CollectorOptions(3).processes(true));
  (void)stopped.next();
  stopped.shutdown();
  ExpectThrowsMsg([&] { (void)stopped.next(); },
                  "MultiAsyncCollector: the collector was shut down");
}

// Errors at construction: a factory that fails in its worker, batches that
// cannot stack, a device the processes cannot share, and a Collector given
// the option.
TEST(CollectorProcesses, ConstructionErrorsNameTheWorker) {
  ExpectThrowsMsg<c10::Error>(
      [] {
        MultiSyncCollector c({Counters(), [] { return nullptr; }}, nullptr,
                             CollectorOptions(24).processes(true));
      },
      "MultiSyncCollector: worker 1 failed: Collector: the env factory "
      "returned null");
  ExpectThrowsMsg<c10::Error>(
      [] {
        MultiSyncCollector c({Counters(), Faulty(0, Fault::kThrow)}, nullptr,
                             CollectorOptions(24).processes(true));
      },
      "MultiSyncCollector: worker 1's batches are [1, 12] but worker 0's "
      "are [3, 4]: the batches are stacked, so every env must have one "
      "batch size");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        MultiAsyncCollector c(
            {Counters()}, nullptr,
            CollectorOptions(24).processes(true).storing_device(
                at::Device("cuda:0")));
      },
      "MultiAsyncCollector: worker processes run on the CPU and share their "
      "batches in CPU memory, got the device cuda:0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        tensordict::Collector c(Counters(), nullptr,
                                CollectorOptions(24).processes(true));
      },
      "Collector: processes is an option of the multi collectors (a "
      "Collector runs in its caller's thread)");
}

TEST(CollectorProcesses, StateDictResumesTheStream) {
  tensordict_test::ExpectMultiStateResumes(true);
}

TEST(CollectorProcesses, LoadStateDictIsAllOrNothing) {
  tensordict_test::ExpectMultiLoadIsAllOrNothing(true);
}
