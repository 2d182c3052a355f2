// The traps a first-time user hit (issue 29, docs/getting-started.md "Traps"):
// code that compiled and did something other than what it said, or failed
// far from the mistake. Each test here fails without its fix: a static_assert
// for the code that no longer compiles, an exact message and a full snapshot
// for the errors.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <unistd.h>

#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

using namespace tensordict_test;  // NOLINT(google-build-using-namespace)

using at::indexing::Slice;
using tensordict::IndexedTensorDict;
using tensordict::NestedKey;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::RolloutBuffer;
using tensordict::TensorDict;

// Whether `std::declval<const T&>()[std::declval<I>()]` compiles.
template <typename T, typename I, typename = void>
struct Indexable : std::false_type {};
template <typename T, typename I>
struct Indexable<
    T, I, std::void_t<decltype(std::declval<const T&>()[std::declval<I>()])>>
    : std::true_type {};

// ---- td["obs"] -------------------------------------------------------------

TEST(Traps, AStringIsAKeyNeverAnIndexSoTdOfAStringDoesNotCompile) {
  // It used to compile, as the ellipsis index "...", and throw "Expected
  // \"...\" to represent an ellipsis index, but got \"obs\"".
  static_assert(!Indexable<TensorDict, const char(&)[4]>::value, "td[\"obs\"]");
  static_assert(!Indexable<TensorDict, const char*>::value, "td[key]");
  static_assert(!Indexable<TensorDict, std::string>::value, "td[std::string]");
  static_assert(!Indexable<TensorDict, NestedKey>::value,
                "td[{\"next\", \"obs\"}]");
  static_assert(!Indexable<IndexedTensorDict, const char(&)[4]>::value,
                "td[0][\"obs\"]");
  static_assert(!Indexable<IndexedTensorDict, NestedKey>::value, "td[0][key]");
  // Indices still do.
  static_assert(Indexable<TensorDict, int>::value, "td[0]");
  static_assert(Indexable<TensorDict, int64_t>::value, "td[i]");
  static_assert(Indexable<TensorDict, Slice>::value, "td[Slice()]");
  static_assert(Indexable<TensorDict, at::Tensor>::value, "td[mask]");
  static_assert(Indexable<IndexedTensorDict, int>::value, "td[0][1]");
  TensorDict td({{"obs", torch::arange(6.0).view({2, 3})}}, {2});
  EXPECT_TRUE(td[torch::indexing::Ellipsis].get("obs").equal(td.get("obs")));
  EXPECT_TRUE(td.get("obs").equal(torch::arange(6.0).view({2, 3})));
}

// ---- auto r = td[i]; r = other; -----------------------------------------------

TEST(Traps, OnlyATemporaryTdOfIWritesOnAssignment) {
  // It used to compile and write into td.
  static_assert(
      !std::is_assignable<IndexedTensorDict&, const TensorDict&>::value,
      "r = row");
  static_assert(
      !std::is_assignable<IndexedTensorDict&, const IndexedTensorDict&>::value,
      "r = td[j]");
  static_assert(
      !std::is_assignable<IndexedTensorDict&, IndexedTensorDict&&>::value,
      "r = td[j]");
  static_assert(
      std::is_assignable<IndexedTensorDict&&, const TensorDict&>::value,
      "td[i] = row");
  static_assert(
      std::is_assignable<IndexedTensorDict&&, IndexedTensorDict&&>::value,
      "td[i] = td[j]");

  TensorDict td({{"x", torch::zeros({3})}}, {3});
  TensorDict row({{"x", torch::full({}, 5.0f)}}, {});
  td[0] = row;
  td[1] = td[0];
  auto named = td[2];
  std::move(named) = row;  // a write into td, said so
  EXPECT_TRUE(td.get("x").equal(torch::full({3}, 5.0f)));
  // A dict of views rebinds on `=`: td is not written.
  TensorDict view = td[0];
  view = TensorDict({{"x", torch::full({}, 9.0f)}}, {});
  EXPECT_TRUE(td.get("x").equal(torch::full({3}, 5.0f)));
}

// ---- One cast rule for every write -----------------------------------------------

const char* const kNoLowerKind =
    " (a write never casts to a lower kind, such as floating point to integer)";

TensorDict Mixed() {
  return TensorDict({{"f", torch::zeros({3})},
                     {{"next", "i"}, torch::zeros({3}, torch::kLong)}},
                    {3});
}

TEST(Traps, EveryTensorWriteRefusesACastToALowerKindAndChangesNothing) {
  // set_ and update_ used to truncate 2.7 to 2, while td[i] = row refused.
  const std::string lower =
      "key ('next', 'i'): cannot cast the value's dtype torch.float32 to the "
      "stored dtype torch.int64" +
      std::string(kNoLowerKind);
  TensorDict td = Mixed();
  const Snapshot before = TakeSnapshot(td);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.set_({"next", "i"}, torch::full({3}, 2.7f));
      },
      "set_: " + lower);
  ExpectUnchanged(td, before);
  TensorDict update(
      {{"f", torch::ones({3})}, {{"next", "i"}, torch::full({3}, 2.7f)}}, {3});
  ExpectThrowsMsg<c10::TypeError>([&] { td.update_(update); },
                                  "update_: " + lower);
  ExpectUnchanged(td, before);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.apply_([](const at::Tensor& t) { return t.to(at::kFloat) + 0.5; });
      },
      "apply_: " + lower);
  ExpectUnchanged(td, before);
  TensorDict row(
      {{"f", torch::ones({})}, {{"next", "i"}, torch::full({}, 2.7f)}}, {});
  ExpectThrowsMsg<c10::TypeError>([&] { td[0] = row; }, lower);
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td[torch::tensor({0, 2})] = tensordict::stack({row, row});
      },
      lower);
  ExpectUnchanged(td, before);

  RolloutBuffer rollout(2, 3);
  rollout.step(0, Mixed());
  const Snapshot rollout_before = TakeSnapshot(rollout.data());
  TensorDict step = Mixed();
  step.set({"next", "i"}, torch::full({3}, 2.7f));
  ExpectThrowsMsg<c10::TypeError>([&] { rollout.step(1, step); }, lower);
  ExpectUnchanged(rollout.data(), rollout_before);

  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.add(Mixed()[0]);
  const Snapshot rb_before = TakeSnapshot(rb.storage());
  ExpectThrowsMsg<c10::TypeError>([&] { rb.add(row); },
                                  "ReplayBuffer::add: " + lower);
  ExpectUnchanged(rb.storage(), rb_before);
  EXPECT_EQ(rb.size(), 1);
}

TEST(Traps, EveryTensorWriteCastsToTheSameOrAHigherKind) {
  // int64 into float32, float64 into float32, bool into int64: as c10::canCast.
  TensorDict td = Mixed();
  td.set_("f", torch::tensor({1, 2, 3}));
  EXPECT_TRUE(td.get("f").equal(torch::tensor({1.0f, 2.0f, 3.0f})));
  td.update_(TensorDict({{"f", torch::full({3}, 0.5, torch::kDouble)}}, {3}));
  EXPECT_TRUE(td.get("f").equal(torch::full({3}, 0.5f)));
  TensorDict row({{"f", torch::full({}, 0.25, torch::kDouble)},
                  {{"next", "i"}, torch::full({}, true)}},
                 {});
  td[torch::tensor({1})] = row.unsqueeze(0);  // Python's index_put_ refuses
  td[2] = row;
  EXPECT_TRUE(td.get("f").equal(torch::tensor({0.5f, 0.25f, 0.25f})));
  EXPECT_TRUE(td.get({"next", "i"}).equal(torch::tensor({0, 1, 1})));
  EXPECT_EQ(td.get("f").scalar_type(), at::kFloat);

  ReplayBuffer rb(ReplayBufferOptions(4));
  rb.add(Mixed()[0]);
  rb.add(row);  // the storage keeps its dtypes
  EXPECT_EQ(rb.storage().get("f").scalar_type(), at::kFloat);
  EXPECT_TRUE(
      rb.storage().get("f").slice(0, 0, 2).equal(torch::tensor({0.0f, 0.25f})));
  EXPECT_TRUE(rb.storage()
                  .get({"next", "i"})
                  .slice(0, 0, 2)
                  .equal(torch::tensor({0, 1})));
}

// ---- A device this LibTorch cannot run -----------------------------------------

// The one-line error for a CUDA device (`cuda:index`) this process cannot use.
std::string NoCuda(const std::string& op, int index) {
  if (!c10::impl::hasDeviceGuardImpl(at::kCUDA)) {
    return op + ": device cuda:" + std::to_string(index) +
           " is not available: this LibTorch was built without CUDA support";
  }
  const int64_t n = c10::impl::getDeviceGuardImpl(at::kCUDA)->deviceCount();
  return op + ": device cuda:" + std::to_string(index) +
         " is not available: this machine has " + std::to_string(n) +
         (n == 1 ? " CUDA device" : " CUDA devices");
}

TEST(Traps, ADeviceThisLibTorchCannotRunIsRefusedWhereItIsNamed) {
  // It used to be accepted, and the first write failed with LibTorch's
  // dispatcher dump.
  const int64_t count =
      c10::impl::hasDeviceGuardImpl(at::kCUDA)
          ? c10::impl::getDeviceGuardImpl(at::kCUDA)->deviceCount()
          : 0;
  const int index = static_cast<int>(count);  // one past the last device
  const at::Device cuda(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  ExpectThrowsMsg([&] { TensorDict({}, {2}, cuda); },
                  NoCuda("TensorDict", index));
  ExpectThrowsMsg([&] { TensorDict({2}, cuda); }, NoCuda("TensorDict", index));
  ExpectThrowsMsg([&] { RolloutBuffer(2, 3, cuda); },
                  NoCuda("RolloutBuffer", index));
  ExpectThrowsMsg([&] { ReplayBuffer(ReplayBufferOptions(4).device(cuda)); },
                  NoCuda("ReplayBuffer", index));
  TensorDict td({{"x", torch::zeros({2})}}, {2});
  const Snapshot before = TakeSnapshot(td);
  ExpectThrowsMsg([&] { (void)td.to(cuda); }, NoCuda("to", index));
  ExpectUnchanged(td, before);
  if (count == 0) {
    // "cuda" means cuda:0.
    ExpectThrowsMsg([&] { (void)td.to(at::kCUDA); }, NoCuda("to", 0));
  }
}

// ---- memmap_ into an old dict's directory ---------------------------------------

TEST(Traps, MemmapIntoAnOldDictsDirectoryRemovesTheOldEntriesItDoesNotWrite) {
  // The old dict's files used to stay (the stale data of rl#2437).
  TempDir dir;
  TempDir elsewhere;
  const std::string p = dir / "td";
  TensorDict old({{"a", torch::zeros({2})},
                  {"b", torch::zeros({2})},
                  {"x y", torch::zeros({2})},
                  {{"sub", "c"}, torch::zeros({2})},
                  {{"sub", "d"}, torch::zeros({2})},
                  {{"gone", "e"}, torch::zeros({2})},
                  {{"kind", "f"}, torch::zeros({2})},
                  {{"link", "g"}, torch::zeros({2})}},
                 {2});
  old.set_non_tensor("note", "hi");
  old.memmap_(p);
  // Files the format does not name are the user's, and stay; a sub-directory
  // that became a link to elsewhere is not followed.
  std::ofstream(p + "/notes.txt") << "mine";
  std::ofstream(p + "/gone/keep.txt") << "mine";
  (void)old.get_tensordict("link").clone().memmap_(elsewhere / "target");
  RemoveTree(p + "/link");
  ASSERT_EQ(::symlink((elsewhere / "target").c_str(), (p + "/link").c_str()),
            0);

  TensorDict fresh({{"a", torch::ones({2})},
                    {{"sub", "c"}, torch::ones({2})},
                    {"kind", torch::ones({2})}},
                   {2});
  fresh.memmap_(p);
  EXPECT_EQ(ListTree(p), (std::vector<std::string>{
                             "a.memmap", "gone", "gone/keep.txt", "kind.memmap",
                             "link", "meta.json", "notes.txt", "sub",
                             "sub/c.memmap", "sub/meta.json"}));
  EXPECT_EQ(ListTree(elsewhere / "target"),
            (std::vector<std::string>{"g.memmap", "meta.json"}));
  const TensorDict back = TensorDict::load_memmap(p);
  EXPECT_EQ(back.keys(true, true), fresh.keys(true, true));
  EXPECT_TRUE(back.get({"sub", "c"}).equal(torch::ones({2})));
}

TEST(Traps, AnOldMetaJsonThatCannotBeReadDoesNotStopAWriteAndRemovesNothing) {
  TempDir dir;
  const std::string p = dir / "td";
  MakeDirs(p);
  std::ofstream(p + "/meta.json") << "{not json";
  std::ofstream(p + "/old.memmap") << "bytes";
  TensorDict td({{"a", torch::ones({2})}}, {2});
  td.memmap_(p);
  EXPECT_EQ(ListTree(p),
            (std::vector<std::string>{"a.memmap", "meta.json", "old.memmap"}));
  EXPECT_TRUE(TensorDict::load_memmap(p).get("a").equal(torch::ones({2})));
}

}  // namespace
