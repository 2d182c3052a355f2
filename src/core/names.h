// Internal: Python's names for what errors and reprs mention: a shape
// ("[4, 8]"), a dtype ("torch.float32"), a device ("cpu", "cuda:0"), and
// repr() of a str. Every layer names things with these, so that an error
// reads as Python's would.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <string>

namespace tensordict {
namespace detail {

/// "[4, 8]".
std::string shape_str(c10::IntArrayRef shape);
/// "torch.float32".
std::string dtype_name(at::ScalarType dtype);
/// Python's rendering of a device: "cpu", "cuda:0".
std::string device_name(const at::Device& device);
/// Python's repr() of a str: quotes as Python chooses them, escapes, `\xNN`
/// for unprintable characters; bytes that are not UTF-8 are copied as they
/// are.
std::string py_string_repr(const std::string& s);

}  // namespace detail
}  // namespace tensordict
