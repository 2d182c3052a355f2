// tensordict/rollout_buffer.h — on-policy rollout storage and its return
// estimates.
//
// `RolloutBuffer(num_steps, num_envs)` holds one rollout of a vectorized
// environment as a TensorDict of batch size `[T, E]` (time-major, T =
// num_steps, E = num_envs). `step(t, data)` writes step `t` for all envs; the
// storage is allocated lazily on the first write, from that data's
// structure (see "Lazy preallocation" in tensor_dict.h), and reused in place
// by every later rollout. `compute_gae()` fills the advantage and value
// target, and `minibatches()` shuffles the flattened `[T * E]` batch into
// minibatches for the PPO epochs.
//
// Key layout (TorchRL's, configurable with `EstimatorKeys`): the value of the
// observation at step t is `"state_value"`, the value of the next observation
// is `("next", "state_value")`, and the reward and end flags of the
// transition are `("next", "reward")`, `("next", "done")`,
// `("next", "terminated")` and optionally `("next", "truncated")`.
//
// `compute(estimator)` runs any of the return estimators of returns.h
// (`tensordict::gae()` and the others are the same computations on plain
// tensors).
//
// Thread safety: like TensorDict, a RolloutBuffer is not synchronized; use
// one from one thread at a time.
//
// Tutorial: docs/tutorials/rollout_buffer.md; a complete PPO agent:
// examples/ppo_cartpole.cpp.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/returns.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Fixed-size on-policy rollout storage, `[num_steps, num_envs]`.
///
/// Example:
/// ```
///   RolloutBuffer buf(128, 8);
///   for (int64_t t = 0; t < 128; ++t) buf.step(t, step_td);  // step_td: [8]
///   buf.data().set("state_value", critic(buf.data().get("observation")));
///   buf.data().set({"next", "state_value"}, ...);
///   buf.compute_gae(0.99, 0.95);
///   for (const TensorDict& mb : buf.minibatches(4, gen)) { ... }  // [256]
/// ```
class RolloutBuffer {
 public:
  /// An empty buffer (nothing is allocated until the first `step`). With
  /// `device`, the storage lives there. Throws a ValueError unless both sizes
  /// are positive.
  RolloutBuffer(int64_t num_steps, int64_t num_envs,
                c10::optional<at::Device> device = c10::nullopt);

  /// Writes step `t` (`data` has batch size `[num_envs]`) in place: it is
  /// `data()[t] = data`. The first step allocates the `[T, E]` storage
  /// (zero-filled) from its keys, and every later step, of this rollout or
  /// the next, must bring the same keys: a step that lacks one would leave
  /// the previous rollout's values in place to be trained on, and a key that
  /// a later step brings would be zeros in the steps before it. Throws,
  /// naming the keys ("RolloutBuffer::step: TensorDicts have different keys:
  /// missing from step 5: [('next', 'reward')]"), an IndexError for `t`
  /// outside `[0, T)`, and an error for another batch size; a failed step
  /// changes nothing. Keys set on `data()` (values, advantages) are not
  /// step keys.
  void step(int64_t t, const TensorDict& data);

  /// The storage, batch size `[T, E]` (the buffer's own dict: `set` on it
  /// adds keys, e.g. values computed in one batched forward pass).
  [[nodiscard]] TensorDict data() const;

  /// Runs `gae()` over the storage's keys (see `GaeKeys`; the truncated key,
  /// when present, is OR-ed into done) and stores the advantage and value
  /// target, shaped and typed like the value. When those keys already hold
  /// tensors of that shape and dtype (a previous rollout), the results are
  /// copied into them; otherwise they are `set`. Throws, naming the key, when
  /// an input is missing, holds a sub-dict, or is not shaped like the value
  /// (and a TypeError when the value is not floating point); nothing is
  /// written then.
  void compute_gae(double gamma, double lambda, const GaeKeys& keys = {});

  /// Runs `estimator` (any of `ValueEstimator`'s kinds, with its keys) along
  /// the time dim, dim 0, and stores the advantage and value target as
  /// `compute_gae` does, with the same checks and errors (prefixed
  /// "RolloutBuffer::compute").
  ///
  /// Example:
  /// ```
  ///   buf.compute(ValueEstimator::td_lambda(0.99, 0.95));
  /// ```
  void compute(const ValueEstimator& estimator);

  /// The flattened `[T * E]` batch in `num_minibatches` shuffled minibatches
  /// of `T * E / num_minibatches` rows each: one random permutation, cut into
  /// consecutive pieces. Each minibatch has every key (a row is a whole
  /// transition) and is a copy. Any remainder rows are dropped. Uses
  /// `generator` when given, LibTorch's default generator otherwise. Throws a
  /// ValueError unless `1 <= num_minibatches <= T * E`, and an error when
  /// nothing was written yet.
  [[nodiscard]] std::vector<TensorDict> minibatches(
      int64_t num_minibatches,
      c10::optional<at::Generator> generator = c10::nullopt) const;

  /// T, the number of steps per rollout.
  [[nodiscard]] int64_t num_steps() const noexcept { return num_steps_; }
  /// E, the number of environments.
  [[nodiscard]] int64_t num_envs() const noexcept { return num_envs_; }

 private:
  // compute and compute_gae: errors start with `fn`; `before` ends the hint
  // of a missing value.
  void store(const ValueEstimator& estimator, const char* fn,
             const char* before);

  int64_t num_steps_;
  int64_t num_envs_;
  TensorDict data_;
  // The keys of the first step (its structure, with placeholder leaves);
  // null until then.
  std::shared_ptr<const detail::TensorDictImpl> step_keys_;
};

}  // namespace tensordict
