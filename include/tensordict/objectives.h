// tensordict/objectives.h — TorchRL's losses (`torchrl.objectives`):
// `ClipPPOLoss`, `DQNLoss`, and the target-network updates `SoftUpdate` and
// `HardUpdate`.
//
// A loss reads a batch (a TensorDict) and returns a new dict of batch size
// [] whose "loss*" entries are the terms to minimize (`total_loss` sums
// them), next to the values TorchRL logs (`entropy`, `clip_fraction`,
// `kl_approx`, `ESS`, ...). Key names, defaults, output keys and formulas are
// TorchRL 0.14's; the values and gradients are checked against TorchRL 0.14
// in CI. The batch is not changed (the modules run on a shallow copy), except
// that `DQNLoss` writes its priority ("td_error"), as TorchRL's does.
//
// The modules' parameters are their own: a loss holds the modules (sharing
// their `torch::nn` modules), and `backward()` on a loss reaches the
// parameters an optimizer holds. Where TorchRL copies the value network's
// parameters into a target set (`delay_value`), here the target is a second
// network of the same structure that the loss copies the parameters into
// when it is made; `SoftUpdate` and `HardUpdate` move it towards the online
// network.
//
// Shapes are checked where a broadcast would silently change the loss: the
// log-probability of the actions against the stored one, the advantage
// against the log-weight (a flat `[B]` advantage against `[B, 1]` would be a
// `[B, B]` outer product), the value target against the value.
//
// Tutorial: docs/tutorials/losses.md.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstdint>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/nn.h"
#include "tensordict/probabilistic.h"
#include "tensordict/returns.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// The distance a critic or Q loss measures (TorchRL's `loss_function`
/// strings "l1", "l2", "smooth_l1").
enum class DistanceLoss { L1, L2, SMOOTH_L1 };

/// TorchRL's `distance_loss`: the elementwise L1, squared (`mse_loss`) or
/// smooth-L1 distance, unreduced. The shapes must be equal (a `[B]` target
/// against a `[B, 1]` value is an error naming both, not a `[B, B]` loss).
[[nodiscard]] at::Tensor distance_loss(const at::Tensor& v1,
                                       const at::Tensor& v2, DistanceLoss loss);

/// The sum of the "loss*" entries of a loss's output (what one `backward()`
/// takes, as TorchRL's `sum(v for k, v in loss_td.items() if k.startswith(
/// "loss"))`).
[[nodiscard]] at::Tensor total_loss(const TensorDict& losses);

/// The keys `ClipPPOLoss` reads (TorchRL's `PPOLoss._AcceptedKeys`).
struct PPOKeys {
  /// The advantage and the value target (written by `ValueEstimator`).
  ///@{
  TORCH_ARG(NestedKey, advantage) = NestedKey("advantage");
  TORCH_ARG(NestedKey, value_target) = NestedKey("value_target");
  ///@}
  /// The value the critic writes (and, with `clip_value`, the stored one).
  TORCH_ARG(NestedKey, value) = NestedKey("state_value");
  /// The log-probability of the action under the policy that took it; by
  /// default the actor's `log_prob_key()`.
  TORCH_ARG(NestedKey, sample_log_prob) = NestedKey("sample_log_prob");
  /// The action taken; by default the actor's `sample_key()`.
  TORCH_ARG(NestedKey, action) = NestedKey("action");
};

/// The options of `ClipPPOLoss`, TorchRL 0.14's keyword arguments.
struct ClipPPOLossOptions {
  /// The log-weight is clipped to `[log(1 - eps), log(1 + eps)]`.
  TORCH_ARG(double, clip_epsilon) = 0.2;
  /// Adds `loss_entropy = -entropy_coeff * entropy`.
  TORCH_ARG(bool, entropy_bonus) = true;
  /// Draws per sampled entropy estimate (where the distribution has no
  /// closed form: `distributions::entropy_estimate`).
  TORCH_ARG(int64_t, samples_mc_entropy) = 1;
  /// The entropy bonus's weight.
  TORCH_ARG(double, entropy_coeff) = 0.01;
  /// The critic loss's weight; 0 leaves the critic out (no `loss_critic`).
  TORCH_ARG(double, critic_coeff) = 1.0;
  /// The critic's distance to the value target.
  TORCH_ARG(DistanceLoss, loss_critic_type) = DistanceLoss::SMOOTH_L1;
  /// Standardize the advantage over the batch (TorchRL's `_standardize`,
  /// over the valid steps where the batch has "shifted_valid").
  TORCH_ARG(bool, normalize_advantage) = false;
  /// Dims of the advantage kept apart in the standardization (agents).
  TORCH_ARG(std::vector<int64_t>, normalize_advantage_exclude_dims) = {};
  /// The critic loss reads a detached copy of the batch, so that parameters
  /// the actor and critic share learn from the policy loss only.
  TORCH_ARG(bool, separate_losses) = false;
  /// How each "loss*" term is reduced over the batch (`at::Reduction::None`
  /// keeps one value per step). Steps masked out by ("collector", "mask")
  /// or "shifted_valid" do not count, as in TorchRL.
  TORCH_ARG(at::Reduction::Reduction, reduction) = at::Reduction::Mean;
  /// Clip the critic's change from the stored value to `+-clip_value` and
  /// take the larger loss (adds `value_clip_fraction`).
  TORCH_ARG(c10::optional<double>, clip_value) = c10::nullopt;
  /// Adds `explained_variance` (`1 - Var[target - value] / Var[target]`).
  TORCH_ARG(bool, log_explained_variance) = true;
  /// The advantage estimator the loss runs (critic first, without
  /// gradients) when the batch has no advantage; TorchRL's default, GAE with
  /// gamma 0.99 and lambda 0.95, when unset. Its advantage, value target and
  /// value keys become the loss's.
  TORCH_ARG(c10::optional<ValueEstimator>, value_estimator) = c10::nullopt;
  /// The generator of the sampled entropy estimate's draws.
  TORCH_ARG(c10::optional<at::Generator>, generator) = c10::nullopt;
};

/// TorchRL's `ClipPPOLoss`: the clipped surrogate objective
/// `-min(w * A, clip(w, 1 - eps, 1 + eps) * A)` with `w` the ratio of the
/// actor's probability of the stored action to the stored one, the entropy
/// bonus, and the critic's distance to the value target.
///
/// A call on a batch of shape `[*B]` holding the actor's and critic's
/// inputs, the action, its stored log-probability, the advantage `[*B, 1]`
/// and the value target (or the rollout's rewards and flags, for the
/// estimator) returns, as TorchRL: `loss_objective`, `clip_fraction`,
/// `kl_approx`, `entropy`, `loss_entropy`, `loss_critic`,
/// `value_clip_fraction` (with `clip_value`), `explained_variance`, `ESS`,
/// `max_ratio`, `mean_ratio`. Throws, naming the key and the shapes, when an
/// input is missing or mis-shaped (see the top of this file), or when the
/// stored action or log-probability requires grad.
///
/// Example:
/// ```
///   ClipPPOLoss loss(policy, value, ClipPPOLossOptions().critic_coeff(0.5));
///   TensorDict out = loss(minibatch);
///   optimizer.zero_grad();
///   total_loss(out).backward();
///   optimizer.step();
/// ```
class ClipPPOLoss {
 public:
  /// The actor (its last module builds the distribution) and the critic
  /// (writes `keys().value()`). The action and log-probability keys are the
  /// actor's. Throws a `c10::ValueError` for options out of range.
  ClipPPOLoss(ProbabilisticTensorDictSequential actor, TensorDictModule critic,
              ClipPPOLossOptions options = {});
  /// Without a critic: `critic_coeff` must be 0, and the batch must hold the
  /// advantage.
  ClipPPOLoss(ProbabilisticTensorDictSequential actor,
              ClipPPOLossOptions options);

  /// The losses on `batch` (see the class comment).
  [[nodiscard]] TensorDict operator()(const TensorDict& batch) const;

  /// The keys read; change them in place (`loss.keys().advantage("adv")`).
  ///@{
  [[nodiscard]] PPOKeys& keys() { return keys_; }
  [[nodiscard]] const PPOKeys& keys() const { return keys_; }
  ///@}
  /// The options it was made with.
  [[nodiscard]] const ClipPPOLossOptions& options() const { return options_; }
  /// The actor.
  [[nodiscard]] const ProbabilisticTensorDictSequential& actor() const {
    return actor_;
  }
  /// The critic, when there is one.
  [[nodiscard]] const c10::optional<TensorDictModule>& critic() const {
    return critic_;
  }

 private:
  // The advantage of `td` (computed into it when missing), standardized
  // when the options say so.
  [[nodiscard]] at::Tensor advantage(const TensorDict& td) const;
  // The critic's terms into `out`.
  void critic_loss(const TensorDict& td, const TensorDict& out) const;

  ProbabilisticTensorDictSequential actor_;
  c10::optional<TensorDictModule> critic_;
  ClipPPOLossOptions options_;
  PPOKeys keys_;
};

/// The keys `DQNLoss` reads and writes (TorchRL's `DQNLoss._AcceptedKeys`).
struct DQNKeys {
  /// The Q-values the value network writes, `[*B, num_actions]`.
  TORCH_ARG(NestedKey, action_value) = NestedKey("action_value");
  /// The action taken: one-hot `[*B, num_actions]`, or an index `[*B]` or
  /// `[*B, 1]` (`DQNActionSpace::CATEGORICAL`).
  TORCH_ARG(NestedKey, action) = NestedKey("action");
  /// Where the squared TD error `[*B, 1]` is written into the batch (what a
  /// prioritized replay buffer's `update_priority` takes).
  TORCH_ARG(NestedKey, priority) = NestedKey("td_error");
  /// Read when present (and `use_prioritized_weights`): the importance
  /// weights of a prioritized sample.
  TORCH_ARG(NestedKey, priority_weight) = NestedKey("priority_weight");
};

/// How `DQNLoss` reads the stored action.
enum class DQNActionSpace { ONE_HOT, CATEGORICAL };

/// The options of `DQNLoss`, TorchRL 0.14's keyword arguments.
struct DQNLossOptions {
  /// The distance between Q(s, a) and its target.
  TORCH_ARG(DistanceLoss, loss_function) = DistanceLoss::L2;
  /// Bootstrap from a target network (given to the constructor) instead of
  /// the value network itself.
  TORCH_ARG(bool, delay_value) = true;
  /// Double DQN: the value network picks the next action, the target
  /// network values it. Needs `delay_value`.
  TORCH_ARG(bool, double_dqn) = false;
  /// How the stored action is read (TorchRL's `action_space`, which warns
  /// and takes one-hot when it cannot tell).
  TORCH_ARG(DQNActionSpace, action_space) = DQNActionSpace::ONE_HOT;
  /// How the loss is reduced over the batch (`at::Reduction::None` keeps
  /// one value per sample); masks as `ClipPPOLossOptions::reduction`.
  TORCH_ARG(at::Reduction::Reduction, reduction) = at::Reduction::Mean;
  /// Weight the loss by `keys().priority_weight()` when the batch has it.
  TORCH_ARG(bool, use_prioritized_weights) = true;
  /// The return estimator, TorchRL's default TD(0) with gamma 0.99 when
  /// unset (`ValueEstimator::td0/td1/td_lambda`; it reads the rewards and
  /// flags under its keys, and `steps_to_next_obs` from `multi_step`).
  TORCH_ARG(c10::optional<ValueEstimator>, value_estimator) = c10::nullopt;
};

/// TorchRL's `DQNLoss`: the distance between `Q(s, a)` of the stored action
/// and its target `r + gamma * max_a' Q_target(s', a')` (with `double_dqn`,
/// `Q_target(s', argmax_a' Q(s', a'))`), no bootstrap past a terminated step.
/// The value network reads the observation keys and writes
/// `keys().action_value()`; it runs on the batch and on its "next" sub-dict.
/// Returns `{"loss": ...}` and writes the priority into `batch`.
///
/// Example:
/// ```
///   DQNLoss loss(qnet, target_qnet,
///                DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL));
///   SoftUpdate updater(loss, SoftUpdateOptions().tau(0.005));
///   total_loss(loss(sample)).backward();  // then the optimizer step
///   updater.step();
/// ```
class DQNLoss {
 public:
  /// `value_network` and, with `delay_value`, a `target_network` of the same
  /// parameter structure (made as the value network, with its own tensors),
  /// into which the value network's parameters are copied. Throws a
  /// `c10::ValueError` when the structures differ (naming the key) or share
  /// tensors, and for `double_dqn` without `delay_value`.
  DQNLoss(TensorDictModule value_network, TensorDictModule target_network,
          DQNLossOptions options = {});
  /// Without a target network: `delay_value` must be false.
  DQNLoss(TensorDictModule value_network, DQNLossOptions options);

  /// The loss on `batch` (see the class comment).
  [[nodiscard]] TensorDict operator()(const TensorDict& batch) const;

  /// The keys read and written; change them in place.
  ///@{
  [[nodiscard]] DQNKeys& keys() { return keys_; }
  [[nodiscard]] const DQNKeys& keys() const { return keys_; }
  ///@}
  /// The options it was made with.
  [[nodiscard]] const DQNLossOptions& options() const { return options_; }
  /// The value network.
  [[nodiscard]] const TensorDictModule& value_network() const {
    return value_network_;
  }
  /// The target network (the value network without `delay_value`).
  [[nodiscard]] const TensorDictModule& target_network() const {
    return target_network_ ? *target_network_ : value_network_;
  }

 private:
  TensorDictModule value_network_;
  c10::optional<TensorDictModule> target_network_;
  DQNLossOptions options_;
  DQNKeys keys_;
  ValueEstimator estimator_;
};

/// The options of `SoftUpdate`: one of `eps` and `tau = 1 - eps`.
struct SoftUpdateOptions {
  /// The weight the target keeps: `target = eps * target + (1 - eps) *
  /// source`. In [0, 1].
  TORCH_ARG(c10::optional<double>, eps) = c10::nullopt;
  /// Polyak's tau, `1 - eps`.
  TORCH_ARG(c10::optional<double>, tau) = c10::nullopt;
};

/// TorchRL's `SoftUpdate`: each `step()` moves every target parameter
/// towards its source, `target.lerp_(source, 1 - eps)` (one call over every
/// parameter, without autograd). Made from a loss (its value and target
/// networks) or from two modules of the same parameter structure; the
/// target's parameters are first set to the source's, as TorchRL's
/// `init_()`.
class SoftUpdate {
 public:
  /// The loss's value and target networks. Throws a `c10::ValueError` when
  /// the loss has no separate target network (`delay_value` false), when
  /// neither or both of `eps` and `tau` are given (TorchRL warns and uses
  /// eps = 0.999 for neither), or when eps is outside [0, 1].
  SoftUpdate(const DQNLoss& loss, SoftUpdateOptions options);
  /// `target` follows `source`; the two must have the same parameter keys
  /// and shapes, and distinct tensors.
  SoftUpdate(const TensorDictModule& source, const TensorDictModule& target,
             SoftUpdateOptions options);

  /// One update.
  void step() const;
  /// The weight the target keeps.
  [[nodiscard]] double eps() const { return eps_; }

 private:
  TensorDict source_;
  TensorDict target_;
  double eps_;
};

/// TorchRL's `HardUpdate`: `step()` counts calls and copies the source's
/// parameters into the target on every `value_network_update_interval + 1`-th
/// (the counter runs 0 to the interval, copies there, and restarts).
class HardUpdate {
 public:
  /// The loss's value and target networks (see `SoftUpdate`).
  explicit HardUpdate(const DQNLoss& loss,
                      int64_t value_network_update_interval = 1000);
  /// `target` follows `source`, as `SoftUpdate`'s.
  HardUpdate(const TensorDictModule& source, const TensorDictModule& target,
             int64_t value_network_update_interval = 1000);

  /// Counts a call; copies on the interval's.
  void step();
  /// The calls counted since the last copy.
  [[nodiscard]] int64_t counter() const { return counter_; }

 private:
  TensorDict source_;
  TensorDict target_;
  int64_t interval_;
  int64_t counter_ = 0;
};

}  // namespace tensordict
