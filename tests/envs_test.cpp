// EnvBase (tensordict/envs.h): TorchRL's reset/step/step_mdp semantics,
// rollout's layouts and stop rules, the spec check, allocation, and the
// library's CartPole and Pendulum.
#include <gtest/gtest.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <cmath>
#include <vector>

#include "alloc_util.h"
#include "count_env.h"
#include "test_util.h"

using tensordict::CartPoleEnv;
using tensordict::Categorical;
using tensordict::Composite;
using tensordict::EnvBase;
using tensordict::NestedKey;
using tensordict::PendulumEnv;
using tensordict::RolloutOptions;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::Unbounded;
using tensordict_test::CountEnv;
using tensordict_test::ExpectThrowsMsg;

namespace {

// A bool tensor (at::tensor of bools is missing from LibTorch 1.13).
at::Tensor bools(std::vector<int64_t> values) {
  return at::tensor(values).to(at::kBool);
}

std::vector<float> column(const at::Tensor& t, int64_t env) {
  const at::Tensor c = t[env].reshape({-1}).to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace

TEST(Envs, DefaultSpecsAreTorchRLs) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  EXPECT_EQ(env.batch_size(), c10::IntArrayRef({3}));
  EXPECT_EQ(env.observation_keys(), std::vector<NestedKey>({"obs"}));
  EXPECT_EQ(env.action_keys(), std::vector<NestedKey>({"action"}));
  EXPECT_EQ(env.reward_keys(), std::vector<NestedKey>({"reward"}));
  EXPECT_EQ(env.done_keys(),
            std::vector<NestedKey>({"done", "terminated", "truncated"}));
  EXPECT_TRUE(env.state_keys().empty());
  EXPECT_EQ(env.reward_spec().leaf("reward").shape(), c10::IntArrayRef({3, 1}));
  EXPECT_EQ(env.reward_spec().leaf("reward").dtype(), at::kFloat);
}

TEST(Envs, ADoneSpecWithTerminatedAloneGetsADone) {
  struct Env final : EnvBase {
    Env() : EnvBase({2}) {
      set_done_spec(
          Composite({{"terminated", Categorical(2, {2, 1}, at::kBool)}}, {2}));
    }
    std::string name() const override { return "Env"; }
    void reset_impl(const TensorDict& /*td*/) override {}
    void step_impl(const TensorDict& /*td*/, const TensorDict& /*n*/) override {
    }
    void set_seed_impl(uint64_t /*seed*/) override {}
  };
  Env env;
  EXPECT_EQ(env.done_keys(), std::vector<NestedKey>({"terminated", "done"}));
}

TEST(Envs, SpecSettersCheckTheBatchShapeAndTheDoneEntries) {
  struct Env final : EnvBase {
    explicit Env(int which) : EnvBase({2}) {
      if (which == 0)
        set_observation_spec(Composite({{"o", Unbounded({3})}}, {3}));
      if (which == 1) {
        set_done_spec(Composite({{"done", Categorical(2, {2, 1})}}, {2}));
      }
      if (which == 2) {
        set_done_spec(
            Composite({{"over", Categorical(2, {2, 1}, at::kBool)}}, {2}));
      }
    }
    std::string name() const override { return "Env"; }
    void reset_impl(const TensorDict& /*td*/) override {}
    void step_impl(const TensorDict& /*td*/, const TensorDict& /*n*/) override {
    }
    void set_seed_impl(uint64_t /*seed*/) override {}
  };
  ExpectThrowsMsg<c10::ValueError>([] { Env env(0); },
                                   "Env: the observation spec has shape [3], "
                                   "but the env's batch size is [2]");
  ExpectThrowsMsg<c10::ValueError>(
      [] { Env env(1); },
      "Env: the done entry \"done\" must be a bool spec of shape [2, 1], got "
      "torch.int64 of shape [2, 1]");
  ExpectThrowsMsg<c10::ValueError>([] { Env env(2); },
                                   "Env: the done spec holds \"done\", "
                                   "\"terminated\" and \"truncated\", got "
                                   "a key \"over\"");
}

TEST(Envs, ResetGivesObservationsAndFalseFlags) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  const TensorDict td = env.reset();
  EXPECT_EQ(td.keys(),
            std::vector<NestedKey>({"obs", "done", "terminated", "truncated"}));
  EXPECT_EQ(td.batch_size(), c10::IntArrayRef({3}));
  EXPECT_FALSE(td.get("done").any().item<bool>());
  EXPECT_EQ(env.resets, 3);
}

TEST(Envs, StepSetsNextInNewTensorsAndKeepsTheInput) {
  CountEnv env({2, 0, 0}, {0, 0, 1});
  TensorDict td = env.reset();
  td.set("action", at::tensor({2, 1, 0}));
  const at::Tensor obs = td.get("obs");
  env.step(td);
  EXPECT_TRUE(td.get("obs").is_same(obs));
  EXPECT_EQ(column(td.get({"next", "obs"}), 0), std::vector<float>({1}));
  EXPECT_EQ(column(td.get({"next", "reward"}).squeeze(-1), 0),
            std::vector<float>({2}));
  // done = terminated | truncated: env 2 is truncated at 1.
  EXPECT_TRUE(
      at::equal(td.get({"next", "done"}), bools({0, 0, 1}).unsqueeze(-1)));
  EXPECT_TRUE(
      at::equal(td.get({"next", "terminated"}), at::zeros({3, 1}, at::kBool)));
  // A second step gets new tensors: the first step's stay as they were.
  const at::Tensor first_next = td.get({"next", "obs"});
  TensorDict td2 = env.step_mdp(td);
  env.step(td2);
  EXPECT_EQ(column(first_next, 0), std::vector<float>({1}));
  EXPECT_EQ(column(td2.get({"next", "obs"}), 0), std::vector<float>({2}));
}

TEST(Envs, StepKeepsTheEntriesOfAPresetNextThatItDoesNotWrite) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  TensorDict td = env.reset();
  td.set("action", at::zeros({3}, at::kLong));
  td.set({"next", "info"}, at::ones({3}));
  td.set({"next", "obs"}, at::full({3, 1}, 7.0));
  env.step(td);
  EXPECT_TRUE(at::equal(td.get({"next", "info"}), at::ones({3})));
  EXPECT_EQ(column(td.get({"next", "obs"}), 0), std::vector<float>({1}));
}

TEST(Envs, StepMdpMovesObservationsAndFlagsToTheRoot) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  TensorDict td = env.reset();
  td.set("action", at::zeros({3}, at::kLong));
  td.set("extra", at::ones({3}));
  env.step(td);
  const TensorDict out = env.step_mdp(td);
  // TorchRL's order: the root's keys but the excluded ones, "next"'s
  // observations where the root had them, then the flags.
  EXPECT_EQ(out.keys(),
            std::vector<NestedKey>(
                {"obs", "action", "extra", "done", "terminated", "truncated"}));
  // The same tensors as "next"'s, not copies; the action stays.
  EXPECT_TRUE(out.get("obs").is_same(td.get({"next", "obs"})));
  EXPECT_TRUE(out.get("done").is_same(td.get({"next", "done"})));
  EXPECT_TRUE(out.get("action").is_same(td.get("action")));
}

TEST(Envs, APartialResetResetsTheMaskedRowsInNewTensors) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  TensorDict td = env.reset();
  td.set("action", at::zeros({3}, at::kLong));
  env.step(td);
  TensorDict next = env.step_mdp(td);
  env.step(next);
  TensorDict after = env.step_mdp(next);  // obs [2, 2, 2]
  const at::Tensor held = after.get("obs");
  after.set("_reset", bools({1, 0, 1}).unsqueeze(-1));
  env.reset(after);
  EXPECT_FALSE(after.contains("_reset"));
  EXPECT_TRUE(
      at::equal(after.get("obs"), at::tensor({0.F, 2.F, 0.F}).unsqueeze(-1)));
  // What the caller held (the step's "next" obs) did not change.
  EXPECT_TRUE(at::equal(held, at::full({3, 1}, 2.0)));
  EXPECT_TRUE(at::equal(next.get({"next", "obs"}), at::full({3, 1}, 2.0)));
}

TEST(Envs, ResetChecksItsMaskAndItsBatch) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)env.reset(TensorDict(std::vector<int64_t>{2})); },
      "CountEnv::reset: expected a dict of batch size [3], got [2]");
  TensorDict td = env.reset();
  td.set("_reset", at::ones({3, 1}, at::kLong));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { env.reset(td); },
      "CountEnv::reset: \"_reset\" must be a bool tensor, got torch.int64");
  td.set("_reset", at::ones({3, 2}, at::kBool));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { env.reset(td); },
      "CountEnv::reset: \"_reset\" must have shape [3, 1] or [3], got [3, 2]");
}

TEST(Envs, ADoneFlagAfterAResetIsAnError) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  env.done_after_reset = true;
  ExpectThrowsMsg(
      [&] { (void)env.reset(); },
      "CountEnv: the done entry \"done\" was true after a reset of that env, "
      "which TorchRL does not allow");
}

TEST(Envs, StepNamesAMissingAction) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  TensorDict td = env.reset();
  ExpectThrowsMsg<c10::ValueError>(
      [&] { env.step(td); },
      "CountEnv::step: the action key action is missing");
}

TEST(Envs, StepAndMaybeResetResetsTheEnvsThatAreDone) {
  CountEnv env({1, 0, 0}, {0, 0, 0});
  TensorDict td = env.reset();
  td.set("action", at::zeros({3}, at::kLong));
  auto [stepped, next] = env.step_and_maybe_reset(td);
  // The step's record keeps the terminal observation; the next input has
  // the reset one for env 0.
  EXPECT_TRUE(at::equal(stepped.get({"next", "obs"}), at::ones({3, 1})));
  EXPECT_TRUE(
      at::equal(next.get("obs"), at::tensor({0.F, 1.F, 1.F}).unsqueeze(-1)));
  EXPECT_FALSE(next.get("done").any().item<bool>());
}

TEST(Envs, RolloutWithoutBreaksResetsOnTheWay) {
  CountEnv env({2, 3, 0}, {0, 0, 5});
  const TensorDict data =
      env.rollout(6, RolloutOptions().break_when_any_done(false));
  EXPECT_EQ(data.batch_size(), c10::IntArrayRef({3, 6}));
  EXPECT_EQ(column(data.get("obs"), 0), std::vector<float>({0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(column(data.get("obs"), 1), std::vector<float>({0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(column(data.get("obs"), 2), std::vector<float>({0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(column(data.get({"next", "obs"}), 2),
            std::vector<float>({1, 2, 3, 4, 5, 1}));
  EXPECT_EQ(column(data.get({"next", "terminated"}), 0),
            std::vector<float>({0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(column(data.get({"next", "truncated"}), 2),
            std::vector<float>({0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(column(data.get({"next", "done"}), 2),
            std::vector<float>({0, 0, 0, 0, 1, 0}));
  // The root's done flags are the previous step's (false after a reset).
  EXPECT_FALSE(data.get("done").any().item<bool>());
  // The random actions were stored with the step they made.
  EXPECT_TRUE(at::equal(data.get("action").to(at::kFloat),
                        data.get({"next", "reward"}).squeeze(-1)));
  EXPECT_TRUE(data.get("obs").is_contiguous());
}

TEST(Envs, RolloutStopsAtTheFirstDoneByDefault) {
  CountEnv env({2, 3, 0}, {0, 0, 5});
  const TensorDict data = env.rollout(6);
  EXPECT_EQ(data.batch_size(), c10::IntArrayRef({3, 2}));
  EXPECT_EQ(column(data.get({"next", "done"}), 0), std::vector<float>({0, 1}));
}

TEST(Envs, RolloutBreakWhenAllDoneRepeatsTheLastStepOfFinishedEnvs) {
  CountEnv env({2, 3, 0}, {0, 0, 5});
  const TensorDict data =
      env.rollout(10, RolloutOptions().break_when_all_done(true));
  EXPECT_EQ(data.batch_size(), c10::IntArrayRef({3, 5}));
  EXPECT_EQ(column(data.get("obs"), 0), std::vector<float>({0, 1, 1, 1, 1}));
  EXPECT_EQ(column(data.get({"next", "obs"}), 0),
            std::vector<float>({1, 2, 2, 2, 2}));
  EXPECT_EQ(column(data.get({"next", "done"}), 1),
            std::vector<float>({0, 0, 1, 1, 1}));
  EXPECT_EQ(column(data.get({"next", "obs"}), 2),
            std::vector<float>({1, 2, 3, 4, 5}));
  // An env that is done repeats its last step, its action included.
  EXPECT_EQ(column(data.get("action"), 0)[2], column(data.get("action"), 0)[1]);
}

TEST(Envs, RolloutChecksItsOptions) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)env.rollout(0); },
      "CountEnv::rollout: max_steps must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)env.rollout(
            3, RolloutOptions().break_when_all_done(true).break_when_any_done(
                   true));
      },
      "CountEnv::rollout: break_when_any_done and break_when_all_done cannot "
      "both be true");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)env.rollout(3, RolloutOptions().auto_reset(false)); },
      "CountEnv::rollout: auto_reset is false, so options.tensordict must hold "
      "the first step's input");
}

TEST(Envs, RolloutContinuesFromAGivenInputWithoutAReset) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  const TensorDict first =
      env.rollout(3, RolloutOptions().break_when_any_done(false));
  // TorchRL's loop: the last step's step_mdp is the next rollout's input.
  const TensorDict last =
      env.step_mdp(first.index({at::indexing::Slice(), -1}));
  const TensorDict second = env.rollout(
      2,
      RolloutOptions().auto_reset(false).tensordict(last).break_when_any_done(
          false));
  EXPECT_EQ(column(second.get("obs"), 1), std::vector<float>({3, 4}));
  EXPECT_EQ(env.resets, 3);
}

TEST(Envs, RolloutRunsAPolicyModule) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  // Action = count mod 3, from the observation.
  TensorDictModule policy(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0].squeeze(-1).to(at::kLong).remainder(3)};
      },
      {"obs"}, {"action"});
  const TensorDict data =
      env.rollout(4, policy, RolloutOptions().break_when_any_done(false));
  EXPECT_EQ(column(data.get("action"), 0), std::vector<float>({0, 1, 2, 0}));
  EXPECT_EQ(column(data.get({"next", "reward"}), 2),
            std::vector<float>({0, 1, 2, 0}));
}

TEST(Envs, RolloutFollowsAPolicyThatReplacesTheEntriesItWrites) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  // The policy moves "obs" to the end of the dict as a new tensor (a copy)
  // at every step, which shifts the entries after it: the step's
  // observation and flags must still reach the tensors the dict holds now.
  const tensordict::Policy policy = [](const TensorDict& td) {
    const at::Tensor obs = td.get("obs");
    td.erase("obs");
    td.set("obs", obs.clone());
    td.set("action", obs.squeeze(-1).to(at::kLong).remainder(3));
  };
  const TensorDict data =
      env.rollout(4, policy, RolloutOptions().break_when_any_done(false));
  EXPECT_EQ(column(data.get("obs"), 1), std::vector<float>({0, 1, 2, 3}));
  EXPECT_EQ(column(data.get({"next", "obs"}), 1),
            std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(column(data.get("action"), 1), std::vector<float>({0, 1, 2, 0}));
}

TEST(Envs, RolloutStoresNonContiguousAndLateEntries) {
  CountEnv env({0, 0, 0}, {0, 0, 0});
  int64_t calls = 0;
  // A strided action (every other element of a [3, 2] tensor), and an
  // "extra" entry from the third step on: the earlier steps hold zeros.
  const tensordict::Policy policy = [&](const TensorDict& td) {
    const at::Tensor a = td.get("obs").squeeze(-1).to(at::kLong).remainder(3);
    td.set("action", at::stack({a, a}, 1).select(1, 0));
    if (++calls >= 3) td.set("extra", at::full({3}, 7.0));
  };
  const TensorDict data =
      env.rollout(5, policy, RolloutOptions().break_when_any_done(false));
  EXPECT_EQ(data.batch_size(), c10::IntArrayRef({3, 5}));
  EXPECT_EQ(column(data.get("action"), 2), std::vector<float>({0, 1, 2, 0, 1}));
  EXPECT_EQ(column(data.get("extra"), 0), std::vector<float>({0, 0, 7, 7, 7}));
  EXPECT_EQ(column(data.get("obs"), 0), std::vector<float>({0, 1, 2, 3, 4}));
}

TEST(Envs, RolloutAllocatesNothingAfterItsFirstStep) {
  CartPoleEnv env({16});
  env.set_seed(0);
  // Warm up the caches of the write plan and the generator.
  (void)env.rollout(4, RolloutOptions().break_when_any_done(false));
  auto allocations = [&](int64_t steps) {
    const tensordict_test::AllocationCounter counter;
    const TensorDict data =
        env.rollout(steps, RolloutOptions().break_when_any_done(false));
    return counter.count();
  };
  const int64_t few = allocations(10);
  const int64_t many = allocations(400);
  EXPECT_GT(few, 0);  // the counter counts
  EXPECT_EQ(many, few) << "a longer rollout allocated more";
}

TEST(Envs, RolloutsAreReproducibleForASeed) {
  CartPoleEnv a({4}), b({4});
  a.set_seed(7);
  b.set_seed(7);
  const TensorDict ra =
      a.rollout(50, RolloutOptions().break_when_any_done(false));
  const TensorDict rb =
      b.rollout(50, RolloutOptions().break_when_any_done(false));
  EXPECT_TRUE(ra.allclose(rb, 0, 0));
  b.set_seed(8);
  const TensorDict rc =
      b.rollout(50, RolloutOptions().break_when_any_done(false));
  EXPECT_FALSE(at::equal(ra.get("observation"), rc.get("observation")));
}

TEST(Envs, SetSeedReturnsTheNextEnvsSeed) {
  CartPoleEnv env;
  const uint64_t next = env.set_seed(1);
  EXPECT_NE(next, 1U);
  EXPECT_EQ(env.set_seed(1), next);
}

TEST(Envs, CartPoleFollowsGymnasium) {
  CartPoleEnv env({2}, /*categorical_action_encoding=*/true);
  env.set_seed(3);
  TensorDict td = env.reset();
  const at::Tensor s = td.get("observation").to(at::kDouble);
  EXPECT_TRUE((s.abs() <= 0.05).all().item<bool>());
  td.set("action", at::tensor({1, 0}));
  env.step(td);
  // x += tau * x_dot, theta += tau * theta_dot (Euler, as Gymnasium).
  const at::Tensor next = td.get({"next", "observation"}).to(at::kDouble);
  EXPECT_NEAR(next[0][0].item<double>(),
              s[0][0].item<double>() + 0.02 * s[0][1].item<double>(), 1e-6);
  EXPECT_GT(next[0][1].item<double>(), s[0][1].item<double>());  // pushed right
  EXPECT_LT(next[1][1].item<double>(), s[1][1].item<double>());  // pushed left
  EXPECT_TRUE(at::equal(td.get({"next", "reward"}), at::ones({2, 1})));
  // Episodes with a fixed push end by termination before 500 steps.
  const TensorDict data = env.rollout(500);
  EXPECT_TRUE(data.get({"next", "terminated"})
                  .index({at::indexing::Slice(), -1})
                  .any()
                  .item<bool>());
}

TEST(Envs, CartPoleTruncatesAt500Steps) {
  // A policy that balances: push toward the pole's lean.
  CartPoleEnv env({1}, true);
  env.set_seed(0);
  TensorDictModule policy(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        const at::Tensor o = in[0];
        return {(o.select(-1, 2) + 0.5 * o.select(-1, 3) > 0).to(at::kLong)};
      },
      {"observation"}, {"action"});
  const TensorDict data = env.rollout(600, policy);
  EXPECT_EQ(data.batch_size(), c10::IntArrayRef({1, 500}));
  EXPECT_TRUE(data.get({"next", "truncated"})[0][499].item<bool>());
  EXPECT_FALSE(data.get({"next", "terminated"}).any().item<bool>());
}

TEST(Envs, CartPoleRefusesAnActionThatIsNotOneHot) {
  CartPoleEnv env({2});
  TensorDict td = env.reset();
  td.set("action", bools({1, 0, 1, 1}).reshape({2, 2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { env.step(td); },
      "CartPoleEnv: the action of env 1 is not one-hot: [1, 1]");
}

TEST(Envs, PendulumStepsAsTorchRLsFormula) {
  PendulumEnv env({2});
  TensorDict td = env.reset();
  td.set("th", at::tensor({0.5F, -3.0F}));
  td.set("thdot", at::tensor({1.0F, 7.9F}));
  td.set("action", at::tensor({3.0F, -0.5F}).unsqueeze(-1));
  env.step(td);
  for (int64_t e = 0; e < 2; ++e) {
    const double th = td.get("th")[e].item<double>();
    const double thdot = td.get("thdot")[e].item<double>();
    const double u =
        std::max(-2.0, std::min(2.0, td.get("action")[e][0].item<double>()));
    double new_thdot = thdot + (15.0 * std::sin(th) + 3.0 * u) * 0.05;
    new_thdot = std::max(-8.0, std::min(8.0, new_thdot));
    const double an = std::remainder(th, 2 * M_PI);
    const double cost = an * an + 0.1 * thdot * thdot + 0.001 * u * u;
    EXPECT_NEAR(td.get({"next", "thdot"})[e].item<double>(), new_thdot, 1e-5);
    EXPECT_NEAR(td.get({"next", "reward"})[e][0].item<double>(), -cost, 1e-5);
    const double wrapped = std::remainder(th + new_thdot * 0.05, 2 * M_PI);
    EXPECT_NEAR(td.get({"next", "th"})[e].item<double>(), wrapped, 1e-5);
  }
  EXPECT_TRUE(at::equal(td.get({"next", "params", "g"}), at::full({2}, 10.0F)));
  EXPECT_FALSE(td.get({"next", "done"}).any().item<bool>());
}

TEST(Envs, PendulumResetDrawsWithinTheSpec) {
  PendulumEnv env({64});
  env.set_seed(1);
  const TensorDict td = env.reset();
  EXPECT_TRUE(
      env.observation_spec().is_in(td.select({"th", "thdot", "params"})));
  EXPECT_TRUE((td.get("thdot").abs() <= 1.0).all().item<bool>());
}

TEST(Envs, CheckEnvSpecsPassesForTheLibraryEnvs) {
  CartPoleEnv cartpole({4});
  tensordict::check_env_specs(cartpole);
  CartPoleEnv categorical({}, true);
  tensordict::check_env_specs(categorical, 20);
  PendulumEnv pendulum({3});
  tensordict::check_env_specs(pendulum);
  CountEnv count({2, 0, 0}, {0, 0, 0});
  tensordict::check_env_specs(count);
}

TEST(Envs, CheckEnvSpecsNamesTheKeyTheSpecAndTheValue) {
  // A step that leaves the observation's space, or writes a key of no spec.
  struct Env final : EnvBase {
    explicit Env(bool extra) : EnvBase({}), extra_(extra) {
      set_observation_spec(
          Composite({{"obs", tensordict::Bounded(0.0, 1.0, {1})}}, {}));
      set_action_spec(Categorical(2, {}));
    }
    std::string name() const override { return "Env"; }
    void reset_impl(const TensorDict& /*td*/) override {}
    void step_impl(const TensorDict& /*td*/, const TensorDict& next) override {
      next.get("obs").fill_(-1.0);
      if (extra_) next.set("extra", at::zeros({}));
    }
    void set_seed_impl(uint64_t /*seed*/) override {}
    bool extra_;
  };
  Env extra(true);
  ExpectThrowsMsg(
      [&] { tensordict::check_env_specs(extra, 2); },
      "check_env_specs: Env: the keys of the specs and of the data differ:\n"
      " - in the data but in no spec: [('next', 'extra')]\n"
      " - in a spec but not in the data: []");
  Env outside(false);
  ExpectThrowsMsg(
      [&] { tensordict::check_env_specs(outside, 2); },
      "check_env_specs: Env: key obs: expected a value of BoundedContinuous(\n"
      "    shape=torch.Size([1]),\n"
      "    space=ContinuousBox(\n"
      "        low=Tensor(shape=torch.Size([1]), device=cpu, "
      "dtype=torch.float32, contiguous=True),\n"
      "        high=Tensor(shape=torch.Size([1]), device=cpu, "
      "dtype=torch.float32, contiguous=True)),\n"
      "    device=cpu,\n"
      "    dtype=torch.float32,\n"
      "    domain=continuous)\n"
      "got a value of shape [2, 1] (one step: [1]) and dtype torch.float32, "
      "out of the spec's space");
}
