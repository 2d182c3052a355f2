// The transforms (tensordict/envs.h): each transform's specs and values,
// partial resets, Compose's order, TransformedEnv inside SerialEnv and
// ParallelEnv, the spec check, and a rollout that allocates nothing per
// step.
#include <gtest/gtest.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <cmath>
#include <memory>
#include <vector>

#include "alloc_util.h"
#include "count_env.h"
#include "test_util.h"

using tensordict::Bounded;
using tensordict::CartPoleEnv;
using tensordict::Categorical;
using tensordict::CatTensors;
using tensordict::Compose;
using tensordict::Composite;
using tensordict::DoubleToFloat;
using tensordict::EnvBase;
using tensordict::EnvFactory;
using tensordict::ExcludeTransform;
using tensordict::FrameSkip;
using tensordict::InitTracker;
using tensordict::NestedKey;
using tensordict::ObservationNorm;
using tensordict::ParallelEnv;
using tensordict::PendulumEnv;
using tensordict::RenameTransform;
using tensordict::RewardSum;
using tensordict::RolloutOptions;
using tensordict::SelectTransform;
using tensordict::SerialEnv;
using tensordict::StepCounter;
using tensordict::TensorDict;
using tensordict::TransformedEnv;
using tensordict::TransformPtr;
using tensordict::Unbounded;
using tensordict::VecNorm;
using tensordict_test::CountEnv;
using tensordict_test::ExpectThrowsMsg;

namespace {

// Two float64 observations "a" ([2, 2]) and "b" ([2, 3]) and an int64
// "count" ([2, 1]); a float64 action ([2, 1]) added to "a" and "b" each
// step; the reward (float64) is the action. The step checks that the
// action arrives as float64.
class DoubleEnv final : public EnvBase {
 public:
  DoubleEnv() : EnvBase({2}) {
    set_observation_spec(
        Composite({{"a", Unbounded({2, 2}, at::kDouble)},
                   {"b", Bounded(-100.0, 100.0, {2, 3}, at::kDouble)},
                   {"count", Unbounded({2, 1}, at::kLong)}},
                  {2}));
    set_action_spec(Bounded(-1.0, 1.0, {2, 1}, at::kDouble));
    set_reward_spec(Unbounded({2, 1}, at::kDouble));
  }
  [[nodiscard]] std::string name() const override { return "DoubleEnv"; }

 protected:
  void reset_impl(const TensorDict& td) override {
    const at::Tensor mask =
        td.contains("_reset") ? td.get("_reset") : at::ones({2, 1}, at::kBool);
    td.get("a").masked_fill_(mask, 0.5);
    td.get("b").masked_fill_(mask, -0.25);
    td.get("count").masked_fill_(mask, 0);
  }
  void step_impl(const TensorDict& td, const TensorDict& next) override {
    const at::Tensor action = td.get("action");
    TORCH_CHECK(action.scalar_type() == at::kDouble, "the action is ",
                action.scalar_type());
    next.get("a").copy_(td.get("a") + action);
    next.get("b").copy_(td.get("b") + action);
    next.get("count").copy_(td.get("count") + 1);
    next.get("reward").copy_(action);
  }
  void set_seed_impl(uint64_t /*seed*/) override {}
};

template <typename E, typename... Args>
std::unique_ptr<EnvBase> make(Args&&... args) {
  return std::make_unique<E>(std::forward<Args>(args)...);
}

template <typename T, typename... Args>
TransformPtr t(Args&&... args) {
  return std::make_shared<T>(std::forward<Args>(args)...);
}

TransformPtr compose(std::vector<TransformPtr> transforms) {
  return std::make_shared<Compose>(std::move(transforms));
}

std::vector<float> column(const at::Tensor& t, int64_t env) {
  const at::Tensor c = t[env].reshape({-1}).to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

std::vector<NestedKey> keys(const Composite& spec) {
  return spec.keys(true, true);
}

// A policy that plays `actions` (one per env) at every step.
tensordict::Policy fixed(std::vector<int64_t> actions) {
  return [actions](const TensorDict& td) {
    td.set("action", at::tensor(actions));
  };
}

const RolloutOptions kNoBreak = RolloutOptions().break_when_any_done(false);

}  // namespace

// ---- StepCounter ------------------------------------------------------------

TEST(Transforms, StepCounterAddsItsCountAndTruncatedToTheSpecs) {
  TransformedEnv env(make<PendulumEnv>(std::vector<int64_t>{2}),
                     t<StepCounter>(5));
  EXPECT_EQ(env.done_keys(),
            std::vector<NestedKey>({"done", "terminated", "truncated"}));
  const auto& count = env.observation_spec().leaf("step_count");
  EXPECT_EQ(count.type_name(), "BoundedDiscrete");
  EXPECT_EQ(count.dtype(), at::kLong);
  EXPECT_EQ(count.shape(), c10::IntArrayRef({2, 1}));
  EXPECT_TRUE(env.state_spec().contains("step_count"));
  // Without max_steps, the done spec stays.
  TransformedEnv counting(make<PendulumEnv>(std::vector<int64_t>{2}),
                          t<StepCounter>());
  EXPECT_EQ(counting.done_keys(),
            std::vector<NestedKey>({"done", "terminated"}));
}

TEST(Transforms, StepCounterCountsAndTruncatesAtMaxSteps) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<StepCounter>(3));
  const TensorDict data = env.rollout(7, kNoBreak);
  EXPECT_EQ(column(data.get("step_count"), 0),
            std::vector<float>({0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(column(data.get({"next", "step_count"}), 1),
            std::vector<float>({1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(column(data.get({"next", "truncated"}), 2),
            std::vector<float>({0, 0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(column(data.get({"next", "done"}), 2),
            std::vector<float>({0, 0, 1, 0, 0, 1, 0}));
  EXPECT_FALSE(data.get({"next", "terminated"}).any().item<bool>());
  // The env was reset with the count: its own counter restarts too.
  EXPECT_EQ(column(data.get("obs"), 0),
            std::vector<float>({0, 1, 2, 0, 1, 2, 0}));
}

TEST(Transforms, StepCounterKeepsTheEnvsOwnTruncation) {
  // Env 1 truncates itself at 2, env 2 terminates at 4; the counter
  // truncates everyone at 5.
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 4},
                                    std::vector<int64_t>{0, 2, 0}),
                     t<StepCounter>(5));
  const TensorDict data = env.rollout(6, kNoBreak);
  EXPECT_EQ(column(data.get({"next", "truncated"}), 0),
            std::vector<float>({0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(column(data.get({"next", "truncated"}), 1),
            std::vector<float>({0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(column(data.get({"next", "done"}), 2),
            std::vector<float>({0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(column(data.get({"next", "step_count"}), 1),
            std::vector<float>({1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(column(data.get({"next", "step_count"}), 2),
            std::vector<float>({1, 2, 3, 4, 1, 2}));
}

TEST(Transforms, StepCounterInAComposeTruncatesEachEpisode) {
  // PendulumEnv has no "truncated": the counter's own flag, between the
  // transforms of the Compose, is false again at each step.
  TransformedEnv env(make<PendulumEnv>(std::vector<int64_t>{2}),
                     compose({t<StepCounter>(3), t<RewardSum>()}));
  const TensorDict data = env.rollout(7, kNoBreak);
  EXPECT_EQ(column(data.get({"next", "truncated"}), 1),
            std::vector<float>({0, 0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(column(data.get({"next", "step_count"}), 0),
            std::vector<float>({1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(env.rollout(10).batch_size(), c10::IntArrayRef({2, 3}));
}

TEST(Transforms, StepCounterChecksItsArgumentAndItsInput) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { StepCounter counter(-1); },
      "StepCounter: max_steps should have a value greater or equal to one "
      "(or 0, no truncation), got -1");
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<StepCounter>(3));
  TensorDict td = env.reset();
  td.erase("step_count");
  td.set("action", at::zeros({3}, at::kLong));
  ExpectThrowsMsg<c10::IndexError>(
      [&] { env.step(td); },
      "StepCounter: the step's input has no \"step_count\" (step from what "
      "reset or step_mdp returns)");
}

// ---- RewardSum --------------------------------------------------------------

TEST(Transforms, RewardSumSumsRewardsUntilAReset) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{2, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<RewardSum>());
  EXPECT_EQ(env.observation_spec().leaf("episode_reward"),
            env.reward_spec().leaf("reward"));
  EXPECT_TRUE(env.state_spec().contains("episode_reward"));
  const TensorDict data = env.rollout(5, fixed({1, 2, 0}), kNoBreak);
  EXPECT_EQ(column(data.get({"next", "episode_reward"}), 0),
            std::vector<float>({1, 2, 1, 2, 1}));
  EXPECT_EQ(column(data.get({"next", "episode_reward"}), 1),
            std::vector<float>({2, 4, 6, 8, 10}));
  EXPECT_EQ(column(data.get("episode_reward"), 0),
            std::vector<float>({0, 1, 0, 1, 0}));
  EXPECT_EQ(column(data.get({"next", "episode_reward"}), 2),
            std::vector<float>({0, 0, 0, 0, 0}));
}

TEST(Transforms, RewardSumTakesItsKeysAndChecksThem) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<RewardSum>(std::vector<NestedKey>{"reward"},
                                  std::vector<NestedKey>{{"stats", "total"}}));
  const TensorDict data = env.rollout(2, fixed({1, 1, 1}), kNoBreak);
  EXPECT_EQ(column(data.get({"next", "stats", "total"}), 0),
            std::vector<float>({1, 2}));
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TransformedEnv bad(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                          std::vector<int64_t>{0, 0, 0}),
                           t<RewardSum>(std::vector<NestedKey>{"obs"}));
      },
      "RewardSum: the in_key obs is not present in the reward spec "
      "([reward])");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        RewardSum bad(std::vector<NestedKey>{"reward"},
                      std::vector<NestedKey>{"a", "b"});
      },
      "RewardSum expects the same number of input and output keys, got 1 "
      "and 2");
}

// ---- InitTracker ------------------------------------------------------------

TEST(Transforms, InitTrackerFlagsTheStepsAfterAReset) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{2, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<InitTracker>());
  const auto& flag = env.observation_spec().leaf("is_init");
  EXPECT_EQ(flag.dtype(), at::kBool);
  EXPECT_EQ(flag.shape(), c10::IntArrayRef({3, 1}));
  const TensorDict data = env.rollout(5, kNoBreak);
  EXPECT_EQ(column(data.get("is_init"), 0),
            std::vector<float>({1, 0, 1, 0, 1}));
  EXPECT_EQ(column(data.get("is_init"), 1),
            std::vector<float>({1, 0, 0, 0, 0}));
  EXPECT_FALSE(data.get({"next", "is_init"}).any().item<bool>());
}

// ---- Partial resets and Compose --------------------------------------------

TEST(Transforms, APartialResetChangesOnlyTheMaskedRows) {
  TransformedEnv env(
      make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                     std::vector<int64_t>{0, 0, 0}),
      compose({t<StepCounter>(10), t<RewardSum>(), t<InitTracker>()}));
  TensorDict td = env.reset();
  td.set("action", at::tensor({1, 2, 0}));
  td = env.step_mdp(env.step(td));
  td.set("action", at::tensor({1, 2, 0}));
  td = env.step_mdp(env.step(td));
  td.set("_reset", at::tensor({1, 0, 1}).to(at::kBool).unsqueeze(-1));
  env.reset(td);
  EXPECT_EQ(column(td.get("step_count").t(), 0), std::vector<float>({0, 2, 0}));
  EXPECT_EQ(column(td.get("episode_reward").t(), 0),
            std::vector<float>({0, 4, 0}));
  EXPECT_EQ(column(td.get("is_init").t(), 0), std::vector<float>({1, 0, 1}));
  EXPECT_EQ(column(td.get("obs").t(), 0), std::vector<float>({0, 2, 0}));
  EXPECT_FALSE(td.contains("_reset"));
}

TEST(Transforms, ComposeAppliesItsTransformsInOrder) {
  // obs * 2 + 1, then + 10; the other order gives (obs + 10) * 2 + 1.
  auto norms = [](bool reversed) {
    TransformPtr a =
        t<ObservationNorm>(1.0, 2.0, std::vector<NestedKey>{"observation"});
    TransformPtr b =
        t<ObservationNorm>(10.0, 1.0, std::vector<NestedKey>{"observation"});
    return reversed ? compose({b, a}) : compose({a, b});
  };
  CartPoleEnv raw({2});
  TransformedEnv env(make<CartPoleEnv>(std::vector<int64_t>{2}), norms(false));
  TransformedEnv rev(make<CartPoleEnv>(std::vector<int64_t>{2}), norms(true));
  for (EnvBase* e : std::vector<EnvBase*>{&raw, &env, &rev}) e->set_seed(4);
  const at::Tensor obs = raw.rollout(6, kNoBreak).get("observation");
  EXPECT_TRUE(
      at::allclose(env.rollout(6, kNoBreak).get("observation"), obs * 2 + 11));
  EXPECT_TRUE(
      at::allclose(rev.rollout(6, kNoBreak).get("observation"), obs * 2 + 21));
}

TEST(Transforms, ComposeInvertsFromTheLastTransformToTheFirst) {
  // The policy writes "act2"; the env reads "action".
  TransformedEnv env(
      make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                     std::vector<int64_t>{0, 0, 0}),
      compose({t<RenameTransform>(std::vector<NestedKey>{},
                                  std::vector<NestedKey>{},
                                  std::vector<NestedKey>{"action"},
                                  std::vector<NestedKey>{"act1"}),
               t<RenameTransform>(std::vector<NestedKey>{},
                                  std::vector<NestedKey>{},
                                  std::vector<NestedKey>{"act1"},
                                  std::vector<NestedKey>{"act2"})}));
  EXPECT_EQ(env.action_keys(), std::vector<NestedKey>({"act2"}));
  TensorDict td = env.reset();
  td.set("act2", at::tensor({2, 1, 0}));
  env.step(td);
  EXPECT_EQ(column(td.get({"next", "reward"}).t(), 0),
            std::vector<float>({2, 1, 0}));
}

// ---- ObservationNorm --------------------------------------------------------

TEST(Transforms, ObservationNormMapsValuesAndBounds) {
  TransformedEnv env(
      make<PendulumEnv>(std::vector<int64_t>{2}),
      t<ObservationNorm>(1.0, 2.0, std::vector<NestedKey>{"thdot"}));
  const auto& spec =
      dynamic_cast<const Bounded&>(env.observation_spec().leaf("thdot"));
  EXPECT_TRUE(at::equal(spec.low(), at::full({2}, -15.0F)));
  EXPECT_TRUE(at::equal(spec.high(), at::full({2}, 17.0F)));
  TransformedEnv standard(
      make<PendulumEnv>(std::vector<int64_t>{2}),
      t<ObservationNorm>(1.0, 2.0, std::vector<NestedKey>{"thdot"}, true));
  const auto& low =
      dynamic_cast<const Bounded&>(standard.observation_spec().leaf("thdot"));
  EXPECT_TRUE(at::equal(low.low(), at::full({2}, -4.5F)));

  CartPoleEnv raw({3});
  TransformedEnv norm(
      make<CartPoleEnv>(std::vector<int64_t>{3}),
      t<ObservationNorm>(at::tensor({1.F, 2.F, 3.F, 4.F}), at::tensor(0.5F),
                         std::vector<NestedKey>{"observation"}, true));
  raw.set_seed(1);
  norm.set_seed(1);
  const TensorDict a = raw.rollout(5, kNoBreak);
  const TensorDict b = norm.rollout(5, kNoBreak);
  const at::Tensor loc = at::tensor({1.F, 2.F, 3.F, 4.F});
  EXPECT_TRUE(
      at::allclose(b.get("observation"), (a.get("observation") - loc) / 0.5));
  EXPECT_TRUE(at::allclose(b.get({"next", "observation"}),
                           (a.get({"next", "observation"}) - loc) / 0.5));
}

TEST(Transforms, ObservationNormInitStatsUsesRolloutsOfItsEnv) {
  TransformPtr t_norm =
      t<ObservationNorm>(std::vector<NestedKey>{"observation"}, true);
  auto* norm = dynamic_cast<ObservationNorm*>(t_norm.get());
  TransformedEnv env(make<CartPoleEnv>(std::vector<int64_t>{2}), t_norm);
  env.set_seed(3);
  norm->init_stats(50, {0, 1}, 1);
  ASSERT_TRUE(norm->initialized());
  // The same rollouts of the env alone: each [2, T, 4], until 50 frames.
  CartPoleEnv raw({2});
  raw.set_seed(3);
  std::vector<at::Tensor> parts;
  for (int64_t frames = 0; frames < 50;) {
    const TensorDict r = raw.rollout(50);
    frames += r.numel();
    parts.push_back(r.get("observation"));
  }
  const at::Tensor all = at::cat(parts, 1);
  const std::vector<int64_t> dims = {0, 1};
  EXPECT_TRUE(at::allclose(norm->loc(), all.mean(dims)));
  EXPECT_TRUE(at::allclose(norm->scale(), all.std(dims, true)));
  EXPECT_EQ(norm->loc().sizes(), c10::IntArrayRef({4}));
  // From now on the env normalizes with them.
  env.set_seed(3);
  raw.set_seed(3);
  EXPECT_TRUE(at::allclose(
      env.rollout(20).get("observation"),
      (raw.rollout(20).get("observation") - norm->loc()) / norm->scale()));
}

TEST(Transforms, ObservationNormInitStatsWithoutStandardNormalInvertsTheScale) {
  TransformPtr t_norm = t<ObservationNorm>(std::vector<NestedKey>{"obs"});
  auto* norm = dynamic_cast<ObservationNorm*>(t_norm.get());
  // Counts 0, 1, 2 (terminated at 3) in each of 3 envs: the rollout stops
  // at the first done after 3 steps, 9 frames.
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{3, 3, 3},
                                    std::vector<int64_t>{0, 0, 0}),
                     t_norm);
  norm->init_stats(9, {0, 1}, 0);
  const at::Tensor values = at::tensor({0.F, 1.F, 2.F}).repeat({3});
  const float scale = 1.0F / values.std().item<float>();
  EXPECT_NEAR(norm->scale().item<float>(), scale, 1e-6);
  EXPECT_NEAR(norm->loc().item<float>(), -1.0F * scale, 1e-6);
}

TEST(Transforms, ObservationNormChecksItsState) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ObservationNorm bad(at::tensor(1.F), at::Tensor(),
                            std::vector<NestedKey>{"obs"});
      },
      "Cannot have an mixed initialized and uninitialized loc and scale");
  ObservationNorm alone(std::vector<NestedKey>{"obs"});
  ExpectThrowsMsg([&] { alone.init_stats(10); },
                  "Cannot initialize the transform if parent env is not "
                  "defined.");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        alone.init_stats(10, {0, 1});
      },
      "cat_dim must be specified if reduce_dim is not an integer.");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { alone.init_stats(10, {0}, 1); },
      "cat_dim must be part of or equal to reduce_dim.");
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<ObservationNorm>(std::vector<NestedKey>{"obs"}));
  ExpectThrowsMsg([&] { (void)env.reset(); },
                  "Loc/Scale have not been initialized. Either pass in values "
                  "in the constructor or call the init_stats method");
  // The first of two uninitialized norms goes first.
  TransformPtr first = t<ObservationNorm>(std::vector<NestedKey>{"obs"});
  TransformPtr second = t<ObservationNorm>(std::vector<NestedKey>{"obs"});
  TransformedEnv two(make<CountEnv>(std::vector<int64_t>{2, 2, 2},
                                    std::vector<int64_t>{0, 0, 0}),
                     compose({first, second}));
  ExpectThrowsMsg(
      [&] { dynamic_cast<ObservationNorm&>(*second).init_stats(4); },
      "ObservationNorms need to be initialized in the right order. Trying to "
      "initialize an ObservationNorm while a parent ObservationNorm "
      "transform is still uninitialized");
  dynamic_cast<ObservationNorm&>(*first).init_stats(4);
  ExpectThrowsMsg([&] { dynamic_cast<ObservationNorm&>(*first).init_stats(4); },
                  "Loc/Scale are already initialized");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TransformedEnv bad(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                          std::vector<int64_t>{0, 0, 0}),
                           t<ObservationNorm>(at::zeros({2}), at::ones({}),
                                              std::vector<NestedKey>{"obs"}));
      },
      "ObservationNorm: loc of shape [2] does not broadcast to key obs of "
      "shape [3, 1]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TransformedEnv bad(
            make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                           std::vector<int64_t>{0, 0, 0}),
            t<ObservationNorm>(0.0, 1.0, std::vector<NestedKey>{"reward"}));
      },
      "ObservationNorm: key reward is not an observation of the env "
      "(observations: [obs])");
}

// ---- DoubleToFloat ----------------------------------------------------------

TEST(Transforms, DoubleToFloatCastsFloat64EntriesBothWays) {
  TransformedEnv env(make<DoubleEnv>(), t<DoubleToFloat>());
  EXPECT_EQ(env.observation_spec().leaf("a").dtype(), at::kFloat);
  EXPECT_EQ(env.observation_spec().leaf("b").dtype(), at::kFloat);
  EXPECT_EQ(env.observation_spec().leaf("b").type_name(), "BoundedContinuous");
  EXPECT_EQ(env.observation_spec().leaf("count").dtype(), at::kLong);
  EXPECT_EQ(env.reward_spec().leaf("reward").dtype(), at::kFloat);
  EXPECT_EQ(env.action_spec().leaf("action").dtype(), at::kFloat);
  const auto& dt = dynamic_cast<const DoubleToFloat&>(*env.transform());
  EXPECT_EQ(dt.in_keys(), std::vector<NestedKey>({"a", "b", "reward"}));
  EXPECT_EQ(dt.in_keys_inv(), std::vector<NestedKey>({"action"}));
  // The env gets float64 actions, the policy float32 values.
  const TensorDict data = env.rollout(3, kNoBreak);
  EXPECT_EQ(data.get("a").scalar_type(), at::kFloat);
  EXPECT_EQ(data.get({"next", "reward"}).scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(
      data.get({"next", "a"}).select(-1, 0).unsqueeze(-1),
      data.get("a").select(-1, 0).unsqueeze(-1) + data.get("action")));
  tensordict::check_env_specs(env);
  // Given in_keys alone, the actions stay float64 (TorchRL).
  TransformedEnv obs_only(make<DoubleEnv>(),
                          t<DoubleToFloat>(std::vector<NestedKey>{"a"}));
  EXPECT_EQ(obs_only.observation_spec().leaf("b").dtype(), at::kDouble);
  EXPECT_EQ(obs_only.action_spec().leaf("action").dtype(), at::kDouble);
}

TEST(Transforms, DoubleToFloatChecksItsKeys) {
  ExpectThrowsMsg<c10::TypeError>(
      [] {
        TransformedEnv bad(make<DoubleEnv>(),
                           t<DoubleToFloat>(std::vector<NestedKey>{"count"}));
      },
      "DoubleToFloat: key count: the observation spec's dtype is "
      "torch.int64, not torch.float64");
  ExpectThrowsMsg<c10::IndexError>(
      [] {
        TransformedEnv bad(
            make<DoubleEnv>(),
            t<DoubleToFloat>(c10::nullopt, std::vector<NestedKey>{"nope"}));
      },
      "DoubleToFloat: key nope not found in state_spec and action_spec");
}

// ---- CatTensors, Rename, Exclude, Select -----------------------------------

TEST(Transforms, CatTensorsConcatenatesSortedKeys) {
  TransformedEnv env(make<DoubleEnv>(),
                     t<CatTensors>(std::vector<NestedKey>{"b", "a"}, "ab"));
  EXPECT_EQ(keys(env.observation_spec()),
            std::vector<NestedKey>({"count", "ab"}));
  const auto& ab = env.observation_spec().leaf("ab");
  EXPECT_EQ(ab.type_name(), "UnboundedContinuous");
  EXPECT_EQ(ab.shape(), c10::IntArrayRef({2, 5}));
  const TensorDict data = env.rollout(3, kNoBreak);
  const at::Tensor first = data.get("ab").select(1, 0);
  EXPECT_TRUE(at::equal(
      first, at::tensor({0.5, 0.5, -0.25, -0.25, -0.25}).expand({2, 5})));
  const at::Tensor a = data.get("action").select(1, 0);  // [2, 1]
  EXPECT_TRUE(at::allclose(data.get({"next", "ab"}).select(1, 0), first + a));
  tensordict::check_env_specs(env);
  // Without keys: every observation with one feature dim, kept.
  TransformedEnv lazy(
      make<DoubleEnv>(),
      t<CatTensors>(std::vector<NestedKey>{}, "observation_vector", -1, false));
  EXPECT_EQ(dynamic_cast<const CatTensors&>(*lazy.transform()).in_keys(),
            std::vector<NestedKey>({"a", "b", "count"}));
  EXPECT_EQ(keys(lazy.observation_spec()),
            std::vector<NestedKey>({"a", "b", "count", "observation_vector"}));
}

TEST(Transforms, CatTensorsChecksItsKeys) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { CatTensors bad(std::vector<NestedKey>{}, "x", 1); },
      "Lazy call to CatTensors is only supported when `dim=-1`.");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        TransformedEnv bad(make<DoubleEnv>(),
                           t<CatTensors>(std::vector<NestedKey>{"a", "zz"}));
      },
      "CatTensor got a list of keys that does not match the keys in "
      "observation_spec. Make sure the environment has an observation_spec "
      "attribute that includes all the specs needed for CatTensor.");
}

TEST(Transforms, RenameTransformRenamesEntriesAndInputs) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<RenameTransform>(std::vector<NestedKey>{"obs", "reward"},
                                        std::vector<NestedKey>{"count", "r"},
                                        std::vector<NestedKey>{"action"},
                                        std::vector<NestedKey>{"act"}));
  EXPECT_EQ(env.observation_keys(), std::vector<NestedKey>({"count"}));
  EXPECT_EQ(env.reward_keys(), std::vector<NestedKey>({"r"}));
  EXPECT_EQ(env.action_keys(), std::vector<NestedKey>({"act"}));
  TensorDict td = env.reset();
  td.set("act", at::tensor({2, 1, 0}));
  env.step(td);
  EXPECT_EQ(column(td.get({"next", "r"}).t(), 0),
            std::vector<float>({2, 1, 0}));
  EXPECT_EQ(column(td.get({"next", "count"}).t(), 0),
            std::vector<float>({1, 1, 1}));
  tensordict::check_env_specs(env);
  TransformedEnv copy(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                     std::vector<int64_t>{0, 0, 0}),
                      t<RenameTransform>(std::vector<NestedKey>{"obs"},
                                         std::vector<NestedKey>{"count"},
                                         std::vector<NestedKey>{},
                                         std::vector<NestedKey>{}, true));
  EXPECT_EQ(copy.observation_keys(), std::vector<NestedKey>({"obs", "count"}));
  const TensorDict data = copy.rollout(2, kNoBreak);
  EXPECT_TRUE(at::equal(data.get("obs"), data.get("count")));
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        RenameTransform bad(std::vector<NestedKey>{"a", "b"},
                            std::vector<NestedKey>{"c"});
      },
      "RenameTransform: the number of in_keys (2) should match the number of "
      "out_keys (1)");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        RenameTransform bad(std::vector<NestedKey>{"a", "b"},
                            std::vector<NestedKey>{"b", "c"});
      },
      "RenameTransform: cannot have matching in and out_keys because order "
      "is unclear. Please use separated transforms. Got in_keys=[a, b] and "
      "out_keys=[b, c].");
}

TEST(Transforms, ExcludeTransformRemovesOutputs) {
  TransformedEnv env(make<PendulumEnv>(std::vector<int64_t>{2}),
                     t<ExcludeTransform>(std::vector<NestedKey>{"params"}));
  EXPECT_EQ(keys(env.observation_spec()),
            std::vector<NestedKey>({"th", "thdot"}));
  // The state keeps them: the stateless env reads them back.
  EXPECT_TRUE(env.state_spec().contains({"params", "g"}));
  const TensorDict data = env.rollout(3, kNoBreak);
  EXPECT_FALSE(data.contains({"next", "params"}));
  tensordict::check_env_specs(env);
  ExpectThrowsMsg<c10::IndexError>(
      [] {
        TransformedEnv bad(make<PendulumEnv>(std::vector<int64_t>{2}),
                           t<ExcludeTransform>(std::vector<NestedKey>{"x"}));
      },
      "ExcludeTransform: key x not found in the environment outputs");
}

TEST(Transforms, SelectTransformKeepsTheSelectedObservations) {
  TransformedEnv env(make<PendulumEnv>(std::vector<int64_t>{2}),
                     t<SelectTransform>(std::vector<NestedKey>{"th"}));
  EXPECT_EQ(env.observation_keys(), std::vector<NestedKey>({"th"}));
  EXPECT_EQ(env.reward_keys(), std::vector<NestedKey>({"reward"}));
  EXPECT_EQ(env.done_keys(), std::vector<NestedKey>({"done", "terminated"}));
  tensordict::check_env_specs(env);
  TransformedEnv no_rewards(
      make<PendulumEnv>(std::vector<int64_t>{2}),
      t<SelectTransform>(std::vector<NestedKey>{"th", "done"}, false, false));
  EXPECT_TRUE(no_rewards.reward_keys().empty());
}

// ---- FrameSkip --------------------------------------------------------------

TEST(Transforms, FrameSkipRepeatsTheActionAndSumsTheRewards) {
  TransformedEnv env(make<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                    std::vector<int64_t>{0, 0, 0}),
                     t<FrameSkip>(3));
  TensorDict td = env.reset();
  td.set("action", at::tensor({1, 2, 0}));
  env.step(td);
  EXPECT_EQ(column(td.get({"next", "obs"}).t(), 0),
            std::vector<float>({3, 3, 3}));
  EXPECT_EQ(column(td.get({"next", "reward"}).t(), 0),
            std::vector<float>({3, 6, 0}));
  // A done env stops the repeats of the whole batch.
  TransformedEnv stops(make<CountEnv>(std::vector<int64_t>{0, 2, 0},
                                      std::vector<int64_t>{0, 0, 0}),
                       compose({t<FrameSkip>(2), t<FrameSkip>(2)}));
  EXPECT_EQ(stops.transform()->frame_skip(), 4);
  TensorDict s = stops.reset();
  s.set("action", at::tensor({1, 1, 1}));
  stops.step(s);
  EXPECT_EQ(column(s.get({"next", "obs"}).t(), 0),
            std::vector<float>({2, 2, 2}));
  EXPECT_EQ(column(s.get({"next", "done"}).t(), 0),
            std::vector<float>({0, 1, 0}));
  ExpectThrowsMsg<c10::ValueError>(
      [] { FrameSkip bad(0); },
      "FrameSkip: frame_skip should have a value greater or equal to one, "
      "got 0");
}

// ---- VecNorm ----------------------------------------------------------------

TEST(Transforms, VecNormNormalizesWithDecayedStatistics) {
  TransformPtr t_vec =
      t<VecNorm>(std::vector<NestedKey>{"observation", "reward"}, 0.9, 1e-4);
  auto* vec = dynamic_cast<VecNorm*>(t_vec.get());
  TransformedEnv env(make<CartPoleEnv>(std::vector<int64_t>{4}), t_vec);
  EXPECT_EQ(env.observation_spec().leaf("observation").type_name(),
            "UnboundedContinuous");
  CartPoleEnv raw({4});
  env.set_seed(5);
  raw.set_seed(5);
  const TensorDict got = env.rollout(6, kNoBreak);
  const TensorDict want = raw.rollout(6, kNoBreak);
  // TorchRL's formulas on the raw stream: the reset, then each step.
  at::Tensor sum = at::zeros({4});
  at::Tensor ssq = at::zeros({4});
  at::Tensor count = at::zeros({1});
  auto norm = [&](const at::Tensor& v) {
    sum = sum * 0.9 + v.sum(0);
    ssq = ssq * 0.9 + v.pow(2).sum(0);
    count = count * 0.9 + 4;
    const at::Tensor mean = sum / count;
    const at::Tensor std = (ssq / count - mean.pow(2)).clamp_min(1e-4).sqrt();
    return (v - mean) / std.clamp_min(1e-4);
  };
  const at::Tensor obs = want.get("observation");
  EXPECT_TRUE(at::allclose(got.get("observation").select(1, 0),
                           norm(obs.select(1, 0)), 1e-5, 1e-6));
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(at::allclose(
        got.get({"next", "observation"}).select(1, i),
        norm(want.get({"next", "observation"}).select(1, i)), 1e-4, 1e-5))
        << "step " << i;
  }
  // Constant rewards of 1 normalize to 0.
  EXPECT_LT(got.get({"next", "reward"}).abs().max().item<float>(), 1e-3);
  const TensorDict state = vec->state_dict();
  EXPECT_EQ(state.keys(),
            std::vector<NestedKey>({"observation_sum", "observation_ssq",
                                    "observation_count", "reward_sum",
                                    "reward_ssq", "reward_count"}));
  EXPECT_TRUE(at::allclose(state.get("observation_sum"), sum, 1e-4, 1e-5));
  EXPECT_TRUE(
      at::allclose(vec->loc().get("observation"), sum / count, 1e-4, 1e-5));
}

TEST(Transforms, VecNormFreezesAndLoadsItsState) {
  TransformPtr t_vec = t<VecNorm>();
  auto* vec = dynamic_cast<VecNorm*>(t_vec.get());
  TransformedEnv env(make<CartPoleEnv>(std::vector<int64_t>{2}), t_vec);
  (void)env.rollout(5, kNoBreak);
  const TensorDict saved = vec->state_dict();
  vec->freeze();
  EXPECT_TRUE(vec->frozen());
  (void)env.rollout(5, kNoBreak);
  EXPECT_TRUE(vec->state_dict().allclose(saved, 0, 0));
  vec->unfreeze();
  (void)env.rollout(5, kNoBreak);
  EXPECT_FALSE(vec->state_dict().allclose(saved, 0, 0));
  vec->load_state_dict(saved);
  EXPECT_TRUE(vec->state_dict().allclose(saved, 0, 0));
  ExpectThrowsMsg<c10::IndexError>(
      [&] { vec->load_state_dict(saved.exclude({"reward_ssq"})); },
      "VecNorm.load_state_dict: key reward_ssq is missing");
  TensorDict wrong = saved.clone();
  wrong.set("observation_sum", at::zeros({3}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { vec->load_state_dict(wrong); },
      "VecNorm.load_state_dict: key observation_sum: expected shape [4], got "
      "[3]");
}

// ---- TransformedEnv ---------------------------------------------------------

TEST(Transforms, ATransformBelongsToOneEnv) {
  TransformPtr counter = t<StepCounter>(3);
  {
    TransformedEnv env(make<CartPoleEnv>(), counter);
    EXPECT_EQ(counter->parent(), &env);
    ExpectThrowsMsg<c10::ValueError>(
        [&] { TransformedEnv other(make<CartPoleEnv>(), counter); },
        "TransformedEnv: the transform is already part of an env (a "
        "transform belongs to one env)");
  }
  EXPECT_EQ(counter->parent(), nullptr);
  TransformedEnv again(make<CartPoleEnv>(), counter);
  EXPECT_EQ(again.name(), "TransformedEnv");
}

TEST(Transforms, ATransformedEnvFollowsItsSeedAsTheBaseEnv) {
  CartPoleEnv raw({3});
  TransformedEnv env(make<CartPoleEnv>(std::vector<int64_t>{3}), compose({}));
  raw.set_seed(9);
  env.set_seed(9);
  EXPECT_TRUE(
      raw.rollout(20, kNoBreak).allclose(env.rollout(20, kNoBreak), 0, 0));
}

namespace {

EnvFactory transformed_cartpole() {
  return [] {
    return std::make_unique<TransformedEnv>(
        std::make_unique<CartPoleEnv>(),
        compose({t<StepCounter>(10), t<RewardSum>(), t<InitTracker>()}));
  };
}

}  // namespace

TEST(Transforms, ATransformedEnvRunsInsideSerialAndParallelEnvs) {
  SerialEnv serial(3, transformed_cartpole());
  ParallelEnv parallel(3, transformed_cartpole());
  EXPECT_EQ(serial.observation_spec(), parallel.observation_spec());
  EXPECT_TRUE(serial.observation_spec().contains("episode_reward"));
  serial.set_seed(2);
  parallel.set_seed(2);
  const TensorDict a = serial.rollout(25, kNoBreak);
  const TensorDict b = parallel.rollout(25, kNoBreak);
  EXPECT_TRUE(a.allclose(b, 0, 0));
  EXPECT_LE(a.get({"next", "step_count"}).max().item<int64_t>(), 10);
  // episode_reward counts the steps (rewards of 1) as step_count.
  EXPECT_TRUE(at::equal(a.get({"next", "episode_reward"}).to(at::kLong),
                        a.get({"next", "step_count"})));
  tensordict::check_env_specs(serial);
  tensordict::check_env_specs(parallel);
}

TEST(Transforms, CheckEnvSpecsPassesOnTransformedEnvs) {
  TransformedEnv cartpole(
      make<CartPoleEnv>(std::vector<int64_t>{4}),
      compose({t<StepCounter>(5), t<RewardSum>(), t<InitTracker>(),
               t<VecNorm>(), t<FrameSkip>(2)}));
  tensordict::check_env_specs(cartpole, 12);
  TransformedEnv pendulum(
      make<PendulumEnv>(std::vector<int64_t>{2}),
      compose({t<StepCounter>(4), t<RewardSum>(),
               t<ObservationNorm>(0.0, 0.5, std::vector<NestedKey>{"th"}),
               t<ExcludeTransform>(std::vector<NestedKey>{"params"})}));
  tensordict::check_env_specs(pendulum, 6);
  TransformedEnv doubles(
      make<DoubleEnv>(),
      compose({t<DoubleToFloat>(),
               t<CatTensors>(std::vector<NestedKey>{"a", "b"}, "ab"),
               t<RenameTransform>(std::vector<NestedKey>{"ab"},
                                  std::vector<NestedKey>{"x"})}));
  tensordict::check_env_specs(doubles, 4);
  TransformedEnv nested(
      make<TransformedEnv>(make<CountEnv>(std::vector<int64_t>{2, 0, 0},
                                          std::vector<int64_t>{0, 0, 0}),
                           t<StepCounter>(3)),
      t<RewardSum>());
  tensordict::check_env_specs(nested, 5);
}

TEST(Transforms, ARolloutAllocatesNothingPerStep) {
  TransformedEnv env(
      make<CartPoleEnv>(std::vector<int64_t>{16}),
      compose({t<StepCounter>(500), t<RewardSum>(), t<InitTracker>()}));
  env.set_seed(0);
  (void)env.rollout(4, kNoBreak);  // warm the caches
  auto allocations = [&](int64_t steps) {
    const tensordict_test::AllocationCounter counter;
    const TensorDict data = env.rollout(steps, kNoBreak);
    return counter.count();
  };
  const int64_t few = allocations(10);
  const int64_t many = allocations(400);
  EXPECT_GT(few, 0);
  EXPECT_EQ(many, few) << "a longer rollout allocated more";
}
