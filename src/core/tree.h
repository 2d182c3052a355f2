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
//  - `pair_walk`: two trees matched key for key, either with the same keys
//    (binary ops, stacking, row writes) or one written into the other (writes
//    that may create keys, `update`, merges). `pair_leaves` collects the
//    matched leaves; `throw_key_difference` is the one diagnosis of trees
//    whose keys differ;
//  - `rebuild`: a new tree shaped like a source tree, each leaf computed by a
//    function: Python's `_apply_nest`. Each level's batch size follows from
//    the root's: a sub-dict gets its new parent's batch size followed by its
//    own dims beyond its old parent's, which covers keeping the batch size,
//    indexing, reshaping, reducing and stacking alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <cstring>
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
  static_assert(std::is_same<std::remove_const_t<Impl>, TensorDictImpl>::value,
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

/// Key equality without a library call. Keys are short, so they are
/// compared a word at a time, the last word overlapping the one before.
inline bool same_key(const std::string& a, const std::string& b) noexcept {
  const size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  const auto same = [&](size_t at, auto word) {
    decltype(word) x;
    decltype(word) y;
    std::memcpy(&x, p + at, sizeof(x));
    std::memcpy(&y, q + at, sizeof(y));
    return x == y;
  };
  if (n >= 8) {
    for (size_t j = 0; j + 8 < n; j += 8) {
      if (!same(j, uint64_t{})) return false;
    }
    return same(n - 8, uint64_t{});
  }
  if (n >= 4) return same(0, uint32_t{}) && same(n - 4, uint32_t{});
  if (n >= 2) return same(0, uint16_t{}) && same(n - 2, uint16_t{});
  return n == 0 || *p == *q;
}

/// What `pair_walk` does after an entry.
enum class Next {
  kDescend,  ///< walk the entry's sub-dict (against its match's, if any)
  kSkip,     ///< go on with the next entry
  kStop,     ///< end the walk
};

/// Which trees `pair_walk` pairs.
enum class Pairing {
  /// Trees with the same keys, each a leaf on both sides or a sub-dict on
  /// both sides: the walk stops where they differ, and the callback sees
  /// matched entries only.
  kSameKeys,
  /// A tree written into another: the other may lack entries (the callback
  /// sees no match) or have more.
  kInto,
};

/// An entry of the walked tree `a` and its match in the other tree `b`.
template <typename BImpl>
struct Match {
  using BNode =
      std::conditional_t<std::is_const<BImpl>::value, const Node, Node>;
  const Node& a;
  /// The level of `b` paired with `a`'s level; null below an entry that `b`
  /// lacks.
  BImpl* b_level;
  /// The entry of `b_level` with `a`'s key; null when there is none.
  BNode* b;
};

namespace tree_impl {

template <Pairing P, typename BImpl, typename Fn>
bool pair_walk(const TensorDictImpl& a, BImpl* b, KeyPath& path, const Fn& fn) {
  using BNode = typename Match<BImpl>::BNode;
  constexpr bool kWithPath =
      std::is_invocable<const Fn&, const KeyPath&, const Match<BImpl>&>::value;
  // `a` never changes during the walk; `b` may, when it is not const: a
  // callback may add entries to `b_level`, so its entries are then read
  // afresh for each entry of `a`.
  const Node* const a_nodes = a.nodes.data();
  const size_t na = a.nodes.size();
  BNode* b_nodes = b != nullptr ? b->nodes.data() : nullptr;
  size_t nb = b != nullptr ? b->nodes.size() : 0;
  if (P == Pairing::kSameKeys && na != nb) return false;
  for (size_t j = 0; j < na; ++j) {
    const Node& an = a_nodes[j];
    BNode* bn = nullptr;
    if (b != nullptr) {
      if constexpr (!std::is_const<BImpl>::value) {
        b_nodes = b->nodes.data();
        nb = b->nodes.size();
      }
      // The same order is the common case; else a lookup.
      bn = j < nb && same_key(b_nodes[j].key, an.key) ? &b_nodes[j]
                                                      : b->find(an.key);
    }
    if (P == Pairing::kSameKeys &&
        (bn == nullptr || bn->is_dict() != an.is_dict())) {
      return false;
    }
    const Match<BImpl> m{an, b, bn};
    Next next;
    if constexpr (kWithPath) {
      path.parts.push_back(&an.key);
      next = fn(static_cast<const KeyPath&>(path), m);
    } else {
      next = fn(m);
    }
    bool ok = next != Next::kStop;
    if (next == Next::kDescend) {
      BImpl* sub = bn != nullptr && bn->is_dict() ? bn->dict.get() : nullptr;
      ok = pair_walk<P>(*an.dict, sub, path, fn);
    }
    if constexpr (kWithPath) path.parts.pop_back();
    if (!ok) return false;
  }
  return true;
}

}  // namespace tree_impl

/// The one walk over two trees: each entry of `a`, depth first in `a`'s
/// order, with the entry of the same key in `b` (found at the same position
/// when the orders agree, else by lookup). `fn(path, match)`, or
/// `fn(match)` when it needs no key path, returns what to do next:
/// `kDescend` walks the entry's sub-dict (`a`'s entry must be a sub-dict)
/// against the matching sub-dict of `b`, or against none; `kSkip` goes on;
/// `kStop` ends the walk. With `Pairing::kSameKeys` the walk also stops
/// where the trees' keys differ (see `Pairing`), so that a walk that
/// descends into every sub-dict returns true exactly when the trees have the
/// same keys. Returns false when the walk stopped. With a non-const `b` the
/// callback may add entries to `match.b_level`.
///
/// Example: pairing the leaves of two trees with the same keys.
/// ```
///   bool same = pair_walk<Pairing::kSameKeys>(a, &b, [&](const auto& m) {
///     if (m.a.is_dict()) return Next::kDescend;
///     pairs.emplace_back(&m.a.tensor, &m.b->tensor);
///     return Next::kSkip;
///   });
/// ```
template <Pairing P, typename BImpl, typename Fn>
bool pair_walk(const TensorDictImpl& a, BImpl* b, const Fn& fn) {
  static_assert(std::is_same<std::remove_const_t<BImpl>, TensorDictImpl>::value,
                "pair_walk pairs TensorDictImpls");
  KeyPath path;
  return tree_impl::pair_walk<P>(a, b, path, fn);
}

/// Whether `a` and `b` have the same keys (sub-dicts included, empty ones
/// too), each a leaf on both sides or a sub-dict on both sides.
bool same_keys(const TensorDictImpl& a, const TensorDictImpl& b);

/// Throws the one error for trees whose keys differ (`same_keys` is false). `a_name` and `b_name` name the trees ("the left-hand
/// side", "input 3"). A leaf-vs-dict conflict is a TypeError:
/// "<op>: key K is a tensor in <a_name> but a TensorDict in <b_name>";
/// else "<op>: TensorDicts have different keys: missing from <a_name>: [...];
/// missing from <b_name>: [...]", naming only the sides that lack keys.
[[noreturn]] void throw_key_difference(const char* op, const TensorDictImpl& a,
                                       const TensorDictImpl& b,
                                       const char* a_name, const char* b_name);

/// The leaves, in `keys(true, true)` order.
std::vector<at::Tensor> leaf_tensors(const TensorDictImpl& root);
/// Appends pointers to the stored leaves, in `keys(true, true)` order.
void leaf_ptrs(const TensorDictImpl& root, std::vector<const at::Tensor*>& out);

/// The leaves of `a` and the matching leaves of `b`, both in `a`'s order.
/// Throws `throw_key_difference`'s error ("the left-hand side", "the
/// right-hand side") unless the trees have the same keys (see `same_keys`).
void pair_leaves(const TensorDictImpl& a, const TensorDictImpl& b,
                 const char* op, std::vector<at::Tensor>& va,
                 std::vector<at::Tensor>& vb);

/// No per-level hook.
struct NoLevelHook {
  void operator()(const TensorDictImpl&, TensorDictImpl&) const {}
};

/// How `rebuild` carries non-tensor data (core/non_tensor.h), whose level's
/// batch size changes as a sub-dict's does.
enum class NonTensors {
  /// Unchanged: NonTensorData takes its level's new batch size; a
  /// NonTensorStack whose batch size changes is an error (the leaf function
  /// computes values, which a stack cannot follow).
  kKeep,
  /// The leaf function is an index or a shape op: a stack's element ids go
  /// through it too.
  kIndex,
};

/// The element ids of a NonTensorStack (undefined for NonTensorData).
const at::Tensor& non_tensor_ids(const NonTensor& nt);

/// For NonTensors::kIndex: where each dim of the new root batch comes from,
/// so that a NonTensorStack's stack dims (core/non_tensor.h) follow an index
/// or shape op. A sub-dict's dims beyond the root's follow unchanged. Ops
/// that pass no map leave every dim of a stack a stack dim.
struct DimMap {
  static constexpr int64_t kNew = -1;    // a new dim (None, unsqueeze, expand)
  static constexpr int64_t kMixed = -2;  // several dims, or an advanced index
  int64_t in_dims = 0;                   // the root's batch dims before the op
  // Per new root dim: its old dim, kNew or kMixed (inline: every `td[i]`
  // makes one).
  c10::SmallVector<int64_t, 8> from;
  /// The map of an op that keeps the `in_dims` dims in order.
  static DimMap identity(int64_t in_dims);
};

namespace tree_impl {

[[noreturn]] void throw_bad_leaf_shape(const char* op, const KeyPath& path,
                                       const at::Tensor& t,
                                       c10::IntArrayRef batch);

// Sets `out`'s non-tensor data from `src`'s (see NonTensors and DimMap).
void carry_non_tensor(const TensorDictImpl& src, TensorDictImpl& out,
                      const at::Tensor& new_ids, const char* op,
                      const KeyPath& path, const DimMap* dims);

template <typename LeafFn, typename LevelHook>
ImplPtr rebuild(const TensorDictImpl& src, std::vector<int64_t> batch,
                KeyPath& path, const LeafFn& leaf, const char* check_op,
                const LevelHook& hook, NonTensors non_tensors,
                const DimMap* dims) {
  const size_t src_bd = src.batch_size.size();
  auto out = make_impl(std::move(batch), src.device);
  hook(src, *out);
  out->nodes.reserve(src.nodes.size());
  for (const auto& n : src.nodes) {
    path.parts.push_back(&n.key);
    if (n.is_dict()) {
      std::vector<int64_t> sub_batch = concat(
          out->batch_size, c10::IntArrayRef(n.dict->batch_size).slice(src_bd));
      ImplPtr sub = rebuild(*n.dict, std::move(sub_batch), path, leaf, check_op,
                            hook, non_tensors, dims);
      if (n.dict->non_tensor != nullptr) {
        const at::Tensor& ids = non_tensor_ids(*n.dict->non_tensor);
        carry_non_tensor(*n.dict, *sub,
                         non_tensors == NonTensors::kIndex && ids.defined()
                             ? at::Tensor(leaf(path, ids))
                             : at::Tensor(),
                         check_op, path, dims);
      }
      out->nodes.push_back(Node{n.key, at::Tensor(), std::move(sub)});
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
/// not start with the batch_size ..." is thrown. Non-tensor data is carried
/// as `non_tensors` says (with kIndex, `dims` maps the root's dims).
template <typename LeafFn, typename LevelHook = NoLevelHook>
ImplPtr rebuild(const TensorDictImpl& src, std::vector<int64_t> batch,
                const LeafFn& leaf, const char* check_op = nullptr,
                const LevelHook& hook = LevelHook(),
                NonTensors non_tensors = NonTensors::kKeep,
                const DimMap* dims = nullptr) {
  KeyPath path;
  return tree_impl::rebuild(src, std::move(batch), path, leaf, check_op, hook,
                            non_tensors, dims);
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
