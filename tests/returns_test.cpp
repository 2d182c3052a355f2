// Tests for the return estimators (tensordict/returns.h): worked examples,
// the identities between them, any time dim, the TensorDict forms,
// RolloutBuffer::compute, multi_step and the errors. TorchRL 0.14 agrees in
// python_returns_test.cpp.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <vector>

#include "test_util.h"

using tensordict::AdvantageEstimate;
using tensordict::EstimatorKeys;
using tensordict::MultiStepKeys;
using tensordict::RolloutBuffer;
using tensordict::TensorDict;
using tensordict::ValueEstimator;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;

namespace {

at::Tensor D(std::vector<double> v) { return torch::tensor(v, torch::kDouble); }
at::Tensor B(std::vector<int> v) {
  return torch::tensor(v, torch::kInt).to(torch::kBool);
}

struct Episodes {
  at::Tensor reward, value, next_value, done, terminated, log_pi, log_mu;
};

// Random steps with episode ends (about 15%), half of them truncations.
Episodes MakeEpisodes(std::vector<int64_t> shape, uint64_t seed,
                      at::ScalarType dtype = at::kDouble) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = torch::TensorOptions().dtype(dtype);
  Episodes e;
  e.reward = at::randn(shape, gen, o);
  e.value = at::randn(shape, gen, o);
  e.next_value = at::randn(shape, gen, o);
  e.done = at::rand(shape, gen) < 0.15;
  e.terminated = e.done.logical_and(at::rand(shape, gen) < 0.5);
  e.log_pi = at::randn(shape, gen, o) * 0.5;
  e.log_mu = at::randn(shape, gen, o) * 0.5;
  return e;
}

}  // namespace

// ---- Worked examples -----------------------------------------------------------
// One env, three steps, gamma = 0.5; step 1 ends the episode.

TEST(ReturnsTest, Td1ReturnStopsAtATerminationAndBootstrapsAtATruncation) {
  const at::Tensor r = D({1, 1, 1});
  const at::Tensor nv = D({4, 10, 16});
  const at::Tensor done = B({0, 1, 0});
  // Terminated (the default, terminated = done): G2 = 1 + 0.5 * 16 (the last
  // step bootstraps), G1 = 1, G0 = 1 + 0.5 * 1.
  EXPECT_TRUE(
      tensordict::td1_return(0.5, nv, r, done, {}, -1).equal(D({1.5, 1, 9})));
  // Truncated: G1 = 1 + 0.5 * 10, G0 = 1 + 0.5 * 6.
  EXPECT_TRUE(tensordict::td1_return(0.5, nv, r, done, B({0, 0, 0}), -1)
                  .equal(D({4, 6, 9})));
}

TEST(ReturnsTest, TdLambdaReturnMixesOneStepAndLongerReturns) {
  const at::Tensor r = D({1, 1, 1});
  const at::Tensor nv = D({4, 10, 16});
  const at::Tensor done = B({0, 1, 0});
  // lambda = 0.5, truncated at 1: G2 = 1 + 0.5 * 16 = 9, G1 = 1 + 0.5 * 10
  // = 6, G0 = 1 + 0.5 * (0.5 * 4 + 0.5 * 6) = 3.5.
  EXPECT_TRUE(
      tensordict::td_lambda_return(0.5, 0.5, nv, r, done, B({0, 0, 0}), -1)
          .equal(D({3.5, 6, 9})));
  // Terminated at 1: G1 = 1, G0 = 1 + 0.5 * (0.5 * 4 + 0.5 * 1) = 2.25.
  EXPECT_TRUE(tensordict::td_lambda_return(0.5, 0.5, nv, r, done, done, -1)
                  .equal(D({2.25, 1, 9})));
}

TEST(ReturnsTest, Td0ReturnIsElementwise) {
  EXPECT_TRUE(
      tensordict::td0_return(0.5, D({4, 10, 16}), D({1, 2, 3}), B({0, 1, 0}))
          .equal(D({3, 2, 11})));
}

TEST(ReturnsTest, TensorDiscountsApplyStepByStep) {
  const at::Tensor r = D({1, 2, 3});
  const at::Tensor nv = D({4, 10, 16});
  const at::Tensor done = B({0, 0, 0});
  const at::Tensor gamma = D({0.5, 0.25, 1});
  // Each step its own discount: 1 + 0.5 * 4, 2 + 0.25 * 10, 3 + 1 * 16.
  EXPECT_TRUE(
      tensordict::td0_return(gamma, nv, r, done).equal(D({3, 4.5, 19})));
  // G2 = 3 + 1 * 16 = 19, G1 = 2 + 0.25 * 19 = 6.75, G0 = 1 + 0.5 * 6.75.
  EXPECT_TRUE(tensordict::td1_return(gamma, nv, r, done, {}, -1)
                  .equal(D({4.375, 6.75, 19})));
  // lambda 1, 0, 0.5: G2 = 3 + (0.5 * 16 + 0.5 * 16) = 19,
  // G1 = 2 + 0.25 * 10 = 4.5 (one step), G0 = 1 + 0.5 * 4.5 (all of G1).
  EXPECT_TRUE(
      tensordict::td_lambda_return(gamma, D({1, 0, 0.5}), nv, r, done, {}, -1)
          .equal(D({3.25, 4.5, 19})));
  // A 0-dim tensor is the number; a tensor broadcasts over the batch.
  const Episodes e = MakeEpisodes({3, 50, 1}, 11);
  EXPECT_TRUE(tensordict::td_lambda_return(at::scalar_tensor(0.9, at::kDouble),
                                           at::scalar_tensor(0.8, at::kDouble),
                                           e.next_value, e.reward, e.done,
                                           e.terminated)
                  .equal(tensordict::td_lambda_return(
                      0.9, 0.8, e.next_value, e.reward, e.done, e.terminated)));
  EXPECT_TRUE(tensordict::td1_return(at::scalar_tensor(0.9, at::kDouble),
                                     e.next_value, e.reward, e.done,
                                     e.terminated)
                  .equal(tensordict::td1_return(0.9, e.next_value, e.reward,
                                                e.done, e.terminated)));
  EXPECT_TRUE(tensordict::td0_return(at::scalar_tensor(0.9, at::kDouble),
                                     e.next_value, e.reward, e.terminated)
                  .equal(tensordict::td0_return(0.9, e.next_value, e.reward,
                                                e.terminated)));
  const at::Tensor per_env = D({0.9, 0.5, 0.99}).reshape({3, 1, 1});
  const at::Tensor got = tensordict::td_lambda_return(
      per_env, at::scalar_tensor(0.8, at::kDouble), e.next_value, e.reward,
      e.done, e.terminated);
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_TRUE(got[b].equal(tensordict::td_lambda_return(
        per_env[b].item<double>(), 0.8, e.next_value[b], e.reward[b], e.done[b],
        e.terminated[b])))
        << "env " << b;
  }
}

TEST(ReturnsTest, VtraceClipsTheImportanceWeights) {
  // Two steps, gamma = 0.5; pi/mu = 2 then 0.5, both thresholds 1:
  // clipped rho = c = [1, 0.5].
  const at::Tensor v = D({1, 2});
  const at::Tensor nv = D({2, 4});
  const at::Tensor r = D({1, 1});
  const at::Tensor log_pi = at::log(D({2, 0.5}));
  const at::Tensor log_mu = at::zeros({2}, torch::kDouble);
  // delta1 = 0.5 * (1 + 2 - 2) = 0.5, v1 = 2.5; delta0 = 1 + 0.5 * 2 - 1 = 1,
  // v0 = 1 + 1 + 0.5 * 1 * 0.5 = 2.25. Advantages: 0.5 * (1 + 0.5 * 4 - 2) =
  // 0.5 and 1 * (1 + 0.5 * v1 - 1) = 1.25.
  AdvantageEstimate e = tensordict::vtrace(0.5, log_pi, log_mu, v, nv, r,
                                           B({0, 0}), {}, 1.0, 1.0, -1);
  EXPECT_TRUE(e.value_target.allclose(D({2.25, 2.5}), 0, 1e-12));
  EXPECT_TRUE(e.advantage.allclose(D({1.25, 0.5}), 0, 1e-12));
  // Truncated at step 0: no recursion across it, and its advantage
  // bootstraps from its own next value (1 * (1 + 0.5 * 2 - 1) = 1), not from
  // the next episode's v1.
  e = tensordict::vtrace(0.5, log_pi, log_mu, v, nv, r, B({1, 0}), B({0, 0}),
                         1.0, 1.0, -1);
  EXPECT_TRUE(e.value_target.allclose(D({2, 2.5}), 0, 1e-12));
  EXPECT_TRUE(e.advantage.allclose(D({1, 0.5}), 0, 1e-12));
}

TEST(ReturnsTest, RewardToGoRestartsAfterEachDone) {
  // TorchRL's docstring example.
  const at::Tensor reward = torch::ones({1, 10});
  at::Tensor done = torch::zeros({1, 10}, torch::kBool);
  done.index_put_({0, 3}, true);
  done.index_put_({0, 7}, true);
  const at::Tensor got = tensordict::reward_to_go(reward, done, 0.99, -1);
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(
      got.allclose(torch::tensor({{3.940399, 2.9701, 1.99, 1.0, 3.940399,
                                   2.9701, 1.99, 1.0, 1.99, 1.0}}),
                   0, 1e-6));
}

// ---- Identities on random episodes -----------------------------------------------

TEST(ReturnsTest, TdLambdaIsTd1AtLambdaOneAndTd0AtLambdaZero) {
  const Episodes e = MakeEpisodes({4, 50, 2}, 1);
  ASSERT_GT(e.done.sum().item<int64_t>(), 40);
  EXPECT_TRUE(tensordict::td_lambda_return(0.9, 1.0, e.next_value, e.reward,
                                           e.done, e.terminated)
                  .equal(tensordict::td1_return(0.9, e.next_value, e.reward,
                                                e.done, e.terminated)));
  EXPECT_TRUE(tensordict::td_lambda_return(0.9, 0.0, e.next_value, e.reward,
                                           e.done, e.terminated)
                  .equal(tensordict::td0_return(0.9, e.next_value, e.reward,
                                                e.terminated)));
}

TEST(ReturnsTest, GaeAdvantagePlusValueIsTheTdLambdaReturnShiftedByValues) {
  // GAE's value target equals TD(lambda)'s return when next_value is the
  // next step's value inside episodes (the usual data).
  const Episodes e = MakeEpisodes({3, 40, 1}, 2);
  at::Tensor nv =
      at::cat({e.value.narrow(1, 1, 39), e.next_value.narrow(1, 39, 1)}, 1);
  nv = at::where(e.done, e.next_value, nv);
  const AdvantageEstimate g =
      tensordict::gae(e.reward, e.value, nv, e.done, e.terminated, 0.9, 0.8, 1);
  const at::Tensor ret = tensordict::td_lambda_return(0.9, 0.8, nv, e.reward,
                                                      e.done, e.terminated);
  EXPECT_TRUE(g.value_target.allclose(ret, 0, 1e-10));
}

TEST(ReturnsTest, GaeOverOneColumnEqualsItsColumnOfAWiderBatch) {
  // One column runs as pieces cut at episode ends, interleaved; several
  // columns run across SIMD lanes. Both must give the one chain's values,
  // exactly: the column is compared with column 0 of the same data widened
  // to [.., T, 2] (the second column is other data).
  auto check = [](const Episodes& e, int64_t time_dim) {
    auto wide = [](const at::Tensor& t) {
      return at::cat({t, t.flip(-2)}, -1);
    };
    const AdvantageEstimate one =
        tensordict::gae(e.reward, e.value, e.next_value, e.done, e.terminated,
                        0.99, 0.95, time_dim);
    const AdvantageEstimate two =
        tensordict::gae(wide(e.reward), wide(e.value), wide(e.next_value),
                        wide(e.done), wide(e.terminated), 0.99, 0.95, time_dim);
    EXPECT_TRUE(one.advantage.equal(two.advantage.narrow(-1, 0, 1)));
    EXPECT_TRUE(one.value_target.equal(two.value_target.narrow(-1, 0, 1)));
  };
  {
    SCOPED_TRACE("episode ends throughout, two slices");
    check(MakeEpisodes({2, 1000, 1}, 7, at::kFloat), 1);
  }
  Episodes e = MakeEpisodes({1000, 1}, 8, at::kFloat);
  const std::vector<std::vector<int64_t>> ends = {
      {}, {3}, {999}, {250, 251, 252}, {10, 500, 990}};
  for (const auto& at_steps : ends) {
    SCOPED_TRACE(::testing::PrintToString(at_steps));
    e.done = at::zeros({1000, 1}, at::kBool);
    for (int64_t s : at_steps) e.done[s][0] = true;
    e.terminated = e.done.clone();
    check(e, 0);
  }
  {
    SCOPED_TRACE("three steps");
    check(MakeEpisodes({3, 1}, 9, at::kFloat), 0);
  }
}

TEST(ReturnsTest, VtraceOnPolicyIsGaeWithLambdaOne) {
  const Episodes e = MakeEpisodes({3, 40, 1}, 3);
  const AdvantageEstimate vt =
      tensordict::vtrace(0.9, e.log_mu, e.log_mu, e.value, e.next_value,
                         e.reward, e.done, e.terminated);
  const AdvantageEstimate g = tensordict::gae(
      e.reward, e.value, e.next_value, e.done, e.terminated, 0.9, 1.0, -2);
  EXPECT_TRUE(vt.value_target.allclose(g.value_target, 0, 1e-10));
}

TEST(ReturnsTest, AnyTimeDimGivesTheTimeMajorResultTransposed) {
  // [B=2, T=30, F=3] with time at 1 (-2), against [T, B, F] with time at 0.
  const Episodes e = MakeEpisodes({2, 30, 3}, 4, at::kFloat);
  auto tm = [](const at::Tensor& t) { return t.transpose(0, 1).contiguous(); };
  auto back = [](const at::Tensor& t) { return t.transpose(0, 1); };
  EXPECT_TRUE(tensordict::td_lambda_return(0.9, 0.7, e.next_value, e.reward,
                                           e.done, e.terminated, -2)
                  .equal(back(tensordict::td_lambda_return(
                      0.9, 0.7, tm(e.next_value), tm(e.reward), tm(e.done),
                      tm(e.terminated), 0))));
  EXPECT_TRUE(tensordict::td1_return(0.9, e.next_value, e.reward, e.done,
                                     e.terminated, 1)
                  .equal(back(tensordict::td1_return(0.9, tm(e.next_value),
                                                     tm(e.reward), tm(e.done),
                                                     tm(e.terminated), 0))));
  const AdvantageEstimate a =
      tensordict::vtrace(0.9, e.log_pi, e.log_mu, e.value, e.next_value,
                         e.reward, e.done, e.terminated, 1.0, 1.0, -2);
  const AdvantageEstimate b = tensordict::vtrace(
      0.9, tm(e.log_pi), tm(e.log_mu), tm(e.value), tm(e.next_value),
      tm(e.reward), tm(e.done), tm(e.terminated), 1.0, 1.0, 0);
  EXPECT_TRUE(a.advantage.equal(back(b.advantage)));
  EXPECT_TRUE(a.value_target.equal(back(b.value_target)));
  EXPECT_TRUE(tensordict::reward_to_go(e.reward, e.done, 0.9, 1)
                  .equal(back(tensordict::reward_to_go(tm(e.reward), tm(e.done),
                                                       0.9, 0))));
  // A strided (non-contiguous) input is read the same.
  const at::Tensor strided = tm(e.reward).transpose(0, 1);
  ASSERT_FALSE(strided.is_contiguous());
  EXPECT_TRUE(
      tensordict::td1_return(0.9, e.next_value, strided, e.done, e.terminated)
          .equal(tensordict::td1_return(0.9, e.next_value, e.reward, e.done,
                                        e.terminated)));
}

TEST(ReturnsTest, ResultsAreInTheNextValuesDtypeWithoutHistory) {
  const Episodes e = MakeEpisodes({2, 5, 1}, 5, at::kFloat);
  const at::Tensor nv = e.next_value.clone().requires_grad_();
  const at::Tensor ret = tensordict::td_lambda_return(
      0.9, 0.9, nv, e.reward.to(at::kDouble), e.done);
  EXPECT_EQ(ret.scalar_type(), at::kFloat);
  EXPECT_FALSE(ret.requires_grad());
  EXPECT_EQ(
      tensordict::td_lambda_return(0.9, 0.9, nv.to(at::kHalf), e.reward, e.done)
          .scalar_type(),
      at::kHalf);
}

TEST(ReturnsTest, BadInputsThrowNamingTheArgumentAndShapes) {
  const at::Tensor v = torch::zeros({2, 4});
  const at::Tensor flag = torch::zeros({2, 4}, torch::kBool);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::td_lambda_return(0.9, 0.9, v, v,
                                           torch::zeros({2, 3}, torch::kBool));
      },
      "td_lambda_return: done has shape [2, 3], expected next_value's shape "
      "[2, 4]");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tensordict::td_lambda_return(0.9, 0.9, v, v, flag, {}, 2); },
      "td_lambda_return: time_dim 2 is out of range for next_value of shape "
      "[2, 4] (expected a dim in [-2, 1])");
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::td_lambda_return(torch::full({3}, 0.9),
                                           at::scalar_tensor(0.9, at::kDouble),
                                           v, v, flag);
      },
      "td_lambda_return: gamma of shape [3] does not broadcast to "
      "next_value's shape [2, 4]");
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        (void)tensordict::td1_return(torch::ones({2, 1}, torch::kBool), v, v,
                                     flag);
      },
      "td1_return: gamma must be a real tensor, got torch.bool");
  ExpectThrowsMsg(
      [&] { (void)tensordict::td0_return(at::Tensor(), v, v, flag); },
      "td0_return: gamma is an undefined tensor");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tensordict::reward_to_go(torch::zeros({5}), flag[0], 0.9); },
      "reward_to_go: time_dim -2 is out of range for reward of shape [5] "
      "(expected a dim in [-1, 0])");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::td1_return(0.9, v, v, v); },
      "td1_return: done must be a bool tensor, got torch.float32");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::vtrace(0.9, v, v, v, v, v.to(at::kLong), flag); },
      "vtrace: reward must be a floating-point tensor, got torch.int64");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::td0_return(0.9, flag, v, flag); },
      "td0_return: next_value must be a floating-point tensor, got "
      "torch.bool");
  ExpectThrowsMsg(
      [&] { (void)tensordict::vtrace(0.9, v, at::Tensor(), v, v, v, flag); },
      "vtrace: log_mu is an undefined tensor");
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::reward_to_go(torch::tensor(1.0), torch::tensor(true),
                                       0.9);
      },
      "reward_to_go: reward must have a time dim, got shape [] (a 0-dim "
      "tensor)");
  // A broadcastable log-prob is refused, not broadcast.
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::vtrace(0.9, torch::zeros({2, 4, 1}), v, v, v, v, flag,
                                 {}, 1.0, 1.0, -1);
      },
      "vtrace: log_pi has shape [2, 4, 1], expected value's shape [2, 4]");
}

// ---- The TensorDict forms --------------------------------------------------------

namespace {

// A [B=2, T=6] batch in TorchRL's layout, leaves [2, 6, 1].
TensorDict MakeBatch(uint64_t seed) {
  const Episodes e = MakeEpisodes({2, 6, 1}, seed, at::kFloat);
  return TensorDict({{"state_value", e.value},
                     {"sample_log_prob", e.log_mu},
                     {"log_prob", e.log_pi},
                     {{"next", "state_value"}, e.next_value},
                     {{"next", "reward"}, e.reward},
                     {{"next", "done"}, e.done},
                     {{"next", "terminated"}, e.terminated}},
                    {2, 6});
}

}  // namespace

TEST(ValueEstimatorTest, EachKindSetsTheFunctionsResultAlongTheLastBatchDim) {
  const TensorDict td = MakeBatch(6);
  const at::Tensor v = td.get("state_value");
  const at::Tensor nv = td.get({"next", "state_value"});
  const at::Tensor r = td.get({"next", "reward"});
  const at::Tensor d = td.get({"next", "done"});
  const at::Tensor term = td.get({"next", "terminated"});
  struct Case {
    ValueEstimator estimator;
    at::Tensor target;
  };
  const Case cases[] = {
      {ValueEstimator::td0(0.9), tensordict::td0_return(0.9, nv, r, term)},
      {ValueEstimator::td1(0.9), tensordict::td1_return(0.9, nv, r, d, term)},
      {ValueEstimator::td_lambda(0.9, 0.8),
       tensordict::td_lambda_return(0.9, 0.8, nv, r, d, term)},
      {ValueEstimator::gae(0.9, 0.8),
       tensordict::gae(r, v, nv, d, term, 0.9, 0.8, 1).value_target},
      {ValueEstimator::vtrace(0.9, 1.0, 0.9),
       tensordict::vtrace(0.9, td.get("log_prob"), td.get("sample_log_prob"), v,
                          nv, r, d, term, 1.0, 0.9)
           .value_target}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.estimator.name());
    const TensorDict out = td.copy();
    EXPECT_EQ(&c.estimator(out), &out);
    EXPECT_TRUE(out.get("value_target").equal(c.target));
    if (c.estimator.kind() == ValueEstimator::Kind::kVTrace) {
      EXPECT_TRUE(out.get("advantage")
                      .equal(tensordict::vtrace(0.9, td.get("log_prob"),
                                                td.get("sample_log_prob"), v,
                                                nv, r, d, term, 1.0, 0.9)
                                 .advantage));
    } else {
      EXPECT_TRUE(out.get("advantage").allclose(c.target - v, 0, 1e-6));
    }
    EXPECT_FALSE(td.contains("advantage"));
  }
}

TEST(ValueEstimatorTest, ReadsTruncatedAsDoneAndHonoursTimeDimAndKeys) {
  TensorDict td = MakeBatch(7);
  at::Tensor trunc = torch::zeros({2, 6, 1}, torch::kBool);
  trunc.index_put_({0, 2, 0}, true);
  td.set({"next", "truncated"}, trunc);
  const at::Tensor done = td.get({"next", "done"}).logical_or(trunc);
  const ValueEstimator e = ValueEstimator::td_lambda(0.9, 0.8);
  EXPECT_TRUE(e.estimate(td).value_target.equal(tensordict::td_lambda_return(
      0.9, 0.8, td.get({"next", "state_value"}), td.get({"next", "reward"}),
      done, td.get({"next", "terminated"}))));
  // Time first: the same data transposed, with time_dim(0).
  const TensorDict tm = td.transpose(0, 1);
  EXPECT_TRUE(ValueEstimator(e).time_dim(0).estimate(tm).value_target.equal(
      e.estimate(td).value_target.transpose(0, 1)));
  EXPECT_TRUE(ValueEstimator(e).time_dim(-2).estimate(tm).value_target.equal(
      e.estimate(td).value_target.transpose(0, 1)));
  // Other keys.
  td.rename_key_("state_value", "v");
  ValueEstimator(e).keys(
      EstimatorKeys().value("v").advantage("adv").value_target({"out", "ret"}))(
      td);
  EXPECT_TRUE(td.contains("adv"));
  EXPECT_TRUE(td.contains({"out", "ret"}));
}

TEST(ValueEstimatorTest, Td0DiscountsByStepsToNextObs) {
  const TensorDict td = MakeBatch(8);
  const at::Tensor n =
      torch::tensor({1, 2, 3, 1, 2, 3, 3, 3, 2, 1, 1, 1}).reshape({2, 6});
  td.set("steps_to_next_obs", n);
  const at::Tensor nv = td.get({"next", "state_value"});
  const at::Tensor want = tensordict::td0_return(
      1.0, nv * at::pow(0.9, n.unsqueeze(-1).to(at::kFloat)),
      td.get({"next", "reward"}), td.get({"next", "terminated"}));
  EXPECT_TRUE(ValueEstimator::td0(0.9).estimate(td).value_target.allclose(
      want, 0, 1e-6));
}

TEST(ValueEstimatorTest, BadInputsThrowNamingTheKeyAndChangeNothing) {
  const TensorDict td = MakeBatch(9);
  const ValueEstimator e = ValueEstimator::td_lambda(0.9, 0.8);
  // Each case: the data (a shallow copy of td, changed), the estimator and
  // the message; the data is checked unchanged after the error.
  auto expect = [&](const TensorDict& data, const ValueEstimator& est,
                    const std::string& msg) {
    const auto before = TakeSnapshot(data);
    ExpectThrowsMsg([&] { est(data); }, msg);
    ExpectUnchanged(data, before);
  };
  auto with = [&](const tensordict::NestedKey& key, const at::Tensor& t) {
    const TensorDict c = td.copy();
    c.set(key, t);
    return c;
  };
  expect(with({"next", "done"}, td.get({"next", "done"}).to(at::kFloat)), e,
         "TDLambdaEstimator: key ('next', 'done') (done) must be a bool "
         "tensor, got torch.float32");
  expect(td.copy(), ValueEstimator(e).time_dim(2),
         "TDLambdaEstimator: time_dim 2 is not a batch dim of the data (batch "
         "size [2, 6])");
  expect(with({"next", "reward"}, torch::zeros({2, 6})), e,
         "TDLambdaEstimator: key ('next', 'reward'): expected shape [2, 6, 1] "
         "(like state_value), got [2, 6]");
  expect(td.exclude({"log_prob"}), ValueEstimator::vtrace(0.9),
         "VTrace: missing key log_prob (log prob)");
  expect(td.exclude({{"next", "state_value"}}), e,
         "TDLambdaEstimator: missing key ('next', 'state_value') (next "
         "value): set the critic's values, e.g. from one batched forward "
         "pass, before calling the estimator");
  expect(td.copy(), ValueEstimator(e).keys(EstimatorKeys().advantage("next")),
         "TDLambdaEstimator: cannot store the advantage at next: it holds a "
         "TensorDict");
  expect(with("state_value", torch::zeros({2, 6, 1}, torch::kLong)), e,
         "TDLambdaEstimator: key state_value: the value must be a "
         "floating-point tensor, got torch.int64");
}

TEST(RolloutBufferComputeTest, RunsAnyEstimatorAlongTimeDimZero) {
  RolloutBuffer buf(20, 3);
  const Episodes e = MakeEpisodes({20, 3, 1}, 10, at::kFloat);
  for (int64_t t = 0; t < 20; ++t) {
    buf.step(t, TensorDict({{"sample_log_prob", e.log_mu[t]},
                            {{"next", "reward"}, e.reward[t]},
                            {{"next", "done"}, e.done[t]},
                            {{"next", "terminated"}, e.terminated[t]}},
                           {3}));
  }
  const TensorDict d = buf.data();
  d.set("state_value", e.value);
  d.set({"next", "state_value"}, e.next_value);
  d.set("log_prob", e.log_pi);
  buf.compute(ValueEstimator::td_lambda(0.9, 0.8));
  EXPECT_TRUE(
      d.get("value_target")
          .equal(tensordict::td_lambda_return(0.9, 0.8, e.next_value, e.reward,
                                              e.done, e.terminated, 0)));
  const at::Tensor stored = d.get("advantage");
  buf.compute(ValueEstimator::vtrace(0.9));
  // The previous rollout's tensors are reused.
  EXPECT_EQ(d.get("advantage").data_ptr(), stored.data_ptr());
  EXPECT_TRUE(d.get("advantage")
                  .equal(tensordict::vtrace(0.9, e.log_pi, e.log_mu, e.value,
                                            e.next_value, e.reward, e.done,
                                            e.terminated, 1.0, 1.0, 0)
                             .advantage));
  d.erase("log_prob");
  const auto before = TakeSnapshot(d);
  ExpectThrowsMsg([&] { buf.compute(ValueEstimator::vtrace(0.9)); },
                  "RolloutBuffer::compute: missing key log_prob (log prob)");
  ExpectUnchanged(d, before);
}

// ---- multi_step --------------------------------------------------------------------

TEST(MultiStepTest, SumsTheWindowAndTakesTheNextStepFromItsEnd) {
  // One trajectory of 8 steps ending at step 3 (TorchRL's example layout),
  // n = 3, gamma = 0.9.
  at::Tensor done = torch::zeros({1, 8, 1}, torch::kBool);
  done.index_put_({0, 3, 0}, true);
  const TensorDict td(
      {{"obs", torch::arange(8, torch::kFloat).view({1, 8, 1})},
       {{"next", "obs"}, torch::arange(1, 9, torch::kFloat).view({1, 8, 1})},
       {{"next", "reward"}, torch::ones({1, 8, 1})},
       {{"next", "done"}, done},
       {{"next", "terminated"}, done}},
      {1, 8});
  const auto before = TakeSnapshot(td);
  const TensorDict out = tensordict::multi_step(td, 3, 0.9);
  ExpectUnchanged(td, before);
  auto flat = [&](const tensordict::NestedKey& k) {
    return out.get(k).reshape({-1});
  };
  EXPECT_TRUE(flat({"next", "obs"})
                  .equal(torch::tensor({3., 4., 4., 4., 7., 8., 8., 8.})));
  EXPECT_TRUE(
      flat({"next", "reward"})
          .allclose(torch::tensor({2.71, 2.71, 1.9, 1., 2.71, 2.71, 1.9, 1.}),
                    0, 1e-6));
  EXPECT_TRUE(flat({"next", "original_reward"}).equal(torch::ones({8})));
  EXPECT_TRUE(
      flat("steps_to_next_obs").equal(torch::tensor({3, 3, 2, 1, 3, 3, 2, 1})));
  EXPECT_TRUE(flat("gamma").allclose(
      torch::tensor({.729, .729, .81, .9, .729, .729, .81, .9}), 0, 1e-6));
  EXPECT_TRUE(flat("nonterminal").equal(B({1, 1, 1, 0, 1, 1, 1, 0})));
  // The flags are the window's last step's (TorchRL 0.14 keeps step t's).
  EXPECT_TRUE(flat({"next", "done"}).equal(B({0, 1, 1, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(flat({"next", "terminated"}).equal(B({0, 1, 1, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(out.get("obs").equal(td.get("obs")));
  // The TD(0) target on it is the n-step target.
  out.set("state_value", torch::zeros({1, 8, 1}));
  out.set({"next", "state_value"}, torch::ones({1, 8, 1}));
  EXPECT_TRUE(
      ValueEstimator::td0(0.9)
          .estimate(out)
          .value_target.reshape({-1})
          .allclose(torch::tensor({2.71 + 0.729, 2.71, 1.9, 1., 2.71 + 0.729,
                                   2.71 + 0.729, 1.9 + 0.81, 1. + 0.9}),
                    0, 1e-6));
}

TEST(MultiStepTest, BadArgumentsThrow) {
  const TensorDict td({{{"next", "reward"}, torch::ones({2, 5})},
                       {{"next", "done"}, torch::zeros({2, 5}, torch::kBool)}},
                      {2, 5});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)tensordict::multi_step(td, 0, 0.9); },
      "multi_step: n_steps must be at least 1, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)tensordict::multi_step(td, 2, 1.5); },
      "multi_step: gamma must be in (0, 1], got 1.5");
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::multi_step(td, 2, 0.9,
                                     MultiStepKeys().done({"next", "d"}));
      },
      "multi_step: missing key ('next', 'd') (done)");
  td.set({"next", "done"}, torch::zeros({2, 5, 2}, torch::kBool));
  ExpectThrowsMsg(
      [&] { (void)tensordict::multi_step(td, 2, 0.9); },
      "multi_step: key ('next', 'done') (done): expected shape [2, 5] or "
      "[2, 5, 1], got [2, 5, 2]");
  td.set({"next", "done"}, torch::zeros({2, 5}));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::multi_step(td, 2, 0.9); },
      "multi_step: key ('next', 'done') (done) must be a bool tensor, got "
      "torch.float32");
}
