// Reductions and scans of TensorDict over batch dims: sum, mean, min, max,
// std, var, cumsum, and norm per leaf.
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
// Reductions
// ===========================================================================

enum class Reduce { kSum, kMean, kMin, kMax, kStd, kVar };

const char* reduce_name(Reduce r) {
  switch (r) {
    case Reduce::kSum:
      return "sum";
    case Reduce::kMean:
      return "mean";
    case Reduce::kMin:
      return "min";
    case Reduce::kMax:
      return "max";
    case Reduce::kStd:
      return "std";
    case Reduce::kVar:
      return "var";
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
    return r == Reduce::kStd
               ? at::std(t, at::OptionalIntArrayRef(dims), c, keepdim)
               : at::var(t, at::OptionalIntArrayRef(dims), c, keepdim);
  }
  if (dims.size() == 1) {
    switch (r) {
      case Reduce::kSum:
        return t.sum(dims[0], keepdim);
      case Reduce::kMean:
        return t.mean(dims[0], keepdim);
      case Reduce::kMin:
        return std::get<0>(t.min(dims[0], keepdim));
      case Reduce::kMax:
        return std::get<0>(t.max(dims[0], keepdim));
      default:
        break;
    }
  }
  switch (r) {
    case Reduce::kSum:
      return t.sum(dims, keepdim);
    case Reduce::kMean:
      return t.mean(dims, keepdim);
    case Reduce::kMin:
      return t.amin(dims, keepdim);
    case Reduce::kMax:
      return t.amax(dims, keepdim);
    default:
      break;
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
      src, std::move(batch),
      [&](const KeyPath& path, const at::Tensor& t) {
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

}  // namespace

// ===========================================================================
// Reductions and scans
// ===========================================================================

TensorDict TensorDict::sum() const { return reduce_all(Reduce::kSum, *impl_); }
TensorDict TensorDict::sum(int64_t dim, bool keepdim) const {
  return reduce_dim(Reduce::kSum, *impl_, dim, keepdim);
}
TensorDict TensorDict::mean() const {
  return reduce_all(Reduce::kMean, *impl_);
}
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
TensorDict TensorDict::std(int64_t dim, bool keepdim,
                           int64_t correction) const {
  return reduce_dim(Reduce::kStd, *impl_, dim, keepdim, correction);
}
TensorDict TensorDict::var() const { return reduce_all(Reduce::kVar, *impl_); }
TensorDict TensorDict::var(int64_t dim, bool keepdim,
                           int64_t correction) const {
  return reduce_dim(Reduce::kVar, *impl_, dim, keepdim, correction);
}

TensorDict TensorDict::cumsum(int64_t dim) const {
  const int64_t d = batch_dim("cumsum", *impl_, dim);
  return TensorDictImpl::wrap(
      rebuild_leaves(*impl_, [&](const at::Tensor& t) { return t.cumsum(d); }));
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

}  // namespace tensordict
