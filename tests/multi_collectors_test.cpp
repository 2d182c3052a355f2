// MultiSyncCollector and MultiAsyncCollector (tensordict/collectors.h):
// batches and trajectory ids across workers, replay buffers fed by the
// workers while a learner samples and dumps (every sampler, the
// MaxValueWriter: ThreadSanitizer runs these), weights pushed between
// steps, and the failure model: a worker that throws or is stuck, shutdown
// and the destructor.
#include <gtest/gtest.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "count_env.h"
#include "multi_collector_util.h"
#include "test_util.h"

using tensordict::CartPoleEnv;
using tensordict::CollectorOptions;
using tensordict::EnvBase;
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
using tensordict_test::FaultyEnv;
using tensordict_test::Ids;
using tensordict_test::SecondsSince;

namespace {

const NestedKey& kTrajIds = tensordict_test::TrajIdsKey();

EnvFactory Faulty(int64_t throw_at,
                  std::shared_ptr<std::atomic<bool>> hold = nullptr) {
  return [throw_at, hold] {
    return std::make_unique<FaultyEnv>(throw_at, tensordict_test::Fault::kThrow,
                                       hold);
  };
}

// A thread-local whose destructor, at a worker thread's exit, takes 100 ms
// before it counts itself.
std::atomic<int> g_made{0};
std::atomic<int> g_ended{0};
struct SlowToEnd {
  SlowToEnd() { ++g_made; }
  ~SlowToEnd() {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ++g_ended;
  }
  SlowToEnd(const SlowToEnd&) = delete;
  SlowToEnd& operator=(const SlowToEnd&) = delete;
};

}  // namespace

// A batch is every worker's, stacked; the ids are unique across workers.
TEST(MultiCollectors, SyncStacksEveryWorkersBatch) {
  MultiSyncCollector collector({Counters(), Counters()}, nullptr,
                               CollectorOptions(24).total_frames(48));
  EXPECT_EQ(collector.num_workers(), 2);
  int batches = 0;
  for (const TensorDict& batch : collector) {
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({2, 3, 4}));
    const std::set<int64_t> first = Ids(batch.get(kTrajIds)[0]);
    const std::set<int64_t> second = Ids(batch.get(kTrajIds)[1]);
    for (int64_t id : first) EXPECT_EQ(second.count(id), 0U) << id;
    if (batches == 0) {
      // The workers' envs start with ids 0, 1, 2 and 3, 4, 5.
      EXPECT_EQ(Ids(batch.get(kTrajIds).select(2, 0)),
                std::set<int64_t>({0, 1, 2, 3, 4, 5}));
    }
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(collector.frames(), 48);
}

TEST(MultiCollectors, AsyncYieldsOneWorkersBatchAtATime) {
  MultiAsyncCollector collector({Counters(), Counters()}, nullptr,
                                CollectorOptions(24).total_frames(96));
  EXPECT_EQ(collector.last_worker(), -1);
  int batches = 0;
  for (const TensorDict& batch : collector) {
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({3, 4}));
    EXPECT_GE(collector.last_worker(), 0);
    EXPECT_LT(collector.last_worker(), 2);
    ++batches;
  }
  EXPECT_EQ(batches, 8);
  EXPECT_EQ(collector.frames(), 96);
}

// The sync collector stacks its workers' batches: one shape for all.
TEST(MultiCollectors, SyncWorkersMustHaveOneBatchShape) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        MultiSyncCollector c({Counters(), Faulty(0)}, nullptr,
                             CollectorOptions(24));
      },
      "MultiSyncCollector: worker 1's batches are [1, 12] but worker 0's "
      "are [3, 4]: the batches are stacked, so every env must have one "
      "batch size");
}

// Seeded workers give the same batches.
TEST(MultiCollectors, SeededWorkersRepeat) {
  auto cartpole = [] {
    return std::make_unique<CartPoleEnv>(std::vector<int64_t>{4});
  };
  auto first_batch = [&] {
    MultiSyncCollector collector({cartpole, cartpole}, nullptr,
                                 CollectorOptions(64));
    collector.set_seed(7);
    return collector.next().get("observation").clone();
  };
  EXPECT_TRUE(at::equal(first_batch(), first_batch()));
}

// The workers write whole batches into the buffer while the learner
// samples and dumps it, with every sampler and with the MaxValueWriter
// (ThreadSanitizer runs this).
TEST(MultiCollectors, WorkersFeedABufferWhileTheLearnerSamples) {
  std::vector<ReplayBufferOptions> configs = {
      ReplayBufferOptions(256),
      ReplayBufferOptions(256).sampler(tensordict::SamplerWithoutReplacement()),
      ReplayBufferOptions(256).sampler(tensordict::PrioritizedSampler()),
      ReplayBufferOptions(256).sampler(
          tensordict::SliceSampler(2).traj_key(kTrajIds)),
      ReplayBufferOptions(256).sampler(
          tensordict::SliceSamplerWithoutReplacement(2).traj_key(kTrajIds)),
      ReplayBufferOptions(256).sampler(
          tensordict::PrioritizedSliceSampler(2).traj_key(kTrajIds)),
      ReplayBufferOptions(256).writer(tensordict::MaxValueWriter()),
  };
  tensordict_test::TempDir dir("td_multicollect");
  int index = 0;
  for (const ReplayBufferOptions& config : configs) {
    SCOPED_TRACE("config " + std::to_string(index));
    ReplayBuffer rb(config);
    MultiAsyncCollector collector(
        {Counters(), Counters()}, nullptr,
        CollectorOptions(24).total_frames(240).replay_buffer(&rb));
    int dumps = 0;
    for (const TensorDict& batch : collector) {
      EXPECT_TRUE(batch.empty());
      if (rb.size() >= 12) {
        const auto [sample, info] = rb.sample(8);
        EXPECT_EQ(sample.batch_size()[0], 8);
      }
      if (dumps < 2) {
        rb.dumps(dir / ("dump" + std::to_string(index) + "_" +
                        std::to_string(dumps++)));
      }
    }
    EXPECT_EQ(collector.frames(), 240);
    // Whole batches, and no more than total_frames.
    EXPECT_EQ(rb.size(), 240);
    ++index;
  }
}

// Weights pushed while the workers collect land between two steps: the
// policy's parameters are the learner's afterwards.
TEST(MultiCollectors, UpdatePolicyWeightsReachesEveryWorker) {
  auto make = [] {
    return TensorDictModule(torch::nn::Linear(1, 3), {"obs"}, {"logits"});
  };
  const TensorDictModule linear = make();
  const TensorDictModule act(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0].argmax(-1)};
      },
      {"logits"}, {"action"});
  const tensordict::TensorDictSequential actor({linear, act});
  const TensorDictModule learner = make();
  MultiAsyncCollector collector({Counters(), Counters()}, actor,
                                CollectorOptions(24));
  (void)collector.next();
  const TensorDict learned =
      tensordict::from_module(learner).get_tensordict("module");
  TensorDict params;
  params.set({"module", "0", "module"}, learned);
  collector.update_policy_weights_(params);
  (void)collector.next();
  EXPECT_TRUE(
      (tensordict::from_module(linear).get_tensordict("module") == learned)
          .all());
  MultiSyncCollector random({Counters()}, nullptr, CollectorOptions(3));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { random.update_policy_weights_(params); },
      "MultiSyncCollector::update_policy_weights_: the policy is not a "
      "TensorDictModule, so it has no weights to update");
}

// A worker that throws makes the call that waits for it raise at once
// (async: the call that would take its batch, while the other worker's
// batches keep coming), naming it and the cause, and every later call the
// same.
TEST(MultiCollectors, AWorkerThatThrowsIsNamed) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    const auto collector = tensordict_test::MakeMulti(
        sync, {Faulty(0), Faulty(6)}, CollectorOptions(8));
    tensordict_test::ExpectFailsWithinASecond(
        *collector,
        std::string(sync ? "MultiSyncCollector" : "MultiAsyncCollector") +
            ": worker 1 failed: the simulator broke at step 6");
  }
}

// A worker stuck in its env makes the call raise after `timeout`, naming
// it; the destructor returns, leaving the stuck thread to finish alone.
TEST(MultiCollectors, AStuckWorkerTimesOutAndTheDestructorReturns) {
  auto hold = std::make_shared<std::atomic<bool>>(false);
  {
    MultiSyncCollector collector({Faulty(0), Faulty(0, hold)}, nullptr,
                                 CollectorOptions(8).timeout(0.5));
    (void)collector.next();
    hold->store(true);
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
  // The stuck worker finishes its step, sees the stop and leaves, freeing
  // the collector's state (the last holder of `hold` but this test's).
  hold->store(false);
  const auto start = std::chrono::steady_clock::now();
  while (hold.use_count() > 1 && SecondsSince(start) < 30.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(hold.use_count(), 1);
  MultiAsyncCollector stopped({Counters()}, nullptr, CollectorOptions(3));
  (void)stopped.next();
  stopped.shutdown();
  ExpectThrowsMsg([&] { (void)stopped.next(); },
                  "MultiAsyncCollector: the collector was shut down");
}

// Once shutdown returns, the workers that left are gone, not still ending
// (here: in a thread-local's destructor): a fork right after, as a process
// collector's or ParallelEnv's, would copy whatever lock such a thread held.
TEST(MultiCollectors, ShutdownJoinsTheWorkersThatLeft) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    g_made = 0;
    g_ended = 0;
    const tensordict::Policy policy = [](const TensorDict& td) {
      thread_local SlowToEnd guard;
      td.set("action", at::zeros({3}, at::kLong));
    };
    std::unique_ptr<tensordict::MultiCollector> collector;
    if (sync) {
      collector = std::make_unique<MultiSyncCollector>(
          std::vector<EnvFactory>{Counters(), Counters()}, policy,
          CollectorOptions(6));
    } else {
      collector = std::make_unique<MultiAsyncCollector>(
          std::vector<EnvFactory>{Counters(), Counters()}, policy,
          CollectorOptions(6));
    }
    (void)collector->next();
    collector->shutdown();
    EXPECT_GE(g_made.load(), 1);
    EXPECT_EQ(g_ended.load(), g_made.load());
  }
}

TEST(MultiCollectors, StateDictResumesTheStream) {
  tensordict_test::ExpectMultiStateResumes(false);
}

TEST(MultiCollectors, LoadStateDictIsAllOrNothing) {
  tensordict_test::ExpectMultiLoadIsAllOrNothing(false);
}
