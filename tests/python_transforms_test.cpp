// The transforms (tensordict/envs.h) against the reference Python TorchRL
// (python_reference.h): StepCounter, RewardSum, ObservationNorm (with
// init_stats) and VecNorm on PendulumEnv rollouts of both sides, from one
// seed with one torque sequence (or random actions from one seeded
// stream). Data goes both ways through memmap directories. TorchRL 0.4 has
// no torchrl.data.Composite (nor PendulumEnv), so the tests run against
// 0.14 only and skip for 0.4.
//
// TorchRL's PendulumEnv is unbatched (a batch of states goes through it,
// but its transforms' specs do not follow), so the rollouts here are of
// unbatched envs: the resets inside a rollout (StepCounter's truncations)
// are whole, and draw from the env's seeded stream on both sides.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "python_reference.h"
#include "rl/random.h"
#include "torchrl_reference.h"

namespace {

using tensordict::Compose;
using tensordict::EnvBase;
using tensordict::NestedKey;
using tensordict::ObservationNorm;
using tensordict::PendulumEnv;
using tensordict::RewardSum;
using tensordict::RolloutOptions;
using tensordict::StepCounter;
using tensordict::TensorDict;
using tensordict::TransformedEnv;
using tensordict::TransformPtr;
using tensordict::VecNorm;
using tensordict_test::ExpectSameDict;
using tensordict_test::kSkipMessage;
using tensordict_test::LeafKeys;
using tensordict_test::MaxAbsDiff;
using tensordict_test::PyRef;
using tensordict_test::PyRun;
using tensordict_test::TempDir;

// The pendulum's float32 kernels (a vectorized sin in TorchRL) differ by an
// ulp here and there; the transforms' own arithmetic is TorchRL's.
constexpr double kTolerance = 1e-5;

constexpr const char* kNo014Message =
    "the reference TorchRL has no torchrl.data.Composite or "
    "torchrl.envs.PendulumEnv (TorchRL 0.4): the transforms are TorchRL "
    "0.14's";

// Put before every script (after RunTorchRL's check).
// `torques` is argv[1]'s "torques" ([T, 1]); `policy()` plays them in
// order.
constexpr const char* kPreamble = R"py(
from tensordict import TensorDict
from torchrl.envs import (Compose, ObservationNorm, PendulumEnv, RewardSum,
                          StepCounter, TransformedEnv, VecNorm)
inp = TensorDict.load_memmap(sys.argv[1]).to_tensordict()
torques = inp["torques"]
def make_policy():
    t = [0]
    def policy(td):
        td.set("action", torques[t[0]].clone())
        t[0] += 1
        return td
    return policy
)py";

// Runs kPreamble + `body`.
PyRun RunTorchRL(const std::string& body,
                 const std::vector<std::string>& args) {
  return tensordict_test::RunTorchRL(std::string(kPreamble) + body, args);
}

// A deterministic torque sequence, [T, 1]: 2.5 sin(0.3 t), clipped to the
// action bounds.
at::Tensor Torques(int64_t steps) {
  return (2.5 * at::sin(0.3 * at::arange(steps, at::kFloat)))
      .clamp(-2.0, 2.0)
      .unsqueeze(-1)
      .contiguous();
}

// A policy that plays `torques` in order.
tensordict::Policy Play(const at::Tensor& torques) {
  auto t = std::make_shared<int64_t>(0);
  return [torques, t](const TensorDict& td) {
    td.set("action", torques[(*t)++].clone());
  };
}

RolloutOptions NoBreak() { return RolloutOptions().break_when_any_done(false); }

// ---- StepCounter and RewardSum --------------------------------------------

// A rollout of argv[2] steps of PendulumEnv with StepCounter(5) and
// RewardSum, seeded 7, the torques as policy, resets on the way; to
// argv[3].
constexpr const char* kCounters = R"py(
env = TransformedEnv(PendulumEnv(), Compose(StepCounter(5), RewardSum()))
env.set_seed(7)
data = env.rollout(int(sys.argv[2]), make_policy(), break_when_any_done=False)
data.contiguous().memmap(sys.argv[3])
)py";

TEST(PythonReference, TransformsStepCounterAndRewardSumMatchTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  constexpr int64_t kSteps = 13;
  TempDir dir("td_pytransforms");
  const at::Tensor torques = Torques(kSteps);
  (void)TensorDict({{"torques", torques}}, {}).memmap(dir / "in");
  const PyRun run =
      RunTorchRL(kCounters, {dir / "in", std::to_string(kSteps), dir / "out"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

  TransformedEnv env(
      std::make_unique<PendulumEnv>(),
      std::make_shared<Compose>(std::vector<TransformPtr>{
          std::make_shared<StepCounter>(5), std::make_shared<RewardSum>()}));
  env.set_seed(7);
  const TensorDict ours = env.rollout(kSteps, Play(torques), NoBreak());
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  ExpectSameDict(ours, theirs, kTolerance);
  // The stream has two truncations, and the sums restart after them.
  EXPECT_EQ(ours.get({"next", "truncated"}).sum().item<int64_t>(), 2);
  EXPECT_EQ(ours.get({"next", "step_count"})[5].item<int64_t>(), 1);
}

// ---- ObservationNorm ------------------------------------------------------

// ObservationNorm(loc 0.5, scale 2.0 (float32 tensors), "thdot") on
// PendulumEnv seeded 9, argv[2] steps of the torques, with standard_normal
// argv[3]; the rollout to argv[4]/data, the thdot spec's bounds to
// argv[4]/bounds.
constexpr const char* kObservationNorm = R"py(
norm = ObservationNorm(loc=torch.tensor(0.5), scale=torch.tensor(2.0),
                       in_keys=["thdot"], standard_normal=sys.argv[3] == "1")
env = TransformedEnv(PendulumEnv(), norm)
env.set_seed(9)
data = env.rollout(int(sys.argv[2]), make_policy(), break_when_any_done=False)
data.contiguous().memmap(sys.argv[4] + "/data")
space = env.observation_spec["thdot"].space
TensorDict({"low": space.low, "high": space.high}, []).memmap(sys.argv[4] + "/bounds")
)py";

TEST(PythonReference, TransformsObservationNormMatchesTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  constexpr int64_t kSteps = 20;
  for (const bool standard : {false, true}) {
    SCOPED_TRACE(standard ? "standard_normal" : "affine");
    TempDir dir("td_pytransforms");
    const at::Tensor torques = Torques(kSteps);
    (void)TensorDict({{"torques", torques}}, {}).memmap(dir / "in");
    const PyRun run = RunTorchRL(
        kObservationNorm,
        {dir / "in", std::to_string(kSteps), standard ? "1" : "0", dir.str()});
    ASSERT_NE(run, PyRun::kFailed);
    if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

    TransformedEnv env(std::make_unique<PendulumEnv>(),
                       std::make_shared<ObservationNorm>(
                           at::scalar_tensor(0.5F), at::scalar_tensor(2.0F),
                           std::vector<NestedKey>{"thdot"}, standard));
    env.set_seed(9);
    const TensorDict ours = env.rollout(kSteps, Play(torques), NoBreak());
    ExpectSameDict(ours, TensorDict::load_memmap(dir / "data"), kTolerance);
    const TensorDict bounds = TensorDict::load_memmap(dir / "bounds");
    const auto& spec = dynamic_cast<const tensordict::Bounded&>(
        env.observation_spec().leaf("thdot"));
    EXPECT_TRUE(at::allclose(spec.low(), bounds.get("low")));
    EXPECT_TRUE(at::allclose(spec.high(), bounds.get("high")));
  }
}

// ObservationNorm.init_stats(argv[2]) of an uninitialized
// ObservationNorm("thdot", standard_normal argv[3]) after StepCounter(7) on
// PendulumEnv seeded 3, the random actions drawn from torch's default
// generator seeded argv[4] (the stream the env's own rollout draws from
// here); loc and scale to argv[5].
constexpr const char* kInitStats = R"py(
norm = ObservationNorm(in_keys=["thdot"], standard_normal=sys.argv[3] == "1")
env = TransformedEnv(PendulumEnv(), Compose(StepCounter(7), norm))
env.set_seed(3)
torch.manual_seed(int(sys.argv[4]))
norm.init_stats(int(sys.argv[2]))
TensorDict({"loc": norm.loc, "scale": norm.scale}, []).memmap(sys.argv[5])
)py";

TEST(PythonReference, TransformsObservationNormInitStatsMatchesTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  // The seed of the random actions of an env seeded 3 (EnvBase::set_seed).
  const uint64_t action_seed = tensordict::detail::Generator(3 ^ 0x5eedULL)();
  for (const bool standard : {false, true}) {
    SCOPED_TRACE(standard ? "standard_normal" : "affine");
    TempDir dir("td_pytransforms");
    (void)TensorDict({{"torques", Torques(1)}}, {}).memmap(dir / "in");
    const PyRun run =
        RunTorchRL(kInitStats, {dir / "in", "20", standard ? "1" : "0",
                                std::to_string(action_seed), dir / "out"});
    ASSERT_NE(run, PyRun::kFailed);
    if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

    auto norm = std::make_shared<ObservationNorm>(
        std::vector<NestedKey>{"thdot"}, standard);
    TransformedEnv env(std::make_unique<PendulumEnv>(),
                       std::make_shared<Compose>(std::vector<TransformPtr>{
                           std::make_shared<StepCounter>(7), norm}));
    env.set_seed(3);
    norm->init_stats(20);  // three rollouts of 7 steps
    const TensorDict theirs = TensorDict::load_memmap(dir / "out");
    EXPECT_LE(MaxAbsDiff(norm->loc(), theirs.get("loc")), kTolerance);
    EXPECT_LE(MaxAbsDiff(norm->scale(), theirs.get("scale")), kTolerance);
    EXPECT_EQ(norm->loc().sizes().vec(), theirs.get("loc").sizes().vec());
  }
}

// ---- VecNorm --------------------------------------------------------------

// VecNorm(["thdot", "reward"], decay 0.9) on PendulumEnv seeded 5, with a
// batch of 3 states (TorchRL's unbatched env takes batched data, and
// VecNorm's statistics follow the data; its reset has no transform that
// needs specs of the batch): a rollout of argv[2] steps of the torques
// ([T, 3, 1]; to argv[3]/first), the statistics (to argv[3]/stats), then
// frozen, a rollout of 5 steps of the torques again (to argv[3]/frozen).
// TorchRL's VecNorm turns a scalar observation of an unbatched env into
// [1] (its mean is [1]), so the batch is needed for the shapes to match.
constexpr const char* kVecNorm = R"py(
vec = VecNorm(in_keys=["thdot", "reward"], decay=0.9, new_api=False)
env = TransformedEnv(PendulumEnv(), vec)
env.set_seed(5)
def run(steps, path):
    td = env.reset(env.base_env.gen_params(batch_size=[3]))
    data = env.rollout(steps, make_policy(), auto_reset=False, tensordict=td,
                       break_when_any_done=False)
    data.contiguous().memmap(path)  # [3, T]
run(int(sys.argv[2]), sys.argv[3] + "/first")
vec._td.clone().memmap(sys.argv[3] + "/stats")
vec.freeze()
run(5, sys.argv[3] + "/frozen")
)py";

TEST(PythonReference, TransformsVecNormMatchesTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  constexpr int64_t kSteps = 15;
  TempDir dir("td_pytransforms");
  // [T, 3, 1]: the torques, shifted for each env.
  const at::Tensor torques =
      at::stack({Torques(kSteps), Torques(kSteps + 1).narrow(0, 1, kSteps),
                 Torques(kSteps + 2).narrow(0, 2, kSteps)},
                1)
          .contiguous();
  (void)TensorDict({{"torques", torques}}, {}).memmap(dir / "in");
  const PyRun run =
      RunTorchRL(kVecNorm, {dir / "in", std::to_string(kSteps), dir.str()});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

  auto vec =
      std::make_shared<VecNorm>(std::vector<NestedKey>{"thdot", "reward"}, 0.9);
  TransformedEnv env(std::make_unique<PendulumEnv>(std::vector<int64_t>{3}),
                     vec);
  env.set_seed(5);
  {
    SCOPED_TRACE("running");
    ExpectSameDict(env.rollout(kSteps, Play(torques), NoBreak()),
                   TensorDict::load_memmap(dir / "first"), kTolerance);
  }
  const TensorDict stats = TensorDict::load_memmap(dir / "stats");
  const TensorDict ours = vec->state_dict();
  EXPECT_EQ(LeafKeys(ours), LeafKeys(stats));
  for (const NestedKey& key : ours.keys(true, true)) {
    // Sums of squares of rewards reach the thousands: relative to them.
    const double scale = 1.0 + stats.get(key).abs().max().item<double>();
    EXPECT_LE(MaxAbsDiff(ours.get(key), stats.get(key)) / scale, kTolerance)
        << key.str();
    EXPECT_EQ(ours.get(key).sizes().vec(), stats.get(key).sizes().vec())
        << key.str();
  }
  vec->freeze();
  {
    SCOPED_TRACE("frozen");
    ExpectSameDict(env.rollout(5, Play(torques), NoBreak()),
                   TensorDict::load_memmap(dir / "frozen"), kTolerance);
  }
}

}  // namespace
