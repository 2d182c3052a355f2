// Locked dicts (lock_ / unlock_): a locked dict refuses, at every level, to
// add, remove, rename or replace entries, naming the key and changing
// nothing, and still takes writes into its existing tensors. Locking is
// recursive, unlock_ unlocks every level, clones and copies are unlocked,
// memmap_ works on a locked dict, and a replay buffer's storage is locked.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include "test_util.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <string>

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using at::indexing::Slice;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

const std::string kLockedMsg =
    ": the TensorDict is locked: its entries cannot be added, removed, renamed "
    "or replaced (write into existing tensors with set_() or td[i] = row, or "
    "unlock_() it first)";

// {"a": [4, 3], "i": [4] i64, "s": {"x": [4, 2]}}, batch [4].
TensorDict MakeLockable() {
  return TensorDict({{"a", torch::zeros({4, 3})},
                     {"i", torch::zeros({4}, torch::kLong)},
                     {{"s", "x"}, torch::zeros({4, 2})}},
                    {4});
}

TEST(Lock, LockedDictRejectsKeyChangesAndChangesNothing) {
  TensorDict td = MakeLockable();
  td.lock_();
  ASSERT_TRUE(td.is_locked());
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { td.set("z", torch::ones({4})); },
                  "set: key z" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.set("a", torch::ones({4, 3}));
      },
      "set: key a" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.set({"n", "z"}, torch::ones({4}));
      },
      "set: key ('n', 'z')" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { td.set("t", TensorDict({}, {4})); },
                  "set: key t" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { td.erase("a"); }, "erase: key a" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { (void)td.pop("i"); }, "pop: key i" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg([&] { td.rename_key_("a", "z"); },
                  "rename_key_: key a" + kLockedMsg);
  ExpectUnchanged(td, s);
  ExpectThrowsMsg(
      [&] {
        td.update(TensorDict({{"z", torch::ones({4})}}, {4}));
      },
      "update: key z" + kLockedMsg);
  ExpectUnchanged(td, s);
}

TEST(Lock, ALockedDictCanBeMemmappedInPlaceAndStaysLocked) {
  // memmap_ changes no key (as in Python, it works on a locked dict).
  TensorDict td = MakeLockable();
  td.get_tensordict("s").lock_();
  TempDir dir;
  td.memmap_(dir.str());
  EXPECT_TRUE(td.is_memmap());
  EXPECT_TRUE(td.is_locked());
  EXPECT_TRUE(td.get_tensordict("s").is_locked());
  td.lock_();
  TempDir again;
  td.memmap_(again.str());
  EXPECT_EQ(td.saved_path().value(), again.str());
  EXPECT_TRUE(td.is_locked());
}

TEST(Lock, UpdateIntoALockedSubDictNamesTheFullKey) {
  TensorDict td({{"a", torch::zeros({4})}, {{"s", "x"}, torch::zeros({4})}},
                {4});
  td.get_tensordict("s").lock_();
  Snapshot s = TakeSnapshot(td);
  TensorDict other({{"b", torch::ones({4})}, {{"s", "q"}, torch::ones({4})}},
                   {4});
  ExpectThrowsMsg([&] { td.update(other); },
                  "update: key ('s', 'q')" + kLockedMsg);
  ExpectUnchanged(td, s);
  // Replacing an entry of a locked level is refused too.
  TensorDict replace({{{"s", "x"}, torch::ones({4})}}, {4});
  ExpectThrowsMsg([&] { td.update(replace); },
                  "update: key ('s', 'x')" + kLockedMsg);
  ExpectUnchanged(td, s);
}

TEST(Lock, LockedDictRejectsIndexedWritesThatAllocateAKey) {
  TensorDict td = MakeLockable();
  td.lock_();
  Snapshot s = TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({3})},
                  {"i", torch::ones({}, torch::kLong)},
                  {"z", torch::ones({2})}},
                 {});
  ExpectThrowsMsg([&] { td[1] = row; }, "index_put_: key z" + kLockedMsg);
  ExpectUnchanged(td, s);
  TensorDict nested_row(
      {{"a", torch::ones({3})}, {{"s", "q"}, torch::ones({})}}, {});
  ExpectThrowsMsg([&] { td[1] = nested_row; },
                  "index_put_: key ('s', 'q')" + kLockedMsg);
  ExpectUnchanged(td, s);
  // stack_out into a slice names itself.
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(td[Slice(0, 2)], {row, row});
      },
      "stack_out: key z" + kLockedMsg);
  ExpectUnchanged(td, s);
  // stack_out into the dict itself.
  TensorDict small = TensorDict(
      {{"a", torch::zeros({2, 3})}, {"i", torch::zeros({2}, torch::kLong)}},
      {2});
  small.lock_();
  Snapshot ss = TakeSnapshot(small);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::stack_out(small, {row, row});
      },
      "stack_out: key z" + kLockedMsg);
  ExpectUnchanged(small, ss);
}

TEST(Lock, LockedDictAcceptsWritesIntoItsExistingTensors) {
  TensorDict td = MakeLockable();
  td.lock_();
  at::Tensor a = td.get("a");
  at::Tensor i = td.get("i");
  at::Tensor x = td.get({"s", "x"});
  td.set_("a", torch::ones({4, 3}));
  td.update_(TensorDict({{"i", torch::full({4}, 2, torch::kLong)}}, {4}));
  td[1] = TensorDict({{"a", torch::full({3}, 5.0)},
                      {"i", torch::full({}, 7, torch::kLong)},
                      {{"s", "x"}, torch::full({2}, 3.0)}},
                     {});
  td.add_(1);
  td.apply_([](const at::Tensor& t) { return t * 2; });
  EXPECT_TRUE(td.is_locked());
  EXPECT_EQ(td.keys(true), Keys({"a", "i", "s", {"s", "x"}}));
  EXPECT_TRUE(td.get("a").is_same(a));
  EXPECT_TRUE(td.get("i").is_same(i));
  EXPECT_TRUE(td.get({"s", "x"}).is_same(x));
  EXPECT_TRUE(at::equal(
      td.get("a"),
      torch::tensor(
          {{4., 4., 4.}, {12., 12., 12.}, {4., 4., 4.}, {4., 4., 4.}})));
  EXPECT_TRUE(
      at::equal(td.get("i"), torch::tensor({6, 16, 6, 6}, torch::kLong)));
  EXPECT_TRUE(
      at::equal(td.get({"s", "x"}),
                torch::tensor({{2., 2.}, {8., 8.}, {2., 2.}, {2., 2.}})));
}

TEST(Lock, LockIsRecursiveAndUnlockUnlocksEveryLevel) {
  TensorDict td = MakeLockable();
  EXPECT_FALSE(td.is_locked());
  TensorDict sub = td.get_tensordict("s");
  td.lock_();
  EXPECT_TRUE(sub.is_locked());
  Snapshot s = TakeSnapshot(td);
  ExpectThrowsMsg([&] { sub.set("q", torch::ones({4})); },
                  "set: key q" + kLockedMsg);
  ExpectThrowsMsg(
      [&] {
        td.set({"s", "q"}, torch::ones({4}));
      },
      "set: key ('s', 'q')" + kLockedMsg);
  ExpectThrowsMsg(
      [&] {
        td.erase({"s", "x"});
      },
      "erase: key ('s', 'x')" + kLockedMsg);
  ExpectUnchanged(td, s);
  td.unlock_();
  EXPECT_FALSE(td.is_locked());
  EXPECT_FALSE(sub.is_locked());
  td.set({"s", "q"}, torch::ones({4}));
  td.set("z", torch::ones({4}));
  EXPECT_EQ(td.keys(true), Keys({"a", "i", "s", {"s", "x"}, {"s", "q"}, "z"}));
}

TEST(Lock, CloneAndCopyOfALockedDictAreUnlocked) {
  TensorDict td = MakeLockable();
  td.lock_();
  TensorDict c = td.clone();
  TensorDict p = td.copy();
  EXPECT_TRUE(td.is_locked());
  EXPECT_FALSE(c.is_locked());
  EXPECT_FALSE(c.get_tensordict("s").is_locked());
  EXPECT_FALSE(p.is_locked());
  EXPECT_FALSE(p.get_tensordict("s").is_locked());
  c.set("z", torch::ones({4}));
  p.set({"s", "z"}, torch::ones({4}));
  EXPECT_TRUE(p.get("a").is_same(td.get("a")));
  EXPECT_EQ(td.keys(true), Keys({"a", "i", "s", {"s", "x"}}));
}

TEST(Lock, ReplayBufferStorageIsLockedAndStaysConsistent) {
  ReplayBuffer rb(ReplayBufferOptions(4).seed(3));
  auto row = [](int64_t v) {
    return TensorDict({{"obs", torch::full({3}, static_cast<double>(v))},
                       {"id", torch::full({}, v, torch::kLong)}},
                      {});
  };
  rb.add(row(1));
  rb.add(row(2));
  TensorDict st = rb.storage();
  ASSERT_TRUE(st.is_locked());
  Snapshot s = TakeSnapshot(st);
  ExpectThrowsMsg(
      [&] {
        st.set("obs", torch::zeros({4, 3}));
      },
      "set: key obs" + kLockedMsg);
  ExpectThrowsMsg([&] { st.set("extra", torch::zeros({4})); },
                  "set: key extra" + kLockedMsg);
  ExpectThrowsMsg([&] { st.erase("id"); }, "erase: key id" + kLockedMsg);
  ExpectUnchanged(st, s);
  // The buffer still writes into the storage that storage() shows.
  rb.add(row(3));
  EXPECT_TRUE(at::equal(rb.storage().get("id"),
                        torch::tensor({1, 2, 3, 0}, torch::kLong)));
  auto [data, info] = rb.sample(16);
  EXPECT_TRUE(at::equal(data.get("id"),
                        rb.storage().get("id").index_select(0, info.index)));
  EXPECT_TRUE(at::equal(data.get("obs"),
                        rb.storage().get("obs").index_select(0, info.index)));
  EXPECT_TRUE(at::equal(data.get("id"), info.index + 1));
  // In-place writes into its rows are allowed.
  rb.storage()[3] = row(9);
  EXPECT_EQ(rb.storage().get("id")[3].item<int64_t>(), 9);
}

}  // namespace
