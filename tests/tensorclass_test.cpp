// Tests of tensordict/tensorclass.h: typed fields over a dict, the key
// check with its exact messages, typed operations (indexing and writes,
// stack/cat, clone/to, replay sampling) and the tensorclass memmap layout.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensorclass.h>
#include <tensordict/tensordict.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fs_util.h"
#include "tensorclass_test_util.h"
#include "test_util.h"

namespace {

using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::Keys;
using tensordict_test::Next;
using tensordict_test::TakeSnapshot;
using tensordict_test::TempDir;
using tensordict_test::Transition;
using namespace torch::indexing;  // NOLINT(google-build-using-namespace)

TensorDict MakeDict(int64_t n) {
  return TensorDict(
      {{"obs", at::arange(n * 4, at::kFloat).reshape({n, 4})},
       {"action", at::arange(n, at::kLong)},
       {{"next", "obs"}, at::arange(n * 4, at::kFloat).reshape({n, 4}) + 1},
       {{"next", "reward"}, at::ones({n, 1})},
       {{"next", "done"}, at::zeros({n, 1}, at::kBool)}},
      {n});
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TensorClass, FieldsReadAndWriteTheDictWithoutCopies) {
  TensorDict td = MakeDict(3);
  Transition t(td);
  EXPECT_TRUE(t.tensordict().is_same(td));
  EXPECT_TRUE(t.obs().is_same(td.get("obs")));
  EXPECT_TRUE(t.next().obs().is_same(td.get({"next", "obs"})));
  EXPECT_TRUE(t.next().tensordict().is_same(td.get_tensordict("next")));
  EXPECT_EQ(t.batch_size().vec(), std::vector<int64_t>{3});
  t.set_action(at::full({3}, 7, at::kLong));
  EXPECT_TRUE(at::equal(td.get("action"), at::full({3}, 7, at::kLong)));
  t.next().set_reward(at::zeros({3, 1}));
  EXPECT_TRUE(at::equal(td.get({"next", "reward"}), at::zeros({3, 1})));
  // A missing field (Python's None) is the dict's missing key.
  Transition empty(TensorDict({}, {3}));
  EXPECT_THROW((void)empty.obs(), c10::Error);
  empty.set_next(t.next());
  EXPECT_TRUE(empty.tensordict().get_tensordict("next").is_same(
      td.get_tensordict("next")));
}

TEST(TensorClass, ADictThatDoesNotFitTheFieldsIsAnErrorNamingTheKey) {
  TensorDict extra = MakeDict(2);
  extra.set("reward", at::zeros({2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { Transition t(extra); },
      "Transition: key reward is not a field of Transition (its fields: obs, "
      "action, next)");
  TensorDict nested = MakeDict(2);
  nested.set({"next", "info"}, at::zeros({2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)Transition::from_tensordict(nested); },
      "Next: key ('next', 'info') is not a field of Next (its fields: obs, "
      "reward, done)");
  TensorDict dict_for_tensor({{{"action", "x"}, at::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { Transition t(dict_for_tensor); },
      "Transition: key action must hold a tensor (the field action of "
      "Transition), got a dict");
  TensorDict tensor_for_dict({{"next", at::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { Transition t(tensor_for_dict); },
      "Transition: key next must hold a dict (the field next of "
      "Transition), got a tensor");
}

TEST(TensorClass, IndexingIsTypedAndWritesGoIntoTheParent) {
  TensorDict td = MakeDict(4);
  Transition t(td);
  Transition row = t[1];
  EXPECT_EQ(row.batch_size().vec(), std::vector<int64_t>{});
  EXPECT_TRUE(at::equal(row.obs(), td.get("obs")[1]));
  EXPECT_TRUE(at::equal(row.next().obs(), td.get({"next", "obs"})[1]));
  Transition tail = t[Slice(2, None)];
  EXPECT_EQ(tail.batch_size().vec(), std::vector<int64_t>{2});
  EXPECT_EQ(tail.obs().data_ptr(), td.get("obs")[2].data_ptr());  // a view
  t[0] = t[3];
  EXPECT_TRUE(at::equal(td.get("obs")[0], td.get("obs")[3]));
  EXPECT_TRUE(
      at::equal(td.get({"next", "obs"})[0], td.get({"next", "obs"})[3]));
  // A dict that starts empty fills row by row, as TensorDict does.
  Transition storage(TensorDict({}, {4}));
  storage[2] = row;
  EXPECT_EQ(storage.tensordict().keys(true, true), Keys({"obs",
                                                         "action",
                                                         {"next", "obs"},
                                                         {"next", "reward"},
                                                         {"next", "done"}}));
  EXPECT_TRUE(at::equal(storage.obs()[2], row.obs()));
  std::vector<at::indexing::TensorIndex> first_two;
  first_two.emplace_back(Slice(0, 2));
  EXPECT_TRUE(at::equal(storage.index(first_two).obs(), at::zeros({2, 4})));
}

TEST(TensorClass, AFailedRowWriteChangesNothing) {
  Transition t(MakeDict(3));
  const auto snap = TakeSnapshot(t.tensordict());
  Transition bad(MakeDict(1)[0].value().clone());
  bad.set_obs(at::zeros({5}));
  EXPECT_THROW(t[1] = bad, c10::Error);
  ExpectUnchanged(t.tensordict(), snap);
}

TEST(TensorClass, StackCatCloneAndToReturnTheClass) {
  Transition a(MakeDict(2));
  Transition b(MakeDict(2));
  Transition s = tensordict::stack(std::vector<Transition>{a, b});
  EXPECT_EQ(s.batch_size().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(s.next().obs().sizes(), (std::vector<int64_t>{2, 2, 4}));
  Transition c = tensordict::cat(std::vector<Transition>{a, b});
  EXPECT_EQ(c.batch_size().vec(), std::vector<int64_t>{4});
  Transition k = a.clone();
  EXPECT_FALSE(k.obs().is_same(a.obs()));
  EXPECT_TRUE(at::equal(k.obs(), a.obs()));
  Transition d = a.to(at::kDouble);
  EXPECT_EQ(d.obs().scalar_type(), at::kDouble);
  EXPECT_EQ(a.to(at::Device(at::kCPU)).next().reward().device(),
            at::Device(at::kCPU));
  EXPECT_EQ(a.detach().contiguous().cpu().obs().data_ptr(), a.obs().data_ptr());
}

TEST(TensorClass, ReplaySamplesComeBackTyped) {
  tensordict::ReplayBuffer rb(tensordict::ReplayBufferOptions(16).seed(0));
  rb.extend(MakeDict(8));
  auto [batch, info] = tensordict::sample_as<Transition>(rb, 5);
  EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>{5});
  EXPECT_EQ(batch.next().done().sizes(), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(info.index.numel(), 5);
  EXPECT_TRUE(at::equal(batch.obs(),
                        MakeDict(8).get("obs").index_select(0, info.index)));
}

TEST(TensorClass, MemmapWritesPythonsTensorclassLayoutAndLoadsBack) {
  TempDir dir("td_tensorclass");
  Transition t(MakeDict(3));
  t.memmap_(dir / "t");
  EXPECT_EQ(ReadText(dir / "t/meta.json"),
            R"({"_type":"<class '__main__.Transition'>"})");
  EXPECT_EQ(ReadText(dir / "t/_tensordict/next/meta.json"),
            R"({"_type":"<class '__main__.Next'>"})");
  EXPECT_NE(ReadText(dir / "t/_tensordict/meta.json")
                .find(R"("next":{"type":"Next"})"),
            std::string::npos);
  EXPECT_TRUE(t.tensordict().is_memmap());  // in place
  Transition back = Transition::load_memmap(dir / "t");
  EXPECT_TRUE(at::equal(back.next().obs(), t.next().obs()));
  EXPECT_EQ(back.tensordict().keys(true, true),
            t.tensordict().keys(true, true));
  // The plain loader reads the class's dict.
  EXPECT_EQ(TensorDict::load_memmap(dir / "t").keys(true, true),
            t.tensordict().keys(true, true));
  // memmap: a copy over the files.
  Transition copy = Transition(MakeDict(2)).memmap(dir / "copy");
  EXPECT_TRUE(copy.tensordict().is_memmap());
  // A directory whose dict has other keys does not load into the class.
  TensorDict other = MakeDict(2);
  other.set("extra", at::zeros({2}));
  other.memmap_(dir / "other");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)Transition::load_memmap(dir / "other"); },
      "Transition: key extra is not a field of Transition (its fields: obs, "
      "action, next)");
}

TEST(TensorClass, PythonsNoneFieldsLoadAsMissingAndOtherNonTensorFieldsThrow) {
  TempDir dir("td_tensorclass_none");
  Transition(MakeDict(2)).memmap_(dir / "t");
  {
    std::ofstream(dir / "t/meta.json", std::ios::binary)
        << R"({"_type": "<class 'mod.Transition'>", "action2": null})";
  }
  EXPECT_EQ(Transition::load_memmap(dir / "t").batch_size().vec(),
            std::vector<int64_t>{2});
  {
    std::ofstream(dir / "t/meta.json", std::ios::binary)
        << R"({"_type": "<class 'mod.Transition'>", "name": "x"})";
  }
  ExpectThrowsMsg(
      [&] { (void)Transition::load_memmap(dir / "t"); },
      "load_memmap: '" + (dir / "t/meta.json") +
          "': the tensorclass <class 'mod.Transition'> has the non-tensor "
          "field name, which a TensorDict cannot hold");
}

TEST(TensorClass, PrintsAsPythonsTensorclass) {
  // Python 0.4 and 0.14 print the same classes so (python_tensorclass_test
  // checks it against the real thing): set fields sorted, then the None
  // ones in declaration order.
  Next next(TensorDict(
      {{"obs", at::zeros({3, 4})}, {"reward", at::ones({3, 1})}}, {3}));
  Transition t(
      TensorDict({{"obs", at::zeros({3, 4})}, {"action", at::arange(3)}}, {3}));
  t.set_next(next);
  EXPECT_EQ(tensordict::repr(t), R"(Transition(
    action=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int64, is_shared=False),
    next=Next(
        obs=Tensor(shape=torch.Size([3, 4]), device=cpu, dtype=torch.float32, is_shared=False),
        reward=Tensor(shape=torch.Size([3, 1]), device=cpu, dtype=torch.float32, is_shared=False),
        done=None,
        batch_size=torch.Size([3]),
        device=None,
        is_shared=False),
    obs=Tensor(shape=torch.Size([3, 4]), device=cpu, dtype=torch.float32, is_shared=False),
    batch_size=torch.Size([3]),
    device=None,
    is_shared=False))");
  std::ostringstream os;
  os << Transition(TensorDict({{"action", at::arange(3)}}, {3}));
  EXPECT_EQ(os.str(), R"(Transition(
    action=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int64, is_shared=False),
    obs=None,
    next=None,
    batch_size=torch.Size([3]),
    device=None,
    is_shared=False))");
}

}  // namespace
