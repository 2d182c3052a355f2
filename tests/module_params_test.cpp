// Tests of module parameters as dicts (tensordict/nn.h: from_module,
// to_module) and of TensorDict::lerp_, the soft target update they make one
// call: the key layout, shared leaves, all-or-nothing writes with exact
// messages, and lerp's values against LibTorch's own.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <vector>

#include "test_util.h"

namespace {

using tensordict::from_module;
using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict::to_module;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::Keys;
using tensordict_test::TakeSnapshot;

torch::nn::Sequential MakeNet() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(),
                               torch::nn::Linear(3, 2),
                               torch::nn::BatchNorm1d(2));
}

// ---- from_module --------------------------------------------------------------

TEST(FromModule, NestsParametersThenBuffersBySubmoduleAndSkipsEmptyOnes) {
  torch::nn::Sequential net = MakeNet();
  TensorDict td = from_module(*net);
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>{});
  EXPECT_EQ(td.keys(/*include_nested=*/true, /*leaves_only=*/true),
            Keys({{"0", "weight"},
                  {"0", "bias"},
                  {"2", "weight"},
                  {"2", "bias"},
                  {"3", "weight"},
                  {"3", "bias"},
                  {"3", "running_mean"},
                  {"3", "running_var"},
                  {"3", "num_batches_tracked"}}));
  // The leaves are the module's own tensors.
  const auto params = net->named_parameters();
  EXPECT_TRUE(td.get({"0", "weight"}).is_same(params["0.weight"]));
  EXPECT_TRUE(td.get({"3", "running_mean"})
                  .is_same(net->named_buffers()["3.running_mean"]));
  EXPECT_TRUE(td.get({"2", "bias"}).requires_grad());
}

TEST(FromModule, KeepsEmptySubmodulesWhenAskedAndSkipsUndefinedParameters) {
  torch::nn::Sequential net(
      torch::nn::Linear(torch::nn::LinearOptions(2, 2).bias(false)),
      torch::nn::ReLU());
  EXPECT_EQ(from_module(*net).keys(true), Keys({"0", {"0", "weight"}}));
  TensorDict all = from_module(*net, /*filter_empty=*/false);
  EXPECT_EQ(all.keys(true), Keys({"0", {"0", "weight"}, "1"}));
  EXPECT_TRUE(all.get_entry("1").is_tensordict());
  // A module without tensors gives an empty dict.
  torch::nn::ReLU relu;
  EXPECT_TRUE(from_module(*relu).keys().empty());
}

TEST(FromModule, InPlaceWritesIntoTheDictReachTheModule) {
  torch::nn::Sequential net = MakeNet();
  TensorDict td = from_module(*net);
  {
    torch::NoGradGuard no_grad;
    td.get({"2", "weight"}).fill_(0.5);
  }
  EXPECT_TRUE(
      at::equal(net->named_parameters()["2.weight"], at::full({2, 3}, 0.5)));
}

// ---- to_module ----------------------------------------------------------------

TEST(ToModule, CopiesEveryLeafIntoTheModuleInPlace) {
  torch::nn::Sequential a = MakeNet();
  torch::nn::Sequential b = MakeNet();
  TensorDict before = from_module(*b);
  const at::Tensor w = before.get({"0", "weight"});
  const int64_t version = w._version();
  to_module(from_module(*a), *b);
  TensorDict after = from_module(*b);
  EXPECT_EQ(after.keys(true), before.keys(true));
  for (const auto& k : after.keys(true, true)) {
    EXPECT_TRUE(at::equal(after.get(k), from_module(*a).get(k))) << k;
    EXPECT_TRUE(after.get(k).is_same(before.get(k))) << k;  // in place
  }
  EXPECT_TRUE(after.get({"0", "weight"}).requires_grad());
  EXPECT_GT(w._version(), version);
  // Same outputs once the weights are the same.
  a->eval();
  b->eval();
  const at::Tensor x = at::randn({5, 4});
  EXPECT_TRUE(at::allclose(a->forward(x), b->forward(x)));
}

TEST(ToModule, APartialDictWritesOnlyItsKeys) {
  torch::nn::Sequential net = MakeNet();
  const at::Tensor w0 = net->named_parameters()["0.weight"].detach().clone();
  TensorDict part({{{"0", "bias"}, at::full({3}, 2.0)}}, {});
  to_module(part, *net);
  EXPECT_TRUE(at::equal(net->named_parameters()["0.bias"], at::full({3}, 2.)));
  EXPECT_TRUE(at::equal(net->named_parameters()["0.weight"], w0));
}

TEST(ToModule, ABadKeyOrShapeChangesNothing) {
  torch::nn::Sequential net = MakeNet();
  const auto snap = TakeSnapshot(from_module(*net));
  auto with = [&](const NestedKey& key, const at::Tensor& value) {
    // Every other leaf is valid and comes first, so a write before the
    // check would show.
    TensorDict td = from_module(*net).detach().clone();
    td.add_(1);
    td.set(key, value);
    return td;
  };
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        to_module(with({"3", "wieght"}, at::ones({2})), *net);
      },
      "to_module: key ('3', 'wieght'): the module has no parameter or buffer "
      "'wieght' (its parameters: weight, bias; its buffers: running_mean, "
      "running_var, num_batches_tracked)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        to_module(with({"5", "weight"}, at::ones({2})), *net);
      },
      "to_module: key 5: the module has no submodule '5' (its submodules: 0, "
      "1, 2, 3)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        to_module(with({"3", "bias"}, at::ones({3})), *net);
      },
      "to_module: key ('3', 'bias'): the value of shape [3] does not match "
      "the module's tensor of shape [2]");
  ExpectThrowsMsg(
      [&] {
        to_module(with({"3", "bias"}, at::ones({2}, at::kComplexFloat)), *net);
      },
      "to_module: key ('3', 'bias'): cannot cast the value's dtype "
      "torch.complex64 to the stored dtype torch.float32 (a write never casts "
      "to a lower kind, such as floating point to integer)");
  TensorDict nt = with({"3", "bias"}, at::ones({2}));
  nt.set_non_tensor({"3", "note"}, "x");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { to_module(nt, *net); },
      "to_module: key ('3', 'note'): non-tensor data cannot be written into a "
      "module");
  ExpectUnchanged(from_module(*net), snap);
}

TEST(ToModule, AnUndefinedParameterIsNotThere) {
  torch::nn::Linear lin(torch::nn::LinearOptions(2, 2).bias(false));
  const auto snap = TakeSnapshot(from_module(*lin));
  TensorDict td({{"weight", at::zeros({2, 2})}, {"bias", at::zeros({2})}}, {});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { to_module(td, *lin); },
      "to_module: key bias: the module has no parameter or buffer 'bias' "
      "(its parameters: weight; its buffers: none)");
  ExpectUnchanged(from_module(*lin), snap);
}

// ---- lerp_ --------------------------------------------------------------------

TensorDict MakeParams(at::ScalarType dtype, int64_t n) {
  TensorDict td;
  for (int64_t i = 0; i < n; ++i) {
    td.set({"layer" + std::to_string(i), "weight"},
           at::randn({3 + i, 5}, at::dtype(dtype)));
    td.set({"layer" + std::to_string(i), "bias"},
           at::randn({3 + i}, at::dtype(dtype)));
  }
  return td;
}

TEST(Lerp, MatchesLibTorchsLerpOnEveryLeafForSmallAndLargeWeights) {
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    for (const double w : {0.01, 0.3, 0.5, 0.7, 1.0, -0.2}) {
      TensorDict a = MakeParams(dtype, 3);
      TensorDict b = MakeParams(dtype, 3);
      TensorDict expected =
          a.apply([&](const at::Tensor& x,
                      const at::Tensor& y) { return at::lerp(x, y, w); },
                  b);
      TensorDict out = a.lerp(b, w);
      const at::Tensor leaf = a.get({"layer1", "weight"});
      const int64_t version = leaf._version();
      EXPECT_TRUE(&a.lerp_(b, w) == &a);
      EXPECT_TRUE(a.get({"layer1", "weight"}).is_same(leaf));
      EXPECT_GT(leaf._version(), version);
      for (const auto& k : a.keys(true, true)) {
        EXPECT_TRUE(at::allclose(a.get(k), expected.get(k), 1e-6, 1e-7))
            << k << " w=" << w;
        EXPECT_TRUE(at::equal(out.get(k), expected.get(k))) << k;
      }
    }
  }
}

TEST(Lerp, NonContiguousLeavesBroadcastEndsAndDictWeightsGoThroughLibTorch) {
  TensorDict a({{"x", at::randn({4, 6}).t()}, {"y", at::randn({4, 3})}}, {});
  TensorDict b({{"x", at::randn({6, 4})}, {"y", at::randn({3})}}, {});
  TensorDict w({{"x", at::rand({6, 4})}, {"y", at::rand({4, 3})}}, {});
  const at::Tensor ex = at::lerp(a.get("x"), b.get("x"), 0.25);
  const at::Tensor ey = at::lerp(a.get("y"), b.get("y"), 0.25);
  a.lerp_(b, 0.25);
  EXPECT_TRUE(at::equal(a.get("x"), ex));
  EXPECT_TRUE(at::equal(a.get("y"), ey));
  const at::Tensor ex2 = at::lerp(a.get("x"), b.get("x"), w.get("x"));
  a.lerp_(b, w);
  EXPECT_TRUE(at::equal(a.get("x"), ex2));
}

TEST(Lerp, BadLeavesChangeNothing) {
  TensorDict a({{"a", at::randn({2, 3})}, {"b", at::randn({2, 3})}}, {2});
  const auto snap = TakeSnapshot(a);
  auto end_with = [&](const at::Tensor& b) {
    return TensorDict({{"a", at::randn({2, 3})}, {"b", b}}, {2});
  };
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        a.lerp_(end_with(at::randn({2, 3}, at::kDouble)), 0.1);
      },
      "lerp_: key b: the end's dtype torch.float64 is not the leaf's dtype "
      "torch.float32 (lerp does not promote)");
  ExpectThrowsMsg(
      [&] {
        a.lerp_(end_with(at::randn({2, 4})), 0.1);
      },
      "lerp_: key b: the end's shape [2, 4] does not broadcast to the leaf's "
      "shape [2, 3]");
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        a.lerp_(end_with(at::randn({2, 3})), c10::complex<double>(0, 1));
      },
      "lerp_: key a: a complex weight needs a complex leaf, got dtype "
      "torch.float32");
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        a.lerp_(end_with(at::randn({2, 3})), true);
      },
      "lerp_: the weight must be a number, got a bool");
  TensorDict w({{"a", at::rand({2, 3})}, {"b", at::rand({5})}}, {});
  ExpectThrowsMsg(
      [&] {
        a.lerp_(end_with(at::randn({2, 3})), w);
      },
      "lerp_: key b: the weight's shape [5] does not broadcast to the leaf's "
      "shape [2, 3]");
  ExpectUnchanged(a, snap);

  TensorDict ints({{"f", at::randn({2})}, {"i", at::zeros({2}, at::kLong)}},
                  {2});
  const auto isnap = TakeSnapshot(ints);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { ints.lerp_(ints.clone(), 0.5); },
      "lerp_: key i: lerp needs floating-point or complex leaves, got dtype "
      "torch.int64");
  ExpectUnchanged(ints, isnap);
}

TEST(Lerp, ParametersThatRequireGradNeedNoGradGuard) {
  torch::nn::Linear online(3, 2);
  torch::nn::Linear target(3, 2);
  TensorDict t = from_module(*target);
  const auto snap = TakeSnapshot(t);
  ExpectThrowsMsg(
      [&] { t.lerp_(from_module(*online), 0.05); },
      "lerp_: key weight: a leaf tensor that requires grad cannot be modified "
      "in place (use torch::NoGradGuard, or detach it first)");
  ExpectUnchanged(t, snap);
  const at::Tensor expected =
      at::lerp(target->weight.detach(), online->weight.detach(), 0.05);
  {
    torch::NoGradGuard no_grad;
    t.lerp_(from_module(*online), 0.05);
  }
  EXPECT_TRUE(at::allclose(target->weight, expected, 1e-6, 1e-7));
  EXPECT_TRUE(target->weight.requires_grad());
}

}  // namespace
