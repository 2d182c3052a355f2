// Internal: what the spec files (specs.cpp, discrete_specs.cpp,
// composite.cpp) share: Python's renderings for the reprs and the checks of
// shapes and of `rand_`'s output.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>
#include <vector>

#include "print/indent.h"
#include "tensordict/specs.h"

namespace tensordict {
namespace detail {

/// "torch.Size([4, 8])".
std::string torch_size_str(c10::IntArrayRef shape);
/// The device a spec keeps: TorchRL's ordinal device ("cuda" is "cuda:0").
at::Device spec_device(at::Device device);
/// Throws unless every dim of `shape` is >= 0 (`what`: "Unbounded", ...).
void check_spec_shape(const std::string& what, c10::IntArrayRef shape);
/// `shape` ends with `tail`, where a dim of 1 in `tail` may take any size
/// (TorchRL's `expand` rule).
bool ends_with_broadcast(c10::IntArrayRef shape, c10::IntArrayRef tail);
/// `shape` after checking TorchRL's `expand` rule: it ends with the spec's
/// shape, where a dim of 1 may take any size.
std::vector<int64_t> spec_checked_expand(const TensorSpec& spec,
                                         c10::IntArrayRef shape);
/// Throws unless `out` can take `spec`'s values in place: the spec's dtype
/// and device and a shape ending exactly with the spec's. `where` starts the
/// message ("BoundedContinuous.rand_", "Composite.rand_: key obs").
void check_spec_out(const TensorSpec& spec, const at::Tensor& out,
                    const std::string& where);

}  // namespace detail
}  // namespace tensordict
