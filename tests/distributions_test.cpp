// Tests of tensordict/distributions.h: Categorical, Normal and TanhNormal
// values on inputs worked out by hand, their draws (shapes, gradients,
// seeded reproducibility), and the exact messages of their checks. The
// comparison with Python's values is in python_distributions_test.cpp.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/distributions.h>
#include <tensordict/tensordict.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

namespace D = tensordict::distributions;
using tensordict_test::ExpectThrowsMsg;

constexpr double kLog2Pi = 1.8378770664093453;  // log(2 pi)

at::Generator Seeded(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

void ExpectAllClose(const at::Tensor& a, const at::Tensor& b) {
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_TRUE(at::allclose(a.to(at::kDouble), b.to(at::kDouble), 1e-5, 1e-6))
      << a << "\nvs\n"
      << b;
}

}  // namespace

// ---- Categorical ------------------------------------------------------------

TEST(DistributionsCategorical, LogitsAreNormalizedAndGiveProbs) {
  const at::Tensor logits = torch::tensor({0.0, std::log(3.0)}).repeat({2, 1});
  const D::Categorical d = D::Categorical::from_logits(logits);
  EXPECT_EQ(d.batch_shape(), std::vector<int64_t>{2});
  EXPECT_TRUE(d.event_shape().empty());
  EXPECT_EQ(d.num_events(), 2);
  ExpectAllClose(d.probs(), torch::tensor({0.25, 0.75}).repeat({2, 1}));
  ExpectAllClose(
      d.logits(),
      torch::tensor({std::log(0.25), std::log(0.75)}).repeat({2, 1}));
  ExpectAllClose(d.log_prob(torch::tensor({1, 0})),
                 torch::tensor({std::log(0.75), std::log(0.25)}));
  const double h = -(0.25 * std::log(0.25) + 0.75 * std::log(0.75));
  ExpectAllClose(d.entropy(), torch::tensor({h, h}));
  EXPECT_TRUE(d.mode().equal(torch::tensor({1, 1}, at::kLong)));
  EXPECT_TRUE(d.deterministic_sample().equal(d.mode()));
  EXPECT_TRUE(d.mean().isnan().all().item<bool>());  // as torch
  EXPECT_TRUE(d.variance().isnan().all().item<bool>());
}

TEST(DistributionsCategorical, ProbsAreTheSameDistribution) {
  const D::Categorical d =
      D::Categorical::from_probs(torch::tensor({{0.25, 0.75}}));
  ExpectAllClose(d.logits(), torch::tensor({{std::log(0.25), std::log(0.75)}}));
  // The value broadcasts with the batch shape, as in torch.
  ExpectAllClose(d.log_prob(torch::tensor({1, 1, 0}).view({3, 1})),
                 torch::tensor({std::log(0.75), std::log(0.75), std::log(0.25)})
                     .view({3, 1}));
}

TEST(DistributionsCategorical, SamplesHaveTheShapeAndFrequencies) {
  const D::Categorical d = D::Categorical::from_probs(
      torch::tensor({{0.1, 0.2, 0.7}, {1.0, 0.0, 0.0}}));
  const at::Tensor s = d.sample({4000}, Seeded(0));
  EXPECT_EQ(s.sizes(), at::IntArrayRef({4000, 2}));
  EXPECT_EQ(s.scalar_type(), at::kLong);
  EXPECT_TRUE((s.select(1, 1) == 0).all().item<bool>());
  const double frac2 =
      (s.select(1, 0) == 2).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(frac2, 0.7, 0.03);
  EXPECT_EQ(d.sample().sizes(), at::IntArrayRef({2}));
}

TEST(DistributionsCategorical, SeededGeneratorsDrawTheSame) {
  const D::Categorical d = D::Categorical::from_logits(torch::randn({3, 5}));
  EXPECT_TRUE(d.sample({10}, Seeded(42)).equal(d.sample({10}, Seeded(42))));
}

TEST(DistributionsCategorical, HasNoRsample) {
  const D::Categorical d = D::Categorical::from_logits(torch::zeros({2}));
  EXPECT_FALSE(d.has_rsample());
  ExpectThrowsMsg<c10::NotImplementedError>(
      [&] { (void)d.rsample(); },
      "Categorical: rsample is not implemented (the distribution is not "
      "reparameterizable); use sample()");
}

TEST(DistributionsCategorical, RejectsBadParameters) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)D::Categorical::from_logits(torch::zeros({}, at::kFloat)); },
      "Categorical: logits must be at least one-dimensional, got shape []");
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)D::Categorical::from_logits(torch::zeros({2}, at::kLong)); },
      "Categorical: parameter logits must be a floating-point tensor, got "
      "torch.int64");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)D::Categorical::from_logits(
            torch::tensor({0.0, std::numeric_limits<double>::quiet_NaN()}));
      },
      "Categorical: parameter logits (shape [2]) must be real (no NaN); found "
      "invalid values");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)D::Categorical::from_probs(
            torch::tensor({{0.5, 0.5}, {0.5, 0.6}}));
      },
      "Categorical: parameter probs (shape [2, 2]) must be non-negative and "
      "sum to 1 over the last dim; found invalid values");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)D::Categorical::from_probs(torch::tensor({1.5, -0.5}));
      },
      "Categorical: parameter probs (shape [2]) must be non-negative and sum "
      "to 1 over the last dim; found invalid values");
  // Without validate_args, probs are normalized as torch does.
  const D::Categorical d =
      D::Categorical::from_probs(torch::tensor({1.0, 3.0}), false);
  ExpectAllClose(d.probs(), torch::tensor({0.25, 0.75}));
}

TEST(DistributionsCategorical, RejectsValuesOutsideTheSupportOrShape) {
  const D::Categorical d = D::Categorical::from_logits(torch::zeros({2, 2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)d.log_prob(torch::tensor({0, 2}));
      },
      "Categorical: log_prob's value (shape [2]) must be an integer in [0, "
      "1]; found invalid values");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)d.log_prob(torch::tensor({0.5, 1.0}));
      },
      "Categorical: log_prob's value (shape [2]) must be an integer in [0, "
      "1]; found invalid values");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)d.log_prob(torch::tensor({0, 1, 1}));
      },
      "Categorical: log_prob's value (shape [3]) does not broadcast with the "
      "distribution's shape [2]");
}

// ---- Normal -----------------------------------------------------------------

TEST(DistributionsNormal, ValuesAreTorchs) {
  const D::Normal d(torch::tensor({0.0, 1.0}), torch::tensor({1.0, 2.0}));
  EXPECT_EQ(d.batch_shape(), std::vector<int64_t>{2});
  ExpectAllClose(
      d.log_prob(torch::tensor({0.0, 3.0})),
      torch::tensor({-0.5 * kLog2Pi, -0.5 - std::log(2.0) - 0.5 * kLog2Pi}));
  ExpectAllClose(d.entropy(),
                 torch::tensor({0.5 + 0.5 * kLog2Pi,
                                0.5 + 0.5 * kLog2Pi + std::log(2.0)}));
  ExpectAllClose(d.mean(), torch::tensor({0.0, 1.0}));
  ExpectAllClose(d.mode(), torch::tensor({0.0, 1.0}));
  ExpectAllClose(d.deterministic_sample(), torch::tensor({0.0, 1.0}));
  ExpectAllClose(d.stddev(), torch::tensor({1.0, 2.0}));
  ExpectAllClose(d.variance(), torch::tensor({1.0, 4.0}));
}

TEST(DistributionsNormal, ParametersBroadcast) {
  const D::Normal d(torch::zeros({3, 1}), torch::ones({4}));
  EXPECT_EQ(d.batch_shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(d.sample({2}).sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_EQ(d.log_prob(torch::zeros({5, 1, 1})).sizes(),
            at::IntArrayRef({5, 3, 4}));
}

TEST(DistributionsNormal, RsampleIsLocPlusNoiseTimesScaleWithGradients) {
  const at::Tensor loc = torch::tensor({1.0, -2.0}).requires_grad_();
  const at::Tensor scale = torch::tensor({0.5, 3.0}).requires_grad_();
  const D::Normal d(loc, scale);
  EXPECT_TRUE(d.has_rsample());
  const at::Tensor x = d.rsample({3}, Seeded(1));
  const at::Tensor eps = at::empty({3, 2}, at::kFloat).normal_(0, 1, Seeded(1));
  ExpectAllClose(x, loc.detach() + eps * scale.detach());
  x.sum().backward();
  ExpectAllClose(loc.grad(), torch::tensor({3.0, 3.0}));
  ExpectAllClose(scale.grad(), eps.sum(0));
  // sample() draws without gradients, with at::normal.
  const at::Tensor s = d.sample({3}, Seeded(2));
  EXPECT_FALSE(s.requires_grad());
  ExpectAllClose(s, at::normal(loc.detach().expand({3, 2}),
                               scale.detach().expand({3, 2}), Seeded(2)));
}

TEST(DistributionsNormal, RejectsBadParametersAndValues) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::Normal(torch::zeros({2, 3}), torch::ones({4}));
      },
      "Normal: loc of shape [2, 3] and scale of shape [4] do not broadcast");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::Normal(torch::zeros({3}), torch::tensor({1.0, 0.0, 2.0}));
      },
      "Normal: parameter scale (shape [3]) must be > 0; found invalid values");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::Normal(torch::tensor({std::numeric_limits<double>::quiet_NaN()}),
                  torch::ones({1}));
      },
      "Normal: parameter loc (shape [1]) must be real (no NaN); found invalid "
      "values");
  ExpectThrowsMsg<c10::ValueError>(
      [] { D::Normal(torch::zeros({3}, at::kInt), torch::ones({1})); },
      "Normal: parameter loc must be a floating-point tensor, got torch.int32");
  // validate_args = false skips the value checks.
  const D::Normal loose(torch::zeros({1}), torch::zeros({1}), false);
  EXPECT_TRUE(loose.entropy().isinf().all().item<bool>());
  const D::Normal d(torch::zeros({3}), torch::ones({3}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)d.log_prob(torch::zeros({2})); },
      "Normal: log_prob's value (shape [2]) does not broadcast with the "
      "distribution's shape [3]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)d.log_prob(torch::tensor(
            {0.0, 0.0, std::numeric_limits<double>::quiet_NaN()}));
      },
      "Normal: log_prob's value (shape [3]) must be real (no NaN); found "
      "invalid values");
}

// ---- TanhNormal -------------------------------------------------------------

TEST(DistributionsTanhNormal, LogProbIsTheChangeOfVariables) {
  const at::Tensor loc = torch::tensor({{0.2, -0.5, 1.0}});
  const at::Tensor scale = torch::tensor({{0.3, 1.0, 0.7}});
  const D::TanhNormal d(loc, scale);
  // event_dims defaults to 1: the last dim is one event.
  EXPECT_EQ(d.batch_shape(), std::vector<int64_t>{1});
  EXPECT_EQ(d.event_shape(), std::vector<int64_t>{3});
  const at::Tensor y = torch::tensor({{0.1, -0.9, 0.5}});
  const at::Tensor x = y.atanh();
  const at::Tensor expected =
      (D::Normal(loc, scale).log_prob(x) - (1 - y.pow(2)).log()).sum(-1);
  ExpectAllClose(d.log_prob(y), expected);
  ExpectAllClose(d.deterministic_sample(), loc.tanh());
}

TEST(DistributionsTanhNormal, BoundsMapTheSupportAffinely) {
  const at::Tensor loc = torch::tensor({0.3, -1.0});
  const at::Tensor scale = torch::tensor({0.5, 0.5});
  const D::TanhNormal d(loc, scale,
                        D::TanhNormalOptions().low(0).high(4).event_dims(0));
  EXPECT_EQ(d.batch_shape(), std::vector<int64_t>{2});
  EXPECT_TRUE(d.event_shape().empty());
  ExpectAllClose(d.deterministic_sample(), 2 + 2 * loc.tanh());
  const at::Tensor y = torch::tensor({1.0, 3.5});
  const at::Tensor u = (y - 2) / 2;
  ExpectAllClose(d.log_prob(y), D::Normal(loc, scale).log_prob(u.atanh()) -
                                    (1 - u.pow(2)).log() - std::log(2.0));
  const at::Tensor s = d.sample({1000}, Seeded(3));
  EXPECT_TRUE((s > 0).all().item<bool>());
  EXPECT_TRUE((s < 4).all().item<bool>());
}

TEST(DistributionsTanhNormal, TanhLocSquashesTheLocation) {
  const at::Tensor loc = torch::tensor({{30.0, -2.0}});
  const D::TanhNormal d(loc, torch::ones({1, 2}),
                        D::TanhNormalOptions().tanh_loc(true).upscale(5));
  ExpectAllClose(d.loc(), (loc / 5).tanh() * 5);
}

TEST(DistributionsTanhNormal, RsampleCarriesGradientsAndScoresItsDraw) {
  const at::Tensor loc = torch::tensor({{0.1, -0.2}}).requires_grad_();
  const at::Tensor scale = torch::tensor({{0.4, 0.6}});
  const D::TanhNormal d(loc, scale);
  const at::Tensor a = d.rsample({5}, Seeded(4));
  EXPECT_EQ(a.sizes(), at::IntArrayRef({5, 1, 2}));
  EXPECT_TRUE(a.requires_grad());
  const at::Tensor pre = D::Normal(loc.detach(), scale).rsample({5}, Seeded(4));
  ExpectAllClose(a, pre.tanh());
  a.sum().backward();
  ExpectAllClose(loc.grad(), (1 - a.detach().pow(2)).sum(0));
  const auto [b, lp] = d.rsample_and_log_prob({5}, Seeded(4));
  ExpectAllClose(b, a);
  ExpectAllClose(lp, d.log_prob(a));
  const auto [c, lp2] = d.sample_and_log_prob({5}, Seeded(4));
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(lp2.requires_grad());
  EXPECT_FALSE(d.sample({5}).requires_grad());
}

TEST(DistributionsTanhNormal, SafeTanhStaysInsideTheBounds) {
  const D::TanhNormal d(torch::tensor({{20.0, -20.0}}), torch::ones({1, 2}));
  const at::Tensor m = d.deterministic_sample();
  EXPECT_TRUE((m.abs() < 1).all().item<bool>());
  EXPECT_TRUE(d.log_prob(m).isfinite().all().item<bool>());
  const D::TanhNormal unsafe(torch::tensor({{20.0, -20.0}}),
                             torch::ones({1, 2}),
                             D::TanhNormalOptions().safe_tanh(false));
  EXPECT_TRUE((unsafe.deterministic_sample().abs() == 1).all().item<bool>());
}

TEST(DistributionsTanhNormal, HasNoClosedFormModeMeanOrEntropy) {
  const D::TanhNormal d(torch::zeros({2}), torch::ones({2}));
  ExpectThrowsMsg<c10::NotImplementedError>(
      [&] { (void)d.entropy(); },
      "TanhNormal: entropy has no closed form (as in TorchRL); "
      "entropy_estimate(dist, n) averages -log_prob over n draws");
  ExpectThrowsMsg<c10::NotImplementedError>(
      [&] { (void)d.mode(); },
      "TanhNormal: mode has no closed form (as in TorchRL 0.14); use "
      "deterministic_sample() (InteractionType::DETERMINISTIC)");
  ExpectThrowsMsg<c10::NotImplementedError>(
      [&] { (void)d.mean(); },
      "TanhNormal: mean has no closed form (as in TorchRL); estimate it as "
      "sample({n}).mean(0)");
}

TEST(DistributionsTanhNormal, RejectsBadParametersAndValues) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::TanhNormal(torch::zeros({2}), torch::ones({2}),
                      D::TanhNormalOptions().low(1).high(1));
      },
      "TanhNormal: high must be greater than low, got low=1 and high=1");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::TanhNormal(torch::zeros({2}), torch::tensor({1.0, 1e-7}));
      },
      "TanhNormal: parameter scale (shape [2]) must be > 1e-06; found invalid "
      "values");
  ExpectThrowsMsg<c10::ValueError>(
      [] { D::TanhNormal(torch::zeros({2}), torch::ones({3})); },
      "TanhNormal: loc of shape [2] and scale of shape [3] do not broadcast");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::TanhNormal(torch::zeros({3}), torch::ones({3}),
                      D::TanhNormalOptions().event_dims(2));
      },
      "TanhNormal: event_dims (2) exceeds the dims of loc and scale (shape "
      "[3])");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        D::TanhNormal(torch::zeros({3}), torch::ones({3}),
                      D::TanhNormalOptions().event_dims(-2));
      },
      "TanhNormal: event_dims must be >= 0 (or -1 for the default), got -2");
  const D::TanhNormal d(torch::zeros({3}), torch::ones({3}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)d.log_prob(torch::zeros({2})); },
      "TanhNormal: log_prob's value (shape [2]) must end in the event shape "
      "[3]");
}

// ---- Factories --------------------------------------------------------------

TEST(DistributionsFactories, BuildFromNamedParameters) {
  D::DistributionParams p;
  p.add("loc", torch::zeros({2}));
  p.add("scale", torch::ones({2}));
  EXPECT_EQ(D::normal()(p)->name(), "Normal");
  EXPECT_EQ(D::tanh_normal()(p)->name(), "TanhNormal");
  D::DistributionParams q;
  q.add("probs", torch::tensor({0.5, 0.5}));
  EXPECT_EQ(D::categorical()(q)->name(), "Categorical");
  EXPECT_EQ(p.names(), (std::vector<std::string>{"loc", "scale"}));
}

TEST(DistributionsFactories, NameMissingUnexpectedAndDuplicateParameters) {
  D::DistributionParams p;
  p.add("loc", torch::zeros({2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)D::normal()(p); },
      "Normal: missing parameter scale (parameters given: loc)");
  ExpectThrowsMsg<c10::ValueError>([&] { p.add("loc", torch::ones({2})); },
                                   "DistributionParams: parameter loc is given "
                                   "twice");
  p.add("mu", torch::zeros({2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)D::normal()(p); },
      "Normal: unexpected parameter mu (expected loc, scale); map other "
      "keys with ProbabilisticOptions::dist_keys");
  D::DistributionParams both;
  both.add("logits", torch::zeros({2}));
  both.add("probs", torch::ones({2}) / 2);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)D::categorical()(both); },
      "Categorical: expected either logits or probs, not both (parameters "
      "given: logits, probs)");
}

// TorchRL's PPO entropy: the closed form where there is one, else -log_prob
// averaged over reparameterized draws (a TanhNormal's scored before tanh),
// with gradients to the parameters.
TEST(DistributionsEntropyEstimate, ClosedFormWhereThereIsOne) {
  const D::Categorical c = D::Categorical::from_logits(
      torch::tensor({{0.0, 1.0, 2.0}, {1.0, 1.0, 1.0}}));
  ExpectAllClose(D::entropy_estimate(c, 4), c.entropy());
  const D::Normal n(torch::zeros({3}), torch::full({3}, 2.0));
  ExpectAllClose(D::entropy_estimate(n), n.entropy());
}

TEST(DistributionsEntropyEstimate, TanhNormalAveragesDrawsWithGradients) {
  const at::Tensor loc =
      torch::tensor({{0.3, -0.2}, {1.5, 0.1}}).requires_grad_();
  const at::Tensor scale = torch::full({2, 2}, 0.7).requires_grad_();
  const D::TanhNormal d(loc, scale);
  at::Generator a = at::make_generator<at::CPUGeneratorImpl>(7);
  at::Generator b = at::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor got = D::entropy_estimate(d, 5, a);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2}));
  const at::Tensor want = -d.rsample_and_log_prob({5}, b).second.mean(0);
  ExpectAllClose(got, want);
  got.sum().backward();
  EXPECT_TRUE(loc.grad().defined());
  EXPECT_TRUE(scale.grad().abs().sum().item<double>() > 0);
  // Many draws approach the entropy of the squashed normal, estimated
  // independently by a large sample.
  at::Generator c = at::make_generator<at::CPUGeneratorImpl>(8);
  const at::Tensor many = D::entropy_estimate(d, 20000, c).detach();
  at::Generator e = at::make_generator<at::CPUGeneratorImpl>(9);
  const at::Tensor ref = -d.log_prob(d.sample({20000}, e)).detach().mean(0);
  EXPECT_TRUE(many.allclose(ref, 0.0, 0.05)) << many << ref;
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)D::entropy_estimate(d, 0); },
      "entropy_estimate: samples must be >= 1, got 0");
}
