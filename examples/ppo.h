// examples/ppo.h — the PPO agent shared by ppo_cartpole, ppo_distributed
// and ppo_pendulum (impala_cartpole uses its actor-critic too): actor and critic MLPs wrapped as TensorDict modules, a
// policy that samples the actions (tensordict/probabilistic.h: a
// Categorical for discrete actions, a TanhNormal for continuous ones), and
// the updates: the library's ClipPPOLoss (tensordict/objectives.h) on
// minibatch dicts.
#pragma once

#include <tensordict/envs.h>
#include <tensordict/objectives.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

namespace ppo {

struct Hyper {
  int64_t epochs = 10;
  int64_t minibatches = 4;
  double lr = 1e-3;  // annealed linearly to 0 over the step budget
  double gamma = 0.99;
  double lambda = 0.95;
  double clip = 0.2;
  double value_coef = 0.5;
  double entropy_coef = 0.01;
  double max_grad_norm = 0.5;
  double solved_return = 475.0;
  size_t solved_window = 20;
};

// tanh MLP with orthogonal init (hidden gain sqrt(2), bias 0), as in the
// reference PPO implementations.
inline torch::nn::Sequential mlp(int64_t in, int64_t out, double out_gain) {
  torch::nn::Sequential net(torch::nn::Linear(in, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, out));
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& module : net->modules(/*include_self=*/false)) {
    if (auto* lin = module->as<torch::nn::Linear>()) {
      const double gain = ++i == 3 ? out_gain : std::sqrt(2.0);
      torch::nn::init::orthogonal_(lin->weight, gain);
      torch::nn::init::zeros_(lin->bias);
    }
  }
  return net;
}

// The mean of the last `n` values (0 for none).
inline double mean_last(const std::vector<double>& v, size_t n) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(n, v.size());
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(k), v.end(),
                         0.0) /
         static_cast<double>(k);
}

// Appends the returns of the episodes that ended in `data` (a batch: the
// env keeps each episode's return in "episode_reward", RewardSum) to
// `returns`.
inline void episode_returns(const tensordict::TensorDict& data,
                            std::vector<double>& returns) {
  const at::Tensor ended = at::masked_select(
      data.get({"next", "episode_reward"}), data.get({"next", "done"}));
  for (int64_t i = 0; i < ended.numel(); ++i) {
    returns.push_back(ended[i].item<double>());
  }
}

// The action spaces an Agent acts in.
//
// Discrete actions 0 to num_actions - 1 (int64 `[B]`): the actor writes
// "logits" and a Categorical draws the action.
struct Discrete {
  int64_t num_actions;
};
// Continuous actions in [low, high]^dim (float `[B, dim]`): the actor writes
// "loc" and "scale" and a TanhNormal, mapped onto (low, high), draws the
// action.
struct Box {
  int64_t dim;
  double low;
  double high;
};

// The actor-critic, as TensorDict modules (tensordict/nn.h,
// tensordict/probabilistic.h), as TorchRL builds it. `policy` is a
// ProbabilisticTensorDictSequential: the actor reads "observation" and
// writes the distribution's parameters (intermediate keys it leaves out of
// the dict), then a ProbabilisticTensorDictModule builds the distribution
// from them and writes "action" and its log-probability "sample_log_prob"
// (TorchRL 0.4's key, which PPO's loss reads). Under
// InteractionType::RANDOM (a collector's default exploration_type)
// the action is drawn; without a guard it is the deterministic one (the
// most likely class, or the squashed location). `value` reads
// "observation" and writes "state_value".
struct Agent {
  torch::nn::Sequential actor;   // observation -> distribution parameters
  torch::nn::Sequential critic;  // observation -> state value
  std::vector<torch::Tensor> params;
  torch::optim::Adam opt;
  tensordict::ProbabilisticTensorDictSequential policy;
  tensordict::TensorDictModule value;

  // `gen` (a CPU generator) draws the actions when the networks live on
  // the CPU; on another `device` they are drawn there, from LibTorch's
  // default generator of that device (which torch::manual_seed seeds).
  Agent(int64_t obs_dim, Discrete space, double lr, at::Generator gen,
        at::Device device = at::kCPU)
      : Agent(obs_dim, space.num_actions, lr, device, logits_head, {"logits"},
              tensordict::distributions::categorical(),
              sampler_generator(gen, device)) {}
  Agent(int64_t obs_dim, Box space, double lr, at::Generator gen,
        at::Device device = at::kCPU)
      : Agent(obs_dim, 2 * space.dim, lr, device, normal_head, {"loc", "scale"},
              tensordict::distributions::tanh_normal(
                  tensordict::distributions::TanhNormalOptions()
                      .low(space.low)
                      .high(space.high)),
              sampler_generator(gen, device)) {}

  // Values of the rollout's observations, then GAE into "advantage" and
  // "value_target".
  void gae(tensordict::RolloutBuffer& buffer, const Hyper& h) {
    torch::NoGradGuard no_grad;
    const tensordict::TensorDict data = buffer.data();
    value(data);
    value(data.get_tensordict("next"));
    buffer.compute_gae(h.gamma, h.lambda);
  }

  void set_lr(double lr) {
    for (auto& group : opt.param_groups()) {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    }
  }

  // The loss: TorchRL's ClipPPOLoss with the reference implementations'
  // settings (standardized advantages; the value loss 0.5 * value_coef *
  // squared error: L2 with critic_coeff 0.5 * value_coef). Without an
  // entropy bonus the sampled estimate (a TanhNormal's) is not drawn.
  tensordict::ClipPPOLoss loss(const Hyper& h) const {
    return tensordict::ClipPPOLoss(
        policy, value,
        tensordict::ClipPPOLossOptions()
            .clip_epsilon(h.clip)
            .entropy_bonus(h.entropy_coef != 0.0)
            .entropy_coeff(h.entropy_coef)
            .critic_coeff(0.5 * h.value_coef)
            .loss_critic_type(tensordict::DistanceLoss::L2)
            .normalize_advantage(true)
            .generator(gen_));
  }

  // One iteration's PPO epochs over the rollout in `buffer`: the learning
  // rate annealed linearly to 0 over the step budget (`env_steps` of
  // `max_steps` taken, `per_iter` of them by this rollout), then `h.epochs`
  // passes over shuffled minibatches. Returns the last minibatch's loss.
  double learn(tensordict::RolloutBuffer& buffer, const Hyper& h,
               int64_t env_steps, int64_t per_iter, int64_t max_steps,
               at::Generator gen) {
    const double frac = 1.0 - static_cast<double>(env_steps - per_iter) /
                                  static_cast<double>(max_steps);
    set_lr(h.lr * std::max(frac, 0.0));
    const tensordict::ClipPPOLoss ppo_loss = loss(h);
    double last_loss = 0.0;
    for (int64_t epoch = 0; epoch < h.epochs; ++epoch) {
      for (const tensordict::TensorDict& mb :
           buffer.minibatches(h.minibatches, gen)) {
        last_loss = update(ppo_loss, mb, h);
      }
    }
    return last_loss;
  }

  // One optimizer step on the summed losses of a minibatch dict (rows of
  // the rollout holding the observations, the action, "sample_log_prob",
  // "advantage" and "value_target"); the loss.
  double update(const tensordict::ClipPPOLoss& ppo_loss,
                const tensordict::TensorDict& mb, const Hyper& h) {
    const at::Tensor loss = tensordict::total_loss(ppo_loss(mb));
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, h.max_grad_norm);
    opt.step();
    return loss.item<double>();
  }

 private:
  Agent(int64_t obs_dim, int64_t actor_out, double lr, at::Device device,
        tensordict::TensorDictModule (*head)(const torch::nn::Sequential&),
        std::vector<tensordict::NestedKey> dist_params,
        tensordict::distributions::DistributionFactory dist,
        c10::optional<at::Generator> gen)
      : actor(on(device, mlp(obs_dim, actor_out, 0.01))),
        critic(on(device, mlp(obs_dim, 1, 1.0))),
        params(all_params(actor, critic)),
        opt(params, torch::optim::AdamOptions(lr).eps(1e-5)),
        policy(make_policy(head(actor), std::move(dist_params), std::move(dist),
                           gen)),
        value(critic, {"observation"}, {"state_value"}),
        gen_(std::move(gen)) {}

  // The actor's output is the Categorical's "logits".
  static tensordict::TensorDictModule logits_head(
      const torch::nn::Sequential& net) {
    return tensordict::TensorDictModule(net, {"observation"}, {"logits"});
  }

  // The actor's output, split in two along the last dim: "loc", and
  // "scale" = softplus(x + log(e - 1)) + 1e-4, about 1 where the network
  // outputs 0 (TorchRL's NormalParamExtractor, "biased_softplus_1.0").
  static tensordict::TensorDictModule normal_head(
      const torch::nn::Sequential& net) {
    return tensordict::TensorDictModule(
        [net = net](const std::vector<at::Tensor>& in) mutable
        -> std::vector<at::Tensor> {
          const std::vector<at::Tensor> half = net->forward(in[0]).chunk(2, -1);
          const double bias = std::log(std::exp(1.0) - 1.0);
          return {half[0], torch::softplus(half[1] + bias) + 1e-4};
        },
        {"observation"}, {"loc", "scale"});
  }

  // The actions are drawn with `gen` on the CPU, with the device's default
  // generator elsewhere.
  static c10::optional<at::Generator> sampler_generator(at::Generator gen,
                                                        at::Device device) {
    if (device.is_cpu()) return gen;
    return c10::nullopt;
  }

  // `head`, then the distribution `dist` of `dist_params` -> "action"
  // (drawn with `gen` under InteractionType::RANDOM), "sample_log_prob";
  // the parameters are not kept in the dict.
  //
  // For a Categorical, the draws differ from this example's earlier
  // hand-written sampler, seed for seed: Categorical::sample calls
  // at::multinomial with replacement, as torch.distributions does, where
  // the sampler called it without. On LibTorch 1.13 the two take different
  // paths (one uniform per row against the cumulative probabilities,
  // against an exponential race over the whole row), so they consume the
  // generator differently and pick different actions. The learning is the
  // same: seed 1 solved CartPole after 41,984 env steps before and 37,888
  // after, and seeds 1 to 12 within 37,888-65,536 before and
  // 34,816-47,104 after (on the old examples/cartpole.h; on the library's
  // CartPoleEnv, whose resets draw differently, within 39,936-53,248; now
  // within 38,912-129,024, the same with ClipPPOLoss as with the
  // hand-written loss it replaced).
  static tensordict::ProbabilisticTensorDictSequential make_policy(
      const tensordict::TensorDictModule& head,
      std::vector<tensordict::NestedKey> dist_params,
      tensordict::distributions::DistributionFactory dist,
      c10::optional<at::Generator> gen) {
    tensordict::ProbabilisticTensorDictSequential policy(
        {head}, tensordict::ProbabilisticTensorDictModule(
                    std::move(dist_params), {"action"}, std::move(dist),
                    tensordict::ProbabilisticOptions()
                        .return_log_prob(true)
                        .log_prob_key("sample_log_prob")
                        .generator(std::move(gen))));
    policy.select_out_keys({"action", "sample_log_prob"});
    return policy;
  }

  static torch::nn::Sequential on(at::Device device, torch::nn::Sequential m) {
    m->to(device);
    return m;
  }

  static std::vector<torch::Tensor> all_params(torch::nn::Sequential& a,
                                               torch::nn::Sequential& c) {
    std::vector<torch::Tensor> p = a->parameters();
    for (const auto& t : c->parameters()) p.push_back(t);
    return p;
  }

  c10::optional<at::Generator> gen_;
};

}  // namespace ppo
