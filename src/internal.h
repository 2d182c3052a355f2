// Internal definitions shared by the library's translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

/// One entry of a dict: a tensor leaf, or a sub-dict when `dict` is set.
struct Node {
  std::string key;
  at::Tensor tensor;
  std::shared_ptr<TensorDictImpl> dict;

  [[nodiscard]] bool is_dict() const noexcept { return dict != nullptr; }
};

struct TensorDictImpl {
  std::vector<int64_t> batch_size;
  c10::optional<at::Device> device;
  std::vector<Node> nodes;  // insertion order

  [[nodiscard]] Node* find(const std::string& key) noexcept {
    for (auto& n : nodes) {
      if (n.key == key) return &n;
    }
    return nullptr;
  }
  [[nodiscard]] const Node* find(const std::string& key) const noexcept {
    return const_cast<TensorDictImpl*>(this)->find(key);
  }
  [[nodiscard]] int64_t batch_dims() const noexcept {
    return static_cast<int64_t>(batch_size.size());
  }
  /// A handle on `impl` (TensorDict's constructor from an impl is private).
  static TensorDict wrap(std::shared_ptr<TensorDictImpl> impl) {
    return TensorDict(std::move(impl));
  }
};

/// "[4, 8]".
std::string shape_str(c10::IntArrayRef shape);
/// "torch.float32".
std::string dtype_name(at::ScalarType dtype);
/// Python's rendering of a device: "cpu", "cuda:0".
std::string device_name(const at::Device& device);
/// True for a CUDA tensor or one whose storage is in shared memory.
bool tensor_is_shared(const at::Tensor& t);

}  // namespace detail
}  // namespace tensordict
