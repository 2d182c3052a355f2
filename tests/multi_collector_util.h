// What the multi collectors' tests share (multi_collectors_test.cpp,
// collector_processes_test.cpp): CountEnv factories, the ids of a batch,
// the failure check of a multi collector,
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
