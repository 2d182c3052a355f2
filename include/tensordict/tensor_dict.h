// tensordict/tensor_dict.h — the TensorDict container.
//
// A `TensorDict` maps string keys to tensors ("leaves") or to sub-TensorDicts,
// in insertion order. Every leaf's leading dimensions equal the dict's
// `batch_size()`, so an index over the batch dimensions applies to every leaf
// at once. It is the C++ counterpart of Python's `tensordict.TensorDict`.
//
// Handle semantics. A `TensorDict` is a cheap handle to shared state, like
// `at::Tensor`: copying the handle aliases the same dict, and a sub-dict
// obtained with `get_tensordict()` is the parent's own child, so writing into
// it changes the parent. As with `at::Tensor`, `const` on the handle is
// shallow: methods that change the dict's contents are `const` too. Use
// `clone()` for a deep copy (new tensors) and `copy()` for a shallow one (new
// dict structure, same tensors).
//
// Views and copies. `index()` and `td[i]` return a new dict whose leaves are
// views of this dict's leaves wherever `at::Tensor::index` returns views
// (integers, slices, `None`, `Ellipsis`); advanced indexing (bool masks, index
// tensors) copies, exactly as it does for a tensor. `get()` returns the stored
// tensor itself, not a copy.
//
// Lazy preallocation. `td[i] = row` (or `index_put_`) on a dict that lacks
// some of `row`'s keys allocates one zero-filled buffer per missing key,
// shaped `batch_size() + leaf.shape[row.batch_dims():]`, then writes the
// indexed region. Later writes go into the same buffers in place: the stored
// tensors keep their identity. A write validates every leaf before it writes
// any, so a failed write leaves the dict exactly as it was.
//
// Thread safety. Like `at::Tensor`, a TensorDict is not synchronized: concurrent
// reads are fine, a write concurrent with any other access is a data race.
//
// Errors are reported with `TORCH_CHECK` and its variants (`c10::Error` and
// subclasses) and name the key and the shapes involved.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/nested_key.h"

namespace at {
namespace indexing {
struct TensorIndex;
}  // namespace indexing
}  // namespace at

namespace tensordict {

class TensorDict;
class IndexedTensorDict;

namespace detail {
struct TensorDictImpl;
}  // namespace detail

/// One value of a TensorDict: a tensor leaf or a sub-TensorDict.
///
/// Built implicitly from either, so that constructors can take
/// `{{"obs", tensor}, {"next", sub_dict}}`.
class Entry {
 public:
  /// A tensor leaf.
  Entry(at::Tensor tensor);  // NOLINT(google-explicit-constructor)
  /// A sub-dict (the same dict: the handle is shared, not copied).
  Entry(const TensorDict& dict);  // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool is_tensor() const noexcept { return dict_ == nullptr; }
  [[nodiscard]] bool is_tensordict() const noexcept {
    return dict_ != nullptr;
  }
  /// The tensor. Throws if this entry holds a sub-dict.
  [[nodiscard]] const at::Tensor& tensor() const;
  /// The sub-dict. Throws if this entry holds a tensor.
  [[nodiscard]] TensorDict tensordict() const;

 private:
  friend class TensorDict;
  explicit Entry(std::shared_ptr<detail::TensorDictImpl> dict);
  at::Tensor tensor_;
  std::shared_ptr<detail::TensorDictImpl> dict_;
};

/// A `{key, value}` pair, as taken by the constructor.
using Item = std::pair<NestedKey, Entry>;

/// A keyed, nested container of tensors that share leading batch dimensions.
///
/// Example:
/// ```
///   TensorDict td({{"obs", torch::zeros({4, 3})},
///                  {{"next", "obs"}, torch::zeros({4, 3})}},
///                 {4});
///   td.get({"next", "obs"});          // the stored [4, 3] tensor
///   TensorDict row = td[0];           // views, batch_size []
///   td[1] = row;                      // in-place write of row 1
/// ```
class TensorDict {
 public:
  /// An empty dict with no batch dimensions.
  TensorDict();
  /// A dict holding `items` (in order), with the given batch size. Every
  /// tensor's leading dims must equal `batch_size`, and every sub-dict's batch
  /// size must start with it. With `device`, every leaf is moved there.
  ///
  /// `TensorDict({}, {N, 3})` is an empty dict with batch size `[N, 3]`;
  /// `TensorDict(items, {})` has no batch dimensions.
  TensorDict(std::vector<Item> items, c10::IntArrayRef batch_size,
             c10::optional<at::Device> device = c10::nullopt);
  /// An empty dict with the given batch size.
  explicit TensorDict(c10::IntArrayRef batch_size);
  /// An empty dict with the given batch size and device.
  TensorDict(c10::IntArrayRef batch_size, at::Device device);

  // ---- Shape and device --------------------------------------------------

  /// The shared leading dims of every leaf.
  [[nodiscard]] c10::IntArrayRef batch_size() const;
  /// `batch_size().size()`.
  [[nodiscard]] int64_t batch_dims() const;
  /// The product of `batch_size()` (1 for no batch dims).
  [[nodiscard]] int64_t numel() const;
  /// The dict's device, if it has one. Leaves of a dict with a device all
  /// live on it.
  [[nodiscard]] c10::optional<at::Device> device() const;

  // ---- Keys --------------------------------------------------------------

  /// Number of top-level keys.
  [[nodiscard]] size_t size() const;
  /// True when the dict has no keys.
  [[nodiscard]] bool empty() const;
  /// True when `key` names an entry (a leaf or a sub-dict).
  [[nodiscard]] bool contains(const NestedKey& key) const;
  /// The keys, in insertion order. With `include_nested`, each sub-dict's key
  /// is followed by its own keys (as nested keys); `leaves_only` drops the
  /// keys of sub-dicts themselves.
  [[nodiscard]] std::vector<NestedKey> keys(bool include_nested = false,
                                           bool leaves_only = false) const;

  /// The stored tensor at `key` (not a copy). Nested keys walk sub-dicts.
  /// Throws if the key is missing (listing the available keys) or names a
  /// sub-dict.
  [[nodiscard]] at::Tensor get(const NestedKey& key) const;
  /// The sub-dict at `key`: the parent's own child, so writes into it are
  /// writes into this dict. Throws if missing or a tensor.
  [[nodiscard]] TensorDict get_tensordict(const NestedKey& key) const;
  /// The entry at `key`, leaf or sub-dict.
  [[nodiscard]] Entry get_entry(const NestedKey& key) const;

  /// Stores `value` at `key`, replacing any tensor already there (it does not
  /// copy into it: see `set_`). Missing intermediate sub-dicts of a nested key
  /// are created with the parent's batch size. The tensor's leading dims must
  /// equal the batch size of the dict that will hold it, and it is moved to
  /// `device()` when the dict has one. Throws if a sub-dict lives at `key`.
  /// Returns `*this`.
  const TensorDict& set(const NestedKey& key, const at::Tensor& value) const;
  /// Stores the sub-dict `value` at `key` (the same dict, not a copy, unless it
  /// must be moved to `device()`). Its batch size must start with the batch
  /// size of the dict that will hold it. Throws if a tensor lives at `key`.
  const TensorDict& set(const NestedKey& key, const TensorDict& value) const;
  /// Copies `value` into the existing tensor at `key`, in place: the stored
  /// tensor keeps its identity. `value` must have the dict's leading dims and
  /// broadcast to the stored shape. Throws if the key is missing.
  const TensorDict& set_(const NestedKey& key, const at::Tensor& value) const;

  /// Removes `key`. Throws if it is missing.
  void erase(const NestedKey& key) const;
  /// Removes `key` and returns what it held. Throws if it is missing.
  Entry pop(const NestedKey& key) const;
  /// Renames `old_key` to `new_key` (which may be nested). An entry already at
  /// `new_key` is replaced. Throws if `old_key` is missing.
  const TensorDict& rename_key_(const NestedKey& old_key,
                                const NestedKey& new_key) const;

  // ---- Indexing over the batch dims --------------------------------------

  /// Indexes every leaf over the batch dims, with the same index list as
  /// `at::Tensor::index`. Returns a new dict whose batch size is the indexed
  /// batch shape; leaves are views wherever LibTorch returns views.
  /// Throws for a dict with no batch dims and for out-of-range indices.
  [[nodiscard]] TensorDict index(
      c10::ArrayRef<at::indexing::TensorIndex> indices) const;
  /// Writes `value` into the indexed region of every leaf (see the header
  /// comment for lazy preallocation). `value.batch_size()` must equal the
  /// indexed batch shape, or be a suffix of it (it then broadcasts from the
  /// left). All-or-nothing: every leaf is validated before any is written.
  const TensorDict& index_put_(c10::ArrayRef<at::indexing::TensorIndex> indices,
                               const TensorDict& value) const;

  /// `td[i]`: reads like `index({i})`; `td[i] = value` writes like
  /// `index_put_({i}, value)`. Negative `i` counts from the end.
  [[nodiscard]] IndexedTensorDict operator[](int64_t i) const;
  /// `td[Slice(...)]`, `td[mask]`, `td[index_tensor]`, ...
  [[nodiscard]] IndexedTensorDict operator[](
      const at::indexing::TensorIndex& index) const;

  // ---- Copies and moves --------------------------------------------------

  /// Every leaf moved to `device`; the result has `device()` set. Leaves
  /// already there are not copied.
  [[nodiscard]] TensorDict to(at::Device device,
                              bool non_blocking = false) const;
  /// Every leaf cast to `dtype` (leaves of that dtype are not copied).
  [[nodiscard]] TensorDict to(at::ScalarType dtype) const;
  /// `to(at::kCPU)`.
  [[nodiscard]] TensorDict cpu() const;
  /// A deep copy: new dict structure and new tensors.
  [[nodiscard]] TensorDict clone() const;
  /// A shallow copy: new dict structure (sub-dicts too), same tensors.
  [[nodiscard]] TensorDict copy() const;
  /// Every leaf made contiguous (contiguous leaves are not copied).
  [[nodiscard]] TensorDict contiguous() const;
  /// Every leaf detached from the autograd graph (shares storage).
  [[nodiscard]] TensorDict detach() const;
  /// Zero-fills every leaf in place.
  const TensorDict& zero_() const;

  // ---- Reductions over comparison results --------------------------------

  /// True when every element of every leaf is non-zero (true for no leaves).
  [[nodiscard]] bool all() const;
  /// True when some element of some leaf is non-zero.
  [[nodiscard]] bool any() const;

  /// True when the dict is on CUDA or every leaf lives in shared memory.
  [[nodiscard]] bool is_shared() const;

  /// True when both handles refer to the same dict.
  [[nodiscard]] bool is_same(const TensorDict& other) const noexcept {
    return impl_ == other.impl_;
  }

  /// The implementation, for library internals.
  [[nodiscard]] detail::TensorDictImpl& impl() const { return *impl_; }

 private:
  friend class Entry;
  friend class IndexedTensorDict;
  friend struct detail::TensorDictImpl;
  explicit TensorDict(std::shared_ptr<detail::TensorDictImpl> impl);

  std::shared_ptr<detail::TensorDictImpl> impl_;
};

/// The result of `td[index]`: reads as the indexed dict, and assignment writes
/// into the indexed region of `td` (lazily preallocating missing keys).
///
/// Converting to `TensorDict` computes the indexed view; assigning never
/// does, so `td[i] = row` costs only the copy.
///
/// Example:
/// ```
///   td[i] = row;                  // index_put_
///   TensorDict r = td[i];         // index
///   bool same = (td[i] == r).all();
/// ```
class IndexedTensorDict {
 public:
  IndexedTensorDict(const IndexedTensorDict&) = default;
  IndexedTensorDict(IndexedTensorDict&&) noexcept = default;
  ~IndexedTensorDict();

  /// Writes `value` into the indexed region (see `TensorDict::index_put_`).
  IndexedTensorDict& operator=(const TensorDict& value);
  /// Writes the other indexed dict's contents (not a rebinding).
  IndexedTensorDict& operator=(const IndexedTensorDict& value);
  IndexedTensorDict& operator=(IndexedTensorDict&& value);

  /// The indexed dict (views where LibTorch gives views).
  [[nodiscard]] TensorDict value() const;
  operator TensorDict() const { return value(); }  // NOLINT

  /// Shorthands for `value().f(...)`.
  [[nodiscard]] at::Tensor get(const NestedKey& key) const;
  [[nodiscard]] TensorDict get_tensordict(const NestedKey& key) const;
  [[nodiscard]] std::vector<int64_t> batch_size() const;
  [[nodiscard]] std::vector<NestedKey> keys(bool include_nested = false,
                                           bool leaves_only = false) const;
  [[nodiscard]] bool all() const;
  [[nodiscard]] bool any() const;
  [[nodiscard]] TensorDict clone() const;
  [[nodiscard]] IndexedTensorDict operator[](int64_t i) const;
  [[nodiscard]] IndexedTensorDict operator[](
      const at::indexing::TensorIndex& index) const;

 private:
  friend class TensorDict;
  struct IndexList;
  IndexedTensorDict(TensorDict parent, int64_t i);
  IndexedTensorDict(TensorDict parent, std::shared_ptr<const IndexList> list);

  TensorDict parent_;
  int64_t int_index_ = 0;
  std::shared_ptr<const IndexList> list_;  // null: the index is int_index_
};

// ---- Comparisons (element-wise, returning dicts of bool leaves) ----------

/// Leaf-wise `==`. Both dicts must have the same keys.
[[nodiscard]] TensorDict operator==(const TensorDict& a, const TensorDict& b);
/// Leaf-wise `!=`. Both dicts must have the same keys.
[[nodiscard]] TensorDict operator!=(const TensorDict& a, const TensorDict& b);
/// Every leaf compared with a scalar.
[[nodiscard]] TensorDict operator==(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator!=(const TensorDict& a, const at::Scalar& b);

/// Python tensordict's repr, byte for byte.
std::ostream& operator<<(std::ostream& os, const TensorDict& td);

/// Python tensordict's repr of `td` as a string.
[[nodiscard]] std::string repr(const TensorDict& td);

}  // namespace tensordict
