// Chained indexing, td[a][b]: a write through a chain of basic indices
// (integers and slices, which compose) reaches the dict and allocates new
// keys there; a write through a chain whose first index is advanced (a mask
// or an index tensor: td[a] is a copy) throws instead of being lost and
// changes nothing. Reads through either chain give what the composed index
// gives (views for basic indices).
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <string>
#include <vector>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using at::indexing::Slice;
using tensordict::TensorDict;

// {"a": arange [6, 3], "i": arange [6] * 10}, batch [6]: distinct rows.
TensorDict MakeRows() {
  return TensorDict({{"a", torch::arange(18, torch::kFloat).reshape({6, 3})},
                     {"i", torch::arange(6, torch::kLong) * 10}},
                    {6});
}

// ===========================================================================
// Writes and reads through integers and slices
// ===========================================================================

TEST(ChainedIndex, ChainedIntegerWriteReachesTheDictAndAllocatesNewKeysThere) {
  TensorDict td({{"a", torch::zeros({5, 4, 3})},
                 {"i", torch::zeros({5, 4}, torch::kLong)}},
                {5, 4});
  at::Tensor a = td.get("a");
  TensorDict row({{"a", torch::full({3}, 7.0)},
                  {"i", torch::full({}, 9, torch::kLong)},
                  {"new", torch::full({2}, 5.0)}},
                 {});
  td[2][3] = row;
  EXPECT_TRUE(td.get("a").is_same(a));
  at::Tensor want_a = torch::zeros({5, 4, 3});
  want_a[2][3] = 7;
  EXPECT_TRUE(at::equal(td.get("a"), want_a));
  at::Tensor want_i = torch::zeros({5, 4}, torch::kLong);
  want_i[2][3] = 9;
  EXPECT_TRUE(at::equal(td.get("i"), want_i));
  ASSERT_TRUE(td.contains("new"));
  EXPECT_EQ(td.get("new").sizes().vec(), (std::vector<int64_t>{5, 4, 2}));
  at::Tensor want_new = torch::zeros({5, 4, 2});
  want_new[2][3] = 5;
  EXPECT_TRUE(at::equal(td.get("new"), want_new));
}

TEST(ChainedIndex, IntegerAfterASliceWritesTheComposedRow) {
  TensorDict td = MakeRows();
  TensorDict row({{"a", torch::full({3}, -1.0)},
                  {"i", torch::full({}, -1, torch::kLong)},
                  {"new", torch::full({2}, 4.0)}},
                 {});
  td[Slice(1, 5)][2] = row;  // row 3
  TensorDict want = MakeRows();
  want.get("a")[3] = -1;
  want.get("i")[3] = -1;
  EXPECT_TRUE(at::equal(td.get("a"), want.get("a")));
  EXPECT_TRUE(at::equal(td.get("i"), want.get("i")));
  ASSERT_TRUE(td.contains("new"));
  at::Tensor want_new = torch::zeros({6, 2});
  want_new[3] = 4;
  EXPECT_TRUE(at::equal(td.get("new"), want_new));
  // Negative integers count from the end of the slice.
  td[Slice(1, 5)][-1] = row;  // row 4
  EXPECT_TRUE(at::equal(td.get("i"),
                        torch::tensor({0, 10, 20, -1, -1, 50}, torch::kLong)));
}

TEST(ChainedIndex, SliceAfterAStridedSliceComposes) {
  TensorDict td = MakeRows();
  TensorDict rows({{"a", torch::full({2, 3}, -1.0)},
                   {"i", torch::tensor({-1, -2}, torch::kLong)},
                   {"new", torch::full({2}, 4.0)}},
                  {2});
  td[Slice(1, 5, 2)][Slice(0, 2)] = rows;  // rows 1 and 3
  EXPECT_TRUE(at::equal(td.get("i"),
                        torch::tensor({0, -1, 20, -2, 40, 50}, torch::kLong)));
  TensorDict want = MakeRows();
  want.get("a")[1] = -1;
  want.get("a")[3] = -1;
  EXPECT_TRUE(at::equal(td.get("a"), want.get("a")));
  ASSERT_TRUE(td.contains("new"));
  EXPECT_TRUE(
      at::equal(td.get("new"), torch::tensor({0., 4., 0., 4., 0., 0.})));
  // Reading the chain gives views of td's rows 1 and 3.
  TensorDict read = td[Slice(1, 5, 2)][Slice(0, 2)];
  EXPECT_TRUE(SharesStorage(read.get("a"), td.get("a")));
  EXPECT_TRUE(at::equal(read.get("i"), torch::tensor({-1, -2}, torch::kLong)));
}

// ===========================================================================
// Writes through an advanced index, whose td[a] is a copy
// ===========================================================================

const std::string kChainedWriteMsg =
    "cannot write through td[a][b] when td[a] is a copy (an advanced index "
    "such as a mask or an index tensor, or an index that does not compose "
    "with the next one): the write would be lost; write with one index list "
    "instead, e.g. td.index_put_({a, b}, value)";

TEST(ChainedIndex, WriteThroughAMaskThenAnIntegerThrowsAndChangesNothing) {
  TensorDict td = MakeRows();
  at::Tensor mask = torch::tensor({true, false, true, true, false, true});
  TensorDict row(
      {{"a", torch::full({3}, -1.0)}, {"i", torch::full({}, -1, torch::kLong)}},
      {});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td[mask][0] = row; }, kChainedWriteMsg);
  ExpectUnchanged(td, s);
  // Reading through the same chain still works (a copy of row 0).
  TensorDict read = td[mask][1];
  EXPECT_TRUE(at::equal(read.get("i"), torch::full({}, 20, torch::kLong)));
}

TEST(ChainedIndex, StackOutThroughAMaskThenASliceThrowsAndChangesNothing) {
  TensorDict td = MakeRows();
  at::Tensor mask = torch::tensor({true, false, true, true, false, true});
  TensorDict row(
      {{"a", torch::full({3}, -1.0)}, {"i", torch::full({}, -1, torch::kLong)}},
      {});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(td[mask][Slice(0, 2)], {row, row});
      },
      "stack_out: out is td[a][b] where td[a] is a copy (an advanced index, or "
      "indices that do not compose): the result would be lost; index td once "
      "instead");
  ExpectUnchanged(td, s);
}

}  // namespace
