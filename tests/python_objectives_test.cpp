// The losses against TorchRL 0.14 (python_reference.h): ClipPPOLoss with a
// categorical and a TanhNormal actor (its sampled entropy drawn from the
// same seed), and DQNLoss (plain, double, one-hot, weighted), on the same
// weights and batches; the outputs, the priorities and the gradients of the
// summed losses. The data goes both ways as memmap directories (exact
// float32 bits).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/objectives.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "python_reference.h"
#include "test_paths.h"

using tensordict::ClipPPOLoss;
using tensordict::ClipPPOLossOptions;
using tensordict::DistanceLoss;
using tensordict::DQNActionSpace;
using tensordict::DQNLoss;
using tensordict::DQNLossOptions;
using tensordict::NestedKey;
using tensordict::ProbabilisticOptions;
using tensordict::ProbabilisticTensorDictModule;
using tensordict::ProbabilisticTensorDictSequential;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::ValueEstimator;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

constexpr int64_t kB = 16;
constexpr int64_t kObs = 5;
constexpr int64_t kActions = 3;
constexpr uint64_t kEntropySeed = 1234;

// argv[1]: the inputs (memmap); argv[2]: where TorchRL's results go.
constexpr const char* kScript = R"py(
import sys, torch
import torch.nn.functional as F
from torch import nn
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.modules import ProbabilisticActor, ValueOperator, TanhNormal, QValueActor
from torchrl.objectives import ClipPPOLoss, DQNLoss, ValueEstimators

inp = TensorDict.load_memmap(sys.argv[1]).clone()

def linear(w):
    lin = nn.Linear(w["weight"].shape[1], w["weight"].shape[0])
    with torch.no_grad():
        lin.weight.copy_(w["weight"]); lin.bias.copy_(w["bias"])
    return lin

class Head(nn.Module):  # loc, softplus(.) + 0.1
    def __init__(self, lin):
        super().__init__(); self.lin = lin
    def forward(self, x):
        loc, s = self.lin(x).chunk(2, -1)
        return loc, F.softplus(s) + 0.1

def ppo(case, continuous, **kw):
    x = inp[case]
    actor_net, critic_net = linear(x["actor"]), linear(x["critic"])
    if continuous:
        module = TensorDictModule(Head(actor_net), ["observation"], ["loc", "scale"])
        actor = ProbabilisticActor(module, in_keys=["loc", "scale"], out_keys=["action"],
                                   distribution_class=TanhNormal, return_log_prob=True)
    else:
        module = TensorDictModule(actor_net, ["observation"], ["logits"])
        actor = ProbabilisticActor(module, in_keys=["logits"], out_keys=["action"],
                                   distribution_class=torch.distributions.Categorical,
                                   return_log_prob=True)
    critic = ValueOperator(critic_net, in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic, functional=False, **kw)
    loss.set_keys(sample_log_prob="sample_log_prob", action="action")
    torch.manual_seed(int(x["seed"]))
    res = loss(x["batch"])
    total = sum(v for k, v in res.items() if k.startswith("loss"))
    total.sum().backward()
    o = {k: v.detach() for k, v in res.items()}
    o["grad"] = {"actor_weight": actor_net.weight.grad, "actor_bias": actor_net.bias.grad,
                 "critic_weight": critic_net.weight.grad, "critic_bias": critic_net.bias.grad}
    return o

def dqn(case, space, **kw):
    x = inp[case]
    actor = QValueActor(linear(x["online"]), in_keys=["observation"], action_space=space)
    loss = DQNLoss(actor, action_space=space, **kw)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    if kw.get("delay_value", True):
        tgt = loss.target_value_network_params.flatten_keys(".")
        for k in tgt.keys():
            tgt[k].data.copy_(x["target"][k.split(".")[-1]])
    batch = x["batch"]
    res = loss(batch)
    res["loss"].backward()
    params = loss.value_network_params.flatten_keys(".")
    grads = {k.split(".")[-1]: params[k].grad for k in params.keys()}
    return {"loss": res["loss"].detach(), "td_error": batch["td_error"],
            "grad": {"weight": grads["weight"], "bias": grads["bias"]}}

out = {
    "ppo_a": ppo("ppo_a", False, critic_coeff=0.5, loss_critic_type="l2",
                 normalize_advantage=True),
    "ppo_b": ppo("ppo_b", False, clip_value=0.1, reduction="sum"),
    "ppo_c": ppo("ppo_c", True, entropy_coeff=0.05, samples_mc_entropy=3),
    "dqn_a": dqn("dqn_a", "categorical"),
    "dqn_b": dqn("dqn_b", "categorical", double_dqn=True, loss_function="smooth_l1"),
    "dqn_c": dqn("dqn_c", "one-hot"),
}
TensorDict(out, []).memmap(sys.argv[2])
)py";

at::Generator Gen(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

// A Linear's weights as {"weight", "bias"} (the values Python copies in).
TensorDict Weights(const torch::nn::Linear& lin) {
  return TensorDict({{"weight", lin->weight.detach().clone()},
                     {"bias", lin->bias.detach().clone()}},
                    {});
}

torch::nn::Linear SeededLinear(int64_t in, int64_t out, uint64_t seed) {
  torch::nn::Linear lin(in, out);
  at::Generator gen = Gen(seed);
  torch::NoGradGuard no_grad;
  lin->weight.copy_(at::randn({out, in}, gen) * 0.4);
  lin->bias.copy_(at::randn({out}, gen) * 0.1);
  return lin;
}

struct PpoCase {
  torch::nn::Linear actor_net;
  torch::nn::Linear critic_net;
  ProbabilisticTensorDictSequential actor;
  TensorDictModule critic;
  TensorDict batch;
};

PpoCase MakePpo(bool continuous, uint64_t seed) {
  torch::nn::Linear actor_net =
      SeededLinear(kObs, continuous ? 2 * kActions : kActions, seed);
  torch::nn::Linear critic_net = SeededLinear(kObs, 1, seed + 1);
  TensorDictModule head =
      continuous
          ? TensorDictModule(
                [net = actor_net](const std::vector<at::Tensor>& in) mutable
                -> std::vector<at::Tensor> {
                  const std::vector<at::Tensor> h =
                      net->forward(in[0]).chunk(2, -1);
                  return {h[0], at::softplus(h[1]) + 0.1};
                },
                {"observation"}, {"loc", "scale"})
          : TensorDictModule(actor_net, {"observation"}, {"logits"});
  ProbabilisticTensorDictSequential actor(
      {head}, ProbabilisticTensorDictModule(
                  continuous ? std::vector<NestedKey>{"loc", "scale"}
                             : std::vector<NestedKey>{"logits"},
                  {"action"},
                  continuous ? tensordict::distributions::tanh_normal()
                             : tensordict::distributions::categorical(),
                  ProbabilisticOptions().return_log_prob(true).log_prob_key(
                      "sample_log_prob")));
  at::Generator gen = Gen(seed + 2);
  const at::Tensor obs = at::randn({kB, kObs}, gen);
  const at::Tensor action = continuous
                                ? at::tanh(at::randn({kB, kActions}, gen)) * 0.9
                                : at::randint(kActions, {kB}, gen);
  at::Tensor stored;
  {
    torch::NoGradGuard no_grad;
    const TensorDict probe({{"observation", obs}, {"action", action}}, {kB});
    stored = actor.log_prob(probe) + at::randn({kB}, gen) * 0.3;
  }
  const at::Tensor target = at::randn({kB, 1}, gen);
  TensorDict batch({{"observation", obs},
                    {"action", action},
                    {"sample_log_prob", stored},
                    {"advantage", at::randn({kB, 1}, gen)},
                    {"value_target", target},
                    {"state_value", target + at::randn({kB, 1}, gen) * 0.3}},
                   {kB});
  TensorDictModule critic(critic_net, {"observation"}, {"state_value"});
  return {actor_net, critic_net, actor, critic, batch};
}

struct DqnCase {
  torch::nn::Linear online;
  torch::nn::Linear target;
  TensorDict batch;
};

DqnCase MakeDqn(bool one_hot, uint64_t seed) {
  DqnCase c{SeededLinear(kObs, kActions, seed),
            SeededLinear(kObs, kActions, seed + 1), TensorDict()};
  at::Generator gen = Gen(seed + 2);
  const at::Tensor action = at::randint(kActions, {kB}, gen);
  const at::Tensor done = at::rand({kB, 1}, gen) < 0.3;
  c.batch =
      TensorDict({{"observation", at::randn({kB, kObs}, gen)},
                  {"action", one_hot ? at::one_hot(action, kActions) : action},
                  {{"next", "observation"}, at::randn({kB, kObs}, gen)},
                  {{"next", "reward"}, at::randn({kB, 1}, gen)},
                  {{"next", "done"}, done},
                  {{"next", "terminated"},
                   done.logical_and(at::rand({kB, 1}, gen) < 0.5)}},
                 {kB});
  return c;
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want,
                 const std::string& what) {
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(got.to(at::kFloat).allclose(want.to(at::kFloat), 1e-5, 1e-5))
      << what << ": max difference "
      << (got.to(at::kDouble) - want.to(at::kDouble))
             .abs()
             .max()
             .item<double>();
}

// Every output TorchRL gave, and no other (the order is TorchRL's too:
// objectives_test.cpp).
void ExpectSameOutputs(const TensorDict& got, const TensorDict& want) {
  std::vector<NestedKey> keys = want.keys();
  keys.erase(std::remove(keys.begin(), keys.end(), NestedKey("grad")),
             keys.end());
  std::vector<NestedKey> have = got.keys();
  std::sort(keys.begin(), keys.end());
  std::sort(have.begin(), have.end());
  EXPECT_EQ(have, keys);
  for (const NestedKey& key : keys) {
    if (got.contains(key)) ExpectClose(got.get(key), want.get(key), key.str());
  }
}

}  // namespace

TEST(PythonReference, LossesMatchTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 14)) {
    GTEST_SKIP() << "the losses are checked against TorchRL 0.14 (CI's "
                    "Python 0.14 stage)";
  }
  PpoCase ppo_a = MakePpo(false, 10);
  PpoCase ppo_b = MakePpo(false, 20);
  ppo_b.batch.set("shifted_valid", at::rand({kB}, Gen(29)) < 0.8);
  PpoCase ppo_c = MakePpo(true, 30);
  DqnCase dqn_a = MakeDqn(false, 40);
  DqnCase dqn_b = MakeDqn(false, 50);
  DqnCase dqn_c = MakeDqn(true, 60);
  dqn_c.batch.set("priority_weight", at::rand({kB}, Gen(69)) + 0.5);

  TensorDict in;
  for (const auto& [name, c] :
       {std::pair<const char*, PpoCase*>{"ppo_a", &ppo_a},
        std::pair<const char*, PpoCase*>{"ppo_b", &ppo_b},
        std::pair<const char*, PpoCase*>{"ppo_c", &ppo_c}}) {
    in.set({name, "actor"}, Weights(c->actor_net));
    in.set({name, "critic"}, Weights(c->critic_net));
    in.set({name, "batch"}, c->batch.clone());
    in.set({name, "seed"},
           at::tensor(static_cast<int64_t>(kEntropySeed), at::kLong));
  }
  for (const auto& [name, c] :
       {std::pair<const char*, DqnCase*>{"dqn_a", &dqn_a},
        std::pair<const char*, DqnCase*>{"dqn_b", &dqn_b},
        std::pair<const char*, DqnCase*>{"dqn_c", &dqn_c}}) {
    in.set({name, "online"}, Weights(c->online));
    in.set({name, "target"}, Weights(c->target));
    in.set({name, "batch"}, c->batch.clone());
  }
  TempDir dir("td_losses");
  in.memmap_(dir / "in");
  ASSERT_TRUE(RunPython(kScript, {dir / "in", dir / "out"}));
  const TensorDict py = TensorDict::load_memmap(dir / "out");

  // PPO.
  const std::pair<const char*, ClipPPOLossOptions> ppo_cases[] = {
      {"ppo_a", ClipPPOLossOptions()
                    .critic_coeff(0.5)
                    .loss_critic_type(DistanceLoss::L2)
                    .normalize_advantage(true)},
      {"ppo_b",
       ClipPPOLossOptions().clip_value(0.1).reduction(at::Reduction::Sum)},
      {"ppo_c", ClipPPOLossOptions().entropy_coeff(0.05).samples_mc_entropy(3)},
  };
  for (const auto& [name, options] : ppo_cases) {
    SCOPED_TRACE(name);
    PpoCase& c = std::string(name) == "ppo_a"   ? ppo_a
                 : std::string(name) == "ppo_b" ? ppo_b
                                                : ppo_c;
    const TensorDict want = py.get_tensordict(name);
    ClipPPOLossOptions o = options;
    o.generator(Gen(kEntropySeed));
    const TensorDict got = ClipPPOLoss(c.actor, c.critic, o)(c.batch);
    ExpectSameOutputs(got, want);
    tensordict::total_loss(got).sum().backward();
    ExpectClose(c.actor_net->weight.grad(), want.get({"grad", "actor_weight"}),
                "actor weight grad");
    ExpectClose(c.actor_net->bias.grad(), want.get({"grad", "actor_bias"}),
                "actor bias grad");
    ExpectClose(c.critic_net->weight.grad(),
                want.get({"grad", "critic_weight"}), "critic weight grad");
    ExpectClose(c.critic_net->bias.grad(), want.get({"grad", "critic_bias"}),
                "critic bias grad");
  }

  // DQN: TD(0) with gamma 0.9; the target network's own weights.
  const std::pair<const char*, DQNLossOptions> dqn_cases[] = {
      {"dqn_a", DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL)},
      {"dqn_b", DQNLossOptions()
                    .action_space(DQNActionSpace::CATEGORICAL)
                    .double_dqn(true)
                    .loss_function(DistanceLoss::SMOOTH_L1)},
      {"dqn_c", DQNLossOptions()},
  };
  for (const auto& [name, options] : dqn_cases) {
    SCOPED_TRACE(name);
    DqnCase& c = std::string(name) == "dqn_a"   ? dqn_a
                 : std::string(name) == "dqn_b" ? dqn_b
                                                : dqn_c;
    const TensorDict want = py.get_tensordict(name);
    const TensorDictModule online(c.online, {"observation"}, {"action_value"});
    const TensorDictModule target(c.target, {"observation"}, {"action_value"});
    const at::Tensor target_weight = c.target->weight.detach().clone();
    const at::Tensor target_bias = c.target->bias.detach().clone();
    DQNLossOptions o = options;
    o.value_estimator(ValueEstimator::td0(0.9));
    const DQNLoss loss(online, target, o);
    {  // TorchRL's target starts as a copy too; the test gives it its own.
      torch::NoGradGuard no_grad;
      c.target->weight.copy_(target_weight);
      c.target->bias.copy_(target_bias);
    }
    const TensorDict got = loss(c.batch);
    ExpectClose(got.get("loss"), want.get("loss"), "loss");
    ExpectClose(c.batch.get("td_error"), want.get("td_error"), "td_error");
    got.get("loss").backward();
    ExpectClose(c.online->weight.grad(), want.get({"grad", "weight"}),
                "weight grad");
    ExpectClose(c.online->bias.grad(), want.get({"grad", "bias"}), "bias grad");
  }
}
