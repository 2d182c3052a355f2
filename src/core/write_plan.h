// Internal: the write plan. Every write into stored leaves goes through
// this file, in two steps: check every leaf, then write.
//
// A write into a dict touches many leaves; LibTorch validates one leaf at a
// time, as it writes it. So a write that LibTorch rejects at its third leaf
// would leave the first two written. Every writer (indexed writes,
// stack_out/cat_out, update_, set_, apply_, in-place arithmetic,
// masked_fill_, fill_, zero_, the replay storage) therefore runs
// `check_leaf_write` over every leaf first, and writes only once all of
// them pass. It mirrors what LibTorch would reject: autograd's rules for
// in-place writes (leaves and views of leaves that require grad, views made
// in no-grad mode), inference tensors, destinations with internal overlap
// (expanded tensors), devices, and sources that overlap the destination.
// Dtypes: a tensor written into a stored leaf is cast where `c10::canCast`
// allows it, on every write path (`check_cast`); in-place ops need the
// promoted type to fit, as LibTorch's do.
//
// The pieces:
//  - `WriteTargets`: the destination side of a write, pairing the value's
//    keys with the destination's, creating missing keys and undoing that;
//  - `index_put`: `dst[index] = value`;
//  - `check_leaf_copy` / `LeafCopies` / `update_leaves`: whole-leaf copies
//    (set_, update_, recv);
//  - `RowWritePlan`: a plan kept for many row writes into one destination.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/indexing.h"
#include "core/internal.h"
#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

struct KeyPath;

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

/// The one dtype rule of every tensor written into a stored leaf
/// (tensor_dict.h, "Writes and dtypes"): the value is cast to the stored
/// dtype where `c10::canCast` allows it. Throws a TypeError "<op>: key K:
/// cannot cast the value's dtype X to the stored dtype Y (...)" otherwise.
void check_cast(const char* op, const LeafName& name, at::ScalarType src,
                at::ScalarType dest);

/// Throws a `c10::Error` "<op>: key <key>: <reason>" (without "<op>: " when
/// `op` is null) unless LibTorch accepts writing `src` into `dest` in place,
/// with `check_cast`'s rule for kCopy and kOut writes.
/// `dest` is the region written: the view of the stored leaf for basic
/// indices, the stored leaf itself otherwise. `src` may be undefined (a
/// write without a tensor operand: `mul_(2)`, `fill_`, `zero_`).
void check_leaf_write(const char* op, const LeafName& name,
                      const at::Tensor& dest, const at::Tensor& src,
                      WriteKind kind);

/// The destination side of a write plan: the keys of `value` (the dict
/// written, or the first input of stack_out/cat_out) matched with `dst`'s
/// in one walk, in `value`'s order, with what the write must create. One set
/// of errors for every writer: "<op>: key K: cannot write a TensorDict where
/// a tensor lives" (and the converse), and the lock error (see
/// `check_unlocked`) of a locked level that would gain a key. `create()`
/// adds the missing keys in `value`'s order; `undo()` removes them again.
class WriteTargets {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct Leaf {
    TensorDictImpl* parent;  // the dict holding it (a new dict: after create)
    size_t index;            // its place in parent->nodes (once it exists)
    size_t new_parent;       // a new parent: index into dicts(); else kNone
    const Node* value;       // the leaf of `value`
    bool exists;
  };
  struct Dict {              // a sub-dict of `value` that `dst` lacks
    TensorDictImpl* parent;  // null: a new dict's (new_parent)
    size_t new_parent;
    const Node* value;
    std::vector<int64_t> batch;
    c10::optional<at::Device> device;  // its parent's
    ImplPtr impl;                      // made by create()
  };
  /// The batch size of a sub-dict created for `value_sub` under a dict of
  /// batch size `parent_batch`.
  using SubBatch = c10::function_ref<std::vector<int64_t>(
      c10::IntArrayRef parent_batch, const TensorDictImpl& value_sub)>;
  /// Called for each sub-dict that both trees have (to check it).
  using OnDict =
      c10::function_ref<void(const KeyPath& key, const TensorDictImpl& dst_sub,
                             const TensorDictImpl& value_sub)>;
  /// Called for each leaf `i` (`src`) of `value`, with the stored leaf
  /// (null when missing), the dict of `dst` that holds it (null when the write
  /// creates that dict), and the device of the dict that holds (or will
  /// hold) it.
  using OnLeaf = c10::function_ref<void(
      const KeyPath& key, size_t i, const at::Tensor& src,
      const at::Tensor* dest, const TensorDictImpl* level,
      const c10::optional<at::Device>& level_device)>;

  /// With `may_create` false, a key of `value` that `dst` lacks is an error
  /// (`lookup_or_throw`'s) instead of something to create.
  /// Non-tensor data (core/non_tensor.h) is written as a whole entry: a
  /// missing one is created with the value's data; an existing one that
  /// holds equal NonTensorData changes nothing (as in Python); any other is
  /// listed in `non_tensor_writes()` for the writer, except with `joins`
  /// (stack and cat, which compute it afterwards).
  WriteTargets(const char* op, TensorDictImpl& dst, const TensorDictImpl& value,
               SubBatch sub_batch, OnDict on_dict, OnLeaf on_leaf,
               bool may_create = true, bool joins = false);

  /// An existing non-tensor entry that the write changes: node `index` of
  /// `level`, written with the non-tensor level `value`.
  struct NonTensorWrite {
    TensorDictImpl* level;
    size_t index;
    const TensorDictImpl* value;
    std::string key;
    /// The entry's new data: the value's elements at `norm` (null: the
    /// whole entry, which must have the value's batch size). Throws,
    /// changing nothing, for an entry of a memory-mapped dict.
    std::shared_ptr<const NonTensor> indexed(const char* op,
                                             const NormalizedIndex* norm) const;
    /// Stores `data` (no-throw).
    void commit(std::shared_ptr<const NonTensor> data) const {
      ImplPtr& d = level->nodes[index].dict;
      ImplPtr fresh = make_impl(d->batch_size, d->device);
      fresh->non_tensor = std::move(data);
      d = std::move(fresh);
    }
  };
  [[nodiscard]] const std::vector<NonTensorWrite>& non_tensor_writes() const {
    return non_tensor_writes_;
  }

  using Leaves = c10::SmallVector<Leaf, 16>;
  [[nodiscard]] const Leaves& leaves() const { return leaves_; }
  [[nodiscard]] bool creates() const { return !creations_.empty(); }
  /// The stored tensor of an existing (or created) leaf. Nodes are addressed
  /// by index: appending keys may move a dict's node list.
  [[nodiscard]] at::Tensor& dest(size_t i) const {
    return leaves_[i].parent->nodes[leaves_[i].index].tensor;
  }
  /// Creates what `dst` lacks, in `value`'s order: new dicts (with their
  /// parent's device), and for missing leaf `i` the tensor `make(i,
  /// parent)` (which may be undefined, to be stored through `dest(i)`).
  void create(
      c10::function_ref<at::Tensor(size_t i, const TensorDictImpl& parent)>
          make);
  /// Removes every key `create()` added (after a failed write).
  void undo();

 private:
  // The steps of the constructor's walk (write_plan.cpp): an existing
  // non-tensor entry the write may change, a sub-dict dst lacks, a leaf.
  struct Entry;
  void note_non_tensor_write(const char* op, const Entry& e);
  void plan_new_dict(const char* op, const Entry& e, SubBatch sub_batch,
                     bool joins);
  size_t plan_leaf(const char* op, const Entry& e);

  Leaves leaves_;
  std::vector<Dict> dicts_;
  std::vector<NonTensorWrite> non_tensor_writes_;
  // What the write creates, in `value`'s order: {is_dict, index into
  // dicts_ or leaves_}.
  std::vector<std::pair<bool, size_t>> creations_;
  // The length of each existing dict's node list before create().
  std::vector<std::pair<TensorDictImpl*, size_t>> log_;
};

/// Checks writing `src` over the whole stored leaf `dest` with `copy_`
/// (`set_`, `update_`), whose dict level has batch size `batch`: `src`
/// starts with `batch` and broadcasts to `dest`'s shape, and
/// `check_leaf_write` passes. Throws "<op>: key K: ...".
void check_leaf_copy(const char* op, const LeafName& name,
                     c10::IntArrayRef batch, const at::Tensor& dest,
                     const at::Tensor& src);

/// Whole-leaf copies (`update_`, `recv`): `add` checks one with
/// `check_leaf_copy` (throws "<op>: key K: ..."); `write` copies them all,
/// once every one was added.
class LeafCopies {
 public:
  void add(const char* op, const LeafName& name, c10::IntArrayRef batch,
           const at::Tensor& dest, const at::Tensor& src) {
    check_leaf_copy(op, name, batch, dest, src);
    if (!dest.is_same(src)) copies_.emplace_back(dest, src);
  }
  void write() const {
    for (const auto& c : copies_) c.first.copy_(c.second);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;
};
/// `dst.update_(value)`: every leaf of `value` copied over the leaf of `dst`
/// with the same key, once every leaf passed `check_leaf_copy`. A key that
/// `dst` lacks is an error.
void update_leaves(TensorDictImpl& dst, const TensorDictImpl& value);

/// `dst[norm] = value` (TensorDict::index_put_): see tensor_dict.h for the
/// contract.
void index_put(TensorDictImpl& dst, const NormalizedIndex& norm,
               const TensorDictImpl& value);

/// One write of `index_put_all`: `dst[norm] = value`.
struct IndexPut {
  TensorDictImpl* dst;
  NormalizedIndex norm;
  const TensorDictImpl* value;
};
/// Several `index_put` writes, each into a different dict (a lazy stack's),
/// all or nothing: every write is planned and checked before any is made.
void index_put_all(const std::vector<IndexPut>& writes);

/// A write plan kept for many writes of rows into one destination whose
/// keys never change (ReplayBuffer's locked storage): the destination's
/// leaves are planned once (which rows can take a byte copy, where their
/// bytes are); each write pairs the value with them by key (by position
/// when the key orders agree), checks every leaf, then writes a contiguous
/// block of rows `dst[row:row + count] = value[src_row:src_row + count]`:
/// one byte copy per leaf when both sides allow it (core/row_copy.h), a
/// LibTorch copy otherwise.
///
/// Not synchronized. The destination must outlive the plan's writes (the
/// plan holds a handle to it).
class RowWritePlan {
 public:
  /// The sources of one write, in the destination's leaf order.
  using Sources = c10::SmallVector<const at::Tensor*, 16>;

  RowWritePlan() = default;
  /// Plans writes into the rows (dim 0) of every leaf of `dst`, which has
  /// one batch dim. `dst_name` names it in errors ("storage").
  RowWritePlan(const TensorDict& dst, const char* dst_name);

  [[nodiscard]] bool empty() const { return leaves_.empty(); }

  /// Pairs `value` (batch dims `value_bd`: 0 for one row, 1 for rows) with
  /// the destination and checks every leaf: the same keys, each leaf's row
  /// shape (its dims beyond `value_bd`) equal to the destination's, a dtype
  /// `check_cast` allows, devices that `copy_` moves between. Fills `out`.
  /// Throws `throw_key_difference`'s error (the trees named "the
  /// <dst_name>" and "the <what>"), or "<op>: key K: ..." naming the shapes,
  /// dtypes or devices.
  void bind(const char* op, const char* what, const TensorDictImpl& value,
            int64_t value_bd, Sources& out) const;

  /// Whether a source shares memory with the destination (a view of it):
  /// writing in place could then read rows it has already written, so the
  /// caller binds a copy of the value instead.
  [[nodiscard]] bool reads_destination(const Sources& sources) const;

  /// `dst[row:row + count] = value[src_row:src_row + count]` for sources
  /// that `bind` checked (`value_bd` 0: `count` is 1 and the value is the
  /// row). With `row_step`, the destination rows are `row`, `row +
  /// row_step`, ... (`dst[row::row_step][:count]`). Bumps each written
  /// leaf's version, as `copy_` does.
  void write_rows(const Sources& sources, int64_t value_bd, int64_t row,
                  int64_t src_row, int64_t count, int64_t row_step = 1) const;

 private:
  struct Leaf {
    NestedKey key;
    at::Tensor tensor;               // [rows, row_shape...]
    const at::Tensor* stored;        // its node in the destination (identity)
    std::vector<int64_t> row_shape;  // the shape after dim 0
    size_t row_bytes;
    char* base;  // set when rows can be byte-copied (contiguous CPU)
    const c10::StorageImpl* storage;  // to spot sources that view it
    // Fixed properties of `tensor`, read once: rows byte-copied on the CPU
    // (`base` set and on the CPU) or on a CUDA device, and `version_of` it.
    bool cpu_rows;
    bool cuda_rows;
    c10::TensorImpl* version;
  };
  size_t leaf_index(const at::Tensor* stored) const;

  TensorDict dst_;
  const char* dst_name_ = "";
  std::vector<Leaf> leaves_;
};

}  // namespace detail
}  // namespace tensordict
