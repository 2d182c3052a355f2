// Tests for the structural operations: stack / cat (fresh and into
// preallocated dicts, fused and general paths), unbind / split / chunk, and
// the shape ops over the batch dims, with their views, copies and errors.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <torch/torch.h>
#include "test_util.h"

#include <string>
#include <vector>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using at::indexing::Slice;
using tensordict::Entry;
using tensordict::IndexedTensorDict;
using tensordict::NestedKey;
using tensordict::TensorDict;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// An empty dict with the given batch size.
TensorDict EmptyTd(std::vector<int64_t> batch) {
  return TensorDict(c10::IntArrayRef(batch));
}

// A rollout row (batch []): obs[6] f32, action[2] f32, done[1] bool,
// ("next", "obs")[6] f32, with values that depend on `i`.
TensorDict MakeRow(int64_t i) {
  const double base = static_cast<double>(i) * 100;
  return TensorDict(
      {{"obs", torch::arange(6, torch::kFloat) + base},
       {"action", torch::arange(2, torch::kFloat) - base},
       {"done", torch::full({1}, i % 2 == 1, torch::kBool)},
       {{"next", "obs"}, torch::arange(6, torch::kFloat) + base + 0.5}},
      {});
}

std::vector<TensorDict> MakeRows(int64_t n) {
  std::vector<TensorDict> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(MakeRow(i));
  return rows;
}

// Per-key torch::stack / torch::cat of the inputs' leaves (the reference).
at::Tensor StackKey(const std::vector<TensorDict>& tds, const NestedKey& key,
                    int64_t dim = 0) {
  std::vector<at::Tensor> ts;
  for (const auto& td : tds) ts.push_back(td.get(key));
  return torch::stack(ts, dim);
}

at::Tensor CatKey(const std::vector<TensorDict>& tds, const NestedKey& key,
                  int64_t dim = 0) {
  std::vector<at::Tensor> ts;
  for (const auto& td : tds) ts.push_back(td.get(key));
  return torch::cat(ts, dim);
}

void ExpectLeavesEqual(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(true, true), b.keys(true, true));
  for (const auto& k : a.keys(true, true)) {
    EXPECT_EQ(a.get(k).scalar_type(), b.get(k).scalar_type()) << k;
    EXPECT_TRUE(at::equal(a.get(k), b.get(k))) << k;
  }
}

// A batch-[4, 6] dict with a sub-dict that has an extra batch dim:
// a[4, 6, 3], next: batch [4, 6, 2] with obs[4, 6, 2, 5].
TensorDict MakeDict2D() {
  TensorDict next(
      {{"obs", torch::arange(240, torch::kFloat).reshape({4, 6, 2, 5})}},
      {4, 6, 2});
  return TensorDict({{"a", torch::arange(72, torch::kFloat).reshape({4, 6, 3})},
                     {"next", next}},
                    {4, 6});
}

// ===========================================================================
// stack
// ===========================================================================

TEST(StructuralStack, StacksRowsIntoABatchPerKeyIncludingNestedDicts) {
  auto rows = MakeRows(5);
  TensorDict td = tensordict::stack(rows);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>({5}));
  EXPECT_EQ(td.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({5}));
  EXPECT_EQ(td.keys(true), rows[0].keys(true));
  for (const auto& k : rows[0].keys(true, true)) {
    EXPECT_TRUE(at::equal(td.get(k), StackKey(rows, k))) << k;
  }
  EXPECT_EQ(td.get("done").scalar_type(), at::kBool);
}

TEST(StructuralStack, StacksAlongAnInnerDimAndAcceptsNegativeDims) {
  std::vector<TensorDict> tds;
  for (int64_t i = 0; i < 3; ++i) {
    tds.push_back(TensorDict(
        {{"x", torch::rand({2, 4})}, {{"n", "y"}, torch::rand({2, 7, 3})}},
        {2}));
  }
  TensorDict a = tensordict::stack(tds, 1);
  TensorDict b = tensordict::stack(tds, -1);
  EXPECT_EQ(a.batch_size().vec(), std::vector<int64_t>({2, 3}));
  EXPECT_EQ(b.batch_size().vec(), std::vector<int64_t>({2, 3}));
  EXPECT_TRUE(at::equal(a.get("x"), StackKey(tds, "x", 1)));
  EXPECT_TRUE(at::equal(a.get({"n", "y"}), StackKey(tds, {"n", "y"}, 1)));
  ExpectLeavesEqual(a, b);
}

TEST(StructuralStack, StackedSubDictsKeepTheirExtraBatchDims) {
  std::vector<TensorDict> tds;
  for (int64_t i = 0; i < 2; ++i) {
    TensorDict sub({{"o", torch::rand({3, 4, 5})}}, {3, 4});
    tds.push_back(TensorDict({{"sub", sub}}, {3}));
  }
  TensorDict td = tensordict::stack(tds, 1);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>({3, 2}));
  EXPECT_EQ(td.get_tensordict("sub").batch_size().vec(),
            std::vector<int64_t>({3, 2, 4}));
  EXPECT_TRUE(at::equal(td.get({"sub", "o"}), StackKey(tds, {"sub", "o"}, 1)));
}

TEST(StructuralStack, ResultDeviceIsTheInputsCommonDeviceElseNone) {
  std::vector<TensorDict> with_device = {
      TensorDict({{"x", torch::rand({2})}}, {}, at::kCPU),
      TensorDict({{"x", torch::rand({2})}}, {}, at::kCPU)};
  EXPECT_EQ(tensordict::stack(with_device).device(),
            c10::optional<at::Device>(at::kCPU));
  std::vector<TensorDict> mixed = {
      TensorDict({{"x", torch::rand({2})}}, {}, at::kCPU),
      TensorDict({{"x", torch::rand({2})}}, {})};
  EXPECT_FALSE(tensordict::stack(mixed).device().has_value());
}

TEST(StructuralStack, MatchesInputsByKeyWhenTheirInsertionOrderDiffers) {
  auto rows = MakeRows(3);
  TensorDict shuffled({{{"next", "obs"}, torch::rand({6})},
                       {"done", torch::ones({1}, torch::kBool)},
                       {"action", torch::rand({2})},
                       {"obs", torch::rand({6})}},
                      {});
  rows[1] = shuffled;
  TensorDict td = tensordict::stack(rows);
  EXPECT_EQ(td.keys(true), rows[0].keys(true));
  for (const auto& k : rows[0].keys(true, true)) {
    EXPECT_TRUE(at::equal(td.get(k), StackKey(rows, k))) << k;
  }
}

TEST(StructuralStack, FusedAndGeneralPathsGiveIdenticalResults) {
  auto rows = MakeRows(6);
  TensorDict fused = tensordict::stack(rows);

  // A non-contiguous input leaf.
  auto noncontig = MakeRows(6);
  at::Tensor strided = torch::empty({12}).slice(0, 0, 12, 2);
  strided.copy_(torch::arange(6, torch::kFloat) + 200);
  noncontig[2].set("obs", strided);
  ASSERT_FALSE(noncontig[2].get("obs").is_contiguous());
  ExpectLeavesEqual(tensordict::stack(noncontig), fused);

  // A dtype mismatch: cast into the first input's dtype.
  auto mixed = MakeRows(6);
  mixed[3].set("action", mixed[3].get("action").to(torch::kDouble));
  ExpectLeavesEqual(tensordict::stack(mixed), fused);

  // Odd leaves under two keys, the later key's at the earlier row: the lean
  // first pass checks key by key, and hands over at the earliest odd row.
  auto two = MakeRows(6);
  at::Tensor strided4 = torch::empty({12}).slice(0, 0, 12, 2);
  strided4.copy_(two[4].get("obs"));
  two[4].set("obs", strided4);
  two[2].set("action", two[2].get("action").to(torch::kDouble));
  ExpectLeavesEqual(tensordict::stack(two), fused);
  TensorDict two_out = tensordict::stack(MakeRows(6));
  tensordict::stack_out(two_out, two);
  ExpectLeavesEqual(two_out, fused);

  // requires_grad.
  auto grad = MakeRows(6);
  grad[1].set("obs", grad[1].get("obs").clone().requires_grad_());
  TensorDict g = tensordict::stack(grad);
  EXPECT_TRUE(g.get("obs").requires_grad());
  ExpectLeavesEqual(g.detach(), fused);

  // An inner dim (general path) against per-key torch::stack.
  std::vector<TensorDict> tds;
  for (int64_t i = 0; i < 3; ++i) {
    tds.push_back(TensorDict({{"x", torch::rand({2, 3})}}, {2}));
  }
  EXPECT_TRUE(
      at::equal(tensordict::stack(tds, 1).get("x"), StackKey(tds, "x", 1)));
}

TEST(StructuralStack, GradientsFlowThroughStack) {
  auto rows = MakeRows(3);
  at::Tensor leaf = torch::ones({6}, torch::requires_grad());
  rows[1].set("obs", leaf);
  TensorDict td = tensordict::stack(rows);
  (td.get("obs") * 2).sum().backward();
  ASSERT_TRUE(leaf.grad().defined());
  EXPECT_TRUE(at::equal(leaf.grad(), torch::full({6}, 2.0)));
}

TEST(StructuralStack, StackOfEmptyDictsKeepsTheBatchSize) {
  std::vector<TensorDict> tds = {EmptyTd({2}), EmptyTd({2})};
  TensorDict td = tensordict::stack(tds, 0);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>({2, 2}));
  EXPECT_TRUE(td.empty());
}

TEST(StructuralStack, ErrorsForAnEmptyListAndOutOfRangeDims) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)tensordict::stack({}); },
      "stack: expected a non-empty list of TensorDicts");
  auto rows =
      std::vector<TensorDict>{TensorDict({{"x", torch::rand({2})}}, {2})};
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tensordict::stack(rows, 2); },
      "stack: dim 2 is out of range for TensorDicts with batch_size [2] "
      "(expected a dim in [-2, 1])");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tensordict::stack(rows, -3); },
      "stack: dim -3 is out of range for TensorDicts with batch_size [2] "
      "(expected a dim in [-2, 1])");
}

TEST(StructuralStack, KeyErrorListsWhichKeysAreMissingFromWhichInput) {
  auto rows = MakeRows(3);
  rows[2] = TensorDict({{"obs", torch::rand({6})},
                        {"action", torch::rand({2})},
                        {"done", torch::ones({1}, torch::kBool)},
                        {"foo", torch::rand({6})}},
                       {});
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(rows); },
      "stack: TensorDicts have different keys: missing from input 0: "
      "[foo]; missing from input 2: [('next', 'obs')]");
  rows[2] = MakeRow(2);
  rows[2].erase({"next", "obs"});
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(rows); },
      "stack: TensorDicts have different keys: missing from input 2: "
      "[('next', 'obs')]");
  rows[2] = MakeRow(2);
  rows[2].set("extra", torch::rand({1}));
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(rows); },
      "stack: TensorDicts have different keys: missing from input 0: "
      "[extra]");
}

TEST(StructuralStack, ErrorsForLeafVsDictConflictsAndSubDictBatchSizes) {
  std::vector<TensorDict> tds = {TensorDict({{"x", EmptyTd({2})}}, {2}),
                                 TensorDict({{"x", torch::rand({2})}}, {2})};
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::stack(tds); },
      "stack: key x is a TensorDict in input 0 but a tensor in input 1");
  tds = {TensorDict({{"x", EmptyTd({2, 3})}}, {2}),
         TensorDict({{"x", EmptyTd({2, 4})}}, {2})};
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(tds); },
      "stack: key x: input 1 has batch_size [2, 4], expected [2, 3] (the "
      "batch_size of input 0)");
}

TEST(StructuralStack, ErrorsForBatchSizeAndLeafShapeMismatches) {
  std::vector<TensorDict> tds = {TensorDict({{"x", torch::rand({2, 3})}}, {2}),
                                 TensorDict({{"x", torch::rand({3, 3})}}, {3})};
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(tds); },
      "stack: input 1 has batch_size [3], expected [2] (the batch_size of "
      "input 0)");
  auto rows = MakeRows(3);
  rows[1].set({"next", "obs"}, torch::rand({5}));
  ExpectThrowsMsg(
      [&] { (void)tensordict::stack(rows); },
      "stack: key ('next', 'obs'): input 1 has shape [5], expected [6] (the "
      "shape of input 0)");
}

// ===========================================================================
// stack_out
// ===========================================================================

TEST(StructuralStackOut, WritesIntoExistingLeavesInPlaceKeepingIdentity) {
  auto rows = MakeRows(4);
  TensorDict out = tensordict::stack(MakeRows(4)).zero_();
  Snapshot before = TakeSnapshot(out);
  const TensorDict& ret = tensordict::stack_out(out, rows);
  EXPECT_TRUE(ret.is_same(out));
  size_t leaf = 0;
  for (const auto& k : out.keys(true, true)) {
    EXPECT_TRUE(out.get(k).is_same(before.leaves[leaf])) << k;
    EXPECT_EQ(out.get(k).data_ptr(), before.leaves[leaf].data_ptr()) << k;
    EXPECT_EQ(out.get(k)._version(), before.versions[leaf] + 1) << k;
    EXPECT_TRUE(at::equal(out.get(k), StackKey(rows, k))) << k;
    ++leaf;
  }
  EXPECT_EQ(out.keys(true), before.keys);
}

TEST(StructuralStackOut, WritesIntoASliceOfARolloutBuffer) {
  // buffer batch [4 envs, 3 steps]; write step 1 from 4 rows: out's rows are
  // strided (each row contiguous), which the byte copy handles.
  TensorDict buffer({}, {4, 3});
  buffer.index_put_({0, 0}, MakeRow(0));
  buffer.zero_();
  TensorDict step = buffer.index({Slice(), 1});
  auto rows = MakeRows(4);
  tensordict::stack_out(step, rows);
  for (const auto& k : rows[0].keys(true, true)) {
    at::Tensor leaf = buffer.get(k);
    EXPECT_TRUE(at::equal(leaf.select(1, 1), StackKey(rows, k))) << k;
    EXPECT_FALSE(leaf.select(1, 0).any().item<bool>()) << k;
    EXPECT_FALSE(leaf.select(1, 2).any().item<bool>()) << k;
  }
  // And a transposed (non-row-contiguous) destination takes the general path.
  TensorDict buf2({{"x", torch::zeros({3, 4}).t()}}, {4});
  std::vector<TensorDict> xs = {TensorDict({{"x", torch::rand({3})}}, {}),
                                TensorDict({{"x", torch::rand({3})}}, {}),
                                TensorDict({{"x", torch::rand({3})}}, {}),
                                TensorDict({{"x", torch::rand({3})}}, {})};
  at::Tensor x = buf2.get("x");
  tensordict::stack_out(buf2, xs);
  EXPECT_TRUE(buf2.get("x").is_same(x));
  EXPECT_TRUE(at::equal(x, StackKey(xs, "x")));
}

TEST(StructuralStackOut, AllocatesMissingKeysLazily) {
  auto rows = MakeRows(3);
  TensorDict out({}, {3});
  tensordict::stack_out(out, rows);
  EXPECT_EQ(out.keys(true), rows[0].keys(true));
  EXPECT_EQ(out.get("done").scalar_type(), at::kBool);
  EXPECT_EQ(out.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({3}));
  for (const auto& k : rows[0].keys(true, true)) {
    EXPECT_TRUE(at::equal(out.get(k), StackKey(rows, k))) << k;
  }
  // A second write reuses the buffers.
  at::Tensor obs = out.get("obs");
  auto rows2 = std::vector<TensorDict>{MakeRow(7), MakeRow(8), MakeRow(9)};
  tensordict::stack_out(out, rows2);
  EXPECT_TRUE(out.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, StackKey(rows2, "obs")));
}

TEST(StructuralStackOut, IndexedOutAllocatesMissingKeysInTheParentBuffer) {
  // A [T=5, E=3] rollout buffer with no keys yet: stack_out into steps 1..2
  // allocates full [5, 3] buffers in the buffer itself, zero elsewhere.
  TensorDict buffer({}, {5, 3});
  std::vector<TensorDict> steps = {tensordict::stack(MakeRows(3)),
                                   tensordict::stack(MakeRows(3))};
  const IndexedTensorDict ret =
      tensordict::stack_out(buffer[Slice(1, 3)], steps);
  EXPECT_TRUE(ret.parent().is_same(buffer));
  EXPECT_EQ(buffer.keys(true), steps[0].keys(true));
  EXPECT_EQ(buffer.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({5, 3}));
  for (const auto& k : steps[0].keys(true, true)) {
    at::Tensor leaf = buffer.get(k);
    EXPECT_EQ(leaf.size(0), 5) << k;
    EXPECT_TRUE(at::equal(leaf.slice(0, 1, 3), StackKey(steps, k))) << k;
    EXPECT_FALSE(leaf.select(0, 0).any().item<bool>()) << k;
    EXPECT_FALSE(leaf.slice(0, 3).any().item<bool>()) << k;
  }
  // Later writes go into the same buffers, in place.
  at::Tensor obs = buffer.get("obs");
  const int64_t version = obs._version();
  tensordict::stack_out(buffer[Slice(3, 5)], steps);
  EXPECT_TRUE(buffer.get("obs").is_same(obs));
  EXPECT_GT(obs._version(), version);
  EXPECT_TRUE(at::equal(obs.slice(0, 3, 5), StackKey(steps, "obs")));
  // cat_out into a slice, and an advanced index (a copy) still writes through.
  tensordict::cat_out(buffer[Slice(0, 2)],
                      {steps[0].unsqueeze(0), steps[1].unsqueeze(0)}, 0);
  EXPECT_TRUE(at::equal(obs.slice(0, 0, 2), StackKey(steps, "obs")));
  const at::Tensor rows_4_0 = torch::tensor({4, 0}, torch::kLong);
  EXPECT_FALSE(buffer[rows_4_0].is_view());
  EXPECT_TRUE(buffer[Slice(0, 2)].is_view());
  tensordict::stack_out(buffer[rows_4_0],
                        {buffer[1].value().clone(), buffer[2].value().clone()});
  EXPECT_TRUE(at::equal(obs[4], obs[1]));
  EXPECT_TRUE(at::equal(obs[0], obs[2]));
}

TEST(StructuralStackOut,
     IndexedOutErrorsNameStackOutAndLeaveTheBufferUnchanged) {
  TensorDict buffer({}, {4, 3});
  buffer.index_put_({0}, tensordict::stack(MakeRows(3)));
  Snapshot before = TakeSnapshot(buffer);
  ExpectThrowsMsg(
      [&] {
        tensordict::stack_out(
            buffer[Slice(0, 2)],
            {tensordict::stack(MakeRows(3)), tensordict::stack(MakeRows(2))});
      },
      "stack_out: input 1 has batch_size [2], expected [3] (the batch_size of "
      "input 0)");
  ExpectThrowsMsg(
      [&] {
        tensordict::stack_out(
            buffer[Slice(0, 3)],
            {tensordict::stack(MakeRows(3)), tensordict::stack(MakeRows(3))});
      },
      "stack_out: out has batch_size [3, 3], expected [2, 3] (the stacked "
      "batch_size)");
  ExpectUnchanged(buffer, before);
}

TEST(StructuralStackOut, AllocatesOnlyTheMissingKeysOfAPartialOut) {
  auto rows = MakeRows(2);
  TensorDict out({{"obs", torch::zeros({2, 6})}}, {2}, at::kCPU);
  at::Tensor obs = out.get("obs");
  tensordict::stack_out(out, rows);
  EXPECT_TRUE(out.get("obs").is_same(obs));
  EXPECT_EQ(out.keys(true),
            (std::vector<NestedKey>{
                "obs", "action", "done", "next", {"next", "obs"}}));
  EXPECT_EQ(out.get_tensordict("next").device(),
            c10::optional<at::Device>(at::kCPU));
  ExpectLeavesEqual(out, tensordict::stack(rows));
}

TEST(StructuralStackOut, CastsIntoOutsDtypeOnTheGeneralPath) {
  auto rows = MakeRows(3);
  TensorDict out({{"obs", torch::zeros({3, 6}, torch::kDouble)}}, {3});
  tensordict::stack_out(out, rows);
  EXPECT_EQ(out.get("obs").scalar_type(), at::kDouble);
  EXPECT_TRUE(
      at::equal(out.get("obs"), StackKey(rows, "obs").to(torch::kDouble)));
}

TEST(StructuralStackOut, GeneralAndFusedPathsWriteTheSameValues) {
  auto rows = MakeRows(5);
  TensorDict fused = tensordict::stack(MakeRows(5)).zero_();
  tensordict::stack_out(fused, rows);
  // Non-contiguous source.
  auto rows2 = MakeRows(5);
  at::Tensor strided = torch::empty({12}).slice(0, 0, 12, 2);
  strided.copy_(rows2[4].get("obs"));
  rows2[4].set("obs", strided);
  TensorDict general = tensordict::stack(MakeRows(5)).zero_();
  tensordict::stack_out(general, rows2);
  ExpectLeavesEqual(general, fused);
  // requires_grad source: the out leaf now records the copy.
  auto rows3 = MakeRows(5);
  rows3[0].set("action", rows3[0].get("action").clone().requires_grad_());
  TensorDict withgrad = tensordict::stack(MakeRows(5)).zero_();
  tensordict::stack_out(withgrad, rows3);
  EXPECT_TRUE(withgrad.get("action").requires_grad());
  ExpectLeavesEqual(withgrad.detach(), fused);
}

TEST(StructuralStackOut, ErrorsForTheWrongOutBatchSize) {
  auto rows = MakeRows(3);
  TensorDict out = EmptyTd({4});
  ExpectThrowsMsg(
      [&] { tensordict::stack_out(out, rows); },
      "stack_out: out has batch_size [4], expected [3] (the stacked "
      "batch_size)");
}

TEST(StructuralStackOut, FailedWritesLeaveOutUnchanged) {
  auto rows = MakeRows(3);
  // A bad trailing shape for one key; other keys are missing and would be
  // allocated.
  TensorDict out(
      {{"action", torch::zeros({3, 2})}, {"obs", torch::zeros({3, 5})}}, {3});
  Snapshot before = TakeSnapshot(out);
  ExpectThrowsMsg(
      [&] { tensordict::stack_out(out, rows); },
      "stack_out: key obs: out's leaf has shape [3, 5], expected [3, 6] (the "
      "stacked shape)");
  ExpectUnchanged(out, before);

  TensorDict conflict(
      {{"obs", torch::zeros({3, 6})}, {"next", torch::zeros({3, 6})}}, {3});
  before = TakeSnapshot(conflict);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { tensordict::stack_out(conflict, rows); },
      "stack_out: key next: cannot write a TensorDict where a tensor lives");
  ExpectUnchanged(conflict, before);

  // The same conflict when out is a region of a larger dict.
  TensorDict big(
      {{"obs", torch::zeros({5, 6})}, {"next", torch::zeros({5, 6})}}, {5});
  before = TakeSnapshot(big);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { tensordict::stack_out(big[Slice(1, 4)], rows); },
      "stack_out: key next: cannot write a TensorDict where a tensor lives");
  ExpectUnchanged(big, before);

  TensorDict conflict2({{"obs", EmptyTd({3})}}, {3});
  before = TakeSnapshot(conflict2);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { tensordict::stack_out(conflict2, rows); },
      "stack_out: key obs: cannot write a tensor where a TensorDict lives");
  ExpectUnchanged(conflict2, before);

  TensorDict badcast({{"obs", torch::zeros({3, 6}, torch::kLong)}}, {3});
  before = TakeSnapshot(badcast);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { tensordict::stack_out(badcast, rows); },
      "stack_out: key obs: cannot cast input 0's dtype torch.float32 to the "
      "destination dtype torch.int64");
  ExpectUnchanged(badcast, before);

  // A bad input: nothing is written either.
  TensorDict good = tensordict::stack(MakeRows(3)).zero_();
  before = TakeSnapshot(good);
  rows[2].set("action", torch::rand({3}));
  ExpectThrowsMsg(
      [&] { tensordict::stack_out(good, rows); },
      "stack_out: key action: input 2 has shape [3], expected [2] (the shape "
      "of input 0)");
  ExpectUnchanged(good, before);
}

TEST(StructuralStackOut, ErrorsForAMismatchedOutSubDictBatchSize) {
  std::vector<TensorDict> tds = {
      TensorDict({{"s", TensorDict({{"o", torch::rand({2, 3})}}, {2})}}, {}),
      TensorDict({{"s", TensorDict({{"o", torch::rand({2, 3})}}, {2})}}, {})};
  TensorDict out({{"s", EmptyTd({2, 3})}}, {2});
  Snapshot before = TakeSnapshot(out);
  ExpectThrowsMsg(
      [&] { tensordict::stack_out(out, tds); },
      "stack_out: key s: out's sub-TensorDict has batch_size [2, 3], "
      "expected [2, 2]");
  ExpectUnchanged(out, before);
}

TEST(StructuralStackOut, StackOutAlongAnInnerDim) {
  std::vector<TensorDict> tds;
  for (int64_t i = 0; i < 3; ++i) {
    tds.push_back(TensorDict({{"x", torch::rand({2, 4})}}, {2}));
  }
  TensorDict out({{"x", torch::zeros({2, 3, 4})}}, {2, 3});
  at::Tensor x = out.get("x");
  tensordict::stack_out(out, tds, 1);
  EXPECT_TRUE(out.get("x").is_same(x));
  EXPECT_TRUE(at::equal(x, StackKey(tds, "x", 1)));
}

// ===========================================================================
// cat / cat_out
// ===========================================================================

TEST(StructuralCat, ConcatenatesAlongTheFirstBatchDim) {
  std::vector<TensorDict> tds = {tensordict::stack(MakeRows(2)),
                                 tensordict::stack(MakeRows(3))};
  TensorDict td = tensordict::cat(tds);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>({5}));
  EXPECT_EQ(td.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({5}));
  for (const auto& k : tds[0].keys(true, true)) {
    EXPECT_TRUE(at::equal(td.get(k), CatKey(tds, k))) << k;
  }
}

TEST(StructuralCat, ConcatenatesAlongAnInnerDim) {
  std::vector<TensorDict> tds = {
      TensorDict({{"x", torch::rand({2, 3, 5})}}, {2, 3}),
      TensorDict({{"x", torch::rand({2, 1, 5})}}, {2, 1})};
  TensorDict td = tensordict::cat(tds, -1);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>({2, 4}));
  EXPECT_TRUE(at::equal(td.get("x"), CatKey(tds, "x", 1)));
}

TEST(StructuralCat, FusedAndGeneralPathsGiveIdenticalResults) {
  std::vector<TensorDict> tds = {tensordict::stack(MakeRows(2)),
                                 tensordict::stack(MakeRows(3))};
  TensorDict fused = tensordict::cat(tds);
  std::vector<TensorDict> tds2 = {tensordict::stack(MakeRows(2)),
                                  tensordict::stack(MakeRows(3))};
  tds2[1].set("obs", tds2[1].get("obs").t().contiguous().t());  // same values
  tds2[1].set("action", tds2[1].get("action").to(torch::kDouble));
  ASSERT_FALSE(tds2[1].get("obs").is_contiguous());
  ExpectLeavesEqual(tensordict::cat(tds2), fused);
}

TEST(StructuralCat, CatOutWritesInPlace) {
  std::vector<TensorDict> tds = {tensordict::stack(MakeRows(2)),
                                 tensordict::stack(MakeRows(3))};
  TensorDict out = tensordict::cat(tds).zero_();
  at::Tensor obs = out.get({"next", "obs"});
  const auto version = obs._version();
  tensordict::cat_out(out, tds);
  EXPECT_TRUE(out.get({"next", "obs"}).is_same(obs));
  EXPECT_GT(obs._version(), version);
  ExpectLeavesEqual(out, tensordict::cat(tds));
  TensorDict fresh = EmptyTd({5});
  tensordict::cat_out(fresh, tds);
  ExpectLeavesEqual(fresh, out);
}

TEST(StructuralCat, ErrorsNameTheBatchSizesAndShapes) {
  ExpectThrowsMsg<c10::IndexError>(
      [] {
        (void)tensordict::cat({TensorDict({{"x", torch::rand({3})}}, {})});
      },
      "cat: cannot concatenate TensorDicts with no batch dimensions "
      "(batch_size [])");
  std::vector<TensorDict> tds = {
      TensorDict({{"x", torch::rand({2, 3})}}, {2, 3}),
      TensorDict({{"x", torch::rand({3, 3})}}, {3, 3})};
  ExpectThrowsMsg(
      [&] { (void)tensordict::cat(tds, 1); },
      "cat: input 1 has batch_size [3, 3], which does not match input 0's "
      "batch_size [2, 3] outside dim 1");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tensordict::cat(tds, 2); },
      "cat: dim 2 is out of range for TensorDicts with batch_size [2, 3] "
      "(expected a dim in [-2, 1])");
  tds = {TensorDict({{"x", torch::rand({2, 4})}}, {2}),
         TensorDict({{"x", torch::rand({3, 5})}}, {3})};
  ExpectThrowsMsg(
      [&] { (void)tensordict::cat(tds); },
      "cat: key x: input 1 has shape [3, 5], which does not match input 0's "
      "shape [2, 4] outside dim 0");
  TensorDict out = EmptyTd({4});
  ExpectThrowsMsg(
      [&] {
        tensordict::cat_out(out, {TensorDict({{"x", torch::rand({2})}}, {2}),
                                  TensorDict({{"x", torch::rand({1})}}, {1})});
      },
      "cat_out: out has batch_size [4], expected [3] (the concatenated "
      "batch_size)");
}

// ===========================================================================
// unbind / split / chunk
// ===========================================================================

TEST(StructuralSplit, UnbindGivesViewsWithTheDimRemoved) {
  TensorDict td = MakeDict2D();
  auto parts = td.unbind(0);
  ASSERT_EQ(parts.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    const auto& p = parts[static_cast<size_t>(i)];
    EXPECT_EQ(p.batch_size().vec(), std::vector<int64_t>({6}));
    EXPECT_EQ(p.get_tensordict("next").batch_size().vec(),
              std::vector<int64_t>({6, 2}));
    EXPECT_TRUE(at::equal(p.get("a"), td.get("a").select(0, i)));
    EXPECT_TRUE(SharesStorage(p.get("a"), td.get("a")));
    EXPECT_TRUE(at::equal(p.get({"next", "obs"}),
                          td.get({"next", "obs"}).select(0, i)));
  }
  auto cols = td.unbind(-1);
  ASSERT_EQ(cols.size(), 6u);
  EXPECT_EQ(cols[2].batch_size().vec(), std::vector<int64_t>({4}));
  EXPECT_EQ(cols[2].get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({4, 2}));
  EXPECT_TRUE(at::equal(cols[2].get("a"), td.get("a").select(1, 2)));
  // Writes through a view land in the parent.
  parts[1].get("a").fill_(-1);
  EXPECT_EQ(td.get("a")[1][0][0].item<float>(), -1);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.unbind(2); },
      "unbind: dim 2 is out of range for a TensorDict with batch_size [4, 6] "
      "(expected a dim in [-2, 1])");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)TensorDict().unbind(0); },
      "unbind: dim 0 is out of range for a TensorDict with batch_size [] (no "
      "batch dimensions)");
}

TEST(StructuralSplit, SplitBySizeAndBySizesGivesViews) {
  TensorDict td = MakeDict2D();
  auto parts = td.split(4, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].batch_size().vec(), std::vector<int64_t>({4, 4}));
  EXPECT_EQ(parts[1].batch_size().vec(), std::vector<int64_t>({4, 2}));
  EXPECT_EQ(parts[1].get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({4, 2, 2}));
  EXPECT_TRUE(at::equal(parts[1].get("a"), td.get("a").narrow(1, 4, 2)));
  EXPECT_TRUE(SharesStorage(parts[1].get("a"), td.get("a")));

  auto sized = td.split(std::vector<int64_t>{1, 0, 3}, 0);
  ASSERT_EQ(sized.size(), 3u);
  EXPECT_EQ(sized[0].batch_size().vec(), std::vector<int64_t>({1, 6}));
  EXPECT_EQ(sized[1].batch_size().vec(), std::vector<int64_t>({0, 6}));
  EXPECT_EQ(sized[2].batch_size().vec(), std::vector<int64_t>({3, 6}));
  EXPECT_TRUE(at::equal(sized[2].get({"next", "obs"}),
                        td.get({"next", "obs"}).narrow(0, 1, 3)));

  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.split(0, 0); },
      "split: split_size must be positive, got 0 (TensorDict batch_size [4, "
      "6])");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)td.split(std::vector<int64_t>{2, 3}, 0);
      },
      "split: split_sizes [2, 3] sum to 5, but batch dim 0 has size 4 "
      "(TensorDict batch_size [4, 6])");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)td.split(std::vector<int64_t>{5, -1}, 0);
      },
      "split: split_sizes [5, -1] has a negative entry (TensorDict batch_size "
      "[4, 6])");
}

TEST(StructuralSplit, ChunkMatchesTensorChunk) {
  TensorDict td({{"x", torch::arange(5)}}, {5});
  auto chunks = td.chunk(3);
  auto ref = td.get("x").chunk(3);
  ASSERT_EQ(chunks.size(), ref.size());
  for (size_t j = 0; j < ref.size(); ++j) {
    EXPECT_TRUE(at::equal(chunks[j].get("x"), ref[j]));
    EXPECT_EQ(chunks[j].batch_size().vec(), ref[j].sizes().vec());
  }
  EXPECT_EQ(TensorDict({{"x", torch::rand({0})}}, {0}).chunk(2).size(), 2u);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.chunk(0); },
      "chunk: chunks must be positive, got 0 (TensorDict batch_size [5])");
}

// ===========================================================================
// Shape ops
// ===========================================================================

TEST(StructuralShape, ReshapeAndViewMoveFeatureDimsAlong) {
  TensorDict td = MakeDict2D();
  TensorDict r = td.reshape({24});
  EXPECT_EQ(r.batch_size().vec(), std::vector<int64_t>({24}));
  EXPECT_EQ(r.get("a").sizes().vec(), std::vector<int64_t>({24, 3}));
  EXPECT_EQ(r.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({24, 2}));
  EXPECT_EQ(r.get({"next", "obs"}).sizes().vec(),
            std::vector<int64_t>({24, 2, 5}));
  EXPECT_TRUE(SharesStorage(r.get("a"), td.get("a")));
  TensorDict v = td.view({-1, 3});
  EXPECT_EQ(v.batch_size().vec(), std::vector<int64_t>({8, 3}));
  EXPECT_EQ(v.get("a").sizes().vec(), std::vector<int64_t>({8, 3, 3}));
  EXPECT_EQ(v.get("a").data_ptr(), td.get("a").data_ptr());
  EXPECT_TRUE(at::equal(v.get("a"), td.get("a").reshape({8, 3, 3})));

  ExpectThrowsMsg(
      [&] {
        (void)td.reshape({5, 5});
      },
      "reshape: shape [5, 5] is invalid for a TensorDict with batch_size [4, "
      "6] (24 elements)");
  ExpectThrowsMsg(
      [&] {
        (void)td.view({-1, 5});
      },
      "view: shape [-1, 5] is invalid for a TensorDict with batch_size [4, 6] "
      "(24 elements)");
  ExpectThrowsMsg(
      [&] {
        (void)td.reshape({-1, -1});
      },
      "reshape: only one dimension can be inferred in [-1, -1]");
}

TEST(StructuralShape, ViewThrowsWhereReshapeCopies) {
  TensorDict td = MakeDict2D().transpose(0, 1);  // batch [6, 4], strided
  TensorDict r = td.reshape({24});
  EXPECT_FALSE(SharesStorage(r.get("a"), td.get("a")));
  EXPECT_TRUE(at::equal(r.get("a"), td.get("a").reshape({24, 3})));
  ExpectThrowsMsg(
      [&] { (void)td.view({24}); },
      "view: key a: cannot view batch_size [6, 4] as [24] (leaf shape [6, 4, "
      "3], strides [3, 18, 1]); use reshape()");
}

TEST(StructuralShape, UnsqueezeAndSqueezeWorkOnBatchDimsOnly) {
  TensorDict td({{"x", torch::rand({3, 1})}, {"y", torch::rand({3, 1, 1})}},
                {3});
  TensorDict u = td.unsqueeze(0);
  EXPECT_EQ(u.batch_size().vec(), std::vector<int64_t>({1, 3}));
  EXPECT_EQ(u.get("x").sizes().vec(), std::vector<int64_t>({1, 3, 1}));
  TensorDict u2 = td.unsqueeze(-1);
  EXPECT_EQ(u2.batch_size().vec(), std::vector<int64_t>({3, 1}));
  EXPECT_EQ(u2.get("y").sizes().vec(), std::vector<int64_t>({3, 1, 1, 1}));
  EXPECT_TRUE(SharesStorage(u2.get("x"), td.get("x")));

  TensorDict s = u.unsqueeze(2).squeeze();  // batch [1, 3, 1] -> [3]
  EXPECT_EQ(s.batch_size().vec(), std::vector<int64_t>({3}));
  EXPECT_EQ(s.get("x").sizes().vec(),
            std::vector<int64_t>({3, 1}));  // feature kept
  EXPECT_EQ(s.get("y").sizes().vec(), std::vector<int64_t>({3, 1, 1}));
  TensorDict s0 = u.squeeze(0);
  EXPECT_EQ(s0.batch_size().vec(), std::vector<int64_t>({3}));
  TensorDict s1 = u.squeeze(1);  // size 3: unchanged
  EXPECT_EQ(s1.batch_size().vec(), std::vector<int64_t>({1, 3}));
  EXPECT_EQ(s1.get("x").sizes().vec(), std::vector<int64_t>({1, 3, 1}));
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.unsqueeze(2); },
      "unsqueeze: dim 2 is out of range for a TensorDict with batch_size [3] "
      "(expected a dim in [-2, 1])");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.squeeze(1); },
      "squeeze: dim 1 is out of range for a TensorDict with batch_size [3] "
      "(expected a dim in [-1, 0])");
}

TEST(StructuralShape, PermuteAndTransposeMoveBatchDims) {
  TensorDict td = MakeDict2D();
  TensorDict p = td.permute({1, 0});
  EXPECT_EQ(p.batch_size().vec(), std::vector<int64_t>({6, 4}));
  EXPECT_EQ(p.get("a").sizes().vec(), std::vector<int64_t>({6, 4, 3}));
  EXPECT_EQ(p.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({6, 4, 2}));
  EXPECT_TRUE(at::equal(p.get({"next", "obs"}),
                        td.get({"next", "obs"}).permute({1, 0, 2, 3})));
  EXPECT_EQ(p.get("a").data_ptr(), td.get("a").data_ptr());
  TensorDict t = td.transpose(-1, 0);
  EXPECT_TRUE(at::equal(t.get("a"), p.get("a")));
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.permute({0, 0});
      },
      "permute: dims [0, 0] are not a permutation of the batch dims of a "
      "TensorDict with batch_size [4, 6]");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.permute({0, 1, 2});
      },
      "permute: dims [0, 1, 2] are not a permutation of the batch dims of a "
      "TensorDict with batch_size [4, 6]");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.transpose(0, 2); },
      "transpose: dim 2 is out of range for a TensorDict with batch_size [4, "
      "6] (expected a dim in [-2, 1])");
}

TEST(StructuralShape, FlattenAndUnflattenRoundTrip) {
  TensorDict td = MakeDict2D();
  TensorDict f = td.flatten(0, 1);
  EXPECT_EQ(f.batch_size().vec(), std::vector<int64_t>({24}));
  EXPECT_EQ(f.get({"next", "obs"}).sizes().vec(),
            std::vector<int64_t>({24, 2, 5}));
  EXPECT_EQ(f.get("a").data_ptr(), td.get("a").data_ptr());
  TensorDict u = f.unflatten(0, {4, -1});
  EXPECT_EQ(u.batch_size().vec(), std::vector<int64_t>({4, 6}));
  EXPECT_EQ(u.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({4, 6, 2}));
  ExpectLeavesEqual(u, td);
  TensorDict u2 = td.unflatten(-1, {2, 3});
  EXPECT_EQ(u2.batch_size().vec(), std::vector<int64_t>({4, 2, 3}));
  EXPECT_EQ(u2.get("a").sizes().vec(), std::vector<int64_t>({4, 2, 3, 3}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.flatten(1, 0); },
      "flatten: start_dim 1 must not come after end_dim 0 (TensorDict "
      "batch_size [4, 6])");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)td.unflatten(1, {4, 4});
      },
      "unflatten: sizes [4, 4] don't multiply up to the size of batch dim 1 "
      "(6) of a TensorDict with batch_size [4, 6]");
}

TEST(StructuralShape, ExpandAddsLeadingDimsAndBroadcastsSizeOneDims) {
  TensorDict td({{"x", torch::rand({3, 5})},
                 {"s", TensorDict({{"y", torch::rand({3, 2, 4})}}, {3, 2})}},
                {3});
  TensorDict e = td.expand({2, 3});
  EXPECT_EQ(e.batch_size().vec(), std::vector<int64_t>({2, 3}));
  EXPECT_EQ(e.get("x").sizes().vec(), std::vector<int64_t>({2, 3, 5}));
  EXPECT_EQ(e.get_tensordict("s").batch_size().vec(),
            std::vector<int64_t>({2, 3, 2}));
  EXPECT_EQ(e.get({"s", "y"}).sizes().vec(),
            std::vector<int64_t>({2, 3, 2, 4}));
  EXPECT_EQ(e.get("x").data_ptr(), td.get("x").data_ptr());
  EXPECT_EQ(e.get("x").stride(0), 0);
  TensorDict one({{"x", torch::rand({1, 5})}}, {1});
  EXPECT_EQ(one.expand({4, -1}).batch_size().vec(),
            std::vector<int64_t>({4, 1}));
  EXPECT_EQ(one.expand({3}).get("x").sizes().vec(),
            std::vector<int64_t>({3, 5}));
  ExpectThrowsMsg(
      [&] { (void)td.expand({4}); },
      "expand: cannot expand a TensorDict with batch_size [3] to [4]");
  ExpectThrowsMsg(
      [&] { (void)td.expand({}); },
      "expand: cannot expand a TensorDict with batch_size [3] to []");
}

}  // namespace
