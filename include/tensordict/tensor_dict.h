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
// Writes and dtypes. Every write of a tensor into a stored leaf (`td[i] =
// row`, `index_put_`, `set_`, `update_`, `apply_`, `stack_out`/`cat_out`,
// the replay and rollout buffers) casts the value to the stored dtype where
// `c10::canCast` allows it (to the same kind or a higher one: bool, integer,
// floating point, complex), and otherwise throws a TypeError naming the key,
// before anything is written. Python tensordict's `set_`, `update_` and
// `td[0] = row` cast anything (2.7 becomes 2 in an int64 leaf), and its
// `td[index_tensor] = row` casts nothing. In-place arithmetic follows
// LibTorch's promotion (the result type must cast to the leaf's), and scalar
// fills (`fill_`, `masked_fill_`) convert the scalar as `at::Tensor::fill_`
// does.
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
#include <c10/core/Stream.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <type_traits>
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
/// Enables an overload for the types that spell a key: strings and string
/// literals.
template <typename T>
using EnableIfKeyLike =
    std::enable_if_t<std::is_convertible<const T&, std::string>::value, int>;
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

  /// Whether this entry holds a tensor.
  [[nodiscard]] bool is_tensor() const noexcept { return dict_ == nullptr; }
  /// Whether this entry holds a sub-dict (not non-tensor data).
  [[nodiscard]] bool is_tensordict() const noexcept {
    return dict_ != nullptr && !non_tensor_;
  }
  /// Non-tensor data (see `TensorDict::set_non_tensor`).
  [[nodiscard]] bool is_non_tensor() const noexcept { return non_tensor_; }
  /// The tensor. Throws if this entry holds something else.
  [[nodiscard]] const at::Tensor& tensor() const;
  /// The sub-dict. Throws if this entry holds something else.
  [[nodiscard]] TensorDict tensordict() const;
  /// The non-tensor value, as `TensorDict::get_non_tensor` returns it.
  /// Throws if this entry holds something else.
  [[nodiscard]] nlohmann::ordered_json non_tensor() const;

 private:
  friend class TensorDict;
  // A sub-dict, or non-tensor data.
  explicit Entry(std::shared_ptr<detail::TensorDictImpl> dict);
  at::Tensor tensor_;
  std::shared_ptr<detail::TensorDictImpl> dict_;
  bool non_tensor_ = false;
};

/// A `{key, value}` pair, as taken by the constructor.
using Item = std::pair<NestedKey, Entry>;

/// The file names that `memmap_`, `memmap` and `memmap_like` give keys
/// (Python's `robust_key`; tensordict/persistence.h states both forms).
/// Readers take either.
enum class MemmapKeyNames {
  /// Python tensordict >= 0.13's default (`robust_key=True`): each key
  /// escaped ("a b" in `a%20b.memmap`). Python 0.4 to 0.12 read raw names
  /// only and skip the entries whose escaped name differs.
  kEscaped,
  /// Raw where the key is one unambiguous file name ("a b" in
  /// `a b.memmap`), escaped elsewhere ("a/b" in `a%2Fb.memmap`): what every
  /// Python version reads.
  kRaw,
};

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
  TensorDict(const std::vector<Item>& items, c10::IntArrayRef batch_size,
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
  /// The entry at `key`: a leaf, a sub-dict or non-tensor data.
  [[nodiscard]] Entry get_entry(const NestedKey& key) const;

  // ---- Non-tensor data ---------------------------------------------------
  //
  // As in Python tensordict, an entry may hold a value that is not a tensor:
  // a string, a number, a list or a dict, anything JSON holds
  // (`nlohmann::ordered_json`: a dict keeps its key order, as in Python).
  // Such an entry is Python's `NonTensorData`: one value for every element
  // of its batch size, which is its dict's. It is an entry but not a leaf:
  // `keys(true)` lists it, `keys(true, true)` does not, and arithmetic,
  // `apply` and the like leave it as it is. Comparisons follow Python's:
  // `a == b` of two NonTensorData, or of two stacks, is a bool tensor of the
  // batch shape, element by element (Python's `==` on values); of
  // NonTensorData and a stack, or of any entry with a scalar, it holds None
  // for every value. Indexing and reshaping change
  // its batch size and keep its value. `stack`/`cat` of equal values (by
  // Python's `==`) keep one NonTensorData; of different values they make a
  // `NonTensorStack`, a value per element, which indexing and reshaping
  // follow element by element. As in Python, a stack is stacked along some
  // batch dims (the dims `stack` and `cat` joined along); indexing each of
  // them by an integer (`stack(rows)[i]`, `unbind`) leaves NonTensorData of
  // that element's value, while slices and index tensors keep a stack. A
  // stack loaded from disk, or made by a row write, counts every dim as a
  // stack dim, as Python's does. `clone` and `copy` keep it (values are
  // immutable, so copies share them). It prints as Python prints it, and
  // memory-mapped directories hold it in Python's format. As in Python, a
  // row write (`td[i] = row`) of an equal value changes nothing, and of
  // another value makes the entry a stack whose written rows hold the new
  // value; `update_` replaces the value. A memory-mapped dict's value lives
  // in its meta.json: changing it in place is an error. `stack_out`,
  // `cat_out`, `consolidate`, `save`, `pickle_save` and the replay buffer
  // take tensors only and reject non-tensor data.

  /// Stores `value` at `key` as NonTensorData of the holding dict's batch
  /// size and device, replacing any entry there (Python's
  /// `set_non_tensor`). Missing sub-dicts on the path are created. Throws a
  /// ValueError for NaN or an infinity (JSON cannot hold them).
  const TensorDict& set_non_tensor(const NestedKey& key,
                                   const nlohmann::ordered_json& value) const;
  /// The value at `key`: NonTensorData's value, or a NonTensorStack's values
  /// as nested lists over its batch size (Python's `tolist()`). Throws a
  /// TypeError when `key` holds a tensor or a sub-dict.
  [[nodiscard]] nlohmann::ordered_json get_non_tensor(
      const NestedKey& key) const;
  /// Whether `key` names non-tensor data.
  [[nodiscard]] bool is_non_tensor(const NestedKey& key) const;

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
  /// `new_key` is replaced where it stands, as in Python (keys `[c, a, b]`,
  /// `rename_key_("a", "c")`: `[c, b]`); otherwise the entry moves to the end
  /// of its new parent. Throws if `old_key` is missing, or if one key lies
  /// inside the other.
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
  /// left). All-or-nothing: every leaf is validated before any is written,
  /// against everything LibTorch would reject (dtype casts, devices,
  /// autograd's in-place rules, expanded destinations, a value that partly
  /// overlaps its destination such as `td[Slice(0, 5)] = td[Slice(1, 6)]`),
  /// and the error names the key. Allocating a missing key in a locked dict
  /// throws.
  const TensorDict& index_put_(c10::ArrayRef<at::indexing::TensorIndex> indices,
                               const TensorDict& value) const;

  /// `td[i]`: reads like `index({i})`; `td[i] = value` writes like
  /// `index_put_({i}, value)`. Negative `i` counts from the end.
  [[nodiscard]] IndexedTensorDict operator[](int64_t i) const;
  /// `td[Slice(...)]`, `td[mask]`, `td[index_tensor]`, ...
  [[nodiscard]] IndexedTensorDict operator[](
      const at::indexing::TensorIndex& index) const;
  /// `td["obs"]` and `td[{"next", "obs"}]` do not compile: `[]` indexes the
  /// batch dims, and a string is a key, never an index. Read a key with
  /// `get("obs")` and write one with `set("obs", t)` (Python's `td["obs"]`
  /// and `td["obs"] = t`); `torch::indexing::Ellipsis` is the ellipsis.
  template <typename Key, detail::EnableIfKeyLike<Key> = 0>
  IndexedTensorDict operator[](const Key& key_not_index) const = delete;
  IndexedTensorDict operator[](const NestedKey& key_not_index) const = delete;

  // ---- Copies and moves --------------------------------------------------

  /// Every leaf moved to `device`; the result has `device()` set. Leaves
  /// already there are not copied. With `non_blocking`, CPU leaves bound for
  /// a CUDA device (1 MiB or more in all, none requiring grad) are first
  /// copied into pinned memory by LibTorch's intra-op threads, then each is
  /// sent by one asynchronous copy; as with LibTorch's own non-blocking
  /// copies, the values are there for work queued later on the current
  /// stream, and the pinned copies live until their copies complete. To use
  /// the result on another stream, make that stream wait for the current
  /// one, and `record_stream` it there.
  [[nodiscard]] TensorDict to(at::Device device,
                              bool non_blocking = false) const;
  /// Marks every leaf as used by `stream` (`at::Tensor::record_stream` on
  /// each, Python's `record_stream`): when a leaf is freed, LibTorch's
  /// caching allocator reuses its memory only once the work queued on
  /// `stream` by then has completed. Use it when a dict allocated on one
  /// stream is used on another. Every leaf must be on `stream`'s device, an
  /// accelerator; otherwise throws naming the first leaf that is not, and
  /// marks none. Returns `*this`.
  const TensorDict& record_stream(c10::Stream stream) const;
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
  /// Moves every CPU leaf's storage into shared memory, in place (Python's
  /// `share_memory_()`): the tensors keep their identity, values, shapes and
  /// views, but their data moves to a new address (a `/torch_...` segment,
  /// as Python's), which processes forked afterwards share: a write by one
  /// is seen by all. CUDA leaves, leaves already in shared memory and
  /// memory-mapped leaves stay where they are. As in Python, the dict is
  /// then locked. Throws before moving anything when a leaf cannot move
  /// (another device, or no room in /dev/shm). Returns `*this`.
  const TensorDict& share_memory_() const;

  // ---- Splitting (views) ---------------------------------------------------

  /// Slices along batch dim `dim`, like `at::Tensor::unbind`: one dict per
  /// index, each with that dim removed. Leaves are views.
  [[nodiscard]] std::vector<TensorDict> unbind(int64_t dim = 0) const;
  /// Splits batch dim `dim` into chunks of `split_size` (the last may be
  /// smaller). Leaves are views.
  [[nodiscard]] std::vector<TensorDict> split(int64_t split_size,
                                              int64_t dim = 0) const;
  /// Splits batch dim `dim` into chunks of the given sizes, which must sum to
  /// the dim's size. Leaves are views.
  [[nodiscard]] std::vector<TensorDict> split(c10::IntArrayRef split_sizes,
                                              int64_t dim = 0) const;
  /// Splits batch dim `dim` into `chunks` chunks, like `at::Tensor::chunk`.
  [[nodiscard]] std::vector<TensorDict> chunk(int64_t chunks,
                                              int64_t dim = 0) const;

  // ---- Shape ops over the batch dims (feature dims follow on the right) ----
  //
  // Each returns a new dict whose leaves are views wherever LibTorch's op
  // returns views. Dims index the batch dims only (negative counts from the
  // last batch dim).

  /// Reshapes the batch dims to `shape` (one entry may be -1).
  [[nodiscard]] TensorDict reshape(c10::IntArrayRef shape) const;
  /// Like `reshape`, but always a view (throws when it cannot be).
  [[nodiscard]] TensorDict view(c10::IntArrayRef shape) const;
  /// Inserts a batch dim of size 1 at `dim` (in `[-batch_dims-1, batch_dims]`).
  [[nodiscard]] TensorDict unsqueeze(int64_t dim) const;
  /// Removes every batch dim of size 1.
  [[nodiscard]] TensorDict squeeze() const;
  /// Removes batch dim `dim` if its size is 1 (else returns the same shape).
  [[nodiscard]] TensorDict squeeze(int64_t dim) const;
  /// Permutes the batch dims (`dims` is a permutation of them).
  [[nodiscard]] TensorDict permute(c10::IntArrayRef dims) const;
  /// Swaps two batch dims.
  [[nodiscard]] TensorDict transpose(int64_t dim0, int64_t dim1) const;
  /// Flattens batch dims `start_dim..end_dim` into one.
  [[nodiscard]] TensorDict flatten(int64_t start_dim = 0,
                                   int64_t end_dim = -1) const;
  /// Splits batch dim `dim` into `sizes` (one entry may be -1).
  [[nodiscard]] TensorDict unflatten(int64_t dim, c10::IntArrayRef sizes) const;
  /// Expands the batch dims to `shape` (new leading dims, or size-1 dims
  /// broadcast), like `at::Tensor::expand`. Leaves are views.
  [[nodiscard]] TensorDict expand(c10::IntArrayRef shape) const;

  // ---- Apply -------------------------------------------------------------

  /// Leaf function, unary.
  using LeafFn = std::function<at::Tensor(const at::Tensor&)>;
  /// Leaf function over this dict's leaf and the matching leaves of others.
  using LeafFnN = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
  /// Leaf function that also receives the leaf's (nested) key.
  using NamedLeafFn =
      std::function<at::Tensor(const NestedKey&, const at::Tensor&)>;

  /// A new dict with `fn` applied to every leaf (nested dicts recursively,
  /// insertion order kept). A callback that returns an undefined tensor drops
  /// that key. With `batch_size`, the result has that batch size (and its
  /// sub-dicts that batch size plus their own extra dims); otherwise the
  /// result keeps this dict's batch size. The result keeps `device()` only
  /// when every result leaf stays on it.
  ///
  /// Example:
  /// ```
  ///   TensorDict doubled = td.apply([](const at::Tensor& t) { return t * 2; });
  /// ```
  [[nodiscard]] TensorDict apply(
      const LeafFn& fn,
      c10::optional<std::vector<int64_t>> batch_size = c10::nullopt) const;
  /// `fn(x, y)` over this dict's leaves `x` and `other`'s matching leaves `y`
  /// (the same keys are required).
  [[nodiscard]] TensorDict apply(
      const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& fn,
      const TensorDict& other,
      c10::optional<std::vector<int64_t>> batch_size = c10::nullopt) const;
  /// `fn({x, y, ...})` over this dict and every dict of `others`, walked in
  /// lockstep (the same keys are required).
  [[nodiscard]] TensorDict apply(
      const LeafFnN& fn, const std::vector<TensorDict>& others,
      c10::optional<std::vector<int64_t>> batch_size = c10::nullopt) const;
  /// In place: `fn`'s result is copied into each existing leaf, which keeps
  /// its identity (a result that is the leaf itself is not copied; an
  /// undefined result leaves the leaf unchanged). Every result is validated
  /// before any is copied. Returns `*this`.
  const TensorDict& apply_(const LeafFn& fn) const;
  /// Like `apply`, with each leaf's full nested key.
  [[nodiscard]] TensorDict named_apply(
      const NamedLeafFn& fn,
      c10::optional<std::vector<int64_t>> batch_size = c10::nullopt) const;

  // ---- Key manipulation --------------------------------------------------

  /// Sets every entry of `other` into this dict (`set` semantics: tensors are
  /// replaced, sub-dicts are merged key by key, and a sub-dict missing here
  /// is stored by handle). All-or-nothing. Returns `*this`.
  const TensorDict& update(const TensorDict& other) const;
  /// Copies every leaf of `other` into the existing leaf of this dict, in
  /// place (`set_` semantics). All keys must exist; validated before any
  /// write. Returns `*this`.
  const TensorDict& update_(const TensorDict& other) const;
  /// A new dict (same tensors) with only `keys`. Throws on a missing key.
  [[nodiscard]] TensorDict select(const std::vector<NestedKey>& keys) const;
  /// A new dict (same tensors) without `keys` (missing keys are ignored).
  [[nodiscard]] TensorDict exclude(const std::vector<NestedKey>& keys) const;
  /// A flat dict whose keys join nested keys with `sep` (same tensors).
  /// Empty sub-dicts are dropped, as in Python.
  [[nodiscard]] TensorDict flatten_keys(const std::string& sep = ".") const;
  /// The inverse of `flatten_keys`: splits keys at `sep` into nested keys.
  [[nodiscard]] TensorDict unflatten_keys(const std::string& sep = ".") const;
  /// `{key, entry}` pairs, with the same options as `keys()`.
  [[nodiscard]] std::vector<std::pair<NestedKey, Entry>> items(
      bool include_nested = false, bool leaves_only = false) const;
  /// The entries, with the same options as `keys()`.
  [[nodiscard]] std::vector<Entry> values(bool include_nested = false,
                                          bool leaves_only = false) const;

  // ---- In-place arithmetic (foreach kernels over the flat leaf list) -----

  /// In place, leaf by leaf: `this op= other` for a dict `other` (the same
  /// keys; `alpha` scales it, as in `at::add_`), a scalar, or a tensor
  /// aligned to each leaf from the left. Every leaf is checked before any
  /// is written: the result's dtype must cast to the leaf's (LibTorch's
  /// in-place promotion rule). Returns `*this`.
  ///@{
  const TensorDict& add_(const TensorDict& other,
                         const at::Scalar& alpha = 1) const;
  const TensorDict& add_(const at::Scalar& other) const;
  const TensorDict& add_(const at::Tensor& other) const;
  const TensorDict& sub_(const TensorDict& other,
                         const at::Scalar& alpha = 1) const;
  const TensorDict& sub_(const at::Scalar& other) const;
  const TensorDict& sub_(const at::Tensor& other) const;
  const TensorDict& mul_(const TensorDict& other) const;
  const TensorDict& mul_(const at::Scalar& other) const;
  const TensorDict& mul_(const at::Tensor& other) const;
  const TensorDict& div_(const TensorDict& other) const;
  const TensorDict& div_(const at::Scalar& other) const;
  const TensorDict& div_(const at::Tensor& other) const;
  ///@}
  /// In place, leaf by leaf: `this += weight * (end - this)` (LibTorch's
  /// `lerp_`), for a dict `end` of the same keys and a scalar `weight` or a
  /// dict of weights. Leaves are floating-point or complex, and `end`'s (and
  /// the weights') have the leaf's dtype and broadcast to its shape. Checked
  /// for every leaf before any is written. Contiguous CPU float and double
  /// leaves go through one loop over all of them, without LibTorch's
  /// per-call dispatch: `target.lerp_(online, tau)` is a soft target update
  /// (nn.h's `from_module`). Returns `*this`.
  ///@{
  const TensorDict& lerp_(const TensorDict& end,
                          const at::Scalar& weight) const;
  const TensorDict& lerp_(const TensorDict& end,
                          const TensorDict& weight) const;
  ///@}
  /// `lerp_` into a new dict.
  [[nodiscard]] TensorDict lerp(const TensorDict& end,
                                const at::Scalar& weight) const;

  // ---- Masking and reductions --------------------------------------------

  /// Element-wise `cond ? this : other`. `cond` is batch-shaped (or any shape
  /// that broadcasts from the left); it is expanded to each leaf.
  [[nodiscard]] TensorDict where(const at::Tensor& cond,
                                 const TensorDict& other) const;
  /// `cond ? this : other` with a scalar `other`.
  [[nodiscard]] TensorDict where(const at::Tensor& cond,
                                 const at::Scalar& other) const;
  /// Fills the elements under a batch-shaped `mask` with `value` (a copy).
  [[nodiscard]] TensorDict masked_fill(const at::Tensor& mask,
                                       const at::Scalar& value) const;
  /// In-place `masked_fill`.
  const TensorDict& masked_fill_(const at::Tensor& mask,
                                 const at::Scalar& value) const;
  /// Fills the leaf (or every leaf of the sub-dict) at `key` with `value`.
  const TensorDict& fill_(const NestedKey& key, const at::Scalar& value) const;
  /// Sum over every batch dim (the result has batch size []).
  [[nodiscard]] TensorDict sum() const;
  /// Sum over batch dim `dim`.
  [[nodiscard]] TensorDict sum(int64_t dim, bool keepdim = false) const;
  /// Mean over every batch dim. Integer and bool leaves throw a TypeError
  /// naming the key.
  [[nodiscard]] TensorDict mean() const;
  /// Mean over batch dim `dim`.
  [[nodiscard]] TensorDict mean(int64_t dim, bool keepdim = false) const;
  /// Min over every batch dim (`amin`). A dict with no batch dims is
  /// returned with its leaves unchanged.
  [[nodiscard]] TensorDict min() const;
  /// Min over batch dim `dim` (values only).
  [[nodiscard]] TensorDict min(int64_t dim, bool keepdim = false) const;
  /// Max over every batch dim (`amax`), as `min`.
  [[nodiscard]] TensorDict max() const;
  /// Max over batch dim `dim` (values only).
  [[nodiscard]] TensorDict max(int64_t dim, bool keepdim = false) const;
  /// Standard deviation over every batch dim, with `correction` (1:
  /// Bessel's). Integer and bool leaves throw a TypeError naming the key.
  [[nodiscard]] TensorDict std() const;
  /// Standard deviation over batch dim `dim`.
  [[nodiscard]] TensorDict std(int64_t dim, bool keepdim = false,
                               int64_t correction = 1) const;
  /// Variance, as `std`.
  [[nodiscard]] TensorDict var() const;
  /// Variance over batch dim `dim`, as `std`.
  [[nodiscard]] TensorDict var(int64_t dim, bool keepdim = false,
                               int64_t correction = 1) const;
  /// Cumulative sum along batch dim `dim`; the batch size is kept.
  [[nodiscard]] TensorDict cumsum(int64_t dim) const;
  /// The `p`-norm of each leaf over all its elements: a dict of scalar
  /// leaves, batch size [] (Python's `td.norm()`).
  [[nodiscard]] TensorDict norm(const at::Scalar& p = 2) const;

  // ---- Element-wise (Python's semantics, each leaf with LibTorch's op) ------

  /// Every leaf clamped to `[min, max]` (either bound may be unset, not
  /// both).
  [[nodiscard]] TensorDict clamp(
      const c10::optional<at::Scalar>& min,
      const c10::optional<at::Scalar>& max = c10::nullopt) const;
  /// `clamp(min, nullopt)`.
  [[nodiscard]] TensorDict clamp_min(const at::Scalar& min) const;
  /// `clamp(nullopt, max)`.
  [[nodiscard]] TensorDict clamp_max(const at::Scalar& max) const;
  /// The element-wise maximum (minimum) of each leaf and the leaf of
  /// `other` with the same key (the keys must be the same).
  ///@{
  [[nodiscard]] TensorDict maximum(const TensorDict& other) const;
  [[nodiscard]] TensorDict minimum(const TensorDict& other) const;
  ///@}
  /// Element-wise `at::isclose` of each leaf with `other`'s: a dict of bool
  /// leaves.
  [[nodiscard]] TensorDict isclose(const TensorDict& other, double rtol = 1e-5,
                                   double atol = 1e-8,
                                   bool equal_nan = false) const;
  /// True when every leaf is `at::allclose` to `other`'s (same keys; the
  /// leaf shapes must match).
  [[nodiscard]] bool allclose(const TensorDict& other, double rtol = 1e-5,
                              double atol = 1e-8, bool equal_nan = false) const;

  // ---- Selection and repetition (new dicts) --------------------------------

  /// The rows where `mask` (bool, exactly the batch shape) is true, as one
  /// batch dim: batch size `[mask.sum()]` (Python's `masked_select`). A copy.
  [[nodiscard]] TensorDict masked_select(const at::Tensor& mask) const;
  /// Each batch dim `d` repeated `repeats[d]` times (`repeats` has one entry
  /// per batch dim), as `at::Tensor::repeat` on every leaf.
  [[nodiscard]] TensorDict repeat(c10::IntArrayRef repeats) const;
  /// `torch.gather(td, dim, index)` as in Python: `index` (int64, one dim
  /// per batch dim) picks along batch dim `dim`, and becomes the batch size;
  /// each leaf is gathered with `index` expanded over its feature dims.
  [[nodiscard]] TensorDict gather(int64_t dim, const at::Tensor& index) const;
  /// The dict sorted along batch dim `dim` by the values of leaf `key`
  /// (shaped like the batch, or the batch plus trailing dims of size 1);
  /// stable, ascending unless `descending`.
  [[nodiscard]] TensorDict sort(const NestedKey& key, int64_t dim = 0,
                                bool descending = false) const;

  // ---- dtype and autograd --------------------------------------------------

  /// `to(at::kFloat)`: Python's `float()` (a C++ keyword, hence the name).
  [[nodiscard]] TensorDict to_float() const;
  /// `to(at::kDouble)`: Python's `double()`.
  [[nodiscard]] TensorDict to_double() const;
  /// `to(at::kHalf)`.
  [[nodiscard]] TensorDict half() const;
  /// `to(at::kBFloat16)`.
  [[nodiscard]] TensorDict bfloat16() const;
  /// Sets `requires_grad` on every floating-point leaf. Returns `*this`.
  const TensorDict& requires_grad_(bool requires_grad = true) const;
  /// Detaches every leaf in place. Returns `*this`.
  const TensorDict& detach_() const;
  /// Every leaf copied into pinned memory (a leaf already pinned is kept).
  /// Leaves holding 1 MiB or more in all, none requiring grad, are pinned by
  /// LibTorch's intra-op threads at once (Python's `num_threads`). Throws a
  /// clear error when no CUDA device is available.
  [[nodiscard]] TensorDict pin_memory() const;

  // ---- Persistence (see tensordict/persistence.h) -------------------------
  //
  // Python tensordict's memmap directories and a single-file format.
  // tensordict/persistence.h states the formats, what is atomic and what
  // throws.

  /// Moves every leaf into a memory-mapped file under `prefix` (created if
  /// needed), in place. The directory then holds this dict alone: the
  /// entries that an earlier dict stored there (those its meta.json lists,
  /// at every level) and this one does not write are removed, while files
  /// the format does not name stay. Each leaf is replaced by a new tensor
  /// over its file, with the same values (non-CPU leaves are copied to the
  /// CPU). A leaf with no elements gets no
  /// file and stays an ordinary tensor. As in Python, the dict then has
  /// `device() == cpu` at every level and is locked (`is_locked()`): a key
  /// added later would never reach the disk, so adding one is an error
  /// until `unlock_()`. A locked dict may be memory-mapped (no key changes).
  /// Returns `*this`. Throws before writing anything when the dict cannot
  /// be stored, or when `prefix` ends in ".tdz" (an archive cannot hold the
  /// leaves in place: use `memmap`); a failed call leaves the dict
  /// unchanged. `names`: the files' names, escaped as Python 0.14 writes
  /// them, or raw for Python 0.4 to 0.12.
  const TensorDict& memmap_(
      const std::string& prefix,
      MemmapKeyNames names = MemmapKeyNames::kEscaped) const;
  /// A memory-mapped copy under `prefix` (new dict and new tensors over the
  /// files, on the CPU and locked, as `memmap_` leaves a dict); this dict is
  /// unchanged. Same errors as `memmap_`. A `prefix` ending in ".tdz" names
  /// a `.tdz` archive, Python tensordict 0.14's single-file form of the
  /// directory (persistence.h): the result is then, as in Python, a dict of
  /// copy-on-write views into the archive, not locked.
  TensorDict memmap(const std::string& prefix,
                    MemmapKeyNames names = MemmapKeyNames::kEscaped) const;
  /// A memory-mapped dict under `prefix` with this dict's structure, batch
  /// sizes, shapes and dtypes, zero-filled. Only shapes are read and no data
  /// is copied. Typical use: an on-disk buffer from an expanded row,
  /// `row.unsqueeze(0).expand({n})`. Locked, on the CPU.
  ///
  /// The files' space is reserved up front (`posix_fallocate`), so a disk
  /// too small for them is a clear "No space left on device" error here. With
  /// `sparse`, the files are created with holes instead: instant and free
  /// until written, but a disk that fills up later makes a row write through
  /// the mapping die with SIGBUS, which no error can report. A `prefix`
  /// ending in ".tdz" makes a zero-filled archive, and a dict whose writes
  /// reach it (not locked, as in Python).
  [[nodiscard]] TensorDict memmap_like(
      const std::string& prefix, bool sparse = false,
      MemmapKeyNames names = MemmapKeyNames::kEscaped) const;
  /// Opens a memmap directory (written by this library or by Python),
  /// zero-copy: O(number of keys), whatever the data size. Read-write unless
  /// `read_only`; with `read_only` the files are mapped copy-on-write, so
  /// writes into the leaves stay in this process's memory. A dict saved with
  /// a non-CPU device is moved there after mapping (a copy). The result is
  /// locked at every level, like `memmap_`'s. A `prefix` that is a file is
  /// read as a `.tdz` archive (persistence.h): its leaves are views into one
  /// mapping of it, shared or copy-on-write as above, and the dict is not
  /// locked, as in Python.
  [[nodiscard]] static TensorDict load_memmap(const std::string& prefix,
                                              bool read_only = false);
  /// True when this dict was memory-mapped (`saved_path()` is set) and every
  /// leaf with elements still lives in a file mapped by this library
  /// (replacing a leaf with `set` makes it false).
  [[nodiscard]] bool is_memmap() const;
  /// The directory this dict level was memory-mapped to or loaded from (a
  /// sub-dict's is its sub-directory).
  [[nodiscard]] c10::optional<std::string> saved_path() const;

  /// A copy whose leaves are contiguous views into one new uint8 storage
  /// (Python's `consolidate()`), in key order, each leaf at an 8-byte
  /// aligned offset (16 for complex128, so every leaf is a valid typed view),
  /// with zeroed padding. Leaves are detached. Every leaf must be strided and
  /// all on one device (throws otherwise). `to(device)` of a consolidated
  /// dict is a single copy of the storage, with the views rebuilt over the
  /// copy (the result is consolidated too).
  [[nodiscard]] TensorDict consolidate() const;
  /// True when the dict was consolidated and every leaf (sub-dicts included)
  /// still views its storage. Writing into a leaf keeps it consolidated;
  /// replacing one with `set` does not.
  [[nodiscard]] bool is_consolidated() const;
  /// Writes the consolidated form of this dict (reusing the storage when
  /// already consolidated on the CPU) as one file at `path`, written under a
  /// temporary name and renamed into place.
  void save(const std::string& path) const;
  /// Maps a file written by `save` back, zero-copy and consolidated. Writes
  /// into the loaded dict never reach the file.
  [[nodiscard]] static TensorDict load(const std::string& path);

  /// True when both handles refer to the same dict.
  [[nodiscard]] bool is_same(const TensorDict& other) const noexcept {
    return impl_ == other.impl_;
  }

  // ---- Locking (Python's `lock_()`) -----------------------------------------
  //
  // A locked dict keeps its keys and its stored entries: `set`, `erase`,
  // `pop`, `rename_key_`, `update`, `memmap_`, and indexed writes or
  // `stack_out`/`cat_out` that would allocate a missing key all throw,
  // naming the key. Writes into the existing tensors are allowed: `set_`,
  // `update_`, `td[i] = row` for keys it has, in-place arithmetic, `apply_`.
  // Copies (`clone()`, `copy()`, `index()`, ...) are unlocked.

  /// Locks this dict and every sub-dict. Returns `*this`.
  const TensorDict& lock_() const;
  /// Unlocks this dict and every sub-dict. Returns `*this`.
  const TensorDict& unlock_() const;
  /// True when this dict is locked.
  [[nodiscard]] bool is_locked() const;

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
  /// Copies and moves of the proxy (the same index of the same dict).
  ///@{
  IndexedTensorDict(const IndexedTensorDict&) = default;
  IndexedTensorDict(IndexedTensorDict&&) noexcept = default;
  ///@}
  ~IndexedTensorDict();

  /// `td[i] = value`: writes `value` into the indexed region (see
  /// `TensorDict::index_put_`). As with `at::Tensor`'s `t[i] = v`, only the
  /// temporary `td[i]` writes on `=`: after `auto r = td[i];`, `r = value`
  /// does not compile. Say what you mean: `td[i] = value`,
  /// `std::move(r) = value` (a write into `td`), or `TensorDict r = td[i];`
  /// (a dict of views, which `=` rebinds).
  IndexedTensorDict& operator=(const TensorDict& value) &&;
  /// `td[i] = td[j]`: writes the other indexed dict's contents (not a
  /// rebinding).
  IndexedTensorDict& operator=(const IndexedTensorDict& value) &&;
  /// `r = value` on a named proxy (`auto r = td[i];`) does not compile; the
  /// compiler's "use of deleted function" shows this line, which says what
  /// to write.
  template <typename T>
  // clang-format off
  IndexedTensorDict& operator=(T&&) & = delete;  // auto r = td[i]; r = value; writes nothing: say td[i] = value; or std::move(r) = value; or TensorDict r = td[i];
  // clang-format on

  /// The indexed dict (views where LibTorch gives views).
  ///@{
  [[nodiscard]] TensorDict value() const;
  operator TensorDict() const { return value(); }  // NOLINT
  ///@}

  /// True when the index selects a view of the parent (integers, slices,
  /// `None`, `Ellipsis`); false for advanced indices (bool masks, index
  /// tensors), whose `value()` is a copy.
  [[nodiscard]] bool is_view() const;
  /// The dict being indexed.
  [[nodiscard]] const TensorDict& parent() const noexcept { return parent_; }

  /// `value().get(key)`, with the same result and errors; for an integer
  /// index it builds only the view it returns (`td[i].get("obs")` costs one
  /// view, not one per leaf).
  [[nodiscard]] at::Tensor get(const NestedKey& key) const;
  /// Shorthands for `value().f(...)`.
  ///@{
  [[nodiscard]] TensorDict get_tensordict(const NestedKey& key) const;
  [[nodiscard]] std::vector<int64_t> batch_size() const;
  [[nodiscard]] std::vector<NestedKey> keys(bool include_nested = false,
                                            bool leaves_only = false) const;
  [[nodiscard]] bool all() const;
  [[nodiscard]] bool any() const;
  [[nodiscard]] TensorDict clone() const;
  ///@}

  /// Chained indexing, `td[a][b]`. When the two indices compose into one
  /// index of `td` (`a` made of integers, or `a` one slice and `b` an integer
  /// or a slice), the result indexes `td` itself: reading gives views and
  /// `td[a][b] = row` writes into `td`, allocating missing keys there.
  /// Otherwise (for example `a` is a mask, whose result is a copy) the chain
  /// reads as `td[a].value()[b]`, and writing through it throws rather than
  /// write into the copy.
  ///@{
  [[nodiscard]] IndexedTensorDict operator[](int64_t i) const;
  [[nodiscard]] IndexedTensorDict operator[](
      const at::indexing::TensorIndex& index) const;
  ///@}
  /// A string is a key, never an index (see `TensorDict::operator[]`).
  template <typename Key, detail::EnableIfKeyLike<Key> = 0>
  IndexedTensorDict operator[](const Key& key_not_index) const = delete;
  IndexedTensorDict operator[](const NestedKey& key_not_index) const = delete;

 private:
  friend class TensorDict;
  friend struct detail::TensorDictImpl;
  struct IndexList;
  IndexedTensorDict(TensorDict parent, int64_t i);
  IndexedTensorDict(TensorDict parent, std::shared_ptr<const IndexList> list);

  TensorDict parent_;
  int64_t int_index_ = 0;
  std::shared_ptr<const IndexList> list_;  // null: the index is int_index_
  // Set for `td[a][b]` when `a` and `b` do not compose into one index of
  // `td` (e.g. `a` is a mask): `parent_` is then a copy, so writes throw.
  bool chained_ = false;
};

// ---- Comparisons (element-wise, returning dicts of bool leaves) ----------

/// Leaf-wise `==`. Both dicts must have the same keys. Non-tensor entries
/// compare their values as Python does (see "Non-tensor data" above);
/// non-tensor data against a sub-dict, or of another batch size, throws
/// naming the key.
[[nodiscard]] TensorDict operator==(const TensorDict& a, const TensorDict& b);
/// Leaf-wise `!=`, as `==`.
[[nodiscard]] TensorDict operator!=(const TensorDict& a, const TensorDict& b);
/// Every leaf compared with a scalar (non-tensor entries: None values, as
/// in Python).
[[nodiscard]] TensorDict operator==(const TensorDict& a, const at::Scalar& b);
[[nodiscard]] TensorDict operator!=(const TensorDict& a, const at::Scalar& b);

/// Python tensordict's repr, byte for byte.
std::ostream& operator<<(std::ostream& os, const TensorDict& td);

/// Python tensordict's repr of `td` as a string.
[[nodiscard]] std::string repr(const TensorDict& td);

}  // namespace tensordict
