// Element-wise ops with Python tensordict's semantics: clamp, maximum and
// minimum, isclose and allclose. Each leaf goes through LibTorch's op; a
// pair of dicts is matched key by key (pair_leaves: the same keys or a clear
// error naming the difference), and the result is a new dict shaped like
// this one (rebuild_from).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/tree.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using namespace detail;  // NOLINT(google-build-using-namespace)

namespace {

// `fn(leaf, other_leaf)` over the matching leaves of `a` and `b`, each
// error prefixed with `op` and the key; a dict shaped like `a`.
template <typename Fn>
TensorDict zip_leaves(const char* op, const TensorDict& a, const TensorDict& b,
                      const Fn& fn) {
  std::vector<at::Tensor> va, vb;
  pair_leaves(TensorDictImpl::of(a), TensorDictImpl::of(b), op, va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    try {
      va[i] = fn(va[i], vb[i]);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, op, ": key ", leaf_key(TensorDictImpl::of(a), i).str(),
                  ": ", e.msg());
    }
  }
  return TensorDictImpl::wrap(
      rebuild_from(TensorDictImpl::of(a), std::move(va), op));
}

}  // namespace

TensorDict TensorDict::clamp(const c10::optional<at::Scalar>& min,
                             const c10::optional<at::Scalar>& max) const {
  TORCH_CHECK_VALUE(min.has_value() || max.has_value(),
                    "clamp: at least one of min and max must be given");
  return TensorDictImpl::wrap(rebuild(
      *impl_, impl_->batch_size, [&](const KeyPath& path, const at::Tensor& t) {
        try {
          return at::clamp(t, min, max);
        } catch (const c10::Error& e) {
          TORCH_CHECK(false, "clamp: key ", path.key().str(), ": ", e.msg());
        }
      }));
}

TensorDict TensorDict::clamp_min(const at::Scalar& min) const {
  return clamp(min, c10::nullopt);
}

TensorDict TensorDict::clamp_max(const at::Scalar& max) const {
  return clamp(c10::nullopt, max);
}

TensorDict TensorDict::maximum(const TensorDict& other) const {
  return zip_leaves("maximum", *this, other,
                    [](const at::Tensor& x, const at::Tensor& y) {
                      return at::maximum(x, y);
                    });
}

TensorDict TensorDict::minimum(const TensorDict& other) const {
  return zip_leaves("minimum", *this, other,
                    [](const at::Tensor& x, const at::Tensor& y) {
                      return at::minimum(x, y);
                    });
}

TensorDict TensorDict::isclose(const TensorDict& other, double rtol,
                               double atol, bool equal_nan) const {
  return zip_leaves("isclose", *this, other,
                    [&](const at::Tensor& x, const at::Tensor& y) {
                      return at::isclose(x, y, rtol, atol, equal_nan);
                    });
}

bool TensorDict::allclose(const TensorDict& other, double rtol, double atol,
                          bool equal_nan) const {
  std::vector<at::Tensor> va, vb;
  pair_leaves(*impl_, TensorDictImpl::of(other), "allclose", va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    TORCH_CHECK(va[i].sizes() == vb[i].sizes(), "allclose: key ",
                leaf_key(*impl_, i).str(), ": shapes ",
                shape_str(va[i].sizes()), " and ", shape_str(vb[i].sizes()),
                " differ");
    if (!at::allclose(va[i], vb[i], rtol, atol, equal_nan)) return false;
  }
  return true;
}

}  // namespace tensordict
