// tensordict/lazy_stack.h — Python tensordict's LazyStackedTensorDict: dicts
// stacked along a dim without copying, so their leaves may differ in shape.
//
// `tensordict::stack` copies its inputs into one dense dict, so every leaf
// must have the same shape in every input. A lazy stack keeps the dicts
// themselves (`tensordicts()`), which may hold leaves of different shapes
// and keys of their own: multi-agent observations of different sizes,
// token sequences of different lengths.
// ```
//   TensorDict a({{"obs", at::zeros({3, 2})}, {"reward", at::zeros({3})}}, {3});
//   TensorDict b({{"obs", at::zeros({3, 4})}, {"reward", at::zeros({3})}}, {3});
//   auto s = tensordict::lazy_stack({a, b});   // batch_size [2, 3]
//   at::Tensor r = s.get("reward");            // [2, 3]: stacked on read
//   s.get_list("obs");                         // {[3, 2], [3, 4]}
//   s.get_padded("obs");                       // [2, 3, 4], zero-padded
//   TensorDict first = s[0];                   // a itself
//   s[1] = b_row_values;                       // a write into b, in place
// ```
// The semantics are Python tensordict 0.14's:
//  - The dicts must have the same number of batch dims. The stack's batch
//    size inserts their number at `stack_dim`; a dim on which their batch
//    sizes differ is -1 (0.14 allows that; 0.4 required equal sizes).
//  - Its keys (`keys`, `contains`) are those that every dict holds, with the
//    same kind of entry (a leaf, or a sub-dict); the others are each dict's
//    own ("exclusive fields" in the repr) and are read from that dict.
//  - `get` stacks a leaf whose shapes agree, and throws naming the key and
//    the shapes where they do not; `get_list` and `get_padded` read those.
//  - Indexing follows the dims of the stack. An integer at the stack dim
//    selects one dict (`s[i]` is `tensordicts()[i]` when `stack_dim` is 0);
//    a slice, an index tensor or a mask there selects dicts, and gives a
//    lazy stack of them. The other entries index every dict.
//  - Writes (`s[i] = row`, `index_put_`) go into the dicts in place, with
//    `TensorDict::index_put_`'s rules (a key the dict lacks is allocated),
//    and are all-or-nothing over every dict written.
//  - `to`, `clone`, `apply` and `==` work dict by dict and give lazy stacks;
//    `densify` stacks the shared keys into one dense dict, and
//    `to_padded_tensor` pads them first.
//  - Memory-mapped directories have Python's layout (persistence.h), both
//    ways: a meta.json `{"_type": "<class
//    'tensordict._lazy.LazyStackedTensorDict'>", "stack_dim": d}` and one
//    directory per dict, `0/`, `1/`, ...
//  - It prints as Python prints it.
//
// Not supported: a lazy stack inside a TensorDict (a C++ TensorDict holds
// tensors, dicts and non-tensor data only), nested tensors (`densify` of
// leaves whose shapes differ throws instead of building one), and an index
// with more than one index tensor or mask.
#pragma once

#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

class IndexedLazyStackedTensorDict;

/// Dicts stacked along a dim, lazily (Python's `LazyStackedTensorDict`):
/// see the header comment. A handle, like `TensorDict`: copies share the
/// same dicts.
class LazyStackedTensorDict {
 public:
  /// Stacks `tensordicts` along `stack_dim` (a dim of the result, negative
  /// counting from the end). Throws for an empty list, dicts with different
  /// numbers of batch dims, or a dim out of range.
  explicit LazyStackedTensorDict(std::vector<TensorDict> tensordicts,
                                 int64_t stack_dim = 0);

  // ---- Shape --------------------------------------------------------------

  /// The stacked batch size: the dicts' batch size with their number
  /// inserted at `stack_dim()`, and -1 on a dim where they differ.
  [[nodiscard]] std::vector<int64_t> batch_size() const;
  /// `batch_size().size()`.
  [[nodiscard]] int64_t batch_dims() const;
  /// The dim along which the dicts are stacked (in [0, batch_dims())).
  [[nodiscard]] int64_t stack_dim() const { return stack_dim_; }
  /// The stacked dicts, in order (the stack's own: writes into them are
  /// writes into the stack).
  [[nodiscard]] const std::vector<TensorDict>& tensordicts() const {
    return tds_;
  }
  /// The device every dict has, if they all have the same one.
  [[nodiscard]] c10::optional<at::Device> device() const;

  // ---- Keys ---------------------------------------------------------------

  /// The keys every dict holds, with the same kind of entry in each, in the
  /// first dict's order (`TensorDict::keys`'s flags).
  [[nodiscard]] std::vector<NestedKey> keys(bool include_nested = false,
                                            bool leaves_only = false) const;
  /// True when every dict holds `key`, with the same kind of entry.
  [[nodiscard]] bool contains(const NestedKey& key) const;

  /// The shape `get(key)` would have, with -1 on a dim where the leaves'
  /// sizes differ, and `[-1]` when their numbers of dims differ (Python's
  /// `get_item_shape`). Throws as `get` does for a missing key or a
  /// sub-dict.
  [[nodiscard]] std::vector<int64_t> get_item_shape(const NestedKey& key) const;
  /// The leaves at `key`, stacked along `stack_dim()` (a new tensor). Throws
  /// when a dict lacks the key or holds a sub-dict there, or when the
  /// leaves' shapes differ (naming the key and the shapes: read those with
  /// `get_list` or `get_padded`).
  [[nodiscard]] at::Tensor get(const NestedKey& key) const;
  /// Each dict's leaf at `key` (the stored tensors; Python's `as_list`).
  [[nodiscard]] std::vector<at::Tensor> get_list(const NestedKey& key) const;
  /// The leaves at `key`, each padded at the end of every dim to the largest
  /// size among them with `padding_value`, then stacked (Python's
  /// `as_padded_tensor`). Every leaf must have the same number of dims and
  /// dtype.
  [[nodiscard]] at::Tensor get_padded(const NestedKey& key,
                                      double padding_value = 0.0) const;
  /// The sub-dicts at `key`, as a lazy stack along the same dim.
  [[nodiscard]] LazyStackedTensorDict get_tensordict(
      const NestedKey& key) const;

  // ---- Indexing -----------------------------------------------------------

  /// `s[i]`, `s[i] = value`: index `i` of dim 0 (see
  /// `IndexedLazyStackedTensorDict`).
  [[nodiscard]] IndexedLazyStackedTensorDict operator[](int64_t i) const;
  /// `s[Slice(...)]`, `s[index_tensor]`, `s[mask]`, ...
  [[nodiscard]] IndexedLazyStackedTensorDict operator[](
      const at::indexing::TensorIndex& index) const;
  /// A string is a key, never an index (see `TensorDict::operator[]`).
  template <typename Key, detail::EnableIfKeyLike<Key> = 0>
  IndexedLazyStackedTensorDict operator[](const Key& key_not_index) const =
      delete;
  /// A key is never an index.
  IndexedLazyStackedTensorDict operator[](
      const NestedKey& key_not_index) const = delete;
  /// The lazy stack that `indices` select: an entry for each dim of the
  /// stack, as `at::Tensor::index` takes them (integers, slices, `None`,
  /// `Ellipsis`, one index tensor or mask). Throws when an integer selects a
  /// single dict at the stack dim, whose result is that dict (read it with
  /// `tensordicts()[i].index(...)`, or `s[i]`).
  [[nodiscard]] LazyStackedTensorDict index(
      c10::ArrayRef<at::indexing::TensorIndex> indices) const;
  /// Writes `value` into the region `indices` select, in place, with
  /// `TensorDict::index_put_`'s rules in each dict written. Where the
  /// region keeps the stack dim and `value`'s batch size covers it,
  /// `value` is split along it, one part per dict; otherwise every dict
  /// written gets all of `value`. All-or-nothing: every dict's write is
  /// checked before any is made. Returns `*this`.
  const LazyStackedTensorDict& index_put_(
      c10::ArrayRef<at::indexing::TensorIndex> indices,
      const TensorDict& value) const;

  // ---- Copies and functions -----------------------------------------------

  /// Each dict moved to `device` (`TensorDict::to`).
  [[nodiscard]] LazyStackedTensorDict to(at::Device device,
                                         bool non_blocking = false) const;
  /// Each dict cloned (`TensorDict::clone`).
  [[nodiscard]] LazyStackedTensorDict clone() const;
  /// `fn` applied to every leaf of every dict (`TensorDict::apply`).
  [[nodiscard]] LazyStackedTensorDict apply(const TensorDict::LeafFn& fn) const;
  /// True when every leaf of every dict is all true.
  [[nodiscard]] bool all() const;
  /// True when any leaf of any dict has a true element.
  [[nodiscard]] bool any() const;

  /// One dense dict of the keys every dict holds (`get` for each leaf), with
  /// the stack's batch size. Throws naming the key where leaf shapes differ,
  /// or where the batch sizes differ (use `to_padded_tensor`).
  [[nodiscard]] TensorDict densify() const;
  /// One dense dict of the keys every dict holds, each leaf padded as
  /// `get_padded` pads it; a dim of the batch size where the dicts differ
  /// takes the largest size. With `return_mask`, the result also holds, under
  /// "masks", a bool tensor per leaf (the padded leaf's shape) that is true
  /// where a value comes from a dict rather than from padding (Python's
  /// `pad_sequence(..., return_mask=True)` layout). Throws if a dict holds
  /// "masks" too.
  [[nodiscard]] TensorDict to_padded_tensor(double padding_value = 0.0,
                                            bool return_mask = false) const;

  // ---- Persistence (persistence.h) ------------------------------------------

  /// Memory-maps every dict in place (`TensorDict::memmap_`), in Python's
  /// lazy-stack layout: `prefix/meta.json` names the class and the stack
  /// dim, and dict `i` lives in `prefix/i/`. Every dict is checked before
  /// anything is written, and a directory `prefix/N/` (and beyond) that an
  /// earlier, longer stack left is removed, since Python would load it.
  /// Returns `*this`.
  const LazyStackedTensorDict& memmap_(
      const std::string& prefix,
      MemmapKeyNames names = MemmapKeyNames::kEscaped) const;
  /// A memory-mapped copy under `prefix`, as `memmap_` writes it; this stack
  /// is unchanged.
  [[nodiscard]] LazyStackedTensorDict memmap(
      const std::string& prefix,
      MemmapKeyNames names = MemmapKeyNames::kEscaped) const;
  /// Opens a lazy-stack directory written by this library or by Python
  /// (zero-copy; `TensorDict::load_memmap`'s rules for each dict).
  [[nodiscard]] static LazyStackedTensorDict load_memmap(
      const std::string& prefix, bool read_only = false);

 private:
  std::vector<TensorDict> tds_;
  int64_t stack_dim_ = 0;
};

/// `lazy_stack(tds, dim)`: Python's `LazyStackedTensorDict.lazy_stack`.
[[nodiscard]] LazyStackedTensorDict lazy_stack(std::vector<TensorDict> tds,
                                               int64_t dim = 0);
namespace detail {
LazyStackedTensorDict cat_lazy(const std::vector<LazyStackedTensorDict>& stacks,
                               int64_t dim);
LazyStackedTensorDict stack_lazy(
    const std::vector<LazyStackedTensorDict>& stacks, int64_t dim);
template <typename T>
using EnableIfLazy =
    std::enable_if_t<std::is_same<T, LazyStackedTensorDict>::value, int>;
}  // namespace detail

/// Concatenates lazy stacks along `dim`. Along their stack dim (which must
/// be the same for all) the result stacks all their dicts; along another
/// dim, it concatenates their dicts one by one (`tensordict::cat`), so every
/// stack must hold the same number of dicts. (A template, so that
/// `tensordict::cat({})` still means the dicts' `cat`: pass a
/// `std::vector<LazyStackedTensorDict>`.)
template <typename T, detail::EnableIfLazy<T> = 0>
[[nodiscard]] LazyStackedTensorDict cat(const std::vector<T>& stacks,
                                        int64_t dim = 0) {
  return detail::cat_lazy(stacks, dim);
}
/// Stacks lazy stacks along a new `dim`, dict by dict: dict `k` of the
/// result is `tensordict::stack` of dict `k` of each stack, so every stack
/// must hold the same number of dicts along the same stack dim. (Python
/// nests the lazy stacks instead; the values read are the same.) A
/// template, as `cat`.
template <typename T, detail::EnableIfLazy<T> = 0>
[[nodiscard]] LazyStackedTensorDict stack(const std::vector<T>& stacks,
                                          int64_t dim = 0) {
  return detail::stack_lazy(stacks, dim);
}

/// The result of `s[index]`: reads as the dict (`TensorDict`) or the lazy
/// stack (`LazyStackedTensorDict`) the index selects, and assignment writes
/// into the stack's dicts (`LazyStackedTensorDict::index_put_`).
///
/// ```
///   TensorDict agent0 = s[0];                // an integer at the stack dim
///   LazyStackedTensorDict two = s[Slice(0, 2)];
///   s[0] = row;                              // a write into agent 0's dict
/// ```
class IndexedLazyStackedTensorDict {
 public:
  /// Copies of the proxy (the same index of the same stack).
  ///@{
  IndexedLazyStackedTensorDict(const IndexedLazyStackedTensorDict&) = default;
  IndexedLazyStackedTensorDict(IndexedLazyStackedTensorDict&&) noexcept =
      default;
  ///@}
  ~IndexedLazyStackedTensorDict() = default;
  /// Not assignable as a handle; only the temporary writes (see below).
  IndexedLazyStackedTensorDict& operator=(
      const IndexedLazyStackedTensorDict&) & = delete;

  /// `s[i] = value`: `index_put_`. As with `IndexedTensorDict`, only the
  /// temporary `s[i]` writes.
  IndexedLazyStackedTensorDict& operator=(const TensorDict& value) &&;

  /// The dict an integer at the stack dim selects (the stack's own dict
  /// when the index is that integer alone; otherwise that dict indexed by
  /// the rest). Throws if the index keeps the stack dim.
  [[nodiscard]] TensorDict member() const;
  /// The lazy stack the index selects (`LazyStackedTensorDict::index`).
  [[nodiscard]] LazyStackedTensorDict value() const;
  /// `member()`.
  operator TensorDict() const { return member(); }  // NOLINT
  /// `value()`.
  operator LazyStackedTensorDict() const { return value(); }  // NOLINT

 private:
  friend class LazyStackedTensorDict;
  IndexedLazyStackedTensorDict(LazyStackedTensorDict parent,
                               std::vector<at::indexing::TensorIndex> index)
      : parent_(std::move(parent)), index_(std::move(index)) {}

  LazyStackedTensorDict parent_;
  std::vector<at::indexing::TensorIndex> index_;
};

/// Dict by dict `==`: a lazy stack of bool dicts. The stacks must hold the
/// same number of dicts along the same stack dim.
[[nodiscard]] LazyStackedTensorDict operator==(const LazyStackedTensorDict& a,
                                               const LazyStackedTensorDict& b);
/// Dict by dict `!=`, as `==`.
[[nodiscard]] LazyStackedTensorDict operator!=(const LazyStackedTensorDict& a,
                                               const LazyStackedTensorDict& b);

/// Python tensordict's repr of a lazy stack, byte for byte.
std::ostream& operator<<(std::ostream& os, const LazyStackedTensorDict& s);
/// Python tensordict's repr of `s` as a string.
[[nodiscard]] std::string repr(const LazyStackedTensorDict& s);

}  // namespace tensordict
