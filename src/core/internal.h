// Internal definitions shared by the library's translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/FunctionRef.h>

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/names.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

/// One entry of a dict: a tensor leaf, or a sub-dict when `dict` is set.
struct Node {
  std::string key;
  at::Tensor tensor;
  std::shared_ptr<TensorDictImpl> dict;

  [[nodiscard]] bool is_dict() const noexcept { return dict != nullptr; }
  /// A sub-dict that stands for non-tensor data (see TensorDictImpl).
  [[nodiscard]] inline bool is_non_tensor() const noexcept;
};

struct NonTensor;  // core/non_tensor.h

struct TensorDictImpl {
  std::vector<int64_t> batch_size;
  c10::optional<at::Device> device;
  std::vector<Node> nodes;  // insertion order
  /// The directory this level was memory-mapped to or loaded from (memmap.cpp).
  c10::optional<std::string> saved_path;
  /// The uint8 buffer that the leaves view when this dict was consolidated
  /// (every level of a consolidated tree holds the same buffer). The dict is
  /// consolidated while every leaf still lives in its storage.
  at::Tensor consolidated;
  /// Set by `lock_()`: keys may not be added, removed, renamed or replaced.
  bool locked = false;
  /// Set on a level that stands for non-tensor data (Python's NonTensorData
  /// or NonTensorStack, core/non_tensor.h). As in Python, where these are
  /// tensor collections, it is a sub-dict without entries whose batch size is
  /// the data's: walks over leaves see nothing in it, `rebuild` carries it
  /// (indexing and reshaping change its batch size), and only the code that
  /// reads or writes values (printing, set/get, stacking, row writes,
  /// memmap) looks at it.
  std::shared_ptr<const NonTensor> non_tensor;

  [[nodiscard]] Node* find(const std::string& key) noexcept {
    for (auto& n : nodes) {
      if (n.key == key) return &n;
    }
    return nullptr;
  }
  [[nodiscard]] const Node* find(const std::string& key) const noexcept {
    return const_cast<TensorDictImpl*>(this)->find(key);
  }
  [[nodiscard]] int64_t batch_dims() const noexcept {
    return static_cast<int64_t>(batch_size.size());
  }
  /// A handle on `impl` (TensorDict's constructor from an impl is private).
  static TensorDict wrap(std::shared_ptr<TensorDictImpl> impl) {
    return TensorDict(std::move(impl));
  }
  /// The implementation behind a handle.
  static TensorDictImpl& of(const TensorDict& td) { return *td.impl_; }
  /// Whether writes through `td[a][b]` would reach a copy (see
  /// IndexedTensorDict::operator[]).
  static bool is_chained_copy(const IndexedTensorDict& indexed) {
    return indexed.chained_;
  }
};

using ImplPtr = std::shared_ptr<TensorDictImpl>;

inline bool Node::is_non_tensor() const noexcept {
  return dict != nullptr && dict->non_tensor != nullptr;
}

// ---- Helpers shared by the library's translation units (tensor_dict.cpp) --

/// A new, empty dict implementation.
ImplPtr make_impl(std::vector<int64_t> batch_size,
                  c10::optional<at::Device> device);
/// `a + b` as shapes.
std::vector<int64_t> concat(c10::IntArrayRef a, c10::IntArrayRef b);
/// Whether `shape` starts with `prefix`.
bool starts_with(c10::IntArrayRef shape, c10::IntArrayRef prefix);
/// Checks that `value` (to be set at `key`) is defined and its leading dims
/// are `batch`; errors start with `context` (such as "from_ivalue: ").
void check_leading_dims(const NestedKey& key, const at::Tensor& value,
                        c10::IntArrayRef batch, const char* context = "");
/// `cuda` becomes `cuda:0`; other devices are unchanged.
at::Device normalize_device(at::Device d);
/// `normalize_device(d)`, checked to be one this process can use: throws
/// "<op>: device cuda:0 is not available: this LibTorch was built without
/// CUDA support" (or "...: this machine has 1 CUDA device") rather than let
/// the first tensor op on it fail in LibTorch's dispatcher.
at::Device usable_device(const char* op, at::Device d);
/// `prefix + key`, or `key` when `prefix` is null.
NestedKey prefixed(const NestedKey* prefix, const std::string& key);
/// The keys of `impl` (see TensorDict::keys), each prefixed by `prefix`.
void collect_keys(const TensorDictImpl& impl, const NestedKey* prefix,
                  bool include_nested, bool leaves_only,
                  std::vector<NestedKey>& out);
/// `key` split at each `sep` ("a.b" -> a, b); `key` whole for an empty
/// `sep`.
std::vector<std::string> split_key(const std::string& key,
                                   const std::string& sep);
/// "[a, ('next', 'obs')]".
std::string key_vec_str(const std::vector<NestedKey>& keys);
/// "[a, next, ('next', 'obs')]": every key, nested ones included.
std::string key_list_str(const TensorDictImpl& impl);
/// The node at `key`, or null when a component is missing.
const Node* lookup(const TensorDictImpl& root, const NestedKey& key);
/// The dict holding the last component of `key`, or null.
TensorDictImpl* parent_of(TensorDictImpl& root, const NestedKey& key);
/// The node at `key`; throws (listing the keys) when it is missing.
const Node& lookup_or_throw(const TensorDictImpl& root, const NestedKey& key);
/// Throws unless `dict` is unlocked: `op` would add, remove, rename or
/// replace the entry at `key` (null: the whole dict).
void check_unlocked(const TensorDictImpl& dict, const char* op,
                    const NestedKey* key);
inline void check_unlocked(const TensorDictImpl& dict, const char* op,
                           const NestedKey& key) {
  check_unlocked(dict, op, &key);
}
/// The key of the `i`-th leaf of `root`, in `keys(true, true)` order (for
/// error messages).
NestedKey leaf_key(const TensorDictImpl& root, size_t i);
/// Whether `target` is `from` or one of its sub-dicts.
bool reaches(const TensorDictImpl& from, const TensorDictImpl* target);
/// New dict structure (every level, each keeping its batch size and device),
/// same tensors.
ImplPtr shallow_copy(const TensorDictImpl& src);

/// True for a CUDA tensor or one whose storage is in shared memory.
bool tensor_is_shared(const at::Tensor& t);
/// `TensorDict::is_shared` of the dict `impl`.
bool is_shared(const TensorDictImpl& impl);

/// The rows `index` (int64, 1-D, contiguous CPU; in range) of batch dim 0 of
/// every leaf of `src`, as a new tree of batch size `[index.size(0), ...]`:
/// byte copies of the rows where the row-copy layer allows them
/// (core/row_copy.h), LibTorch's `index_select` for every other leaf. Shared
/// by the replay buffer's `sample` and the rollout buffer's `minibatches`.
ImplPtr gather_rows(const TensorDictImpl& src, const at::Tensor& index);
/// `gather_rows` at the `n` indices that `draw` writes into `index` (CPU
/// int64 [n]), which shares one allocation with the gathered CPU rows.
ImplPtr gather_rows(const TensorDictImpl& src, int64_t n,
                    c10::function_ref<void(int64_t*)> draw, at::Tensor& index);

/// True when `impl` has a consolidated buffer (io/consolidate.cpp) and every
/// leaf (sub-dicts included) lives in its storage.
bool is_consolidated_impl(const TensorDictImpl& impl);

// ---- What core asks of io/ -------------------------------------------------

/// The persistence layer sits below core (docs/architecture.md, "Layers"),
/// yet two things core does depend on it: whether a tensor is one of its
/// file mappings, and moving a consolidated dict as one buffer. io/
/// registers these functions from static initializers of the files that
/// define them (io/files.cpp, io/consolidate.cpp). A program that does not
/// link those files has no mapped tensor and no consolidated dict, since
/// only they make them; so an unset hook's answer ("not mapped", "not
/// consolidated") is then the true one.
struct IoHooks {
  /// Whether `t`'s storage is a file mapping made by io/ (a memmap leaf's
  /// file, or a file of `TensorDict::save`), not a `.tdz` archive's.
  bool (*is_mapped_tensor)(const at::Tensor& t) = nullptr;
  /// `to(device)` of a consolidated dict: one copy of the buffer, then the
  /// leaves rebuilt as views into the copy.
  ImplPtr (*consolidated_to)(const TensorDictImpl& impl, at::Device device,
                             bool non_blocking) = nullptr;
};
IoHooks& io_hooks();

}  // namespace detail
}  // namespace tensordict
