// Tests for indexing over the batch dims: reads (views vs copies), indexed
// writes, lazy preallocation (spec section 3), the byte-copy fast path and the
// general path of `td[i] = row`, atomicity of failed writes, and the errors.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using tensordict::Entry;
using tensordict::NestedKey;
using tensordict::TensorDict;
using namespace torch::indexing;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// The tutorial's row: {"a": [3], "b": [3, 4]}, batch [3].
TensorDict MakeRow() {
  return TensorDict({{"a", torch::rand({3})}, {"b", torch::rand({3, 4})}}, {3});
}

// {"a": [4, 3] f32, "i": [4] i64, "next": {"obs": [4, 2] f32}}, batch [4],
// with distinct values everywhere.
TensorDict MakeDict() {
  return TensorDict({{"a", torch::arange(12, torch::kFloat).reshape({4, 3})},
                     {"i", torch::arange(4, torch::kLong) * 10},
                     {{"next", "obs"},
                      torch::arange(8, torch::kFloat).reshape({4, 2}) + 100}},
                    {4});
}

// A batch-[5, 6] dict with a sub-dict that has an extra batch dim.
TensorDict MakeDict2D() {
  return TensorDict(
      {{"a", torch::arange(5 * 6 * 2, torch::kFloat).reshape({5, 6, 2})},
       {"sub",
        TensorDict(
            {{"x", torch::arange(5 * 6 * 3, torch::kLong).reshape({5, 6, 3})}},
            {5, 6, 3})}},
      {5, 6});
}

// ---------------------------------------------------------------------------
// Reads: batch shape, values, views vs copies
// ---------------------------------------------------------------------------

TEST(IndexRead, IntegerIndexSelectsARowWhoseLeavesAreViews) {
  TensorDict td = MakeDict();
  TensorDict row = td[1];
  EXPECT_EQ(row.batch_dims(), 0);
  EXPECT_EQ(row.keys(true), td.keys(true));
  EXPECT_TRUE(at::equal(row.get("a"), td.get("a")[1]));
  EXPECT_TRUE(at::equal(row.get("i"), td.get("i")[1]));
  EXPECT_TRUE(at::equal(row.get({"next", "obs"}), td.get({"next", "obs"})[1]));
  EXPECT_TRUE(row.get_tensordict("next").batch_size() ==
              std::vector<int64_t>{});
  EXPECT_TRUE(SharesStorage(row.get("a"), td.get("a")));
  row.get("a").fill_(-1);
  row.get({"next", "obs"}).fill_(-2);
  EXPECT_TRUE(td.get("a")[1].eq(-1).all().item<bool>());
  EXPECT_TRUE(td.get({"next", "obs"})[1].eq(-2).all().item<bool>());
  EXPECT_FALSE(td.get("a")[0].eq(-1).any().item<bool>());
}

TEST(IndexRead, BracketRowSharesTheVersionCounterOfTheBuffers) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  const auto v0 = a._version();
  TensorDict row = td[2];
  row.get("a").add_(1);
  EXPECT_GT(a._version(), v0);
  EXPECT_EQ(row.get("a")._version(), a._version());
  EXPECT_TRUE(at::equal(a[2], torch::tensor({7.f, 8.f, 9.f})));
}

// Leaves of td[i] are views "wherever LibTorch returns views": an in-place
// write of a tensor that requires grad into the row must be recorded on the
// buffer, exactly as with `buffer.select(0, i)` (and with `td.index({i})`).
TEST(IndexRead, InPlaceGradWriteIntoABracketRowReachesTheBuffersGraph) {
  for (bool use_bracket : {false, true}) {
    SCOPED_TRACE(use_bracket ? "td[1]" : "td.index({1})");
    TensorDict td({{"a", torch::zeros({4, 3})}}, {4});
    at::Tensor x = torch::ones({3}, torch::requires_grad());
    TensorDict row = use_bracket ? TensorDict(td[1]) : td.index({1});
    row.get("a").copy_(x * 2);
    EXPECT_TRUE(td.get("a").requires_grad());
    if (!td.get("a").requires_grad()) continue;
    td.get("a").sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(at::equal(x.grad(), torch::full({3}, 2.f)));
  }
}

// A row of a leaf that requires grad (a parameter, or a model's output) is
// part of the graph, as `select`'s row is: gradients reach the leaf, and an
// in-place write into a row of a non-leaf is recorded.
TEST(IndexRead, RowOfALeafThatRequiresGradCarriesGradientsBack) {
  for (bool use_bracket : {false, true}) {
    SCOPED_TRACE(use_bracket ? "td[1]" : "td.index({1})");
    const at::Tensor w = torch::ones({4, 3}, torch::requires_grad());
    TensorDict params({{"w", w}}, {4});
    TensorDict outputs({{"y", w * 2}}, {4});
    TensorDict prow = use_bracket ? TensorDict(params[1]) : params.index({1});
    TensorDict orow = use_bracket ? TensorDict(outputs[1]) : outputs.index({1});
    EXPECT_FALSE(prow.get("w").is_leaf());
    EXPECT_FALSE(orow.get("y").is_leaf());
    (prow.get("w").sum() + orow.get("y").sum()).backward();
    at::Tensor want = torch::zeros({4, 3});
    want[1] = 3;  // 1 from w's row, 2 from y = 2w
    ASSERT_TRUE(w.grad().defined());
    EXPECT_TRUE(at::equal(w.grad(), want));
    // In place into a row of the non-leaf: recorded on `y`'s graph.
    TensorDict out2({{"y", w * 2}}, {4});
    TensorDict row2 = use_bracket ? TensorDict(out2[2]) : out2.index({2});
    row2.get("y").mul_(5);
    w.grad().zero_();
    out2.get("y").sum().backward();
    want.fill_(2);
    want[2] = 10;
    EXPECT_TRUE(at::equal(w.grad(), want));
  }
}

TEST(IndexRead, NegativeIntegerCountsFromTheEnd) {
  TensorDict td = MakeDict();
  EXPECT_TRUE(at::equal(td[-1].get("a"), td.get("a")[3]));
  EXPECT_TRUE(at::equal(td.index({-4}).get("i"), td.get("i")[0]));
  EXPECT_TRUE(at::equal(td[TensorIndex(-2)].get("a"), td.get("a")[2]));
}

TEST(IndexRead, IndexMethodWithIntegerMatchesBracket) {
  TensorDict td = MakeDict();
  TensorDict a = td.index({2});
  TensorDict b = td[2];
  EXPECT_TRUE((a == b).all());
  EXPECT_EQ(a.get("a").data_ptr(), b.get("a").data_ptr());
}

TEST(IndexRead, SliceIndexReturnsViewsWithTheSlicedBatch) {
  TensorDict td = MakeDict();
  TensorDict s = td.index({Slice(1, 3)});
  EXPECT_TRUE(s.batch_size() == std::vector<int64_t>({2}));
  EXPECT_TRUE(s.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({2}));
  EXPECT_TRUE(at::equal(s.get("a"), td.get("a").slice(0, 1, 3)));
  s.get("a").fill_(-1);
  EXPECT_TRUE(td.get("a").slice(0, 1, 3).eq(-1).all().item<bool>());

  TensorDict stepped = td[Slice(None, None, 2)];
  EXPECT_TRUE(stepped.batch_size() == std::vector<int64_t>({2}));
  EXPECT_TRUE(
      at::equal(stepped.get("i"), torch::tensor({0, 20}, torch::kLong)));
  EXPECT_TRUE(SharesStorage(stepped.get("i"), td.get("i")));
}

TEST(IndexRead, EllipsisExpandsOverBatchDimsOnly) {
  TensorDict td = MakeDict2D();
  TensorDict r = td.index({Ellipsis, 2});
  EXPECT_TRUE(r.batch_size() == std::vector<int64_t>({5}));
  EXPECT_TRUE(at::equal(r.get("a"), td.get("a").select(1, 2)));
  EXPECT_TRUE(r.get_tensordict("sub").batch_size() ==
              std::vector<int64_t>({5, 3}));
  EXPECT_TRUE(
      at::equal(r.get({"sub", "x"}), td.get({"sub", "x"}).select(1, 2)));
  EXPECT_TRUE(SharesStorage(r.get("a"), td.get("a")));

  TensorDict all = td.index({Ellipsis});
  EXPECT_TRUE(all.batch_size() == std::vector<int64_t>({5, 6}));
  EXPECT_TRUE(at::equal(all.get("a"), td.get("a")));

  TensorDict first = td.index({1, Ellipsis});
  EXPECT_TRUE(first.batch_size() == std::vector<int64_t>({6}));
  EXPECT_TRUE(at::equal(first.get("a"), td.get("a")[1]));
}

TEST(IndexRead, NoneAddsABatchDimAndKeepsViews) {
  TensorDict td = MakeDict();
  TensorDict r = td.index({None});
  EXPECT_TRUE(r.batch_size() == std::vector<int64_t>({1, 4}));
  EXPECT_EQ(r.get("a").sizes(), c10::IntArrayRef({1, 4, 3}));
  EXPECT_TRUE(r.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({1, 4}));
  EXPECT_TRUE(SharesStorage(r.get("a"), td.get("a")));

  TensorDict r2 = td.index({Slice(), None});
  EXPECT_TRUE(r2.batch_size() == std::vector<int64_t>({4, 1}));
  EXPECT_EQ(r2.get("a").sizes(), c10::IntArrayRef({4, 1, 3}));
  EXPECT_EQ(r2.get({"next", "obs"}).sizes(), c10::IntArrayRef({4, 1, 2}));

  TensorDict r3 = td[None];
  EXPECT_TRUE(r3.batch_size() == std::vector<int64_t>({1, 4}));
}

TEST(IndexRead, BoolMaskCopies) {
  TensorDict td = MakeDict();
  at::Tensor mask = torch::tensor({true, false, true, true});
  TensorDict r = td.index({mask});
  EXPECT_TRUE(r.batch_size() == std::vector<int64_t>({3}));
  EXPECT_TRUE(r.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({3}));
  EXPECT_TRUE(at::equal(r.get("a"), td.get("a").index({mask})));
  EXPECT_FALSE(SharesStorage(r.get("a"), td.get("a")));
  r.get("a").fill_(-1);
  EXPECT_FALSE(td.get("a").eq(-1).any().item<bool>());

  TensorDict r2 = td[mask];
  EXPECT_TRUE(r2.batch_size() == std::vector<int64_t>({3}));
}

TEST(IndexRead, TwoDimensionalBoolMaskConsumesTwoBatchDims) {
  TensorDict td = MakeDict2D();
  at::Tensor mask = torch::zeros({5, 6}, torch::kBool);
  mask.index_put_({1, 2}, true);
  mask.index_put_({4, 5}, true);
  TensorDict r = td.index({mask});
  EXPECT_TRUE(r.batch_size() == std::vector<int64_t>({2}));
  EXPECT_EQ(r.get("a").sizes(), c10::IntArrayRef({2, 2}));
  EXPECT_TRUE(r.get_tensordict("sub").batch_size() ==
              std::vector<int64_t>({2, 3}));
  EXPECT_TRUE(
      at::equal(r.get({"sub", "x"}), td.get({"sub", "x"}).index({mask})));
}

TEST(IndexRead, LongIndexTensorCopies) {
  TensorDict td = MakeDict();
  at::Tensor idx = torch::tensor({3, 0, 3}, torch::kLong);
  TensorDict r = td[idx];
  EXPECT_TRUE(r.batch_size() == std::vector<int64_t>({3}));
  EXPECT_TRUE(at::equal(r.get("a"), td.get("a").index_select(0, idx)));
  EXPECT_TRUE(at::equal(r.get({"next", "obs"}),
                        td.get({"next", "obs"}).index_select(0, idx)));
  EXPECT_FALSE(SharesStorage(r.get("a"), td.get("a")));
  r.get("i").fill_(-1);
  EXPECT_FALSE(td.get("i").eq(-1).any().item<bool>());

  TensorDict r2 = td.index({torch::tensor({{0, 1}, {2, 3}}, torch::kLong)});
  EXPECT_TRUE(r2.batch_size() == std::vector<int64_t>({2, 2}));
  EXPECT_EQ(r2.get("a").sizes(), c10::IntArrayRef({2, 2, 3}));
}

TEST(IndexRead, CombinedIndicesMatchTensorIndexingOnEveryLeaf) {
  TensorDict td = MakeDict2D();
  const at::Tensor a = td.get("a");
  const at::Tensor x = td.get({"sub", "x"});
  struct Case {
    std::vector<TensorIndex> idx;
    std::vector<int64_t> batch;
  };
  at::Tensor idx = torch::tensor({0, 4}, torch::kLong);
  at::Tensor mask6 = torch::tensor({true, false, false, true, true, false});
  std::vector<Case> cases = {
      {{1, Slice(2, 5)}, {3}},
      {{Slice(), idx}, {5, 2}},
      {{idx, Slice(1, 3)}, {2, 2}},
      {{2, mask6}, {3}},
      {{None, 0, Ellipsis}, {1, 6}},
      {{Slice(None, None, 2), None, -1}, {3, 1}},
      {{idx, idx}, {2}},
      {{-1, -1}, {}},
  };
  for (const auto& c : cases) {
    TensorDict r = td.index(c.idx);
    EXPECT_EQ(r.batch_size().vec(), c.batch);
    // The same index on a leaf, with an explicit trailing slice for its own
    // non-batch dims.
    std::vector<TensorIndex> leaf_idx = c.idx;
    if (!(leaf_idx.size() > 2 && leaf_idx[2].is_ellipsis()))
      leaf_idx.emplace_back(Ellipsis);
    EXPECT_TRUE(at::equal(r.get("a"), a.index(leaf_idx)));
    EXPECT_TRUE(at::equal(r.get({"sub", "x"}), x.index(leaf_idx)));
    std::vector<int64_t> sub_batch = c.batch;
    sub_batch.push_back(3);
    EXPECT_EQ(r.get_tensordict("sub").batch_size().vec(), sub_batch);
  }
}

TEST(IndexRead, IndexingKeepsTheDeviceAndIsChainable) {
  TensorDict td({{"a", torch::arange(20).reshape({4, 5})}}, {4, 5},
                at::Device(at::kCPU));
  TensorDict r = td[1][2];
  EXPECT_EQ(r.batch_dims(), 0);
  EXPECT_EQ(r.get("a").item<int64_t>(), 7);
  ASSERT_TRUE(r.device().has_value());
  EXPECT_EQ(*r.device(), at::Device(at::kCPU));
  EXPECT_EQ(td[1].batch_size(), std::vector<int64_t>({5}));
  EXPECT_EQ(td[1].keys(), Keys({"a"}));
}

// `td[i].get(key)` builds only the leaf it returns: the same view, in every
// respect, as the leaf of `TensorDict(td[i])`.
TEST(IndexRead, OneLeafOfARowIsTheLeafOfTheWholeRow) {
  TensorDict td = MakeDict();
  for (int64_t i : {1, -1}) {
    for (const NestedKey& key : td.keys(true, true)) {
      SCOPED_TRACE(key.str() + " of row " + std::to_string(i));
      const at::Tensor leaf = td[i].get(key);
      const at::Tensor want = TensorDict(td[i]).get(key);
      EXPECT_EQ(leaf.data_ptr(), want.data_ptr());
      EXPECT_EQ(leaf.sizes(), want.sizes());
      EXPECT_EQ(leaf.strides(), want.strides());
      EXPECT_EQ(leaf.dtype(), want.dtype());
      EXPECT_TRUE(leaf.is_view());
      // Views of views record the first base ("a" views an arange).
      const at::Tensor buf = td.get(key);
      EXPECT_TRUE(leaf._base().is_same(buf.is_view() ? buf._base() : buf));
      EXPECT_EQ(leaf._version(), td.get(key)._version());
      EXPECT_TRUE(at::equal(leaf, td.get(key)[i]));
    }
  }
  // In place, with a tensor that requires grad: recorded on the buffer.
  at::Tensor x = torch::ones({3}, torch::requires_grad());
  td[2].get("a").copy_(x * 2);
  ASSERT_TRUE(td.get("a").requires_grad());
  td.get("a").sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), torch::full({3}, 2.f)));
}

// Its errors are the whole row's, in the same order (the index first).
TEST(IndexReadErrors, OneLeafOfARowFailsAsTheWholeRowDoes) {
  TensorDict td = MakeDict();
  TensorDict flat({{"x", torch::zeros({2})}}, {});
  Snapshot s = TakeSnapshot(td);
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { (void)td[4].get("a"); },
       "index 4 is out of bounds for dim 0 with size 4 of TensorDict with "
       "batch_size [4]"},
      {[&] { (void)td[-5].get("missing"); },
       "index -5 is out of bounds for dim 0 with size 4 of TensorDict with "
       "batch_size [4]"},
      {[&] { (void)flat[0].get("x"); },
       "cannot index a TensorDict with no batch dimensions (batch_size [])"},
      {[&] { (void)td[0].get("missing"); },
       "key missing not found in TensorDict with keys [a, i, next, ('next', "
       "'obs')]"},
      {[&] {
         (void)td[0].get({"a", "b"});
       },
       "key ('a', 'b') not found in TensorDict with keys [a, i, next, "
       "('next', 'obs')]"},
      {[&] { (void)td[0].get("next"); },
       "key next holds a TensorDict, not a tensor; use get_tensordict()"},
  };
  for (const auto& [call, msg] : cases) {
    SCOPED_TRACE(msg);
    ExpectThrowsMsg(call, msg);
  }
  // The same text as the whole row's.
  ExpectThrowsMsg([&] { (void)TensorDict(td[0]).get("missing"); },
                  "key missing not found in TensorDict with keys [a, i, next, "
                  "('next', 'obs')]");
  ExpectThrowsMsg([&] { (void)TensorDict(td[0]).get("next"); },
                  "key next holds a TensorDict, not a tensor; use "
                  "get_tensordict()");
  ExpectUnchanged(td, s);
}

TEST(IndexRead, IndexedDictExposesGetAndReductions) {
  TensorDict td = MakeDict();
  EXPECT_TRUE(at::equal(td[2].get("a"), td.get("a")[2]));
  EXPECT_TRUE(td[2].get_tensordict("next").batch_size() ==
              std::vector<int64_t>{});
  EXPECT_TRUE(td[3].all());
  EXPECT_FALSE(td[0].all());  // a[0][0] == 0, i[0] == 0
  EXPECT_TRUE(td[0].any());
  TensorDict c = td[1].clone();
  EXPECT_FALSE(SharesStorage(c.get("a"), td.get("a")));
  EXPECT_TRUE(at::equal(c.get("a"), td.get("a")[1]));
}

// ---------------------------------------------------------------------------
// Read errors
// ---------------------------------------------------------------------------

TEST(IndexReadErrors, OutOfRangeBatchIndexThrowsIndexError) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>([&] { (void)td.index({4}); },
                                   "index 4 is out of bounds for dim 0 with "
                                   "size 4 of TensorDict with batch_size [4]");
  ExpectThrowsMsg<c10::IndexError>([&] { TensorDict r = td[-5]; },
                                   "index -5 is out of bounds for dim 0 with "
                                   "size 4 of TensorDict with batch_size [4]");
  TensorDict td2 = MakeDict2D();
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td2.index({0, 6});
      },
      "index 6 is out of bounds for dim 1 with size 6 of TensorDict with "
      "batch_size [5, 6]");
  ExpectUnchanged(td, s);
}

TEST(IndexReadErrors, IndexingADictWithNoBatchDimsThrows) {
  TensorDict td({{"x", torch::zeros({2})}}, {});
  Snapshot s = TakeSnapshot(td);
  const std::string msg =
      "cannot index a TensorDict with no batch dimensions (batch_size [])";
  ExpectThrowsMsg<c10::IndexError>([&] { TensorDict r = td[0]; }, msg);
  ExpectThrowsMsg<c10::IndexError>([&] { (void)td.index({Slice()}); }, msg);
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        td[0] = TensorDict({{"x", torch::ones({2})}}, {});
      },
      msg);
  ExpectUnchanged(td, s);
}

TEST(IndexReadErrors, TooManyIndicesOrTwoEllipsesThrow) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.index({0, 0});
      },
      "too many indices for TensorDict with batch_size [4]: 2 batch dims were "
      "indexed");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.index({Ellipsis, 0, Ellipsis});
      },
      "an index can only have a single ellipsis ('...')");
}

TEST(IndexReadErrors, OutOfRangeIndexTensorAndWrongMaskThrowIndexError) {
  TensorDict td = MakeDict();
  ExpectThrowsMsgPrefix<c10::IndexError>(
      [&] {
        (void)td.index({torch::tensor({0, 9}, torch::kLong)});
      },
      "invalid index for TensorDict with batch_size [4]: ");
  ExpectThrowsMsgPrefix<c10::IndexError>(
      [&] {
        (void)td.index({torch::tensor({true, false})});
      },
      "invalid index for TensorDict with batch_size [4]: ");
}

// ---------------------------------------------------------------------------
// Lazy preallocation (spec section 3)
// ---------------------------------------------------------------------------

TEST(LazyPreallocation, IndexedWriteAllocatesMissingKeysWithZeros) {
  const int64_t N = 10;
  TensorDict td({}, {N, 3});
  TensorDict r = MakeRow();
  td[2] = r;
  EXPECT_EQ(td.keys(), Keys({"a", "b"}));
  EXPECT_EQ(td.get("a").sizes(), c10::IntArrayRef({10, 3}));
  EXPECT_EQ(td.get("b").sizes(), c10::IntArrayRef({10, 3, 4}));
  EXPECT_TRUE(at::equal(td.get("a")[2], r.get("a")));
  EXPECT_TRUE(at::equal(td.get("b")[2], r.get("b")));
  at::Tensor others = torch::ones({10}, torch::kBool);
  others[2] = false;
  EXPECT_TRUE(td.get("a").index({others}).eq(0).all().item<bool>());
  EXPECT_TRUE(td.get("b").index({others}).eq(0).all().item<bool>());
  EXPECT_TRUE(td.get("a").is_contiguous());
  EXPECT_FALSE(SharesStorage(td.get("a"), r.get("a")));
}

TEST(LazyPreallocation, NewBuffersTakeTheLeafDtype) {
  TensorDict td({}, {4});
  td[1] = TensorDict({{"f64", torch::full({2}, 1.5, torch::kDouble)},
                      {"i32", torch::full({2}, 7, torch::kInt)},
                      {"b", torch::ones({2}, torch::kBool)},
                      {"h", torch::ones({2}, torch::kHalf)}},
                     {});
  EXPECT_EQ(td.get("f64").scalar_type(), at::kDouble);
  EXPECT_EQ(td.get("i32").scalar_type(), at::kInt);
  EXPECT_EQ(td.get("b").scalar_type(), at::kBool);
  EXPECT_EQ(td.get("h").scalar_type(), at::kHalf);
  EXPECT_EQ(td.get("f64")[1][0].item<double>(), 1.5);
  EXPECT_EQ(td.get("i32")[1][1].item<int>(), 7);
  EXPECT_FALSE(td.get("b")[0].any().item<bool>());
  EXPECT_TRUE(td.get("b")[1].all().item<bool>());
}

TEST(LazyPreallocation, NewBuffersGoOnTheLeafsDeviceWhenTheDictHasNone) {
  TensorDict td({}, {4});
  td[1] = TensorDict({{"m", torch::empty({2}, at::Device(at::kMeta))}}, {});
  EXPECT_TRUE(td.get("m").device().is_meta());
  EXPECT_EQ(td.get("m").sizes(), c10::IntArrayRef({4, 2}));
  EXPECT_FALSE(td.device().has_value());
}

TEST(LazyPreallocation, NewBuffersGoOnTheDictsDeviceWhenItHasOne) {
  TensorDict td(std::vector<int64_t>{4}, at::Device(at::kMeta));
  td[1] = TensorDict(
      {{"c", torch::ones({2})}, {{"next", "o"}, torch::ones({3})}}, {});
  EXPECT_TRUE(td.get("c").device().is_meta());
  EXPECT_EQ(td.get("c").sizes(), c10::IntArrayRef({4, 2}));
  EXPECT_EQ(td.get("c").scalar_type(), at::kFloat);
  EXPECT_TRUE(td.get({"next", "o"}).device().is_meta());
  ASSERT_TRUE(td.get_tensordict("next").device().has_value());
  EXPECT_TRUE(td.get_tensordict("next").device()->is_meta());
}

TEST(LazyPreallocation, NestedSubDictsAreCreatedRecursively) {
  TensorDict td({}, {6});
  TensorDict row({{{"next", "obs"}, torch::ones({3})},
                  {"sub", TensorDict({{"x", torch::ones({2, 7, 5})},
                                      {{"deep", "y"}, torch::ones({2, 7, 1})}},
                                     {2, 7})}},
                 {});
  td[4] = row;
  EXPECT_EQ(td.keys(true, true),
            Keys({{"next", "obs"}, {"sub", "x"}, {"sub", "deep", "y"}}));
  EXPECT_TRUE(td.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({6}));
  EXPECT_TRUE(td.get_tensordict("sub").batch_size() ==
              std::vector<int64_t>({6, 2, 7}));
  EXPECT_TRUE(td.get_tensordict({"sub", "deep"}).batch_size() ==
              std::vector<int64_t>({6, 2, 7}));
  EXPECT_EQ(td.get({"next", "obs"}).sizes(), c10::IntArrayRef({6, 3}));
  EXPECT_EQ(td.get({"sub", "x"}).sizes(), c10::IntArrayRef({6, 2, 7, 5}));
  EXPECT_EQ(td.get({"sub", "deep", "y"}).sizes(),
            c10::IntArrayRef({6, 2, 7, 1}));
  EXPECT_TRUE(td.get({"sub", "x"})[4].eq(1).all().item<bool>());
  EXPECT_EQ(td.get({"sub", "x"}).sum().item<float>(), 70.f);
  EXPECT_EQ(td.get({"sub", "deep", "y"}).sum().item<float>(), 14.f);
}

TEST(LazyPreallocation, MissingKeysAreAddedNextToExistingOnes) {
  TensorDict td(
      {{"a", torch::zeros({4, 3})}, {{"next", "obs"}, torch::zeros({4, 2})}},
      {4});
  at::Tensor a = td.get("a");
  at::Tensor obs = td.get({"next", "obs"});
  td[0] = TensorDict({{"a", torch::ones({3})},
                      {{"next", "obs"}, torch::ones({2})},
                      {{"next", "reward"}, torch::ones({1})},
                      {"c", torch::ones({})}},
                     {});
  EXPECT_EQ(td.keys(true),
            Keys({"a", "next", {"next", "obs"}, {"next", "reward"}, "c"}));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_EQ(td.get({"next", "reward"}).sizes(), c10::IntArrayRef({4, 1}));
  EXPECT_EQ(td.get("c").sizes(), c10::IntArrayRef({4}));
  EXPECT_TRUE(at::equal(td.get("c"), torch::tensor({1.f, 0.f, 0.f, 0.f})));
}

TEST(LazyPreallocation, LaterWritesGoInPlaceAndKeepTensorIdentity) {
  TensorDict td({}, {10, 3});
  td[0] = MakeRow();
  at::Tensor a = td.get("a");
  at::Tensor b = td.get("b");
  void* a_ptr = a.data_ptr();
  TensorDict r1 = MakeRow();
  td[1] = r1;
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get("b").is_same(b));
  EXPECT_EQ(td.get("a").data_ptr(), a_ptr);
  EXPECT_TRUE(at::equal(a[1], r1.get("a")));
  EXPECT_TRUE(at::equal(b[1], r1.get("b")));
  EXPECT_TRUE(a.slice(0, 2).eq(0).all().item<bool>());
}

TEST(LazyPreallocation, NestedLeavesKeepIdentityAcrossWrites) {
  TensorDict td({}, {5});
  auto row = [](float v) {
    return TensorDict({{{"next", "obs"}, torch::full({3}, v)}}, {});
  };
  td[0] = row(1);
  TensorDict next = td.get_tensordict("next");
  at::Tensor obs = td.get({"next", "obs"});
  td[3] = row(2);
  EXPECT_TRUE(td.get_tensordict("next").is_same(next));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_TRUE(at::equal(obs.sum(1), torch::tensor({3.f, 0.f, 0.f, 6.f, 0.f})));
}

TEST(LazyPreallocation, ValueWithFewerBatchDimsBroadcastsFromTheLeft) {
  TensorDict td({}, {4, 3});
  TensorDict row({{"a", torch::tensor({1.f, 2.f})}}, {});  // batch []
  td[1] = row;  // indexed batch shape [3]
  EXPECT_EQ(td.get("a").sizes(), c10::IntArrayRef({4, 3, 2}));
  EXPECT_TRUE(
      at::equal(td.get("a")[1], torch::tensor({1.f, 2.f}).expand({3, 2})));
  EXPECT_TRUE(td.get("a")[0].eq(0).all().item<bool>());

  // Into existing keys, with a slice: value batch [3] into region [2, 3].
  TensorDict v({{"a", torch::arange(6, torch::kFloat).reshape({3, 2})}}, {3});
  td.index_put_({Slice(2, 4)}, v);
  EXPECT_TRUE(at::equal(td.get("a")[2], v.get("a")));
  EXPECT_TRUE(at::equal(td.get("a")[3], v.get("a")));
}

TEST(LazyPreallocation, WriteWithASliceAllocatesAndFillsTheRange) {
  TensorDict td({}, {10});
  TensorDict v({{"a", torch::ones({3, 2})},
                {{"n", "b"}, torch::ones({3}, torch::kLong)}},
               {3});
  const TensorDict& ret = td.index_put_({Slice(2, 5)}, v);
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_EQ(td.get("a").sizes(), c10::IntArrayRef({10, 2}));
  EXPECT_TRUE(
      at::equal(td.get({"n", "b"}),
                torch::tensor({0, 0, 1, 1, 1, 0, 0, 0, 0, 0}, torch::kLong)));
  TensorDict v2({{"a", torch::full({5, 2}, 2.0)}}, {5});
  td[Slice(None, None, 2)] = v2;
  EXPECT_TRUE(at::equal(
      td.get("a").select(1, 0),
      torch::tensor({2.f, 0.f, 2.f, 1.f, 2.f, 0.f, 2.f, 0.f, 2.f, 0.f})));
}

TEST(LazyPreallocation, WriteWithABoolMaskWritesTheSelectedRows) {
  TensorDict td({}, {5});
  at::Tensor mask = torch::tensor({false, true, false, true, false});
  TensorDict v({{"a", torch::tensor({{1.f, 2.f}, {3.f, 4.f}})}}, {2});
  td.index_put_({mask}, v);
  EXPECT_TRUE(at::equal(
      td.get("a"),
      torch::tensor(
          {{0.f, 0.f}, {1.f, 2.f}, {0.f, 0.f}, {3.f, 4.f}, {0.f, 0.f}})));
  at::Tensor a = td.get("a");
  td[mask] = TensorDict({{"a", torch::full({2, 2}, 9.f)}}, {2});
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_EQ(a.sum().item<float>(), 36.f);
}

TEST(LazyPreallocation, WriteWithAnIndexTensorWritesThoseRows) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  at::Tensor idx = torch::tensor({3, 0}, torch::kLong);
  TensorDict v({{"a", torch::full({2, 3}, -1.f)},
                {"i", torch::tensor({-3, -4}, torch::kLong)},
                {{"next", "obs"}, torch::zeros({2, 2})},
                {"new", torch::ones({2, 1})}},
               {2});
  td[idx] = v;
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(
      at::equal(td.get("i"), torch::tensor({-4, 10, 20, -3}, torch::kLong)));
  EXPECT_TRUE(a[0].eq(-1).all().item<bool>());
  EXPECT_TRUE(a[3].eq(-1).all().item<bool>());
  EXPECT_TRUE(at::equal(a[1], torch::tensor({3.f, 4.f, 5.f})));
  EXPECT_TRUE(
      at::equal(td.get("new").squeeze(1), torch::tensor({1.f, 0.f, 0.f, 1.f})));
}

TEST(LazyPreallocation, NegativeIndexWritesCountFromTheEnd) {
  TensorDict td({}, {4});
  td[-1] = TensorDict({{"a", torch::ones({2})}}, {});
  EXPECT_TRUE(
      at::equal(td.get("a").sum(1), torch::tensor({0.f, 0.f, 0.f, 2.f})));
  td.index_put_({-4}, TensorDict({{"a", torch::full({2}, 3.f)}}, {}));
  EXPECT_TRUE(
      at::equal(td.get("a").sum(1), torch::tensor({6.f, 0.f, 0.f, 2.f})));
}

TEST(LazyPreallocation, AssigningAnIndexedDictCopiesTheRow) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  td[0] = td[3];
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(at::equal(a[0], a[3]));
  EXPECT_TRUE(
      at::equal(td.get({"next", "obs"})[0], td.get({"next", "obs"})[3]));
  a[3].fill_(-1);
  EXPECT_FALSE(a[0].eq(-1).any().item<bool>()) << "a copy, not an alias";
}

TEST(LazyPreallocation, ChainedIndexedWriteIntoExistingKeysReachesTheParent) {
  TensorDict td = MakeDict2D();
  TensorDict row({{"a", torch::full({2}, -1.f)},
                  {{"sub", "x"}, torch::full({3}, -2, torch::kLong)}},
                 {});
  td[2][3] = row;
  EXPECT_TRUE(td.get("a")[2][3].eq(-1).all().item<bool>());
  EXPECT_TRUE(td.get({"sub", "x"})[2][3].eq(-2).all().item<bool>());
  EXPECT_EQ(td.get("a").eq(-1).sum().item<int64_t>(), 2);
}

TEST(LazyPreallocation, TwoIntegerIndexWritesOneCell) {
  TensorDict td = MakeDict2D();
  TensorDict row(
      {{"a", torch::full({2}, -1.f)},
       {"sub", TensorDict({{"x", torch::full({3}, -2, torch::kLong)}}, {3})}},
      {});
  td.index_put_({1, -2}, row);
  EXPECT_TRUE(td.get("a")[1][4].eq(-1).all().item<bool>());
  EXPECT_EQ(td.get("a").eq(-1).sum().item<int64_t>(), 2);
  EXPECT_TRUE(td.get({"sub", "x"})[1][4].eq(-2).all().item<bool>());
  EXPECT_EQ(td.get({"sub", "x"}).eq(-2).sum().item<int64_t>(), 3);
}

// ---------------------------------------------------------------------------
// The byte-copy fast path and the general path of `td[i] = row`
// ---------------------------------------------------------------------------

// A dict with preallocated contiguous float/bool buffers, like the rollout
// benchmark: batch [6].
TensorDict MakeBuffers() {
  return TensorDict(
      {{"obs", torch::zeros({6, 8})},
       {"done", torch::zeros({6, 1}, torch::kBool)},
       {{"next", "obs"}, torch::zeros({6, 8})},
       {"sub", TensorDict({{"y", torch::zeros({6, 2, 3})}}, {6, 2})}},
      {6});
}

TensorDict MakeRolloutRow(float v) {
  return TensorDict(
      {{"obs", torch::full({8}, v)},
       {"done", torch::ones({1}, torch::kBool)},
       {{"next", "obs"}, torch::arange(8, torch::kFloat) + v},
       {"sub", TensorDict({{"y", torch::full({2, 3}, -v)}}, {2})}},
      {});
}

TEST(FastAndGeneralPath, FastPathWritesTheRowAndKeepsIdentity) {
  TensorDict td = MakeBuffers();
  Snapshot s = TakeSnapshot(td);
  TensorDict row = MakeRolloutRow(3.f);
  td[4] = row;
  ASSERT_EQ(td.keys(true), s.keys);
  for (size_t k = 0; k < s.leaves.size(); ++k) {
    EXPECT_TRUE(td.get(td.keys(true, true)[k]).is_same(s.leaves[k]));
  }
  for (const auto& k : td.keys(true, true)) {
    EXPECT_TRUE(at::equal(td.get(k)[4], row.get(k))) << k;
    EXPECT_EQ(td.get(k).ne(0).sum().item<int64_t>(),
              row.get(k).ne(0).sum().item<int64_t>())
        << k;
  }
}

TEST(FastAndGeneralPath, FastPathBumpsTheVersionCounterLikeCopy) {
  TensorDict td = MakeBuffers();
  TensorDict row = MakeRolloutRow(2.f);
  for (const auto& k : td.keys(true, true)) {
    // What copy_ does to the version counter of the same kind of buffer.
    at::Tensor ref = torch::zeros_like(td.get(k));
    const auto r0 = ref._version();
    ref.select(0, 1).copy_(row.get(k));
    const auto copy_delta = ref._version() - r0;
    ASSERT_GT(copy_delta, 0);

    const auto v0 = td.get(k)._version();
    td[1] = row;
    EXPECT_EQ(td.get(k)._version() - v0, copy_delta) << k;
  }
}

TEST(FastAndGeneralPath,
     FastPathWithAZeroSizedLeafBumpsTheVersionCounterLikeCopy) {
  TensorDict td({{"e", torch::zeros({4, 0})}, {"a", torch::zeros({4, 2})}},
                {4});
  TensorDict row({{"e", torch::zeros({0})}, {"a", torch::ones({2})}}, {});
  at::Tensor ref = torch::zeros({4, 0});
  const auto r0 = ref._version();
  ref.select(0, 1).copy_(row.get("e"));
  const auto copy_delta = ref._version() - r0;
  const auto v0 = td.get("e")._version();
  td[1] = row;
  EXPECT_EQ(td.get("e")._version() - v0, copy_delta);
  EXPECT_TRUE(td.get("a")[1].eq(1).all().item<bool>());
}

TEST(FastAndGeneralPath, GeneralPathBumpsTheVersionCounterToo) {
  TensorDict td({{"t", torch::zeros({3, 6}).t()}}, {6});  // not contiguous
  const auto v0 = td.get("t")._version();
  td[2] = TensorDict({{"t", torch::ones({3})}}, {});
  EXPECT_GT(td.get("t")._version(), v0);
}

// Writes the same rows through the fast path (contiguous same-dtype buffers)
// and through each general-path trigger, and compares the results.
TEST(FastAndGeneralPath, GeneralPathTriggersGiveTheSameResultAsTheFastPath) {
  auto values = [](int64_t i) {
    return torch::arange(8, torch::kFloat) * static_cast<float>(i + 1);
  };
  // Reference: the fast path.
  TensorDict fast({{"x", torch::zeros({6, 8})}}, {6});
  for (int64_t i = 0; i < 6; i += 2)
    fast[i] = TensorDict({{"x", values(i)}}, {});

  // 1. A non-contiguous buffer (set from a transposed tensor).
  TensorDict noncontig({{"x", torch::zeros({8, 6}).t()}}, {6});
  ASSERT_FALSE(noncontig.get("x").is_contiguous());
  at::Tensor nc = noncontig.get("x");
  for (int64_t i = 0; i < 6; i += 2)
    noncontig[i] = TensorDict({{"x", values(i)}}, {});
  EXPECT_TRUE(noncontig.get("x").is_same(nc));
  EXPECT_TRUE(at::equal(noncontig.get("x"), fast.get("x")));

  // 2. A dtype cast int -> float.
  TensorDict cast({{"x", torch::zeros({6, 8})}}, {6});
  for (int64_t i = 0; i < 6; i += 2) {
    cast[i] = TensorDict({{"x", values(i).to(torch::kInt)}}, {});
  }
  EXPECT_EQ(cast.get("x").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(cast.get("x"), fast.get("x")));

  // 3. A source that requires grad.
  TensorDict grad({{"x", torch::zeros({6, 8})}}, {6});
  for (int64_t i = 0; i < 6; i += 2) {
    grad[i] = TensorDict({{"x", values(i).requires_grad_()}}, {});
  }
  EXPECT_TRUE(at::equal(grad.get("x").detach(), fast.get("x")));

  // 4. A slice index with a batch-[1] value.
  TensorDict sliced({{"x", torch::zeros({6, 8})}}, {6});
  for (int64_t i = 0; i < 6; i += 2) {
    sliced.index_put_({Slice(i, i + 1)},
                      TensorDict({{"x", values(i).unsqueeze(0)}}, {1}));
  }
  EXPECT_TRUE(at::equal(sliced.get("x"), fast.get("x")));

  // 5. A non-contiguous source.
  TensorDict src_nc({{"x", torch::zeros({6, 8})}}, {6});
  for (int64_t i = 0; i < 6; i += 2) {
    at::Tensor v = torch::stack({values(i), values(i)}, 1).select(1, 0);
    ASSERT_FALSE(v.is_contiguous());
    src_nc[i] = TensorDict({{"x", v}}, {});
  }
  EXPECT_TRUE(at::equal(src_nc.get("x"), fast.get("x")));

  // 6. A broadcast value (batch [] into a region of batch [3]).
  TensorDict fast2({{"x", torch::zeros({2, 3, 8})}}, {2, 3});
  TensorDict bcast({{"x", torch::zeros({2, 3, 8})}}, {2, 3});
  for (int64_t j = 0; j < 3; ++j)
    fast2.index_put_({1, j}, TensorDict({{"x", values(5)}}, {}));
  bcast[1] = TensorDict({{"x", values(5)}}, {});
  EXPECT_TRUE(at::equal(bcast.get("x"), fast2.get("x")));
}

TEST(FastAndGeneralPath, RowReadFromAnotherDictIsWrittenByValue) {
  TensorDict src = MakeBuffers();
  src[3] = MakeRolloutRow(5.f);
  TensorDict dst = MakeBuffers();
  dst[0] = src[3];
  for (const auto& k : dst.keys(true, true)) {
    EXPECT_TRUE(at::equal(dst.get(k)[0], src.get(k)[3])) << k;
  }
  src.zero_();
  EXPECT_TRUE(dst.get("obs")[0].eq(5).all().item<bool>());
}

TEST(FastAndGeneralPath, RequiresGradSourceMakesTheBufferPartOfTheGraph) {
  TensorDict td({}, {3});
  at::Tensor w = torch::ones({2}, torch::requires_grad());
  td[1] = TensorDict({{"w", w * 3}}, {});
  EXPECT_TRUE(td.get("w").requires_grad());
  td.get("w").sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(at::equal(w.grad(), torch::full({2}, 3.f)));
  td[2] = TensorDict({{"w", torch::full({2}, 4.f)}}, {});
  EXPECT_TRUE(at::equal(td.get("w").detach(),
                        torch::tensor({{0.f, 0.f}, {3.f, 3.f}, {4.f, 4.f}})));
}

// ---------------------------------------------------------------------------
// Write errors and atomicity
// ---------------------------------------------------------------------------

TEST(IndexedWriteErrors, BadTrailingShapeOnTheLastKeyLeavesTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3})}, {"b", torch::zeros({4, 5})}},
                {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"new1", torch::ones({2})},
                  {"a", torch::ones({3})},
                  {{"nested", "new2"}, torch::ones({7})},
                  {"b", torch::ones({6})}},
                 {});
  ExpectThrowsMsg(
      [&] { td[1] = row; },
      "key b: the value's trailing shape [6] (value shape [6]) does not "
      "match the existing buffer's trailing shape [5] (buffer shape [4, 5])");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.index_put_({Slice(0, 2)}, TensorDict({{"a", torch::ones({2, 3})},
                                                 {"b", torch::ones({2, 4, 1})}},
                                                {2}));
      },
      "key b: the value's trailing shape [4, 1] (value shape [2, 4, 1]) does "
      "not "
      "match the existing buffer's trailing shape [5] (buffer shape [4, 5])");
  ExpectUnchanged(td, s);
}

TEST(IndexedWriteErrors, NestedBadTrailingShapeNamesTheNestedKey) {
  TensorDict td({{{"next", "obs"}, torch::zeros({4, 3})}}, {4});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td[0] = TensorDict({{{"next", "obs"}, torch::ones({2})}}, {});
      },
      "key ('next', 'obs'): the value's trailing shape [2] (value shape [2]) "
      "does not "
      "match the existing buffer's trailing shape [3] (buffer shape [4, 3])");
  ExpectUnchanged(td, s);
}

TEST(IndexedWriteErrors, UncastableDtypeLeavesTheDictUnchanged) {
  TensorDict td(
      {{"a", torch::zeros({4, 3})}, {"i", torch::zeros({4}, torch::kLong)}},
      {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})},
                  {"new", torch::ones({1})},
                  {"i", torch::ones({}) * 1.5}},
                 {});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td[2] = row; },
      "key i: cannot cast the value's dtype torch.float32 to the stored dtype "
      "torch.int64"
      " (a write never casts to a lower kind, such as floating point to "
      "integer)");
  ExpectUnchanged(td, s);
  TensorDict crow({{"a", torch::ones({3}, torch::kComplexFloat)}}, {});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td[2] = crow; },
      "key a: cannot cast the value's dtype torch.complex64 to the stored "
      "dtype torch.float32"
      " (a write never casts to a lower kind, such as floating point to "
      "integer)");
  ExpectUnchanged(td, s);
}

TEST(IndexedWriteErrors, TensorWhereASubDictLivesLeavesTheDictUnchanged) {
  TensorDict td(
      {{"a", torch::zeros({4, 3})}, {{"next", "obs"}, torch::zeros({4, 2})}},
      {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})},
                  {"new", torch::ones({1})},
                  {"next", torch::ones({2})}},
                 {});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td[0] = row; },
      "index_put_: key next: cannot write a tensor where a TensorDict lives");
  ExpectUnchanged(td, s);
}

TEST(IndexedWriteErrors, SubDictWhereATensorLivesLeavesTheDictUnchanged) {
  TensorDict td(
      {{"a", torch::zeros({4, 3})}, {{"next", "obs"}, torch::zeros({4, 2})}},
      {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{{"new", "x"}, torch::ones({1})},
                  {{"next", "obs", "deep"}, torch::ones({2})},
                  {"a", TensorDict({{"z", torch::ones({3})}}, {})}},
                 {});
  ExpectThrowsMsg<c10::TypeError>([&] { td[0] = row; },
                                  "index_put_: key ('next', 'obs'): cannot "
                                  "write a TensorDict where a tensor lives");
  ExpectUnchanged(td, s);
  TensorDict row2({{"new", torch::ones({1})},
                   {"a", TensorDict({{"z", torch::ones({3})}}, {})}},
                  {});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td[0] = row2; },
      "index_put_: key a: cannot write a TensorDict where a tensor lives");
  ExpectUnchanged(td, s);
}

TEST(IndexedWriteErrors, ValueBatchSizeThatDoesNotFitLeavesTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3, 2})}}, {4, 3});
  Snapshot s = TakeSnapshot(td);
  TensorDict wrong({{"new", torch::ones({2})}, {"a", torch::ones({2, 2})}},
                   {2});
  ExpectThrowsMsg(
      [&] { td[0] = wrong; },
      "cannot write a TensorDict with batch_size [2] into an indexed region of "
      "batch shape [3] (TensorDict batch_size [4, 3])");
  ExpectUnchanged(td, s);
  TensorDict too_many({{"a", torch::ones({1, 3, 2})}}, {1, 3});
  ExpectThrowsMsg([&] { td[0] = too_many; },
                  "cannot write a TensorDict with batch_size [1, 3] into an "
                  "indexed region of "
                  "batch shape [3] (TensorDict batch_size [4, 3])");
  ExpectThrowsMsg(
      [&] {
        td.index_put_({Slice(0, 2)},
                      TensorDict({{"a", torch::ones({3, 3, 2})}}, {3, 3}));
      },
      "cannot write a TensorDict with batch_size [3, 3] into an indexed region "
      "of "
      "batch shape [2, 3] (TensorDict batch_size [4, 3])");
  ExpectUnchanged(td, s);

  TensorDict empty_dict({}, {4, 3});
  ExpectThrowsMsg(
      [&] { empty_dict[1] = wrong; },
      "cannot write a TensorDict with batch_size [2] into an indexed region of "
      "batch shape [3] (TensorDict batch_size [4, 3])");
  EXPECT_TRUE(empty_dict.empty());
}

TEST(IndexedWriteErrors, OutOfRangeWriteIndexLeavesTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3})}}, {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})}, {"new", torch::ones({1})}}, {});
  ExpectThrowsMsg<c10::IndexError>([&] { td[4] = row; },
                                   "index 4 is out of bounds for dim 0 with "
                                   "size 4 of TensorDict with batch_size [4]");
  ExpectThrowsMsg<c10::IndexError>([&] { td.index_put_({-5}, row); },
                                   "index -5 is out of bounds for dim 0 with "
                                   "size 4 of TensorDict with batch_size [4]");
  ExpectUnchanged(td, s);
}

// Spec 3: "validate every leaf (shape, dtype castability, device, key
// conflicts) before writing any". A value on a device the buffer cannot be
// written from must fail before the first leaf is written.
TEST(IndexedWriteErrors, LeafOnAnIncompatibleDeviceLeavesTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3})}, {"b", torch::zeros({4, 2})}},
                {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})},
                  {"new", torch::ones({1})},
                  {"b", torch::empty({2}, at::Device(at::kMeta))}},
                 {});
  ExpectThrowsMsg([&] { td[1] = row; },
                  "key b: cannot write a value on device meta into a buffer "
                  "on device cpu");
  ExpectUnchanged(td, s);
}

// A buffer that is a leaf requiring grad cannot be written in place; the
// failure must come before any other leaf of the row is written.
TEST(IndexedWriteErrors,
     InPlaceWriteIntoALeafRequiringGradLeavesTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3})},
                 {"w", torch::zeros({4, 2}, torch::requires_grad())}},
                {4});
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})},
                  {"new", torch::ones({1})},
                  {"w", torch::ones({2})}},
                 {});
  ExpectThrowsMsg([&] { td[1] = row; },
                  "key w: a leaf tensor that requires grad cannot be "
                  "modified in place (use torch::NoGradGuard, or detach it "
                  "first)");
  ExpectUnchanged(td, s);
}

// ---------------------------------------------------------------------------
// The preallocation tutorial of spec section 3, as a test
// ---------------------------------------------------------------------------

TEST(PreallocationTutorial, TheSpecProgramsChecksHold) {
  const int64_t N = 10;
  TensorDict td({}, {N, 3});
  for (int64_t i = 0; i < N; ++i) td[i] = MakeRow();
  EXPECT_TRUE(td.batch_size() == std::vector<int64_t>({N, 3}));
  EXPECT_EQ(td.get("b").sizes(), c10::IntArrayRef({N, 3, 4}));

  TensorDict td2({}, {N, 3});
  TensorDict r = MakeRow();
  td2[0] = r;
  EXPECT_TRUE((td2.index({Slice(1, None)}) == 0).all());
  EXPECT_TRUE((td2[0] == r).all());
  torch::Tensor a = td2.get("a");
  td2[1] = MakeRow();
  EXPECT_TRUE(td2.get("a").is_same(a));
  // rand() is in [0, 1): a zero is possible but vanishingly unlikely; the
  // spec's program asserts the same.
  EXPECT_TRUE((td2.index({Slice(None, 2)}) != 0).all());
  EXPECT_FALSE((td2.index({Slice(None, 3)}) != 0).all());
}

}  // namespace
