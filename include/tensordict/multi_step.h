// tensordict/multi_step.h — n-step returns across collector batches:
// TorchRL 0.14's `MultiStepTransform`, the replay-buffer form of
// `multi_step` (tensordict/returns.h).
//
// `multi_step` sees one batch: a window that reaches the batch's end is cut
// there, so the last steps of every batch get shorter returns than the
// others, and how many depends on the collector's batch length. A
// `MultiStepTransform` keeps the last `n_steps` steps of each call and puts
// them in front of the next batch: each step comes out once, with its whole
// window, one call late for the last `n_steps` of a batch. So the returns
// do not depend on how the stream was cut into batches (as long as the
// batches follow each other in time for the same envs).
//
// Each call (TorchRL's inverse call, what its buffer's `extend` runs) takes
// a batch `[*B, T]` (time the last batch dim; `*B` and the leaves' shapes
// the same on every call), joins it after the kept steps, runs
// `multi_step(joined, n_steps, gamma, keys)` and returns all but its last
// `n_steps` steps: `[*B, T']` with T' = kept + T - n_steps (0 while fewer
// steps than that were seen). The kept steps are a copy: the caller may
// write over its batch afterwards (a collector reuses its storage). A call
// that throws (a batch of another structure, a missing reward) keeps what
// was kept before.
//
// Not synchronized: one transform per stream of batches, called from one
// thread at a time.
//
// Tutorial: docs/tutorials/rollout_buffer.md ("Other return estimators").
#pragma once

#include <cstdint>

#include "tensordict/returns.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// TorchRL 0.14's `MultiStepTransform` (see the top of this file).
///
/// Example:
/// ```
///   MultiStepTransform n_step(3, 0.99);
///   for (const TensorDict& batch : collector) {  // [envs, T]
///     rb.extend(n_step(batch).reshape({-1}));    // every step once, whole
///   }
/// ```
class MultiStepTransform {
 public:
  /// Throws a ValueError unless `n_steps >= 1` and `0 < gamma <= 1`.
  MultiStepTransform(int64_t n_steps, double gamma, MultiStepKeys keys = {});

  /// The steps of the kept steps and `batch` whose windows are complete,
  /// with their n-step returns (see the top of this file).
  [[nodiscard]] TensorDict operator()(const TensorDict& batch);
  /// Forgets the kept steps (a new stream).
  void reset();

  /// The steps kept for the next call (a copy; empty before the first).
  [[nodiscard]] const TensorDict& kept() const noexcept { return kept_; }
  /// The arguments it was made with.
  ///@{
  [[nodiscard]] int64_t n_steps() const noexcept { return n_steps_; }
  [[nodiscard]] double gamma() const noexcept { return gamma_; }
  [[nodiscard]] const MultiStepKeys& keys() const noexcept { return keys_; }
  ///@}

 private:
  int64_t n_steps_;
  double gamma_;
  MultiStepKeys keys_;
  TensorDict kept_;
};

}  // namespace tensordict
