// The losses (tensordict/objectives.h): ClipPPOLoss and DQNLoss against the
// formulas written out here, their shape checks and messages, the batch left
// unchanged, and the target-network updates. TorchRL 0.14 itself checks the
// values in python_objectives_test.cpp.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/objectives.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "test_util.h"

using tensordict::ClipPPOLoss;
using tensordict::ClipPPOLossOptions;
using tensordict::DistanceLoss;
using tensordict::DQNActionSpace;
using tensordict::DQNLoss;
using tensordict::DQNLossOptions;
using tensordict::HardUpdate;
using tensordict::NestedKey;
using tensordict::ProbabilisticOptions;
using tensordict::ProbabilisticTensorDictModule;
using tensordict::ProbabilisticTensorDictSequential;
using tensordict::SoftUpdate;
using tensordict::SoftUpdateOptions;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::ValueEstimator;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;

namespace {

constexpr int64_t kB = 6;
constexpr int64_t kObs = 4;
constexpr int64_t kActions = 3;

// A categorical actor ("observation" -> "logits" -> "action") and a critic
// ("observation" -> "state_value"), seeded.
struct ActorCritic {
  torch::nn::Linear actor_net{kObs, kActions};
  torch::nn::Linear critic_net{kObs, 1};
  ProbabilisticTensorDictSequential actor;
  TensorDictModule critic;

  ActorCritic()
      : actor(make_actor(actor_net)),
        critic(critic_net, {"observation"}, {"state_value"}) {}

  static ProbabilisticTensorDictSequential make_actor(torch::nn::Linear net) {
    torch::manual_seed(0);
    torch::NoGradGuard no_grad;
    net->weight.copy_(torch::randn({kActions, kObs}) * 0.5);
    net->bias.copy_(torch::randn({kActions}) * 0.1);
    return ProbabilisticTensorDictSequential(
        {TensorDictModule(net, {"observation"}, {"logits"})},
        ProbabilisticTensorDictModule(
            {"logits"}, {"action"}, tensordict::distributions::categorical(),
            ProbabilisticOptions().return_log_prob(true).log_prob_key(
                "sample_log_prob")));
  }
};

// A PPO minibatch: observations, actions and their stored log-probabilities
// (perturbed, so that the ratio differs from 1 and some clip), the
// advantage [B, 1] and value target [B, 1].
TensorDict PpoBatch(ActorCritic& ac) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor obs = at::randn({kB, kObs}, gen);
  const at::Tensor action = at::randint(kActions, {kB}, gen);
  at::Tensor stored;
  {
    torch::NoGradGuard no_grad;
    const at::Tensor logits = ac.actor_net->forward(obs);
    stored = at::log_softmax(logits, -1)
                 .gather(-1, action.unsqueeze(-1))
                 .squeeze(-1) +
             at::randn({kB}, gen) * 0.3;
  }
  return TensorDict({{"observation", obs},
                     {"action", action},
                     {"sample_log_prob", stored},
                     {"advantage", at::randn({kB, 1}, gen)},
                     {"value_target", at::randn({kB, 1}, gen)}},
                    {kB});
}

void ExpectClose(const at::Tensor& got, const at::Tensor& want,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(got.allclose(want, 1e-5, 1e-6))
      << what << ": " << got << " vs " << want;
}

}  // namespace

TEST(ClipPPOLoss, MatchesTheClippedObjectiveWrittenOut) {
  ActorCritic ac;
  const TensorDict batch = PpoBatch(ac);
  const ClipPPOLoss loss(
      ac.actor, ac.critic,
      ClipPPOLossOptions().critic_coeff(0.5).loss_critic_type(
          DistanceLoss::L2));
  const TensorDict out = loss(batch);
  EXPECT_EQ(out.keys(),
            (std::vector<NestedKey>{"loss_objective", "clip_fraction",
                                    "kl_approx", "entropy", "loss_entropy",
                                    "loss_critic", "explained_variance", "ESS",
                                    "max_ratio", "mean_ratio"}));

  // The formulas, by hand.
  const at::Tensor logits = ac.actor_net->forward(batch.get("observation"));
  const at::Tensor logp = at::log_softmax(logits, -1);
  const at::Tensor lp =
      logp.gather(-1, batch.get("action").unsqueeze(-1)).squeeze(-1);
  const at::Tensor lw = (lp - batch.get("sample_log_prob")).unsqueeze(-1);
  const at::Tensor adv = batch.get("advantage");
  const at::Tensor w = lw.exp();
  const at::Tensor wc = w.clamp(0.8, 1.2);
  const at::Tensor objective = -at::minimum(w * adv, wc * adv).mean();
  const at::Tensor entropy = -(logp.exp() * logp).sum(-1);
  const at::Tensor value = ac.critic_net->forward(batch.get("observation"));
  const at::Tensor target = batch.get("value_target");
  ExpectClose(out.get("loss_objective"), objective, "loss_objective");
  ExpectClose(out.get("entropy"), entropy.mean().detach(), "entropy");
  ExpectClose(out.get("loss_entropy"), -0.01 * entropy.mean(), "loss_entropy");
  ExpectClose(out.get("loss_critic"), 0.5 * (target - value).pow(2).mean(),
              "loss_critic");
  const at::Tensor clipped = (lw < std::log1p(-0.2)) | (lw > std::log1p(0.2));
  ASSERT_GT(clipped.sum().item<int64_t>(), 0);  // the case clips some
  ExpectClose(out.get("clip_fraction"), clipped.to(at::kFloat).mean(),
              "clip_fraction");
  ExpectClose(out.get("kl_approx"), (-lw).mean().detach(), "kl_approx");
  ExpectClose(out.get("max_ratio"), w.max().detach(), "max_ratio");
  ExpectClose(out.get("mean_ratio"), w.mean().detach(), "mean_ratio");
  const at::Tensor l = lw.squeeze(-1).detach();
  ExpectClose(out.get("ESS"), l.exp().sum().pow(2) / (2 * l).exp().sum() / kB,
              "ESS");
  const at::Tensor t = target.detach();
  ExpectClose(out.get("explained_variance"),
              1 - at::var(t - value.detach(), {0}, false) /
                      (at::var(t, {0}, false) + 1.1920928955078125e-07),
              "explained_variance");

  // The gradients reach both networks' parameters.
  tensordict::total_loss(out).backward();
  EXPECT_GT(ac.actor_net->weight.grad().abs().sum().item<double>(), 0);
  EXPECT_GT(ac.critic_net->weight.grad().abs().sum().item<double>(), 0);
  EXPECT_FALSE(out.get("entropy").requires_grad());
}

TEST(ClipPPOLoss, LeavesTheBatchUnchanged) {
  ActorCritic ac;
  const TensorDict batch = PpoBatch(ac);
  const auto before = TakeSnapshot(batch);
  (void)ClipPPOLoss(ac.actor, ac.critic)(batch);
  ExpectUnchanged(batch, before);
}

TEST(ClipPPOLoss, NormalizesAdvantageAndReducesAsAsked) {
  ActorCritic ac;
  const TensorDict batch = PpoBatch(ac);
  const TensorDict none =
      ClipPPOLoss(ac.actor, ac.critic,
                  ClipPPOLossOptions().reduction(at::Reduction::None))(batch);
  EXPECT_EQ(none.get("loss_objective").sizes(), (std::vector<int64_t>{kB}));
  EXPECT_EQ(none.get("loss_critic").sizes(), (std::vector<int64_t>{kB}));
  const TensorDict sum =
      ClipPPOLoss(ac.actor, ac.critic,
                  ClipPPOLossOptions().reduction(at::Reduction::Sum))(batch);
  ExpectClose(sum.get("loss_objective"), none.get("loss_objective").sum(),
              "sum");

  // Normalized: the same loss as on a batch whose advantage is standardized
  // by hand (std clamped at 1e-6).
  const at::Tensor adv = batch.get("advantage");
  const TensorDict standardized = batch.copy();
  standardized.set("advantage", (adv - adv.mean()) / adv.std());
  ExpectClose(
      ClipPPOLoss(ac.actor, ac.critic,
                  ClipPPOLossOptions().normalize_advantage(true))(batch)
          .get("loss_objective"),
      ClipPPOLoss(ac.actor, ac.critic)(standardized).get("loss_objective"),
      "normalized");

  // Dims kept apart are checked, with the mask and without.
  for (const bool with_mask : {false, true}) {
    const TensorDict b = batch.copy();
    if (with_mask) b.set("shifted_valid", at::ones({kB}, at::kBool));
    ExpectThrowsMsg<c10::ValueError>(
        [&] {
          (void)ClipPPOLoss(ac.actor, ac.critic,
                            ClipPPOLossOptions()
                                .normalize_advantage(true)
                                .normalize_advantage_exclude_dims({5}))(b);
        },
        "ClipPPOLoss: normalize_advantage_exclude_dims holds 5, outside the "
        "advantage's dims (shape [6, 1])");
  }

  // Masked steps ("shifted_valid") do not count in the mean.
  const TensorDict masked = batch.copy();
  const at::Tensor valid = at::tensor({1, 1, 0, 1, 0, 1}).to(at::kBool);
  masked.set("shifted_valid", valid);
  const at::Tensor per_step = none.get("loss_objective");
  ExpectClose(ClipPPOLoss(ac.actor, ac.critic)(masked).get("loss_objective"),
              per_step.masked_select(valid).mean(), "masked mean");
}

TEST(ClipPPOLoss, EstimatesTheAdvantageWhenMissing) {
  ActorCritic ac;
  TensorDict batch = PpoBatch(ac).exclude({"advantage", "value_target"});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  batch.set({"next", "observation"}, at::randn({kB, kObs}, gen));
  batch.set({"next", "reward"}, at::randn({kB, 1}, gen));
  batch.set({"next", "done"},
            at::tensor({0, 0, 1, 0, 0, 0}).to(at::kBool).unsqueeze(-1));
  batch.set({"next", "terminated"}, batch.get({"next", "done"}).clone());
  const auto before = TakeSnapshot(batch);
  const TensorDict out = ClipPPOLoss(ac.actor, ac.critic)(batch);
  ExpectUnchanged(batch, before);

  // As the critic's values then GAE(0.99, 0.95) written first.
  const TensorDict by_hand = batch.copy();
  {
    torch::NoGradGuard no_grad;
    ac.critic(by_hand);
    ac.critic(by_hand.get_tensordict("next"));
  }
  ValueEstimator::gae(0.99, 0.95)(by_hand);
  const TensorDict want = ClipPPOLoss(ac.actor, ac.critic)(by_hand);
  ExpectClose(out.get("loss_objective"), want.get("loss_objective"),
              "loss_objective");
  ExpectClose(out.get("loss_critic"), want.get("loss_critic"), "loss_critic");
}

TEST(ClipPPOLoss, ClipsTheValueWhenAsked) {
  ActorCritic ac;
  const TensorDict batch = PpoBatch(ac);
  batch.set("state_value", batch.get("value_target") + 0.5);
  const TensorDict out = ClipPPOLoss(
      ac.actor, ac.critic,
      ClipPPOLossOptions().clip_value(0.1).loss_critic_type(DistanceLoss::L2))(
      batch);
  const at::Tensor old = batch.get("state_value");
  const at::Tensor v = ac.critic_net->forward(batch.get("observation"));
  const at::Tensor target = batch.get("value_target");
  const at::Tensor clipped = old + (v - old).clamp(-0.1, 0.1);
  ExpectClose(
      out.get("loss_critic"),
      at::maximum((target - v).pow(2), (target - clipped).pow(2)).mean(),
      "loss_critic");
  ExpectClose(out.get("value_clip_fraction"),
              (v - old).abs().gt(0.1).to(at::kFloat).mean().detach(),
              "value_clip_fraction");
  EXPECT_EQ(out.keys()[6], NestedKey("value_clip_fraction"));
}

TEST(ClipPPOLoss, ShapeTrapsAreErrorsNamingBothShapes) {
  ActorCritic ac;
  const ClipPPOLoss loss(ac.actor, ac.critic);
  // A flat advantage against the [B, 1] log-weight: an outer product.
  TensorDict batch = PpoBatch(ac);
  batch.set("advantage", batch.get("advantage").squeeze(-1));
  auto before = TakeSnapshot(batch);
  ExpectThrowsMsg(
      [&] { (void)loss(batch); },
      "ClipPPOLoss: the advantage (key advantage, shape [6]) and the "
      "log-weight "
      "(shape [6, 1]) would broadcast to [6, 6]: give the advantage the batch "
      "shape + [1] (advantage.unsqueeze(-1))");
  ExpectUnchanged(batch, before);
  // A stored log-probability with a trailing dim.
  batch = PpoBatch(ac);
  batch.set("sample_log_prob", batch.get("sample_log_prob").unsqueeze(-1));
  ExpectThrowsMsg(
      [&] { (void)loss(batch); },
      "ClipPPOLoss: the log-probability of the actions (shape [6]) and the "
      "stored one (key sample_log_prob, shape [6, 1]) differ in shape: their "
      "difference would broadcast");
  // A flat value target against the critic's [B, 1].
  batch = PpoBatch(ac);
  batch.set("value_target", batch.get("value_target").squeeze(-1));
  ExpectThrowsMsg(
      [&] { (void)loss(batch); },
      "ClipPPOLoss: the value target (key value_target, shape [6]) and the "
      "critic's value (key state_value, shape [6, 1]) differ in shape");
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::distance_loss(at::zeros({3}), at::zeros({3, 1}),
                                        DistanceLoss::L2);
      },
      "distance_loss: the inputs have shapes [3] and [3, 1], which differ (a "
      "broadcast would compare every pair)");
}

TEST(ClipPPOLoss, MissingInputsAndBadOptionsAreNamed) {
  ActorCritic ac;
  const ClipPPOLoss loss(ac.actor, ac.critic);
  TensorDict batch = PpoBatch(ac).exclude({"value_target"});
  ExpectThrowsMsg(
      [&] { (void)loss(batch); },
      "ClipPPOLoss: missing key value_target (value target): compute it "
      "first, e.g. ValueEstimator::gae(gamma, lambda)(batch)");
  batch = PpoBatch(ac).exclude({"sample_log_prob"});
  ExpectThrowsMsg([&] { (void)loss(batch); },
                  "ClipPPOLoss: missing key sample_log_prob (the stored "
                  "log-probability)");
  batch = PpoBatch(ac);
  batch.set("sample_log_prob",
            batch.get("sample_log_prob").clone().requires_grad_());
  ExpectThrowsMsg([&] { (void)loss(batch); },
                  "ClipPPOLoss: the stored log-probability (key "
                  "sample_log_prob) requires grad");
  batch = PpoBatch(ac).exclude({"advantage"});
  ExpectThrowsMsg(
      [&] {
        (void)ClipPPOLoss(ac.actor,
                          ClipPPOLossOptions().critic_coeff(0))(batch);
      },
      "ClipPPOLoss: missing key advantage (advantage), and no critic to "
      "estimate it with");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)ClipPPOLoss(ac.actor, ClipPPOLossOptions()); },
      "ClipPPOLoss: without a critic, critic_coeff must be 0, got 1");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)ClipPPOLoss(ac.actor, ac.critic,
                          ClipPPOLossOptions().clip_epsilon(1.0));
      },
      "ClipPPOLoss: clip_epsilon must be within [0, 1), got 1");
}

TEST(ClipPPOLoss, WithoutCriticHasNoCriticTerm) {
  ActorCritic ac;
  const TensorDict out = ClipPPOLoss(
      ac.actor,
      ClipPPOLossOptions().critic_coeff(0).entropy_bonus(false))(PpoBatch(ac));
  EXPECT_EQ(out.keys(), (std::vector<NestedKey>{
                            "loss_objective", "clip_fraction", "kl_approx",
                            "ESS", "max_ratio", "mean_ratio"}));
  EXPECT_TRUE(tensordict::total_loss(out).equal(out.get("loss_objective")));
}

// ---- DQN ---------------------------------------------------------------------

namespace {

struct QNets {
  torch::nn::Linear online{kObs, kActions};
  torch::nn::Linear target{kObs, kActions};
  TensorDictModule qnet{online, {"observation"}, {"action_value"}};
  TensorDictModule target_qnet{target, {"observation"}, {"action_value"}};
};

TensorDict DqnBatch(bool one_hot) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor action = at::randint(kActions, {kB}, gen);
  return TensorDict(
      {{"observation", at::randn({kB, kObs}, gen)},
       {"action", one_hot ? at::one_hot(action, kActions) : action},
       {{"next", "observation"}, at::randn({kB, kObs}, gen)},
       {{"next", "reward"}, at::randn({kB, 1}, gen)},
       {{"next", "done"},
        at::tensor({0, 1, 0, 0, 1, 0}).to(at::kBool).unsqueeze(-1)},
       {{"next", "terminated"},
        at::tensor({0, 1, 0, 0, 0, 0}).to(at::kBool).unsqueeze(-1)}},
      {kB});
}

}  // namespace

TEST(DQNLoss, MatchesTheTDTargetWrittenOut) {
  for (const bool double_dqn : {false, true}) {
    SCOPED_TRACE(double_dqn ? "double DQN" : "DQN");
    torch::manual_seed(1);
    QNets nets;
    const DQNLoss loss(nets.qnet, nets.target_qnet,
                       DQNLossOptions()
                           .double_dqn(double_dqn)
                           .action_space(DQNActionSpace::CATEGORICAL)
                           .value_estimator(ValueEstimator::td0(0.9)));
    // The target now holds the online weights; move it away to tell them
    // apart.
    {
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(nets.target->weight.equal(nets.online->weight));
      EXPECT_FALSE(nets.target->weight.requires_grad());
      nets.target->weight.add_(0.3);
    }
    const TensorDict batch = DqnBatch(false);
    const TensorDict out = loss(batch);
    EXPECT_EQ(out.keys(), (std::vector<NestedKey>{"loss"}));

    const at::Tensor q = nets.online->forward(batch.get("observation"));
    const at::Tensor pred =
        q.gather(-1, batch.get("action").unsqueeze(-1)).squeeze(-1);
    at::Tensor next_value;
    {
      torch::NoGradGuard no_grad;
      const at::Tensor nobs = batch.get({"next", "observation"});
      const at::Tensor tq = nets.target->forward(nobs);
      next_value =
          double_dqn
              ? tq.gather(-1, nets.online->forward(nobs).argmax(-1, true))
              : std::get<0>(tq.max(-1, true));
    }
    const at::Tensor not_terminated =
        batch.get({"next", "terminated"}).logical_not().to(at::kFloat);
    const at::Tensor target =
        (batch.get({"next", "reward"}) + 0.9 * not_terminated * next_value)
            .squeeze(-1);
    ExpectClose(out.get("loss"), (pred - target).pow(2).mean(), "loss");
    ExpectClose(batch.get("td_error"),
                (pred - target).pow(2).unsqueeze(-1).detach(), "td_error");
    tensordict::total_loss(out).backward();
    EXPECT_GT(nets.online->weight.grad().abs().sum().item<double>(), 0);
    EXPECT_FALSE(nets.target->weight.grad().defined());
  }
}

TEST(DQNLoss, OneHotActionsAndPriorityWeights) {
  torch::manual_seed(2);
  QNets nets;
  const DQNLoss categorical(
      nets.qnet, nets.target_qnet,
      DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL));
  const DQNLoss one_hot(nets.qnet, nets.target_qnet);
  const TensorDict a = DqnBatch(false);
  const TensorDict b = DqnBatch(true);
  ExpectClose(one_hot(b).get("loss"), categorical(a).get("loss"), "one-hot");
  // Weighted: sum(w * l) / sum(w).
  const at::Tensor w = at::arange(1, kB + 1, at::kFloat);
  const TensorDict none = DQNLoss(nets.qnet, nets.target_qnet,
                                  DQNLossOptions()
                                      .action_space(DQNActionSpace::CATEGORICAL)
                                      .reduction(at::Reduction::None))(a);
  a.set("priority_weight", w);
  ExpectClose(categorical(a).get("loss"),
              (none.get("loss") * w).sum() / w.sum(), "weighted");
}

TEST(DQNLoss, ErrorsNameShapesAndLeaveTheBatchUnchanged) {
  torch::manual_seed(3);
  QNets nets;
  const DQNLoss one_hot(nets.qnet, nets.target_qnet);
  TensorDict batch = DqnBatch(false);
  auto before = TakeSnapshot(batch);
  ExpectThrowsMsg(
      [&] { (void)one_hot(batch); },
      "DQNLoss: the one-hot action (key action, shape [6]) differs in shape "
      "from the action values (key action_value, shape [6, 3]); an action "
      "index needs "
      "DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL)");
  ExpectUnchanged(batch, before);
  const DQNLoss categorical(
      nets.qnet, nets.target_qnet,
      DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL));
  batch = DqnBatch(true);
  ExpectThrowsMsg(
      [&] { (void)categorical(batch); },
      "DQNLoss: the categorical action (key action, shape [6, 3]) does not "
      "index the action values (key action_value, shape [6, 3]): expected the "
      "batch "
      "shape, or it + [1]");
  // Priority weights of another shape: nothing written, td_error included.
  batch = DqnBatch(false);
  batch.set("priority_weight", at::ones({kB, 1}));
  before = TakeSnapshot(batch);
  ExpectThrowsMsg([&] { (void)categorical(batch); },
                  "DQNLoss: the priority weights (shape [6, 1]) and the loss "
                  "(shape [6]) differ in shape");
  ExpectUnchanged(batch, before);
  batch = DqnBatch(false).exclude({"next"});
  ExpectThrowsMsg([&] { (void)categorical(batch); },
                  "DQNLoss: missing key next (the next step's observations, "
                  "rewards and flags)");
}

TEST(DQNLoss, OptionsAreChecked) {
  QNets nets;
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)DQNLoss(nets.qnet,
                      DQNLossOptions().delay_value(false).double_dqn(true));
      },
      "DQNLoss: double_dqn=True requires delay_value=True");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)DQNLoss(nets.qnet, DQNLossOptions()); },
      "DQNLoss: delay_value needs a target network: DQNLoss(value_network, "
      "target_network, options)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)DQNLoss(
            nets.qnet, nets.target_qnet,
            DQNLossOptions().value_estimator(ValueEstimator::gae(0.99, 0.95)));
      },
      "DQNLoss: the value estimator must be TD0Estimator, TD1Estimator or "
      "TDLambdaEstimator, got GAE");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)DQNLoss(nets.qnet, nets.qnet); },
      "DQNLoss: the target and source share every trained parameter; make "
      "the target a second network with its own tensors");
  const TensorDictModule wide(torch::nn::Linear(kObs, kActions + 1),
                              {"observation"}, {"action_value"});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)DQNLoss(nets.qnet, wide); },
      "DQNLoss: parameter ('module', 'weight') is torch.float32 [3, 4] in the "
      "source and torch.float32 [4, 4] in the target");
}

// ---- Target-network updates -----------------------------------------------------

TEST(TargetUpdates, SoftUpdateLerpsWithOneMinusEps) {
  torch::manual_seed(4);
  QNets nets;
  const DQNLoss loss(nets.qnet, nets.target_qnet);
  const SoftUpdate soft(loss, SoftUpdateOptions().tau(0.25));
  EXPECT_DOUBLE_EQ(soft.eps(), 0.75);
  at::Tensor before;
  {
    torch::NoGradGuard no_grad;
    nets.online->weight.add_(1.0);
    before = nets.target->weight.clone();
  }
  soft.step();
  ExpectClose(nets.target->weight,
              before + 0.25 * (nets.online->weight.detach() - before),
              "soft update");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)SoftUpdate(loss, SoftUpdateOptions()); },
      "SoftUpdate: give one of eps and tau = 1 - eps");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)SoftUpdate(loss, SoftUpdateOptions().eps(1.5)); },
      "SoftUpdate: eps = 1.5 must be within [0, 1]");
  const DQNLoss single(nets.qnet, DQNLossOptions().delay_value(false));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)SoftUpdate(single, SoftUpdateOptions().eps(0.9)); },
      "SoftUpdate: the loss has no target network (delay_value is false)");
}

TEST(TargetUpdates, HardUpdateCopiesOnTheIntervalsCall) {
  torch::manual_seed(5);
  QNets nets;
  HardUpdate hard(nets.qnet, nets.target_qnet, 2);
  EXPECT_TRUE(nets.target->weight.equal(nets.online->weight));
  {
    torch::NoGradGuard no_grad;
    nets.online->weight.add_(1.0);
  }
  // TorchRL's counter: 0 -> 1 -> 2, the copy on the third call.
  hard.step();
  hard.step();
  EXPECT_FALSE(nets.target->weight.equal(nets.online->weight));
  EXPECT_EQ(hard.counter(), 2);
  hard.step();
  EXPECT_TRUE(nets.target->weight.equal(nets.online->weight));
  EXPECT_EQ(hard.counter(), 0);
}
