// The environments (tensordict/envs.h) against the reference Python TorchRL
// (python_reference.h): PendulumEnv's trajectories and seeded resets,
// rollout's keys, layout and flags (with StepCounter's truncations too),
// and step_mdp on nested keys. Data goes both ways through memmap
// directories (JSON for the reset draws). TorchRL 0.4 has neither
// torchrl.data.Composite nor torchrl.envs.PendulumEnv, so the tests run
// against 0.14 only and skip for 0.4.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "python_reference.h"
#include "torchrl_reference.h"

namespace {

using nlohmann::json;
using tensordict::Composite;
using tensordict::EnvBase;
using tensordict::NestedKey;
using tensordict::PendulumEnv;
using tensordict::RolloutOptions;
using tensordict::StepCounter;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TransformedEnv;
using tensordict::Unbounded;
using tensordict_test::ExpectSameDict;
using tensordict_test::kSkipMessage;
using tensordict_test::LeafKeys;
using tensordict_test::PyRef;
using tensordict_test::PyRun;
using tensordict_test::ReadFile;
using tensordict_test::TempDir;

// What the trajectories may differ by. With the reference's own torch they
// are bit-identical (PendulumEnv takes sin(th) from torch's kernel and does
// the rest in float32 in TorchRL's order); the tolerance leaves room for a
// LibTorch built otherwise. std::sin instead of torch's sin parts them by
// 5e-5 within 200 steps.
constexpr double kTolerance = 1e-5;

constexpr const char* kNo014Message =
    "the reference TorchRL has no torchrl.data.Composite or "
    "torchrl.envs.PendulumEnv (TorchRL 0.4): the envs are TorchRL 0.14's";

// Put before every script (after RunTorchRL's check).
constexpr const char* kPreamble = R"py(
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.envs import EnvBase, PendulumEnv
)py";

// Runs kPreamble + `body`.
PyRun RunTorchRL(const std::string& body,
                 const std::vector<std::string>& args) {
  return tensordict_test::RunTorchRL(std::string(kPreamble) + body, args);
}

// ---- PendulumEnv's trajectory -------------------------------------------------

// Reads {"th", "thdot": [*batch], "action": [T, *batch, 1]} from argv[1];
// TorchRL's PendulumEnv starts from that state (`gen_params` of the batch,
// then `reset(td, set_state=True)`) and steps through the actions. Writes
// the reset's state under "reset" and the T steps' "next" dicts stacked,
// [T, *batch], under "traj", to argv[2].
constexpr const char* kPendulumTrajectory = R"py(
inp = TensorDict.load_memmap(sys.argv[1]).to_tensordict()
batch = list(inp["th"].shape)
env = PendulumEnv()
td = env.gen_params(batch_size=batch)
td["th"] = inp["th"]
td["thdot"] = inp["thdot"]
td = env.reset(td, set_state=True)
first = td.select("th", "thdot").clone()
steps = []
for t in range(inp["action"].shape[0]):
    td["action"] = inp["action"][t].clone()
    td = env.step(td)
    steps.append(td["next"].clone())
    td = env.step_mdp(td)
TensorDict({"reset": first, "traj": torch.stack(steps, 0)}, []).memmap(sys.argv[2])
)py";

// A deterministic torque sequence, [T, *batch, 1]: 2.5 sin(0.07 t + 0.9 i)
// for env i, clipped to the action bounds [-2, 2].
at::Tensor Torques(int64_t steps, const std::vector<int64_t>& batch) {
  const int64_t n = c10::multiply_integers(batch);
  const at::Tensor t = at::arange(steps, at::kFloat).unsqueeze(1);
  const at::Tensor i = at::arange(n, at::kFloat).unsqueeze(0);
  std::vector<int64_t> shape = {steps};
  shape.insert(shape.end(), batch.begin(), batch.end());
  shape.push_back(1);
  return (2.5 * at::sin(0.07 * t + 0.9 * i))
      .clamp(-2.0, 2.0)
      .reshape(shape)
      .contiguous();
}

// Steps our PendulumEnv of `batch` and TorchRL's from one random state with
// one action sequence; the steps match within kTolerance.
void ExpectTheTrajectoryOfTorchRL(const std::vector<int64_t>& batch) {
  SCOPED_TRACE("batch of " + std::to_string(batch.size()) + " dims");
  constexpr int64_t kSteps = 200;
  TempDir dir("td_pyenvs");
  PendulumEnv env(batch);
  env.set_seed(11);
  TensorDict td = env.reset();
  const at::Tensor th0 = td.get("th").clone();
  const at::Tensor thdot0 = td.get("thdot").clone();
  const at::Tensor torques = Torques(kSteps, batch);
  TensorDict(
      {{"th", td.get("th")}, {"thdot", td.get("thdot")}, {"action", torques}},
      {})
      .memmap_(dir / "in");
  const PyRun run = RunTorchRL(kPendulumTrajectory, {dir / "in", dir / "out"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

  std::vector<TensorDict> steps;
  for (int64_t t = 0; t < kSteps; ++t) {
    td.set("action", torques[t]);
    env.step(td);
    steps.push_back(td.get_tensordict("next"));
    td = env.step_mdp(td);
  }
  const TensorDict ours = tensordict::stack(steps, 0);
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  // TorchRL's reset kept our state as it was.
  EXPECT_TRUE(at::equal(theirs.get({"reset", "th"}), th0));
  EXPECT_TRUE(at::equal(theirs.get({"reset", "thdot"}), thdot0));
  const TensorDict traj = theirs.get_tensordict("traj");
  ExpectSameDict(ours, traj, kTolerance);
}

TEST(PythonReference, EnvsPendulumFollowsTorchRLsTrajectoryUnbatched) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheTrajectoryOfTorchRL({});
}

TEST(PythonReference, EnvsPendulumFollowsTorchRLsTrajectoryBatched) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheTrajectoryOfTorchRL({4});
}

// ---- PendulumEnv's seeded resets ----------------------------------------------

// For each batch ([] and [5]) and seed, two resets of TorchRL's
// `PendulumEnv(seed=seed)` (of `gen_params(batch_size=batch)` when
// batched): their "th" and "thdot", flat, as JSON in argv[1].
constexpr const char* kPendulumResets = R"py(
out = []
for batch in ([], [5]):
    for seed in (0, 3, 2024):
        env = PendulumEnv(seed=seed)
        draws = []
        for _ in range(2):
            td = env.reset(env.gen_params(batch_size=batch)) if batch else env.reset()
            draws.append([td["th"].reshape(-1).tolist(), td["thdot"].reshape(-1).tolist()])
        out.append(draws)
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
)py";

std::vector<float> Flat(const at::Tensor& t) {
  const at::Tensor c = t.reshape({-1}).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// TorchRL's PendulumEnv seeds a torch.Generator with the seed as it is
// (`_set_seed`: `rng.manual_seed(seed)`) and draws "th" then "thdot" with
// `torch.rand`; `set_seed(s)` here seeds the same stream, so the draws are
// the same, bit for bit. What differs, inherently, is the seed `set_seed`
// returns for the next env: TorchRL's `seed_generator` hashes the seed with
// numpy's `default_rng`, this library with its own generator, so the envs
// after the first of a SerialEnv draw other states than TorchRL's.
TEST(PythonReference, EnvsSeededPendulumDrawsTorchRLsResets) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyenvs");
  const PyRun run = RunTorchRL(kPendulumResets, {dir / "out.json"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;
  const json theirs = json::parse(ReadFile(dir / "out.json"));
  size_t c = 0;
  for (const std::vector<int64_t>& batch :
       {std::vector<int64_t>{}, std::vector<int64_t>{5}}) {
    for (const uint64_t seed : std::initializer_list<uint64_t>{0, 3, 2024}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", batch of " +
                   std::to_string(batch.size()) + " dims");
      PendulumEnv env(batch);
      env.set_seed(seed);
      ASSERT_LT(c, theirs.size());
      for (size_t r = 0; r < 2; ++r) {
        const TensorDict td = env.reset();
        // JSON holds the float32 values as doubles, exactly.
        const auto th = theirs[c][r][0].get<std::vector<double>>();
        const auto thdot = theirs[c][r][1].get<std::vector<double>>();
        EXPECT_EQ(Flat(td.get("th")), std::vector<float>(th.begin(), th.end()))
            << "reset " << r;
        EXPECT_EQ(Flat(td.get("thdot")),
                  std::vector<float>(thdot.begin(), thdot.end()))
            << "reset " << r;
      }
      ++c;
    }
  }
}

// ---- rollout ------------------------------------------------------------------

// The policy of both sides: a torque from "th" and "thdot", clipped.
at::Tensor PolicyTorque(const at::Tensor& th, const at::Tensor& thdot) {
  return (2.0 * th.cos() * thdot).clamp(-2.0, 2.0).unsqueeze(-1);
}

TensorDictModule Policy() {
  return TensorDictModule(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {PolicyTorque(in[0], in[1])};
      },
      {"th", "thdot"}, {"action"});
}

// TorchRL's `policy`: PolicyTorque's as a TensorDictModule.
constexpr const char* kPolicy = R"py(
policy = TensorDictModule(
    lambda th, thdot: (2.0 * th.cos() * thdot).clamp(-2.0, 2.0).unsqueeze(-1),
    in_keys=["th", "thdot"], out_keys=["action"])
)py";

// TorchRL's rollout of argv[2] steps of its PendulumEnv with `policy`, from
// the first step's input in argv[1] (auto_reset=False,
// break_when_any_done=False); writes the result to argv[3].
constexpr const char* kPendulumRollout = R"py(
init = TensorDict.load_memmap(sys.argv[1]).to_tensordict()
env = PendulumEnv()
data = env.rollout(int(sys.argv[2]), policy, auto_reset=False, tensordict=init,
                   break_when_any_done=False)
data.memmap(sys.argv[3])
)py";

// rollout of our PendulumEnv and of TorchRL's, from one state with one
// policy: the same leaf keys, shapes and dtypes, the batch `[*batch, T]`,
// equal done and terminated flags (all false: the pendulum never ends) and
// the values within kTolerance.
void ExpectTheRolloutOfTorchRL(const std::vector<int64_t>& batch) {
  SCOPED_TRACE("batch of " + std::to_string(batch.size()) + " dims");
  constexpr int64_t kSteps = 200;
  TempDir dir("td_pyenvs");
  PendulumEnv env(batch);
  env.set_seed(5);
  const TensorDict init = env.reset();
  (void)init.memmap(dir / "init");
  const PyRun run =
      RunTorchRL(std::string(kPolicy) + kPendulumRollout,
                 {dir / "init", std::to_string(kSteps), dir / "out"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

  const TensorDict ours = env.rollout(
      kSteps, Policy(),
      RolloutOptions().auto_reset(false).tensordict(init).break_when_any_done(
          false));
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  std::vector<int64_t> layout = batch;
  layout.push_back(kSteps);
  EXPECT_EQ(theirs.batch_size().vec(), layout);
  ExpectSameDict(ours, theirs, kTolerance);
  for (const char* flag : {"done", "terminated"}) {
    EXPECT_FALSE(ours.get(flag).any().item<bool>()) << flag;
    EXPECT_FALSE(ours.get({"next", flag}).any().item<bool>()) << flag;
  }
}

TEST(PythonReference, EnvsRolloutMatchesTorchRLsKeysLayoutAndFlagsUnbatched) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheRolloutOfTorchRL({});
}

TEST(PythonReference, EnvsRolloutMatchesTorchRLsKeysLayoutAndFlagsBatched) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheRolloutOfTorchRL({3});
}

// TorchRL's rollout of argv[1] steps of its PendulumEnv with
// StepCounter(max_steps=50), seeded 5, with `policy`, resets on the way
// (break_when_any_done=False); to argv[2].
constexpr const char* kStepCounterRollout = R"py(
from torchrl.envs import StepCounter, TransformedEnv
env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=50))
env.set_seed(5)
data = env.rollout(int(sys.argv[1]), policy, break_when_any_done=False)
data.contiguous().memmap(sys.argv[2])
)py";

// The same with StepCounter(50): the truncations reset the pendulum on the
// way, from the seeded stream of both sides (unbatched: TorchRL's
// transforms' specs do not follow a batch of states through PendulumEnv).
TEST(PythonReference, EnvsRolloutWithStepCounterMatchesTorchRLsTruncations) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  constexpr int64_t kSteps = 200;
  TempDir dir("td_pyenvs");
  const PyRun run = RunTorchRL(std::string(kPolicy) + kStepCounterRollout,
                               {std::to_string(kSteps), dir / "out"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;

  TransformedEnv env(std::make_unique<PendulumEnv>(),
                     std::make_shared<StepCounter>(50));
  env.set_seed(5);
  const TensorDict ours = env.rollout(
      kSteps, Policy(), RolloutOptions().break_when_any_done(false));
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  EXPECT_EQ(theirs.batch_size().vec(), std::vector<int64_t>({kSteps}));
  ExpectSameDict(ours, theirs, kTolerance);
  // Truncated (and done) at the 50th step of each run, never terminated;
  // the flags at the root are those of the step's input (after the reset).
  const at::Tensor last = at::arange(kSteps).remainder(50) == 49;
  EXPECT_TRUE(at::equal(ours.get({"next", "truncated"}).squeeze(-1), last));
  EXPECT_TRUE(at::equal(ours.get({"next", "done"}).squeeze(-1), last));
  EXPECT_FALSE(ours.get({"next", "terminated"}).any().item<bool>());
  EXPECT_FALSE(ours.get("done").any().item<bool>());
  EXPECT_TRUE(at::equal(ours.get({"next", "step_count"}).squeeze(-1),
                        at::arange(kSteps).remainder(50) + 1));
}

// ---- step_mdp on nested keys --------------------------------------------------

// Two agents' observations ("agents", "obs") [2, 3] and a nested parameter
// ("params", "scale") [2], which is a state as well as an observation (as
// PendulumEnv's "params"); the action ("agents", "action") [2, 3] and the
// reward ("agents", "reward") [2, 1] are nested too. A step: obs = obs *
// scale + action, reward = the sum of the action.
class NestedEnv final : public EnvBase {
 public:
  NestedEnv() : EnvBase({2}) {
    const Composite params({{"scale", Unbounded({2})}}, {2});
    set_observation_spec(
        Composite({{"agents", Composite({{"obs", Unbounded({2, 3})}}, {2})},
                   {"params", params}},
                  {2}));
    set_state_spec(Composite({{"params", params}}, {2}));
    set_action_spec(Composite(
        {{"agents", Composite({{"action", Unbounded({2, 3})}}, {2})}}, {2}));
    set_reward_spec(Composite(
        {{"agents", Composite({{"reward", Unbounded({2, 1})}}, {2})}}, {2}));
  }
  [[nodiscard]] std::string name() const override { return "NestedEnv"; }

 protected:
  void reset_impl(const TensorDict& td) override {
    const at::Tensor rows = td.contains("_reset")
                                ? td.get("_reset").reshape({2})
                                : at::ones({2}, at::kBool);
    const at::Tensor obs = td.get({"agents", "obs"});
    obs.copy_(at::where(rows.unsqueeze(-1),
                        at::arange(6, at::kFloat).view({2, 3}), obs));
    const at::Tensor scale = td.get({"params", "scale"});
    scale.copy_(at::where(rows, at::tensor({0.5F, 2.0F}), scale));
  }
  void step_impl(const TensorDict& td, const TensorDict& next) override {
    const at::Tensor action = td.get({"agents", "action"});
    const at::Tensor scale = td.get({"params", "scale"});
    next.get({"agents", "obs"})
        .copy_(td.get({"agents", "obs"}) * scale.unsqueeze(-1) + action);
    next.get({"agents", "reward"}).copy_(action.sum(-1, true));
    next.get({"params", "scale"}).copy_(scale);
  }
  void set_seed_impl(uint64_t /*seed*/) override {}
};

// TorchRL's NestedEnv. Reads the dict our env stepped (argv[1]) and writes
// to argv[2], each [2]: "env", TorchRL's `env.step_mdp` of it; "fn",
// `torchrl.envs.utils.step_mdp` of it with the env's keys and
// exclude_action=False (what env.step_mdp does); "stepped", TorchRL's own
// step from its reset with the same action and extra keys.
constexpr const char* kNestedStepMdp = R"py(
from torchrl.data import Composite, Unbounded
from torchrl.envs.utils import step_mdp

class NestedEnv(EnvBase):
    def __init__(self):
        super().__init__(batch_size=[2])
        params = Composite(scale=Unbounded(shape=(2,)), shape=(2,))
        self.observation_spec = Composite(
            agents=Composite(obs=Unbounded(shape=(2, 3)), shape=(2,)),
            params=params, shape=(2,))
        self.state_spec = Composite(params=params.clone(), shape=(2,))
        self.action_spec = Composite(
            agents=Composite(action=Unbounded(shape=(2, 3)), shape=(2,)), shape=(2,))
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded(shape=(2, 1)), shape=(2,)), shape=(2,))

    def _reset(self, td, **kwargs):
        return TensorDict({"agents": {"obs": torch.arange(6.0).view(2, 3)},
                           "params": {"scale": torch.tensor([0.5, 2.0])}}, [2])

    def _step(self, td):
        action = td["agents", "action"]
        scale = td["params", "scale"]
        return TensorDict(
            {"agents": {"obs": td["agents", "obs"] * scale.unsqueeze(-1) + action,
                        "reward": action.sum(-1, keepdim=True)},
             "params": {"scale": scale.clone()},
             "done": torch.zeros(2, 1, dtype=torch.bool),
             "terminated": torch.zeros(2, 1, dtype=torch.bool)}, [2])

    def _set_seed(self, seed):
        pass

env = NestedEnv()
td = TensorDict.load_memmap(sys.argv[1]).to_tensordict()
own = env.reset()
for key in (("agents", "action"), ("agents", "extra"), "other"):
    own[key] = td[key].clone()
own = env.step(own)
fn = step_mdp(td, exclude_action=False, reward_keys=env.reward_keys,
              done_keys=env.done_keys, action_keys=env.action_keys)
TensorDict({"env": env.step_mdp(td), "fn": fn, "stepped": own}, [2]).memmap(sys.argv[2])
)py";

TEST(PythonReference, EnvsStepMdpMatchesTorchRLsOnNestedKeys) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyenvs");
  NestedEnv env;
  TensorDict td = env.reset();
  td.set({"agents", "action"},
         at::tensor({1.0F, -1.0F, 0.5F, 2.0F, 0.0F, -2.0F}).view({2, 3}));
  // Keys that no spec names, at the root and nested: step_mdp keeps them.
  td.set({"agents", "extra"}, at::ones({2, 1}));
  td.set("other", at::full({2}, 7.0F));
  env.step(td);
  (void)td.memmap(dir / "stepped");
  const PyRun run = RunTorchRL(kNestedStepMdp, {dir / "stepped", dir / "out"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  {
    SCOPED_TRACE("the stepped dicts");
    ExpectSameDict(td, theirs.get_tensordict("stepped"), 0.0);
  }
  const TensorDict ours = env.step_mdp(td);
  for (const char* which : {"env", "fn"}) {
    SCOPED_TRACE(which);
    ExpectSameDict(ours, theirs.get_tensordict(which), 0.0);
  }
  EXPECT_EQ(LeafKeys(ours), std::set<std::string>(
                                {"done", "terminated", "other",
                                 "('agents', 'action')", "('agents', 'extra')",
                                 "('agents', 'obs')", "('params', 'scale')"}));
}

}  // namespace
