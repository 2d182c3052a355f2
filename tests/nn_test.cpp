// Tests of tensordict/nn.h: TensorDictModule over the three kinds of
// computation, its errors (all-or-nothing), and TensorDictSequential's keys,
// selection and atomicity.
#include <gtest/gtest.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

#include <string>
#include <tuple>
#include <vector>

#include "test_paths.h"
#include "test_util.h"

namespace {

using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;
using Tensors = std::vector<at::Tensor>;

// forward(x, y) -> (x + y, x * y)
struct SumProdImpl : torch::nn::Module {
  std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x,
                                             at::Tensor y) {
    return {x + y, x * y};
  }
};

TensorDict Obs() {
  return TensorDict({{"obs", torch::rand({5, 4})}, {"r", torch::ones({5, 1})}},
                    {5});
}

TEST(NnTest, ATorchNnModuleReadsInKeysAndSetsOutKeys) {
  torch::nn::Linear linear(4, 2);
  TensorDictModule actor(linear, {"obs"}, {"logits"});
  const TensorDict td = Obs();
  const TensorDict& out = actor(td);
  EXPECT_TRUE(out.is_same(td));
  EXPECT_EQ(td.keys(), (std::vector<NestedKey>{"obs", "r", "logits"}));
  EXPECT_TRUE(torch::allclose(td.get("logits"), linear(td.get("obs"))));
  EXPECT_EQ(actor.in_keys(), (std::vector<NestedKey>{"obs"}));
  EXPECT_EQ(actor.out_keys(), (std::vector<NestedKey>{"logits"}));
}

TEST(NnTest, ATupleGoesToTheOutKeysInOrderNestedOnesIncluded) {
  TensorDictModule m(std::make_shared<SumProdImpl>(), {"obs", {"next", "obs"}},
                     {"sum", {"stats", "prod"}});
  TensorDict td({{"obs", torch::full({3, 2}, 2.f)},
                 {{"next", "obs"}, torch::full({3, 2}, 3.f)}},
                {3});
  m(td);
  EXPECT_TRUE(at::equal(td.get("sum"), torch::full({3, 2}, 5.f)));
  EXPECT_TRUE(at::equal(td.get({"stats", "prod"}), torch::full({3, 2}, 6.f)));
  EXPECT_EQ(td.get_tensordict("stats").batch_size(), c10::IntArrayRef({3}));
}

TEST(NnTest, AStdFunctionAndATorchScriptModuleWorkTheSame) {
  TensorDictModule fn(
      [](const Tensors& in) -> Tensors {
        return {in[0] + in[1], in[0] * in[1]};
      },
      {"a", "b"}, {"s", "p"});
  TensorDictModule scripted(
      torch::jit::load(tensordict_test::TestDataDir() + "/jit/two_out.pt"),
      {"a", "b"}, {"s", "p"});
  for (const TensorDictModule* m : {&fn, &scripted}) {
    TensorDict td({{"a", torch::full({2}, 2.f)}, {"b", torch::full({2}, 4.f)}},
                  {2});
    (*m)(td);
    EXPECT_TRUE(at::equal(td.get("s"), torch::full({2}, 6.f)));
    EXPECT_TRUE(at::equal(td.get("p"), torch::full({2}, 8.f)));
  }
}

TEST(NnTest, AMissingInKeyIsAnErrorNamingItAndNothingChanges) {
  TensorDictModule actor(torch::nn::Linear(4, 2), {"observation"}, {"logits"});
  const TensorDict td = Obs();
  const auto snap = TakeSnapshot(td);
  ExpectThrowsMsg<c10::IndexError>([&] { actor(td); },
                                   "TensorDictModule: in_key observation is "
                                   "not in the dict (keys: [obs, r])");
  ExpectUnchanged(td, snap);
}

TEST(NnTest, WrongResultsChangeNothing) {
  const TensorDict td = Obs();
  const auto snap = TakeSnapshot(td);
  TensorDictModule short_fn(
      [](const Tensors& in) -> Tensors { return {in[0]}; }, {"obs"},
      {"c", "d"});
  ExpectThrowsMsg([&] { short_fn(td); },
                  "TensorDictModule: the computation returned 1 tensors for 2 "
                  "out_keys [c, d]");
  ExpectUnchanged(td, snap);
  // The second result does not fit the batch size: the first is not set.
  TensorDictModule bad(
      [](const Tensors& in) -> Tensors {
        return {in[0], torch::ones({3})};
      },
      {"obs"}, {"c", "d"});
  ExpectThrowsMsg([&] { bad(td); },
                  "key d: expected leading dims [5], got [3]");
  ExpectUnchanged(td, snap);
}

TEST(NnTest, ConstructionChecksTheKeys) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TensorDictModule m(torch::nn::Linear(4, 2), {"a", "b"}, {"c"});
      },
      "TensorDictModule: the module's forward takes 1 tensors, but in_keys has "
      "2 keys");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TensorDictModule m([](const Tensors& in) { return in; }, {"a"},
                           {"c", "c"});
      },
      "TensorDictModule: out_key c appears twice");
  TensorDictModule m([](const Tensors& in) { return in; }, {"a"}, {"c"});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { m.select_out_keys({"x"}); },
      "TensorDictModule::select_out_keys: x is not "
      "an out_key (out_keys: [c])");
}

// obs -> hidden -> logits (from hidden and obs) -> action
TensorDictSequential Chain() {
  TensorDictModule encode(
      [](const Tensors& in) -> Tensors { return {in[0] * 2}; }, {"obs"},
      {"hidden"});
  TensorDictModule head(
      [](const Tensors& in) -> Tensors {
        return {(in[0] + in[1]).sum(-1, true)};
      },
      {"hidden", "obs"}, {"logits"});
  TensorDictModule act(
      [](const Tensors& in) -> Tensors { return {in[0].gt(0)}; }, {"logits"},
      {"action"});
  return TensorDictSequential({encode, head, act});
}

TEST(NnTest, ASequenceComposesItsKeysAsPythonDoes) {
  const TensorDictSequential seq = Chain();
  EXPECT_EQ(seq.in_keys(), (std::vector<NestedKey>{"obs"}));
  EXPECT_EQ(seq.out_keys(),
            (std::vector<NestedKey>{"hidden", "logits", "action"}));
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[1].in_keys(), (std::vector<NestedKey>{"hidden", "obs"}));
  const TensorDict td = Obs();
  seq(td);
  EXPECT_TRUE(
      torch::allclose(td.get("logits"), (td.get("obs") * 3).sum(-1, true)));
  EXPECT_TRUE(at::equal(td.get("action"), td.get("logits").gt(0)));
}

TEST(NnTest, SelectedOutKeysLeaveTheIntermediateResultsOut) {
  TensorDictSequential seq = Chain();
  seq.select_out_keys({"action"});
  EXPECT_EQ(seq.out_keys(), (std::vector<NestedKey>{"action"}));
  EXPECT_EQ(seq.out_keys_source(),
            (std::vector<NestedKey>{"hidden", "logits", "action"}));
  const TensorDict td = Obs();
  seq(td);
  EXPECT_EQ(td.keys(), (std::vector<NestedKey>{"obs", "r", "action"}));
  // Nested in another sequence, the inner selection still holds.
  TensorDictModule count(
      [](const Tensors& in) -> Tensors { return {in[0].sum(-1)}; }, {"action"},
      {"n"});
  const TensorDictSequential outer({seq, count});
  EXPECT_EQ(outer.out_keys(), (std::vector<NestedKey>{"action", "n"}));
  const TensorDict td2 = Obs();
  outer(td2);
  EXPECT_EQ(td2.keys(), (std::vector<NestedKey>{"obs", "r", "action", "n"}));
}

TEST(NnTest, ASequenceThatFailsHalfWayChangesNothing) {
  TensorDictModule fail(
      [](const Tensors&) -> Tensors {
        TORCH_CHECK(false, "boom");
        return {};
      },
      {"hidden"}, {"z"});
  const TensorDictSequential seq({Chain()[0], fail});
  const TensorDict td = Obs();
  const auto snap = TakeSnapshot(td);
  ExpectThrowsMsg([&] { seq(td); }, "boom");
  ExpectUnchanged(td, snap);
}

}  // namespace
