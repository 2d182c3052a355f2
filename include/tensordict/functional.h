// tensordict/functional.h — free functions over TensorDicts: stacking,
// concatenation and arithmetic operators.
//
// `stack` and `cat` allocate a dense result. `stack_out` and `cat_out` write
// into a preallocated dict (for example a slice of a rollout buffer) and
// allocate nothing when `out` already holds every key; missing keys are
// allocated lazily, as for indexed writes. For contiguous CPU leaves of one
// dtype, rows are copied with one fused byte-copy pass instead of one LibTorch
// op per key and input.
//
// All inputs must have the same keys (the error lists which keys are missing
// from which input). For `stack`, leaf shapes must match; for `cat`,
// everything but the cat dim must match.
//
// `stack_out` and `cat_out` are all-or-nothing: every input and every leaf of
// `out` is checked before anything is written. As with LibTorch's `out=`
// ops, an input that shares memory with `out` (a view of the buffer being
// written) is rejected, naming the key: clone it first. `out` must not be
// locked when keys are missing from it, and may not be `td[a][b]` when
// `td[a]` is a copy (see `IndexedTensorDict::operator[]`).
#pragma once

#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Python's `tensordict.pad(td, pad_size, value)`: pads the leading batch
/// dims, `pad_size` holding a (before, after) pair per padded dim, from the
/// first batch dim on (unlike `torch.nn.functional.pad`, which starts from
/// the last dim). Every leaf is padded with `value`; the batch size grows by
/// the padding.
[[nodiscard]] TensorDict pad(const TensorDict& td, c10::IntArrayRef pad_size,
                             double value = 0.0);

/// Python's `tensordict.pad_sequence` (0.4): dicts with the same keys whose
/// leaves differ in length along `pad_dim` (a leaf dim, counted from the
/// end when negative), each leaf padded with `padding_value` to the longest
/// and stacked along a new first dim. The result's batch size is
/// `[N] + tds[0]`'s, with batch dim `pad_dim` set to the longest length
/// (unless `pad_dim` is past some input's batch dims). With `return_mask`,
/// the sub-dict `masks_key` holds, for every leaf key, a bool mask of the
/// input's batch shape (plus the padded dim when it is past the batch dims),
/// padded the same way: true on the real entries.
[[nodiscard]] TensorDict pad_sequence(const std::vector<TensorDict>& tds,
                                      int64_t pad_dim = 0,
                                      double padding_value = 0.0,
                                      bool return_mask = false,
                                      const NestedKey& masks_key = "masks");

/// Stacks `tds` along a new batch dim `dim` (in `[0, batch_dims]`).
///
/// Example:
/// ```
///   std::vector<TensorDict> rows = ...;    // each batch_size []
///   TensorDict batch = tensordict::stack(rows, 0);   // batch_size [N]
/// ```
[[nodiscard]] TensorDict stack(const std::vector<TensorDict>& tds,
                               int64_t dim = 0);
/// Concatenates `tds` along existing batch dim `dim`.
[[nodiscard]] TensorDict cat(const std::vector<TensorDict>& tds,
                             int64_t dim = 0);
/// `stack` into `out`, whose batch size must be the stacked batch size.
/// Returns `out`.
const TensorDict& stack_out(const TensorDict& out,
                            const std::vector<TensorDict>& tds,
                            int64_t dim = 0);
/// `cat` into `out`, whose batch size must be the concatenated batch size.
/// Returns `out`.
const TensorDict& cat_out(const TensorDict& out,
                          const std::vector<TensorDict>& tds, int64_t dim = 0);

/// `stack` into the indexed region of a dict, e.g. one slice of a rollout
/// buffer: `stack_out(buffer[Slice(t0, t1)], rows)` writes like
/// `buffer[Slice(t0, t1)] = stack(rows)`. When `out` is a view (integers,
/// slices) and its parent holds every key, the rows are copied straight into
/// the parent's leaves with no intermediate dict. Keys the parent lacks are
/// allocated in the parent, zero-filled and shaped by the parent's batch
/// size, as for indexed writes (that first call goes through a stacked
/// temporary). Returns a copy of `out` (a cheap handle: `out` is usually a
/// temporary such as `buffer[Slice(t0, t1)]`).
///
/// Example:
/// ```
///   TensorDict buffer({}, {128, 8});
///   stack_out(buffer[Slice(0, 4)], rows);  // rows: 4 dicts of batch [8]
/// ```
IndexedTensorDict stack_out(const IndexedTensorDict& out,
                            const std::vector<TensorDict>& tds,
                            int64_t dim = 0);
/// `cat` into the indexed region of a dict (see the `stack_out` overload
/// above).
IndexedTensorDict cat_out(const IndexedTensorDict& out,
                          const std::vector<TensorDict>& tds, int64_t dim = 0);

// ---- Arithmetic: leaf-wise, with a dict (same keys), a tensor (broadcast
// ---- per leaf) or a scalar. The result has the left operand's batch size.
//
// With a dict, both must have the same leaf keys (the error lists the keys
// missing from each side); matching leaves broadcast as in LibTorch, and
// each result must still start with the left operand's batch size.
//
// A tensor operand is aligned with the *leading* batch dims, as Python
// tensordict aligns masks: its shape must broadcast to the first
// `other.dim()` dims of `batch_size()` (each size equal or 1), and trailing
// singleton dims are appended to match each leaf. So a tensor of shape
// `batch_size()` scales each row of every leaf, and a 0-dim tensor acts like
// a scalar. A tensor with more dims than the batch is rejected.
//
// The out-of-place operators allocate one new tensor per leaf. The in-place
// ones (`+=`, `add_`, ...) write into the existing leaves, which keep their
// identity; they validate every leaf first (the result dtype must cast to
// the leaf's dtype, as for `at::Tensor::add_`; shapes must broadcast; a leaf
// that requires grad cannot be written), so a failed call changes nothing.
// With a dict or a scalar operand, both use LibTorch's `_foreach_` kernels
// over the flat leaf list when no leaf requires grad (and, for two dicts,
// matching leaves have the same shape); a tensor operand, whose view differs
// per leaf, runs one op per leaf.

[[nodiscard]] TensorDict operator+(const TensorDict& a, const TensorDict& b);
[[nodiscard]] TensorDict operator-(const TensorDict& a, const TensorDict& b);
[[nodiscard]] TensorDict operator*(const TensorDict& a, const TensorDict& b);
[[nodiscard]] TensorDict operator/(const TensorDict& a, const TensorDict& b);
[[nodiscard]] TensorDict operator+(const TensorDict& a, const at::Tensor& b);
[[nodiscard]] TensorDict operator-(const TensorDict& a, const at::Tensor& b);
[[nodiscard]] TensorDict operator*(const TensorDict& a, const at::Tensor& b);
[[nodiscard]] TensorDict operator/(const TensorDict& a, const at::Tensor& b);
[[nodiscard]] TensorDict operator+(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator-(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator*(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator/(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator+(const at::Scalar& a, const TensorDict& b);
[[nodiscard]] TensorDict operator*(const at::Scalar& a, const TensorDict& b);
[[nodiscard]] TensorDict operator-(const TensorDict& a);

// In-place: `a += b` is `a.add_(b)`, ... Leaves keep their identity.
const TensorDict& operator+=(const TensorDict& a, const TensorDict& b);
const TensorDict& operator-=(const TensorDict& a, const TensorDict& b);
const TensorDict& operator*=(const TensorDict& a, const TensorDict& b);
const TensorDict& operator/=(const TensorDict& a, const TensorDict& b);
const TensorDict& operator+=(const TensorDict& a, const at::Tensor& b);
const TensorDict& operator-=(const TensorDict& a, const at::Tensor& b);
const TensorDict& operator*=(const TensorDict& a, const at::Tensor& b);
const TensorDict& operator/=(const TensorDict& a, const at::Tensor& b);
const TensorDict& operator+=(const TensorDict& a, const at::Scalar& b);
const TensorDict& operator-=(const TensorDict& a, const at::Scalar& b);
const TensorDict& operator*=(const TensorDict& a, const at::Scalar& b);
const TensorDict& operator/=(const TensorDict& a, const at::Scalar& b);

}  // namespace tensordict
