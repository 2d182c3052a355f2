// In-place writes into a dict's existing leaves (td[idx] = row, set_,
// update_, add_ and the other in-place arithmetic, apply_, zero_,
// masked_fill_, stack_out, cat_out, ReplayBuffer::extend) check every leaf
// and the source before writing any: a leaf that cannot be written in place
// (overlapping memory, a view of a leaf that requires grad, another device)
// makes the call throw with nothing written, and a source that shares memory
// with the destination is refused or staged through a copy.
//
// Every error test checks the exact message and then that nothing changed
// (keys, order, identity, values, versions). The offending leaf comes last in
// key order, so that a write validating one leaf at a time would already have
// written the others.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/GradMode.h>

#include <string>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using at::indexing::Slice;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

at::Tensor Meta(c10::IntArrayRef shape) {
  return at::empty(shape,
                   at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
}

// Like ExpectUnchanged, for dicts with meta leaves (whose values cannot be
// compared): identity and version for every leaf, values for the others.
void ExpectUnchangedMeta(const TensorDict& td, const Snapshot& s) {
  ASSERT_EQ(td.keys(true), s.keys);
  size_t leaf = 0;
  for (const auto& k : s.keys) {
    tensordict::Entry e = td.get_entry(k);
    if (!e.is_tensor()) continue;
    EXPECT_TRUE(e.tensor().is_same(s.leaves[leaf])) << k;
    EXPECT_EQ(e.tensor()._version(), s.versions[leaf]) << k;
    if (!e.tensor().is_meta()) {
      EXPECT_TRUE(at::equal(e.tensor(), s.values[leaf])) << k;
    }
    ++leaf;
  }
}

Snapshot TakeSnapshotMeta(const TensorDict& td) {
  Snapshot s;
  s.keys = td.keys(true);
  s.batch_sizes.push_back(td.batch_size().vec());
  for (const auto& k : s.keys) {
    tensordict::Entry e = td.get_entry(k);
    if (!e.is_tensor()) continue;
    s.leaves.push_back(e.tensor());
    s.values.push_back(e.tensor().is_meta() ? e.tensor()
                                            : e.tensor().detach().clone());
    s.versions.push_back(e.tensor()._version());
  }
  return s;
}

// {"a": [6, 3] f32, "i": [6] i64, "e": [6, 3] expanded from [1, 3]}, batch
// [6]: the expanded leaf comes last.
TensorDict MakeExpanded() {
  return TensorDict({{"a", torch::zeros({6, 3})},
                     {"i", torch::zeros({6}, torch::kLong)},
                     {"e", torch::zeros({1, 3}).expand({6, 3})}},
                    {6});
}

// A dict shaped like MakeExpanded() with every leaf dense and equal to `v`.
TensorDict Filled(double v, int64_t n = 6) {
  return TensorDict(
      {{"a", torch::full({n, 3}, v)},
       {"i", torch::full({n}, static_cast<int64_t>(v), torch::kLong)},
       {"e", torch::full({n, 3}, v)}},
      {n});
}

// {"a", "i", "g"}, batch [6], where "g" (last) requires grad.
TensorDict MakeGrad() {
  return TensorDict({{"a", torch::zeros({6, 3})},
                     {"i", torch::zeros({6}, torch::kLong)},
                     {"g", torch::zeros({6, 3}).requires_grad_()}},
                    {6});
}

TensorDict GradRow(double v) {
  return TensorDict(
      {{"a", torch::full({3}, v)},
       {"i", torch::full({}, static_cast<int64_t>(v), torch::kLong)},
       {"g", torch::full({3}, v)}},
      {});
}

// {"a": arange [6, 3], "i": arange [6] * 10}, batch [6]: distinct rows.
TensorDict MakeRows() {
  return TensorDict({{"a", torch::arange(18, torch::kFloat).reshape({6, 3})},
                     {"i", torch::arange(6, torch::kLong) * 10}},
                    {6});
}

const std::string kExpandedMsg =
    "key e: the destination has overlapping memory (for example an expanded "
    "tensor) and cannot be written in place; clone() it first";
const std::string kViewOfGradLeafMsg =
    "key g: a view of a leaf tensor that requires grad cannot be modified in "
    "place (use torch::NoGradGuard, or detach it first)";
const std::string kAliasMsg =
    "the value shares memory with the destination (it is a view of the data "
    "being written), so the write would read what it has already written; "
    "clone() the value first";

// ===========================================================================
// A leaf that cannot be written in place (overlapping memory, a view of a
// leaf that requires grad, the meta device), last in key order
// ===========================================================================

TEST(InPlaceWrite, SliceWriteIntoAnExpandedLeafThrowsAndChangesNothing) {
  TensorDict td = MakeExpanded();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td[Slice(0, 2)] = Filled(1, 2); }, kExpandedMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, AddScalarIntoAnExpandedLeafThrowsAndChangesNothing) {
  TensorDict td = MakeExpanded();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.add_(1); }, "add_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, ApplyInPlaceIntoAnExpandedLeafThrowsAndChangesNothing) {
  TensorDict td = MakeExpanded();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.apply_([](const at::Tensor& t) { return t + 1; }); },
                  "apply_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, UpdateInPlaceIntoAnExpandedLeafThrowsAndChangesNothing) {
  TensorDict td = MakeExpanded();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.update_(Filled(1)); }, "update_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, OtherInPlaceWritePathsRejectAnExpandedLeafUpFront) {
  TensorDict td = MakeExpanded();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.zero_(); }, "zero_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { td.masked_fill_(torch::ones({6}, torch::kBool), 1); },
                  "masked_fill_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { td.mul_(Filled(2)); }, "mul_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.set_("e", torch::ones({6, 3}));
      },
      "set_: " + kExpandedMsg);
  ExpectUnchanged(td, s);
  TensorDict rows = Filled(1, 2);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(td[Slice(0, 2)], {rows[0], rows[1]});
      },
      "stack_out: " + kExpandedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::cat_out(td[Slice(0, 2)],
                                  {Filled(1, 1), Filled(2, 1)});
      },
      "cat_out: " + kExpandedMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, AddIntoAViewOfAGradLeafThrowsAndChangesNothing) {
  ASSERT_TRUE(c10::GradMode::is_enabled());
  TensorDict td = MakeGrad();
  TensorDict v = td[Slice(0, 3)];
  Snapshot sv = TakeSnapshot(v);
  Snapshot st = TakeSnapshot(td);
  ExpectThrowsMsg([&] { v.add_(1); }, "add_: " + kViewOfGradLeafMsg);
  ExpectUnchanged(v, sv);
  ExpectUnchanged(td, st);
}

TEST(InPlaceWrite, RowWriteIntoAViewOfAGradLeafThrowsAndChangesNothing) {
  ASSERT_TRUE(c10::GradMode::is_enabled());
  TensorDict td = MakeGrad();
  TensorDict v = td[Slice(0, 3)];
  Snapshot sv = TakeSnapshot(v);
  Snapshot st = TakeSnapshot(td);
  ExpectThrowsMsg([&] { v[0] = GradRow(1); }, kViewOfGradLeafMsg);
  ExpectUnchanged(v, sv);
  ExpectUnchanged(td, st);
}

TEST(InPlaceWrite, StackOutIntoAViewOfAGradLeafThrowsAndChangesNothing) {
  ASSERT_TRUE(c10::GradMode::is_enabled());
  TensorDict td = MakeGrad();
  TensorDict v = td[Slice(0, 3)];
  Snapshot sv = TakeSnapshot(v);
  Snapshot st = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(v[Slice(0, 2)], {GradRow(1), GradRow(2)});
      },
      "stack_out: " + kViewOfGradLeafMsg);
  ExpectUnchanged(v, sv);
  ExpectUnchanged(td, st);
}

TEST(InPlaceWrite, AddingACpuTensorToAMetaLeafThrowsAndChangesNothing) {
  TensorDict td({{"a", torch::zeros({6, 3})},
                 {"i", torch::zeros({6}, torch::kLong)},
                 {"m", Meta({6, 3})}},
                {6});
  Snapshot s = TakeSnapshotMeta(td);
  ExpectThrowsMsg([&] { td.add_(torch::ones({6}, torch::kLong)); },
                  "add_: key m: the operand is on device cpu but the leaf is "
                  "on device meta");
  ExpectUnchangedMeta(td, s);
}

TEST(InPlaceWrite, AddingADictWithAMetaLeafThrowsAndChangesNothing) {
  TensorDict td({{"a", torch::zeros({6, 3})},
                 {"i", torch::zeros({6}, torch::kLong)},
                 {"m", torch::zeros({6, 3})}},
                {6});
  TensorDict td2({{"a", torch::ones({6, 3})},
                  {"i", torch::ones({6}, torch::kLong)},
                  {"m", Meta({6, 3})}},
                 {6});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.add_(td2); },
                  "add_: key m: the operand is on device meta but the leaf is "
                  "on device cpu");
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite, UpdateInPlaceFromAMetaSourceThrowsAndChangesNothing) {
  TensorDict td({{"a", torch::zeros({6, 3})},
                 {"i", torch::zeros({6}, torch::kLong)},
                 {"m", torch::zeros({6, 3})}},
                {6});
  TensorDict src({{"a", torch::ones({6, 3})},
                  {"i", torch::ones({6}, torch::kLong)},
                  {"m", Meta({6, 3})}},
                 {6});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.update_(src); },
                  "update_: key m: cannot write a value on device meta into a "
                  "buffer on device cpu");
  ExpectUnchanged(td, s);
}

// ===========================================================================
// Sources that share memory with the destination
// ===========================================================================

TEST(InPlaceWrite,
     StackOutOfRowsThatViewTheDestinationThrowsAndChangesNothing) {
  TensorDict buf = MakeRows();
  Snapshot s = TakeSnapshot(buf);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(buf[Slice(1, 4)], {buf[0], buf[1], buf[2]});
      },
      "stack_out: key a: " + kAliasMsg);
  ExpectUnchanged(buf, s);
  // Clones of the same rows are fine, and give the shifted rows.
  TensorDict before = buf.clone();
  tensordict::stack_out(buf[Slice(1, 4)],
                        {buf[0].clone(), buf[1].clone(), buf[2].clone()});
  EXPECT_TRUE(
      at::equal(buf.get("a").narrow(0, 1, 3), before.get("a").narrow(0, 0, 3)));
  EXPECT_TRUE(
      at::equal(buf.get("i").narrow(0, 1, 3), before.get("i").narrow(0, 0, 3)));
}

TEST(InPlaceWrite,
     SliceWriteFromAnOverlappingSliceOfItselfThrowsAndChangesNothing) {
  TensorDict td = MakeRows();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td[Slice(0, 5)] = td[Slice(1, 6)]; },
                  "key a: " + kAliasMsg);
  ExpectUnchanged(td, s);
}

TEST(InPlaceWrite,
     ReplayBufferExtendFromAViewOfItsOwnStorageIsStagedThroughACopy) {
  ReplayBuffer rb(ReplayBufferOptions(5).seed(0));
  auto rows = [](int64_t first, int64_t n) {
    at::Tensor v = torch::arange(first, first + n, torch::kLong);
    return TensorDict(
        {{"obs", v.to(torch::kFloat).unsqueeze(1).repeat({1, 3})}, {"id", v}},
        {n});
  };
  rb.extend(rows(0, 5));
  rb.extend(rows(5, 3));  // storage ids [5, 6, 7, 3, 4], cursor 3
  ASSERT_EQ(rb.cursor(), 3);
  ASSERT_TRUE(at::equal(rb.storage().get("id"),
                        torch::tensor({5, 6, 7, 3, 4}, torch::kLong)));
  // Rows 1..3 (ids 6, 7, 3) go to rows 3, 4, 0: the first piece overwrites
  // row 3 before the second piece reads it.
  at::Tensor idx = rb.extend(rb.storage()[Slice(1, 4)]);
  EXPECT_TRUE(at::equal(idx, torch::tensor({3, 4, 0}, torch::kLong)));
  EXPECT_TRUE(at::equal(rb.storage().get("id"),
                        torch::tensor({3, 6, 7, 6, 7}, torch::kLong)));
  EXPECT_TRUE(at::equal(
      rb.storage().get("obs"),
      torch::tensor({3., 6., 7., 6., 7.}).unsqueeze(1).repeat({1, 3})));
  EXPECT_EQ(rb.cursor(), 1);
  EXPECT_EQ(rb.size(), 5);
}

}  // namespace
