// Tests of ReplayBuffer: lazy circular storage, the four samplers, thread
// safety, the all-or-nothing errors, and the disk-backed storage
// (ReplayBufferDiskTest: reopening, other processes, sparse allocation).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

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
using tensordict_test::ExpectUnchanged;
using tensordict_test::FileSize;
using tensordict_test::ListDir;
using tensordict_test::RemoveTree;
using tensordict_test::TakeSnapshot;

// A batch of `n` rows whose every element of row k is `first + k`.
TensorDict Rows(int64_t n, float first) {
  at::Tensor v = torch::arange(n, torch::kFloat) + first;
  return TensorDict(
      {{"obs", v.unsqueeze(1).expand({n, 3}).contiguous()},
       {"done", torch::zeros({n, 1}, torch::kBool)},
       {{"next", "obs"}, v.unsqueeze(1).expand({n, 3}).contiguous()}},
      {n});
}

TensorDict Row(float value) { return Rows(1, value)[0]; }

// Column 0 of "obs", as a vector (one value per row).
std::vector<float> ObsValues(const TensorDict& td) {
  at::Tensor c = td.get("obs").select(1, 0).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

std::vector<int64_t> Vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// ---- Storage ----------------------------------------------------------------

TEST(ReplayBufferTest, StorageIsAllocatedLazilyFromTheFirstRow) {
  ReplayBuffer rb(ReplayBufferOptions(5).seed(0));
  EXPECT_TRUE(rb.storage().empty());
  EXPECT_EQ(rb.storage().batch_size().vec(), std::vector<int64_t>({5}));
  EXPECT_EQ(rb.size(), 0);
  EXPECT_TRUE(rb.empty());
  EXPECT_EQ(rb.capacity(), 5);

  EXPECT_EQ(rb.add(Row(7)), 0);
  TensorDict st = rb.storage();
  EXPECT_EQ(st.keys(true, true),
            tensordict_test::Keys({"obs", "done", {"next", "obs"}}));
  EXPECT_EQ(st.get("obs").sizes().vec(), std::vector<int64_t>({5, 3}));
  EXPECT_EQ(st.get("done").sizes().vec(), std::vector<int64_t>({5, 1}));
  EXPECT_EQ(st.get("done").scalar_type(), at::kBool);
  EXPECT_EQ(st.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({5}));
  EXPECT_EQ(ObsValues(st), std::vector<float>({7, 0, 0, 0, 0}));
  EXPECT_EQ(rb.size(), 1);
  EXPECT_EQ(rb.cursor(), 1);
}

TEST(ReplayBufferTest, AddWritesInPlaceAndWrapsAroundOverwritingTheOldest) {
  ReplayBuffer rb(ReplayBufferOptions(3));
  rb.add(Row(0));
  at::Tensor obs = rb.storage().get("obs");
  std::vector<int64_t> where;
  for (int k = 1; k < 5; ++k)
    where.push_back(rb.add(Row(static_cast<float>(k))));
  EXPECT_EQ(where, std::vector<int64_t>({1, 2, 0, 1}));
  EXPECT_TRUE(rb.storage().get("obs").is_same(obs));
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({3, 4, 2}));
  EXPECT_EQ(rb.size(), 3);
  EXPECT_EQ(rb.cursor(), 2);
}

TEST(ReplayBufferTest, ExtendAcrossTheEndIsWrittenInTwoPieces) {
  ReplayBuffer rb(ReplayBufferOptions(5));
  EXPECT_EQ(Vec(rb.extend(Rows(3, 0))), std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(Vec(rb.extend(Rows(4, 3))), std::vector<int64_t>({3, 4, 0, 1}));
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({5, 6, 2, 3, 4}));
  EXPECT_TRUE(
      at::equal(rb.storage().get({"next", "obs"}), rb.storage().get("obs")));
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.cursor(), 2);
}

TEST(ReplayBufferTest, ExtendLargerThanCapacityKeepsItsLastCapacityRows) {
  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.add(Row(-1));
  at::Tensor written = rb.extend(Rows(10, 10));
  // Row j of the batch lands where a one-by-one write would put it:
  // (1 + j) % 4; the last 4 rows (16..19) survive.
  EXPECT_EQ(Vec(written), std::vector<int64_t>({3, 0, 1, 2}));
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({17, 18, 19, 16}));
  EXPECT_EQ(rb.size(), 4);
  EXPECT_EQ(rb.cursor(), 3);
}

TEST(ReplayBufferTest, WritesFromAViewOfTheStorageReadACopy) {
  // Written in place, the second piece of this wrapping extend (row 0) would
  // read row 3 after the first piece (rows 1..3) overwrote it.
  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.extend(Rows(4, 0));
  rb.add(Row(10));
  EXPECT_EQ(Vec(rb.extend(rb.storage())), std::vector<int64_t>({1, 2, 3, 0}));
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({3, 10, 1, 2}));
  EXPECT_EQ(ObsValues(rb.storage().get_tensordict("next")),
            std::vector<float>({3, 10, 1, 2}));
  EXPECT_EQ(rb.add(rb.storage()[2]), 1);
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({3, 1, 1, 2}));
  EXPECT_EQ(rb.cursor(), 2);
}

TEST(ReplayBufferTest, NonContiguousRowsAreCopiedThroughTheGeneralPath) {
  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.extend(Rows(2, 0));
  TensorDict batch = Rows(2, 5);
  at::Tensor strided = torch::tensor({{5.f, 6.f}, {5.f, 6.f}, {5.f, 6.f}}).t();
  ASSERT_FALSE(strided.is_contiguous());
  batch.set("obs", strided);
  rb.extend(batch);
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({0, 1, 5, 6}));
  EXPECT_TRUE(
      at::equal(rb.storage().get("obs"), rb.storage().get({"next", "obs"})));
}

TEST(ReplayBufferTest, LeavesWithoutElementsAreStoredAndSampled) {
  ReplayBuffer rb(ReplayBufferOptions(4).seed(0));
  rb.extend(TensorDict(
      {{"x", torch::arange(3)}, {"none", torch::zeros({3, 0})}}, {3}));
  rb.add(
      TensorDict({{"x", torch::tensor(3)}, {"none", torch::zeros({0})}}, {}));
  auto [data, info] = rb.sample(5);
  EXPECT_EQ(data.get("none").sizes().vec(), std::vector<int64_t>({5, 0}));
  EXPECT_TRUE(at::equal(data.get("x"), info.index));
}

TEST(ReplayBufferTest, ClearForgetsTheRowsButKeepsTheStorage) {
  ReplayBuffer rb(ReplayBufferOptions(4).seed(1));
  rb.extend(Rows(3, 0));
  at::Tensor obs = rb.storage().get("obs");
  rb.clear();
  EXPECT_EQ(rb.size(), 0);
  EXPECT_EQ(rb.cursor(), 0);
  EXPECT_TRUE(rb.storage().get("obs").is_same(obs));
  ExpectThrowsMsg([&] { (void)rb.sample(2); },
                  "ReplayBuffer::sample: the buffer is empty");
  rb.add(Row(9));
  auto [data, info] = rb.sample(4);
  EXPECT_EQ(Vec(info.index), std::vector<int64_t>({0, 0, 0, 0}));
  EXPECT_EQ(ObsValues(data), std::vector<float>({9, 9, 9, 9}));
}

// ---- Sampling
// -----------------------------------------------------------------

TEST(ReplayBufferTest, SampleReturnsACopyOfTheIndexedRows) {
  ReplayBuffer rb(ReplayBufferOptions(10).seed(3));
  rb.extend(Rows(6, 100));
  auto [data, info] = rb.sample(32);
  EXPECT_EQ(data.batch_size().vec(), std::vector<int64_t>({32}));
  EXPECT_EQ(data.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({32}));
  EXPECT_EQ(info.index.scalar_type(), at::kLong);
  EXPECT_FALSE(info.weight.defined());
  auto idx = Vec(info.index);
  auto obs = ObsValues(data);
  for (size_t k = 0; k < idx.size(); ++k) {
    ASSERT_GE(idx[k], 0);
    ASSERT_LT(idx[k], 6);
    EXPECT_EQ(obs[k], 100.f + static_cast<float>(idx[k]));
  }
  EXPECT_TRUE((data == rb.storage()[info.index].value()).all());
  data.get("obs").fill_(-1);
  EXPECT_EQ(ObsValues(rb.storage())[0], 100.f);
}

TEST(ReplayBufferTest, UniformSamplingDrawsEveryRowAboutEquallyOften) {
  ReplayBuffer rb(ReplayBufferOptions(8).seed(11));
  rb.extend(Rows(8, 0));
  std::vector<int64_t> counts(8, 0);
  const int64_t draws = 40000;
  for (int64_t b = 0; b < draws / 400; ++b) {
    for (int64_t i : Vec(rb.sample(400).second.index)) ++counts[i];
  }
  double chi2 = 0;
  for (int64_t c : counts) {
    const double e = static_cast<double>(draws) / 8.0;
    const double d = static_cast<double>(c) - e;
    chi2 += d * d / e;
  }
  EXPECT_LT(chi2, 24.32);  // chi-square, 7 dof, p = 0.001
}

TEST(ReplayBufferTest, SamplingIsReproducibleFromTheSeed) {
  ReplayBuffer a(ReplayBufferOptions(50).seed(42));
  ReplayBuffer b(ReplayBufferOptions(50).seed(42));
  a.extend(Rows(50, 0));
  b.extend(Rows(50, 0));
  at::Tensor ia = a.sample(20).second.index;
  EXPECT_TRUE(at::equal(ia, b.sample(20).second.index));
  at::Tensor ia2 = a.sample(20).second.index;
  EXPECT_FALSE(at::equal(ia, ia2));
  a.manual_seed(42);
  EXPECT_TRUE(at::equal(a.sample(20).second.index, ia));
}

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

// ---- Slices
// ---------------------------------------------------------------------

// Trajectories of the given lengths, with "traj" ids from `first_id` and
// ("next", "done") set on each trajectory's last row; "t" counts rows.
TensorDict Trajectories(const std::vector<int64_t>& lengths, int64_t first_id,
                        int64_t first_t) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> done;
  for (size_t j = 0; j < lengths.size(); ++j) {
    for (int64_t k = 0; k < lengths[j]; ++k) {
      ids.push_back(first_id + static_cast<int64_t>(j));
      done.push_back(k == lengths[j] - 1);
    }
  }
  const auto n = static_cast<int64_t>(ids.size());
  return TensorDict(
      {{"traj", torch::tensor(ids)},
       {"t", torch::arange(first_t, first_t + n)},
       {{"next", "done"},
        torch::tensor(std::vector<int64_t>(done.begin(), done.end()))
            .to(torch::kBool)
            .unsqueeze(1)}},
      {n});
}

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

// ---- Thread safety
// ----------------------------------------------------------------

TEST(ReplayBufferTest, ConcurrentWritersNeverTearASampledRow) {
  constexpr int kWriters = 4;
  constexpr int kBatches = 1500;
  ReplayBuffer rb(
      ReplayBufferOptions(64).sampler(PrioritizedSampler()).seed(0));
  // Every element of every leaf of a row carries the same stamp:
  // writer * 100000 + batch * 10 + row (exact in float32).
  auto batch_of = [](int writer, int b) {
    at::Tensor v = torch::arange(8, torch::kDouble) +
                   static_cast<double>(writer * 100000 + b * 10);
    return TensorDict(
        {{"obs", v.unsqueeze(1).expand({8, 64}).to(torch::kFloat)},
         {"action", v.unsqueeze(1).expand({8, 4}).to(torch::kFloat)},
         {"stamp", v.to(torch::kLong).unsqueeze(1)},
         {{"next", "obs"}, v.unsqueeze(1).expand({8, 64}).to(torch::kFloat)}},
        {8});
  };
  rb.extend(batch_of(9, 0));
  std::atomic<int> finished{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int b = 0; b < kBatches; ++b) {
        rb.extend(batch_of(w, b));
        if (b % 3 == 0) rb.add(batch_of(w, b)[b % 8]);
      }
      finished.fetch_add(1);
    });
  }
  int64_t checked = 0;
  int64_t torn = 0;
  while (finished.load() < kWriters || checked < 20000) {
    auto [data, info] = rb.sample(32);
    at::Tensor stamp = data.get("stamp").to(torch::kFloat);  // [32, 1]
    for (const auto& key :
         {tensordict::NestedKey("obs"), tensordict::NestedKey("action"),
          tensordict::NestedKey({"next", "obs"})}) {
      torn += data.get(key).ne(stamp).any(1).sum().item<int64_t>();
    }
    rb.update_priority(info.index, torch::rand({32}));
    checked += 32;
  }
  for (auto& t : writers) t.join();
  EXPECT_EQ(torn, 0);
  EXPECT_GE(checked, 20000);
  EXPECT_EQ(rb.size(), 64);
  // Every write was counted: 8 + 4 * (1500 * 8 + 500) rows went in.
  EXPECT_EQ(rb.cursor(), (8 + kWriters * (kBatches * 8 + kBatches / 3)) % 64);
}

// ---- Errors: clear messages, buffer unchanged
// ----------------------------------------

struct State {
  int64_t size;
  int64_t cursor;
  tensordict_test::Snapshot storage;
};

State Capture(const ReplayBuffer& rb) {
  return {rb.size(), rb.cursor(), TakeSnapshot(rb.storage())};
}

void ExpectSame(const ReplayBuffer& rb, const State& s,
                const char* file = __builtin_FILE(),
                int line = __builtin_LINE()) {
  EXPECT_EQ(rb.size(), s.size) << "checked at " << file << ":" << line;
  EXPECT_EQ(rb.cursor(), s.cursor) << "checked at " << file << ":" << line;
  ExpectUnchanged(rb.storage(), s.storage, file, line);
}

TEST(ReplayBufferTest, SamplingAnEmptyBufferThrows) {
  ReplayBuffer rb(ReplayBufferOptions(4));
  ExpectThrowsMsg([&] { (void)rb.sample(2); },
                  "ReplayBuffer::sample: the buffer is empty");
  rb.add(Row(1));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)rb.sample(0); },
      "ReplayBuffer::sample: batch_size must be positive, got 0");
}

TEST(ReplayBufferTest, WritesWithOtherKeysShapesOrDtypesThrowAndChangeNothing) {
  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.extend(Rows(3, 0));
  const State before = Capture(rb);

  TensorDict missing = Row(5).exclude({"done"});
  ExpectThrowsMsg([&] { rb.add(missing); },
                  "ReplayBuffer::add: TensorDicts have different keys: "
                  "missing from the row: [done]");
  ExpectSame(rb, before);

  TensorDict extra = Rows(2, 5);
  extra.set("reward", torch::zeros({2, 1}));
  ExpectThrowsMsg([&] { rb.extend(extra); },
                  "ReplayBuffer::extend: TensorDicts have different keys: "
                  "missing from the storage: [reward]");
  ExpectSame(rb, before);

  TensorDict renamed = Rows(2, 5);
  renamed.rename_key_({"next", "obs"}, {"next", "observation"});
  ExpectThrowsMsg([&] { rb.extend(renamed); },
                  "ReplayBuffer::extend: TensorDicts have different keys: "
                  "missing from the storage: [('next', 'observation')]; "
                  "missing from the batch: [('next', 'obs')]");
  ExpectSame(rb, before);

  // The first leaves are valid: nothing may be written before the check of
  // the last one.
  TensorDict shape = Rows(2, 5);
  shape.set({"next", "obs"}, torch::zeros({2, 4}));
  ExpectThrowsMsg([&] { rb.extend(shape); },
                  "ReplayBuffer::extend: key ('next', 'obs'): expected the "
                  "row shape [3], got [4] (leaf shape [2, 4])");
  ExpectSame(rb, before);

  TensorDict dtype = Row(5);
  dtype.set("done", torch::zeros({1}));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { rb.add(dtype); },
      "ReplayBuffer::add: key done: cannot cast the value's dtype "
      "torch.float32 to the stored dtype torch.bool (a write never casts to "
      "a lower kind, such as floating point to integer)");
  ExpectSame(rb, before);

  ExpectThrowsMsg([&] { rb.add(Rows(2, 5)); },
                  "ReplayBuffer::add: expected a row with batch_size [], got "
                  "batch_size [2] (use extend() for batches)");
  ExpectThrowsMsg([&] { rb.extend(Row(5)); },
                  "ReplayBuffer::extend: expected a batch with one batch "
                  "dim, got batch_size []");
  ExpectSame(rb, before);

  // Wrapping writes after the errors still land in the right place.
  rb.extend(Rows(2, 10));
  EXPECT_EQ(ObsValues(rb.storage()), std::vector<float>({11, 1, 2, 10}));
}

TEST(ReplayBufferTest, WritesWithKeysInAnotherOrderLandInTheirOwnLeaves) {
  // The same keys, inserted in another order at both levels, with values
  // that differ per key.
  TensorDict next(
      {{"reward", torch::full({2, 1}, 7.f)}, {"obs", torch::full({2, 3}, 9.f)}},
      {2});
  TensorDict swapped({{"done", torch::ones({2, 1}, torch::kBool)},
                      {"next", next},
                      {"obs", torch::full({2, 3}, 5.f)}},
                     {2});
  TensorDict first = Rows(2, 0);
  first.set({"next", "reward"}, torch::zeros({2, 1}));
  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.extend(first);
  rb.extend(swapped);
  rb.add(swapped[1]);
  const TensorDict st = rb.storage();
  EXPECT_EQ(st.keys(true, true),
            std::vector<tensordict::NestedKey>(
                {"obs", "done", {"next", "obs"}, {"next", "reward"}}));
  EXPECT_TRUE(
      torch::equal(st.get("obs").slice(0, 2, 4), torch::full({2, 3}, 5.f)));
  EXPECT_TRUE(torch::equal(st.get({"next", "obs"}).slice(0, 2, 4),
                           torch::full({2, 3}, 9.f)));
  EXPECT_TRUE(torch::equal(st.get({"next", "reward"}).slice(0, 2, 4),
                           torch::full({2, 1}, 7.f)));
  EXPECT_TRUE(st.get("done").slice(0, 2, 4).all().item<bool>());
  EXPECT_TRUE(torch::equal(st.get("obs")[0], torch::full({3}, 5.f)));
  EXPECT_TRUE(
      torch::equal(st.get({"next", "reward"})[0], torch::full({1}, 7.f)));
}

TEST(ReplayBufferTest, AFirstWriteWithoutLeavesThrowsAndAllocatesNothing) {
  ReplayBuffer rb(ReplayBufferOptions(4));
  ExpectThrowsMsg([&] { rb.add(TensorDict({}, {})); },
                  "ReplayBuffer::add: the row has no leaves");
  EXPECT_TRUE(rb.storage().empty());
  EXPECT_EQ(rb.size(), 0);
}

TEST(ReplayBufferTest, UpdatePriorityValidatesEverythingBeforeWriting) {
  ReplayBuffer rb(ReplayBufferOptions(8)
                      .sampler(PrioritizedSampler().alpha(1).beta(1).eps(0))
                      .seed(0));
  rb.extend(Rows(4, 0));
  rb.update_priority(torch::arange(4), torch::tensor({1.0, 2.0, 2.0, 2.0}));
  const State before = Capture(rb);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        rb.update_priority(torch::tensor({0, 1, 2}), torch::tensor({1.0, 2.0}));
      },
      "ReplayBuffer::update_priority: index has 3 elements but priority has "
      "2");
  // Index 1 is valid and comes first: it must not be updated either.
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        rb.update_priority(torch::tensor({1, 4}), torch::tensor({9.0, 9.0}));
      },
      "ReplayBuffer::update_priority: index 4 is out of range for a buffer "
      "of size 4");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { rb.update_priority(torch::tensor({-1}), torch::tensor({9.0})); },
      "ReplayBuffer::update_priority: index -1 is out of range for a buffer "
      "of size 4");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        rb.update_priority(torch::tensor({1, 2}), torch::tensor({9.0, -1.0}));
      },
      "ReplayBuffer::update_priority: priorities must be finite and >= 0, "
      "got -1 for index 2");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        rb.update_priority(torch::zeros({2, 2}, torch::kLong),
                           torch::zeros({4}));
      },
      "ReplayBuffer::update_priority: index and priority must be 1-D "
      "tensors, got shapes [2, 2] and [4]");
  ExpectSame(rb, before);
  // The priorities are unchanged: row 0 still has weight 1 (the minimum) and
  // the others 1/2.
  auto [data, info] = rb.sample(100);
  auto idx = Vec(info.index);
  for (size_t k = 0; k < idx.size(); ++k) {
    EXPECT_FLOAT_EQ(info.weight[static_cast<int64_t>(k)].item<float>(),
                    idx[k] == 0 ? 1.f : 0.5f);
  }

  ReplayBuffer uniform(ReplayBufferOptions(4));
  uniform.extend(Rows(2, 0));
  ExpectThrowsMsg(
      [&] { uniform.update_priority(torch::tensor({0}), torch::tensor({1.})); },
      "ReplayBuffer::update_priority: the buffer's sampler is RandomSampler, "
      "not PrioritizedSampler or PrioritizedSliceSampler");
}

TEST(ReplayBufferTest, BadOptionsThrowFromTheConstructor) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { ReplayBuffer rb(ReplayBufferOptions(0)); },
      "ReplayBufferOptions: capacity must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] { ReplayBuffer rb(ReplayBufferOptions(4).storage_dir("")); },
      "ReplayBufferOptions::storage_dir is an empty string");
  ExpectThrowsMsg<c10::ValueError>(
      [] { ReplayBuffer rb(ReplayBufferOptions(4).sampler(SliceSampler(0))); },
      "SliceSampler: slice_len must be positive, got 0");
}

TEST(ReplayBufferTest, AMovedBufferKeepsItsRows) {
  ReplayBuffer a(ReplayBufferOptions(4).seed(0));
  a.extend(Rows(2, 3));
  ReplayBuffer b = std::move(a);
  EXPECT_EQ(b.size(), 2);
  EXPECT_EQ(ObsValues(b.storage())[1], 4.f);
}

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

// ---- MaxValueWriter
// ---------------------------------------------------------------

namespace {

TensorDict Ranked(const std::vector<float>& key) {
  const auto n = static_cast<int64_t>(key.size());
  return TensorDict({{"key", torch::tensor(key)},
                     {"obs", torch::arange(n, torch::kLong) + 100}},
                    {n});
}

std::multiset<float> StoredKeys(const ReplayBuffer& rb) {
  auto k = rb.storage().get("key").narrow(0, 0, rb.size()).contiguous();
  return std::multiset<float>(k.data_ptr<float>(),
                              k.data_ptr<float>() + k.numel());
}

}  // namespace

TEST(ReplayBufferTest, MaxValueWriterKeepsTheTopRowsAsTorchRLsExample) {
  // TorchRL's TensorDictMaxValueWriter example: capacity 1, rank "key".
  using tensordict::MaxValueWriter;
  ReplayBuffer rb(
      ReplayBufferOptions(1)
          .writer(MaxValueWriter().rank_key(tensordict::NestedKey("key")))
          .seed(0));
  std::vector<float> low(10), high(10);
  std::iota(low.begin(), low.end(), 0.f);
  std::iota(high.begin(), high.end(), 10.f);
  // Each row beats the one before: each replaces it, so only the last is
  // stored when extend returns.
  std::vector<int64_t> only_last(10, -1);
  only_last[9] = 0;
  EXPECT_EQ(Vec(rb.extend(Ranked(low))), only_last);
  EXPECT_EQ(rb.sample(1).first.get("key").item<float>(), 9.f);
  EXPECT_EQ(Vec(rb.extend(Ranked(high))), only_last);
  EXPECT_EQ(rb.sample(1).first.get("key").item<float>(), 19.f);
  EXPECT_EQ(Vec(rb.extend(Ranked(low))), std::vector<int64_t>(10, -1));
  EXPECT_EQ(rb.sample(1).first.get("key").item<float>(), 19.f);
}

TEST(ReplayBufferTest, MaxValueWriterReplacesTheLowestRankOnceFull) {
  using tensordict::MaxValueWriter;
  ReplayBuffer rb(ReplayBufferOptions(4).writer(
      MaxValueWriter().rank_key(tensordict::NestedKey("key"))));
  // Filling: rows go to the cursor.
  EXPECT_EQ(Vec(rb.extend(Ranked({5, 1, 7}))), std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(rb.add(Ranked({3})[0]), 3);
  EXPECT_EQ(rb.size(), 4);
  EXPECT_EQ(rb.cursor(), 0);
  // Full: 1 (row 1) is the lowest; 2 beats it, 0 beats nothing.
  EXPECT_EQ(rb.add(Ranked({2})[0]), 1);
  EXPECT_EQ(rb.add(Ranked({0})[0]), -1);
  EXPECT_EQ(rb.add(Ranked({2})[0]), -1);  // not strictly higher than 2
  EXPECT_EQ(StoredKeys(rb), std::multiset<float>({5, 2, 7, 3}));
  // 9 replaces 2 (row 1), 8 replaces 3 (row 3), 6 replaces 5 (row 0); 4
  // beats nothing (6, 7, 8, 9 are left).
  EXPECT_EQ(Vec(rb.extend(Ranked({9, 4, 8, 6}))),
            std::vector<int64_t>({1, -1, 3, 0}));
  EXPECT_EQ(StoredKeys(rb), std::multiset<float>({6, 9, 7, 8}));
  EXPECT_EQ(rb.cursor(), 0);
  EXPECT_EQ(rb.storage().get("obs")[1].item<int64_t>(), 100);  // the 9's row
  rb.clear();
  EXPECT_EQ(rb.add(Ranked({-1})[0]), 0);  // fills again from row 0
}

TEST(ReplayBufferTest, MaxValueWriterReducesMultiElementRanks) {
  using tensordict::MaxValueWriter;
  using R = MaxValueWriter::Reduction;
  // Rows of 3 rewards each: sums 6, 0, 3; maxima 3, 0, 3.
  at::Tensor reward =
      torch::tensor({1.f, 2.f, 3.f, 0.f, 0.f, 0.f, 3.f, 0.f, 0.f})
          .reshape({3, 3, 1});
  TensorDict batch({{{"next", "reward"}, reward}}, {3});
  auto kept = [&](R reduction) {
    ReplayBuffer rb(
        ReplayBufferOptions(2).writer(MaxValueWriter().reduction(reduction)));
    return Vec(rb.extend(batch));
  };
  EXPECT_EQ(kept(R::kSum), std::vector<int64_t>({0, -1, 1}));
  EXPECT_EQ(kept(R::kMean), std::vector<int64_t>({0, -1, 1}));
  EXPECT_EQ(kept(R::kMax), std::vector<int64_t>({0, -1, 1}));
  // Minima 1, 0, 0 and medians 2, 0, 0: the third row does not beat the
  // second's 0.
  EXPECT_EQ(kept(R::kMin), std::vector<int64_t>({0, 1, -1}));
  EXPECT_EQ(kept(R::kMedian), std::vector<int64_t>({0, 1, -1}));
}

TEST(ReplayBufferTest, MaxValueWriterErrorsChangeNothing) {
  using tensordict::MaxValueWriter;
  ReplayBuffer rb(ReplayBufferOptions(3).writer(
      MaxValueWriter().rank_key(tensordict::NestedKey("key"))));
  rb.extend(Ranked({1, 2}));
  const State before = Capture(rb);
  ExpectThrowsMsg(
      [&] { rb.add(Rows(1, 0)[0]); },
      "ReplayBuffer::add: the MaxValueWriter's rank_key key is not a tensor "
      "of the row (keys: [obs, done, next, ('next', 'obs')])");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        rb.extend(Ranked({3, std::nanf("")}));
      },
      "ReplayBuffer::extend: the MaxValueWriter's rank (key) of row 1 of the "
      "batch is NaN");
  TensorDict wrong = Ranked({3, 4});
  wrong.set("obs", torch::zeros({2}, torch::kFloat));
  ExpectThrowsMsgPrefix([&] { rb.extend(wrong); },
                        "ReplayBuffer::extend: key obs:");
  ExpectSame(rb, before);
  // 0 fills row 2, then 5 replaces it (the lowest): only 5 is stored.
  EXPECT_EQ(Vec(rb.extend(Ranked({0, 5}))), std::vector<int64_t>({-1, 2}));
  EXPECT_EQ(StoredKeys(rb), std::multiset<float>({1, 2, 5}));
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ReplayBuffer bad(
            ReplayBufferOptions(4).shared(true).writer(MaxValueWriter()));
      },
      "ReplayBufferOptions: a shared buffer cannot use MaxValueWriter (its "
      "ranking lives in one process's memory)");
}

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
