// What the losses share: TorchRL's reduction of a loss term (with the
// validity masks it reads from the batch) and the names errors use.
#pragma once

#include <ATen/core/Reduction.h>
#include <ATen/core/Tensor.h>

#include <utility>

#include "tensordict/nested_key.h"
#include "tensordict/nn.h"
#include "tensordict/tensor_dict.h"

namespace tensordict::detail {

/// TorchRL's `LossModule._reduce_loss`: `loss` reduced as `reduction` says,
/// counting only the steps that the batch's ("collector", "mask") and
/// "shifted_valid" (where present) mark valid, weighted by `weights` (of the
/// loss's shape) when defined. `what` prefixes errors.
[[nodiscard]] at::Tensor reduce_loss(const char* what, const at::Tensor& loss,
                                     const TensorDict& batch,
                                     at::Reduction::Reduction reduction,
                                     const at::Tensor& weights = {});

/// The parameters of `source` and `target` paired up for a target-network
/// update: the same keys, shapes and dtypes (else a `c10::ValueError`
/// naming `what` and the key), distinct tensors. Copies every parameter and
/// buffer of `source` into `target` and turns off `requires_grad` on the
/// target's copies of trained parameters; returns the trained pairs (whose
/// source requires grad: what TorchRL's updaters move), source then target.
[[nodiscard]] std::pair<TensorDict, TensorDict> pair_targets(
    const char* what, const TensorDictModule& source,
    const TensorDictModule& target);

}  // namespace tensordict::detail
