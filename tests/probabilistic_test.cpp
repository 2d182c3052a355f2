// Tests of tensordict/probabilistic.h: the interaction type and its guard,
// ProbabilisticTensorDictModule's keys, values and errors (a failed call
// changes nothing), and ProbabilisticTensorDictSequential with
// TensorDictModules before it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/probabilistic.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

namespace D = tensordict::distributions;
using tensordict::InteractionType;
using tensordict::InteractionTypeGuard;
using tensordict::NestedKey;
using tensordict::ProbabilisticOptions;
using tensordict::ProbabilisticTensorDictModule;
using tensordict::ProbabilisticTensorDictSequential;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;

at::Generator Seeded(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

TensorDict LocScale() {
  return TensorDict({{"loc", torch::tensor({{0.5, -1.0}, {2.0, 0.0}})},
                     {"scale", torch::tensor({{1.0, 0.5}, {0.2, 2.0}})}},
                    {2});
}

ProbabilisticTensorDictModule NormalSampler(ProbabilisticOptions o = {}) {
  return {{"loc", "scale"}, {"action"}, D::normal(), std::move(o)};
}

}  // namespace

// ---- Interaction type -------------------------------------------------------

TEST(ProbabilisticInteractionType, GuardsNestAndRestore) {
  EXPECT_FALSE(tensordict::interaction_type().has_value());
  {
    const InteractionTypeGuard outer(InteractionType::RANDOM);
    EXPECT_EQ(tensordict::interaction_type(), InteractionType::RANDOM);
    {
      const InteractionTypeGuard inner;  // Python's default: DETERMINISTIC
      EXPECT_EQ(tensordict::interaction_type(), InteractionType::DETERMINISTIC);
      const InteractionTypeGuard cleared(c10::nullopt);
      EXPECT_FALSE(tensordict::interaction_type().has_value());
    }
    EXPECT_EQ(tensordict::interaction_type(), InteractionType::RANDOM);
    // Per thread: another thread sees none.
    std::thread([] {
      EXPECT_FALSE(tensordict::interaction_type().has_value());
    }).join();
  }
  EXPECT_FALSE(tensordict::interaction_type().has_value());
}

TEST(ProbabilisticInteractionType, NamesArePythons) {
  EXPECT_EQ(tensordict::to_string(InteractionType::DETERMINISTIC),
            "deterministic");
  EXPECT_EQ(tensordict::interaction_type_from_string("Random"),
            InteractionType::RANDOM);
  EXPECT_EQ(tensordict::interaction_type_from_string("mode"),
            InteractionType::MODE);
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)tensordict::interaction_type_from_string("greedy"); },
      "interaction type 'greedy' is not one of mode, median, mean, random, "
      "deterministic");
}

// ---- ProbabilisticTensorDictModule ------------------------------------------

TEST(ProbabilisticModule, WritesTheValueAndItsLogProbUnderPythonsKeys) {
  const TensorDict td = LocScale();
  const ProbabilisticTensorDictModule m =
      NormalSampler(ProbabilisticOptions().return_log_prob(true));
  EXPECT_EQ(m.in_keys(), (std::vector<NestedKey>{"loc", "scale"}));
  EXPECT_EQ(m.out_keys(),
            (std::vector<NestedKey>{"action", "action_log_prob"}));
  EXPECT_EQ(m.log_prob_key(), NestedKey("action_log_prob"));
  EXPECT_EQ(m.dist_keys(), (std::vector<std::string>{"loc", "scale"}));
  m(td);
  EXPECT_EQ(td.keys(), (std::vector<NestedKey>{"loc", "scale", "action",
                                               "action_log_prob"}));
  // DETERMINISTIC (the default): a Normal's mean.
  EXPECT_TRUE(td.get("action").equal(td.get("loc")));
  const D::Normal d(td.get("loc"), td.get("scale"));
  EXPECT_TRUE(td.get("action_log_prob").allclose(d.log_prob(td.get("loc"))));
  EXPECT_TRUE(m.log_prob(td).allclose(td.get("action_log_prob")));
  EXPECT_EQ(m.get_dist(td)->name(), "Normal");
}

TEST(ProbabilisticModule, WithoutLogProbWritesOnlyTheValue) {
  const TensorDict td = LocScale();
  NormalSampler()(td);
  EXPECT_EQ(td.keys(), (std::vector<NestedKey>{"loc", "scale", "action"}));
}

TEST(ProbabilisticModule, LogProbKeyFollowsANestedOutKeyOrIsGiven) {
  const ProbabilisticTensorDictModule nested(
      {"loc", "scale"}, {{"agent", "action"}}, D::normal(),
      ProbabilisticOptions().return_log_prob(true));
  EXPECT_EQ(nested.log_prob_key(), NestedKey({"agent", "action_log_prob"}));
  const TensorDict td = LocScale();
  nested(td);
  EXPECT_TRUE(td.contains({"agent", "action_log_prob"}));
  // tensordict 0.4's name, for data that Python 0.4 code reads.
  const ProbabilisticTensorDictModule v04 =
      NormalSampler(ProbabilisticOptions().return_log_prob(true).log_prob_key(
          "sample_log_prob"));
  v04(td);
  EXPECT_TRUE(td.contains("sample_log_prob"));
}

TEST(ProbabilisticModule, DistKeysNameTheParametersOfOtherKeys) {
  const TensorDict td(
      {{"mu", torch::zeros({3, 2})}, {"sigma", torch::ones({3, 2})}}, {3});
  const ProbabilisticTensorDictModule m(
      {"mu", "sigma"}, {"action"}, D::normal(),
      ProbabilisticOptions().dist_keys({"loc", "scale"}));
  m(td);
  EXPECT_TRUE(td.get("action").equal(torch::zeros({3, 2})));
  const ProbabilisticTensorDictModule unnamed({"mu", "sigma"}, {"action"},
                                              D::normal());
  ExpectThrowsMsg<c10::ValueError>(
      [&] { unnamed(td); },
      "Normal: unexpected parameter mu (expected loc, scale); map other "
      "keys with ProbabilisticOptions::dist_keys");
}

TEST(ProbabilisticModule, RandomDrawsFromTheGeneratorWithGradients) {
  const TensorDict td = LocScale();
  const at::Tensor loc = td.get("loc").requires_grad_();
  const ProbabilisticTensorDictModule a =
      NormalSampler(ProbabilisticOptions().generator(Seeded(9)));
  const ProbabilisticTensorDictModule b =
      NormalSampler(ProbabilisticOptions().generator(Seeded(9)));
  const InteractionTypeGuard random(InteractionType::RANDOM);
  EXPECT_EQ(a.current_interaction_type(), InteractionType::RANDOM);
  const at::Tensor first = a(td).get("action");
  EXPECT_TRUE(first.requires_grad());  // rsample
  EXPECT_TRUE(first.equal(
      D::Normal(td.get("loc"), td.get("scale")).rsample({}, Seeded(9))));
  EXPECT_FALSE(first.equal(loc));
  EXPECT_TRUE(b(td).get("action").equal(first));
  // The generator advances: the next draw differs.
  EXPECT_FALSE(a(td).get("action").equal(first));
}

TEST(ProbabilisticModule, TheDefaultInteractionTypeAppliesWithoutAGuard) {
  const TensorDict td(
      {{"logits", torch::tensor({{0.0, 3.0, 1.0}, {2.0, 0.0, 0.0}})}}, {2});
  const ProbabilisticTensorDictModule m(
      {"logits"}, {"action"}, D::categorical(),
      ProbabilisticOptions().default_interaction_type(InteractionType::MODE));
  EXPECT_TRUE(m(td).get("action").equal(torch::tensor({1, 0}, at::kLong)));
  EXPECT_EQ(m.options().default_interaction_type(), InteractionType::MODE);
}

TEST(ProbabilisticModule, MeanFallsBackToTheMeanOfDraws) {
  const TensorDict td({{"loc", torch::tensor({{0.5, -0.5}})},
                       {"scale", torch::full({1, 2}, 0.1)}},
                      {1});
  const ProbabilisticTensorDictModule m(
      {"loc", "scale"}, {"action"}, D::tanh_normal(),
      ProbabilisticOptions().n_empirical_estimate(2000).generator(Seeded(1)));
  const InteractionTypeGuard mean(InteractionType::MEAN);
  const at::Tensor a = m(td).get("action");
  EXPECT_EQ(a.sizes(), at::IntArrayRef({1, 2}));
  EXPECT_TRUE(a.allclose(torch::tensor({{0.5, -0.5}}).tanh(), 0, 0.01));
}

TEST(ProbabilisticModule, AFailedCallChangesNothing) {
  const TensorDict td = LocScale();
  td.set("scale", torch::tensor({{1.0, -0.5}, {0.2, 2.0}}));
  const auto snap = TakeSnapshot(td);
  const ProbabilisticTensorDictModule m =
      NormalSampler(ProbabilisticOptions().return_log_prob(true));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { m(td); },
      "Normal: parameter scale (shape [2, 2]) must be > 0; found invalid "
      "values");
  ExpectUnchanged(td, snap);

  const TensorDict partial({{"loc", torch::zeros({2, 2})}}, {2});
  const auto snap2 = TakeSnapshot(partial);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { m(partial); },
      "TensorDictModule: in_key scale is not in the dict (keys: [loc])");
  ExpectUnchanged(partial, snap2);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)m.get_dist(partial); },
      "ProbabilisticTensorDictModule: in_key scale is not in the dict (keys: "
      "[loc])");

  // No closed-form mode: MODE on a TanhNormal throws before any write.
  const TensorDict ok = LocScale();
  const auto snap3 = TakeSnapshot(ok);
  const ProbabilisticTensorDictModule tanh(
      {"loc", "scale"}, {"action"}, D::tanh_normal(),
      ProbabilisticOptions().return_log_prob(true));
  {
    const InteractionTypeGuard mode(InteractionType::MODE);
    ExpectThrowsMsg<c10::NotImplementedError>(
        [&] { tanh(ok); },
        "TanhNormal: mode has no closed form (as in TorchRL 0.14); use "
        "deterministic_sample() (InteractionType::DETERMINISTIC)");
    ExpectUnchanged(ok, snap3);
  }
  {
    const InteractionTypeGuard median(InteractionType::MEDIAN);
    ExpectThrowsMsg<c10::NotImplementedError>(
        [&] { tanh(ok); },
        "ProbabilisticTensorDictModule: InteractionType::MEDIAN is not "
        "implemented for TanhNormal");
    ExpectUnchanged(ok, snap3);
  }
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)tanh.log_prob(ok); },
      "ProbabilisticTensorDictModule::log_prob: the value's key action is not "
      "in the dict (keys: [loc, scale])");
}

TEST(ProbabilisticModule, RejectsBadConstruction) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule({"loc", "scale"}, {"a", "b"},
                                      D::normal());
      },
      "ProbabilisticTensorDictModule: expected one out_key (the value's key), "
      "got [a, b]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule({"loc", "scale"}, {"a"}, nullptr);
      },
      "ProbabilisticTensorDictModule: the distribution factory is empty");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule(
            {"loc", "scale"}, {"a"}, D::normal(),
            ProbabilisticOptions().dist_keys({"loc"}));
      },
      "ProbabilisticTensorDictModule: dist_keys has 1 names for 2 in_keys "
      "[loc, scale]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule(
            {"loc", "scale"}, {"a"}, D::normal(),
            ProbabilisticOptions().return_log_prob(true).log_prob_key("a"));
      },
      "ProbabilisticTensorDictModule: log_prob_key a is also the out_key");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule(
            {"loc", "scale"}, {"a"}, D::normal(),
            ProbabilisticOptions().n_empirical_estimate(0));
      },
      "ProbabilisticTensorDictModule: n_empirical_estimate must be positive, "
      "got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ProbabilisticTensorDictModule(
            {"loc", "scale"}, {"a"}, D::normal(),
            ProbabilisticOptions().default_interaction_type(
                static_cast<InteractionType>(42)));
      },
      "ProbabilisticTensorDictModule: default_interaction_type 42 is not an "
      "InteractionType (MODE, MEDIAN, MEAN, RANDOM, DETERMINISTIC)");
}

TEST(ProbabilisticModule, AGuardOfAnUnknownTypeThrowsAndSetsNothing) {
  const InteractionTypeGuard random(InteractionType::RANDOM);
  ExpectThrowsMsg<c10::ValueError>(
      [] { const InteractionTypeGuard bad(static_cast<InteractionType>(-1)); },
      "InteractionTypeGuard: -1 is not an InteractionType (MODE, MEDIAN, "
      "MEAN, RANDOM, DETERMINISTIC)");
  EXPECT_EQ(tensordict::interaction_type(), InteractionType::RANDOM);
}

// ---- ProbabilisticTensorDictSequential --------------------------------------

TEST(ProbabilisticSequential, ComposesWithTensorDictModules) {
  torch::manual_seed(0);
  const TensorDict td({{"observation", torch::randn({6, 4})}}, {6});
  const TensorDictModule actor(torch::nn::Linear(4, 3), {"observation"},
                               {"logits"});
  const ProbabilisticTensorDictSequential policy(
      {actor},
      ProbabilisticTensorDictModule(
          {"logits"}, {"action"}, D::categorical(),
          ProbabilisticOptions().return_log_prob(true).generator(Seeded(2))));
  EXPECT_EQ(policy.in_keys(), std::vector<NestedKey>{"observation"});
  EXPECT_EQ(policy.out_keys(),
            (std::vector<NestedKey>{"logits", "action", "action_log_prob"}));
  EXPECT_EQ(policy.size(), 2U);
  {
    const InteractionTypeGuard random(InteractionType::RANDOM);
    policy(td);
  }
  EXPECT_EQ(td.get("action").sizes(), at::IntArrayRef({6}));
  EXPECT_EQ(td.get("action").scalar_type(), at::kLong);
  // The losses' view: the distribution of the current parameters, and the
  // stored action's log-probability under it.
  EXPECT_TRUE(policy.log_prob(td).allclose(td.get("action_log_prob")));
  const auto dist = policy.get_dist(td);
  EXPECT_EQ(dist->batch_shape(), std::vector<int64_t>{6});
  EXPECT_EQ(policy.probabilistic_module().sample_key(), NestedKey("action"));
}

TEST(ProbabilisticSequential, GetDistRunsTheModulesBeforeIt) {
  const TensorDict td({{"observation", torch::ones({2, 2})}}, {2});
  const TensorDictModule params(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0] * 2, in[0] / 2};
      },
      {"observation"}, {"loc", "scale"});
  const ProbabilisticTensorDictSequential policy({params}, NormalSampler());
  const auto dist = policy.get_dist(td);
  EXPECT_TRUE(dist->mean().equal(torch::full({2, 2}, 2.0)));
  EXPECT_TRUE(td.contains("loc"));  // as Python's get_dist
  EXPECT_FALSE(td.contains("action"));
}

TEST(ProbabilisticSequential, AProbabilisticModuleAloneOrInsideASequence) {
  const ProbabilisticTensorDictSequential alone({}, NormalSampler());
  const TensorDict td = LocScale();
  alone(td);
  EXPECT_TRUE(td.get("action").equal(td.get("loc")));
  // A plain TensorDictSequential takes it like any module.
  const TensorDict td2 = LocScale();
  const TensorDictSequential seq(
      {NormalSampler(ProbabilisticOptions().return_log_prob(true))});
  seq(td2);
  EXPECT_TRUE(td2.contains("action_log_prob"));
}

TEST(ProbabilisticSequential, AFailedCallChangesNothing) {
  const TensorDict td({{"observation", torch::ones({2, 2})}}, {2});
  const auto snap = TakeSnapshot(td);
  const TensorDictModule params(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0], -in[0]};  // a negative scale
      },
      {"observation"}, {"loc", "scale"});
  const ProbabilisticTensorDictSequential policy({params}, NormalSampler());
  ExpectThrowsMsg<c10::ValueError>(
      [&] { policy(td); },
      "Normal: parameter scale (shape [2, 2]) must be > 0; found invalid "
      "values");
  ExpectUnchanged(td, snap);
}
