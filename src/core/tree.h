// Internal: the one way the library walks a dict tree.
//
// Walks over a dict tree go through these functions, so that the order
// (depth first, insertion order: the order of `keys(true, true)`), the
// treatment of sub-dicts and batch sizes, and the errors for mismatched trees
// are the same everywhere:
//
//  - `visit`: every level and every leaf, with its key path. Walks that build
//    something other than a dict shaped like the source (key lists, the
//    memmap plan, JSON metadata, the repr, pickling, flattening) go through
//    it and keep their per-level state on a stack of their own: pushed on
//    `enter`, popped on `leave`;
//  - `for_each_leaf` / `leaf_tensors` / `leaf_ptrs` and `for_each_level`:
//    the leaves, or the levels, without key paths (nothing to maintain per
//    node: these are the hot paths);
//  - `pair_leaves`: two trees matched key for key (`check_same_keys` first);
//  - `rebuild`: a new tree shaped like a source tree, each leaf computed by a
//    function: Python's `_apply_nest`. Each level's batch size follows from
//    the root's: a sub-dict gets its new parent's batch size followed by its
//    own dims beyond its old parent's, which covers keeping the batch size,
//    indexing, reshaping, reducing and stacking alike.
//
// Walks over two trees at once, which look each key of one tree up in the
// other and skip or stop where the other differs (`check_same_keys`' fast
// path, `check_can_add_keys`, `update`'s), recurse on their own.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace detail {

/// The key of the node being visited: pointers into the walked tree, so that
/// walking allocates nothing until `key()` is asked for.
struct KeyPath {
  c10::SmallVector<const std::string*, 8> parts;
  [[nodiscard]] NestedKey key() const {
    std::vector<std::string> out;
    out.reserve(parts.size());
    for (const auto* p : parts) out.push_back(*p);
    return NestedKey(std::move(out));
  }
};

/// A `visit` callback that does nothing.
struct Ignore {
  template <typename... Args>
  void operator()(const Args&...) const {}
};

namespace tree_impl {

template <typename Impl, typename Enter, typename Leaf, typename Leave>
void visit(Impl& level, KeyPath& path, const Enter& enter, const Leaf& leaf,
           const Leave& leave) {
  const KeyPath& key = path;
  enter(key, level);
  for (auto& n : level.nodes) {
    path.parts.push_back(&n.key);
    if (n.is_dict()) {
      visit(static_cast<Impl&>(*n.dict), path, enter, leaf, leave);
    } else {
      leaf(key, n.tensor);
    }
    path.parts.pop_back();
  }
  leave(key, level);
}

}  // namespace tree_impl

/// Walks `root` depth first, in `keys(true, true)` order, with the key path:
/// `enter(path, level)` on `root` and every sub-dict before its entries
/// (parents first), `leaf(path, tensor)` on every leaf, and
/// `leave(path, level)` after a level's entries (sub-dicts first). `path` is
/// the key of the level or leaf; the root's is empty. With a non-const `root`
/// the callbacks get non-const levels and leaves. The walk allocates nothing
/// unless the key path is deeper than 8; the tree must not change during it.
///
/// Example: the keys of every sub-dict.
/// ```
///   visit(root,
///         [&](const KeyPath& path, const TensorDictImpl&) {
///           if (!path.parts.empty()) keys.push_back(path.key());
///         },
///         Ignore(), Ignore());
/// ```
template <typename Impl, typename Enter, typename Leaf, typename Leave>
void visit(Impl& root, const Enter& enter, const Leaf& leaf,
           const Leave& leave) {
  static_assert(
      std::is_same<std::remove_const_t<Impl>, TensorDictImpl>::value,
      "visit walks a TensorDictImpl");
  KeyPath path;
  tree_impl::visit(root, path, enter, leaf, leave);
}

/// Calls `fn(tensor)` on every leaf, in `keys(true, true)` order: `visit`
/// without key paths.
template <typename Fn>
void for_each_leaf(const TensorDictImpl& root, const Fn& fn) {
  for (const auto& n : root.nodes) {
    if (n.is_dict()) {
      for_each_leaf(*n.dict, fn);
    } else {
      fn(n.tensor);
    }
  }
}

/// Calls `fn(dict)` on `root` and every sub-dict, parents first: `visit`'s
/// `enter` without key paths. With a const `root`, `fn` gets const levels.
template <typename Impl, typename Fn>
void for_each_level(Impl& root, const Fn& fn) {
  fn(root);
  for (auto& n : root.nodes) {
    if (n.is_dict()) for_each_level(static_cast<Impl&>(*n.dict), fn);
  }
}

/// Snapshot of the node lists of every dict in a tree, to undo a structural
/// change that fails half-way. Restoring keeps every dict's identity.
class StructureSnapshot {
 public:
  explicit StructureSnapshot(TensorDictImpl& root) {
    for_each_level(
        root, [&](TensorDictImpl& d) { saved_.emplace_back(&d, d.nodes); });
  }
  void restore() {
    for (auto& s : saved_) s.first->nodes = s.second;
  }

 private:
  std::vector<std::pair<TensorDictImpl*, std::vector<Node>>> saved_;
};

/// The leaves, in `keys(true, true)` order.
std::vector<at::Tensor> leaf_tensors(const TensorDictImpl& root);
/// Appends pointers to the stored leaves, in `keys(true, true)` order.
void leaf_ptrs(const TensorDictImpl& root, std::vector<const at::Tensor*>& out);

/// The leaves of `a` and the matching leaves of `b`, both in `a`'s order.
/// Throws, naming `op` and the keys, unless the trees have the same keys
/// (see `check_same_keys`).
void pair_leaves(const TensorDictImpl& a, const TensorDictImpl& b,
                 const char* op, std::vector<at::Tensor>& va,
                 std::vector<at::Tensor>& vb);

/// No per-level hook.
struct NoLevelHook {
  void operator()(const TensorDictImpl&, TensorDictImpl&) const {}
};

namespace tree_impl {

[[noreturn]] void throw_bad_leaf_shape(const char* op, const KeyPath& path,
                                       const at::Tensor& t,
                                       c10::IntArrayRef batch);

template <typename LeafFn, typename LevelHook>
ImplPtr rebuild(const TensorDictImpl& src, std::vector<int64_t> batch,
                KeyPath& path, const LeafFn& leaf, const char* check_op,
                const LevelHook& hook) {
  const size_t src_bd = src.batch_size.size();
  auto out = make_impl(std::move(batch), src.device);
  hook(src, *out);
  out->nodes.reserve(src.nodes.size());
  for (const auto& n : src.nodes) {
    path.parts.push_back(&n.key);
    if (n.is_dict()) {
      std::vector<int64_t> sub_batch = concat(
          out->batch_size, c10::IntArrayRef(n.dict->batch_size).slice(src_bd));
      out->nodes.push_back(Node{
          n.key, at::Tensor(),
          rebuild(*n.dict, std::move(sub_batch), path, leaf, check_op, hook)});
    } else {
      at::Tensor r = leaf(path, n.tensor);
      if (r.defined()) {
        if (check_op != nullptr && !starts_with(r.sizes(), out->batch_size)) {
          throw_bad_leaf_shape(check_op, path, r, out->batch_size);
        }
        out->nodes.push_back(Node{n.key, std::move(r), nullptr});
      }
    }
    path.parts.pop_back();
  }
  return out;
}

}  // namespace tree_impl

/// A new tree shaped like `src` (keys in the same order), Python's
/// `_apply_nest`. The root gets `batch`; each sub-dict gets its new parent's
/// batch size followed by its own dims beyond its old parent's. Each level
/// keeps its device (`hook(src_level, new_level)` may change that, or copy
/// other per-level state). Each leaf is `leaf(path, tensor)`; an undefined
/// result drops the key. With `check_op`, every result must start with its
/// level's batch size, else "<check_op>: key K: the result's shape ... does
/// not start with the batch_size ..." is thrown.
template <typename LeafFn, typename LevelHook = NoLevelHook>
ImplPtr rebuild(const TensorDictImpl& src, std::vector<int64_t> batch,
                const LeafFn& leaf, const char* check_op = nullptr,
                const LevelHook& hook = LevelHook()) {
  KeyPath path;
  return tree_impl::rebuild(src, std::move(batch), path, leaf, check_op, hook);
}

/// `rebuild` with the same batch sizes and `fn(tensor)` for every leaf.
template <typename Fn>
ImplPtr rebuild_leaves(const TensorDictImpl& src, const Fn& fn) {
  return rebuild(src, src.batch_size,
                 [&](const KeyPath&, const at::Tensor& t) { return fn(t); });
}

/// `rebuild` whose leaves are `vals`, in `leaf_tensors` order (`vals` is
/// consumed). With `check_op`, each must start with its level's batch size.
ImplPtr rebuild_from(const TensorDictImpl& src, std::vector<at::Tensor> vals,
                     const char* check_op = nullptr);

}  // namespace detail
}  // namespace tensordict
