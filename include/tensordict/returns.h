// tensordict/returns.h — return and advantage estimators: TorchRL's
// `torchrl.objectives.value` (GAE, TD(0), TD(1), TD(lambda), V-trace,
// reward-to-go) and n-step returns (`MultiStep`), on tensors and on
// TensorDicts.
//
// The functions take tensors shaped `[*B, T, *F]` (batch dims, the time dim,
// feature dims), all of one shape, and a `time_dim` (TorchRL's default, -2,
// except `gae`, whose time dim is 0 by default: it predates the others and
// `RolloutBuffer` stores time first). `done` ends an episode (terminated or
// truncated): no recursion crosses it. `terminated` marks true terminal
// states: their next value is not bootstrapped. A truncated step (done, not
// terminated) bootstraps from its next value, which must then be the value of
// the final observation. The last step of the window bootstraps from its next
// value too. Flags are bool tensors (TorchRL's); `terminated` defaults to
// `done`.
//
// `td0_return`, `td1_return` and `td_lambda_return` also take `gamma` (and
// `lambda`) as tensors, as TorchRL's do: a 0-dim tensor, or one that
// broadcasts to the inputs' shape, whose element at step t is that step's
// discount (TorchRL's default `rolling_gamma=True`; its `rolling_gamma=False`,
// each step's own discount for its whole future, has no counterpart here).
//
// Every estimator runs its reverse-time recurrence as one plain loop over
// contiguous CPU memory, in the inputs' precision as TorchRL does (float for
// float, half and bfloat16 inputs, double for double ones), reading the
// inputs in place (a copy only for non-contiguous, non-CPU, half or
// mixed-dtype inputs). Results are new tensors in the next value's dtype
// and device (the value's for `gae`), without autograd history: the targets
// of a loss, as TorchRL's `differentiable=False`.
//
// `ValueEstimator` is the TensorDict form (TorchRL's `TD0Estimator`,
// `TD1Estimator`, `TDLambdaEstimator`, `GAE` and `VTrace` modules over data
// whose values are already computed); `RolloutBuffer::compute` runs one over
// its storage. `multi_step` is TorchRL's `MultiStep` post-processing.
//
// Tutorial: docs/tutorials/rollout_buffer.md ("Return estimators").
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstdint>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// An advantage estimate and the critic's regression target.
struct AdvantageEstimate {
  /// The advantage, shaped like the value.
  at::Tensor advantage;
  /// The value target (`advantage + value` for GAE; V-trace's `v_s`).
  at::Tensor value_target;
};

/// The result of `gae()` (its earlier name).
using GaeResult = AdvantageEstimate;

/// Generalized advantage estimation (TorchRL's
/// `generalized_advantage_estimate`, with time at `time_dim`, 0 by default):
///
///   delta_t = reward_t + gamma * next_value_t * (1 - terminated_t) - value_t
///   A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  A_T = 0
///
/// There is no `truncated` input: pass `done = terminated | truncated`.
/// Unlike the other estimators, `done`/`terminated` may also be numeric
/// (non-zero is true). The results are in `value`'s dtype and device. Throws
/// when an input is undefined or not shaped like `value`, when `time_dim` is
/// out of range (an IndexError), and (a TypeError) when `value` is not
/// floating point.
///
/// Example:
/// ```
///   auto [adv, target] = tensordict::gae(reward, value, next_value, done,
///                                        terminated, 0.99, 0.95);
/// ```
[[nodiscard]] AdvantageEstimate gae(const at::Tensor& reward,
                                    const at::Tensor& value,
                                    const at::Tensor& next_value,
                                    const at::Tensor& done,
                                    const at::Tensor& terminated, double gamma,
                                    double lambda, int64_t time_dim = 0);

/// TD(0) return (TorchRL's `td0_return_estimate`), elementwise:
/// `reward + gamma * (1 - terminated) * next_value`.
[[nodiscard]] at::Tensor td0_return(double gamma, const at::Tensor& next_value,
                                    const at::Tensor& reward,
                                    const at::Tensor& terminated);
/// `td0_return` with one discount per step (see the top of this file).
[[nodiscard]] at::Tensor td0_return(const at::Tensor& gamma,
                                    const at::Tensor& next_value,
                                    const at::Tensor& reward,
                                    const at::Tensor& terminated);

/// TD(1) return (TorchRL's `td1_return_estimate`): the discounted sum of the
/// episode's rewards, bootstrapped from the next value at a truncation and at
/// the last step:
///
///   G_t = reward_t + gamma * (1 - terminated_t) *
///         (done_t ? next_value_t : G_{t+1}),   G_T = next_value_{T-1}
[[nodiscard]] at::Tensor td1_return(double gamma, const at::Tensor& next_value,
                                    const at::Tensor& reward,
                                    const at::Tensor& done,
                                    const at::Tensor& terminated = {},
                                    int64_t time_dim = -2);
/// `td1_return` with one discount per step (`gamma_t` in the recurrence).
[[nodiscard]] at::Tensor td1_return(const at::Tensor& gamma,
                                    const at::Tensor& next_value,
                                    const at::Tensor& reward,
                                    const at::Tensor& done,
                                    const at::Tensor& terminated = {},
                                    int64_t time_dim = -2);

/// TD(lambda) return (TorchRL's `td_lambda_return_estimate` and its `vec_`
/// form, which give the same values). With `nv_t = (1 - terminated_t) *
/// next_value_t`:
///
///   G_t = reward_t + gamma * ((1 - lambda) * nv_t +
///                             lambda * (done_t ? nv_t : G_{t+1})),
///   G_T = nv_{T-1}
[[nodiscard]] at::Tensor td_lambda_return(double gamma, double lambda,
                                          const at::Tensor& next_value,
                                          const at::Tensor& reward,
                                          const at::Tensor& done,
                                          const at::Tensor& terminated = {},
                                          int64_t time_dim = -2);
/// `td_lambda_return` with one discount and one lambda per step (`gamma_t`
/// and `lambda_t` in the recurrence). Pass a number as a 0-dim tensor
/// (`at::scalar_tensor(0.95)`). Throws, naming the argument and the shapes,
/// when `gamma` or `lambda` does not broadcast to `next_value`'s shape.
///
/// Example (a discount that varies over the batch, as a tensor `[B, 1, 1]`
/// against inputs `[B, T, 1]`):
/// ```
///   at::Tensor ret = tensordict::td_lambda_return(
///       gammas, at::scalar_tensor(0.95), next_value, reward, done);
/// ```
[[nodiscard]] at::Tensor td_lambda_return(const at::Tensor& gamma,
                                          const at::Tensor& lambda,
                                          const at::Tensor& next_value,
                                          const at::Tensor& reward,
                                          const at::Tensor& done,
                                          const at::Tensor& terminated = {},
                                          int64_t time_dim = -2);

/// V-trace (IMPALA; TorchRL's `vtrace_advantage_estimate`). `log_pi` is the
/// learner policy's log-probability of the taken action, `log_mu` the
/// behaviour policy's (the collected `sample_log_prob`). With
/// `rho_t = exp(log_pi_t - log_mu_t)`, `r_t = min(rho_t, rho_thresh)` and
/// `c_t = min(rho_t, c_thresh)`:
///
///   delta_t = r_t * (reward_t + gamma * (1 - terminated_t) * next_value_t
///                    - value_t)
///   v_t - value_t = delta_t + gamma * (1 - done_t) * c_t * (v_{t+1} -
///                   value_{t+1}),   0 after the last step
///   advantage_t = r_t * (reward_t + gamma * (1 - terminated_t) * v'_{t+1}
///                        - value_t)
///
/// where `v'_{t+1}` is `v_{t+1}`, or `next_value_t` at a done step and at the
/// last step. `value_target` is `v_t`. TorchRL 0.14 takes `v_{t+1}` at a done
/// step that is not the last, which at a truncation is the next episode's
/// first value: there, and only there, the advantages differ.
[[nodiscard]] AdvantageEstimate vtrace(
    double gamma, const at::Tensor& log_pi, const at::Tensor& log_mu,
    const at::Tensor& value, const at::Tensor& next_value,
    const at::Tensor& reward, const at::Tensor& done,
    const at::Tensor& terminated = {}, double rho_thresh = 1.0,
    double c_thresh = 1.0, int64_t time_dim = -2);

/// Reward-to-go (TorchRL's `reward2go`): the discounted sum of the rewards
/// left in each episode, with the window's end as an episode end:
/// `G_t = reward_t + gamma * (done_t ? 0 : G_{t+1})`. TorchRL drops the
/// terms whose discount is below 1e-7; this sums them all. The result is in
/// `reward`'s dtype.
[[nodiscard]] at::Tensor reward_to_go(const at::Tensor& reward,
                                      const at::Tensor& done, double gamma,
                                      int64_t time_dim = -2);

/// The keys the TensorDict forms (`ValueEstimator`, `RolloutBuffer::compute`
/// and `compute_gae`) read and write, in TorchRL's layout.
struct EstimatorKeys {
  /// The inputs.
  ///@{
  TORCH_ARG(NestedKey, value) = NestedKey("state_value");
  TORCH_ARG(NestedKey, next_value) = NestedKey({"next", "state_value"});
  TORCH_ARG(NestedKey, reward) = NestedKey({"next", "reward"});
  TORCH_ARG(NestedKey, done) = NestedKey({"next", "done"});
  TORCH_ARG(NestedKey, terminated) = NestedKey({"next", "terminated"});
  ///@}
  /// Read only when present: a truncated step also ends the episode.
  TORCH_ARG(NestedKey, truncated) = NestedKey({"next", "truncated"});
  /// V-trace: the behaviour policy's log-probability (what the collector's
  /// policy wrote).
  TORCH_ARG(NestedKey, sample_log_prob) = NestedKey("sample_log_prob");
  /// V-trace: the learner policy's log-probability of the same actions (run
  /// the learner's actor over the data first).
  TORCH_ARG(NestedKey, log_prob) = NestedKey("log_prob");
  /// TD(0): read only when present, the number of steps to the next
  /// observation (`multi_step`'s output): the discount becomes
  /// `gamma^steps_to_next_obs`.
  TORCH_ARG(NestedKey, steps_to_next_obs) = NestedKey("steps_to_next_obs");
  /// Where the results go.
  ///@{
  TORCH_ARG(NestedKey, advantage) = NestedKey("advantage");
  TORCH_ARG(NestedKey, value_target) = NestedKey("value_target");
  ///@}
};

/// The keys of `compute_gae` (its earlier name).
using GaeKeys = EstimatorKeys;

/// An estimator over a TensorDict of batch size `[*B, T]` whose values are
/// already computed: TorchRL's value-estimator modules with
/// `value_network=None` (for V-trace, the learner's log-probabilities at
/// `keys().log_prob()` stand for its actor). A call reads the keys, runs the
/// function of the same name along the time dim (by default the last batch
/// dim, as TorchRL's), and sets the advantage and value target (for TD(0),
/// TD(1) and TD(lambda), `advantage = value_target - value`).
///
/// Example:
/// ```
///   auto estimator = ValueEstimator::td_lambda(0.99, 0.95);
///   estimator(batch);  // batch gains "advantage" and "value_target"
/// ```
class ValueEstimator {
 public:
  /// The estimator: the function of the same name it runs.
  enum class Kind { kTD0, kTD1, kTDLambda, kGAE, kVTrace };

  /// The estimators, with TorchRL's parameters (`td0_return`, `td1_return`,
  /// `td_lambda_return`, `gae`, `vtrace`).
  ///@{
  [[nodiscard]] static ValueEstimator td0(double gamma);
  [[nodiscard]] static ValueEstimator td1(double gamma);
  [[nodiscard]] static ValueEstimator td_lambda(double gamma, double lambda);
  [[nodiscard]] static ValueEstimator gae(double gamma, double lambda);
  [[nodiscard]] static ValueEstimator vtrace(double gamma,
                                             double rho_thresh = 1.0,
                                             double c_thresh = 1.0);
  ///@}

  /// Computes the estimate without writing anything. Throws, naming the key,
  /// when an input is missing, holds a TensorDict, or is not shaped like the
  /// value, and when `time_dim` is not a batch dim of `data`.
  [[nodiscard]] AdvantageEstimate estimate(const TensorDict& data) const;

  /// Computes the estimate and sets it at the advantage and value-target
  /// keys of `data`; returns `data`. On error nothing is written.
  const TensorDict& operator()(const TensorDict& data) const;

  /// Which estimator this is.
  [[nodiscard]] Kind kind() const noexcept { return kind_; }
  /// TorchRL's class name: "TD0Estimator", "TD1Estimator",
  /// "TDLambdaEstimator", "GAE" or "VTrace" (errors start with it).
  [[nodiscard]] const char* name() const noexcept;

  /// The keys read and written.
  TORCH_ARG(EstimatorKeys, keys);
  /// The time dim, a batch dim of the data; by default the last one.
  TORCH_ARG(c10::optional<int64_t>, time_dim);

 private:
  ValueEstimator(Kind kind, double gamma, double lambda, double rho_thresh,
                 double c_thresh);
  friend class RolloutBuffer;
  // `estimate` along `time_dim`, errors prefixed by `fn` (`before` ends
  // the hint of a missing value).
  AdvantageEstimate run(const TensorDict& data, int64_t time_dim,
                        const char* fn, const char* before) const;

  Kind kind_;
  double gamma_;
  double lambda_;
  double rho_thresh_;
  double c_thresh_;
};

/// The keys `multi_step` reads and writes (TorchRL's `MultiStep`).
struct MultiStepKeys {
  /// Summed over the window.
  TORCH_ARG(NestedKey, reward) = NestedKey({"next", "reward"});
  /// Where the original reward goes.
  TORCH_ARG(NestedKey,
            original_reward) = NestedKey({"next", "original_reward"});
  /// The episode end that bounds a window.
  TORCH_ARG(NestedKey, done) = NestedKey({"next", "done"});
  /// Written: the window's length (int64), `gamma^steps_to_next_obs`, and
  /// whether the window is longer than one step (TorchRL's "nonterminal").
  ///@{
  TORCH_ARG(NestedKey, steps_to_next_obs) = NestedKey("steps_to_next_obs");
  TORCH_ARG(NestedKey, gamma) = NestedKey("gamma");
  TORCH_ARG(NestedKey, nonterminal) = NestedKey("nonterminal");
  ///@}
};

/// n-step returns (TorchRL's `MultiStep(gamma, n_steps)` post-processing):
/// over a TensorDict `[*B, T]` (time the last batch dim), step t's window is
/// steps t .. t+k-1, where k is at most `n_steps` and stops at the episode's
/// end (its done step) and at the end of the data. The result is a shallow
/// copy of `data` where the reward is the window's discounted sum
/// (`sum_i gamma^i reward_{t+i}`), every other leaf under the reward's
/// parent ("next") is the window's last step's, and the keys above are set.
/// `data` itself is not changed.
///
/// Unlike TorchRL 0.14, which leaves step t's own done, terminated and
/// truncated flags (so that a window ending in a terminal state bootstraps
/// from it), the flags are the window's last step's, like the next
/// observation. Throws a ValueError unless `n_steps >= 1` and
/// `0 < gamma <= 1`, and an error naming the key when the reward or done is
/// missing or not shaped `[*B, T]` or `[*B, T, 1]`.
[[nodiscard]] TensorDict multi_step(const TensorDict& data, int64_t n_steps,
                                    double gamma,
                                    const MultiStepKeys& keys = {});

}  // namespace tensordict
