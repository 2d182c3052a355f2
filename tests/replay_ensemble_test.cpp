// ReplayBufferEnsemble and OfflineToOnlineReplayBuffer
// (tensordict/replay_ensemble.h): the split of each batch, where each row
// came from, the routing of priorities, checkpoints, and calls refused with
// nothing changed (every buffer's next samples are those of an untouched
// twin).
#include <gtest/gtest.h>
#include <tensordict/replay_ensemble.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "fs_util.h"
#include "replay_test_util.h"
#include "test_util.h"

namespace {

using tensordict::EnsembleSampleInfo;
using tensordict::OfflineToOnlineReplayBuffer;
using tensordict::PrioritizedSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferEnsemble;
using tensordict::ReplayBufferEnsembleOptions;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::TempDir;
using tensordict_test::replay_test::Capture;
using tensordict_test::replay_test::ExpectSame;
using tensordict_test::replay_test::ObsValues;
using tensordict_test::replay_test::Rows;
using tensordict_test::replay_test::Vec;

// A buffer of `n` rows whose "obs" values are first, first + 1, ...
std::shared_ptr<ReplayBuffer> Filled(int64_t n, float first, uint64_t seed,
                                     bool prioritized = false) {
  auto rb = prioritized ? std::make_shared<ReplayBuffer>(
                              ReplayBufferOptions(1000).seed(seed).sampler(
                                  PrioritizedSampler().alpha(1.0).beta(1.0)))
                        : std::make_shared<ReplayBuffer>(
                              ReplayBufferOptions(1000).seed(seed));
  if (n > 0) (void)rb->extend(Rows(n, first));
  return rb;
}

// Every sampled row is the row `info` names: buffer b's rows hold
// 1000 * b + index.
void ExpectRowsMatchInfo(const TensorDict& data,
                         const EnsembleSampleInfo& info) {
  const std::vector<float> obs = ObsValues(data.reshape({-1}));
  const std::vector<int64_t> ids = Vec(info.buffer_ids.reshape({-1}));
  const std::vector<int64_t> idx = Vec(info.index.reshape({-1}));
  ASSERT_EQ(obs.size(), ids.size());
  ASSERT_EQ(obs.size(), idx.size());
  for (size_t r = 0; r < obs.size(); ++r) {
    EXPECT_EQ(obs[r], static_cast<float>(1000 * ids[r] + idx[r]))
        << "row " << r;
  }
}

TEST(ReplayBufferEnsemble, FixedRatiosHoldExactlyInEveryBatch) {
  ReplayBufferEnsemble mixed({Filled(100, 0, 1), Filled(100, 1000, 2)},
                             ReplayBufferEnsembleOptions().ratios({1, 3}));
  for (int call = 0; call < 5; ++call) {
    auto [data, info] = mixed.sample(256);
    EXPECT_EQ(data.batch_size().vec(), std::vector<int64_t>({256}));
    EXPECT_EQ(info.buffer_ids.sizes(), at::IntArrayRef({256}));
    EXPECT_EQ(info.buffer_ids.slice(0, 0, 64).eq(0).all().item<bool>(), true);
    EXPECT_EQ(info.buffer_ids.slice(0, 64).eq(1).all().item<bool>(), true);
    EXPECT_FALSE(info.weight.defined());
    ExpectRowsMatchInfo(data, info);
  }
  EXPECT_EQ(mixed.size(), 200);
  EXPECT_EQ(mixed.num_buffers(), 2);
  EXPECT_EQ(mixed[1].size(), 100);
  EXPECT_EQ(mixed[-2].size(), 100);
}

TEST(ReplayBufferEnsemble, ABatchHeldIsNeverWrittenOverAndADroppedOneIsReused) {
  ReplayBufferEnsemble mixed({Filled(100, 0, 1), Filled(100, 1000, 2)},
                             ReplayBufferEnsembleOptions().ratios({1, 1}));
  auto [held, held_info] = mixed.sample(16);
  const at::Tensor held_obs = held.get("obs").clone();
  const at::Tensor leaf = mixed.sample(16).first.get({"next", "obs"});
  const at::Tensor leaf_copy = leaf.clone();
  const void* dropped = nullptr;
  for (int call = 0; call < 4; ++call) {
    auto [data, info] = mixed.sample(16);
    ExpectRowsMatchInfo(data, info);
    if (call == 2) dropped = data.get("obs").data_ptr();
    if (call == 3) {
      EXPECT_EQ(data.get("obs").data_ptr(), dropped);
    }
  }
  EXPECT_TRUE(held.get("obs").equal(held_obs));
  ExpectRowsMatchInfo(held, held_info);
  EXPECT_TRUE(leaf.equal(leaf_copy));
  EXPECT_NE(held.get("obs").data_ptr(), dropped);
}

TEST(ReplayBufferEnsemble, SplitRoundsTheCumulativeRatiosHalfToEven) {
  ReplayBufferEnsemble halves({Filled(1, 0, 1), Filled(1, 1000, 2)},
                              ReplayBufferEnsembleOptions().ratios({1, 1}));
  // Python's round(2.5) == 2, as TorchRL's OfflineToOnlineReplayBuffer.
  EXPECT_EQ(halves.split(5), std::vector<int64_t>({2, 3}));
  EXPECT_EQ(halves.split(7), std::vector<int64_t>({4, 3}));
  EXPECT_EQ(halves.split(1), std::vector<int64_t>({0, 1}));
  ReplayBufferEnsemble thirds(
      {Filled(1, 0, 1), Filled(1, 1000, 2), Filled(1, 2000, 3)},
      ReplayBufferEnsembleOptions().ratios({1, 1, 1}));
  EXPECT_EQ(thirds.split(10), std::vector<int64_t>({3, 4, 3}));
  EXPECT_EQ(thirds.split(2), std::vector<int64_t>({1, 0, 1}));
  thirds.set_ratios({0, 2, 2});
  EXPECT_EQ(thirds.split(10), std::vector<int64_t>({0, 5, 5}));
  EXPECT_EQ(thirds.options().ratios(), std::vector<double>({0, 2, 2}));
  auto [data, info] = thirds.sample(10);
  EXPECT_EQ(Vec(info.buffer_ids),
            std::vector<int64_t>({1, 1, 1, 1, 1, 2, 2, 2, 2, 2}));
  ExpectRowsMatchInfo(data, info);
}

TEST(ReplayBufferEnsemble, TorchRLSamplingStacksOneSubBatchPerBufferDrawn) {
  ReplayBufferEnsemble all({Filled(50, 0, 1), Filled(50, 1000, 2)},
                           ReplayBufferEnsembleOptions().sample_from_all(true));
  auto [data, info] = all.sample(8);
  EXPECT_EQ(data.batch_size().vec(), std::vector<int64_t>({2, 4}));
  EXPECT_EQ(Vec(info.buffer_ids),
            std::vector<int64_t>({0, 0, 0, 0, 1, 1, 1, 1}));
  ExpectRowsMatchInfo(data, info);

  ReplayBufferEnsemble weighted(
      {Filled(50, 0, 1), Filled(50, 1000, 2)},
      ReplayBufferEnsembleOptions().p({0, 1}).num_buffer_sampled(3));
  auto [wdata, winfo] = weighted.sample(6);
  EXPECT_EQ(wdata.batch_size().vec(), std::vector<int64_t>({3, 2}));
  EXPECT_EQ(winfo.buffer_ids.eq(1).all().item<bool>(), true);
  ExpectRowsMatchInfo(wdata, winfo);

  // Uniform draws over the buffers, reproducible from the seed.
  ReplayBufferEnsemble a(
      {Filled(50, 0, 1), Filled(50, 1000, 2)},
      ReplayBufferEnsembleOptions().num_buffer_sampled(4).seed(7));
  ReplayBufferEnsemble b(
      {Filled(50, 0, 1), Filled(50, 1000, 2)},
      ReplayBufferEnsembleOptions().num_buffer_sampled(4).seed(7));
  int64_t from_second = 0;
  for (int call = 0; call < 20; ++call) {
    auto [da, ia] = a.sample(4);
    auto [db, ib] = b.sample(4);
    EXPECT_TRUE(ia.buffer_ids.equal(ib.buffer_ids));
    EXPECT_TRUE(da.get("obs").equal(db.get("obs")));
    ExpectRowsMatchInfo(da, ia);
    from_second += ia.buffer_ids.select(1, 0).sum().item<int64_t>();
  }
  EXPECT_GT(from_second, 20);  // of 80 draws, about 40
  EXPECT_LT(from_second, 60);

  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)a.sample(6); },
      "ReplayBufferEnsemble::sample: batch_size 6 is not a multiple of the 4 "
      "buffers sampled per batch");
}

TEST(ReplayBufferEnsemble, PrioritiesGoBackToTheBufferEachRowCameFrom) {
  ReplayBufferEnsemble mixed(
      {Filled(10, 0, 1, true), Filled(10, 1000, 2, true)},
      ReplayBufferEnsembleOptions().ratios({1, 1}));
  auto [data, info] = mixed.sample(8);
  EXPECT_TRUE(info.weight.defined());
  EXPECT_EQ(info.weight.sizes(), at::IntArrayRef({8}));
  // Every row of both buffers: buffer 0 keeps only row 3, buffer 1 row 7.
  EnsembleSampleInfo every;
  every.buffer_ids = torch::cat(
      {torch::zeros({10}, torch::kLong), torch::ones({10}, torch::kLong)});
  every.index = torch::cat({torch::arange(10), torch::arange(10)});
  at::Tensor priority = torch::zeros({20});
  priority[3] = 1.0;
  priority[17] = 2.0;
  mixed.update_priority(every, priority);
  auto [after, after_info] = mixed.sample(8);
  EXPECT_EQ(ObsValues(after),
            std::vector<float>({3, 3, 3, 3, 1007, 1007, 1007, 1007}));
  ExpectRowsMatchInfo(after, after_info);
}

TEST(ReplayBufferEnsemble, ARefusedCallChangesNoBuffer) {
  // Twins: the same buffers and seeds; the first ensemble's calls are
  // refused, then both must sample the same rows.
  auto make = [] {
    return std::vector<std::shared_ptr<ReplayBuffer>>{
        Filled(20, 0, 1, true), Filled(20, 1000, 2), Filled(0, 0, 3)};
  };
  std::vector<std::shared_ptr<ReplayBuffer>> mine = make();
  std::vector<std::shared_ptr<ReplayBuffer>> twin = make();
  ReplayBufferEnsemble a(mine, ReplayBufferEnsembleOptions().ratios({1, 1, 1}));
  ReplayBufferEnsemble b(twin, ReplayBufferEnsembleOptions().ratios({1, 1, 1}));

  ExpectThrowsMsg(
      [&] { (void)a.sample(9); },
      "ReplayBufferEnsemble::sample: buffer 2 is empty (it would give 3 rows)");
  // Rows of another structure: an extra key in buffer 2.
  TensorDict other = Rows(5, 2000);
  other.set("extra", torch::zeros({5}));
  (void)mine[2]->extend(other);
  (void)twin[2]->extend(other);
  ExpectThrowsMsg([&] { (void)a.sample(9); },
                  "ReplayBufferEnsemble::sample: key extra is in buffer 2's "
                  "rows but not in buffer 0's");
  // A priority update that names a buffer without priorities: buffer 0's
  // priorities stay.
  EnsembleSampleInfo info;
  info.buffer_ids = torch::tensor({0, 1}, torch::kLong);
  info.index = torch::tensor({0, 0}, torch::kLong);
  ExpectThrowsMsg(
      [&] { a.update_priority(info, torch::zeros({2})); },
      "ReplayBufferEnsemble::update_priority: buffer 1's sampler is not "
      "PrioritizedSampler or PrioritizedSliceSampler");
  info.buffer_ids = torch::tensor({0, 0}, torch::kLong);
  info.index = torch::tensor({0, 20}, torch::kLong);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { a.update_priority(info, torch::zeros({2})); },
      "ReplayBufferEnsemble::update_priority: index 20 is out of range for "
      "buffer 0 of size 20");
  info.index = torch::tensor({0, 1}, torch::kLong);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        a.update_priority(info, torch::tensor({1.0, -1.0}));
      },
      "ReplayBufferEnsemble::update_priority: priorities must be finite and "
      ">= 0, got -1 for index 1 of buffer 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { a.update_priority(info, torch::zeros({3})); },
      "ReplayBufferEnsemble::update_priority: priority has 3 elements for the "
      "2 rows of info");

  for (size_t i = 0; i < 2; ++i) {
    auto [x, xi] = mine[i]->sample(16);
    auto [y, yi] = twin[i]->sample(16);
    EXPECT_TRUE(x.get("obs").equal(y.get("obs"))) << "buffer " << i;
    EXPECT_TRUE(xi.index.equal(yi.index)) << "buffer " << i;
  }
}

TEST(ReplayBufferEnsemble, OptionsAreChecked) {
  auto two = [] {
    return std::vector<std::shared_ptr<ReplayBuffer>>{Filled(1, 0, 1),
                                                      Filled(1, 1000, 2)};
  };
  ExpectThrowsMsg<c10::ValueError>([&] { ReplayBufferEnsemble({}); },
                                   "ReplayBufferEnsemble: no buffers");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble({Filled(1, 0, 1), nullptr});
      },
      "ReplayBufferEnsemble: buffer 1 is null");
  auto rb = Filled(1, 0, 1);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble({rb, rb});
      },
      "ReplayBufferEnsemble: buffers 0 and 1 are the same buffer");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(two(), ReplayBufferEnsembleOptions().ratios({1}));
      },
      "ReplayBufferEnsemble: ratios has 1 entries for 2 buffers");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(two(),
                             ReplayBufferEnsembleOptions().ratios({1, -1}));
      },
      "ReplayBufferEnsemble: ratios[1] must be finite and >= 0, got -1");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(two(),
                             ReplayBufferEnsembleOptions().ratios({0, 0}));
      },
      "ReplayBufferEnsemble: ratios must not all be 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(
            two(), ReplayBufferEnsembleOptions().ratios({1, 1}).p({1, 1}));
      },
      "ReplayBufferEnsemble: ratios fix every batch's split: p, "
      "sample_from_all and num_buffer_sampled do not apply");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(
            two(),
            ReplayBufferEnsembleOptions().p({1, 1}).sample_from_all(true));
      },
      "ReplayBufferEnsemble: p and sample_from_all=true cannot be combined");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        ReplayBufferEnsemble(two(), ReplayBufferEnsembleOptions()
                                        .sample_from_all(true)
                                        .num_buffer_sampled(3));
      },
      "ReplayBufferEnsemble: with sample_from_all, num_buffer_sampled must "
      "be 2 (the number of buffers), got 3");
  ReplayBufferEnsemble torchrl_style(two());
  ExpectThrowsMsg(
      [&] { (void)torchrl_style.split(4); },
      "ReplayBufferEnsemble::split: the ensemble has no fixed ratios");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)torchrl_style[2]; },
      "ReplayBufferEnsemble: index 2 is out of range for 2 buffers");
}

TEST(ReplayBufferEnsemble, SamplesWhileOtherThreadsWrite) {
  ReplayBufferEnsemble mixed({Filled(10, 0, 1), Filled(10, 1000, 2)},
                             ReplayBufferEnsembleOptions().ratios({1, 1}));
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < 2; ++w) {
    threads.emplace_back([&mixed, w] {
      for (int k = 0; k < 50; ++k) {
        (void)mixed[w].extend(
            Rows(4, static_cast<float>(1000 * w + 10 + 4 * k)));
      }
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&mixed] {
      for (int k = 0; k < 50; ++k) {
        auto [data, info] = mixed.sample(32);
        ExpectRowsMatchInfo(data, info);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mixed.size(), 420);
}

TEST(OfflineToOnlineReplayBuffer, SplitsAsTorchRLAndAnneals) {
  OfflineToOnlineReplayBuffer rb(Filled(100, 0, 1),
                                 ReplayBufferOptions(50).seed(2), 0.5);
  // Nothing online yet: every row offline.
  auto [first, first_info] = rb.sample(32);
  EXPECT_EQ(first_info.buffer_ids.eq(0).all().item<bool>(), true);
  (void)rb.extend(Rows(10, 1000));
  auto [data, info] = rb.sample(5);
  EXPECT_EQ(Vec(info.buffer_ids), std::vector<int64_t>({0, 0, 1, 1, 1}));
  ExpectRowsMatchInfo(data, info);
  EXPECT_EQ(rb.size(), 110);
  EXPECT_EQ(rb.online_buffer().size(), 10);
  EXPECT_EQ(rb.offline_buffer().size(), 100);

  rb.anneal(50, 100);
  EXPECT_DOUBLE_EQ(rb.offline_fraction(), 0.25);
  auto [quarter, quarter_info] = rb.sample(8);
  EXPECT_EQ(quarter_info.buffer_ids.eq(0).sum().item<int64_t>(), 2);
  rb.anneal(150, 100);
  EXPECT_EQ(rb.offline_fraction(), 0.0);
  auto [online, online_info] = rb.sample(8);
  EXPECT_EQ(online_info.buffer_ids.eq(1).all().item<bool>(), true);
  ExpectRowsMatchInfo(online, online_info);

  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        OfflineToOnlineReplayBuffer(Filled(1, 0, 1), ReplayBufferOptions(8),
                                    1.0);
      },
      "OfflineToOnlineReplayBuffer: offline_fraction must be in (0, 1), got 1");
}

}  // namespace

namespace {

// The next `calls` samples of `n` rows: rows, buffer ids and indices.
std::vector<std::vector<float>> NextSamples(ReplayBufferEnsemble& e, int64_t n,
                                            int calls) {
  std::vector<std::vector<float>> out;
  for (int c = 0; c < calls; ++c) {
    auto [data, info] = e.sample(n);
    out.push_back(ObsValues(data.reshape({-1})));
    const std::vector<int64_t> ids = Vec(info.buffer_ids.reshape({-1}));
    out.emplace_back(ids.begin(), ids.end());
    if (info.weight.defined()) {
      const at::Tensor w = info.weight.reshape({-1}).contiguous();
      out.emplace_back(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    }
  }
  return out;
}

}  // namespace

TEST(ReplayBufferEnsemble, CheckpointsResumeTheSameSamples) {
  TempDir dir("td_ensemble_checkpoint");
  // Fixed ratios, a prioritized buffer with updated priorities.
  ReplayBufferEnsemble fixed({Filled(50, 0, 1, true), Filled(30, 1000, 2)},
                             ReplayBufferEnsembleOptions().ratios({1, 3}));
  auto [data, info] = fixed.sample(8);  // 2 rows of buffer 0, 6 of buffer 1
  EnsembleSampleInfo prioritized;
  prioritized.buffer_ids = info.buffer_ids.slice(0, 0, 2);
  prioritized.index = info.index.slice(0, 0, 2);
  fixed.update_priority(prioritized, torch::tensor({5.0, 0.5}));
  fixed.set_ratios({1, 1});
  fixed.dumps(dir / "fixed");
  const auto expected = NextSamples(fixed, 16, 3);
  ReplayBufferEnsemble restored({Filled(0, 0, 7, true), Filled(0, 0, 8)},
                                ReplayBufferEnsembleOptions().ratios({1, 3}));
  restored.loads(dir / "fixed");
  EXPECT_EQ(restored[0].size(), 50);
  EXPECT_EQ(restored[1].size(), 30);
  EXPECT_EQ(restored.options().ratios(), std::vector<double>({1, 1}));
  EXPECT_EQ(NextSamples(restored, 16, 3), expected);

  // TorchRL's sampling: the ensemble's own generator draws the buffers.
  ReplayBufferEnsemble drawn(
      {Filled(40, 0, 3), Filled(40, 1000, 4), Filled(40, 2000, 5)},
      ReplayBufferEnsembleOptions().p({0.2, 0.3, 0.5}).seed(11));
  (void)drawn.sample(12);
  drawn.dumps(dir / "drawn");
  const auto drawn_expected = NextSamples(drawn, 12, 4);
  ReplayBufferEnsemble drawn_restored(
      {Filled(0, 0, 3), Filled(0, 0, 4), Filled(0, 0, 5)},
      ReplayBufferEnsembleOptions().p({0.2, 0.3, 0.5}).seed(99));
  drawn_restored.loads(dir / "drawn");
  EXPECT_EQ(NextSamples(drawn_restored, 12, 4), drawn_expected);

  ExpectThrowsMsg([&] { fixed.dumps(dir / "fixed"); },
                  "ReplayBufferEnsemble::dumps: '" + (dir / "fixed") +
                      "' is not empty; dumps writes a checkpoint into a new "
                      "or empty directory only");
}

TEST(ReplayBufferEnsemble, ACheckpointWithANeverWrittenBufferLoads) {
  TempDir dir("td_ensemble_unwritten");
  ReplayBufferEnsemble ens({Filled(20, 0, 1), Filled(0, 0, 2)},
                           ReplayBufferEnsembleOptions().ratios({1, 1}));
  ens.dumps(dir / "cp");
  // Both of the buffers loaded into hold rows of their own first.
  ReplayBufferEnsemble restored({Filled(5, 500, 3), Filled(7, 700, 4)},
                                ReplayBufferEnsembleOptions().ratios({1, 1}));
  restored.loads(dir / "cp");
  EXPECT_EQ(restored[0].size(), 20);
  EXPECT_EQ(restored[1].size(), 0);
  // Once the empty buffer gets the same rows, both go on alike.
  (void)ens[1].extend(Rows(10, 1000));
  (void)restored[1].extend(Rows(10, 1000));
  EXPECT_EQ(NextSamples(restored, 8, 3), NextSamples(ens, 8, 3));
}

TEST(ReplayBufferEnsemble, ARefusedLoadChangesNoBuffer) {
  TempDir dir("td_ensemble_refused");
  auto make = [] {
    return std::vector<std::shared_ptr<ReplayBuffer>>{Filled(20, 0, 1, true),
                                                      Filled(10, 1000, 2)};
  };
  std::vector<std::shared_ptr<ReplayBuffer>> mine = make();
  std::vector<std::shared_ptr<ReplayBuffer>> twin = make();
  ReplayBufferEnsemble a(mine, ReplayBufferEnsembleOptions().ratios({1, 1}));
  ReplayBufferEnsemble b(twin, ReplayBufferEnsembleOptions().ratios({1, 1}));
  const auto state0 = Capture(*mine[0]);
  const auto state1 = Capture(*mine[1]);

  // Buffer 0's checkpoint would load; buffer 1's has another capacity.
  ReplayBufferEnsemble capacity(
      {Filled(5, 0, 3, true),
       std::make_shared<ReplayBuffer>(ReplayBufferOptions(500))},
      ReplayBufferEnsembleOptions().ratios({1, 1}));
  (void)capacity[1].extend(Rows(4, 1000));
  capacity.dumps(dir / "capacity");
  ExpectThrowsMsg([&] { a.loads(dir / "capacity"); },
                  "ReplayBufferEnsemble::loads: buffer 1: ReplayBuffer::loads: "
                  "'" +
                      (dir / "capacity/1") +
                      "' holds a buffer of capacity 500, this buffer has "
                      "capacity 1000");
  // Buffer 1's rows have a key that buffer 1's rows lack.
  ReplayBufferEnsemble rows({Filled(5, 0, 3, true), Filled(0, 0, 4)},
                            ReplayBufferEnsembleOptions().ratios({1, 1}));
  TensorDict extra = Rows(3, 1000);
  extra.set("extra", torch::zeros({3}));
  (void)rows[1].extend(extra);
  rows.dumps(dir / "rows");
  ExpectThrowsMsg([&] { a.loads(dir / "rows"); },
                  "ReplayBufferEnsemble::loads: buffer 1: ReplayBuffer::loads: "
                  "TensorDicts have different keys: missing from the storage: "
                  "[extra]");
  // Another number of buffers, ratios on one side only, no checkpoint.
  ReplayBufferEnsemble three(
      {Filled(5, 0, 3, true), Filled(5, 0, 4), Filled(5, 0, 5)},
      ReplayBufferEnsembleOptions().ratios({1, 1, 1}));
  three.dumps(dir / "three");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { a.loads(dir / "three"); },
      "ReplayBufferEnsemble::loads: '" + (dir / "three") +
          "' holds an ensemble of 3 buffers, this one has 2");
  ReplayBufferEnsemble drawn({Filled(5, 0, 3, true), Filled(5, 0, 4)});
  drawn.dumps(dir / "drawn");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { a.loads(dir / "drawn"); },
      "ReplayBufferEnsemble::loads: '" + (dir / "drawn") +
          "' holds an ensemble without fixed ratios, this one has them");
  ExpectThrowsMsg(
      [&] { a.loads(dir / "nothing"); },
      "ReplayBufferEnsemble::loads: '" + (dir / "nothing") +
          "' holds no ensemble checkpoint (no ensemble/meta.json; dumps "
          "writes one)");
  // A damaged generator state.
  a.dumps(dir / "rng");
  TensorDict::load_memmap(dir / "rng/ensemble").get("rng").fill_(0);
  ExpectThrowsMsg([&] { a.loads(dir / "rng"); },
                  "ReplayBufferEnsemble::loads: '" + (dir / "rng") +
                      "': the checkpoint's rng is not a generator state");

  ExpectSame(*mine[0], state0);
  ExpectSame(*mine[1], state1);
  for (int call = 0; call < 3; ++call) {
    auto [x, xi] = a.sample(8);
    auto [y, yi] = b.sample(8);
    EXPECT_TRUE(x.get("obs").equal(y.get("obs"))) << "call " << call;
    EXPECT_TRUE(xi.weight.equal(yi.weight)) << "call " << call;
  }
}

TEST(OfflineToOnlineReplayBuffer, CheckpointsResumeTheFractionAndSamples) {
  TempDir dir("td_offline_online_checkpoint");
  OfflineToOnlineReplayBuffer rb(Filled(100, 0, 1),
                                 ReplayBufferOptions(1000).seed(2), 0.5);
  (void)rb.extend(Rows(40, 1000));
  rb.anneal(1, 4);
  rb.dumps(dir / "cp");
  std::vector<std::vector<float>> expected;
  for (int c = 0; c < 3; ++c)
    expected.push_back(ObsValues(rb.sample(16).first));

  OfflineToOnlineReplayBuffer restored(Filled(100, 5000, 3),
                                       ReplayBufferOptions(1000).seed(4), 0.5);
  restored.loads(dir / "cp");
  EXPECT_EQ(restored.offline_fraction(), 0.375);
  EXPECT_EQ(restored.online_buffer().size(), 40);
  std::vector<std::vector<float>> got;
  for (int c = 0; c < 3; ++c)
    got.push_back(ObsValues(restored.sample(16).first));
  EXPECT_EQ(got, expected);

  // A checkpoint of a plain ensemble has no offline fraction.
  ReplayBufferEnsemble plain({Filled(5, 0, 5), Filled(5, 0, 6)});
  plain.dumps(dir / "plain");
  OfflineToOnlineReplayBuffer other(Filled(10, 0, 7), ReplayBufferOptions(1000),
                                    0.5);
  const auto offline = Capture(other.offline_buffer());
  ExpectThrowsMsg(
      [&] { other.loads(dir / "plain"); },
      "OfflineToOnlineReplayBuffer::loads: the checkpoint's entry "
      "offline_fraction must be a torch.float64 scalar, got nothing");
  ExpectSame(other.offline_buffer(), offline);
  EXPECT_EQ(other.online_buffer().size(), 0);
  EXPECT_EQ(other.offline_fraction(), 0.5);
}
