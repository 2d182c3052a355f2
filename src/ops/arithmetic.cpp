// Arithmetic (operators, add_/sub_/mul_/div_, lerp_) and masking (where,
// masked_fill, fill_) of TensorDict.
//
// Arithmetic runs LibTorch's `_foreach_` kernels over the flat leaf list
// wherever the kernel accepts the operands. In-place ops validate every leaf
// before they write any, so a failed call leaves the dict unchanged.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/compat.h"
#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/row_copy.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "ops/common.h"
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using namespace detail;  // NOLINT(google-build-using-namespace)

namespace {
// ===========================================================================
// Arithmetic
// ===========================================================================

enum class Op { kAdd, kSub, kMul, kDiv };

const char* op_name(Op op, bool inplace) {
  switch (op) {
    case Op::kAdd:
      return inplace ? "add_" : "add";
    case Op::kSub:
      return inplace ? "sub_" : "sub";
    case Op::kMul:
      return inplace ? "mul_" : "mul";
    case Op::kDiv:
      return inplace ? "div_" : "div";
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
  TORCH_CHECK(!(op == Op::kSub && rt == at::kBool), op_name(op, true), ": key ",
              leaf_key(root, i).str(),
              ": subtraction of bool tensors is not supported");
  const at::ScalarType res = op_result_type(op, rt);
  TORCH_CHECK(at::canCast(res, leaf.scalar_type()), op_name(op, true), ": key ",
              leaf_key(root, i).str(), ": the result type ", dtype_name(res),
              " can't be cast to the leaf's dtype ",
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
    case Op::kAdd:
      return at::add(a, b, alpha);
    case Op::kSub:
      return at::sub(a, b, alpha);
    case Op::kMul:
      return at::mul(a, b);
    case Op::kDiv:
      return at::div(a, b);
  }
  return {};
}

at::Tensor leaf_op(Op op, const at::Tensor& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd:
      return at::add(a, b);
    case Op::kSub:
      return at::sub(a, b);
    case Op::kMul:
      return at::mul(a, b);
    case Op::kDiv:
      return at::div(a, b);
  }
  return {};
}

void leaf_op_(Op op, const at::Tensor& a, const at::Tensor& b,
              const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd:
      a.add_(b, alpha);
      break;
    case Op::kSub:
      a.sub_(b, alpha);
      break;
    case Op::kMul:
      a.mul_(b);
      break;
    case Op::kDiv:
      a.div_(b);
      break;
  }
}

TensorVec foreach_op(Op op, const TensorVec& a, const TensorVec& b,
                     const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd:
      return at::_foreach_add(a, b, alpha);
    case Op::kSub:
      return at::_foreach_sub(a, b, alpha);
    case Op::kMul:
      return at::_foreach_mul(a, b);
    case Op::kDiv:
      return at::_foreach_div(a, b);
  }
  return {};
}

TensorVec foreach_op(Op op, const TensorVec& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd:
      return at::_foreach_add(a, b);
    case Op::kSub:
      return at::_foreach_sub(a, b);
    case Op::kMul:
      return at::_foreach_mul(a, b);
    case Op::kDiv:
      return at::_foreach_div(a, b);
  }
  return {};
}

void foreach_op_(Op op, const TensorVec& a, const TensorVec& b,
                 const at::Scalar& alpha) {
  switch (op) {
    case Op::kAdd:
      at::_foreach_add_(a, b, alpha);
      break;
    case Op::kSub:
      at::_foreach_sub_(a, b, alpha);
      break;
    case Op::kMul:
      at::_foreach_mul_(a, b);
      break;
    case Op::kDiv:
      at::_foreach_div_(a, b);
      break;
  }
}

void foreach_op_(Op op, const TensorVec& a, const at::Scalar& b) {
  switch (op) {
    case Op::kAdd:
      at::_foreach_add_(a, b);
      break;
    case Op::kSub:
      at::_foreach_sub_(a, b);
      break;
    case Op::kMul:
      at::_foreach_mul_(a, b);
      break;
    case Op::kDiv:
      at::_foreach_div_(a, b);
      break;
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
  return rebuild_dict(TensorDictImpl::of(a), std::move(out),
                      op_name(op, false));
}

TensorDict binary(Op op, const TensorDict& a, const at::Tensor& b) {
  check_batch_broadcast(op_name(op, false), "tensor operand",
                        TensorDictImpl::of(a), b);
  TensorVec va = leaf_tensors(TensorDictImpl::of(a));
  TensorVec out;
  out.reserve(va.size());
  for (const auto& t : va)
    out.push_back(leaf_op(op, t, align_left(b, t.dim()), 1));
  return rebuild_dict(TensorDictImpl::of(a), std::move(out),
                      op_name(op, false));
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
  return rebuild_dict(TensorDictImpl::of(a), std::move(out),
                      op_name(op, false));
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
                ": key ", leaf_key(TensorDictImpl::of(a), i).str(),
                ": the other leaf's shape ", shape_str(vb[i].sizes()),
                " does not broadcast to the leaf's shape ",
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
        case Op::kAdd:
          t.add_(b);
          break;
        case Op::kSub:
          t.sub_(b);
          break;
        case Op::kMul:
          t.mul_(b);
          break;
        case Op::kDiv:
          t.div_(b);
          break;
      }
    }
  }
  return a;
}

}  // namespace

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
// lerp
// ===========================================================================

namespace {

// Checks `other` (the end or the weight of leaf `i`) against the leaf.
void check_lerp_operand(const char* op, const TensorDictImpl& root, size_t i,
                        const at::Tensor& leaf, const at::Tensor& other,
                        const char* what) {
  TORCH_CHECK_TYPE(other.scalar_type() == leaf.scalar_type(), op, ": key ",
                   leaf_key(root, i).str(), ": the ", what, "'s dtype ",
                   dtype_name(other.scalar_type()), " is not the leaf's dtype ",
                   dtype_name(leaf.scalar_type()), " (lerp does not promote)");
  TORCH_CHECK(at::is_expandable_to(other.sizes(), leaf.sizes()), op, ": key ",
              leaf_key(root, i).str(), ": the ", what, "'s shape ",
              shape_str(other.sizes()),
              " does not broadcast to the leaf's shape ",
              shape_str(leaf.sizes()));
}

void check_lerp_leaf(const char* op, const TensorDictImpl& root, size_t i,
                     const at::Tensor& leaf) {
  const at::ScalarType t = leaf.scalar_type();
  TORCH_CHECK_TYPE(at::isFloatingType(t) || at::isComplexType(t), op, ": key ",
                   leaf_key(root, i).str(),
                   ": lerp needs floating-point or complex leaves, got dtype ",
                   dtype_name(t));
}

void check_lerp_weight(const char* op, const TensorDictImpl& root, size_t i,
                       const at::Tensor& leaf, const at::Scalar& weight) {
  TORCH_CHECK_TYPE(!weight.isBoolean(), op,
                   ": the weight must be a number, got a bool");
  TORCH_CHECK_TYPE(!weight.isComplex() || leaf.is_complex(), op, ": key ",
                   leaf_key(root, i).str(),
                   ": a complex weight needs a complex leaf, got dtype ",
                   dtype_name(leaf.scalar_type()));
}

// `a[k] += w * (b[k] - a[k])` over `n` elements, as LibTorch's lerp kernel
// computes it: from `a` for weights under 0.5 in magnitude, from `b`
// otherwise.
template <typename T>
void lerp_span(T* a, const T* b, int64_t n, T w) {
  if (std::abs(w) < T(0.5)) {
    for (int64_t k = 0; k < n; ++k) a[k] = a[k] + w * (b[k] - a[k]);
  } else {
    const T v = T(1) - w;
    for (int64_t k = 0; k < n; ++k) a[k] = b[k] - (b[k] - a[k]) * v;
  }
}

// Whether leaf `a` lerps towards `b` by `lerp_span`: both dense CPU float or
// double of one shape, with no autograd history to record.
bool lerp_in_loop(const at::Tensor& a, const at::Tensor& b, bool grad_mode) {
  const at::ScalarType t = a.scalar_type();
  return (t == at::kFloat || t == at::kDouble) && b.scalar_type() == t &&
         cpu_bytes(a) && cpu_bytes(b) && a.sizes() == b.sizes() &&
         untracked(a.unsafeGetTensorImpl(), grad_mode) &&
         untracked(b.unsafeGetTensorImpl(), grad_mode);
}

// LibTorch's grain for element-wise kernels: leaves this large are split
// between threads.
constexpr int64_t kLerpGrain = 32768;

void lerp_loop(const at::Tensor& a, const at::Tensor& b, double w) {
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "lerp_", [&] {
    auto* pa = static_cast<scalar_t*>(a.data_ptr());
    const auto* pb = static_cast<const scalar_t*>(b.data_ptr());
    const auto ws = static_cast<scalar_t>(w);
    const int64_t n = a.numel();
    if (n < kLerpGrain) {
      lerp_span(pa, pb, n, ws);
    } else {
      at::parallel_for(0, n, kLerpGrain, [&](int64_t begin, int64_t end) {
        lerp_span(pa + begin, pb + begin, end - begin, ws);
      });
    }
  });
  bump(version_of(a));
}

}  // namespace

const TensorDict& TensorDict::lerp_(const TensorDict& end,
                                    const at::Scalar& weight) const {
  TensorVec va, vb;
  pair_leaves(*impl_, *end.impl_, "lerp_", va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    check_lerp_leaf("lerp_", *impl_, i, va[i]);
    check_leaf_write("lerp_", LeafName(*impl_, i), va[i], vb[i],
                     WriteKind::kOp);
    check_lerp_operand("lerp_", *impl_, i, va[i], vb[i], "end");
    check_lerp_weight("lerp_", *impl_, i, va[i], weight);
  }
  const bool grad_mode = at::GradMode::is_enabled();
  const bool real = !weight.isComplex();
  for (size_t i = 0; i < va.size(); ++i) {
    if (real && lerp_in_loop(va[i], vb[i], grad_mode)) {
      lerp_loop(va[i], vb[i], weight.toDouble());
    } else {
      va[i].lerp_(vb[i], weight);
    }
  }
  return *this;
}

const TensorDict& TensorDict::lerp_(const TensorDict& end,
                                    const TensorDict& weight) const {
  TensorVec va, vb, va2, vw;
  pair_leaves(*impl_, *end.impl_, "lerp_", va, vb);
  pair_leaves(*impl_, *weight.impl_, "lerp_", va2, vw);
  for (size_t i = 0; i < va.size(); ++i) {
    check_lerp_leaf("lerp_", *impl_, i, va[i]);
    check_leaf_write("lerp_", LeafName(*impl_, i), va[i], vb[i],
                     WriteKind::kOp);
    check_leaf_write("lerp_", LeafName(*impl_, i), va[i], vw[i],
                     WriteKind::kOp);
    check_lerp_operand("lerp_", *impl_, i, va[i], vb[i], "end");
    check_lerp_operand("lerp_", *impl_, i, va[i], vw[i], "weight");
  }
  for (size_t i = 0; i < va.size(); ++i) va[i].lerp_(vb[i], vw[i]);
  return *this;
}

TensorDict TensorDict::lerp(const TensorDict& end,
                            const at::Scalar& weight) const {
  TensorVec va, vb;
  pair_leaves(*impl_, *end.impl_, "lerp", va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    check_lerp_leaf("lerp", *impl_, i, va[i]);
    check_lerp_operand("lerp", *impl_, i, va[i], vb[i], "end");
    check_lerp_weight("lerp", *impl_, i, va[i], weight);
  }
  TensorVec out;
  out.reserve(va.size());
  for (size_t i = 0; i < va.size(); ++i) {
    out.push_back(at::lerp(va[i], vb[i], weight));
  }
  return rebuild_dict(*impl_, std::move(out), "lerp");
}

// ===========================================================================
// Masking
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
