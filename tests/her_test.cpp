// HERReplayBuffer (tensordict/her.h): where each strategy takes the new
// goals from (the same episode, later for kFuture, its last row for kFinal,
// across the storage's wrap), which rows are relabelled, the recomputed
// rewards, refused rows and options (exact messages, the buffer
// unchanged), a reward function of the wrong shape, checkpoints that resume
// the same samples, and threads writing while others sample.
#include <gtest/gtest.h>
#include <tensordict/her.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "her_test_util.h"
#include "test_paths.h"
#include "test_util.h"

using tensordict::HEROptions;
using tensordict::HERReplayBuffer;
using tensordict::HindsightStrategy;
using tensordict::MaxValueWriter;
using tensordict::RateLimiter;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::Episodes;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::Reward;
using tensordict_test::TempDir;

namespace {

HERReplayBuffer Buffer(int64_t capacity, HindsightStrategy strategy,
                       double ratio = 1.0) {
  return HERReplayBuffer(
      Reward, ReplayBufferOptions(capacity).seed(3),
      HEROptions().strategy(strategy).her_ratio(ratio).seed(5));
}

// The last step stored of each episode (the newest row ends its own).
std::map<int64_t, int64_t> LastSteps(const HERReplayBuffer& rb) {
  std::map<int64_t, int64_t> last;
  const TensorDict rows =
      rb.storage().index({at::indexing::Slice(0, rb.size())});
  for (int64_t i = 0; i < rb.size(); ++i) {
    const int64_t e = rows.get("episode")[i].item<int64_t>();
    const int64_t s = rows.get("t")[i].item<int64_t>();
    if (last.count(e) == 0 || last[e] < s) last[e] = s;
  }
  return last;
}

// Checks every relabelled row of `batch` against the strategy and every
// other row against the storage.
void ExpectRelabelled(const HERReplayBuffer& rb, HindsightStrategy strategy,
                      const TensorDict& batch,
                      const tensordict::HERSampleInfo& info) {
  const int64_t m = info.goal_index.numel();
  const std::map<int64_t, int64_t> last = LastSteps(rb);
  const TensorDict stored = rb.storage().index({info.index});
  for (int64_t i = 0; i < batch.batch_size()[0]; ++i) {
    SCOPED_TRACE(testing::Message() << "row " << i);
    const int64_t e = batch.get("episode")[i].item<int64_t>();
    const int64_t s = batch.get("t")[i].item<int64_t>();
    const at::Tensor goal = batch.get("desired_goal")[i];
    if (i >= m) {
      EXPECT_TRUE(at::equal(batch[i].get("desired_goal"),
                            stored[i].get("desired_goal")));
      EXPECT_EQ(batch.get({"next", "reward"})[i].item<float>(), 7.0F);
      continue;
    }
    const at::Tensor source =
        rb.storage().get("achieved_goal")[info.goal_index[i].item<int64_t>()];
    EXPECT_TRUE(at::equal(goal, source));
    EXPECT_TRUE(at::equal(batch.get({"next", "desired_goal"})[i], goal));
    const auto goal_ep = static_cast<int64_t>(goal[0].item<float>());
    const auto goal_t = static_cast<int64_t>(goal[1].item<float>());
    if (strategy != HindsightStrategy::kRandom) {
      EXPECT_EQ(goal_ep, e);
    }
    if (strategy == HindsightStrategy::kFuture) {
      EXPECT_GE(goal_t, s);
    }
    if (strategy == HindsightStrategy::kFinal) {
      EXPECT_EQ(goal_t, last.at(e));
    }
    const float expected =
        -(std::abs(static_cast<float>(e) - static_cast<float>(goal_ep)) +
          std::abs(static_cast<float>(s + 1) - static_cast<float>(goal_t)));
    EXPECT_EQ(batch.get({"next", "reward"})[i].item<float>(), expected);
  }
}

const std::vector<HindsightStrategy> kStrategies = {
    HindsightStrategy::kFuture, HindsightStrategy::kFinal,
    HindsightStrategy::kEpisode, HindsightStrategy::kRandom};

}  // namespace

// Episodes of 3, 5 and 1 steps and one still running: each relabelled goal
// is an achieved goal of the same episode, at or after the row (kFuture),
// its last (kFinal); the rewards are recomputed from the new goals.
TEST(HERReplayBuffer, GoalsComeFromTheRowsEpisode) {
  for (HindsightStrategy strategy : kStrategies) {
    SCOPED_TRACE(static_cast<int>(strategy));
    HERReplayBuffer rb = Buffer(64, strategy);
    (void)rb.extend(Episodes({3, 5, 1, 4}, 0, /*open_last=*/true));
    for (int k = 0; k < 20; ++k) {
      auto [batch, info] = rb.sample(16);
      ASSERT_EQ(info.goal_index.numel(), 16);
      ExpectRelabelled(rb, strategy, batch, info);
    }
  }
}

// A full buffer whose oldest episode is partly written over and whose
// middle episode crosses the end of the storage (rows 9, 0, 1): its rows'
// goals are its own, in write order.
TEST(HERReplayBuffer, AnEpisodeAcrossTheWrapKeepsItsRows) {
  for (HindsightStrategy strategy : kStrategies) {
    SCOPED_TRACE(static_cast<int>(strategy));
    HERReplayBuffer rb = Buffer(10, strategy);
    (void)rb.extend(Episodes({4, 5, 3, 2}, 0, /*open_last=*/true));
    ASSERT_EQ(rb.cursor(), 4);
    std::set<int64_t> relabelled_rows;
    for (int k = 0; k < 40; ++k) {
      auto [batch, info] = rb.sample(10);
      ExpectRelabelled(rb, strategy, batch, info);
      for (int64_t i = 0; i < 10; ++i) {
        relabelled_rows.insert(info.index[i].item<int64_t>());
      }
    }
    EXPECT_EQ(relabelled_rows.count(9), 1U);  // episode 2's first step
  }
  // Row 9's last step is row 1's (episode 2, step 2).
  HERReplayBuffer rb = Buffer(10, HindsightStrategy::kFinal);
  (void)rb.extend(Episodes({4, 5, 3, 2}, 0, true));
  for (int k = 0; k < 40; ++k) {
    auto [batch, info] = rb.sample(10);
    for (int64_t i = 0; i < 10; ++i) {
      if (info.index[i].item<int64_t>() == 9) {
        EXPECT_EQ(info.goal_index[i].item<int64_t>(), 1);
      }
    }
  }
}

// floor(n * her_ratio) rows are relabelled, the first ones; the rest are
// the stored rows (0.7 * 10 is 7.000000000000001 in double: 7).
TEST(HERReplayBuffer, OnlyTheFirstRowsAreRelabelled) {
  for (const auto& [ratio, n, m] :
       std::vector<std::tuple<double, int64_t, int64_t>>{
           {0.7, 10, 7}, {0.8, 16, 12}, {0.0, 8, 0}, {0.3, 3, 0}}) {
    SCOPED_TRACE(ratio);
    HERReplayBuffer rb = Buffer(64, HindsightStrategy::kFuture, ratio);
    (void)rb.extend(Episodes({6, 6, 6}));
    auto [batch, info] = rb.sample(n);
    EXPECT_EQ(info.goal_index.numel(), m);
    ExpectRelabelled(rb, HindsightStrategy::kFuture, batch, info);
  }
}

// A row is a sample's own copy: the storage never changes.
TEST(HERReplayBuffer, SamplingLeavesTheStorageAsItWas) {
  HERReplayBuffer rb = Buffer(32, HindsightStrategy::kEpisode);
  (void)rb.extend(Episodes({5, 7}));
  const tensordict_test::Snapshot before =
      tensordict_test::TakeSnapshot(rb.storage());
  for (int k = 0; k < 5; ++k) (void)rb.sample(8);
  tensordict_test::ExpectUnchanged(rb.storage(), before);
}

// Same seeds, same rows: the same samples, goals included; manual_seed
// restarts both generators.
TEST(HERReplayBuffer, SeededBuffersRepeat) {
  HERReplayBuffer a = Buffer(64, HindsightStrategy::kFuture, 0.5);
  HERReplayBuffer b = Buffer(64, HindsightStrategy::kFuture, 0.5);
  (void)a.extend(Episodes({9, 9, 9}));
  (void)b.extend(Episodes({9, 9, 9}));
  const TensorDict first = a.sample(12).first;
  EXPECT_TRUE((first == b.sample(12).first).all());
  a.manual_seed(11);
  b.manual_seed(11);
  EXPECT_TRUE((a.sample(12).first == b.sample(12).first).all());
}

// Refused rows change nothing: the size, the cursor, every stored leaf.
TEST(HERReplayBuffer, RefusedRowsLeaveTheBufferUnchanged) {
  HERReplayBuffer rb = Buffer(16, HindsightStrategy::kFuture);
  (void)rb.extend(Episodes({3}));
  const int64_t size = rb.size();
  const int64_t cursor = rb.cursor();
  const tensordict_test::Snapshot before =
      tensordict_test::TakeSnapshot(rb.storage());
  const TensorDict good = Episodes({2});
  ExpectThrowsMsg(
      [&] { (void)rb.extend(good.exclude({"desired_goal"})); },
      "HERReplayBuffer::extend: missing key desired_goal (goal_key)");
  ExpectThrowsMsg(
      [&] { (void)rb.add(good.index({0}).exclude({"achieved_goal"})); },
      "HERReplayBuffer::add: missing key achieved_goal (achieved_goal_key)");
  TensorDict wide = good.clone();
  wide.set("achieved_goal", torch::zeros({2, 3}));
  ExpectThrowsMsg([&] { (void)rb.extend(wide); },
                  "HERReplayBuffer::extend: the achieved goal (achieved_goal, "
                  "torch.float32 [3] per row) must fit the desired goal "
                  "(desired_goal, torch.float32 [2] per row)");
  ExpectThrowsMsg(
      [&] {
        (void)rb.extend(good.exclude({{"next", "reward"}}));
      },
      "HERReplayBuffer::extend: missing key ('next', 'reward') (reward_key)");
  ExpectThrowsMsg(
      [&] {
        (void)rb.extend(good.exclude({{"next", "done"}}));
      },
      "HERReplayBuffer::extend: the rows hold neither ('next', 'done') "
      "(end_key) nor ('next', 'terminated'): the episode ends are read from "
      "them (store the env's done flags)");
  TensorDict two_flags = good.clone();
  two_flags.set({"next", "done"}, torch::zeros({2, 2}, torch::kBool));
  ExpectThrowsMsg([&] { (void)rb.extend(two_flags); },
                  "HERReplayBuffer::extend: key ('next', 'done') must hold "
                  "one flag per row, got [2] per row");
  EXPECT_EQ(rb.size(), size);
  EXPECT_EQ(rb.cursor(), cursor);
  tensordict_test::ExpectUnchanged(rb.storage(), before);
  // Terminated alone marks the ends too.
  TensorDict terminated = good.clone();
  terminated.set({"next", "terminated"}, good.get({"next", "done"}));
  HERReplayBuffer other = Buffer(16, HindsightStrategy::kFinal);
  (void)other.extend(terminated.exclude({{"next", "done"}}));
  auto [batch, info] = other.sample(4);
  ExpectRelabelled(other, HindsightStrategy::kFinal, batch, info);
}

TEST(HERReplayBuffer, BadOptionsAndRewardsAreNamed) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        HERReplayBuffer rb(Reward, ReplayBufferOptions(8),
                           HEROptions().her_ratio(1.5));
      },
      "HERReplayBuffer: her_ratio must be in [0, 1], got 1.5");
  ExpectThrowsMsg<c10::ValueError>(
      [] { HERReplayBuffer rb(nullptr, ReplayBufferOptions(8)); },
      "HERReplayBuffer: the reward function is empty");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        HERReplayBuffer rb(Reward,
                           ReplayBufferOptions(8).writer(MaxValueWriter()));
      },
      "HERReplayBuffer: MaxValueWriter is not supported: episodes are read "
      "in write order, which only the round-robin writer keeps");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        HERReplayBuffer rb(
            Reward, ReplayBufferOptions(8).rate_limiter(RateLimiter(1.0)));
      },
      "HERReplayBuffer: a rate limiter is not supported (a sample would hold "
      "the buffer's lock while the limiter waits for writes)");
  HERReplayBuffer rb(
      [](const TensorDict& td) {
        return torch::zeros({td.batch_size()[0], 2});
      },
      ReplayBufferOptions(8).seed(0), HEROptions().her_ratio(0.5).seed(0));
  (void)rb.extend(Episodes({4}));
  ExpectThrowsMsg(
      [&] { (void)rb.sample(4); },
      "HERReplayBuffer::sample: the reward function returned [2, 2] for 2 "
      "relabelled rows whose reward (('next', 'reward')) is [2, 1]");
}

// dumps/loads resume the same samples, goals included; a damaged her_rng
// is refused and the buffer keeps its state.
TEST(HERReplayBuffer, CheckpointsResumeTheSameSamples) {
  TempDir dir("td_her_checkpoint");
  HERReplayBuffer rb = Buffer(32, HindsightStrategy::kFuture, 0.5);
  (void)rb.extend(Episodes({7, 8, 9}));
  (void)rb.sample(8);
  rb.dumps(dir / "cp");
  const TensorDict expected = rb.sample(8).first;
  HERReplayBuffer restored = Buffer(32, HindsightStrategy::kFuture, 0.5);
  restored.manual_seed(99);
  restored.loads(dir / "cp");
  EXPECT_EQ(restored.size(), rb.size());
  EXPECT_TRUE((restored.sample(8).first == expected).all());

  // A state whose twister index would read past its array (left = 0),
  // written into the files of a second checkpoint.
  rb.dumps(dir / "bad");
  const TensorDict state = TensorDict::load_memmap(dir / "bad/her_rng");
  state.get("state").narrow(0, 8, 4).fill_(0);
  HERReplayBuffer other = Buffer(32, HindsightStrategy::kFuture, 0.5);
  ExpectThrowsMsg([&] { other.loads(dir / "bad"); },
                  "HERReplayBuffer::loads: '" + (dir / "bad") +
                      "': her_rng is not a generator state");
  EXPECT_EQ(other.size(), 0);

  // A plain buffer's checkpoint: rows without goals.
  tensordict::ReplayBuffer plain(ReplayBufferOptions(32).seed(3));
  (void)plain.extend(Episodes({4}).exclude({"desired_goal"}));
  plain.dumps(dir / "plain");
  rb.dumps(dir / "plain_her");
  TensorDict::load_memmap(dir / "plain_her/her_rng")
      .memmap(dir / "plain/her_rng");
  ExpectThrowsMsg(
      [&] { other.loads(dir / "plain"); },
      "HERReplayBuffer::loads: missing key desired_goal (goal_key)");
  EXPECT_EQ(other.size(), 0);
}

// Two threads write episodes while two sample: every sample keeps the
// invariants (.ci/tsan.sh runs this test).
TEST(HERReplayBuffer, ThreadsWriteWhileOthersSample) {
  HERReplayBuffer rb = Buffer(64, HindsightStrategy::kFinal, 0.5);
  (void)rb.extend(Episodes({4, 4}));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&rb, w] {
      for (int k = 0; k < 30; ++k) {
        (void)rb.extend(Episodes({3, 5}, 10 + 2 * (w * 30 + k)));
      }
    });
  }
  std::atomic<int> bad{0};
  for (int s = 0; s < 2; ++s) {
    threads.emplace_back([&rb, &bad] {
      for (int k = 0; k < 30; ++k) {
        auto [batch, info] = rb.sample(8);
        for (int64_t i = 0; i < info.goal_index.numel(); ++i) {
          const float goal_ep = batch.get("desired_goal")[i][0].item<float>();
          if (static_cast<int64_t>(goal_ep) !=
              batch.get("episode")[i].item<int64_t>()) {
            ++bad;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}
