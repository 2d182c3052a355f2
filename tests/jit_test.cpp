// Tests of tensordict/jit.h: to_ivalue's types, from_ivalue's batch sizes
// and errors, and scripted modules (tests/data/jit, made by
// make_modules.py there) called on TensorDicts.
#include <gtest/gtest.h>
#include <tensordict/jit.h>
#include <tensordict/tensordict.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "test_paths.h"
#include "test_util.h"

namespace {

using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;

std::string TypeOf(const c10::IValue& v) { return v.type()->annotation_str(); }

torch::jit::Module Load(const std::string& name) {
  return torch::jit::load(tensordict_test::TestDataDir() + "/jit/" + name);
}

// A Dict[str, Any] holding `items` in order.
c10::impl::GenericDict AnyDict(
    const std::vector<std::pair<std::string, c10::IValue>>& items) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : items) d.insert(k, v);
  return d;
}

TEST(JitTest, ToIValueGivesTheNarrowestDictTypes) {
  const at::Tensor obs = torch::rand({4, 3});
  const TensorDict flat(
      {{"obs", obs}, {"done", torch::zeros({4, 1}, torch::kBool)}}, {4});
  const c10::IValue v = tensordict::to_ivalue(flat);
  EXPECT_EQ(TypeOf(v), "Dict[str, Tensor]");
  const auto d = v.toGenericDict();
  std::vector<std::string> keys;
  for (const auto& kv : d) keys.push_back(kv.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"obs", "done"}));
  EXPECT_TRUE(d.at("obs").toTensor().is_same(obs));  // not copied

  const TensorDict nested(
      {{{"a", "x"}, torch::rand({2})}, {{"b", "y"}, torch::rand({2})}}, {});
  EXPECT_EQ(TypeOf(tensordict::to_ivalue(nested)),
            "Dict[str, Dict[str, Tensor]]");
  const TensorDict mixed({{"obs", obs}, {{"next", "obs"}, obs}}, {4});
  const c10::IValue m = tensordict::to_ivalue(mixed);
  EXPECT_EQ(TypeOf(m), "Dict[str, Any]");
  EXPECT_EQ(TypeOf(m.toGenericDict().at("next")), "Dict[str, Tensor]");
  EXPECT_EQ(TypeOf(tensordict::to_ivalue(TensorDict())), "Dict[str, Tensor]");
}

TEST(JitTest, ARoundTripKeepsKeysOrderAndTensors) {
  const TensorDict td({{"z", torch::rand({4, 2})},
                       {{"next", "obs"}, torch::rand({4, 3})},
                       {{"next", "deep", "r"}, torch::rand({4})},
                       {"a", torch::rand({4})}},
                      {4});
  const TensorDict back =
      tensordict::from_ivalue(tensordict::to_ivalue(td), td.batch_size().vec());
  ASSERT_EQ(back.keys(true, false), td.keys(true, false));
  EXPECT_EQ(back.batch_size(), td.batch_size());
  EXPECT_EQ(back.get_tensordict("next").batch_size(), c10::IntArrayRef({4}));
  for (const auto& key : td.keys(true, true)) {
    EXPECT_TRUE(back.get(key).is_same(td.get(key))) << key;
  }
}

TEST(JitTest, FromIValueInfersBatchSizesAsPythonsAutoBatchSize) {
  const c10::IValue iv =
      AnyDict({{"a", torch::rand({4, 3})},
               {"n", AnyDict({{"x", torch::rand({4, 3, 5})},
                              {"y", torch::rand({4, 3, 5, 1})}})},
               {"e", AnyDict({})}});
  const TensorDict td = tensordict::from_ivalue(iv);
  EXPECT_EQ(td.batch_size(), c10::IntArrayRef({4, 3}));
  EXPECT_EQ(td.get_tensordict("n").batch_size(), c10::IntArrayRef({4, 3, 5}));
  EXPECT_EQ(td.get_tensordict("e").batch_size(), c10::IntArrayRef({4, 3}));
  const TensorDict capped = tensordict::from_ivalue(iv, c10::nullopt, 1);
  EXPECT_EQ(capped.batch_size(), c10::IntArrayRef({4}));
  EXPECT_EQ(capped.get_tensordict("n").batch_size(), c10::IntArrayRef({4}));
  // No shared leading dim: batch size [].
  EXPECT_EQ(tensordict::from_ivalue(AnyDict({{"a", torch::rand({4, 3})},
                                             {"b", torch::rand({5, 3})}}))
                .batch_size(),
            c10::IntArrayRef({}));
}

TEST(JitTest, FromIValueRejectsWhatIsNotADictOfTensors) {
  ExpectThrowsMsg(
      [] { (void)tensordict::from_ivalue(torch::rand({2})); },
      "from_ivalue: the value is a Tensor, expected a Dict[str, Tensor] "
      "(nested dicts allowed)");
  c10::impl::GenericDict by_int(c10::IntType::get(), c10::TensorType::get());
  by_int.insert(int64_t{1}, torch::rand({2}));
  ExpectThrowsMsg(
      [&] { (void)tensordict::from_ivalue(by_int); },
      "from_ivalue: the value is a Dict[int, Tensor], expected string keys");
  ExpectThrowsMsg(
      [] {
        (void)tensordict::from_ivalue(AnyDict(
            {{"a", torch::rand({2})}, {"n", AnyDict({{"k", int64_t{3}}})}}));
      },
      "from_ivalue: key ('n', 'k') holds a int, expected a Tensor or a dict of "
      "them");
  ExpectThrowsMsg(
      [] {
        (void)tensordict::from_ivalue(AnyDict({{"a", torch::rand({2})}}),
                                      std::vector<int64_t>{3});
      },
      "from_ivalue: key a: expected leading dims [3], got [2]");
  // A nested leaf is named by its whole key.
  ExpectThrowsMsg(
      [] {
        (void)tensordict::from_ivalue(
            AnyDict({{"a", AnyDict({{"x", torch::rand({2, 3})}})}}),
            std::vector<int64_t>{5});
      },
      "from_ivalue: key ('a', 'x'): expected leading dims [5], got [2]");
}

TEST(JitTest, ToIValueRejectsNonTensorData) {
  TensorDict td({{"a", torch::rand({2})}}, {2});
  td.set_non_tensor("note", "hello");
  ExpectThrowsMsg([&] { (void)tensordict::to_ivalue(td); },
                  "to_ivalue: key note holds non-tensor data, which a "
                  "TorchScript dict cannot hold (tensors only)");
}

TEST(JitTest, AScriptedPolicyRunsOnATensorDict) {
  torch::jit::Module policy = Load("policy.pt");
  const TensorDict obs({{"obs", torch::rand({5, 4})}}, {5});
  const TensorDict out = tensordict::forward(policy, obs);
  EXPECT_EQ(out.batch_size(), c10::IntArrayRef({5}));
  EXPECT_EQ(out.keys(), (std::vector<NestedKey>{"logits", "obs"}));
  const auto linear = policy.attr("linear").toModule();
  const at::Tensor expected =
      torch::addmm(linear.attr("bias").toTensor(), obs.get("obs"),
                   linear.attr("weight").toTensor().t());
  EXPECT_TRUE(torch::allclose(out.get("logits"), expected));
  EXPECT_TRUE(out.get("obs").is_same(obs.get("obs")));
}

TEST(JitTest, NestedDictsMatchNestedDictTypes) {
  torch::jit::Module nested = Load("nested.pt");
  const TensorDict td({{{"a", "x"}, torch::ones({2})},
                       {{"a", "y"}, torch::ones({3})},
                       {{"b", "z"}, torch::full({2}, 2.f)}},
                      {});
  const TensorDict out = tensordict::forward(nested, td);
  EXPECT_EQ(out.get("a").item<float>(), 5.f);
  EXPECT_EQ(out.get("b").item<float>(), 4.f);
  // A dict of another type fails TorchScript's argument check.
  const TensorDict flat({{"x", torch::ones({2})}}, {});
  try {
    (void)tensordict::forward(nested, flat);
    ADD_FAILURE() << "expected an error";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_EQ(msg.rfind("forward: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("Dict[str, Dict[str, Tensor]]"), std::string::npos)
        << msg;
  }
}

TEST(JitTest, TheOutputKeepsTheInputsBatchDimsItsLeavesShare) {
  torch::jit::Module mean = Load("mean.pt");
  const TensorDict td({{"obs", torch::rand({5, 4})}}, {5});
  const TensorDict out = tensordict::forward(mean, td);
  // [4] leaves: the batch dim is gone, and 4 is not the input's batch.
  EXPECT_EQ(out.batch_size(), c10::IntArrayRef({}));
  EXPECT_TRUE(torch::allclose(out.get("mean"), td.get("obs").mean(0)));
}

}  // namespace
