// tensordict::pickle_save: a nested dict of tensors in torch.save's format.
#include "tensordict/serialization.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "core/internal.h"

namespace tensordict {
namespace {

c10::impl::GenericDict to_generic_dict(const detail::TensorDictImpl& impl) {
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  out.reserve(impl.nodes.size());
  for (const auto& n : impl.nodes) {
    if (n.is_dict()) {
      out.insert(n.key, to_generic_dict(*n.dict));
    } else {
      out.insert(n.key, n.tensor.detach());
    }
  }
  return out;
}

}  // namespace

std::vector<char> pickle_save(const TensorDict& td) {
  return torch::jit::pickle_save(c10::IValue(to_generic_dict(detail::TensorDictImpl::of(td))));
}

}  // namespace tensordict
