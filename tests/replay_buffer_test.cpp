// Tests of ReplayBuffer: lazy circular storage, uniform sampling, thread
// safety, the all-or-nothing errors and the MaxValueWriter. The other
// samplers are tested in replay_sampler_test.cpp, the disk-backed storage and
// the checkpoints in replay_persistence_test.cpp.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <atomic>
#include <cmath>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "replay_test_util.h"
#include "test_util.h"

namespace {

using tensordict::PrioritizedSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::SliceSampler;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::replay_test::Capture;
using tensordict_test::replay_test::ExpectSame;
using tensordict_test::replay_test::ObsValues;
using tensordict_test::replay_test::Ranked;
using tensordict_test::replay_test::Row;
using tensordict_test::replay_test::Rows;
using tensordict_test::replay_test::State;
using tensordict_test::replay_test::StoredKeys;
using tensordict_test::replay_test::Vec;

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

// A large storage leaf ("obs", 8 MB) is fresh memory from the kernel, which
// no one zero-fills, and a small one ("done") comes from LibTorch: the rows
// written read back, the others are zeros, also where the process freed
// memory before.
TEST(ReplayBufferTest, ALargeStorageIsZerosWhereNoRowWasWritten) {
  const int64_t n = int64_t{1} << 18;
  {
    const at::Tensor junk = at::full({16 * n}, 7.0f);
    ASSERT_EQ(junk[0].item<float>(), 7.0f);
  }
  ReplayBuffer rb(ReplayBufferOptions(2 * n).seed(0));
  const at::Tensor obs = at::arange(4 * n, at::kFloat).reshape({n, 4});
  rb.extend(
      TensorDict({{"obs", obs}, {"done", at::ones({n, 1}, at::kBool)}}, {n}));
  const TensorDict st = rb.storage();
  EXPECT_TRUE(at::equal(st.get("obs").narrow(0, 0, n), obs));
  EXPECT_TRUE(st.get("done").narrow(0, 0, n).all().item<bool>());
  EXPECT_EQ(st.get("obs").narrow(0, n, n).count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(st.get("done").narrow(0, n, n).count_nonzero().item<int64_t>(), 0);
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

TEST(ReplayBufferTest, ASampleStillHeldIsNeverReusedAndADroppedOneIs) {
  ReplayBuffer rb(ReplayBufferOptions(10).seed(3));
  rb.extend(Rows(6, 100));
  auto [held, held_info] = rb.sample(32);
  const TensorDict held_copy = held.clone();
  const at::Tensor held_index = held_info.index.clone();
  // Only the index of this one is kept: it shares the rows' allocation.
  const at::Tensor index_only = rb.sample(16).second.index;
  const at::Tensor index_only_copy = index_only.clone();
  for (int i = 0; i < 4; ++i) {
    auto [data, info] = rb.sample(32);
    EXPECT_NE(info.index.data_ptr(), held_info.index.data_ptr());
    EXPECT_NE(info.index.data_ptr(), index_only.data_ptr());
    EXPECT_TRUE((data == rb.storage()[info.index].value()).all());
  }
  EXPECT_TRUE((held == held_copy).all());
  EXPECT_TRUE(at::equal(held_info.index, held_index));
  EXPECT_TRUE(at::equal(index_only, index_only_copy));
  // A sample nothing holds any more lends its memory to the next one, whose
  // rows are its own.
  const void* dropped = rb.sample(32).second.index.data_ptr();
  auto [next, next_info] = rb.sample(8);
  EXPECT_EQ(next_info.index.data_ptr(), dropped);
  EXPECT_TRUE((next == rb.storage()[next_info.index].value()).all());
}

TEST(ReplayBufferTest, SampleIntoWritesWhatSampleReturnsIntoTheGivenRows) {
  ReplayBuffer a(ReplayBufferOptions(10).seed(5));
  ReplayBuffer b(ReplayBufferOptions(10).seed(5));
  a.extend(Rows(7, 100));
  b.extend(Rows(7, 100));
  // Rows 2..7 of a larger batch; the others are left as they are.
  const TensorDict batch =
      Rows(10, -1).apply([](const at::Tensor& t) { return t.clone(); });
  const TensorDict before = batch.clone();
  const void* obs = batch.get("obs").data_ptr();
  const int64_t version = batch.get("obs")._version();
  const TensorDict rows = batch.index({at::indexing::Slice(2, 8)});
  const tensordict::SampleInfo info = a.sample_into(rows);
  auto [want, want_info] = b.sample(6);
  EXPECT_TRUE(at::equal(info.index, want_info.index));
  EXPECT_FALSE(info.weight.defined());
  EXPECT_TRUE((rows == want).all());
  EXPECT_TRUE((rows == a.storage()[info.index].value()).all());
  EXPECT_EQ(batch.get("obs").data_ptr(), obs);
  EXPECT_GT(batch.get("obs")._version(), version);
  for (const int64_t r : {0, 1, 8, 9}) {
    EXPECT_TRUE((batch[r].value() == before[r].value()).all()) << "row " << r;
  }
  // The next draws agree too.
  EXPECT_TRUE(at::equal(a.sample(4).second.index, b.sample(4).second.index));
  // Rows 2..7 again, given as an offset and a count instead of a slice.
  const TensorDict whole = before.clone();
  const tensordict::SampleInfo at_offset = a.sample_into(whole, 2, 6);
  auto [again, again_info] = b.sample(6);
  EXPECT_TRUE(at::equal(at_offset.index, again_info.index));
  EXPECT_TRUE((whole.index({at::indexing::Slice(2, 8)}) == again).all());
  for (const int64_t r : {0, 1, 8, 9}) {
    EXPECT_TRUE((whole[r].value() == before[r].value()).all()) << "row " << r;
  }
}

TEST(ReplayBufferTest, SampleIntoAMismatchedDictThrowsAndChangesNothing) {
  ReplayBuffer a(ReplayBufferOptions(10).seed(5));
  ReplayBuffer b(ReplayBufferOptions(10).seed(5));
  ExpectThrowsMsg([&] { (void)a.sample_into(Rows(4, 0)); },
                  "ReplayBuffer::sample_into: the buffer is empty");
  a.extend(Rows(7, 100));
  b.extend(Rows(7, 100));
  const TensorDict out = Rows(4, 0);
  const auto snap = tensordict_test::TakeSnapshot(out);
  const TensorDict missing = out.exclude({"done"});
  ExpectThrowsMsg(
      [&] { (void)a.sample_into(missing); },
      "ReplayBuffer::sample_into: TensorDicts have different keys: missing "
      "from out: [done]");
  const TensorDict wide = out.clone();
  wide.set("obs", torch::zeros({4, 5}));
  ExpectThrowsMsg([&] { (void)a.sample_into(wide); },
                  "ReplayBuffer::sample_into: key obs: out's leaf is "
                  "torch.float32 [4, 5] on cpu, expected the buffer's "
                  "torch.float32 [4, 3] on cpu");
  const TensorDict doubles = out.clone();
  doubles.set({"next", "obs"}, torch::zeros({4, 3}, torch::kDouble));
  ExpectThrowsMsg([&] { (void)a.sample_into(doubles); },
                  "ReplayBuffer::sample_into: key ('next', 'obs'): out's leaf "
                  "is torch.float64 [4, 3] on cpu, expected the buffer's "
                  "torch.float32 [4, 3] on cpu");
  const TensorDict grad = out.clone();
  grad.set("obs", torch::zeros({4, 3}).requires_grad_());
  ExpectThrowsMsg([&] { (void)a.sample_into(grad); },
                  "ReplayBuffer::sample_into: key obs: out's leaf requires "
                  "grad");
  const TensorDict aliased = a.storage().index({at::indexing::Slice(0, 4)});
  const auto stored = tensordict_test::TakeSnapshot(a.storage());
  ExpectThrowsMsg([&] { (void)a.sample_into(aliased.copy()); },
                  "ReplayBuffer::sample_into: key obs: out's leaf shares "
                  "memory with the buffer's storage");
  tensordict_test::ExpectUnchanged(a.storage(), stored);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)a.sample_into(TensorDict({}, std::vector<int64_t>{0})); },
      "ReplayBuffer::sample_into: out must have at least one row, got batch "
      "size [0]");
  for (const auto& [offset, count] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 2}, {-1, 2}, {0, 0}}) {
    ExpectThrowsMsg<c10::ValueError>(
        [&, offset = offset, count = count] {
          (void)a.sample_into(out, offset, count);
        },
        "ReplayBuffer::sample_into: rows [" + std::to_string(offset) + ", " +
            std::to_string(offset) + " + " + std::to_string(count) +
            ") must be a non-empty range within out's 4 rows");
  }
  tensordict_test::ExpectUnchanged(out, snap);
  // Nothing was drawn: the two buffers still agree.
  EXPECT_TRUE(at::equal(a.sample(4).second.index, b.sample(4).second.index));
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

}  // namespace

// ---- MaxValueWriter
// ---------------------------------------------------------------

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
