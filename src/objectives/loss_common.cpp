// The losses' shared pieces (objectives/loss_common.h): TorchRL's
// distance_loss and _reduce_loss, total_loss, and the target-network
// updates (SoftUpdate, HardUpdate).
#include "objectives/loss_common.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "tensordict/nn.h"
#include "tensordict/objectives.h"

namespace tensordict {

namespace detail {

namespace {

// TorchRL's `_expand_loss_mask`: trailing singleton dims dropped down to
// the loss's rank, then the mask broadcast over the loss's trailing dims.
at::Tensor expand_mask(const char* what, const NestedKey& key, at::Tensor mask,
                       const at::Tensor& loss) {
  while (mask.dim() > loss.dim() && mask.size(-1) == 1) mask = mask.squeeze(-1);
  TORCH_CHECK(mask.dim() <= loss.dim(), what, ": the mask ", key, " (shape ",
              shape_str(mask.sizes()), ") has more dims than the loss (shape ",
              shape_str(loss.sizes()), ")");
  std::vector<int64_t> shape = mask.sizes().vec();
  shape.resize(static_cast<size_t>(loss.dim()), 1);
  mask = mask.reshape(shape);
  TORCH_CHECK(at::infer_size(mask.sizes(), loss.sizes()) == loss.sizes(), what,
              ": the mask ", key, " (shape ", shape_str(shape),
              ") does not broadcast to the loss (shape ",
              shape_str(loss.sizes()), ")");
  return mask.to(at::kBool).expand_as(loss);
}

void check_weights(const char* what, const at::Tensor& loss,
                   const at::Tensor& weights) {
  TORCH_CHECK(loss.sizes() == weights.sizes(), what,
              ": the priority weights (shape ", shape_str(weights.sizes()),
              ") and the loss (shape ", shape_str(loss.sizes()),
              ") differ in shape");
}

}  // namespace

at::Tensor reduce_loss(const char* what, const at::Tensor& loss,
                       const TensorDict& batch,
                       at::Reduction::Reduction reduction,
                       const at::Tensor& weights) {
  at::Tensor mask;
  for (const NestedKey& key :
       {NestedKey({"collector", "mask"}), NestedKey("shifted_valid")}) {
    const Node* node = lookup(TensorDictImpl::of(batch), key);
    if (node == nullptr || node->is_dict()) continue;
    const at::Tensor m = expand_mask(what, key, node->tensor, loss);
    mask = mask.defined() ? mask.logical_and(m) : m;
  }
  if (weights.defined()) check_weights(what, loss, weights);
  if (!mask.defined()) {
    switch (reduction) {
      case at::Reduction::None:
        return weights.defined() ? loss * weights : loss;
      case at::Reduction::Sum:
        return weights.defined() ? (loss * weights).sum() : loss.sum();
      default:
        return weights.defined() ? (loss * weights).sum() / weights.sum()
                                 : loss.mean();
    }
  }
  // Masked steps are selected out (not multiplied by 0: they may hold
  // non-finite values).
  const at::Tensor kept = at::where(mask, loss, at::zeros_like(loss));
  switch (reduction) {
    case at::Reduction::None:
      return weights.defined() ? kept * weights : kept;
    case at::Reduction::Sum:
      return weights.defined()
                 ? (kept * weights * mask.to(weights.scalar_type())).sum()
                 : kept.sum();
    default:
      if (!weights.defined()) return kept.sum() / mask.sum().clamp_min(1);
      const at::Tensor w = weights * mask.to(weights.scalar_type());
      return (kept * w).sum() / w.sum();
  }
}

// The parameters `source` and `target` pair up: the same keys, shapes and
// dtypes, distinct tensors. What a step writes: the pairs whose source
// trains (requires grad), as TorchRL's `init_` keeps; buffers are copied
// once, here.
std::pair<TensorDict, TensorDict> pair_targets(const char* what,
                                               const TensorDictModule& source,
                                               const TensorDictModule& target) {
  const TensorDict s = from_module(source);
  const TensorDict t = from_module(target);
  const std::vector<NestedKey> keys = s.keys(true, true);
  const std::vector<NestedKey> target_keys = t.keys(true, true);
  for (const NestedKey& key : target_keys) {
    TORCH_CHECK_VALUE(s.contains(key), what, ": the target's parameter ", key,
                      " is not in the source");
  }
  std::pair<TensorDict, TensorDict> pairs;
  bool distinct = false;
  for (const NestedKey& key : keys) {
    TORCH_CHECK_VALUE(t.contains(key), what, ": the source's parameter ", key,
                      " is not in the target");
    const at::Tensor a = s.get(key);
    const at::Tensor b = t.get(key);
    TORCH_CHECK_VALUE(
        a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), what,
        ": parameter ", key, " is ", dtype_name(a.scalar_type()), " ",
        shape_str(a.sizes()), " in the source and ",
        dtype_name(b.scalar_type()), " ", shape_str(b.sizes()),
        " in the target");
    if (a.is_same(b) || a.data_ptr() == b.data_ptr()) continue;
    if (a.requires_grad()) {
      distinct = true;
      pairs.first.set(key, a);
      pairs.second.set(key, b);
    }
  }
  TORCH_CHECK_VALUE(distinct, what,
                    ": the target and source share every trained parameter; "
                    "make the target a second network with its own tensors");
  const c10::NoGradGuard no_grad;
  for (const NestedKey& key : keys) {
    const at::Tensor b = t.get(key);
    b.copy_(s.get(key));
  }
  for (const NestedKey& key : pairs.second.keys(true, true)) {
    pairs.second.get(key).requires_grad_(false);
  }
  return pairs;
}

}  // namespace detail

at::Tensor distance_loss(const at::Tensor& v1, const at::Tensor& v2,
                         DistanceLoss loss) {
  TORCH_CHECK(
      v1.sizes() == v2.sizes(), "distance_loss: the inputs have shapes ",
      detail::shape_str(v1.sizes()), " and ", detail::shape_str(v2.sizes()),
      ", which differ (a broadcast would compare every pair)");
  switch (loss) {
    case DistanceLoss::L1:
      return at::l1_loss(v1, v2, at::Reduction::None);
    case DistanceLoss::L2:
      return at::mse_loss(v1, v2, at::Reduction::None);
    default:
      return at::smooth_l1_loss(v1, v2, at::Reduction::None);
  }
}

at::Tensor total_loss(const TensorDict& losses) {
  at::Tensor sum;
  for (const NestedKey& key : losses.keys()) {
    if (key.front().rfind("loss", 0) != 0) continue;
    const at::Tensor t = losses.get(key);
    sum = sum.defined() ? sum + t : t;
  }
  TORCH_CHECK(sum.defined(), "total_loss: no key starting with \"loss\"");
  return sum;
}

}  // namespace tensordict
