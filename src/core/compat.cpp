// The guards of compat.h that need LibTorch's autograd internals.
#include "core/compat.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>

namespace tensordict {
namespace detail {
namespace {

using torch::autograd::CreationMeta;

// `torch::autograd::as_view` lost its `view_func` std::function parameter in
// favour of a ViewFunc object plus a reverse function in LibTorch 2.x; the
// overload that compiles is the one this LibTorch has (int beats long).
template <typename Base>
auto as_view_impl(const Base& base, const at::Tensor& view, CreationMeta meta,
                  int)
    -> decltype(torch::autograd::as_view(base, view, true, true, nullptr,
                                         meta)) {
  return torch::autograd::as_view(base, view, true, true, nullptr, meta);
}
template <typename Base>
auto as_view_impl(const Base& base, const at::Tensor& view, CreationMeta meta,
                  long)
    -> decltype(torch::autograd::as_view(base, view, true, true, nullptr,
                                         nullptr, meta)) {
  return torch::autograd::as_view(base, view, true, true, nullptr, nullptr,
                                  meta);
}

}  // namespace

at::Tensor as_view(const at::Tensor& base, const at::Tensor& view) {
  const CreationMeta meta =
      c10::InferenceMode::is_enabled()
          ? CreationMeta::INFERENCE_MODE
          : (c10::GradMode::is_enabled() ? CreationMeta::DEFAULT
                                         : CreationMeta::NO_GRAD_MODE);
  return as_view_impl(base, view, meta, 0);
}

}  // namespace detail
}  // namespace tensordict
