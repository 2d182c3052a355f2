// Internal: the per-env row dicts of a batched env's dicts. Row `i` of a
// dict of batch `[n, *rest]` holds, for every leaf, the view `leaf[i]`:
// what a batched env hands the env of index `i`. The views are made once
// and kept while the parent holds the same tensors under the same keys, so
// that a rollout, whose dicts keep their tensors from step to step, makes
// none per step; a key whose tensor changed (a policy's new action) gets
// new views, and keys that came or went are added or erased.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

class RowViews {
 public:
  /// The rows [begin, end) of parents of batch `[n, *row_batch]`.
  RowViews(int64_t begin, int64_t end, const std::vector<int64_t>& row_batch);
  /// The row dicts of `parent` (every leaf but those under "next"),
  /// `rows[i - begin]` for row `i`.
  const std::vector<TensorDict>& of(const TensorDict& parent);

 private:
  struct Source {
    NestedKey key;
    at::Tensor tensor;  // held, so that its address is not reused
    bool seen = false;
  };
  int64_t begin_;
  std::vector<TensorDict> rows_;
  std::vector<Source> sources_;
};

/// Whether any of the `count` flags from `first` is set (all are when
/// `flags` is null).
inline bool any_of(const bool* flags, int64_t first, int64_t count) {
  if (flags == nullptr) return true;
  for (int64_t i = first; i < first + count; ++i) {
    if (flags[i]) return true;
  }
  return false;
}

}  // namespace detail
}  // namespace tensordict
