// Tests of the element-wise, reduction, selection and padding ops (Python
// tensordict's semantics; PythonReference.OpsMatchTensordict compares
// them with Python): each against LibTorch on the leaves, batch sizes,
// nested dicts, and the errors.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <vector>

#include "test_util.h"

namespace {

using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;

// batch [4, 3]; "n" has an extra batch dim of its own ([4, 3, 2]).
TensorDict Sample() {
  return TensorDict(
      {{"a", torch::arange(24, torch::kFloat).view({4, 3, 2})},
       {"n", TensorDict(
                 {{"b", torch::arange(24, torch::kFloat).view({4, 3, 2}) * -1}},
                 {4, 3, 2})}},
      {4, 3});
}

TEST(OpsTest, StdVarCumsumNorm) {
  const TensorDict td = Sample();
  const at::Tensor a = td.get("a");
  EXPECT_TRUE(torch::allclose(td.std(0).get("a"), a.std(0)));
  EXPECT_TRUE(torch::allclose(td.var(1, true, 0).get("a"),
                              a.var(1, /*unbiased=*/false, /*keepdim=*/true)));
  EXPECT_EQ(td.var(1, true).batch_size(), c10::IntArrayRef({4, 1}));
  const std::vector<int64_t> both = {0, 1};
  EXPECT_TRUE(torch::allclose(td.std().get("a"),
                              a.std(both, /*unbiased=*/true, false)));
  EXPECT_TRUE(
      at::equal(td.cumsum(1).get({"n", "b"}), td.get({"n", "b"}).cumsum(1)));
  const TensorDict norm = td.norm();
  EXPECT_EQ(norm.batch_size(), c10::IntArrayRef({}));
  EXPECT_EQ(norm.get_tensordict("n").batch_size(), c10::IntArrayRef({}));
  EXPECT_TRUE(torch::allclose(norm.get("a"), a.norm()));
  const TensorDict ints({{"i", torch::arange(4)}}, {4});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)ints.std(0); },
      "std: key i has dtype torch.int64; std needs floating-point or complex "
      "leaves (cast with to_float() first)");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.cumsum(2); },
      "cumsum: dim 2 is out of range for TensorDict with batch_size [4, 3] (2 "
      "batch dims)");
}

TEST(OpsTest, ClampMaximumMinimumIsclose) {
  const TensorDict td = Sample();
  EXPECT_TRUE(at::equal(td.clamp(2, 5).get("a"), td.get("a").clamp(2, 5)));
  EXPECT_TRUE(at::equal(td.clamp_max(3).get({"n", "b"}),
                        td.get({"n", "b"}).clamp_max(3)));
  EXPECT_TRUE(at::equal(td.clamp_min(3).get("a"), td.get("a").clamp_min(3)));
  const TensorDict other = td * -1;
  EXPECT_TRUE(at::equal(td.maximum(other).get({"n", "b"}), td.get("a")));
  EXPECT_TRUE(at::equal(td.minimum(other).get("a"), td.get({"n", "b"})));
  const TensorDict close = td.isclose(td + 1e-9);
  EXPECT_TRUE(close.get("a").all().item<bool>());
  EXPECT_EQ(close.get("a").scalar_type(), at::kBool);
  EXPECT_TRUE(td.allclose(td + 1e-9));
  EXPECT_FALSE(td.allclose(td + 1));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.clamp(c10::nullopt, c10::nullopt); },
      "clamp: at least one of min and max must be given");
  const TensorDict fewer({{"a", torch::zeros({4, 3, 2})}}, {4, 3});
  EXPECT_THROW((void)td.maximum(fewer), c10::Error);
}

TEST(OpsTest, MaskedSelectRepeatGatherSort) {
  const TensorDict td = Sample();
  const at::Tensor mask = torch::tensor({true, false, true}).repeat({4, 1});
  const TensorDict sel = td.masked_select(mask);
  EXPECT_EQ(sel.batch_size(), c10::IntArrayRef({8}));
  EXPECT_EQ(sel.get_tensordict("n").batch_size(), c10::IntArrayRef({8, 2}));
  EXPECT_TRUE(at::equal(sel.get("a"), td.get("a").index({mask})));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.masked_select(torch::ones({4}, torch::kBool)); },
      "masked_select: the mask must be a bool tensor of the batch shape [4, "
      "3], "
      "got torch.bool [4]");

  const TensorDict rep = td.repeat({2, 1});
  EXPECT_EQ(rep.batch_size(), c10::IntArrayRef({8, 3}));
  EXPECT_TRUE(at::equal(rep.get("a"), td.get("a").repeat({2, 1, 1})));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)td.repeat({2}); },
      "repeat: expected one non-negative count per batch dim of batch_size [4, "
      "3], got [2]");

  const at::Tensor index = torch::tensor({2, 0, 1, 1, 0, 2, 2, 2}).view({4, 2});
  const TensorDict g = td.gather(1, index);
  EXPECT_EQ(g.batch_size(), c10::IntArrayRef({4, 2}));
  EXPECT_TRUE(
      at::equal(g.get("a"),
                td.get("a").gather(1, index.unsqueeze(-1).expand({4, 2, 2}))));
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)td.gather(1, index + 1); },
      "gather: index values must be in [0, 3) along batch dim 1, got values in "
      "[1, 3]");

  const TensorDict keyed({{"score", torch::tensor({3.f, 1.f, 2.f, 1.f})},
                          {"id", torch::arange(4)}},
                         {4});
  EXPECT_TRUE(
      at::equal(keyed.sort("score").get("id"), torch::tensor({1, 3, 2, 0})));
  EXPECT_TRUE(at::equal(keyed.sort("score", 0, true).get("id"),
                        torch::tensor({0, 2, 1, 3})));
  ExpectThrowsMsg<c10::ValueError>([&] { (void)td.sort("a"); },
                                   "sort: key a has shape [4, 3, 2]; sorting "
                                   "by it needs the batch shape [4, "
                                   "3] (trailing dims of size 1 allowed)");
}

TEST(OpsTest, PadAndPadSequence) {
  const TensorDict td = Sample();
  const TensorDict p = tensordict::pad(td, {1, 2}, -1);
  EXPECT_EQ(p.batch_size(), c10::IntArrayRef({7, 3}));
  EXPECT_EQ(p.get_tensordict("n").batch_size(), c10::IntArrayRef({7, 3, 2}));
  EXPECT_TRUE(at::equal(p.get("a").narrow(0, 1, 4), td.get("a")));
  EXPECT_TRUE(p.get("a")[0].eq(-1).all().item<bool>());
  EXPECT_EQ(tensordict::pad(td, {0, 1, 2, 0}).batch_size(),
            c10::IntArrayRef({5, 5}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)tensordict::pad(td, {1}); },
      "pad: pad_size must hold a (before, after) pair per padded batch dim, at "
      "most 2 pairs for batch_size [4, 3], got [1]");

  const TensorDict seq = tensordict::pad_sequence(
      {td[torch::indexing::Slice(0, 2)], td, td[torch::indexing::Slice(0, 1)]},
      0, 0.0,
      /*return_mask=*/true);
  EXPECT_EQ(seq.batch_size(), c10::IntArrayRef({3, 4, 3}));
  EXPECT_EQ(seq.get("a").sizes(), c10::IntArrayRef({3, 4, 3, 2}));
  EXPECT_EQ(seq.get_tensordict("n").batch_size(),
            c10::IntArrayRef({3, 4, 3, 2}));
  EXPECT_EQ(seq.get({"masks", "a"}).sizes(), c10::IntArrayRef({3, 4, 3}));
  EXPECT_EQ(seq.get({"masks", "n", "b"}).sizes(), c10::IntArrayRef({3, 4, 3}));
  EXPECT_TRUE(at::equal(seq.get({"masks", "a"}).select(2, 0),
                        torch::tensor({true, true, false, false, true, true,
                                       true, true, true, false, false, false})
                            .view({3, 4})));
  EXPECT_TRUE(at::equal(seq.get("a")[1], td.get("a")));
  EXPECT_TRUE(seq.get("a")[2].narrow(0, 1, 3).eq(0).all().item<bool>());
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)tensordict::pad_sequence({}); },
      "pad_sequence: the list of TensorDicts is empty");
}

}  // namespace
