// Internal: the checks that every in-place write into stored leaves passes
// before the first byte of the write is written.
//
// A write into a dict touches many leaves; LibTorch validates one leaf at a
// time, as it writes it. So a write that LibTorch rejects at its third leaf
// would leave the first two written. Every write path of the library (indexed
// writes, stack_out/cat_out, update_, set_, apply_, in-place arithmetic,
// masked_fill_, fill_, zero_) therefore runs `check_leaf_write` over every
// leaf first, and writes only once all of them pass. The function mirrors
// what LibTorch would reject: autograd's rules for in-place writes (leaves
// and views of leaves that require grad, views made in no-grad mode),
// inference tensors, destinations with internal overlap (expanded tensors),
// devices, and sources that overlap the destination. Dtype rules differ per
// write (copy_ casts anything, index_put_ needs a cast `c10::canCast`
// allows, in-place ops need the promoted type to fit) and stay with them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>

#include "tensordict/nested_key.h"

namespace tensordict {
namespace detail {

struct TensorDictImpl;

/// The key named in an error, computed only when a check fails: a nested key,
/// or the `leaf`-th leaf (in `keys(true, true)` order) of `root`, optionally
/// under `prefix`.
class LeafName {
 public:
  LeafName(const NestedKey& key) : key_(&key) {}  // NOLINT
  LeafName(const TensorDictImpl& root, size_t leaf,
           const NestedKey* prefix = nullptr)
      : root_(&root), leaf_(leaf), key_(prefix) {}
  [[nodiscard]] std::string str() const;

 private:
  const TensorDictImpl* root_ = nullptr;
  size_t leaf_ = 0;
  const NestedKey* key_ = nullptr;
};

/// How a write reads its source.
enum class WriteKind {
  /// `dest.copy_(src)`: CPU <-> CUDA copies allowed; `src` may not overlap
  /// `dest` partially.
  kCopy,
  /// An in-place op such as `dest.add_(src)`: `src` lives on `dest`'s device
  /// (or is a 0-dim CPU tensor), and may not overlap `dest` partially.
  kOp,
  /// An `out=` write (stack_out, cat_out) or an advanced-index write
  /// (`index_put_`): like kCopy, and `src` may not overlap `dest` at all.
  kOut,
};

/// Whether `copy_` moves data to and from `d` (CPU or CUDA).
[[nodiscard]] inline bool copyable_device(const at::Device& d) {
  return d.is_cpu() || d.is_cuda();
}
/// Whether `copy_` moves data from a tensor on `src` to one on `dest`: the
/// same device, or CPU and CUDA.
[[nodiscard]] inline bool copyable_devices(const at::Device& src,
                                           const at::Device& dest) {
  return src == dest || (copyable_device(src) && copyable_device(dest));
}

/// Throws a `c10::Error` "<op>: key <key>: <reason>" (without "<op>: " when
/// `op` is null) unless LibTorch accepts writing `src` into `dest` in place.
/// `dest` is the region written: the view of the stored leaf for basic
/// indices, the stored leaf itself otherwise. `src` may be undefined (a
/// write without a tensor operand: `mul_(2)`, `fill_`, `zero_`).
void check_leaf_write(const char* op, const LeafName& name,
                      const at::Tensor& dest, const at::Tensor& src,
                      WriteKind kind);

struct NormalizedIndex;

/// `dst[norm] = value` (TensorDict::index_put_): see tensor_dict.h for the
/// contract.
void index_put(TensorDictImpl& dst, const NormalizedIndex& norm,
               const TensorDictImpl& value);

}  // namespace detail
}  // namespace tensordict
