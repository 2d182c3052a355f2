// Apply, key manipulation, arithmetic, masking, reductions, dtype and
// autograd helpers of TensorDict.
//
// Leaf-wise operations walk the tree depth first in insertion order. The
// in-place ones validate every leaf before they write any, so a failed call
// leaves the dict unchanged; arithmetic runs LibTorch's `_foreach_` kernels
// over the flat leaf list wherever the kernel accepts the operands.
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
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using namespace detail;  // NOLINT(google-build-using-namespace)

namespace {

// ===========================================================================
// Flat leaf lists
// ===========================================================================

using TensorVec = std::vector<at::Tensor>;

TensorDict rebuild_dict(const TensorDictImpl& src, TensorVec vals,
                        const char* op) {
  return TensorDictImpl::wrap(rebuild_from(src, std::move(vals), op));
}

// Whether a list may go through a `_foreach_` kernel: LibTorch 1.13 rejects
// empty lists and has no autograd formula for these kernels.
bool foreach_ok(const TensorVec& a, const TensorVec* b = nullptr) {
  if (a.empty()) return false;
  if (!at::GradMode::is_enabled()) return true;
  for (const auto& t : a) {
    if (t.requires_grad()) return false;
  }
  if (b != nullptr) {
    for (const auto& t : *b) {
      if (t.requires_grad()) return false;
    }
  }
  return true;
}

// LibTorch 1.13's list-list `_foreach_` kernels require equal shapes.
bool same_sizes(const TensorVec& a, const TensorVec& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes()) return false;
  }
  return true;
}


// ===========================================================================
// Apply
// ===========================================================================

// The result of an apply over `src`: `leaf(path, tensor)` computes each leaf
// (see `rebuild`), and the root gets `batch_size` (default: src's).
template <typename LeafFnT>
TensorDict run_apply(const TensorDictImpl& src,
                     const c10::optional<std::vector<int64_t>>& batch_size,
                     const LeafFnT& leaf) {
  std::vector<int64_t> batch = batch_size ? *batch_size : src.batch_size;
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
// Arithmetic
// ===========================================================================

enum class Op { kAdd, kSub, kMul, kDiv };

const char* op_name(Op op, bool inplace) {
  switch (op) {
    case Op::kAdd: return inplace ? "add_" : "add";
    case Op::kSub: return inplace ? "sub_" : "sub";
    case Op::kMul: return inplace ? "mul_" : "mul";
    case Op::kDiv: return inplace ? "div_" : "div";
  }
  return "";
}

// The dtype of `op`'s result given the promoted operand dtype `rt`.
at::ScalarType op_result_type(Op op, at::ScalarType rt) {
  if (op == Op::kDiv && at::isIntegralType(rt, /*includeBool=*/true)) {
    return at::typeMetaToScalarType(at::get_default_dtype());
  }
  return rt;
}

// The promoted dtype of `leaf` op `other`, skipping the dispatcher call of
// at::result_type in the common cases.
at::ScalarType promoted(const at::Tensor& leaf, const at::Tensor& other) {
  if (leaf.scalar_type() == other.scalar_type()) return leaf.scalar_type();
  return at::result_type(leaf, other);
}
at::ScalarType promoted(const at::Tensor& leaf, const at::Scalar& other) {
  const at::ScalarType t = leaf.scalar_type();
  if (at::isComplexType(t) || (at::isFloatingType(t) && !other.isComplex())) {
    return t;
  }
  return at::result_type(leaf, other);
}

// Validates an in-place op on leaf `i` whose promoted operand dtype is `rt`.
void check_inplace_dtype(Op op, const TensorDictImpl& root, size_t i,
                         const at::Tensor& leaf, at::ScalarType rt) {
  TORCH_CHECK(!(op == Op::kSub && rt == at::kBool), op_name(op, true),
              ": key ", leaf_key(root, i).str(),
              ": subtraction of bool tensors is not supported");
  const at::ScalarType res = op_result_type(op, rt);
  TORCH_CHECK(at::canCast(res, leaf.scalar_type()), op_name(op, true),
              ": key ", leaf_key(root, i).str(), ": the result type ",
              dtype_name(res), " can't be cast to the leaf's dtype ",
              dtype_name(leaf.scalar_type()));
}

// LibTorch's rules for `alpha` in add/sub over the promoted dtype `rt`.
void check_alpha(const char* op, const TensorDictImpl& root, size_t i,
                 at::ScalarType rt, const at::Scalar& alpha) {
  TORCH_CHECK(!alpha.isBoolean() || rt == at::kBool, op, ": key ",
              leaf_key(root, i).str(),
              ": a bool alpha is only supported for bool results");
  TORCH_CHECK(at::isFloatingType(rt) || at::isComplexType(rt) ||
                  alpha.isIntegral(/*includeBool=*/true),
              op, ": key ", leaf_key(root, i).str(),
              ": alpha must not be a floating-point number for a leaf of "
              "dtype ",
              dtype_name(rt));
  TORCH_CHECK(at::isComplexType(rt) || !alpha.isComplex(), op, ": key ",
              leaf_key(root, i).str(),
              ": alpha must not be a complex number for a leaf of dtype ",
              dtype_name(rt));
}

// `other` aligned to the leading dims of a leaf of `dim` dims: trailing
// singleton dims appended.
at::Tensor align_left(const at::Tensor& other, int64_t dim) {
  if (other.dim() >= dim) return other;
  std::vector<int64_t> shape(other.sizes().begin(), other.sizes().end());
  shape.resize(static_cast<size_t>(dim), 1);
  return other.view(shape);
}

// Throws unless `t` (a mask, condition or operand) broadcasts to the leading
// batch dims of `impl`.
void check_batch_broadcast(const char* op, const char* what,
                           const TensorDictImpl& impl, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), op, ": the ", what, " is an undefined tensor");
  bool ok = t.dim() <= impl.batch_dims();
  for (int64_t d = 0; ok && d < t.dim(); ++d) {
    const int64_t s = t.size(d);
    ok = s == 1 || s == impl.batch_size[static_cast<size_t>(d)];
  }
  TORCH_CHECK(ok, op, ": the ", what, " of shape ", shape_str(t.sizes()),
              " does not broadcast to the batch_size ",
              shape_str(impl.batch_size),
              " (it is aligned with the leading batch dims)");
}

at::Tensor leaf_op(Op op, const at::Tensor& a, const at::Tensor& b,
                   const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd: return at::add(a, b, alpha);
    case Op::kSub: return at::sub(a, b, alpha);
    case Op::kMul: return at::mul(a, b);
    case Op::kDiv: return at::div(a, b);
  }
  return {};
}

at::Tensor leaf_op(Op op, const at::Tensor& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd: return at::add(a, b);
    case Op::kSub: return at::sub(a, b);
    case Op::kMul: return at::mul(a, b);
    case Op::kDiv: return at::div(a, b);
  }
  return {};
}

void leaf_op_(Op op, const at::Tensor& a, const at::Tensor& b,
              const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd: a.add_(b, alpha); break;
    case Op::kSub: a.sub_(b, alpha); break;
    case Op::kMul: a.mul_(b); break;
    case Op::kDiv: a.div_(b); break;
  }
}

TensorVec foreach_op(Op op, const TensorVec& a, const TensorVec& b,
                     const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd: return at::_foreach_add(a, b, alpha);
    case Op::kSub: return at::_foreach_sub(a, b, alpha);
    case Op::kMul: return at::_foreach_mul(a, b);
    case Op::kDiv: return at::_foreach_div(a, b);
  }
  return {};
}

TensorVec foreach_op(Op op, const TensorVec& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd: return at::_foreach_add(a, b);
    case Op::kSub: return at::_foreach_sub(a, b);
    case Op::kMul: return at::_foreach_mul(a, b);
    case Op::kDiv: return at::_foreach_div(a, b);
  }
  return {};
}

void foreach_op_(Op op, const TensorVec& a, const TensorVec& b,
                 const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd: at::_foreach_add_(a, b, alpha); break;
    case Op::kSub: at::_foreach_sub_(a, b, alpha); break;
    case Op::kMul: at::_foreach_mul_(a, b); break;
    case Op::kDiv: at::_foreach_div_(a, b); break;
  }
}

void foreach_op_(Op op, const TensorVec& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd: at::_foreach_add_(a, b); break;
    case Op::kSub: at::_foreach_sub_(a, b); break;
    case Op::kMul: at::_foreach_mul_(a, b); break;
    case Op::kDiv: at::_foreach_div_(a, b); break;
  }
}

// ---- Out of place ---------------------------------------------------------

TensorDict binary(Op op, const TensorDict& a, const TensorDict& b,
                  const at::Scalar& alpha = 1) {
  TensorVec va, vb;
  pair_leaves(TensorDictImpl::of(a), TensorDictImpl::of(b), op_name(op, false),
              va, vb);
  TensorVec out;
  if (foreach_ok(va, &vb) && same_sizes(va, vb)) {
    out = foreach_op(op, va, vb, alpha);
  } else {
    out.reserve(va.size());
    for (size_t i = 0; i < va.size(); ++i) {
      out.push_back(leaf_op(op, va[i], vb[i], alpha));
    }
  }
  return rebuild_dict(TensorDictImpl::of(a), std::move(out), op_name(op, false));
}

TensorDict binary(Op op, const TensorDict& a, const at::Tensor& b) {
  check_batch_broadcast(op_name(op, false), "tensor operand", TensorDictImpl::of(a), b);
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  TensorVec out;
  out.reserve(va.size());
  for (const auto& t : va) out.push_back(leaf_op(op, t, align_left(b, t.dim()), 1));
  return rebuild_dict(TensorDictImpl::of(a), std::move(out), op_name(op, false));
}

TensorDict binary(Op op, const TensorDict& a, const at::Scalar& b) {
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  TensorVec out;
  if (foreach_ok(va)) {
    out = foreach_op(op, va, b);
  } else {
    out.reserve(va.size());
    for (const auto& t : va) out.push_back(leaf_op(op, t, b));
  }
  return rebuild_dict(TensorDictImpl::of(a), std::move(out), op_name(op, false));
}

// ---- In place -------------------------------------------------------------

const TensorDict& binary_(Op op, const TensorDict& a, const TensorDict& b,
                          const at::Scalar& alpha = 1) {
  const char* name = op_name(op, true);
  TensorVec va, vb;
  pair_leaves(TensorDictImpl::of(a), TensorDictImpl::of(b), name, va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    check_leaf_write(name, LeafName(TensorDictImpl::of(a), i), va[i], vb[i],
                     WriteKind::kOp);
    const at::ScalarType rt = promoted(va[i], vb[i]);
    check_inplace_dtype(op, TensorDictImpl::of(a), i, va[i], rt);
    if (op == Op::kAdd || op == Op::kSub) {
      check_alpha(name, TensorDictImpl::of(a), i, rt, alpha);
    }
    TORCH_CHECK(at::is_expandable_to(vb[i].sizes(), va[i].sizes()), name,
                ": key ", leaf_key(TensorDictImpl::of(a), i).str(), ": the other leaf's shape ",
                shape_str(vb[i].sizes()), " does not broadcast to the leaf's shape ",
                shape_str(va[i].sizes()));
  }
  if (foreach_ok(va, &vb) && same_sizes(va, vb)) {
    foreach_op_(op, va, vb, alpha);
  } else {
    for (size_t i = 0; i < va.size(); ++i) leaf_op_(op, va[i], vb[i], alpha);
  }
  return a;
}

const TensorDict& binary_(Op op, const TensorDict& a, const at::Tensor& b) {
  const char* name = op_name(op, true);
  check_batch_broadcast(name, "tensor operand", TensorDictImpl::of(a), b);
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  for (size_t i = 0; i < va.size(); ++i) {
    check_leaf_write(name, LeafName(TensorDictImpl::of(a), i), va[i],
                     align_left(b, va[i].dim()), WriteKind::kOp);
    check_inplace_dtype(op, TensorDictImpl::of(a), i, va[i],
                        promoted(va[i], b));
  }
  for (const auto& t : va) leaf_op_(op, t, align_left(b, t.dim()), 1);
  return a;
}

const TensorDict& binary_(Op op, const TensorDict& a, const at::Scalar& b) {
  const char* name = op_name(op, true);
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  for (size_t i = 0; i < va.size(); ++i) {
    check_leaf_write(name, LeafName(TensorDictImpl::of(a), i), va[i],
                     at::Tensor(), WriteKind::kOp);
    check_inplace_dtype(op, TensorDictImpl::of(a), i, va[i],
                        promoted(va[i], b));
  }
  if (foreach_ok(va)) {
    foreach_op_(op, va, b);
  } else {
    for (const auto& t : va) {
      switch (op) {
        case Op::kAdd: t.add_(b); break;
        case Op::kSub: t.sub_(b); break;
        case Op::kMul: t.mul_(b); break;
        case Op::kDiv: t.div_(b); break;
      }
    }
  }
  return a;
}

// ===========================================================================
// Reductions
// ===========================================================================

enum class Reduce { kSum, kMean, kMin, kMax, kStd, kVar };

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::kSum: return "sum";
    case Reduce::kMean: return "mean";
    case Reduce::kMin: return "min";
    case Reduce::kMax: return "max";
    case Reduce::kStd: return "std";
    case Reduce::kVar: return "var";
  }
  return "";
}

// Reduces `t` over `dims` (all of them batch dims; empty means no batch dims,
// for which the reduction runs over a new singleton dim and is the identity
// up to dtype promotion). `correction`: std and var only.
at::Tensor reduce_leaf(Reduce r, const at::Tensor& t, c10::IntArrayRef dims,
                       bool keepdim, int64_t correction) {
  if (dims.empty()) {
    static const std::vector<int64_t> kFirst = {0};
    return reduce_leaf(r, t.unsqueeze(0), kFirst, false, correction);
  }
  if (r == Reduce::kStd || r == Reduce::kVar) {
    const c10::optional<int64_t> c = correction;
    return r == Reduce::kStd ? at::std(t, at::OptionalIntArrayRef(dims), c, keepdim)
                             : at::var(t, at::OptionalIntArrayRef(dims), c, keepdim);
  }
  if (dims.size() == 1) {
    switch (r) {
      case Reduce::kSum: return t.sum(dims[0], keepdim);
      case Reduce::kMean: return t.mean(dims[0], keepdim);
      case Reduce::kMin: return std::get<0>(t.min(dims[0], keepdim));
      case Reduce::kMax: return std::get<0>(t.max(dims[0], keepdim));
      default: break;
    }
  }
  switch (r) {
    case Reduce::kSum: return t.sum(dims, keepdim);
    case Reduce::kMean: return t.mean(dims, keepdim);
    case Reduce::kMin: return t.amin(dims, keepdim);
    case Reduce::kMax: return t.amax(dims, keepdim);
    default: break;
  }
  return {};
}

// `dims`: the reduced dims (of the root batch); `keepdim` keeps them as 1.
// Reduces every leaf over batch dims `dims`.
TensorDict reduce_tree(Reduce r, const TensorDictImpl& src,
                       const std::vector<int64_t>& dims, bool keepdim,
                       int64_t correction = 1) {
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < src.batch_dims(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) {
      batch.push_back(src.batch_size[static_cast<size_t>(d)]);
    } else if (keepdim) {
      batch.push_back(1);
    }
  }
  return TensorDictImpl::wrap(rebuild(
      src, std::move(batch), [&](const KeyPath& path, const at::Tensor& t) {
        const bool needs_float =
            r == Reduce::kMean || r == Reduce::kStd || r == Reduce::kVar;
        TORCH_CHECK_TYPE(!needs_float || at::isFloatingType(t.scalar_type()) ||
                             at::isComplexType(t.scalar_type()),
                         reduce_name(r), ": key ", path.key().str(),
                         " has dtype ", dtype_name(t.scalar_type()), "; ",
                         reduce_name(r),
                         " needs floating-point or complex leaves (cast "
                         "with to_float() first)");
        try {
          return reduce_leaf(r, t, dims, keepdim, correction);
        } catch (const c10::Error& e) {
          TORCH_CHECK(false, reduce_name(r), ": key ", path.key().str(), ": ",
                      e.msg());
        }
      },
      reduce_name(r)));
}

TensorDict reduce_all(Reduce r, const TensorDictImpl& impl) {
  std::vector<int64_t> dims(static_cast<size_t>(impl.batch_dims()));
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
  return reduce_tree(r, impl, dims, false);
}

// `dim` (in [-batch_dims, batch_dims)) as a batch dim index, checked.
int64_t batch_dim(const char* op, const TensorDictImpl& impl, int64_t dim) {
  const int64_t bd = impl.batch_dims();
  TORCH_CHECK_INDEX(dim >= -bd && dim < bd, op, ": dim ", dim,
                    " is out of range for TensorDict with batch_size ",
                    shape_str(impl.batch_size), " (", bd, " batch dims)");
  return dim < 0 ? dim + bd : dim;
}

TensorDict reduce_dim(Reduce r, const TensorDictImpl& impl, int64_t dim,
                      bool keepdim, int64_t correction = 1) {
  return reduce_tree(r, impl, {batch_dim(reduce_name(r), impl, dim)}, keepdim,
                     correction);
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
      Entry e = n.is_dict() ? Entry(TensorDictImpl::wrap(n.dict)) : Entry(n.tensor);
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
          Entry e(TensorDictImpl::wrap(levels.back()->find(*path.parts.back())->dict));
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

std::vector<std::string> split_key(const std::string& key,
                                   const std::string& sep) {
  std::vector<std::string> parts;
  if (sep.empty()) return {key};
  size_t start = 0;
  while (true) {
    const size_t pos = key.find(sep, start);
    if (pos == std::string::npos) {
      parts.push_back(key.substr(start));
      break;
    }
    parts.push_back(key.substr(start, pos - start));
    start = pos + sep.size();
  }
  return parts;
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
      cur->nodes.push_back(
          Node{parts[i], at::Tensor(), make_impl(cur->batch_size, cur->device)});
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
                " collides with another key at ", NestedKey(std::move(at)).str());
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
                    it == seen.end() ? std::string() : it->second.str(), " and ",
                    path.key().str(), " both flatten to '", name, "'");
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

TensorDict TensorDict::apply(const LeafFn& fn,
                             c10::optional<std::vector<int64_t>> batch_size) const {
  return run_apply(*impl_, batch_size,
                   [&](const KeyPath&, const at::Tensor& t) { return fn(t); });
}

TensorDict TensorDict::apply(
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& fn,
    const TensorDict& other,
    c10::optional<std::vector<int64_t>> batch_size) const {
  TensorVec mine, theirs;
  pair_leaves(*impl_, *other.impl_, "apply", mine, theirs);
  size_t i = 0;
  return run_apply(*impl_, batch_size,
                   [&](const KeyPath&, const at::Tensor& t) {
                     return fn(t, theirs[i++]);
                   });
}

TensorDict TensorDict::apply(const LeafFnN& fn,
                             const std::vector<TensorDict>& others,
                             c10::optional<std::vector<int64_t>> batch_size) const {
  std::vector<TensorVec> theirs(others.size());
  for (size_t j = 0; j < others.size(); ++j) {
    TensorVec mine;
    pair_leaves(*impl_, *others[j].impl_, "apply", mine, theirs[j]);
  }
  std::vector<at::Tensor> args;
  size_t i = 0;
  return run_apply(*impl_, batch_size,
                   [&](const KeyPath&, const at::Tensor& t) {
                     args.clear();
                     args.push_back(t);
                     for (const auto& o : theirs) args.push_back(o[i]);
                     ++i;
                     return fn(args);
                   });
}

TensorDict TensorDict::named_apply(
    const NamedLeafFn& fn, c10::optional<std::vector<int64_t>> batch_size) const {
  return run_apply(*impl_, batch_size,
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
        dst->nodes.push_back(Node{parts[i], at::Tensor(),
                                  make_impl(sn->dict->batch_size, sn->dict->device)});
        dn = &dst->nodes.back();
      }
      src = sn->dict.get();
      dst = dn->dict.get();
    }
    const Node* sn = src->find(parts.back());
    Node value = sn->is_dict() ? Node{sn->key, at::Tensor(), shallow_copy(*sn->dict)}
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
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(),
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
// In-place arithmetic
// ===========================================================================

const TensorDict& TensorDict::add_(const TensorDict& other,
                                   const at::Scalar& alpha) const {
  return binary_(Op::kAdd, *this, other, alpha);
}
const TensorDict& TensorDict::add_(const at::Scalar& other) const {
  return binary_(Op::kAdd, *this, other);
}
const TensorDict& TensorDict::add_(const at::Tensor& other) const {
  return binary_(Op::kAdd, *this, other);
}
const TensorDict& TensorDict::sub_(const TensorDict& other,
                                   const at::Scalar& alpha) const {
  return binary_(Op::kSub, *this, other, alpha);
}
const TensorDict& TensorDict::sub_(const at::Scalar& other) const {
  return binary_(Op::kSub, *this, other);
}
const TensorDict& TensorDict::sub_(const at::Tensor& other) const {
  return binary_(Op::kSub, *this, other);
}
const TensorDict& TensorDict::mul_(const TensorDict& other) const {
  return binary_(Op::kMul, *this, other);
}
const TensorDict& TensorDict::mul_(const at::Scalar& other) const {
  return binary_(Op::kMul, *this, other);
}
const TensorDict& TensorDict::mul_(const at::Tensor& other) const {
  return binary_(Op::kMul, *this, other);
}
const TensorDict& TensorDict::div_(const TensorDict& other) const {
  return binary_(Op::kDiv, *this, other);
}
const TensorDict& TensorDict::div_(const at::Scalar& other) const {
  return binary_(Op::kDiv, *this, other);
}
const TensorDict& TensorDict::div_(const at::Tensor& other) const {
  return binary_(Op::kDiv, *this, other);
}

// ===========================================================================
// Masking and reductions
// ===========================================================================

TensorDict TensorDict::where(const at::Tensor& cond,
                             const TensorDict& other) const {
  check_batch_broadcast("where", "condition", *impl_, cond);
  TORCH_CHECK_TYPE(cond.scalar_type() == at::kBool,
                   "where: the condition must be a bool tensor, got ",
                   dtype_name(cond.scalar_type()));
  TensorVec va, vb;
  pair_leaves(*impl_, *other.impl_, "where", va, vb);
  TensorVec out;
  out.reserve(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    out.push_back(at::where(align_left(cond, va[i].dim()), va[i], vb[i]));
  }
  return rebuild_dict(*impl_, std::move(out), "where");
}

TensorDict TensorDict::where(const at::Tensor& cond,
                             const at::Scalar& other) const {
  check_batch_broadcast("where", "condition", *impl_, cond);
  TORCH_CHECK_TYPE(cond.scalar_type() == at::kBool,
                   "where: the condition must be a bool tensor, got ",
                   dtype_name(cond.scalar_type()));
  TensorVec va = leaf_tensors(*impl_);
  TensorVec out;
  out.reserve(va.size());
  for (const auto& t : va) {
    out.push_back(at::where(align_left(cond, t.dim()), t, other));
  }
  return rebuild_dict(*impl_, std::move(out), "where");
}

TensorDict TensorDict::masked_fill(const at::Tensor& mask,
                                   const at::Scalar& value) const {
  check_batch_broadcast("masked_fill", "mask", *impl_, mask);
  TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool,
                   "masked_fill: the mask must be a bool tensor, got ",
                   dtype_name(mask.scalar_type()));
  TensorVec va = leaf_tensors(*impl_);
  TensorVec out;
  out.reserve(va.size());
  for (const auto& t : va) {
    out.push_back(t.masked_fill(align_left(mask, t.dim()), value));
  }
  return rebuild_dict(*impl_, std::move(out), "masked_fill");
}

const TensorDict& TensorDict::masked_fill_(const at::Tensor& mask,
                                           const at::Scalar& value) const {
  check_batch_broadcast("masked_fill_", "mask", *impl_, mask);
  TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool,
                   "masked_fill_: the mask must be a bool tensor, got ",
                   dtype_name(mask.scalar_type()));
  TensorVec va = leaf_tensors(*impl_);
  for (size_t i = 0; i < va.size(); ++i) {
    check_leaf_write("masked_fill_", LeafName(*impl_, i), va[i], at::Tensor(),
                     WriteKind::kOp);
  }
  for (const auto& t : va) t.masked_fill_(align_left(mask, t.dim()), value);
  return *this;
}

const TensorDict& TensorDict::fill_(const NestedKey& key,
                                    const at::Scalar& value) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (!n.is_dict()) {
    check_leaf_write("fill_", key, n.tensor, at::Tensor(), WriteKind::kOp);
    n.tensor.fill_(value);
    return *this;
  }
  TensorVec va = leaf_tensors(*n.dict);
  for (size_t i = 0; i < va.size(); ++i) {
    check_leaf_write("fill_", LeafName(*n.dict, i, &key), va[i], at::Tensor(),
                     WriteKind::kOp);
  }
  for (const auto& t : va) t.fill_(value);
  return *this;
}

TensorDict TensorDict::sum() const { return reduce_all(Reduce::kSum, *impl_); }
TensorDict TensorDict::sum(int64_t dim, bool keepdim) const {
  return reduce_dim(Reduce::kSum, *impl_, dim, keepdim);
}
TensorDict TensorDict::mean() const { return reduce_all(Reduce::kMean, *impl_); }
TensorDict TensorDict::mean(int64_t dim, bool keepdim) const {
  return reduce_dim(Reduce::kMean, *impl_, dim, keepdim);
}
TensorDict TensorDict::min() const { return reduce_all(Reduce::kMin, *impl_); }
TensorDict TensorDict::min(int64_t dim, bool keepdim) const {
  return reduce_dim(Reduce::kMin, *impl_, dim, keepdim);
}
TensorDict TensorDict::max() const { return reduce_all(Reduce::kMax, *impl_); }
TensorDict TensorDict::max(int64_t dim, bool keepdim) const {
  return reduce_dim(Reduce::kMax, *impl_, dim, keepdim);
}
TensorDict TensorDict::std() const { return reduce_all(Reduce::kStd, *impl_); }
TensorDict TensorDict::std(int64_t dim, bool keepdim, int64_t correction) const {
  return reduce_dim(Reduce::kStd, *impl_, dim, keepdim, correction);
}
TensorDict TensorDict::var() const { return reduce_all(Reduce::kVar, *impl_); }
TensorDict TensorDict::var(int64_t dim, bool keepdim, int64_t correction) const {
  return reduce_dim(Reduce::kVar, *impl_, dim, keepdim, correction);
}

TensorDict TensorDict::cumsum(int64_t dim) const {
  const int64_t d = batch_dim("cumsum", *impl_, dim);
  return TensorDictImpl::wrap(rebuild_leaves(
      *impl_, [&](const at::Tensor& t) { return t.cumsum(d); }));
}

TensorDict TensorDict::norm(const at::Scalar& p) const {
  check_no_non_tensor("norm", "a dict of norms", *impl_);
  return TensorDictImpl::wrap(rebuild(
      *impl_, {},
      [&](const KeyPath& path, const at::Tensor& t) {
        TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()) ||
                             at::isComplexType(t.scalar_type()),
                         "norm: key ", path.key().str(), " has dtype ",
                         dtype_name(t.scalar_type()),
                         "; norm needs floating-point or complex leaves");
        return t.norm(p);
      },
      nullptr,
      // Every level's leaves are scalars: batch size [] throughout.
      [](const TensorDictImpl&, TensorDictImpl& out) {
        out.batch_size.clear();
      }));
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

// ===========================================================================
// Arithmetic operators
// ===========================================================================

TensorDict operator+(const TensorDict& a, const TensorDict& b) {
  return binary(Op::kAdd, a, b);
}
TensorDict operator-(const TensorDict& a, const TensorDict& b) {
  return binary(Op::kSub, a, b);
}
TensorDict operator*(const TensorDict& a, const TensorDict& b) {
  return binary(Op::kMul, a, b);
}
TensorDict operator/(const TensorDict& a, const TensorDict& b) {
  return binary(Op::kDiv, a, b);
}
TensorDict operator+(const TensorDict& a, const at::Tensor& b) {
  return binary(Op::kAdd, a, b);
}
TensorDict operator-(const TensorDict& a, const at::Tensor& b) {
  return binary(Op::kSub, a, b);
}
TensorDict operator*(const TensorDict& a, const at::Tensor& b) {
  return binary(Op::kMul, a, b);
}
TensorDict operator/(const TensorDict& a, const at::Tensor& b) {
  return binary(Op::kDiv, a, b);
}
TensorDict operator+(const TensorDict& a, const at::Scalar& b) {
  return binary(Op::kAdd, a, b);
}
TensorDict operator-(const TensorDict& a, const at::Scalar& b) {
  return binary(Op::kSub, a, b);
}
TensorDict operator*(const TensorDict& a, const at::Scalar& b) {
  return binary(Op::kMul, a, b);
}
TensorDict operator/(const TensorDict& a, const at::Scalar& b) {
  return binary(Op::kDiv, a, b);
}
TensorDict operator+(const at::Scalar& a, const TensorDict& b) {
  return binary(Op::kAdd, b, a);
}
TensorDict operator*(const at::Scalar& a, const TensorDict& b) {
  return binary(Op::kMul, b, a);
}
TensorDict operator-(const TensorDict& a) {
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  TensorVec out = foreach_ok(va) ? at::_foreach_neg(va) : TensorVec();
  if (out.empty()) {
    out.reserve(va.size());
    for (const auto& t : va) out.push_back(at::neg(t));
  }
  return rebuild_dict(TensorDictImpl::of(a), std::move(out), "neg");
}

const TensorDict& operator+=(const TensorDict& a, const TensorDict& b) {
  return a.add_(b);
}
const TensorDict& operator-=(const TensorDict& a, const TensorDict& b) {
  return a.sub_(b);
}
const TensorDict& operator*=(const TensorDict& a, const TensorDict& b) {
  return a.mul_(b);
}
const TensorDict& operator/=(const TensorDict& a, const TensorDict& b) {
  return a.div_(b);
}
const TensorDict& operator+=(const TensorDict& a, const at::Tensor& b) {
  return a.add_(b);
}
const TensorDict& operator-=(const TensorDict& a, const at::Tensor& b) {
  return a.sub_(b);
}
const TensorDict& operator*=(const TensorDict& a, const at::Tensor& b) {
  return a.mul_(b);
}
const TensorDict& operator/=(const TensorDict& a, const at::Tensor& b) {
  return a.div_(b);
}
const TensorDict& operator+=(const TensorDict& a, const at::Scalar& b) {
  return a.add_(b);
}
const TensorDict& operator-=(const TensorDict& a, const at::Scalar& b) {
  return a.sub_(b);
}
const TensorDict& operator*=(const TensorDict& a, const at::Scalar& b) {
  return a.mul_(b);
}
const TensorDict& operator/=(const TensorDict& a, const at::Scalar& b) {
  return a.div_(b);
}

}  // namespace tensordict
