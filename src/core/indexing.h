// Internal: indexing over the batch dims (index normalization, the indexed
// batch shape, row views) shared by reads (`index`, `td[i]`) and writes
// (the write plan).
#pragma once

#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace detail {

/// An index list checked against a dict's batch size.
struct NormalizedIndex {
  using TensorIndex = at::indexing::TensorIndex;
  std::vector<TensorIndex> indices;  // Ellipsis expanded, ints non-negative
  std::vector<int64_t> ints;         // the ints, when all_int
  bool all_int = true;               // only integers
};

/// Checks `indices` against `impl`'s batch size (bounds of integers, number
/// of indexed dims, one ellipsis) and normalizes them.
NormalizedIndex normalize_index(
    const TensorDictImpl& impl,
    c10::ArrayRef<at::indexing::TensorIndex> indices);
/// The batch shape that `norm` selects from `impl`'s batch size.
std::vector<int64_t> indexed_shape(const TensorDictImpl& impl,
                                   const NormalizedIndex& norm);
/// Python's slice arithmetic over a dim of `size`: the first index, the
/// step and the number of elements (0 for a non-positive step).
struct SliceRange {
  int64_t start, step, len;
};
SliceRange slice_range(const at::indexing::Slice& s, int64_t size);
/// Appends a copy of `idx` built from its parts (see indexing.cpp).
void append_index(std::vector<at::indexing::TensorIndex>& v,
                  const at::indexing::TensorIndex& idx);
/// Integer index `i` of `impl`'s dim 0, checked and made non-negative
/// (throws as `normalize_index` does).
int64_t row_index(const TensorDictImpl& impl, int64_t i);
/// `impl[i]` for one integer `i`: a dict of row views.
ImplPtr row_impl(const TensorDictImpl& impl, int64_t i);
/// Row `i` of `t` along dim 0, as `t.select(0, i)` returns it.
at::Tensor row_view(const at::Tensor& t, int64_t i);

}  // namespace detail
}  // namespace tensordict
