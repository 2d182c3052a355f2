// Tests for the TensorDict container: construction, keys, get/set/set_,
// erase/pop/rename_key_, nested keys, handle semantics, copies and moves,
// comparisons and reductions, and the error messages of all of them.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using tensordict::Entry;
using tensordict::Item;
using tensordict::NestedKey;
using tensordict::TensorDict;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// {"a": [4, 3] f32, "next": {"obs": [4, 2] f32}}, batch [4].
TensorDict MakeDict() {
  return TensorDict({{"a", torch::arange(12, torch::kFloat).reshape({4, 3})},
                     {{"next", "obs"}, torch::ones({4, 2})}},
                    {4});
}

// ---------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------

TEST(TensorDictConstruction,
     EmptyBracesWithBatchSizeMakeAnEmptyDictWithThatBatch) {
  const int64_t N = 10;
  TensorDict td({}, {N, 3});
  EXPECT_TRUE(td.empty());
  EXPECT_EQ(td.size(), 0u);
  EXPECT_TRUE(td.batch_size() == std::vector<int64_t>({10, 3}));
  EXPECT_FALSE(td.batch_size() == std::vector<int64_t>({10}));
  EXPECT_EQ(td.batch_dims(), 2);
  EXPECT_EQ(td.numel(), 30);
  EXPECT_FALSE(td.device().has_value());
}

TEST(TensorDictConstruction, ItemsWithEmptyBatchSizeHaveNoBatchDims) {
  TensorDict td({{"a", torch::zeros({2, 5})}}, {});
  EXPECT_EQ(td.batch_dims(), 0);
  EXPECT_TRUE(td.batch_size() == std::vector<int64_t>{});
  EXPECT_EQ(td.numel(), 1);
  EXPECT_EQ(td.size(), 1u);
}

TEST(TensorDictConstruction, DefaultConstructedDictIsEmptyWithNoBatchDims) {
  TensorDict td;
  EXPECT_TRUE(td.empty());
  EXPECT_EQ(td.batch_dims(), 0);
  EXPECT_FALSE(td.device().has_value());
}

TEST(TensorDictConstruction, BatchSizeOnlyConstructorsMakeEmptyDicts) {
  TensorDict a(c10::IntArrayRef{4, 2});
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(a.batch_size() == std::vector<int64_t>({4, 2}));
  EXPECT_FALSE(a.device().has_value());

  TensorDict b(std::vector<int64_t>{3}, at::Device(at::kCPU));
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(b.batch_size() == std::vector<int64_t>({3}));
  ASSERT_TRUE(b.device().has_value());
  EXPECT_EQ(*b.device(), at::Device(at::kCPU));
}

TEST(TensorDictConstruction, ConstructorKeepsItemsInInsertionOrder) {
  TensorDict td({{"b", torch::zeros({2})},
                 {"a", torch::zeros({2})},
                 {"c", torch::zeros({2, 7})}},
                {2});
  EXPECT_EQ(td.keys(), Keys({"b", "a", "c"}));
  EXPECT_EQ(td.size(), 3u);
  EXPECT_FALSE(td.empty());
}

TEST(TensorDictConstruction, ConstructorStoresTheGivenTensorsAndSubDicts) {
  at::Tensor t = torch::rand({4, 3});
  TensorDict sub({{"x", torch::zeros({4, 2, 5})}}, {4, 2});
  TensorDict td({{"t", t}, {"sub", sub}, {{"next", "obs"}, torch::zeros({4})}},
                {4});
  EXPECT_TRUE(td.get("t").is_same(t));
  EXPECT_TRUE(td.get_tensordict("sub").is_same(sub));
  EXPECT_TRUE(td.get_tensordict("sub").batch_size() ==
              std::vector<int64_t>({4, 2}));
  EXPECT_TRUE(td.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({4}));
  EXPECT_EQ(td.keys(true),
            Keys({"t", "sub", {"sub", "x"}, "next", {"next", "obs"}}));
}

TEST(TensorDictConstruction,
     ConstructorWithDeviceSetsDeviceOnDictAndCreatedSubDicts) {
  at::Tensor t = torch::rand({2, 3});
  TensorDict td({{"t", t}, {{"next", "obs"}, torch::zeros({2})}}, {2},
                at::Device(at::kCPU));
  ASSERT_TRUE(td.device().has_value());
  EXPECT_EQ(*td.device(), at::Device(at::kCPU));
  EXPECT_TRUE(td.get("t").is_same(t))
      << "a leaf already on the device is not copied";
  ASSERT_TRUE(td.get_tensordict("next").device().has_value());
  EXPECT_EQ(*td.get_tensordict("next").device(), at::Device(at::kCPU));
}

TEST(TensorDictConstruction, ConstructorWithDeviceMovesLeavesThere) {
  TensorDict td({{"t", torch::rand({2, 3})}}, {2}, at::Device(at::kMeta));
  EXPECT_TRUE(td.get("t").device().is_meta());
  EXPECT_EQ(td.get("t").sizes(), c10::IntArrayRef({2, 3}));
}

TEST(TensorDictConstruction, LeafWithWrongLeadingDimsIsRejected) {
  ExpectThrowsMsg(
      [] {
        TensorDict td({{"a", torch::zeros({3, 2})}}, {4});
      },
      "key a: expected leading dims [4], got [3]");
  ExpectThrowsMsg(
      [] {
        TensorDict td({{"a", torch::zeros({4})}}, {4, 3});
      },
      "key a: expected leading dims [4, 3], got [4]");
}

TEST(TensorDictConstruction,
     SubDictWhoseBatchDoesNotStartWithParentsIsRejected) {
  TensorDict sub({}, {3});
  ExpectThrowsMsg(
      [&] {
        TensorDict td({{"sub", sub}}, {4});
      },
      "key sub: the sub-TensorDict's batch_size [3] must start with [4]");
}

TEST(TensorDictConstruction, NegativeBatchDimensionIsRejected) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TensorDict td({}, {2, -1});
      },
      "TensorDict: batch_size [2, -1] has a negative dimension");
}

TEST(TensorDictConstruction, UndefinedTensorItemIsRejected) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TensorDict td({{"a", at::Tensor()}}, {});
      },
      "key a: cannot set an undefined tensor");
}

TEST(TensorDictConstruction, EntryReportsWhatItHolds) {
  Entry t(torch::zeros({2}));
  EXPECT_TRUE(t.is_tensor());
  EXPECT_FALSE(t.is_tensordict());
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)t.tensordict(); },
      "this entry holds a tensor, not a TensorDict");
  TensorDict sub;
  Entry d(sub);
  EXPECT_TRUE(d.is_tensordict());
  EXPECT_TRUE(d.tensordict().is_same(sub));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)d.tensor(); }, "this entry holds a TensorDict, not a tensor");
}

TEST(TensorDictConstruction, NumelIsTheProductOfTheBatchSize) {
  EXPECT_EQ(TensorDict({}, {4, 3, 2}).numel(), 24);
  EXPECT_EQ(TensorDict({}, {4, 0}).numel(), 0);
  EXPECT_EQ(TensorDict({}, {}).numel(), 1);
}

// ---------------------------------------------------------------------------
// NestedKey
// ---------------------------------------------------------------------------

TEST(NestedKeyTest, PlainKeyBuildsFromLiteralStringAndOneElementList) {
  NestedKey a = "obs";
  NestedKey b = std::string("obs");
  NestedKey c = {"obs"};
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_FALSE(a.is_nested());
  EXPECT_EQ(a.depth(), 1u);
  EXPECT_EQ(a.front(), "obs");
  EXPECT_EQ(a.back(), "obs");
}

TEST(NestedKeyTest, BracedListBuildsNestedKey) {
  NestedKey k = {"next", "obs"};
  EXPECT_TRUE(k.is_nested());
  EXPECT_EQ(k.depth(), 2u);
  EXPECT_EQ(k.front(), "next");
  EXPECT_EQ(k.back(), "obs");
  EXPECT_EQ(k.parts(), (std::vector<std::string>{"next", "obs"}));
  EXPECT_NE(k, NestedKey("next"));
  EXPECT_EQ(NestedKey(std::vector<std::string>{"next", "obs"}), k);
}

TEST(NestedKeyTest, JoinAppendsTheOtherKeysComponents) {
  NestedKey k = NestedKey("a").join({"b", "c"});
  EXPECT_EQ(k, (NestedKey{"a", "b", "c"}));
}

TEST(NestedKeyTest, EmptyKeyIsRejected) {
  const std::string msg = "NestedKey: empty key is not allowed";
  ExpectThrowsMsg<c10::ValueError>([] { NestedKey k(""); }, msg);
  ExpectThrowsMsg<c10::ValueError>([] { NestedKey k{std::string()}; }, msg);
  ExpectThrowsMsg<c10::ValueError>(
      [] { NestedKey k(std::vector<std::string>{}); }, msg);
}

TEST(NestedKeyTest, EmptyComponentIsRejected) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        NestedKey k{"next", ""};
      },
      "NestedKey: empty key is not allowed (in nested key ('next', ''))");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        NestedKey k{"", "obs"};
      },
      "NestedKey: empty key is not allowed (in nested key ('', 'obs'))");
}

TEST(NestedKeyTest, EmptyKeyPassedToDictMethodsThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::ValueError>([&] { td.set("", torch::zeros({4})); },
                                   "NestedKey: empty key is not allowed");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        td.set({"next", ""}, torch::zeros({4}));
      },
      "NestedKey: empty key is not allowed (in nested key ('next', ''))");
  ExpectThrowsMsg<c10::ValueError>([&] { (void)td.get(""); },
                                   "NestedKey: empty key is not allowed");
  ExpectUnchanged(td, s);
}

// ---------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------

TensorDict MakeNestedDict() {
  return TensorDict({{"a", torch::zeros({4})},
                     {{"next", "obs"}, torch::zeros({4, 3})},
                     {{"next", "deep", "x"}, torch::zeros({4})},
                     {"b", torch::zeros({4})}},
                    {4});
}

TEST(TensorDictKeys, KeysListsTopLevelKeysInInsertionOrder) {
  EXPECT_EQ(MakeNestedDict().keys(), Keys({"a", "next", "b"}));
}

TEST(TensorDictKeys, IncludeNestedListsEachSubDictFollowedByItsKeys) {
  EXPECT_EQ(MakeNestedDict().keys(/*include_nested=*/true),
            Keys({"a",
                  "next",
                  {"next", "obs"},
                  {"next", "deep"},
                  {"next", "deep", "x"},
                  "b"}));
}

TEST(TensorDictKeys, LeavesOnlyDropsSubDictKeys) {
  TensorDict td = MakeNestedDict();
  EXPECT_EQ(td.keys(true, true),
            Keys({"a", {"next", "obs"}, {"next", "deep", "x"}, "b"}));
  EXPECT_EQ(td.keys(false, true), Keys({"a", "b"}));
}

TEST(TensorDictKeys, ContainsFindsPlainAndNestedKeysOnly) {
  TensorDict td = MakeNestedDict();
  EXPECT_TRUE(td.contains("a"));
  EXPECT_TRUE(td.contains("next"));
  EXPECT_TRUE(td.contains({"next", "deep", "x"}));
  EXPECT_FALSE(td.contains("obs"));
  EXPECT_FALSE(td.contains({"next", "zz"}));
  EXPECT_FALSE(td.contains({"a", "x"}));
}

// ---------------------------------------------------------------------------
// get / set
// ---------------------------------------------------------------------------

TEST(TensorDictGetSet, GetReturnsTheStoredTensorNotACopy) {
  at::Tensor t = torch::rand({4, 3});
  TensorDict td({{"t", t}, {{"next", "obs"}, torch::zeros({4})}}, {4});
  EXPECT_TRUE(td.get("t").is_same(t));
  td.get({"next", "obs"}).fill_(5);
  EXPECT_TRUE(td.get({"next", "obs"}).eq(5).all().item<bool>());
}

TEST(TensorDictGetSet, GetTensordictReturnsTheParentsOwnChild) {
  TensorDict td = MakeDict();
  TensorDict child = td.get_tensordict("next");
  EXPECT_TRUE(child.is_same(td.get_tensordict("next")));
  child.set("x", torch::full({4}, 2.0));
  ASSERT_TRUE(td.contains({"next", "x"}));
  EXPECT_TRUE(td.get({"next", "x"}).is_same(child.get("x")));
  child.erase("obs");
  EXPECT_FALSE(td.contains({"next", "obs"}));
}

TEST(TensorDictGetSet, GetEntryReturnsLeafOrSubDict) {
  TensorDict td = MakeDict();
  EXPECT_TRUE(td.get_entry("a").tensor().is_same(td.get("a")));
  EXPECT_TRUE(
      td.get_entry("next").tensordict().is_same(td.get_tensordict("next")));
}

TEST(TensorDictGetSet, MissingKeyErrorListsTheAvailableKeys) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.get("zz"); },
      "key zz not found in TensorDict with keys [a, next, ('next', 'obs')]");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.get({"next", "zz"});
      },
      "key ('next', 'zz') not found in TensorDict with keys [a, next, ('next', "
      "'obs')]");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.get_tensordict("zz"); },
      "key zz not found in TensorDict with keys [a, next, ('next', 'obs')]");
  ExpectThrowsMsg<c10::IndexError>(
      [] { (void)TensorDict({}, {2}).get("a"); },
      "key a not found in TensorDict with keys []");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, GetOnASubDictAndGetTensordictOnALeafThrowTypeErrors) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)td.get("next"); },
      "key next holds a TensorDict, not a tensor; use get_tensordict()");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)td.get_tensordict("a"); },
      "key a holds a tensor, not a TensorDict; use get()");
}

TEST(TensorDictGetSet, SetReplacesTheTensorInPlaceOfTheOldKey) {
  TensorDict td = MakeDict();
  at::Tensor old = td.get("a");
  at::Tensor old_value = old.clone();
  at::Tensor fresh = torch::full({4, 5}, 3.0);
  const TensorDict& ret = td.set("a", fresh);
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_TRUE(td.get("a").is_same(fresh));
  EXPECT_TRUE(at::equal(old, old_value))
      << "set must not copy into the old tensor";
  EXPECT_EQ(td.keys(), Keys({"a", "next"}));
}

TEST(TensorDictGetSet, SetCanBeChained) {
  TensorDict td({}, {2});
  td.set("a", torch::zeros({2})).set("b", torch::ones({2}));
  EXPECT_EQ(td.keys(), Keys({"a", "b"}));
}

TEST(TensorDictGetSet,
     SetNestedKeyCreatesIntermediateSubDictsWithParentBatchSize) {
  TensorDict td({}, {4, 2});
  td.set({"a", "b", "c"}, torch::zeros({4, 2, 3}));
  EXPECT_EQ(td.keys(true), Keys({"a", {"a", "b"}, {"a", "b", "c"}}));
  EXPECT_TRUE(td.get_tensordict("a").batch_size() ==
              std::vector<int64_t>({4, 2}));
  EXPECT_TRUE(td.get_tensordict({"a", "b"}).batch_size() ==
              std::vector<int64_t>({4, 2}));
  EXPECT_FALSE(td.get_tensordict("a").device().has_value());
}

TEST(TensorDictGetSet, SetNestedKeyChecksLeadingDimsAndCreatesNothingOnError) {
  TensorDict td({}, {4, 8});
  ExpectThrowsMsg(
      [&] {
        td.set({"next", "obs"}, torch::zeros({4, 7, 3}));
      },
      "key ('next', 'obs'): expected leading dims [4, 8], got [4, 7]");
  EXPECT_TRUE(td.empty()) << "the intermediate sub-dict must not be created";
  EXPECT_FALSE(td.contains("next"));
}

TEST(TensorDictGetSet, SetChecksLeadingDimsAgainstTheSubDictThatHoldsTheLeaf) {
  TensorDict td({{"sub", TensorDict({}, {4, 5})}}, {4});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td.set({"sub", "x"}, torch::zeros({4, 6}));
      },
      "key ('sub', 'x'): expected leading dims [4, 5], got [4, 6]");
  ExpectUnchanged(td, s);
  td.set({"sub", "x"}, torch::zeros({4, 5, 6}));
  EXPECT_TRUE(td.contains({"sub", "x"}));
}

TEST(TensorDictGetSet, SetTensorWhereASubDictLivesThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td.set("next", torch::zeros({4})); },
      "key next: cannot set a tensor where a TensorDict lives");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, SetSubDictWhereATensorLivesThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td.set("a", TensorDict({}, {4})); },
      "key a: cannot set a TensorDict where a tensor lives");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, SetNestedKeyThroughATensorThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.set({"a", "b"}, torch::zeros({4}));
      },
      "key ('a', 'b'): cannot create a sub-TensorDict at a: a tensor lives "
      "there");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, SetUndefinedTensorThrows) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::ValueError>([&] { td.set("u", at::Tensor()); },
                                   "key u: cannot set an undefined tensor");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, SetSubDictStoresTheSameDict) {
  TensorDict td = MakeDict();
  TensorDict sub({{"x", torch::zeros({4, 2})}}, {4, 2});
  td.set("sub", sub);
  EXPECT_TRUE(td.get_tensordict("sub").is_same(sub));
  sub.set("y", torch::zeros({4, 2}));
  EXPECT_TRUE(td.contains({"sub", "y"}));
}

TEST(TensorDictGetSet, SetSubDictReplacesTheSubDictAtThatKey) {
  TensorDict td = MakeDict();
  TensorDict sub({{"x", torch::zeros({4})}}, {4});
  td.set("next", sub);
  EXPECT_TRUE(td.get_tensordict("next").is_same(sub));
  EXPECT_EQ(td.keys(true), Keys({"a", "next", {"next", "x"}}));
}

TEST(TensorDictGetSet, SetSubDictWithWrongBatchThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td.set({"deep", "sub"}, TensorDict({}, {5, 2}));
      },
      "key ('deep', 'sub'): the sub-TensorDict's batch_size [5, 2] must start "
      "with [4]");
  ExpectUnchanged(td, s);
}

TEST(TensorDictGetSet, SetDictInsideItselfThrows) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.set("self", td); },
                  "key self: cannot set a TensorDict inside itself");
  TensorDict child = td.get_tensordict("next");
  ExpectThrowsMsg([&] { child.set("loop", td); },
                  "key loop: cannot set a TensorDict inside itself");
  ExpectUnchanged(td, s);
}

// {"x": [6], "a": {"c": [6, 2]}}, batch [6].
TensorDict MakeXAndSubDict() {
  return TensorDict(
      {{"x", torch::zeros({6})}, {{"a", "c"}, torch::ones({6, 2})}}, {6});
}

void ExpectPrintable(const TensorDict& td) {
  std::ostringstream os;
  os << td;
  EXPECT_FALSE(os.str().empty());
  EXPECT_EQ(td.keys(true), Keys({"x", "a", {"a", "c"}}));
}

// Every form of cycle in one test: set() of a sub-dict under itself (a
// cycle below the root), of a dict holding it, of the root under a nested
// key, and update() reaching the same set().
TEST(TensorDictGetSet, SetAndUpdateRejectEveryCycleAndChangeNothing) {
  TensorDict td = MakeXAndSubDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td.set({"a", "b"}, td.get_tensordict("a"));
      },
      "key ('a', 'b'): cannot set a TensorDict inside itself");
  ExpectUnchanged(td, s);
  // A dict that holds the sub-dict is a cycle too.
  TensorDict holder({{"inner", td.get_tensordict("a")}}, {6});
  ExpectThrowsMsg(
      [&] {
        td.set({"a", "b"}, holder);
      },
      "key ('a', 'b'): cannot set a TensorDict inside itself");
  ExpectUnchanged(td, s);
  // The root under a new nested key, below an existing sub-dict or not.
  ExpectThrowsMsg(
      [&] {
        td.set({"a", "x", "y"}, td);
      },
      "key ('a', 'x', 'y'): cannot set a TensorDict inside itself");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.set({"n", "x", "y"}, td);
      },
      "key ('n', 'x', 'y'): cannot set a TensorDict inside itself");
  ExpectUnchanged(td, s);
  // update(): ("a", "b") would hold "a" itself; checked before "z" is set.
  TensorDict other({{"z", torch::ones({6})},
                    {"a", TensorDict({{"b", td.get_tensordict("a")}}, {6})}},
                   {6});
  ExpectThrowsMsg([&] { td.update(other); },
                  "update: key ('a', 'b'): cannot set a TensorDict inside "
                  "itself");
  ExpectUnchanged(td, s);
  ExpectPrintable(td);
  EXPECT_EQ(td.get_tensordict("a").keys(true), Keys({"c"}));
}

TEST(TensorDictGetSet, SetMovesTheValueToTheDictsDevice) {
  TensorDict td(std::vector<int64_t>{2}, at::Device(at::kMeta));
  td.set("a", torch::rand({2, 3}));
  EXPECT_TRUE(td.get("a").device().is_meta());
  td.set({"next", "b"}, torch::rand({2}));
  EXPECT_TRUE(td.get({"next", "b"}).device().is_meta());
  ASSERT_TRUE(td.get_tensordict("next").device().has_value());
  EXPECT_TRUE(td.get_tensordict("next").device()->is_meta());
}

// ---------------------------------------------------------------------------
// set_
// ---------------------------------------------------------------------------

TEST(TensorDictSetInPlace,
     SetUnderscoreCopiesIntoTheStoredTensorKeepingIdentity) {
  TensorDict td = MakeDict();
  at::Tensor before = td.get("a");
  const auto v0 = before._version();
  td.set_("a", torch::full({4, 3}, 7.0));
  EXPECT_TRUE(td.get("a").is_same(before));
  EXPECT_TRUE(before.eq(7).all().item<bool>());
  EXPECT_GT(before._version(), v0);
}

TEST(TensorDictSetInPlace, SetUnderscoreBroadcastsAndCastsTheValue) {
  TensorDict td = MakeDict();
  at::Tensor before = td.get({"next", "obs"});
  td.set_({"next", "obs"}, torch::tensor({{1}, {2}, {3}, {4}}, torch::kLong));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(before));
  EXPECT_EQ(before.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(
      before, torch::tensor({1.f, 2.f, 3.f, 4.f}).unsqueeze(1).expand({4, 2})));
}

TEST(TensorDictSetInPlace, SetUnderscoreErrorsLeaveTheDictUnchanged) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { td.set_("zz", torch::zeros({4})); },
      "key zz not found in TensorDict with keys [a, next, ('next', 'obs')]");
  ExpectThrowsMsg(
      [&] {
        td.set_("a", torch::zeros({3, 3}));
      },
      "set_: key a: expected leading dims [4], got [3]");
  ExpectThrowsMsg(
      [&] {
        td.set_("a", torch::zeros({4, 2}));
      },
      "set_: key a: cannot write a value of shape [4, 2] into the stored "
      "tensor of shape [4, 3]");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td.set_("next", torch::zeros({4})); },
      "set_: key next: cannot write a tensor where a TensorDict lives");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { td.set_("a", at::Tensor()); },
      "set_: key a: cannot write an undefined tensor");
  ExpectUnchanged(td, s);
}

// ---------------------------------------------------------------------------
// erase / pop / rename_key_
// ---------------------------------------------------------------------------

TEST(TensorDictErase, EraseRemovesTheKeyAndKeepsTheOrderOfTheOthers) {
  TensorDict td({{"a", torch::zeros({2})},
                 {"b", torch::zeros({2})},
                 {"c", torch::zeros({2})}},
                {2});
  td.erase("b");
  EXPECT_EQ(td.keys(), Keys({"a", "c"}));
  EXPECT_EQ(td.size(), 2u);
}

TEST(TensorDictErase, EraseNestedKeyKeepsTheSubDict) {
  TensorDict td = MakeDict();
  td.erase({"next", "obs"});
  EXPECT_EQ(td.keys(true), Keys({"a", "next"}));
  EXPECT_TRUE(td.get_tensordict("next").empty());
  td.erase("next");
  EXPECT_EQ(td.keys(true), Keys({"a"}));
}

TEST(TensorDictErase, EraseOrPopOfAMissingKeyThrowsAndChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  const std::string msg =
      "key ('next', 'zz') not found in TensorDict with keys [a, next, ('next', "
      "'obs')]";
  ExpectThrowsMsg<c10::IndexError>([&] { td.erase({"next", "zz"}); }, msg);
  ExpectThrowsMsg<c10::IndexError>([&] { (void)td.pop({"next", "zz"}); }, msg);
  ExpectUnchanged(td, s);
}

TEST(TensorDictErase, PopReturnsWhatTheKeyHeld) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  TensorDict next = td.get_tensordict("next");
  Entry ea = td.pop("a");
  ASSERT_TRUE(ea.is_tensor());
  EXPECT_TRUE(ea.tensor().is_same(a));
  Entry en = td.pop("next");
  ASSERT_TRUE(en.is_tensordict());
  EXPECT_TRUE(en.tensordict().is_same(next));
  EXPECT_TRUE(td.empty());
}

TEST(TensorDictRename, RenameKeyMovesTheEntryToTheEndUnderTheNewName) {
  TensorDict td({{"a", torch::zeros({2})},
                 {"b", torch::zeros({2})},
                 {"c", torch::zeros({2})}},
                {2});
  at::Tensor a = td.get("a");
  const TensorDict& ret = td.rename_key_("a", "z");
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_EQ(td.keys(), Keys({"b", "c", "z"}));
  EXPECT_TRUE(td.get("z").is_same(a));
}

TEST(TensorDictRename, RenameKeyToANestedKeyCreatesTheSubDict) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  td.rename_key_("a", {"other", "a"});
  EXPECT_EQ(td.keys(true),
            Keys({"next", {"next", "obs"}, "other", {"other", "a"}}));
  EXPECT_TRUE(td.get({"other", "a"}).is_same(a));
}

TEST(TensorDictRename, RenameSubDictKeepsTheSubDict) {
  TensorDict td = MakeDict();
  TensorDict next = td.get_tensordict("next");
  td.rename_key_("next", "after");
  EXPECT_TRUE(td.get_tensordict("after").is_same(next));
  EXPECT_FALSE(td.contains("next"));
}

TEST(TensorDictRename, RenameKeyReplacesAnEntryAtTheNewKey) {
  TensorDict td({{"a", torch::zeros({2})}, {"b", torch::ones({2})}}, {2});
  at::Tensor a = td.get("a");
  td.rename_key_("a", "b");
  EXPECT_EQ(td.keys(), Keys({"b"}));
  EXPECT_TRUE(td.get("b").is_same(a));
}

TEST(TensorDictRename, RenameKeyToItselfIsANoOp) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  td.rename_key_("a", "a");
  ExpectUnchanged(td, s);
}

// rename_key_ keeps Python's order: onto an existing key, the entry takes
// that key's place; onto a new one, it is appended to the new key's parent.

// {"c", "a", "b"}, batch [4]: keys out of sorted order.
TensorDict MakeCAB() {
  return TensorDict({{"c", torch::zeros({4})},
                     {"a", torch::ones({4})},
                     {"b", torch::full({4}, 2.0)}},
                    {4});
}

TEST(TensorDictRename, RenameOntoAnExistingKeyReplacesItWhereItStands) {
  TensorDict td = MakeCAB();
  at::Tensor a = td.get("a");
  td.rename_key_("a", "c");
  EXPECT_EQ(td.keys(), Keys({"c", "b"}));
  EXPECT_TRUE(td.get("c").is_same(a));
  // Onto a missing key: appended.
  at::Tensor c = td.get("c");
  td.rename_key_("c", "z");
  EXPECT_EQ(td.keys(), Keys({"b", "z"}));
  EXPECT_TRUE(td.get("z").is_same(c));
}

TEST(TensorDictRename, NestedRenameOntoAnExistingKeyReplacesItWhereItStands) {
  TensorDict td({{"c", torch::zeros({4})},
                 {{"s", "y"}, torch::zeros({4})},
                 {{"s", "x"}, torch::ones({4})},
                 {{"s", "w"}, torch::ones({4})}},
                {4});
  at::Tensor x = td.get({"s", "x"});
  td.rename_key_({"s", "x"}, {"s", "y"});
  EXPECT_EQ(td.keys(true), Keys({"c", "s", {"s", "y"}, {"s", "w"}}));
  EXPECT_TRUE(td.get({"s", "y"}).is_same(x));
  // Onto a missing nested key: appended to its new parent.
  at::Tensor c = td.get("c");
  td.rename_key_("c", {"s", "v"});
  EXPECT_EQ(td.keys(true), Keys({"s", {"s", "y"}, {"s", "w"}, {"s", "v"}}));
  EXPECT_TRUE(td.get({"s", "v"}).is_same(c));
}

TEST(TensorDictRename, RenamingAKeyOntoItsOwnParentThrowsAndChangesNothing) {
  TensorDict td({{"x", torch::zeros({4})}, {{"a", "b"}, torch::ones({4})}},
                {4});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td.rename_key_({"a", "b"}, "a");
      },
      "cannot rename key ('a', 'b') to a: the old key lies inside "
      "the new one");
  ExpectUnchanged(td, s);
}

TEST(TensorDictRename, RenameErrorsLeaveTheDictUnchanged) {
  TensorDict td({{"a", torch::zeros({4, 3})},
                 {"sub", TensorDict({}, {4, 5})},
                 {"next", TensorDict({{"x", torch::zeros({4})}}, {4})}},
                {4});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { td.rename_key_("zz", "y"); },
      "key zz not found in TensorDict with keys [a, sub, next, ('next', 'x')]");
  ExpectThrowsMsg(
      [&] {
        td.rename_key_("next", {"next", "inner"});
      },
      "cannot rename key next to ('next', 'inner'): the new key lies inside "
      "the old one");
  ExpectThrowsMsg(
      [&] {
        td.rename_key_("a", {"sub", "a"});
      },
      "key ('sub', 'a'): expected leading dims [4, 5], got [4, 3]");
  ExpectUnchanged(td, s);
}

// ---------------------------------------------------------------------------
// Handle semantics and copies
// ---------------------------------------------------------------------------

TEST(TensorDictHandle, CopyingTheHandleAliasesTheSameDict) {
  TensorDict td = MakeDict();
  TensorDict alias = td;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_TRUE(alias.is_same(td));
  alias.set("x", torch::zeros({4}));
  EXPECT_TRUE(td.contains("x"));
  td.erase("a");
  EXPECT_FALSE(alias.contains("a"));
  EXPECT_FALSE(td.is_same(MakeDict()));
}

TEST(TensorDictHandle, CloneMakesADeepCopy) {
  TensorDict td = MakeDict();
  td.set({"next", "sub"}, TensorDict({{"y", torch::rand({4, 2, 3})}}, {4, 2}));
  TensorDict c = td.clone();
  EXPECT_FALSE(c.is_same(td));
  ASSERT_EQ(c.keys(true), td.keys(true));
  EXPECT_TRUE(c.batch_size() == td.batch_size().vec());
  EXPECT_TRUE(c.get_tensordict({"next", "sub"}).batch_size() ==
              std::vector<int64_t>({4, 2}));
  for (const auto& k : td.keys(true, true)) {
    EXPECT_FALSE(c.get(k).is_same(td.get(k))) << k;
    EXPECT_NE(c.get(k).data_ptr(), td.get(k).data_ptr()) << k;
    EXPECT_TRUE(at::equal(c.get(k), td.get(k))) << k;
  }
  EXPECT_FALSE(c.get_tensordict("next").is_same(td.get_tensordict("next")));
  c.get("a").fill_(-1);
  c.set({"next", "new"}, torch::zeros({4}));
  EXPECT_FALSE(td.get("a").eq(-1).any().item<bool>());
  EXPECT_FALSE(td.contains({"next", "new"}));
}

TEST(TensorDictHandle, CopyIsShallowNewStructureSameTensors) {
  TensorDict td = MakeDict();
  TensorDict c = td.copy();
  EXPECT_FALSE(c.is_same(td));
  ASSERT_EQ(c.keys(true), td.keys(true));
  for (const auto& k : td.keys(true, true)) {
    EXPECT_TRUE(c.get(k).is_same(td.get(k))) << k;
  }
  EXPECT_FALSE(c.get_tensordict("next").is_same(td.get_tensordict("next")));
  c.set("x", torch::zeros({4}));
  c.set({"next", "y"}, torch::zeros({4}));
  EXPECT_FALSE(td.contains("x"));
  EXPECT_FALSE(td.contains({"next", "y"}));
  c.get("a").fill_(-1);
  EXPECT_TRUE(td.get("a").eq(-1).all().item<bool>());
}

TEST(TensorDictHandle, ContiguousCopiesOnlyNonContiguousLeaves) {
  at::Tensor t = torch::rand({3, 4}).t();  // [4, 3], not contiguous
  at::Tensor c = torch::rand({4, 2});
  TensorDict td({{"t", t}, {{"next", "c"}, c}}, {4});
  TensorDict out = td.contiguous();
  EXPECT_TRUE(out.get("t").is_contiguous());
  EXPECT_FALSE(out.get("t").is_same(t));
  EXPECT_TRUE(at::equal(out.get("t"), t));
  EXPECT_TRUE(out.get({"next", "c"}).is_same(c));
  EXPECT_FALSE(td.get("t").is_contiguous()) << "the original is not modified";
}

TEST(TensorDictHandle, DetachSharesStorageAndDropsAutograd) {
  at::Tensor w = torch::rand({4, 3}, torch::requires_grad());
  TensorDict td({{"w", w}, {{"next", "y"}, w * 2}}, {4});
  TensorDict d = td.detach();
  EXPECT_FALSE(d.get("w").requires_grad());
  EXPECT_FALSE(d.get({"next", "y"}).requires_grad());
  EXPECT_EQ(d.get("w").data_ptr(), w.data_ptr());
  EXPECT_EQ(d.get({"next", "y"}).data_ptr(), td.get({"next", "y"}).data_ptr());
  EXPECT_TRUE(td.get("w").requires_grad());
}

TEST(TensorDictHandle, ZeroFillsEveryLeafInPlace) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  const TensorDict& ret = td.zero_();
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(a.eq(0).all().item<bool>());
  EXPECT_TRUE(td.get({"next", "obs"}).eq(0).all().item<bool>());
}

TEST(TensorDictHandle, ToDtypeCastsEveryLeafAndKeepsLeavesOfThatDtype) {
  at::Tensor d = torch::rand({4}, torch::kDouble);
  TensorDict td({{"f", torch::arange(4, torch::kFloat)},
                 {{"next", "i"}, torch::arange(4, torch::kLong)},
                 {"d", d}},
                {4});
  TensorDict out = td.to(at::kDouble);
  EXPECT_EQ(out.get("f").scalar_type(), at::kDouble);
  EXPECT_EQ(out.get({"next", "i"}).scalar_type(), at::kDouble);
  EXPECT_TRUE(out.get("d").is_same(d));
  EXPECT_TRUE(
      at::equal(out.get({"next", "i"}), torch::arange(4, torch::kDouble)));
  EXPECT_EQ(td.get("f").scalar_type(), at::kFloat)
      << "the original is not modified";
  EXPECT_TRUE(out.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({4}));
}

TEST(TensorDictHandle, ToCpuSetsTheDeviceAndKeepsCpuLeaves) {
  TensorDict td = MakeDict();
  for (TensorDict out : {td.to(at::Device(at::kCPU)), td.cpu()}) {
    ASSERT_TRUE(out.device().has_value());
    EXPECT_EQ(*out.device(), at::Device(at::kCPU));
    ASSERT_TRUE(out.get_tensordict("next").device().has_value());
    EXPECT_EQ(*out.get_tensordict("next").device(), at::Device(at::kCPU));
    EXPECT_TRUE(out.get("a").is_same(td.get("a")));
    EXPECT_TRUE(out.get({"next", "obs"}).is_same(td.get({"next", "obs"})));
    EXPECT_FALSE(out.is_same(td));
  }
  EXPECT_FALSE(td.device().has_value()) << "the original is not modified";
}

TEST(TensorDictHandle, ToAnotherDeviceMovesEveryLeaf) {
  TensorDict td = MakeDict();
  TensorDict out = td.to(at::Device(at::kMeta));
  ASSERT_TRUE(out.device().has_value());
  EXPECT_TRUE(out.device()->is_meta());
  EXPECT_TRUE(out.get("a").device().is_meta());
  EXPECT_TRUE(out.get({"next", "obs"}).device().is_meta());
  EXPECT_EQ(out.get({"next", "obs"}).sizes(), c10::IntArrayRef({4, 2}));
  EXPECT_TRUE(td.get("a").device().is_cpu());
}

// ---------------------------------------------------------------------------
// Comparisons and reductions
// ---------------------------------------------------------------------------

TEST(TensorDictCompare, EqualityWithADictGivesBoolLeavesWithTheSameStructure) {
  TensorDict a = MakeDict();
  TensorDict b = a.clone();
  b.get("a")[0][0].fill_(-1.0);
  TensorDict eq = a == b;
  ASSERT_EQ(eq.keys(true), a.keys(true));
  EXPECT_TRUE(eq.batch_size() == std::vector<int64_t>({4}));
  EXPECT_TRUE(eq.get_tensordict("next").batch_size() ==
              std::vector<int64_t>({4}));
  EXPECT_EQ(eq.get("a").scalar_type(), at::kBool);
  EXPECT_EQ(eq.get("a").sizes(), c10::IntArrayRef({4, 3}));
  EXPECT_FALSE(eq.get("a")[0][0].item<bool>());
  EXPECT_EQ(eq.get("a").sum().item<int64_t>(), 11);
  EXPECT_TRUE(eq.get({"next", "obs"}).all().item<bool>());
  EXPECT_FALSE(eq.all());
  EXPECT_TRUE(eq.any());

  TensorDict ne = a != b;
  EXPECT_EQ(ne.get("a").sum().item<int64_t>(), 1);
  EXPECT_FALSE(ne.get({"next", "obs"}).any().item<bool>());
  EXPECT_TRUE((a == a.clone()).all());
  EXPECT_FALSE((a != a.clone()).any());
}

TEST(TensorDictCompare, ComparisonWithAScalarComparesEveryLeaf) {
  TensorDict td({{"z", torch::zeros({3, 2})},
                 {{"next", "o"}, torch::ones({3}, torch::kLong)}},
                {3});
  TensorDict eq0 = td == 0;
  EXPECT_EQ(eq0.get("z").scalar_type(), at::kBool);
  EXPECT_TRUE(eq0.get("z").all().item<bool>());
  EXPECT_FALSE(eq0.get({"next", "o"}).any().item<bool>());
  EXPECT_TRUE((td != 2).all());
  EXPECT_FALSE((td == 0).all());
  EXPECT_TRUE((td == 1).any());
  EXPECT_TRUE((td.get_tensordict("next") == 1).all());
}

TEST(TensorDictCompare, ComparingDictsWithDifferentKeysThrows) {
  TensorDict a({{"x", torch::zeros({2})}, {"b", torch::zeros({2})}}, {2});
  TensorDict b({{"x", torch::zeros({2})}, {{"n", "c"}, torch::zeros({2})}},
               {2});
  const std::string msg =
      ": TensorDicts have different keys: missing from the left-hand side: "
      "[('n', 'c')]; missing from the right-hand side: [b]";
  ExpectThrowsMsg([&] { (void)(a == b); }, "operator==" + msg);
  ExpectThrowsMsg([&] { (void)(a != b); }, "operator!=" + msg);
}

TEST(TensorDictCompare, AllAndAnyReduceOverEveryLeafIncludingNestedOnes) {
  TensorDict td({{"t", torch::ones({2}, torch::kBool)},
                 {{"next", "f"}, torch::tensor({true, false})}},
                {2});
  EXPECT_FALSE(td.all());
  EXPECT_TRUE(td.any());
  td.get({"next", "f"}).fill_(true);
  EXPECT_TRUE(td.all());
  td.zero_();
  EXPECT_FALSE(td.any());
  EXPECT_FALSE(td.all());
}

TEST(TensorDictCompare, AllIsTrueAndAnyIsFalseForADictWithoutLeaves) {
  TensorDict td({{"sub", TensorDict({}, {2})}}, {2});
  EXPECT_TRUE(td.all());
  EXPECT_FALSE(td.any());
  EXPECT_TRUE(TensorDict().all());
  EXPECT_FALSE(TensorDict().any());
}

}  // namespace
