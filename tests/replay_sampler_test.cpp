// Tests of ReplayBuffer's samplers besides RandomSampler:
// SamplerWithoutReplacement, PrioritizedSampler, SliceSampler,
// SliceSamplerWithoutReplacement and PrioritizedSliceSampler.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "replay_test_util.h"
#include "test_util.h"

namespace {

using tensordict::PrioritizedSampler;
using tensordict::PrioritizedSliceSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::SamplerWithoutReplacement;
using tensordict::SliceSampler;
using tensordict::SliceSamplerWithoutReplacement;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::replay_test::Row;
using tensordict_test::replay_test::Rows;
using tensordict_test::replay_test::Trajectories;
using tensordict_test::replay_test::Vec;

// ---- Without replacement
// ------------------------------------------------------

TEST(ReplayBufferTest, WithoutReplacementCoversEveryIndexOncePerEpoch) {
  ReplayBuffer rb(
      ReplayBufferOptions(10).sampler(SamplerWithoutReplacement()).seed(5));
  rb.extend(Rows(10, 0));
  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto first = Vec(rb.sample(5).second.index);
    auto second = Vec(rb.sample(5).second.index);
    first.insert(first.end(), second.begin(), second.end());
    std::sort(first.begin(), first.end());
    EXPECT_EQ(first, all) << "epoch " << epoch;
  }
  // A batch that straddles the end of an epoch is completed from the next:
  // the first 10 draws of 4 + 4 + 4 are one epoch.
  std::vector<int64_t> draws;
  for (int k = 0; k < 3; ++k) {
    auto v = Vec(rb.sample(4).second.index);
    draws.insert(draws.end(), v.begin(), v.end());
  }
  std::vector<int64_t> epoch(draws.begin(), draws.begin() + 10);
  std::sort(epoch.begin(), epoch.end());
  EXPECT_EQ(epoch, all);
}

TEST(ReplayBufferTest, WithoutReplacementDropLastStartsANewEpochForAShortRest) {
  ReplayBuffer rb(ReplayBufferOptions(10)
                      .sampler(SamplerWithoutReplacement().drop_last(true))
                      .seed(5));
  rb.extend(Rows(10, 0));
  for (int k = 0; k < 4; ++k) {
    auto a = Vec(rb.sample(4).second.index);
    auto b = Vec(rb.sample(4).second.index);
    // Two batches of one epoch never repeat an index; the rest (2) is dropped.
    std::set<int64_t> s(a.begin(), a.end());
    s.insert(b.begin(), b.end());
    EXPECT_EQ(s.size(), 8u);
  }
  ExpectThrowsMsg(
      [&] { (void)rb.sample(11); },
      "ReplayBuffer::sample: batch_size 11 exceeds the buffer's size 10 "
      "(SamplerWithoutReplacement with drop_last)");
}

TEST(ReplayBufferTest, WithoutReplacementRenewsTheEpochWhenTheSizeChanges) {
  ReplayBuffer rb(
      ReplayBufferOptions(20).sampler(SamplerWithoutReplacement()).seed(8));
  rb.extend(Rows(10, 0));
  (void)rb.sample(7);
  rb.add(Row(10));
  auto v = Vec(rb.sample(11).second.index);
  std::sort(v.begin(), v.end());
  std::vector<int64_t> all(11);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(v, all);
}

// ---- Prioritized
// ----------------------------------------------------------------

TEST(ReplayBufferTest, PrioritizedFrequenciesMatchThePriorities) {
  ReplayBuffer rb(ReplayBufferOptions(8)
                      .sampler(PrioritizedSampler().alpha(0.7).beta(0.5).eps(0))
                      .seed(2024));
  rb.extend(Rows(8, 0));
  const std::vector<double> prio = {1, 2, 3, 4, 5, 6, 7, 8};
  rb.update_priority(torch::arange(8), torch::tensor(prio));
  std::vector<double> p(8);
  double total = 0;
  for (int i = 0; i < 8; ++i) total += p[i] = std::pow(prio[i], 0.7);
  std::vector<int64_t> counts(8, 0);
  const int64_t draws = 50000;
  for (int64_t b = 0; b < draws / 500; ++b) {
    auto [data, info] = rb.sample(500);
    auto idx = Vec(info.index);
    const float* w = info.weight.data_ptr<float>();
    for (size_t k = 0; k < idx.size(); ++k) {
      ++counts[idx[k]];
      // (N P(i))^-beta / max weight == (p_i / p_min)^-beta
      ASSERT_NEAR(w[k], std::pow(p[idx[k]] / p[0], -0.5), 1e-6);
    }
    EXPECT_EQ(info.weight.scalar_type(), at::kFloat);
  }
  double chi2 = 0;
  for (int i = 0; i < 8; ++i) {
    const double e = static_cast<double>(draws) * p[i] / total;
    const double d = static_cast<double>(counts[i]) - e;
    chi2 += d * d / e;
  }
  EXPECT_LT(chi2, 24.32);  // chi-square, 7 dof, p = 0.001
  // A wrong distribution (uniform) is far outside that bound.
  double chi2_uniform = 0;
  for (int i = 0; i < 8; ++i) {
    const double e = static_cast<double>(draws) / 8.0;
    const double d = static_cast<double>(counts[i]) - e;
    chi2_uniform += d * d / e;
  }
  EXPECT_GT(chi2_uniform, 1000);
}

TEST(ReplayBufferTest, PrioritizedNewRowsGetTheLargestPrioritySeen) {
  ReplayBuffer rb(ReplayBufferOptions(4)
                      .sampler(PrioritizedSampler().alpha(1).beta(1).eps(0))
                      .seed(1));
  rb.extend(Rows(2, 0));
  rb.update_priority(torch::tensor({0, 1}), torch::tensor({6.0, 2.0}));
  rb.add(Row(2));  // priority 6
  // With beta = 1, weight = p_min / p_i: 1/3 for rows 0 and 2, 1 for row 1.
  std::map<int64_t, float> weight;
  auto [data, info] = rb.sample(200);
  auto idx = Vec(info.index);
  for (size_t k = 0; k < idx.size(); ++k) {
    weight[idx[k]] = info.weight[static_cast<int64_t>(k)].item<float>();
  }
  ASSERT_EQ(weight.size(), 3u);
  EXPECT_FLOAT_EQ(weight[0], 1.f / 3);
  EXPECT_FLOAT_EQ(weight[1], 1.f);
  EXPECT_FLOAT_EQ(weight[2], 1.f / 3);
}

TEST(ReplayBufferTest, PrioritizedNeverSamplesAZeroPriorityRow) {
  ReplayBuffer rb(ReplayBufferOptions(16)
                      .sampler(PrioritizedSampler().alpha(1).eps(0))
                      .seed(4));
  rb.extend(Rows(10, 0));
  rb.update_priority(torch::arange(10),
                     torch::tensor({0., 0., 1., 0., 0., 0., 0., 3., 0., 0.}));
  auto idx = Vec(rb.sample(1000).second.index);
  std::set<int64_t> seen(idx.begin(), idx.end());
  EXPECT_EQ(seen, std::set<int64_t>({2, 7}));
}

// With eps(0), rows of priority 0 are never sampled, and the weights
// (p_i / p_min)^-beta take p_min over the positive priorities: finite, in
// (0, 1].
TEST(ReplayBufferTest,
     PrioritizedWeightsWithZeroEpsStayInZeroOneAndSkipZeroRows) {
  ReplayBuffer rb(ReplayBufferOptions(8)
                      .sampler(PrioritizedSampler().alpha(1).beta(0.5).eps(0))
                      .seed(7));
  rb.extend(TensorDict({{"id", torch::arange(8, torch::kLong)}}, {8}));
  const std::vector<double> prio = {0, 1, 0, 2, 0, 3, 0, 4};
  rb.update_priority(torch::arange(8), torch::tensor(prio));
  std::set<int64_t> seen;
  for (int round = 0; round < 4; ++round) {
    auto [data, info] = rb.sample(256);
    ASSERT_EQ(info.weight.numel(), 256);
    const int64_t* idx = info.index.data_ptr<int64_t>();
    const float* w = info.weight.data_ptr<float>();
    for (int64_t k = 0; k < 256; ++k) {
      seen.insert(idx[k]);
      ASSERT_EQ(idx[k] % 2, 1) << "sampled a row of priority 0: " << idx[k];
      ASSERT_TRUE(std::isfinite(w[k])) << k;
      ASSERT_GT(w[k], 0.f) << k;
      ASSERT_LE(w[k], 1.f) << k;
      // (p_i / p_min)^-beta with p_min the smallest positive priority (1).
      ASSERT_NEAR(w[k], std::pow(prio[static_cast<size_t>(idx[k])], -0.5),
                  1e-6);
    }
  }
  EXPECT_EQ(seen, std::set<int64_t>({1, 3, 5, 7}));
}

// The weights' p_min follows updates that raise the smallest priority or
// set it to 0 (the min tree reads the sum tree's leaves).
TEST(ReplayBufferTest, PrioritizedWeightsFollowTheSmallestPriority) {
  ReplayBuffer rb(ReplayBufferOptions(4)
                      .sampler(PrioritizedSampler().alpha(1).beta(1).eps(0))
                      .seed(3));
  rb.extend(Rows(4, 0));
  // With beta = 1, weight = p_min / p_i.
  const auto weights = [&rb] {
    std::map<int64_t, float> weight;
    auto [data, info] = rb.sample(400);
    auto idx = Vec(info.index);
    for (size_t k = 0; k < idx.size(); ++k) {
      weight[idx[k]] = info.weight[static_cast<int64_t>(k)].item<float>();
    }
    return weight;
  };
  rb.update_priority(torch::arange(4), torch::tensor({1.0, 2.0, 4.0, 8.0}));
  EXPECT_EQ(weights(), (std::map<int64_t, float>{
                           {0, 1.f}, {1, 0.5f}, {2, 0.25f}, {3, 0.125f}}));
  rb.update_priority(torch::tensor({0}), torch::tensor({16.0}));
  EXPECT_EQ(weights(), (std::map<int64_t, float>{
                           {0, 0.125f}, {1, 1.f}, {2, 0.5f}, {3, 0.25f}}));
  rb.update_priority(torch::tensor({1}), torch::tensor({0.0}));
  EXPECT_EQ(weights(),
            (std::map<int64_t, float>{{0, 0.25f}, {2, 1.f}, {3, 0.5f}}));
  rb.add(Row(4));  // row 0 again, with the largest priority seen (16)
  EXPECT_EQ(weights(),
            (std::map<int64_t, float>{{0, 0.25f}, {2, 1.f}, {3, 0.5f}}));
  rb.update_priority(torch::tensor({0, 2, 3}), torch::tensor({0.0, 0.0, 2.0}));
  EXPECT_EQ(weights(), (std::map<int64_t, float>{{3, 1.f}}));
}

// ---- Slices
// ---------------------------------------------------------------------

// Checks that every slice of `len` rows is one trajectory, consecutive in
// time; returns whether some slice crosses the end of the storage.
bool CheckSlices(const TensorDict& data, const at::Tensor& index, int64_t len,
                 int64_t capacity) {
  auto traj = Vec(data.get("traj"));
  auto t = Vec(data.get("t"));
  auto idx = Vec(index);
  bool crossed = false;
  for (size_t s = 0; s < traj.size(); s += static_cast<size_t>(len)) {
    for (int64_t j = 1; j < len; ++j) {
      EXPECT_EQ(traj[s + j], traj[s]) << "slice at " << s;
      EXPECT_EQ(t[s + j], t[s] + j) << "slice at " << s;
      EXPECT_EQ(idx[s + j], (idx[s + j - 1] + 1) % capacity);
      if (idx[s + j] == 0) crossed = true;
    }
  }
  return crossed;
}

TEST(ReplayBufferTest, SlicesNeverCrossADoneBoundaryEvenAcrossTheWrap) {
  ReplayBuffer rb(ReplayBufferOptions(20).sampler(SliceSampler(4)).seed(9));
  rb.extend(Trajectories({5, 3, 7, 2, 3}, 0, 0));  // rows 0..19
  rb.extend(Trajectories({6}, 5, 20));             // rows 0..5 overwritten
  // Timeline from the cursor (6): id 1 (rows 6..7), id 2 (8..14), id 3
  // (15..16), id 4 (17..19), then id 5 (rows 0..5): row 19's done flag ends
  // id 4, so no slice runs from row 19 into row 0.
  bool crossed = false;
  for (int k = 0; k < 50; ++k) {
    auto [data, info] = rb.sample(12);
    EXPECT_EQ(data.batch_size().vec(), std::vector<int64_t>({12}));
    crossed |= CheckSlices(data, info.index, 4, 20);
  }
  EXPECT_FALSE(crossed);  // no trajectory spans rows 19 -> 0 here

  // Now a trajectory that does cross the end: id 2 is rows 8, 9, 0, 1, 2.
  ReplayBuffer wrap(ReplayBufferOptions(10).sampler(SliceSampler(3)).seed(9));
  wrap.extend(Trajectories({4, 4}, 0, 0));  // rows 0..7
  wrap.extend(Trajectories({5, 3}, 2, 8));  // rows 8,9,0,1,2 + 3,4,5
  bool wrapped = false;
  for (int k = 0; k < 50; ++k) {
    auto [data, info] = wrap.sample(9);
    wrapped |= CheckSlices(data, info.index, 3, 10);
  }
  EXPECT_TRUE(wrapped);  // trajectory 2 (rows 8, 9, 0, 1, 2) was sampled
}

TEST(ReplayBufferTest, SlicesFollowTheTrajectoryKeyAcrossTheWrap) {
  auto options =
      ReplayBufferOptions(10)
          .sampler(SliceSampler(3).traj_key(tensordict::NestedKey("traj")))
          .seed(13);
  ReplayBuffer rb(options);
  TensorDict a = Trajectories({4, 4}, 0, 0);
  TensorDict b = Trajectories({5, 3}, 2, 8);
  // Without done flags, only the ids separate trajectories.
  a.get({"next", "done"}).zero_();
  b.get({"next", "done"}).zero_();
  rb.extend(a);
  rb.extend(b);
  bool wrapped = false;
  std::set<int64_t> ids;
  for (int k = 0; k < 50; ++k) {
    auto [data, info] = rb.sample(6);
    wrapped |= CheckSlices(data, info.index, 3, 10);
    for (int64_t id : Vec(data.get("traj"))) ids.insert(id);
  }
  EXPECT_TRUE(wrapped);
  // Trajectory 1 has only 2 rows left (6, 7): too short for a slice.
  EXPECT_EQ(ids, std::set<int64_t>({2, 3}));
}

TEST(ReplayBufferTest, SliceSamplerErrorsNameTheProblem) {
  ReplayBuffer rb(ReplayBufferOptions(10).sampler(SliceSampler(4)).seed(0));
  rb.extend(Trajectories({3, 2}, 0, 0));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)rb.sample(6); },
      "ReplayBuffer::sample: batch_size 6 is not a multiple of the "
      "SliceSampler's slice_len 4");
  ExpectThrowsMsg(
      [&] { (void)rb.sample(8); },
      "ReplayBuffer::sample: no stored trajectory has slice_len 4 rows (2 "
      "trajectories in 5 rows)");
  ReplayBuffer no_key(ReplayBufferOptions(10).sampler(SliceSampler(2)));
  no_key.extend(Rows(4, 0));
  ExpectThrowsMsg(
      [&] { (void)no_key.sample(2); },
      "ReplayBuffer::sample: the SliceSampler's end_key ('next', 'done') is "
      "not a tensor of the storage (keys: [obs, done, next, ('next', "
      "'obs')])");
}

TEST(ReplayBufferTest, SliceSamplerWithoutReplacementVisitsEachTrajectoryOnce) {
  ReplayBuffer rb(ReplayBufferOptions(30)
                      .sampler(SliceSamplerWithoutReplacement(3))
                      .seed(4));
  // Trajectories 0..4 of 5, 3, 7, 2, 6 rows: 3 is too short for a slice.
  rb.extend(Trajectories({5, 3, 7, 2, 6}, 0, 0));
  const std::set<int64_t> epoch({0, 1, 2, 4});
  auto slice_trajs = [&](int64_t slices) {
    auto [data, info] = rb.sample(3 * slices);
    CheckSlices(data, info.index, 3, 30);
    std::vector<int64_t> ids;
    auto traj = Vec(data.get("traj"));
    for (size_t s = 0; s < traj.size(); s += 3) ids.push_back(traj[s]);
    return ids;
  };
  // 3 slices per call: the second call finishes the epoch and starts the
  // next; every run of 4 consecutive slices is one epoch.
  std::vector<int64_t> seen;
  for (int k = 0; k < 4; ++k) {
    for (int64_t id : slice_trajs(3)) seen.push_back(id);
  }
  for (size_t e = 0; e < seen.size(); e += 4) {
    EXPECT_EQ(std::set<int64_t>(seen.begin() + e, seen.begin() + e + 4), epoch)
        << "epoch at slice " << e;
  }
  // A write renews the epoch: its next 5 slices are the 5 trajectories.
  (void)slice_trajs(1);
  rb.extend(Trajectories({4}, 5, 23));
  auto ids = slice_trajs(5);
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()),
            std::set<int64_t>({0, 1, 2, 4, 5}));

  ReplayBuffer drop(
      ReplayBufferOptions(30)
          .sampler(SliceSamplerWithoutReplacement(3).drop_last(true))
          .seed(4));
  drop.extend(Trajectories({5, 3, 7, 2, 6}, 0, 0));
  for (int k = 0; k < 3; ++k) {  // 1 left after 3: a new epoch each call
    auto [data, info] = drop.sample(9);
    auto traj = Vec(data.get("traj"));
    EXPECT_EQ(std::set<int64_t>({traj[0], traj[3], traj[6]}).size(), 3u);
  }
  ExpectThrowsMsg(
      [&] { (void)drop.sample(15); },
      "ReplayBuffer::sample: 5 slices of 3 rows (batch_size 15) exceed the 4 "
      "stored trajectories of at least 3 rows "
      "(SliceSamplerWithoutReplacement with drop_last)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)drop.sample(4); },
      "ReplayBuffer::sample: batch_size 4 is not a multiple of the "
      "SliceSamplerWithoutReplacement's slice_len 3");
}

// The start rows of whole slices of `len` rows in `rb`'s storage (ends from
// ("next", "done") and the newest row), found the slow way.
std::set<int64_t> SliceStarts(const ReplayBuffer& rb, int64_t len) {
  const int64_t size = rb.size();
  const int64_t capacity = rb.capacity();
  const int64_t origin = size == capacity ? rb.cursor() : 0;
  auto done = Vec(rb.storage().get({"next", "done"}).to(torch::kLong));
  std::set<int64_t> starts;
  for (int64_t t = 0; t + len - 1 < size; ++t) {
    bool ok = true;
    for (int64_t u = t; u < t + len - 1; ++u) {
      ok = ok && done[static_cast<size_t>((origin + u) % capacity)] == 0;
    }
    if (ok) starts.insert((origin + t) % capacity);
  }
  return starts;
}

TEST(ReplayBufferTest,
     PrioritizedSlicesStartWhereAWholeSliceFitsAfterAnyWrites) {
  constexpr int64_t kCap = 23;
  constexpr int64_t kLen = 3;
  ReplayBuffer rb(
      ReplayBufferOptions(kCap).sampler(PrioritizedSliceSampler(kLen)).seed(5));
  std::mt19937 gen(7);
  // A stream of trajectories of 1..7 rows, written in chunks of 1..5 rows
  // (add for 1), so trajectories continue across writes and the wrap.
  int64_t id = 0, left = 0, t = 0;
  for (int step = 0; step < 60; ++step) {
    const int64_t n = 1 + static_cast<int64_t>(gen() % 5);
    const bool first_is_open = left > 0;  // continues the last trajectory
    if (!first_is_open) ++id;
    std::vector<int64_t> ids, dones;
    for (int64_t k = 0; k < n; ++k) {
      if (left == 0) {
        left = 1 + static_cast<int64_t>(gen() % 7);
        if (k > 0 || first_is_open) ++id;
      }
      ids.push_back(id);
      dones.push_back(--left == 0);
    }
    TensorDict chunk({{"traj", torch::tensor(ids)},
                      {"t", torch::arange(t, t + n)},
                      {{"next", "done"},
                       torch::tensor(dones).to(torch::kBool).unsqueeze(1)}},
                     {n});
    t += n;
    if (n == 1) {
      rb.add(chunk[0]);
    } else {
      rb.extend(chunk);
    }
    const std::set<int64_t> expected = SliceStarts(rb, kLen);
    if (expected.empty()) {
      ExpectThrowsMsgPrefix(
          [&] { (void)rb.sample(kLen); },
          "ReplayBuffer::sample: no stored row starts a slice of slice_len 3 "
          "rows within its trajectory with a positive priority");
      continue;
    }
    auto [data, info] = rb.sample(400 * kLen);
    auto idx = Vec(info.index);
    std::set<int64_t> starts;
    for (size_t s = 0; s < idx.size(); s += kLen) starts.insert(idx[s]);
    EXPECT_EQ(starts, expected) << "after write " << step;
    auto traj = Vec(data.get("traj"));
    auto tt = Vec(data.get("t"));
    for (size_t s = 0; s < idx.size(); s += kLen) {
      for (size_t j = 1; j < static_cast<size_t>(kLen); ++j) {
        ASSERT_EQ(traj[s + j], traj[s]) << "after write " << step;
        ASSERT_EQ(tt[s + j], tt[s] + static_cast<int64_t>(j));
      }
    }
  }
}

TEST(ReplayBufferTest, PrioritizedSliceSamplerDrawsStartsByPriority) {
  // TorchRL's PrioritizedSliceSampler example: 3 episodes of 3 steps.
  ReplayBuffer rb(ReplayBufferOptions(9)
                      .sampler(PrioritizedSliceSampler(2).alpha(0.7).beta(0.9))
                      .seed(3));
  rb.extend(Trajectories({3, 3, 3}, 0, 0));
  {
    auto [data, info] = rb.sample(6);  // equal priorities: weights 1
    EXPECT_EQ(info.weight.sizes().vec(), std::vector<int64_t>({6}));
    EXPECT_TRUE(at::equal(info.weight, torch::ones({6})));
  }
  rb.update_priority(torch::arange(9),
                     torch::tensor({0., 3., 3., 0., 0., 0., 1., 1., 1.}));
  const double eps_mass = std::pow(1e-8, 0.7);
  const double three = std::pow(3 + 1e-8, 0.7);
  const double one = std::pow(1 + 1e-8, 0.7);
  // Starts: rows 0, 1 (episode 0), 3, 4, 6, 7; row 2 (priority 3) ends
  // episode 0 and never starts a slice.
  std::map<int64_t, double> mass = {{0, eps_mass}, {1, three}, {3, eps_mass},
                                    {4, eps_mass}, {6, one},   {7, one}};
  double total = 0;
  for (auto& [row, m] : mass) total += m;
  constexpr int kSlices = 20000;
  auto [data, info] = rb.sample(2 * kSlices);
  auto idx = Vec(info.index);
  std::map<int64_t, int> count;
  for (size_t s = 0; s < idx.size(); s += 2) {
    ++count[idx[s]];
    EXPECT_EQ(idx[s + 1], idx[s] + 1);
    const float w = info.weight[static_cast<int64_t>(s)].item<float>();
    EXPECT_EQ(w, info.weight[static_cast<int64_t>(s) + 1].item<float>());
    EXPECT_EQ(w,
              static_cast<float>(std::pow(mass.at(idx[s]) / eps_mass, -0.9)));
  }
  EXPECT_EQ(count.size(), 3u);  // rows 1, 6, 7 (the others: ~1e-6 each)
  for (auto& [row, m] : mass) {
    EXPECT_NEAR(count[row] / static_cast<double>(kSlices), m / total, 0.01)
        << "row " << row;
  }
}

TEST(ReplayBufferTest, PrioritizedSliceSamplerErrorsNameTheProblem) {
  ReplayBuffer rb(
      ReplayBufferOptions(10).sampler(PrioritizedSliceSampler(4)).seed(0));
  rb.extend(Trajectories({3, 2}, 0, 0));
  ExpectThrowsMsg(
      [&] { (void)rb.sample(8); },
      "ReplayBuffer::sample: no stored row starts a slice of slice_len 4 rows "
      "within its trajectory with a positive priority (5 rows stored)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)rb.sample(6); },
      "ReplayBuffer::sample: batch_size 6 is not a multiple of the "
      "PrioritizedSliceSampler's slice_len 4");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ReplayBuffer bad(ReplayBufferOptions(4).sampler(
            PrioritizedSliceSampler(2).alpha(-1)));
      },
      "PrioritizedSliceSampler: alpha, beta and eps must be >= 0, got "
      "alpha=-1, beta=0.4, eps=1e-08");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ReplayBuffer bad(
            ReplayBufferOptions(4).sampler(SliceSamplerWithoutReplacement(0)));
      },
      "SliceSamplerWithoutReplacement: slice_len must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ReplayBuffer bad(ReplayBufferOptions(4).shared(true).sampler(
            PrioritizedSliceSampler(2)));
      },
      "ReplayBufferOptions: a shared buffer cannot use PrioritizedSliceSampler "
      "(its trees live in one process's memory); use RandomSampler, "
      "SamplerWithoutReplacement or SliceSampler");
}

}  // namespace
