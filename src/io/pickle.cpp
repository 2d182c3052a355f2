// tensordict::pickle_save: a nested dict of tensors in torch.save's format
// (tensordict/persistence.h).
#include "tensordict/persistence.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <vector>

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
        // A handle (c10::Dict has no move): the copy shares the dict.
        c10::impl::GenericDict d = levels.back();
        levels.pop_back();
        if (levels.empty()) {
          out = c10::IValue(d);
        } else {
          levels.back().insert(*path.parts.back(), std::move(d));
        }
      });
  return out;
}

// torch::jit::pickle_save's zip archive, with the pickler's type tags off:
// they wrap each dict in torch.jit._pickle.restore_type_tag, a global that
// torch.load refuses in weights_only mode (its default from torch 2.6).
std::vector<char> pickle_untagged(const c10::IValue& v) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
      /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
      /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(v);
  pickler.stop();
  std::vector<char> out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      const char* bytes = static_cast<const char*>(p);
      out.insert(out.end(), bytes, bytes + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                       pickler.tensorData(), writer);
  }  // the writer's destructor writes the archive's end
  return out;
}

}  // namespace

std::vector<char> pickle_save(const TensorDict& td) {
  detail::check_no_non_tensor("pickle_save", "a pickled dict of tensors",
                              detail::TensorDictImpl::of(td));
  return pickle_untagged(to_generic_dict(detail::TensorDictImpl::of(td)));
}

}  // namespace tensordict
