// Tests for apply, key manipulation, arithmetic, the key differences of
// operations on two dicts, masking, reductions and the dtype/autograd helpers
// of TensorDict, with their error messages.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <string>
#include <vector>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using tensordict::Entry;
using tensordict::NestedKey;
using tensordict::TensorDict;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

// {"a": [4, 3] f32 (0..11), "next": {"obs": [4, 2] f32 ones}}, batch [4].
TensorDict MakeDict() {
  return TensorDict({{"a", torch::arange(12, torch::kFloat).reshape({4, 3})},
                     {{"next", "obs"}, torch::ones({4, 2})}},
                    {4});
}

// A flat dict with a float and a bool leaf, batch [2, 3].
TensorDict MakeFlat() {
  return TensorDict({{"x", torch::arange(6, torch::kFloat).reshape({2, 3})},
                     {"y", torch::ones({2, 3, 2})}},
                    {2, 3});
}

// ===========================================================================
// Apply
// ===========================================================================

TEST(ApplyTest, ApplyMapsEveryLeafOfAFlatDict) {
  TensorDict td = MakeFlat();
  TensorDict out = td.apply([](const at::Tensor& t) { return t * 2; });
  EXPECT_EQ(out.keys(), Keys({"x", "y"}));
  EXPECT_EQ(out.batch_size().vec(), std::vector<int64_t>({2, 3}));
  EXPECT_TRUE(at::equal(out.get("x"), td.get("x") * 2));
  EXPECT_TRUE(at::equal(out.get("y"), td.get("y") * 2));
  EXPECT_FALSE(out.get("x").is_same(td.get("x")));
}

TEST(ApplyTest, ApplyRecursesIntoSubDictsKeepingOrderAndBatchSizes) {
  TensorDict td = MakeDict();
  TensorDict sub({{"z", torch::zeros({4, 5, 1})}}, {4, 5});
  td.set({"next", "deep"}, sub);
  TensorDict out = td.apply([](const at::Tensor& t) { return t + 1; });
  EXPECT_EQ(out.keys(true), Keys({"a",
                                  "next",
                                  {"next", "obs"},
                                  {"next", "deep"},
                                  {"next", "deep", "z"}}));
  EXPECT_EQ(out.get_tensordict({"next", "deep"}).batch_size().vec(),
            std::vector<int64_t>({4, 5}));
  EXPECT_TRUE(at::equal(out.get({"next", "obs"}), torch::full({4, 2}, 2.0)));
  EXPECT_FALSE(out.get_tensordict("next").is_same(td.get_tensordict("next")));
}

TEST(ApplyTest, UndefinedResultDropsTheKeyAndKeepsAnEmptiedSubDict) {
  TensorDict td = MakeDict();
  TensorDict out = td.named_apply(
      [](const NestedKey& key, const at::Tensor& t) -> at::Tensor {
        if (key == NestedKey({"next", "obs"})) return {};
        return t;
      });
  EXPECT_EQ(out.keys(true), Keys({"a", "next"}));
  EXPECT_TRUE(out.get_tensordict("next").empty());
  EXPECT_TRUE(out.get("a").is_same(td.get("a")));
}

TEST(ApplyTest, NamedApplyPassesTheFullNestedKey) {
  TensorDict td = MakeDict();
  std::vector<NestedKey> seen;
  TensorDict out = td.named_apply([&](const NestedKey& k, const at::Tensor& t) {
    seen.push_back(k);
    return t;
  });
  EXPECT_EQ(seen, Keys({"a", {"next", "obs"}}));
}

TEST(ApplyTest, NewBatchSizeAppliesToTheRootAndExtendsSubDicts) {
  TensorDict td({{"a", torch::zeros({4, 3})}}, {4});
  td.set("sub", TensorDict({{"b", torch::zeros({4, 5, 2})}}, {4, 5}));
  // Keep only the first 2 rows.
  TensorDict out =
      td.apply([](const at::Tensor& t) { return t.slice(0, 0, 2); },
               std::vector<int64_t>{2});
  EXPECT_EQ(out.batch_size().vec(), std::vector<int64_t>({2}));
  EXPECT_EQ(out.get_tensordict("sub").batch_size().vec(),
            std::vector<int64_t>({2, 5}));
  EXPECT_EQ(out.get({"sub", "b"}).sizes().vec(),
            std::vector<int64_t>({2, 5, 2}));
}

TEST(ApplyTest, ResultNotStartingWithTheBatchSizeNamesTheKey) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg(
      [&] {
        (void)td.apply([](const at::Tensor& t) { return t.select(0, 0); });
      },
      "apply: key a: the result's shape [3] does not start with the "
      "batch_size [4]");
  ExpectThrowsMsg(
      [&] {
        (void)td.apply([](const at::Tensor& t) { return t; },
                       std::vector<int64_t>{2});
      },
      "apply: key a: the result's shape [4, 3] does not start with the "
      "batch_size [2]");
}

TEST(ApplyTest, ApplyWithAnotherDictWalksTheLeavesInLockstep) {
  TensorDict a = MakeDict();
  // Same keys, different insertion order.
  TensorDict b(
      {{{"next", "obs"}, torch::full({4, 2}, 3.0)}, {"a", torch::ones({4, 3})}},
      {4});
  TensorDict out = a.apply(
      [](const at::Tensor& x, const at::Tensor& y) { return x + y; }, b);
  EXPECT_EQ(out.keys(true), a.keys(true));
  EXPECT_TRUE(at::equal(out.get("a"), a.get("a") + 1));
  EXPECT_TRUE(at::equal(out.get({"next", "obs"}), torch::full({4, 2}, 4.0)));
}

TEST(ApplyTest, ApplyOverSeveralDictsPassesOneTensorPerDict) {
  TensorDict a = MakeFlat();
  TensorDict b = a.clone();
  TensorDict c = a.clone();
  TensorDict out = a.apply(
      [](const std::vector<at::Tensor>& ts) {
        EXPECT_EQ(ts.size(), 3u);
        return ts[0] + ts[1] + ts[2];
      },
      {b, c});
  EXPECT_TRUE(at::equal(out.get("x"), a.get("x") * 3));
}

TEST(ApplyTest, LockstepApplyWithDifferentKeysListsTheDifferences) {
  TensorDict a = MakeDict();
  TensorDict b({{"a", torch::ones({4, 3})}, {"c", torch::ones({4})}}, {4});
  ExpectThrowsMsg(
      [&] {
        (void)a.apply([](const at::Tensor& x, const at::Tensor&) { return x; },
                      b);
      },
      "apply: TensorDicts have different keys: missing from the left-hand "
      "side: [c]; "
      "missing from the right-hand side: [('next', 'obs')]");
  ExpectThrowsMsg(
      [&] {
        (void)a.apply([](const std::vector<at::Tensor>& ts) { return ts[0]; },
                      {a.clone(), b});
      },
      "apply: TensorDicts have different keys: missing from the left-hand "
      "side: [c]; "
      "missing from the right-hand side: [('next', 'obs')]");
}

TEST(ApplyTest, InPlaceApplyCopiesIntoTheExistingLeaves) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  at::Tensor obs = td.get({"next", "obs"});
  const TensorDict& ret = td.apply_([](const at::Tensor& t) { return t * 10; });
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_TRUE(
      at::equal(a, torch::arange(12, torch::kFloat).reshape({4, 3}) * 10));
  EXPECT_TRUE(at::equal(obs, torch::full({4, 2}, 10.0)));
}

TEST(ApplyTest, InPlaceApplyBroadcastsResultsAndSkipsUndefinedOnes) {
  TensorDict td = MakeDict();
  td.apply_([](const at::Tensor& t) -> at::Tensor {
    if (t.size(1) == 2) return {};
    return torch::zeros({3});
  });
  EXPECT_TRUE(at::equal(td.get("a"), torch::zeros({4, 3})));
  EXPECT_TRUE(at::equal(td.get({"next", "obs"}), torch::ones({4, 2})));
}

TEST(ApplyTest, InPlaceApplyReturningTheLeavesThemselvesCopiesNothing) {
  // Every result is its own leaf: nothing to copy (LibTorch 2.14's
  // _foreach_copy_ refuses an empty list, so the copy must be skipped).
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  td.apply_([](const at::Tensor& t) { return t.zero_(); });
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(at::equal(a, torch::zeros({4, 3})));
  EXPECT_TRUE(at::equal(td.get({"next", "obs"}), torch::zeros({4, 2})));
}

TEST(ApplyTest, InPlaceApplyWithABadShapeChangesNothing) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td.apply_([](const at::Tensor& t) {
          return t.size(1) == 2 ? torch::zeros({4, 5}) : torch::zeros_like(t);
        });
      },
      "apply_: key ('next', 'obs'): cannot copy a result of shape [4, 5] into "
      "the leaf of shape [4, 2]");
  ExpectUnchanged(td, s);
}

// ===========================================================================
// Key manipulation
// ===========================================================================

TEST(KeyOpsTest, UpdateSetsNewKeysAndReplacesLeaves) {
  TensorDict td = MakeDict();
  at::Tensor old_a = td.get("a");
  at::Tensor new_a = torch::zeros({4, 3});
  at::Tensor b = torch::ones({4});
  const TensorDict& ret = td.update(TensorDict({{"a", new_a}, {"b", b}}, {4}));
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_EQ(td.keys(), Keys({"a", "next", "b"}));
  EXPECT_TRUE(td.get("a").is_same(new_a));
  EXPECT_TRUE(td.get("b").is_same(b));
}

TEST(KeyOpsTest, UpdateMergesIntoAnExistingSubDict) {
  TensorDict td = MakeDict();
  TensorDict next = td.get_tensordict("next");
  at::Tensor r = torch::zeros({4, 1});
  td.update(TensorDict({{{"next", "reward"}, r}}, {4}));
  EXPECT_TRUE(td.get_tensordict("next").is_same(next));
  EXPECT_EQ(next.keys(), Keys({"obs", "reward"}));
  EXPECT_TRUE(next.get("reward").is_same(r));
}

TEST(KeyOpsTest, UpdateFromASubDictOfItselfUsesTheKeysItHadBefore) {
  // `other` is td["a"], which the update itself grows: every set is planned
  // from the keys before the first one, whatever the update adds on the way.
  at::Tensor x = torch::zeros({4});
  at::Tensor y = torch::ones({4});
  TensorDict td({{{"a", "a", "x"}, x}, {{"a", "y"}, y}}, {4});
  td.update(td.get_tensordict("a"));
  EXPECT_EQ(
      td.keys(true),
      (std::vector<NestedKey>{
          "a", {"a", "a"}, {"a", "a", "x"}, {"a", "y"}, {"a", "x"}, "y"}));
  EXPECT_TRUE(td.get({"a", "x"}).is_same(x));
  EXPECT_TRUE(td.get("y").is_same(y));
}

TEST(KeyOpsTest, FailedUpdateLeavesTheDictUnchanged) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  TensorDict other({{"z", torch::zeros({4})}}, {4});
  other.set("next", TensorDict({{"obs", torch::zeros({4, 2})}}, {4}));
  other.set("a", TensorDict({}, {4}));  // a tensor lives at "a" in td
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td.update(other); },
      "key a: cannot set a TensorDict where a tensor lives");
  ExpectUnchanged(td, s);
}

TEST(KeyOpsTest, InPlaceUpdateCopiesIntoTheExistingLeaves) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  at::Tensor obs = td.get({"next", "obs"});
  td.update_(TensorDict({{"a", torch::zeros({4, 3})},
                         {{"next", "obs"}, torch::full({4, 2}, 7.0)}},
                        {4}));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_TRUE(at::equal(a, torch::zeros({4, 3})));
  EXPECT_TRUE(at::equal(obs, torch::full({4, 2}, 7.0)));
}

TEST(KeyOpsTest, InPlaceUpdateValidatesEveryKeyBeforeWriting) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        td.update_(TensorDict({{"a", torch::zeros({4, 3})},
                               {{"next", "missing"}, torch::zeros({4})}},
                              {4}));
      },
      "key ('next', 'missing') not found in TensorDict with keys [a, next, "
      "('next', 'obs')]");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.update_(TensorDict({{"a", torch::zeros({4, 3})},
                               {{"next", "obs"}, torch::zeros({4, 5})}},
                              {4}));
      },
      "update_: key ('next', 'obs'): cannot write a value of shape [4, 5] into "
      "the stored tensor of shape [4, 2]");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.update_(TensorDict(
            {{"a", torch::zeros({4, 3})},
             {"next", TensorDict({{"obs", TensorDict({}, {4})}}, {4})}},
            {4}));
      },
      "update_: key ('next', 'obs'): cannot write a TensorDict where a "
      "tensor lives");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.update_(TensorDict({{"next", torch::zeros({4})}}, {4}));
      },
      "update_: key next: cannot write a tensor where a TensorDict lives");
  ExpectUnchanged(td, s);
}

TEST(KeyOpsTest, SelectKeepsOnlyTheGivenKeysWithTheSameTensors) {
  TensorDict td = MakeDict();
  td.set({"next", "reward"}, torch::zeros({4, 1}));
  TensorDict out = td.select({{"next", "reward"}, "a"});
  EXPECT_EQ(out.keys(true), Keys({"next", {"next", "reward"}, "a"}));
  EXPECT_TRUE(out.get("a").is_same(td.get("a")));
  EXPECT_FALSE(out.get_tensordict("next").is_same(td.get_tensordict("next")));
  EXPECT_EQ(out.batch_size().vec(), std::vector<int64_t>({4}));
  // A whole sub-dict.
  TensorDict whole = td.select({"next"});
  EXPECT_EQ(whole.keys(true),
            Keys({"next", {"next", "obs"}, {"next", "reward"}}));
}

TEST(KeyOpsTest, SelectOfAMissingKeyListsTheAvailableKeys) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)td.select({"a", "nope"});
      },
      "key nope not found in TensorDict with keys [a, next, ('next', 'obs')]");
}

TEST(KeyOpsTest, ExcludeDropsKeysAndIgnoresMissingOnes) {
  TensorDict td = MakeDict();
  TensorDict out = td.exclude({{"next", "obs"}, "nope", {"x", "y"}});
  EXPECT_EQ(out.keys(true), Keys({"a", "next"}));
  EXPECT_TRUE(out.get("a").is_same(td.get("a")));
  EXPECT_EQ(td.keys(true), Keys({"a", "next", {"next", "obs"}}));
}

TEST(KeyOpsTest, FlattenKeysJoinsNestedKeysWithTheSeparator) {
  TensorDict td = MakeDict();
  TensorDict flat = td.flatten_keys();
  EXPECT_EQ(flat.keys(true), Keys({"a", "next.obs"}));
  EXPECT_TRUE(flat.get("next.obs").is_same(td.get({"next", "obs"})));
  EXPECT_EQ(td.flatten_keys("/").keys(), Keys({"a", "next/obs"}));
}

TEST(KeyOpsTest, FlattenKeysCollisionIsAnError) {
  TensorDict td = MakeDict();
  td.set("next.obs", torch::zeros({4}));
  ExpectThrowsMsg([&] { (void)td.flatten_keys(); },
                  "flatten_keys: keys ('next', 'obs') and next.obs both "
                  "flatten to 'next.obs'");
}

TEST(KeyOpsTest, UnflattenKeysInvertsFlattenKeys) {
  TensorDict td = MakeDict();
  td.set({"next", "deep", "x"}, torch::zeros({4}));
  TensorDict back = td.flatten_keys().unflatten_keys();
  EXPECT_EQ(back.keys(true), td.keys(true));
  EXPECT_TRUE(
      back.get({"next", "deep", "x"}).is_same(td.get({"next", "deep", "x"})));
  EXPECT_EQ(back.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>({4}));
}

TEST(KeyOpsTest, UnflattenKeysCollisionIsAnError) {
  TensorDict td({{"a", torch::zeros({4})}, {"a.b", torch::zeros({4})}}, {4});
  ExpectThrowsMsg([&] { (void)td.unflatten_keys(); },
                  "unflatten_keys: key a.b needs a sub-TensorDict at a, where "
                  "a tensor lives");
  TensorDict td2({{"a.b", torch::zeros({4})}, {"a", torch::zeros({4})}}, {4});
  ExpectThrowsMsg([&] { (void)td2.unflatten_keys(); },
                  "unflatten_keys: key a collides with another key at a");
}

TEST(KeyOpsTest, UnflattenKeysMergesSubDictsAndNamesDeepCollisions) {
  at::Tensor b = torch::zeros({4});
  at::Tensor c = torch::ones({4});
  TensorDict td({{"a.b", b}, {{"a", "c"}, c}}, {4});
  TensorDict out = td.unflatten_keys();
  EXPECT_EQ(out.keys(true),
            (std::vector<NestedKey>{"a", {"a", "b"}, {"a", "c"}}));
  EXPECT_TRUE(out.get({"a", "b"}).is_same(b));
  EXPECT_TRUE(out.get({"a", "c"}).is_same(c));
  TensorDict clash({{"a.s.x", b}, {{"a", "s", "x"}, c}}, {4});
  ExpectThrowsMsg([&] { (void)clash.unflatten_keys(); },
                  "unflatten_keys: key a collides with another key at ('a', "
                  "'s', 'x')");
}

TEST(KeyOpsTest, ItemsAndValuesFollowTheOrderOfKeys) {
  TensorDict td = MakeDict();
  for (bool nested : {false, true}) {
    for (bool leaves : {false, true}) {
      auto keys = td.keys(nested, leaves);
      auto items = td.items(nested, leaves);
      auto values = td.values(nested, leaves);
      ASSERT_EQ(items.size(), keys.size());
      ASSERT_EQ(values.size(), keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        EXPECT_EQ(items[i].first, keys[i]);
        Entry e = td.get_entry(keys[i]);
        EXPECT_EQ(items[i].second.is_tensor(), e.is_tensor());
        if (e.is_tensor()) {
          EXPECT_TRUE(items[i].second.tensor().is_same(e.tensor()));
          EXPECT_TRUE(values[i].tensor().is_same(e.tensor()));
        } else {
          EXPECT_TRUE(items[i].second.tensordict().is_same(e.tensordict()));
          EXPECT_TRUE(values[i].tensordict().is_same(e.tensordict()));
        }
      }
    }
  }
}

// ===========================================================================
// Arithmetic
// ===========================================================================

TEST(ArithmeticTest, DictPlusDictAddsMatchingLeaves) {
  TensorDict a = MakeDict();
  TensorDict b =
      a.apply([](const at::Tensor& t) { return torch::ones_like(t); });
  TensorDict out = a + b;
  EXPECT_TRUE(at::equal(out.get("a"), a.get("a") + 1));
  EXPECT_TRUE(at::equal(out.get({"next", "obs"}), torch::full({4, 2}, 2.0)));
  EXPECT_TRUE(at::equal((a - b).get("a"), a.get("a") - 1));
  EXPECT_TRUE(at::equal((a * b).get("a"), a.get("a")));
  EXPECT_TRUE(at::equal((a / (b * 2)).get("a"), a.get("a") / 2));
}

TEST(ArithmeticTest, DictAndScalarOperatorsWorkOnBothSides) {
  TensorDict a = MakeDict();
  EXPECT_TRUE(at::equal((a + 1).get("a"), a.get("a") + 1));
  EXPECT_TRUE(at::equal((1 + a).get("a"), a.get("a") + 1));
  EXPECT_TRUE(at::equal((a - 1).get("a"), a.get("a") - 1));
  EXPECT_TRUE(at::equal((a * 3).get("a"), a.get("a") * 3));
  EXPECT_TRUE(at::equal((3 * a).get("a"), a.get("a") * 3));
  EXPECT_TRUE(at::equal((a / 2).get("a"), a.get("a") / 2));
  EXPECT_TRUE(at::equal((-a).get({"next", "obs"}), -torch::ones({4, 2})));
}

TEST(ArithmeticTest, BatchShapedTensorIsExpandedToEachLeaf) {
  TensorDict td = MakeDict();
  at::Tensor w = torch::arange(4, torch::kFloat);  // batch-shaped
  TensorDict out = td * w;
  EXPECT_TRUE(at::equal(out.get("a"), td.get("a") * w.unsqueeze(1)));
  EXPECT_TRUE(
      at::equal(out.get({"next", "obs"}), w.unsqueeze(1).expand({4, 2})));
  // A 0-dim tensor acts like a scalar.
  EXPECT_TRUE(at::equal((td + torch::tensor(2.0)).get("a"), td.get("a") + 2));
}

TEST(ArithmeticTest, TensorNotBroadcastingToTheBatchIsAnError) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg(
      [&] { (void)(td + torch::ones({3})); },
      "add: the tensor operand of shape [3] does not broadcast to the "
      "batch_size [4] (it is aligned with the leading batch dims)");
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] {
        td *= torch::ones({4, 3});
      },
      "mul_: the tensor operand of shape [4, 3] does not broadcast to the "
      "batch_size [4] (it is aligned with the leading batch dims)");
  ExpectUnchanged(td, s);
}

TEST(ArithmeticTest, DictsWithDifferentKeysListTheDifferences) {
  TensorDict a = MakeDict();
  TensorDict b({{"a", torch::ones({4, 3})}}, {4});
  const std::string diff =
      ": TensorDicts have different keys: missing from the right-hand side: "
      "[('next', 'obs')]";
  ExpectThrowsMsg([&] { (void)(a + b); }, "add" + diff);
  ExpectThrowsMsg([&] { (void)(a / b); }, "div" + diff);
  Snapshot s = TakeSnapshot(a);
  ExpectThrowsMsg([&] { a += b; }, "add_" + diff);
  ExpectThrowsMsg([&] { a.mul_(b); }, "mul_" + diff);
  ExpectUnchanged(a, s);
  ExpectThrowsMsg([&] { (void)a.where(torch::ones({4}, torch::kBool), b); },
                  "where" + diff);
}

TEST(ArithmeticTest, InPlaceOpsKeepLeafIdentityAndReturnTheLeftDict) {
  TensorDict td = MakeDict();
  at::Tensor a = td.get("a");
  at::Tensor obs = td.get({"next", "obs"});
  at::Tensor expected = a.clone();
  EXPECT_TRUE((td += 1).is_same(td));
  expected += 1;
  EXPECT_TRUE((td *= 2).is_same(td));
  expected *= 2;
  EXPECT_TRUE((td -= 3).is_same(td));
  expected -= 3;
  EXPECT_TRUE((td /= 4).is_same(td));
  expected /= 4;
  TensorDict other = td.clone();
  td.add_(other, 2);  // td + 2 * td
  expected = expected * 3;
  td.sub_(other);
  expected = expected - other.get("a");
  td.mul_(other);
  expected = expected * other.get("a");
  td.div_(torch::full({4}, 2.0));
  expected = expected / 2;
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get({"next", "obs"}).is_same(obs));
  EXPECT_TRUE(at::allclose(a, expected));
}

TEST(ArithmeticTest, InPlaceOpsBroadcastOtherLeaves) {
  TensorDict td = MakeDict();
  TensorDict other(
      {{"a", torch::ones({4, 1})}, {{"next", "obs"}, torch::ones({4, 2})}},
      {4});
  td += other;
  EXPECT_TRUE(at::equal(td.get("a"),
                        torch::arange(12, torch::kFloat).reshape({4, 3}) + 1));
}

TEST(ArithmeticTest, InPlaceOpThatCannotCastChangesNothing) {
  TensorDict td(
      {{"f", torch::ones({2})}, {"done", torch::zeros({2}, torch::kBool)}},
      {2});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] { td.mul_(2); },
      "mul_: key done: the result type torch.int64 can't be cast to "
      "the leaf's dtype torch.bool");
  ExpectUnchanged(td, s);
  TensorDict ints(
      {{"f", torch::ones({2})}, {"i", torch::ones({2}, torch::kLong)}}, {2});
  Snapshot si = TakeSnapshot(ints);
  ExpectThrowsMsg([&] { ints /= 2; },
                  "div_: key i: the result type torch.float32 can't be cast to "
                  "the leaf's dtype torch.int64");
  ExpectUnchanged(ints, si);
}

TEST(ArithmeticTest, InPlaceOpOnALeafThatRequiresGradIsRejected) {
  TensorDict td({{"w", torch::ones({2}, torch::requires_grad())}}, {2});
  ExpectThrowsMsg(
      [&] { td.add_(1); },
      "add_: key w: a leaf tensor that requires grad cannot be "
      "modified in place (use torch::NoGradGuard, or detach it first)");
  torch::NoGradGuard guard;
  td.add_(1);
  EXPECT_TRUE(at::equal(td.get("w"), torch::full({2}, 2.0)));
}

TEST(ArithmeticTest, AddWithAFloatAlphaOnAnIntegerLeafThrowsAndChangesNothing) {
  TensorDict td(
      {{"a", torch::zeros({6, 3})}, {"i", torch::zeros({6}, torch::kLong)}},
      {6});
  TensorDict other(
      {{"a", torch::ones({6, 3})}, {"i", torch::ones({6}, torch::kLong)}}, {6});
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.add_(other, 0.5); },
                  "add_: key i: alpha must not be a floating-point number for "
                  "a leaf of dtype torch.int64");
  ExpectUnchanged(td, s);
  // An integral alpha is fine.
  td.add_(other, 2);
  EXPECT_TRUE(at::equal(td.get("a"), torch::full({6, 3}, 2.0)));
  EXPECT_TRUE(at::equal(td.get("i"), torch::full({6}, 2, torch::kLong)));
}

TEST(ArithmeticTest, OutOfPlaceOpsKeepAutograd) {
  at::Tensor w = torch::ones({2}, torch::requires_grad());
  TensorDict td({{"w", w}}, {2});
  TensorDict out = td * 3 + td;
  out.get("w").sum().backward();
  EXPECT_TRUE(at::equal(w.grad(), torch::full({2}, 4.0)));
}

TEST(ArithmeticTest, EmptyDictArithmeticIsANoOp) {
  TensorDict td({}, {3});
  TensorDict out = td + 1;
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(out.batch_size().vec(), std::vector<int64_t>({3}));
  td *= 2;
  td += td;
  EXPECT_TRUE(td.empty());
}

// ===========================================================================
// Operations on two dicts (==, !=, +, add_, apply with another dict, where)
// with an empty sub-dict on one side only: a key difference, named
// ===========================================================================

// {"x": [6] f32, "s": empty sub-dict}, and the same without "s".
TensorDict WithEmpty() {
  return TensorDict({{"x", torch::ones({6})}, {"s", TensorDict({}, {6})}}, {6});
}
TensorDict WithoutEmpty() { return TensorDict({{"x", torch::ones({6})}}, {6}); }

// "<op>: ...: missing from the <side> side: [s]": the side that lacks the key,
// alone.
std::string KeysDiffer(const std::string& op, const std::string& side) {
  return op + ": TensorDicts have different keys: missing from the " + side +
         " side: [s]";
}

TEST(BinaryOpKeysTest, ComparingWithAnEmptySubDictOnOneSideNamesTheKey) {
  TensorDict a = WithEmpty();
  TensorDict b = WithoutEmpty();
  ExpectThrowsMsg([&] { (void)(a == b); },
                  KeysDiffer("operator==", "right-hand"));
  ExpectThrowsMsg([&] { (void)(a != b); },
                  KeysDiffer("operator!=", "right-hand"));
  ExpectThrowsMsg([&] { (void)(b == a); },
                  KeysDiffer("operator==", "left-hand"));
  ExpectThrowsMsg([&] { (void)(b != a); },
                  KeysDiffer("operator!=", "left-hand"));
}

TEST(BinaryOpKeysTest, ArithmeticWithAnEmptySubDictOnOneSideNamesTheKey) {
  TensorDict a = WithEmpty();
  TensorDict b = WithoutEmpty();
  ExpectThrowsMsg([&] { (void)(a + b); }, KeysDiffer("add", "right-hand"));
  ExpectThrowsMsg([&] { (void)(b + a); }, KeysDiffer("add", "left-hand"));
  Snapshot sa = TakeSnapshot(a);
  Snapshot sb = TakeSnapshot(b);
  ExpectThrowsMsg([&] { a.add_(b); }, KeysDiffer("add_", "right-hand"));
  ExpectThrowsMsg([&] { b.add_(a); }, KeysDiffer("add_", "left-hand"));
  ExpectUnchanged(a, sa);
  ExpectUnchanged(b, sb);
}

TEST(BinaryOpKeysTest, ApplyAndWhereWithAnEmptySubDictOnOneSideNameTheKey) {
  TensorDict a = WithEmpty();
  TensorDict b = WithoutEmpty();
  auto fn = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  ExpectThrowsMsg([&] { (void)a.apply(fn, b); },
                  KeysDiffer("apply", "right-hand"));
  ExpectThrowsMsg([&] { (void)b.apply(fn, a); },
                  KeysDiffer("apply", "left-hand"));
  at::Tensor cond = torch::tensor({true, false, true, false, true, false});
  ExpectThrowsMsg([&] { (void)a.where(cond, b); },
                  KeysDiffer("where", "right-hand"));
  ExpectThrowsMsg([&] { (void)b.where(cond, a); },
                  KeysDiffer("where", "left-hand"));
}

TEST(BinaryOpKeysTest, ATensorAgainstAnEmptySubDictIsATypeErrorNamingTheKey) {
  TensorDict a = WithEmpty();
  TensorDict t({{"x", torch::ones({6})}, {"s", torch::ones({6})}}, {6});
  // The left-hand side's kind comes first.
  const std::string tail =
      ": key s is a tensor in the left-hand side but a TensorDict in the "
      "right-hand side";
  const std::string dict_first =
      ": key s is a TensorDict in the left-hand side but a tensor in the "
      "right-hand side";
  ExpectThrowsMsg<c10::TypeError>([&] { (void)(a == t); },
                                  "operator==" + dict_first);
  ExpectThrowsMsg<c10::TypeError>([&] { (void)(t != a); }, "operator!=" + tail);
  ExpectThrowsMsg<c10::TypeError>([&] { (void)(t + a); }, "add" + tail);
  Snapshot st = TakeSnapshot(t);
  ExpectThrowsMsg<c10::TypeError>([&] { t.add_(a); }, "add_" + tail);
  ExpectUnchanged(t, st);
  auto fn = [](const at::Tensor& x, const at::Tensor& y) { return x + y; };
  ExpectThrowsMsg<c10::TypeError>([&] { (void)t.apply(fn, a); },
                                  "apply" + tail);
  at::Tensor cond = torch::ones({6}, torch::kBool);
  ExpectThrowsMsg<c10::TypeError>([&] { (void)a.where(cond, t); },
                                  "where" + dict_first);
}

// ===========================================================================
// Masking and reductions
// ===========================================================================

TEST(ReductionTest, WhereSelectsLeafwiseWithABatchShapedCondition) {
  TensorDict a = MakeDict();
  TensorDict b =
      a.apply([](const at::Tensor& t) { return -torch::ones_like(t); });
  at::Tensor cond = torch::tensor({true, false, true, false});
  TensorDict out = a.where(cond, b);
  EXPECT_TRUE(at::equal(out.get("a").select(0, 0), a.get("a").select(0, 0)));
  EXPECT_TRUE(at::equal(out.get("a").select(0, 1), -torch::ones({3})));
  TensorDict s = a.where(cond, 0);
  EXPECT_TRUE(at::equal(
      s.get({"next", "obs"}),
      torch::tensor({1.f, 0.f, 1.f, 0.f}).unsqueeze(1).expand({4, 2})));
}

TEST(ReductionTest, MaskedFillFillsMaskedRowsOfEveryLeaf) {
  TensorDict td = MakeDict();
  at::Tensor mask = torch::tensor({false, true, false, true});
  TensorDict out = td.masked_fill(mask, -1);
  EXPECT_TRUE(at::equal(out.get("a").select(0, 1), -torch::ones({3})));
  EXPECT_TRUE(at::equal(out.get("a").select(0, 0), td.get("a").select(0, 0)));
  EXPECT_TRUE(at::equal(td.get({"next", "obs"}), torch::ones({4, 2})));  // copy
  at::Tensor a = td.get("a");
  EXPECT_TRUE(td.masked_fill_(mask, 5).is_same(td));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(at::equal(a.select(0, 3), torch::full({3}, 5.0)));
}

TEST(ReductionTest, MaskWithTheWrongShapeOrDtypeIsRejected) {
  TensorDict td = MakeDict();
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.masked_fill_(torch::ones({3}, torch::kBool), 0); },
                  "masked_fill_: the mask of shape [3] does not broadcast to "
                  "the batch_size "
                  "[4] (it is aligned with the leading batch dims)");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { td.masked_fill_(torch::ones({4}, torch::kLong), 0); },
      "masked_fill_: the mask must be a bool tensor, got torch.int64");
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        (void)td.where(torch::ones({4, 2}, torch::kBool), 0);
      },
      "where: the condition of shape [4, 2] does not broadcast to the "
      "batch_size "
      "[4] (it is aligned with the leading batch dims)");
}

TEST(ReductionTest, FillFillsALeafOrEveryLeafOfASubDict) {
  TensorDict td = MakeDict();
  td.set({"next", "r"}, torch::zeros({4, 1}));
  at::Tensor a = td.get("a");
  td.fill_("a", 3);
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(at::equal(a, torch::full({4, 3}, 3.0)));
  td.fill_("next", 7);
  EXPECT_TRUE(at::equal(td.get({"next", "obs"}), torch::full({4, 2}, 7.0)));
  EXPECT_TRUE(at::equal(td.get({"next", "r"}), torch::full({4, 1}, 7.0)));
  ExpectThrowsMsg<c10::IndexError>(
      [&] { td.fill_("nope", 0); },
      "key nope not found in TensorDict with keys [a, next, ('next', 'obs'), "
      "('next', 'r')]");
}

TEST(ReductionTest, ReductionOverAllBatchDimsGivesAnEmptyBatch) {
  TensorDict td = MakeDict();
  TensorDict sum = td.sum();
  EXPECT_TRUE(sum.batch_size().empty());
  EXPECT_TRUE(at::equal(sum.get("a"), td.get("a").sum(0)));
  EXPECT_TRUE(at::equal(td.mean().get("a"), td.get("a").mean(0)));
  EXPECT_TRUE(at::equal(td.min().get("a"), torch::tensor({0.f, 1.f, 2.f})));
  EXPECT_TRUE(at::equal(td.max().get("a"), torch::tensor({9.f, 10.f, 11.f})));
  EXPECT_TRUE(sum.get_tensordict("next").batch_size().empty());
}

TEST(ReductionTest, ReductionOverTwoBatchDimsKeepsSubDictExtraDims) {
  TensorDict td({{"x", torch::arange(24, torch::kFloat).reshape({2, 3, 4})}},
                {2, 3});
  td.set("sub", TensorDict({{"y", torch::ones({2, 3, 5})}}, {2, 3, 5}));
  TensorDict out = td.sum();
  EXPECT_EQ(out.get("x").sizes().vec(), std::vector<int64_t>({4}));
  EXPECT_EQ(out.get_tensordict("sub").batch_size().vec(),
            std::vector<int64_t>({5}));
  EXPECT_TRUE(at::equal(out.get({"sub", "y"}), torch::full({5}, 6.0)));
  EXPECT_TRUE(
      at::equal(td.max().get("x"), torch::tensor({20.f, 21.f, 22.f, 23.f})));
}

TEST(ReductionTest, ReductionOverOneDimSupportsKeepdimAndNegativeDims) {
  TensorDict td = MakeFlat();
  TensorDict s0 = td.sum(0);
  EXPECT_EQ(s0.batch_size().vec(), std::vector<int64_t>({3}));
  EXPECT_TRUE(at::equal(s0.get("x"), td.get("x").sum(0)));
  TensorDict s1 = td.mean(-1, /*keepdim=*/true);
  EXPECT_EQ(s1.batch_size().vec(), std::vector<int64_t>({2, 1}));
  EXPECT_EQ(s1.get("y").sizes().vec(), std::vector<int64_t>({2, 1, 2}));
  TensorDict m = td.min(1);
  EXPECT_TRUE(at::equal(m.get("x"), torch::tensor({0.f, 3.f})));
  TensorDict mx = td.max(0, true);
  EXPECT_EQ(mx.batch_size().vec(), std::vector<int64_t>({1, 3}));
  EXPECT_TRUE(at::equal(mx.get("x"), torch::tensor({{3.f, 4.f, 5.f}})));
}

TEST(ReductionTest, OutOfRangeDimNamesTheBatchSize) {
  TensorDict td = MakeFlat();
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.sum(2); },
      "sum: dim 2 is out of range for TensorDict with batch_size [2, 3] (2 "
      "batch dims)");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.max(-3); },
      "max: dim -3 is out of range for TensorDict with batch_size [2, 3] (2 "
      "batch dims)");
}

TEST(ReductionTest, MeanOfAnIntegerLeafNamesTheKey) {
  TensorDict td(
      {{"f", torch::ones({2})}, {"i", torch::ones({2}, torch::kLong)}}, {2});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)td.mean(); },
      "mean: key i has dtype torch.int64; mean needs floating-point or complex "
      "leaves (cast with to_float() first)");
  EXPECT_TRUE(at::equal(td.sum().get("i"), torch::tensor(2, torch::kLong)));
}

TEST(ReductionTest, ReductionOfADictWithNoBatchDimsKeepsTheLeaves) {
  TensorDict td({{"x", torch::tensor({1.f, 5.f})}}, {});
  EXPECT_TRUE(at::equal(td.sum().get("x"), td.get("x")));
  EXPECT_TRUE(at::equal(td.min().get("x"), td.get("x")));
}

// ===========================================================================
// dtype and autograd
// ===========================================================================

TEST(ApplyDtypeTest, DtypeShorthandsCastEveryLeaf) {
  TensorDict td = MakeDict();
  EXPECT_EQ(td.to_double().get({"next", "obs"}).scalar_type(), at::kDouble);
  EXPECT_EQ(td.half().get("a").scalar_type(), at::kHalf);
  EXPECT_EQ(td.bfloat16().get("a").scalar_type(), at::kBFloat16);
  EXPECT_EQ(td.to_double().to_float().get("a").scalar_type(), at::kFloat);
}

TEST(ApplyDtypeTest, RequiresGradSkipsNonFloatingLeaves) {
  TensorDict td(
      {{"f", torch::ones({2})}, {"i", torch::ones({2}, torch::kLong)}}, {2});
  at::Tensor f = td.get("f");
  EXPECT_TRUE(td.requires_grad_().is_same(td));
  EXPECT_TRUE(td.get("f").is_same(f));
  EXPECT_TRUE(f.requires_grad());
  EXPECT_FALSE(td.get("i").requires_grad());
  td.requires_grad_(false);
  EXPECT_FALSE(f.requires_grad());
}

TEST(ApplyDtypeTest, DetachInPlaceKeepsLeafIdentity) {
  at::Tensor w = torch::ones({2}, torch::requires_grad());
  TensorDict td({{"y", w * 2}}, {2});
  at::Tensor y = td.get("y");
  EXPECT_TRUE(y.requires_grad());
  td.detach_();
  EXPECT_TRUE(td.get("y").is_same(y));
  EXPECT_FALSE(y.requires_grad());
}

TEST(ApplyDtypeTest, PinMemoryNeedsCuda) {
  TensorDict td = MakeDict();
  if (!at::hasCUDA()) {
    ExpectThrowsMsg([&] { (void)td.pin_memory(); },
                    "pin_memory: no CUDA device is available");
  } else {
    EXPECT_TRUE(td.pin_memory().get("a").is_pinned());
  }
}

// record_stream needs an accelerator's stream and every leaf on its device.
// A stream value names a device without touching it, so the checks run
// without a GPU.
TEST(ApplyDtypeTest, RecordStreamChecksTheStreamAndEveryLeafFirst) {
  TensorDict td = MakeDict();
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        td.record_stream(
            c10::Stream(c10::Stream::DEFAULT, at::Device(at::kCPU)));
      },
      "record_stream: the stream is on cpu; only an accelerator's stream "
      "(such as cuda:0's) records uses");
  const c10::Stream cuda1(c10::Stream::DEFAULT, at::Device(at::kCUDA, 1));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { td.record_stream(cuda1); },
      "record_stream: key a is on cpu, but the stream is on cuda:1");
  // No leaves: nothing to mark.
  const TensorDict empty({}, {4});
  EXPECT_EQ(&empty.record_stream(cuda1), &empty);
}

}  // namespace
