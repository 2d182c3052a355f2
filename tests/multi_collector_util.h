// What the multi collectors' tests share (multi_collectors_test.cpp,
// collector_processes_test.cpp): CountEnv factories, the ids of a batch,
// the failure check of a multi collector, the checks of its state,
// and an env for the failure model, a counter whose step breaks at a given
// step of its own, by throwing, aborting the process or hanging, or blocks
// while a flag is set.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/collectors.h>
#include <tensordict/envs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "count_env.h"
#include "test_util.h"

namespace tensordict_test {

inline const tensordict::NestedKey& TrajIdsKey() {
  static const tensordict::NestedKey key({"collector", "traj_ids"});
  return key;
}

// CountEnv: env 0 terminates at count 2, env 1 at count 3, env 2 is
// truncated at count 4.
inline tensordict::EnvFactory Counters() {
  return [] {
    return std::make_unique<CountEnv>(std::vector<int64_t>{2, 3, 0},
                                      std::vector<int64_t>{0, 0, 4});
  };
}

// The values of an integer tensor, as a set.
inline std::set<int64_t> Ids(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// The ids of an integer tensor relabeled 0, 1, ... in the order they first
// appear: two tensors that tell the same trajectories apart are equal so.
inline at::Tensor Relabeled(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  at::Tensor out = at::empty_like(c);
  std::map<int64_t, int64_t> label;
  const int64_t* in = c.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    o[i] =
        label.emplace(in[i], static_cast<int64_t>(label.size())).first->second;
  }
  return out;
}

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// A MultiSyncCollector (`sync`) or a MultiAsyncCollector.
inline std::unique_ptr<tensordict::MultiCollector> MakeMulti(
    bool sync, const std::vector<tensordict::EnvFactory>& env_fns,
    const tensordict::CollectorOptions& options) {
  if (sync) {
    return std::make_unique<tensordict::MultiSyncCollector>(env_fns, nullptr,
                                                            options);
  }
  return std::make_unique<tensordict::MultiAsyncCollector>(env_fns, nullptr,
                                                           options);
}

// Collects until `collector` raises, which must happen within a second,
// with `expected`; every later call raises the same.
inline void ExpectFailsWithinASecond(tensordict::MultiCollector& collector,
                                     const std::string& expected) {
  const auto start = std::chrono::steady_clock::now();
  try {
    while (SecondsSince(start) < 2.0) (void)collector.next();
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), expected);
  }
  EXPECT_LT(SecondsSince(start), 1.0);
  ExpectThrowsMsg([&] { (void)collector.next(); }, expected);
  EXPECT_TRUE(collector.finished());
}

// Whether `a` and `b` have the same keys and values.
inline void ExpectSameDicts(const tensordict::TensorDict& a,
                            const tensordict::TensorDict& b) {
  ASSERT_EQ(a.keys(true, true), b.keys(true, true));
  for (const tensordict::NestedKey& key : a.keys(true, true)) {
    EXPECT_TRUE(at::equal(a.get(key), b.get(key))) << key.str();
  }
}

// CartPole x3 with random actions, in two workers, seeded with `seed`.
inline std::unique_ptr<tensordict::MultiCollector> SeededCartPoles(
    bool sync, bool processes, uint64_t seed) {
  const tensordict::EnvFactory cartpole = [] {
    return std::make_unique<tensordict::CartPoleEnv>(std::vector<int64_t>{3});
  };
  auto collector = MakeMulti(
      sync, {cartpole, cartpole},
      tensordict::CollectorOptions(30).max_frames_per_traj(8).processes(
          processes));
  (void)collector->set_seed(seed);
  return collector;
}

// A multi collector's state (TorchRL's layout) resumes the stream: sync,
// taken between batches, the same batches next (the same trajectory ids,
// maybe another worker's); async, taken before the
// first batch, the same batches of each worker (their order, and so the
// trajectory ids, are the scheduler's).
inline void ExpectMultiStateResumes(bool processes) {
  {
    SCOPED_TRACE("sync");
    const auto first = SeededCartPoles(true, processes, 3);
    (void)first->next();
    (void)first->next();
    const tensordict::TensorDict state = first->state_dict();
    for (const char* key : {"worker0", "worker1", "frames", "iter"}) {
      EXPECT_TRUE(state.contains(key)) << key;
    }
    EXPECT_EQ(state.get("iter").item<int64_t>(), 2);
    EXPECT_TRUE(state.contains({"worker1", "env", "env", "physics"}));
    const tensordict::TensorDict third = first->next().clone();
    const tensordict::TensorDict fourth = first->next().clone();
    const auto resumed = SeededCartPoles(true, processes, 99);
    (void)resumed->next();
    resumed->load_state_dict(state);
    EXPECT_EQ(resumed->frames(), 60);
    // The workers draw their new trajectory ids from one counter, in the
    // order they reach it: the same trajectories, their ids maybe another
    // worker's.
    for (const tensordict::TensorDict& expected : {third, fourth}) {
      const tensordict::TensorDict got = resumed->next();
      ExpectSameDicts(got.exclude({TrajIdsKey()}),
                      expected.exclude({TrajIdsKey()}));
      EXPECT_TRUE(at::equal(Relabeled(got.get(TrajIdsKey())),
                            Relabeled(expected.get(TrajIdsKey()))));
    }
  }
  SCOPED_TRACE("async");
  // Batches until each worker gave two (the oldest full slot goes first,
  // so a worker that lags is soon taken).
  auto per_worker = [](tensordict::MultiCollector& c) {
    auto& async = dynamic_cast<tensordict::MultiAsyncCollector&>(c);
    std::vector<std::vector<tensordict::TensorDict>> out(2);
    for (int i = 0; i < 1000 && (out[0].size() < 2 || out[1].size() < 2); ++i) {
      const tensordict::TensorDict batch = async.next();
      out[async.last_worker()].push_back(batch.exclude({TrajIdsKey()}).clone());
    }
    return out;
  };
  const auto first = SeededCartPoles(false, processes, 3);
  const tensordict::TensorDict state = first->state_dict();
  const auto expected = per_worker(*first);
  tensordict_test::ExpectThrowsMsg(
      [&] { (void)first->state_dict(); },
      "MultiAsyncCollector::state_dict: the workers are collecting; a "
      "MultiAsyncCollector's state is taken or loaded before its first "
      "batch (a MultiSyncCollector's between batches)");
  const auto resumed = SeededCartPoles(false, processes, 99);
  resumed->load_state_dict(state);
  const auto got = per_worker(*resumed);
  for (size_t w = 0; w < 2; ++w) {
    ASSERT_GE(got[w].size(), 2U) << w;
    ASSERT_GE(expected[w].size(), 2U) << w;
    for (size_t b = 0; b < 2; ++b) ExpectSameDicts(got[w][b], expected[w][b]);
  }
}

// A state a worker refuses raises, naming the worker, and leaves every
// worker (and the counters) as they were.
inline void ExpectMultiLoadIsAllOrNothing(bool processes) {
  const auto collector = SeededCartPoles(true, processes, 5);
  (void)collector->next();
  const tensordict::TensorDict good = collector->state_dict();
  (void)collector->next();
  const tensordict::TensorDict now = collector->state_dict();
  tensordict_test::ExpectThrowsMsg<c10::ValueError>(
      [&] {
        collector->load_state_dict(good.exclude(
            {tensordict::NestedKey({"worker1", "carrier", "observation"})}));
      },
      "MultiSyncCollector::load_state_dict: worker 1: "
      "Collector::load_state_dict: the carrier has no entry observation");
  ExpectSameDicts(collector->state_dict(), now);
  tensordict_test::ExpectThrowsMsg<c10::ValueError>(
      [&] { collector->load_state_dict(good.exclude({"worker1"})); },
      "MultiSyncCollector::load_state_dict: the state has no dict worker1 (2 "
      "workers)");
  tensordict_test::ExpectThrowsMsg<c10::ValueError>(
      [&] { collector->load_state_dict(good.exclude({"iter"})); },
      "MultiSyncCollector::load_state_dict: the state has no entry iter");
  ExpectSameDicts(collector->state_dict(), now);
  EXPECT_EQ(collector->frames(), 60);
  collector->load_state_dict(good);
  EXPECT_EQ(collector->frames(), 30);
  ExpectSameDicts(collector->state_dict(), good);
}

enum class Fault { kThrow, kAbort, kHang };

// Batch [1]: "obs" (float [1, 1]) counts the steps; action Categorical(2).
// At step `at` (0: never) the step throws "the simulator broke at step
// <at>", aborts, or hangs for good; each step blocks while `*hold` is set.
class FaultyEnv final : public tensordict::EnvBase {
 public:
  explicit FaultyEnv(int64_t at, Fault fault = Fault::kThrow,
                     std::shared_ptr<std::atomic<bool>> hold = nullptr)
      : EnvBase({1}), at_(at), fault_(fault), hold_(std::move(hold)) {
    set_observation_spec(
        tensordict::Composite({{"obs", tensordict::Unbounded({1, 1})}}, {1}));
    set_action_spec(tensordict::Categorical(2, {1}));
  }
  [[nodiscard]] std::string name() const override { return "FaultyEnv"; }

 protected:
  void reset_impl(const tensordict::TensorDict& td) override {
    td.get("obs").zero_();
  }
  void step_impl(const tensordict::TensorDict& td,
                 const tensordict::TensorDict& next) override {
    ++steps_;
    if (at_ > 0 && steps_ == at_) {
      if (fault_ == Fault::kAbort) std::abort();
      while (fault_ == Fault::kHang) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      throw std::runtime_error("the simulator broke at step " +
                               std::to_string(steps_));
    }
    while (hold_ && hold_->load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    next.get("obs").copy_(td.get("obs") + 1);
  }
  void set_seed_impl(uint64_t /*seed*/) override {}

 private:
  int64_t at_;
  Fault fault_;
  std::shared_ptr<std::atomic<bool>> hold_;
  int64_t steps_ = 0;
};

}  // namespace tensordict_test
