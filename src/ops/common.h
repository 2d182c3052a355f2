// Helpers that the op files share: checking a batch dim and rebuilding a
// tree with a new batch size (join.cpp, shape.cpp, select.cpp), and flat
// leaf lists with the `_foreach_` kernels' conditions (apply.cpp,
// arithmetic.cpp, reduce.cpp).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <vector>

#include "core/internal.h"
#include "core/tree.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

// Wraps `dim` into [0, n) (n valid positions, negative counting from the
// end). `what` is "a TensorDict" or "TensorDicts".
inline int64_t wrap_dim(const char* op, int64_t dim, int64_t n,
                        c10::IntArrayRef batch,
                        const char* what = "a TensorDict") {
  TORCH_CHECK_INDEX(n > 0, op, ": dim ", dim, " is out of range for ", what,
                    " with batch_size ", shape_str(batch),
                    " (no batch dimensions)");
  TORCH_CHECK_INDEX(dim >= -n && dim < n, op, ": dim ", dim,
                    " is out of range for ", what, " with batch_size ",
                    shape_str(batch), " (expected a dim in [", -n, ", ", n - 1,
                    "])");
  return dim < 0 ? dim + n : dim;
}

// A new tree with `fn(leaf)` on every leaf; the root's batch size becomes
// `batch` (each sub-dict's: `batch` followed by its own extra dims). `dims`
// says where the new batch dims come from, for non-tensor stacks (without
// it, every dim of a stack stays a stack dim).
template <typename Fn>
inline ImplPtr with_batch(const TensorDictImpl& src, c10::IntArrayRef batch,
                          const Fn& fn, const detail::DimMap* dims = nullptr) {
  return detail::rebuild(
      src, batch.vec(),
      [&](const detail::KeyPath&, const at::Tensor& t) { return fn(t); },
      nullptr, detail::NoLevelHook(), detail::NonTensors::kIndex, dims);
}

// The DimMap of an op that removes batch dim `d` (select, squeeze).
inline detail::DimMap removing_dim(const TensorDictImpl& src, int64_t d) {
  detail::DimMap m = detail::DimMap::identity(src.batch_dims());
  m.from.erase(m.from.begin() + d);
  return m;
}

// `shape` followed by `t`'s dims beyond `bd`.
inline std::vector<int64_t> with_trailing(c10::IntArrayRef shape,
                                          const at::Tensor& t, size_t bd) {
  return detail::concat(shape, t.sizes().slice(bd));
}

// ---- flat leaf lists (apply.cpp, arithmetic.cpp, reduce.cpp) ----

using TensorVec = std::vector<at::Tensor>;

inline TensorDict rebuild_dict(const TensorDictImpl& src, TensorVec vals,
                               const char* op) {
  return TensorDictImpl::wrap(rebuild_from(src, std::move(vals), op));
}

// Whether a list may go through a `_foreach_` kernel: LibTorch 1.13 rejects
// empty lists and has no autograd formula for these kernels.
inline bool foreach_ok(const TensorVec& a, const TensorVec* b = nullptr) {
  if (a.empty()) return false;
  if (!at::GradMode::is_enabled()) return true;
  for (const auto& t : a) {
    if (t.requires_grad()) return false;
  }
  if (b != nullptr) {
    for (const auto& t : *b) {
      if (t.requires_grad()) return false;
    }
  }
  return true;
}

// LibTorch 1.13's list-list `_foreach_` kernels require equal shapes.
inline bool same_sizes(const TensorVec& a, const TensorVec& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes()) return false;
  }
  return true;
}

}  // namespace detail
}  // namespace tensordict
