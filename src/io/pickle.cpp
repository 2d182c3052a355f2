// tensordict::pickle_save: a nested dict of tensors in torch.save's format
// (tensordict/persistence.h).
#include "tensordict/persistence.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"

namespace tensordict {
namespace {

c10::IValue to_generic_dict(const detail::TensorDictImpl& root) {
  // The dict of each level being converted, the innermost last.
  std::vector<c10::impl::GenericDict> levels;
  c10::IValue out;
  detail::visit(
      root,
      [&](const detail::KeyPath&, const detail::TensorDictImpl& level) {
        levels.emplace_back(c10::StringType::get(), c10::AnyType::get());
        levels.back().reserve(level.nodes.size());
      },
      [&](const detail::KeyPath& path, const at::Tensor& t) {
        levels.back().insert(*path.parts.back(), t.detach());
      },
      [&](const detail::KeyPath& path, const detail::TensorDictImpl&) {
        c10::impl::GenericDict d = std::move(levels.back());
        levels.pop_back();
        if (levels.empty()) {
          out = c10::IValue(std::move(d));
        } else {
          levels.back().insert(*path.parts.back(), std::move(d));
        }
      });
  return out;
}

}  // namespace

std::vector<char> pickle_save(const TensorDict& td) {
  detail::check_no_non_tensor("pickle_save", "a pickled dict of tensors",
                              detail::TensorDictImpl::of(td));
  return torch::jit::pickle_save(to_generic_dict(detail::TensorDictImpl::of(td)));
}

}  // namespace tensordict
