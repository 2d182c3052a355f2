// SerialEnv and ParallelEnv (tensordict/envs.h): batched specs, the same
// rollouts as the envs they batch, partial resets, and the fault model of
// ParallelEnv (an env that throws, a killed worker, a stuck worker, the
// destructor), with threads and with processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "alloc_util.h"
#include "envs/env_access.h"
#include "test_util.h"

using tensordict::CartPoleEnv;
using tensordict::Categorical;
using tensordict::Composite;
using tensordict::EnvBase;
using tensordict::EnvFactory;
using tensordict::NestedKey;
using tensordict::ParallelEnv;
using tensordict::ParallelEnvOptions;
using tensordict::PendulumEnv;
using tensordict::RolloutOptions;
using tensordict::SerialEnv;
using tensordict::TensorDict;
using tensordict::Unbounded;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;

namespace {

// One counter: "obs" counts the steps since the reset. The action picks
// what a step does: 0 counts, 1 hangs for `hang_s` seconds, 2 throws. A
// reset throws when the state "trigger" of its row is set. Resets are
// counted in the observation "resets".
class FaultEnv final : public EnvBase {
 public:
  explicit FaultEnv(double hang_s) : EnvBase({}), hang_s_(hang_s) {
    set_observation_spec(
        Composite({{"obs", Unbounded({1})}, {"resets", Unbounded({1})}}, {}));
    // The step reads "obs" and "resets" back (as PendulumEnv its state):
    // worker processes see the action and state keys only.
    set_state_spec(Composite({{"obs", Unbounded({1})},
                              {"resets", Unbounded({1})},
                              {"trigger", Unbounded({1})}},
                             {}));
    set_action_spec(Categorical(3, {}));
  }
  [[nodiscard]] std::string name() const override { return "FaultEnv"; }

 protected:
  void reset_impl(const TensorDict& td) override {
    TORCH_CHECK(td.get("trigger").item<float>() == 0.0F, "reset boom");
    td.get("obs").zero_();
    td.get("resets").add_(1.0);
  }
  void step_impl(const TensorDict& td, const TensorDict& next) override {
    const int64_t action = td.get("action").item<int64_t>();
    if (action == 1) {
      std::this_thread::sleep_for(std::chrono::duration<double>(hang_s_));
    }
    TORCH_CHECK(action != 2, "step boom");
    next.get("obs").copy_(td.get("obs") + 1);
    next.get("resets").copy_(td.get("resets"));
  }
  void set_seed_impl(uint64_t /*seed*/) override {}

 private:
  double hang_s_;
};

EnvFactory fault_factory(double hang_s) {
  return [hang_s] { return std::make_unique<FaultEnv>(hang_s); };
}

EnvFactory cartpole_factory() {
  return [] { return std::make_unique<CartPoleEnv>(); };
}

TensorDict with_actions(TensorDict td, std::vector<int64_t> actions) {
  td.set("action", at::tensor(actions));
  return td;
}

bool reaped(int64_t pid) {
  return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

class ParallelModes : public ::testing::TestWithParam<bool> {
 protected:
  ParallelEnvOptions options() const {
    return ParallelEnvOptions().processes(GetParam());
  }
};

}  // namespace

TEST(BatchedEnvs, SerialEnvBatchesItsEnvsSpecs) {
  SerialEnv env(3, cartpole_factory());
  EXPECT_EQ(env.batch_size(), c10::IntArrayRef({3}));
  EXPECT_EQ(env.num_envs(), 3);
  EXPECT_EQ(env.observation_spec().leaf("observation").shape(),
            c10::IntArrayRef({3, 4}));
  EXPECT_EQ(env.action_spec().leaf("action").shape(), c10::IntArrayRef({3, 2}));
  EXPECT_EQ(env.done_spec().leaf("truncated").shape(),
            c10::IntArrayRef({3, 1}));
  tensordict::check_env_specs(env);
}

TEST(BatchedEnvs, SerialEnvRefusesEnvsWithOtherSpecs) {
  int made = 0;
  const EnvFactory factory = [&made]() -> std::unique_ptr<EnvBase> {
    return std::make_unique<CartPoleEnv>(std::vector<int64_t>{}, made++ == 1);
  };
  ExpectThrowsMsg<c10::ValueError>(
      [&] { SerialEnv env(2, factory); },
      "SerialEnv: env 1's action spec differs from the first env's");
}

TEST(BatchedEnvs, SerialEnvResetsOnlyTheEnvsOfTheMask) {
  SerialEnv env(3, fault_factory(0));
  TensorDict td = env.reset();
  EXPECT_TRUE(at::equal(td.get("resets"), at::ones({3, 1})));
  td.set("_reset", at::tensor(std::vector<int64_t>{0, 1, 0}).to(at::kBool));
  env.reset(td);
  EXPECT_TRUE(
      at::equal(td.get("resets").squeeze(-1), at::tensor({1.F, 2.F, 1.F})));
}

TEST_P(ParallelModes, RolloutsEqualSerialEnvsForTheSameSeed) {
  SerialEnv serial(4, cartpole_factory());
  ParallelEnv parallel(4, cartpole_factory(), options().num_workers(2));
  serial.set_seed(11);
  parallel.set_seed(11);
  const auto opts = RolloutOptions().break_when_any_done(false);
  const TensorDict a = serial.rollout(120, opts);
  const TensorDict b = parallel.rollout(120, opts);
  EXPECT_EQ(b.batch_size(), c10::IntArrayRef({4, 120}));
  EXPECT_TRUE(a.allclose(b, 0, 0));
  // Episodes ended and were reset on the way.
  EXPECT_TRUE(b.get({"next", "done"}).any().item<bool>());
}

TEST_P(ParallelModes, PendulumRolloutsEqualSerialEnvs) {
  const EnvFactory factory = [] { return std::make_unique<PendulumEnv>(); };
  SerialEnv serial(3, factory);
  ParallelEnv parallel(3, factory, options());
  serial.set_seed(5);
  parallel.set_seed(5);
  const TensorDict a = serial.rollout(50);
  const TensorDict b = parallel.rollout(50);
  EXPECT_TRUE(a.allclose(b, 0, 0));
}

// A policy of the observation: push right when the pole leans right.
void lean_policy(const TensorDict& td) {
  const at::Tensor right = td.get("observation").select(-1, 2) > 0;
  td.set("action", at::stack({right.logical_not(), right}, -1));
}

// ParallelEnv's state is SerialEnv's (its workers' envs', asked of them);
// a ParallelEnv that loads it steps as the first does next.
TEST_P(ParallelModes, StateDictIsSerialEnvsAndResumesTheStream) {
  SerialEnv serial(4, cartpole_factory());
  ParallelEnv parallel(4, cartpole_factory(), options().num_workers(2));
  serial.set_seed(11);
  parallel.set_seed(11);
  const auto opts = RolloutOptions().break_when_any_done(false);
  (void)serial.rollout(30, opts);
  (void)parallel.rollout(30, opts);
  const TensorDict state = parallel.state_dict();
  const TensorDict serial_state = serial.state_dict();
  ASSERT_EQ(state.keys(true, true), serial_state.keys(true, true));
  EXPECT_TRUE(state.contains({"envs", "3", "physics"}));
  EXPECT_TRUE(state.allclose(serial_state, 0, 0));
  // Leaves that are views into one buffer (a consolidated dict) load too.
  serial.load_state_dict(serial_state.consolidate());
  EXPECT_TRUE(serial.state_dict().allclose(serial_state, 0, 0));
  // Mid-episode: the physics and the generators resume.
  const TensorDict start = parallel.reset();
  const TensorDict mid = parallel.state_dict();
  const auto from =
      RolloutOptions().break_when_any_done(false).auto_reset(false).tensordict(
          start.clone());
  const TensorDict expected = parallel.rollout(40, from);
  ParallelEnv resumed(4, cartpole_factory(), options().num_workers(2));
  resumed.set_seed(7);
  (void)resumed.rollout(5, opts);
  resumed.load_state_dict(mid);
  EXPECT_TRUE(resumed.rollout(40, from).allclose(expected, 0, 0));
}

// A state an env refuses (env 3's generator bytes, in worker 1) raises,
// naming the env, and every worker's envs are as they were.
TEST_P(ParallelModes, LoadStateDictIsAllOrNothing) {
  ParallelEnv parallel(4, cartpole_factory(), options().num_workers(2));
  parallel.set_seed(3);
  (void)parallel.rollout(10, RolloutOptions().break_when_any_done(false));
  const TensorDict before = parallel.state_dict();
  TensorDict bad = parallel.state_dict();
  (void)parallel.rollout(10, RolloutOptions().break_when_any_done(false));
  const TensorDict now = parallel.state_dict();
  // env 0's state loads (worker 0's), env 3's does not (worker 1's).
  const at::Tensor bytes = bad.get({"envs", "3", "generator"});
  bytes.narrow(0, 8, 4).copy_(at::tensor({624}, at::kInt).view(at::kByte));
  bytes.narrow(0, 16, 8).copy_(
      at::tensor({int64_t{624}}, at::kLong).view(at::kByte));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { parallel.load_state_dict(bad); },
      "ParallelEnv::load_state_dict: env 3: CartPoleEnv::load_state_dict: the "
      "generator state generator is not a Mersenne Twister state (position "
      "624, left 624)");
  const TensorDict after = parallel.state_dict();
  ASSERT_EQ(after.keys(true, true), now.keys(true, true));
  EXPECT_TRUE(after.allclose(now, 0, 0));
  EXPECT_FALSE(after.allclose(before, 0, 0));
  // A missing env's state, before any worker is asked.
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        parallel.load_state_dict(before.exclude({NestedKey({"envs", "2"})}));
      },
      "ParallelEnv::load_state_dict: the state has no entry ('envs', '2', "
      "'rng')");
  parallel.load_state_dict(before);
  EXPECT_TRUE(parallel.state_dict().allclose(before, 0, 0));
}

TEST_P(ParallelModes, RolloutsFromAGivenInputEqualSerialEnvs) {
  SerialEnv serial(3, cartpole_factory());
  ParallelEnv parallel(3, cartpole_factory(), options());
  serial.set_seed(2);
  parallel.set_seed(2);
  const tensordict::Policy policy = lean_policy;
  const auto opts = RolloutOptions().break_when_any_done(false);
  const TensorDict a = serial.rollout(30, policy, opts);
  const TensorDict b = parallel.rollout(30, policy, opts);
  EXPECT_TRUE(a.allclose(b, 0, 0));
  // TorchRL's loop: the next rollout goes on from the last step.
  const auto go_on = [&](EnvBase& env, const TensorDict& last) {
    return env.rollout(
        20, policy,
        RolloutOptions()
            .break_when_any_done(false)
            .auto_reset(false)
            .tensordict(env.step_mdp(last.index({at::indexing::Slice(), -1}))));
  };
  const TensorDict a2 = go_on(serial, a);
  const TensorDict b2 = go_on(parallel, b);
  EXPECT_TRUE(a2.allclose(b2, 0, 0));
  EXPECT_TRUE(at::equal(b2.get("observation").select(1, 0),
                        b.get({"next", "observation"}).select(1, 29)));
}

TEST_P(ParallelModes, ARolloutOfWorkerProcessesStepsInTheirSharedBatch) {
  ParallelEnv env(2, cartpole_factory(), options());
  using tensordict::detail::EnvAccess;
  const c10::optional<TensorDict> root =
      EnvAccess::shared_tensordict(env, false);
  const c10::optional<TensorDict> next =
      EnvAccess::shared_tensordict(env, true);
  if (!GetParam()) {  // threads write into the caller's dicts
    EXPECT_FALSE(root.has_value());
    EXPECT_FALSE(next.has_value());
    return;
  }
  ASSERT_TRUE(root.has_value() && next.has_value());
  // What the policy sees is the workers' memory: the observations they
  // wrote, and the "next" they write into.
  std::vector<const void*> seen;
  const tensordict::Policy policy = [&](const TensorDict& td) {
    seen.push_back(td.get("observation").data_ptr());
    seen.push_back(td.get({"next", "observation"}).data_ptr());
    lean_policy(td);
  };
  (void)env.rollout(3, policy, RolloutOptions().break_when_any_done(false));
  ASSERT_EQ(seen.size(), 6U);
  for (size_t i = 0; i < seen.size(); i += 2) {
    EXPECT_EQ(seen[i], root->get("observation").data_ptr());
    EXPECT_EQ(seen[i + 1], next->get("observation").data_ptr());
  }
}

TEST_P(ParallelModes, RolloutsAllocateNothingAfterTheirFirstStep) {
  ParallelEnv env(2, cartpole_factory(), options());
  env.set_seed(0);
  const auto opts = RolloutOptions().break_when_any_done(false);
  (void)env.rollout(4, opts);  // warms the caches up
  auto allocations = [&](int64_t steps) {
    const tensordict_test::AllocationCounter counter;
    const TensorDict data = env.rollout(steps, opts);
    return counter.count();
  };
  const int64_t few = allocations(10);
  const int64_t many = allocations(200);
  EXPECT_GT(few, 0);  // the counter counts
  EXPECT_EQ(many, few) << "a longer rollout allocated more";
}

TEST_P(ParallelModes, AnEnvThatThrowsNamesItselfAndLeavesTheCallersDict) {
  ParallelEnv env(4, fault_factory(0), options());
  TensorDict td = with_actions(env.reset(), {0, 0, 0, 0});
  env.step(td);
  TensorDict next = with_actions(env.step_mdp(td), {0, 0, 2, 0});
  const auto snapshot = TakeSnapshot(next);
  ExpectThrowsMsg([&] { env.step(next); },
                  "ParallelEnv: env 2 failed at step 2: step boom");
  ExpectUnchanged(next, snapshot);
  // The env stays usable.
  next.set("action", at::zeros({4}, at::kLong));
  env.step(next);
  EXPECT_TRUE(at::equal(next.get({"next", "obs"}), at::full({4, 1}, 2.0F)));
  // A reset that throws.
  TensorDict again = env.step_mdp(next);
  again.set("trigger", at::tensor({0.F, 1.F, 0.F, 1.F}).unsqueeze(-1));
  ExpectThrowsMsg([&] { env.reset(again); },
                  "ParallelEnv: env 1 failed at reset: reset boom");
}

TEST_P(ParallelModes, AFactoryThatThrowsFailsTheConstruction) {
  // The meta env is made in the caller; the workers' envs fail.
  // With threads, the workers call the factory at the same time.
  auto made = std::make_shared<std::atomic<int>>(0);
  const EnvFactory factory = [made]() -> std::unique_ptr<EnvBase> {
    TORCH_CHECK((*made)++ == 0, "nope");
    return std::make_unique<CartPoleEnv>();
  };
  ExpectThrowsMsg([&] { ParallelEnv env(2, factory, options()); },
                  "ParallelEnv: env 0 could not be made: nope");
}

TEST(BatchedEnvs, AKilledWorkerProcessFailsTheNextCallWithinASecond) {
  std::vector<int64_t> pids;
  {
    ParallelEnv env(4, fault_factory(0), ParallelEnvOptions().processes(true));
    pids = env.worker_pids();
    ASSERT_EQ(pids.size(), 4U);
    TensorDict td = with_actions(env.reset(), {0, 0, 0, 0});
    ASSERT_EQ(kill(static_cast<pid_t>(pids[3]), SIGKILL), 0);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string died = "ParallelEnv: worker 3 (pid " +
                             std::to_string(pids[3]) + ") died: signal 9";
    ExpectThrowsMsg([&] { env.step(td); }, died);
    EXPECT_LT(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count(),
        1.0);
    // Every later call says the same.
    ExpectThrowsMsg([&] { (void)env.reset(); }, died);
  }
  // The destructor reaped every worker: no zombie is left.
  for (const int64_t pid : pids) EXPECT_TRUE(reaped(pid)) << pid;
}

TEST(BatchedEnvs, AStuckWorkerProcessTimesOutAndIsKilled) {
  std::vector<int64_t> pids;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ParallelEnv env(2, fault_factory(1000.0),
                    ParallelEnvOptions().processes(true).timeout(0.3));
    pids = env.worker_pids();
    TensorDict td = with_actions(env.reset(), {0, 1});
    ExpectThrowsMsg([&] { env.step(td); },
                    "ParallelEnv: worker 1 (pid " + std::to_string(pids[1]) +
                        ", envs 1 to 1) did not finish step 1 within 0.3 s");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            3.0);
  for (const int64_t pid : pids) EXPECT_TRUE(reaped(pid)) << pid;
}

TEST(BatchedEnvs, AStuckWorkerThreadTimesOutAndTheDestructorReturns) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    ParallelEnv env(2, fault_factory(1.0),
                    ParallelEnvOptions().num_workers(2).timeout(0.2));
    TensorDict td = with_actions(env.reset(), {0, 1});
    ExpectThrowsMsg([&] { env.step(td); },
                    "ParallelEnv: env 1 did not finish step 1 within 0.2 s");
    ExpectThrowsMsg([&] { env.step(td); },
                    "ParallelEnv: env 1 did not finish step 1 within 0.2 s");
  }
  // The destructor returned before the stuck step did (1 s), leaving the
  // thread to finish it, detached.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            0.9);
  // Let it finish before the process may exit (a thread still running
  // then would meet LibTorch's static destructors).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

TEST(BatchedEnvs, AStuckFirstEnvTimesOutToo) {
  // The caller runs no env itself: env 0, the first share's, is timed out
  // as any other.
  const auto t0 = std::chrono::steady_clock::now();
  {
    ParallelEnv env(2, fault_factory(1.0),
                    ParallelEnvOptions().num_workers(2).timeout(0.2));
    TensorDict td = with_actions(env.reset(), {1, 0});
    const auto snapshot = TakeSnapshot(td);
    ExpectThrowsMsg([&] { env.step(td); },
                    "ParallelEnv: env 0 did not finish step 1 within 0.2 s");
    ExpectUnchanged(td, snapshot);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            0.9);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
}

TEST(BatchedEnvs, TheDestructorReapsEveryWorkerProcess) {
  std::vector<int64_t> pids;
  {
    ParallelEnv env(3, cartpole_factory(),
                    ParallelEnvOptions().processes(true));
    pids = env.worker_pids();
    (void)env.rollout(10);
  }
  for (const int64_t pid : pids) EXPECT_TRUE(reaped(pid)) << pid;
}

TEST(BatchedEnvs, ParallelEnvChecksItsOptions) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { ParallelEnv env(0, cartpole_factory()); },
      "ParallelEnv: num_envs must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        ParallelEnv env(2, cartpole_factory(), ParallelEnvOptions().timeout(0));
      },
      "ParallelEnv: timeout must be positive, got 0");
}

INSTANTIATE_TEST_SUITE_P(BatchedEnvs, ParallelModes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Processes" : "Threads";
                         });
