// The return estimators against TorchRL 0.14 (python_reference.h): the
// functions of torchrl.objectives.value.functional, the estimator modules
// (value_network=None, values already in the data), MultiStep and
// MultiStepTransform (the rollout cut into batches), on the
// same random episodes with mid-rollout terminations and truncations, with
// batch dims and a time dim that is not the last. The data goes both ways
// as memmap directories (exact float32 bits).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/multi_step.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "python_reference.h"
#include "test_paths.h"

using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict::ValueEstimator;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

constexpr double kGamma = 0.95;
constexpr double kLambda = 0.9;

// argv[1]: the inputs (memmap); argv[2]: where TorchRL's results go.
constexpr const char* kScript = R"py(
import sys, torch
from tensordict import TensorDict
import torchrl.objectives.value.functional as F
from torchrl.objectives.value import TD0Estimator, TD1Estimator, TDLambdaEstimator, GAE
from torchrl.data.postprocs import MultiStep

G, L = 0.95, 0.9
inp = TensorDict.load_memmap(sys.argv[1])
out = {}
for case, time_dim in (("a", -2), ("b", 1)):
    x = inp[case]
    r, v, nv = x["reward"], x["value"], x["next_value"]
    d, t = x["done"], x["terminated"]
    o = {}
    o["gae_advantage"], o["gae_target"] = F.generalized_advantage_estimate(
        G, L, v, nv, r, d, t, time_dim=time_dim)
    o["td0"] = F.td0_return_estimate(G, nv, r, t)
    o["td1"] = F.td1_return_estimate(G, nv, r, d, t, time_dim=time_dim)
    o["td_lambda"] = F.td_lambda_return_estimate(G, L, nv, r, d, t, time_dim=time_dim)
    o["vec_td_lambda"] = F.vec_td_lambda_return_estimate(G, L, nv, r, d, t, time_dim=time_dim)
    o["reward2go"] = F.reward2go(r, d, G, time_dim=time_dim)
    # One discount (and lambda) per step.
    gs, ls = x["gammas"], x["lambdas"]
    o["td0_steps"] = F.td0_return_estimate(gs, nv, r, t)
    o["td1_steps"] = F.td1_return_estimate(gs, nv, r, d, t, time_dim=time_dim)
    o["td_lambda_steps"] = F.td_lambda_return_estimate(
        gs, ls, nv, r, d, t, time_dim=time_dim)
    if time_dim == -2:  # one discount per env, broadcast over time
        o["td_lambda_per_env"] = F.td_lambda_return_estimate(
            gs[:, :1], torch.tensor(L), nv, r, d, t)
    if time_dim == -2:  # vtrace_advantage_estimate indexes time at -2
        o["vtrace_advantage"], o["vtrace_target"] = F.vtrace_advantage_estimate(
            G, x["log_pi"], x["log_mu"], v, nv, r, d, t, rho_thresh=1.0, c_thresh=0.8)
    out[case] = o

# The modules, on a [3, 40] batch (time the last batch dim).
x = inp["a"]
batch = TensorDict({"state_value": x["value"],
                    "next": {"state_value": x["next_value"], "reward": x["reward"],
                             "done": x["done"], "terminated": x["terminated"]}}, [3, 40])
mods = {"td0": TD0Estimator(gamma=G, value_network=None),
        "td1": TD1Estimator(gamma=G, value_network=None),
        "td_lambda": TDLambdaEstimator(gamma=G, lmbda=L, value_network=None),
        "gae": GAE(gamma=G, lmbda=L, value_network=None)}
out["modules"] = {}
for name, m in mods.items():
    y = m(batch.clone())
    out["modules"][name] = {"advantage": y["advantage"], "value_target": y["value_target"]}

# MultiStep on a [3, 40] rollout.
ms = MultiStep(G, 4)(TensorDict({"obs": x["obs"], "next": {"obs": x["next_obs"],
    "reward": x["reward"], "done": x["done"], "terminated": x["terminated"]}}, [3, 40]))
out["multi_step"] = {"reward": ms["next", "reward"], "obs": ms["next", "obs"],
                     "original_reward": ms["next", "original_reward"],
                     "steps_to_next_obs": ms["steps_to_next_obs"],
                     "gamma": ms["gamma"], "nonterminal": ms["nonterminal"]}

# MultiStepTransform over the same rollout cut into batches of 7, 5, 13, 15.
from torchrl.envs.transforms import MultiStepTransform
roll = TensorDict({"obs": x["obs"], "next": {"obs": x["next_obs"], "reward": x["reward"],
                   "done": x["done"], "terminated": x["terminated"]}}, [3, 40])
msf = MultiStepTransform(4, G)
parts = [msf.inv(roll[:, a:b]) for a, b in ((0, 7), (7, 12), (12, 25), (25, 40))]
mst = torch.cat(parts, -1)
out["multi_step_transform"] = {"reward": mst["next", "reward"], "obs": mst["next", "obs"],
                               "original_reward": mst["next", "original_reward"],
                               "steps_to_next_obs": mst["steps_to_next_obs"],
                               "gamma": mst["gamma"], "nonterminal": mst["nonterminal"]}
TensorDict(out, []).clone().memmap(sys.argv[2])
)py";

struct Case {
  at::Tensor reward, value, next_value, done, terminated, log_pi, log_mu;
  at::Tensor gammas, lambdas;  // one per step, in [0.8, 1) and [0, 1)
};

// Random float32 episodes: about 15% of steps end one, half of those by
// truncation.
Case MakeCase(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Case c;
  c.reward = at::randn(shape, gen);
  c.value = at::randn(shape, gen);
  c.next_value = at::randn(shape, gen);
  c.done = at::rand(shape, gen) < 0.15;
  c.terminated = c.done.logical_and(at::rand(shape, gen) < 0.5);
  c.log_pi = at::randn(shape, gen) * 0.5;
  c.log_mu = at::randn(shape, gen) * 0.5;
  c.gammas = 0.8 + 0.2 * at::rand(shape, gen);
  c.lambdas = at::rand(shape, gen);
  return c;
}

TensorDict ToDict(const Case& c) {
  return TensorDict({{"reward", c.reward},
                     {"value", c.value},
                     {"next_value", c.next_value},
                     {"done", c.done},
                     {"terminated", c.terminated},
                     {"log_pi", c.log_pi},
                     {"log_mu", c.log_mu},
                     {"gammas", c.gammas},
                     {"lambdas", c.lambdas}},
                    {});
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(got.to(at::kFloat).allclose(want.to(at::kFloat), 1e-5, 1e-5))
      << what << ": max difference "
      << (got.to(at::kDouble) - want.to(at::kDouble))
             .abs()
             .max()
             .item<double>();
}

}  // namespace

TEST(PythonReference, ReturnEstimatorsMatchTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 14)) {
    GTEST_SKIP() << "the estimators are checked against TorchRL 0.14 (CI's "
                    "Python 0.14 stage)";
  }
  const Case a = MakeCase({3, 40, 1}, 1);
  const Case b = MakeCase({2, 40, 3, 1}, 2);
  ASSERT_GT(
      a.done.logical_and(a.terminated.logical_not()).sum().item<int64_t>(), 3);
  TensorDict in;
  in.set("a", ToDict(a));
  in.set("b", ToDict(b));
  in.set({"a", "obs"}, at::arange(120, at::kFloat).reshape({3, 40, 1}));
  in.set({"a", "next_obs"}, at::arange(1, 121, at::kFloat).reshape({3, 40, 1}));
  TempDir dir("td_returns");
  in.memmap_(dir / "in");
  ASSERT_TRUE(RunPython(kScript, {dir / "in", dir / "out"}));
  const TensorDict py = TensorDict::load_memmap(dir / "out");

  for (const auto& [name, c, time_dim] :
       {std::tuple<std::string, const Case&, int64_t>{"a", a, -2},
        std::tuple<std::string, const Case&, int64_t>{"b", b, 1}}) {
    SCOPED_TRACE("case " + name + ", time_dim " + std::to_string(time_dim));
    const TensorDict o = py.get_tensordict(name);
    const auto g = tensordict::gae(c.reward, c.value, c.next_value, c.done,
                                   c.terminated, kGamma, kLambda, time_dim);
    ExpectClose(g.advantage, o.get("gae_advantage"), "gae advantage");
    ExpectClose(g.value_target, o.get("gae_target"), "gae value target");
    ExpectClose(
        tensordict::td0_return(kGamma, c.next_value, c.reward, c.terminated),
        o.get("td0"), "td0_return");
    ExpectClose(tensordict::td1_return(kGamma, c.next_value, c.reward, c.done,
                                       c.terminated, time_dim),
                o.get("td1"), "td1_return");
    const at::Tensor lambda =
        tensordict::td_lambda_return(kGamma, kLambda, c.next_value, c.reward,
                                     c.done, c.terminated, time_dim);
    ExpectClose(lambda, o.get("td_lambda"), "td_lambda_return");
    ExpectClose(lambda, o.get("vec_td_lambda"), "vec_td_lambda_return");
    ExpectClose(tensordict::reward_to_go(c.reward, c.done, kGamma, time_dim),
                o.get("reward2go"), "reward_to_go");
    ExpectClose(
        tensordict::td0_return(c.gammas, c.next_value, c.reward, c.terminated),
        o.get("td0_steps"), "td0_return, a discount per step");
    ExpectClose(tensordict::td1_return(c.gammas, c.next_value, c.reward, c.done,
                                       c.terminated, time_dim),
                o.get("td1_steps"), "td1_return, a discount per step");
    ExpectClose(
        tensordict::td_lambda_return(c.gammas, c.lambdas, c.next_value,
                                     c.reward, c.done, c.terminated, time_dim),
        o.get("td_lambda_steps"),
        "td_lambda_return, gamma and lambda per step");
  }
  ExpectClose(tensordict::td_lambda_return(
                  a.gammas.narrow(1, 0, 1), at::scalar_tensor(kLambda),
                  a.next_value, a.reward, a.done, a.terminated),
              py.get({"a", "td_lambda_per_env"}),
              "td_lambda_return, a discount per env");

  // V-trace: the targets everywhere; the advantages everywhere but at a
  // truncation inside the window, where TorchRL bootstraps from the next
  // episode's first v_s and this from the step's own next value.
  const auto vt =
      tensordict::vtrace(kGamma, a.log_pi, a.log_mu, a.value, a.next_value,
                         a.reward, a.done, a.terminated, 1.0, 0.8);
  const TensorDict o = py.get_tensordict("a");
  ExpectClose(vt.value_target, o.get("vtrace_target"), "vtrace value target");
  at::Tensor inside = a.done.logical_and(a.terminated.logical_not());
  inside.narrow(1, 39, 1).fill_(false);
  const at::Tensor rho = at::exp(a.log_pi - a.log_mu).clamp_max(1.0);
  const at::Tensor own = rho * (a.reward + kGamma * a.next_value - a.value);
  ExpectClose(vt.advantage, at::where(inside, own, o.get("vtrace_advantage")),
              "vtrace advantage");
  EXPECT_FALSE(vt.advantage.allclose(o.get("vtrace_advantage"), 1e-5, 1e-5));

  // The modules.
  const TensorDict batch({{"state_value", a.value},
                          {{"next", "state_value"}, a.next_value},
                          {{"next", "reward"}, a.reward},
                          {{"next", "done"}, a.done},
                          {{"next", "terminated"}, a.terminated}},
                         {3, 40});
  const std::pair<const char*, ValueEstimator> modules[] = {
      {"td0", ValueEstimator::td0(kGamma)},
      {"td1", ValueEstimator::td1(kGamma)},
      {"td_lambda", ValueEstimator::td_lambda(kGamma, kLambda)},
      {"gae", ValueEstimator::gae(kGamma, kLambda)}};
  for (const auto& [name, estimator] : modules) {
    SCOPED_TRACE(estimator.name());
    const TensorDict got = estimator(batch.copy());
    const TensorDict want = py.get_tensordict({"modules", name});
    ExpectClose(got.get("advantage"), want.get("advantage"), "advantage");
    ExpectClose(got.get("value_target"), want.get("value_target"),
                "value target");
  }

  // MultiStep: everything but the flags, which are the window's last step's
  // here and step t's own in TorchRL.
  const TensorDict rollout({{"obs", in.get({"a", "obs"})},
                            {{"next", "obs"}, in.get({"a", "next_obs"})},
                            {{"next", "reward"}, a.reward},
                            {{"next", "done"}, a.done},
                            {{"next", "terminated"}, a.terminated}},
                           {3, 40});
  const TensorDict ms = tensordict::multi_step(rollout, 4, kGamma);
  const TensorDict want = py.get_tensordict("multi_step");
  ExpectClose(ms.get({"next", "reward"}), want.get("reward"), "reward");
  EXPECT_TRUE(ms.get({"next", "obs"}).equal(want.get("obs")));
  EXPECT_TRUE(
      ms.get({"next", "original_reward"}).equal(want.get("original_reward")));
  EXPECT_TRUE(ms.get("steps_to_next_obs").equal(want.get("steps_to_next_obs")));
  ExpectClose(ms.get("gamma"), want.get("gamma"), "gamma");
  EXPECT_TRUE(ms.get("nonterminal").equal(want.get("nonterminal")));
  const at::Tensor last =
      (at::arange(40).expand({3, 40}) + ms.get("steps_to_next_obs") - 1)
          .unsqueeze(-1);
  EXPECT_TRUE(ms.get({"next", "done"}).equal(a.done.gather(1, last)));
  EXPECT_TRUE(
      ms.get({"next", "terminated"}).equal(a.terminated.gather(1, last)));

  // MultiStepTransform: the same rollout in batches of 7, 5, 13 and 15;
  // every step but the last 4 comes out once, with its whole window.
  tensordict::MultiStepTransform transform(4, kGamma);
  std::vector<TensorDict> parts;
  for (const auto& [from, to] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 7}, {7, 12}, {12, 25}, {25, 40}}) {
    parts.push_back(transform(
        rollout.index({at::indexing::Slice(), at::indexing::Slice(from, to)})));
  }
  const TensorDict mst = tensordict::cat(parts, 1);
  const TensorDict want_t = py.get_tensordict("multi_step_transform");
  ASSERT_EQ(mst.batch_size().vec(), std::vector<int64_t>({3, 36}));
  ExpectClose(mst.get({"next", "reward"}), want_t.get("reward"),
              "transform reward");
  EXPECT_TRUE(mst.get({"next", "obs"}).equal(want_t.get("obs")));
  EXPECT_TRUE(mst.get({"next", "original_reward"})
                  .equal(want_t.get("original_reward")));
  EXPECT_TRUE(
      mst.get("steps_to_next_obs").equal(want_t.get("steps_to_next_obs")));
  ExpectClose(mst.get("gamma"), want_t.get("gamma"), "transform gamma");
  EXPECT_TRUE(mst.get("nonterminal").equal(want_t.get("nonterminal")));
}
