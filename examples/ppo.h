// examples/ppo.h — the PPO agent shared by ppo_cartpole and ppo_distributed:
// actor and critic MLPs wrapped as TensorDict modules, a categorical policy
// (tensordict/probabilistic.h) that samples the actions, and one
// clipped-objective update on a minibatch dict.
#pragma once

#include <tensordict/tensordict.h>
#include <torch/torch.h>

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

// The actor-critic, as TensorDict modules (tensordict/nn.h,
// tensordict/probabilistic.h), as TorchRL builds it. `policy` is a
// ProbabilisticTensorDictSequential: the actor reads "observation" and
// writes "logits" (an intermediate key it leaves out of the dict), then a
// ProbabilisticTensorDictModule builds a Categorical from them and writes
// "action" and its log-probability "sample_log_prob" (TorchRL 0.4's key,
// which PPO's loss reads). Under InteractionType::RANDOM (the rollouts set
// it with an InteractionTypeGuard) the action is drawn; without a guard it
// is the most likely one. `value` reads "observation" and writes
// "state_value".
struct Agent {
  torch::nn::Sequential actor;   // observation -> logits
  torch::nn::Sequential critic;  // observation -> state value
  std::vector<torch::Tensor> params;
  torch::optim::Adam opt;
  tensordict::TensorDictModule logits;
  tensordict::ProbabilisticTensorDictSequential policy;
  tensordict::TensorDictModule value;

  // `gen` (a CPU generator) draws the actions when the networks live on
  // the CPU; on another `device` they are drawn there, from LibTorch's
  // default generator of that device (which torch::manual_seed seeds).
  Agent(int64_t obs_dim, int64_t num_actions, double lr, at::Generator gen,
        at::Device device = at::kCPU)
      : actor(on(device, mlp(obs_dim, num_actions, 0.01))),
        critic(on(device, mlp(obs_dim, 1, 1.0))),
        params(all_params(actor, critic)),
        opt(params, torch::optim::AdamOptions(lr).eps(1e-5)),
        logits(actor, {"observation"}, {"logits"}),
        policy(categorical_policy(
            logits, device.is_cpu() ? c10::optional<at::Generator>(gen)
                                    : c10::nullopt)),
        value(critic, {"observation"}, {"state_value"}) {}

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

  // One step of the clipped PPO objective on a minibatch dict (a copy of
  // the rollout's rows: the modules write "logits" and "state_value" into
  // it); the loss. The log-probability of the stored action and the
  // entropy bonus come from the policy's distribution.
  double update(const tensordict::TensorDict& mb, const Hyper& h) {
    // Runs the actor on `mb` ("logits"), then builds the Categorical.
    const std::shared_ptr<tensordict::distributions::Distribution> dist =
        policy.get_dist(mb);
    value(mb);
    at::Tensor adv = mb.get("advantage").squeeze(-1);
    adv = (adv - adv.mean()) / (adv.std() + 1e-8);
    const at::Tensor log_prob = dist->log_prob(mb.get("action"));
    const at::Tensor entropy = dist->entropy().mean();
    const at::Tensor ratio = (log_prob - mb.get("sample_log_prob")).exp();
    const at::Tensor policy_loss =
        -torch::min(ratio * adv, ratio.clamp(1.0 - h.clip, 1.0 + h.clip) * adv)
             .mean();
    const at::Tensor value_loss =
        0.5 * (mb.get("state_value") - mb.get("value_target")).pow(2).mean();
    const at::Tensor loss =
        policy_loss + h.value_coef * value_loss - h.entropy_coef * entropy;
    opt.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, h.max_grad_norm);
    opt.step();
    return loss.item<double>();
  }

 private:
  // `logits`, then "logits" -> Categorical -> "action" (drawn with `gen`
  // under InteractionType::RANDOM), "sample_log_prob"; "logits" is not
  // kept in the dict.
  //
  // The draws differ from this example's earlier hand-written sampler,
  // seed for seed: Categorical::sample calls at::multinomial with
  // replacement, as torch.distributions does, where the sampler called it
  // without. On LibTorch 1.13 the two take different paths (one uniform
  // per row against the cumulative probabilities, against an exponential
  // race over the whole row), so they consume the generator differently
  // and pick different actions. The learning is the same: seed 1 solved
  // CartPole after 41,984 env steps before and 37,888 after, and seeds 1
  // to 12 within 37,888-65,536 before and 34,816-47,104 after.
  static tensordict::ProbabilisticTensorDictSequential categorical_policy(
      const tensordict::TensorDictModule& logits,
      c10::optional<at::Generator> gen) {
    tensordict::ProbabilisticTensorDictSequential policy(
        {logits},
        tensordict::ProbabilisticTensorDictModule(
            {"logits"}, {"action"}, tensordict::distributions::categorical(),
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
};

}  // namespace ppo
