// Apply and key manipulation of TensorDict (apply, named_apply, apply_,
// update, update_, select, exclude, flatten_keys, unflatten_keys, items),
// and the dtype and autograd helpers.
//
// Leaf-wise operations walk the tree depth first in insertion order. The
// in-place ones validate every leaf before they write any, so a failed call
// leaves the dict unchanged.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/compat.h"
#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "ops/common.h"
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using namespace detail;  // NOLINT(google-build-using-namespace)

namespace {

// ===========================================================================
// Apply
// ===========================================================================

// The result of an apply over `src`: `leaf(path, tensor)` computes each leaf
// (see `rebuild`), and the root gets `batch_size` (default: src's).
template <typename LeafFnT>
TensorDict run_apply(const TensorDictImpl& src,
                     c10::optional<std::vector<int64_t>> batch_size,
                     const LeafFnT& leaf) {
  std::vector<int64_t> batch = std::move(batch_size).value_or(src.batch_size);
  for (int64_t d : batch) {
    TORCH_CHECK_VALUE(d >= 0, "apply: batch_size ", shape_str(batch),
                      " has a negative dimension");
  }
  ImplPtr out = rebuild(src, std::move(batch), leaf, "apply");
  // A result that left the dict's device has no dict-level device.
  bool device_kept = true;
  for_each_level(*out, [&](TensorDictImpl& d) {
    for (const auto& n : d.nodes) {
      if (!n.is_dict() && d.device && n.tensor.device() != *d.device) {
        device_kept = false;
      }
    }
  });
  if (!device_kept) {
    for_each_level(*out, [](TensorDictImpl& d) { d.device = c10::nullopt; });
  }
  return TensorDictImpl::wrap(std::move(out));
}

// ===========================================================================
// Key manipulation helpers
// ===========================================================================

void collect_entries(const TensorDictImpl& impl, bool include_nested,
                     bool leaves_only,
                     std::vector<std::pair<NestedKey, Entry>>* items,
                     std::vector<Entry>* values) {
  if (!include_nested) {
    for (const auto& n : impl.nodes) {
      if (n.is_dict() && leaves_only) continue;
      Entry e =
          n.is_dict() ? Entry(TensorDictImpl::wrap(n.dict)) : Entry(n.tensor);
      if (items) items->emplace_back(NestedKey(n.key), e);
      if (values) values->push_back(std::move(e));
    }
    return;
  }
  // The levels being walked, the innermost last: a sub-dict's entry shares
  // its parent's handle on it.
  std::vector<const TensorDictImpl*> levels;
  visit(
      impl,
      [&](const KeyPath& path, const TensorDictImpl& level) {
        if (!leaves_only && !path.parts.empty()) {
          Entry e(TensorDictImpl::wrap(
              levels.back()->find(*path.parts.back())->dict));
          if (items) items->emplace_back(path.key(), e);
          if (values) values->push_back(std::move(e));
        }
        levels.push_back(&level);
      },
      [&](const KeyPath& path, const at::Tensor& t) {
        if (items) items->emplace_back(path.key(), Entry(t));
        if (values) values->push_back(Entry(t));
      },
      [&](const KeyPath&, const TensorDictImpl&) { levels.pop_back(); });
}

// Inserts `node` (named by `parts`, relative to `dst`) for unflatten_keys.
// `prefix` is `dst`'s own path and `orig` the key being unflattened, both for
// errors.
void insert_unflattened(TensorDictImpl& dst, std::vector<std::string> prefix,
                        const std::vector<std::string>& parts, Node node,
                        const std::string& orig) {
  TensorDictImpl* cur = &dst;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix.push_back(parts[i]);
    Node* c = cur->find(parts[i]);
    if (c == nullptr) {
      cur->nodes.push_back(Node{parts[i], at::Tensor(),
                                make_impl(cur->batch_size, cur->device)});
      c = &cur->nodes.back();
    }
    TORCH_CHECK(c->is_dict() && !c->is_non_tensor(), "unflatten_keys: key ",
                orig, " needs a sub-TensorDict at ", NestedKey(prefix).str(),
                c->is_dict() ? ", where non-tensor data lives"
                             : ", where a tensor lives");
    cur = c->dict.get();
  }
  prefix.push_back(parts.back());
  Node* e = cur->find(parts.back());
  if (e == nullptr) {
    node.key = parts.back();
    cur->nodes.push_back(std::move(node));
    return;
  }
  auto collides = [&](const KeyPath* below) {
    std::vector<std::string> at = prefix;
    if (below != nullptr) {
      for (const auto* p : below->parts) at.push_back(*p);
    }
    TORCH_CHECK(false, "unflatten_keys: key ", orig,
                " collides with another key at ",
                NestedKey(std::move(at)).str());
  };
  if (!e->is_dict() || !node.is_dict() || e->is_non_tensor() ||
      node.is_non_tensor()) {
    collides(nullptr);
  }
  // Two sub-dicts at the same place merge.
  pair_walk<Pairing::kInto>(
      *node.dict, e->dict.get(),
      [&](const KeyPath& path, const Match<TensorDictImpl>& m) {
        if (m.b == nullptr) {
          m.b_level->nodes.push_back(m.a);
          return Next::kSkip;
        }
        if (!m.b->is_dict() || !m.a.is_dict()) collides(&path);
        return Next::kDescend;
      });
}

ImplPtr unflatten_impl(const TensorDictImpl& src, const std::string& sep) {
  auto split = [&](const std::string& key) {
    std::vector<std::string> parts = split_key(key, sep);
    for (const auto& p : parts) {
      TORCH_CHECK_VALUE(!p.empty(), "unflatten_keys: key ", key,
                        " has an empty component when split at '", sep, "'");
    }
    return parts;
  };
  // Each level being walked, the innermost last: its new dict, where that
  // goes in its parent's new dict, and its own path from the new root.
  struct Level {
    ImplPtr out;
    std::vector<std::string> parts;
    std::vector<std::string> prefix;
  };
  std::vector<Level> levels;
  ImplPtr root;
  visit(
      src,
      [&](const KeyPath& path, const TensorDictImpl& level) {
        Level l{make_impl(level.batch_size, level.device), {}, {}};
        if (!path.parts.empty()) {
          l.parts = split(*path.parts.back());
          l.prefix = levels.back().prefix;
          l.prefix.insert(l.prefix.end(), l.parts.begin(), l.parts.end());
        }
        levels.push_back(std::move(l));
      },
      [&](const KeyPath& path, const at::Tensor& t) {
        const std::string& key = *path.parts.back();
        insert_unflattened(*levels.back().out, levels.back().prefix, split(key),
                           Node{key, t, nullptr}, key);
      },
      [&](const KeyPath& path, const TensorDictImpl&) {
        Level l = std::move(levels.back());
        levels.pop_back();
        if (levels.empty()) {
          root = std::move(l.out);
          return;
        }
        const std::string& key = *path.parts.back();
        insert_unflattened(*levels.back().out, levels.back().prefix, l.parts,
                           Node{key, at::Tensor(), std::move(l.out)}, key);
      });
  return root;
}

ImplPtr flatten_impl(const TensorDictImpl& src, const std::string& sep) {
  auto out = make_impl(src.batch_size, src.device);
  std::unordered_map<std::string, NestedKey> seen;
  // The flattened name of each level being walked, the innermost last (the
  // root's is empty).
  std::vector<std::string> names;
  auto flat = [&](const KeyPath& path) {
    const std::string& key = *path.parts.back();
    return names.back().empty() ? key : names.back() + sep + key;
  };
  visit(
      src,
      [&](const KeyPath& path, const TensorDictImpl& level) {
        names.push_back(path.parts.empty() ? std::string() : flat(path));
        if (level.non_tensor != nullptr) {  // an entry, as in Python
          auto it = seen.find(names.back());
          TORCH_CHECK(it == seen.end(), "flatten_keys: keys ",
                      it == seen.end() ? std::string() : it->second.str(),
                      " and ", path.key().str(), " both flatten to '",
                      names.back(), "'");
          seen.emplace(names.back(), path.key());
          out->nodes.push_back(
              Node{names.back(), at::Tensor(), shallow_copy(level)});
        }
      },
      [&](const KeyPath& path, const at::Tensor& t) {
        std::string name = flat(path);
        auto it = seen.find(name);
        TORCH_CHECK(it == seen.end(), "flatten_keys: keys ",
                    it == seen.end() ? std::string() : it->second.str(),
                    " and ", path.key().str(), " both flatten to '", name, "'");
        seen.emplace(name, path.key());
        out->nodes.push_back(Node{std::move(name), t, nullptr});
      },
      [&](const KeyPath&, const TensorDictImpl&) { names.pop_back(); });
  return out;
}

}  // namespace

// ===========================================================================
// Apply
// ===========================================================================

TensorDict TensorDict::apply(
    const LeafFn& fn, c10::optional<std::vector<int64_t>> batch_size) const {
  return run_apply(*impl_, std::move(batch_size),
                   [&](const KeyPath&, const at::Tensor& t) { return fn(t); });
}

TensorDict TensorDict::apply(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& fn,
    const TensorDict& other,
    c10::optional<std::vector<int64_t>> batch_size) const {
  TensorVec mine, theirs;
  pair_leaves(*impl_, *other.impl_, "apply", mine, theirs);
  size_t i = 0;
  return run_apply(
      *impl_, std::move(batch_size),
      [&](const KeyPath&, const at::Tensor& t) { return fn(t, theirs[i++]); });
}

TensorDict TensorDict::apply(
    const LeafFnN& fn, const std::vector<TensorDict>& others,
    c10::optional<std::vector<int64_t>> batch_size) const {
  std::vector<TensorVec> theirs(others.size());
  for (size_t j = 0; j < others.size(); ++j) {
    TensorVec mine;
    pair_leaves(*impl_, *others[j].impl_, "apply", mine, theirs[j]);
  }
  std::vector<at::Tensor> args;
  size_t i = 0;
  return run_apply(*impl_, std::move(batch_size),
                   [&](const KeyPath&, const at::Tensor& t) {
                     args.clear();
                     args.push_back(t);
                     for (const auto& o : theirs) args.push_back(o[i]);
                     ++i;
                     return fn(args);
                   });
}

TensorDict TensorDict::named_apply(
    const NamedLeafFn& fn,
    c10::optional<std::vector<int64_t>> batch_size) const {
  return run_apply(*impl_, std::move(batch_size),
                   [&](const KeyPath& path, const at::Tensor& t) {
                     return fn(path.key(), t);
                   });
}

const TensorDict& TensorDict::apply_(const LeafFn& fn) const {
  TensorVec leaves = leaf_tensors(*impl_);
  TensorVec results;
  results.reserve(leaves.size());
  for (const auto& t : leaves) results.push_back(fn(t));
  for (size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor& r = results[i];
    if (!r.defined() || r.is_same(leaves[i])) continue;
    check_leaf_write("apply_", LeafName(*impl_, i), leaves[i], r,
                     WriteKind::kCopy);
    TORCH_CHECK(at::is_expandable_to(r.sizes(), leaves[i].sizes()),
                "apply_: key ", leaf_key(*impl_, i).str(),
                ": cannot copy a result of shape ", shape_str(r.sizes()),
                " into the leaf of shape ", shape_str(leaves[i].sizes()));
  }
  TensorVec dst, src;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const at::Tensor& r = results[i];
    if (!r.defined() || r.is_same(leaves[i])) continue;
    dst.push_back(leaves[i]);
    src.push_back(r);
  }
  detail::foreach_copy_(dst, src, /*non_blocking=*/false);
  return *this;
}

// ===========================================================================
// Key manipulation
// ===========================================================================

const TensorDict& TensorDict::update(const TensorDict& other) const {
  if (other.is_same(*this)) return *this;
  // Planned and checked before anything changes: `other` may share levels
  // with this dict, which the sets below may grow.
  std::vector<std::pair<NestedKey, Node>> sets;
  pair_walk<Pairing::kInto>(
      *other.impl_, impl_.get(),
      [&](const KeyPath& path, const Match<TensorDictImpl>& m) {
        if (m.b != nullptr && m.b->is_dict() && m.a.is_dict() &&
            !m.b->is_non_tensor() && !m.a.is_non_tensor()) {
          // A level updated with itself stays as it is.
          return m.b->dict == m.a.dict ? Next::kSkip : Next::kDescend;
        }
        NestedKey key = path.key();
        check_unlocked(*m.b_level, "update", key);
        // A sub-dict is stored by handle: it may not hold its new parent.
        TORCH_CHECK(!m.a.is_dict() || !reaches(*m.a.dict, m.b_level),
                    "update: key ", key.str(),
                    ": cannot set a TensorDict inside itself");
        sets.emplace_back(std::move(key), m.a);
        return Next::kSkip;
      });
  StructureSnapshot snapshot(*impl_);
  try {
    for (const auto& [key, entry] : sets) {
      if (entry.is_non_tensor() && !non_tensor_is_stack(*entry.dict)) {
        set_non_tensor(key, entry.dict->non_tensor->data);
      } else if (entry.is_dict()) {
        set(key, TensorDictImpl::wrap(entry.dict));
      } else {
        set(key, entry.tensor);
      }
    }
  } catch (...) {
    snapshot.restore();
    throw;
  }
  return *this;
}

const TensorDict& TensorDict::update_(const TensorDict& other) const {
  detail::update_leaves(*impl_, *other.impl_);
  return *this;
}

TensorDict TensorDict::select(const std::vector<NestedKey>& keys) const {
  for (const auto& key : keys) (void)lookup_or_throw(*impl_, key);
  auto out = make_impl(impl_->batch_size, impl_->device);
  for (const auto& key : keys) {
    const auto& parts = key.parts();
    const TensorDictImpl* src = impl_.get();
    TensorDictImpl* dst = out.get();
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const Node* sn = src->find(parts[i]);
      Node* dn = dst->find(parts[i]);
      if (dn == nullptr) {
        dst->nodes.push_back(
            Node{parts[i], at::Tensor(),
                 make_impl(sn->dict->batch_size, sn->dict->device)});
        dn = &dst->nodes.back();
      }
      src = sn->dict.get();
      dst = dn->dict.get();
    }
    const Node* sn = src->find(parts.back());
    Node value = sn->is_dict()
                     ? Node{sn->key, at::Tensor(), shallow_copy(*sn->dict)}
                     : Node{sn->key, sn->tensor, nullptr};
    if (Node* existing = dst->find(parts.back())) {
      *existing = std::move(value);
    } else {
      dst->nodes.push_back(std::move(value));
    }
  }
  return TensorDict(std::move(out));
}

TensorDict TensorDict::exclude(const std::vector<NestedKey>& keys) const {
  ImplPtr out = shallow_copy(*impl_);
  for (const auto& key : keys) {
    TensorDictImpl* parent = parent_of(*out, key);
    if (parent == nullptr) continue;
    auto& nodes = parent->nodes;
    nodes.erase(
        std::remove_if(nodes.begin(), nodes.end(),
                       [&](const Node& n) { return n.key == key.back(); }),
        nodes.end());
  }
  return TensorDict(std::move(out));
}

TensorDict TensorDict::flatten_keys(const std::string& sep) const {
  return TensorDict(flatten_impl(*impl_, sep));
}

TensorDict TensorDict::unflatten_keys(const std::string& sep) const {
  TORCH_CHECK_VALUE(!sep.empty(), "unflatten_keys: the separator is empty");
  return TensorDict(unflatten_impl(*impl_, sep));
}

std::vector<std::pair<NestedKey, Entry>> TensorDict::items(
    bool include_nested, bool leaves_only) const {
  std::vector<std::pair<NestedKey, Entry>> out;
  out.reserve(impl_->nodes.size());
  collect_entries(*impl_, include_nested, leaves_only, &out, nullptr);
  return out;
}

std::vector<Entry> TensorDict::values(bool include_nested,
                                      bool leaves_only) const {
  std::vector<Entry> out;
  out.reserve(impl_->nodes.size());
  collect_entries(*impl_, include_nested, leaves_only, nullptr, &out);
  return out;
}

// ===========================================================================
// dtype and autograd
// ===========================================================================

TensorDict TensorDict::to_float() const { return to(at::kFloat); }
TensorDict TensorDict::to_double() const { return to(at::kDouble); }
TensorDict TensorDict::half() const { return to(at::kHalf); }
TensorDict TensorDict::bfloat16() const { return to(at::kBFloat16); }

const TensorDict& TensorDict::requires_grad_(bool requires_grad) const {
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    if (at::isFloatingType(t.scalar_type()) ||
        at::isComplexType(t.scalar_type())) {
      t.requires_grad_(requires_grad);
    }
  });
  return *this;
}

const TensorDict& TensorDict::detach_() const {
  for_each_leaf(*impl_, [](const at::Tensor& t) { t.detach_(); });
  return *this;
}

}  // namespace tensordict
