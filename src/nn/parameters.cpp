// Module parameters as dicts: `from_module` and `to_module` (see
// tensordict/nn.h), Python's `TensorDict.from_module` and `to_module`.
//
// A module's tensors are read through its own maps (`named_parameters`,
// `named_buffers` and `named_children`, none recursive), so the dict
// follows the module tree level by level, as Python's `_from_module` does.
// `to_module` plans every write (the module's tensor and the value for
// each leaf of the dict) and checks them all before the first copy.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "core/write_plan.h"
#include "tensordict/nn.h"

namespace tensordict {

namespace {

// The dict of `module`, or nullopt where it holds no tensor and
// `filter_empty` is set.
c10::optional<TensorDict> module_dict(const torch::nn::Module& module,
                                      bool filter_empty) {
  TensorDict td;
  bool any = false;
  // The module's maps leave out undefined tensors (a Linear's bias
  // without bias).
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    td.set(p.key(), p.value());
    any = true;
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    td.set(b.key(), b.value());
    any = true;
  }
  for (const auto& c : module.named_children()) {
    c10::optional<TensorDict> sub = module_dict(*c.value(), filter_empty);
    if (!sub.has_value()) continue;
    td.set(c.key(), *sub);
    any = true;
  }
  if (!any && filter_empty) return c10::nullopt;
  return td;
}

// The names of `items`, comma-separated, for an error message.
template <typename Items>
std::string names_of(const Items& items) {
  std::string out;
  for (const auto& it : items) {
    if (!out.empty()) out += ", ";
    out += it.key();
  }
  return out.empty() ? std::string("none") : out;
}

// One copy of `to_module`: the module's tensor and the value for it.
struct ModuleWrite {
  at::Tensor dest;
  at::Tensor value;
};

// Checks every entry of `params` (at `prefix`) against `module` and queues
// its writes.
void plan_module_writes(const TensorDict& params, torch::nn::Module& module,
                        const std::vector<std::string>& prefix,
                        std::vector<ModuleWrite>& writes) {
  for (const auto& [key, entry] : params.items()) {
    std::vector<std::string> parts = prefix;
    parts.push_back(key.front());
    const NestedKey full(parts);
    const std::string& name = key.front();
    TORCH_CHECK_TYPE(!entry.is_non_tensor(), "to_module: key ", full.str(),
                     ": non-tensor data cannot be written into a module");
    if (entry.is_tensordict()) {
      auto children = module.named_children();
      auto* child = children.find(name);
      TORCH_CHECK_VALUE(child != nullptr, "to_module: key ", full.str(),
                        ": the module has no submodule '", name,
                        "' (its submodules: ", names_of(children), ")");
      plan_module_writes(entry.tensordict(), **child, parts, writes);
      continue;
    }
    auto params_here = module.named_parameters(/*recurse=*/false);
    auto buffers_here = module.named_buffers(/*recurse=*/false);
    const at::Tensor* dest = params_here.find(name);
    if (dest == nullptr) dest = buffers_here.find(name);
    TORCH_CHECK_VALUE(dest != nullptr, "to_module: key ", full.str(),
                      ": the module has no parameter or buffer '", name,
                      "' (its parameters: ", names_of(params_here),
                      "; its buffers: ", names_of(buffers_here), ")");
    const at::Tensor& value = entry.tensor();
    TORCH_CHECK_VALUE(value.sizes() == dest->sizes(), "to_module: key ",
                      full.str(), ": the value of shape ",
                      detail::shape_str(value.sizes()),
                      " does not match the module's tensor of shape ",
                      detail::shape_str(dest->sizes()));
    detail::check_leaf_write("to_module", detail::LeafName(full), *dest, value,
                             detail::WriteKind::kCopy);
    writes.push_back({*dest, value});
  }
}

}  // namespace

TensorDict from_module(const torch::nn::Module& module, bool filter_empty) {
  c10::optional<TensorDict> td = module_dict(module, filter_empty);
  return td.has_value() ? *td : TensorDict();
}

namespace detail {

ModuleTensors nn_module_tensors(
    const std::shared_ptr<torch::nn::Module>& module) {
  ModuleTensors out;
  out.dict = [module](bool filter_empty) {
    return from_module(*module, filter_empty);
  };
  out.parameters = [module]() {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& p : module->named_parameters(/*recurse=*/true)) {
      named.emplace_back(p.key(), p.value());
    }
    return named;
  };
  return out;
}

}  // namespace detail

std::vector<at::Tensor> TensorDictModule::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& named : named_parameters()) out.push_back(std::move(named.second));
  return out;
}

// Python's names: a TensorDictModule holds its module as `module`, a
// sequence its modules as the list `module`.
std::vector<std::pair<std::string, at::Tensor>>
TensorDictModule::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (tensors_.parameters) {
    for (auto& [name, tensor] : tensors_.parameters()) {
      out.emplace_back("module." + name, std::move(tensor));
    }
  }
  for (size_t i = 0; i < children_.size(); ++i) {
    const std::string prefix = "module." + std::to_string(i) + ".";
    for (auto& [name, tensor] : children_[i].named_parameters()) {
      out.emplace_back(prefix + name, std::move(tensor));
    }
  }
  return out;
}

TensorDict from_module(const TensorDictModule& module, bool filter_empty) {
  TensorDict inner;
  if (module.tensors_.dict) {
    inner = module.tensors_.dict(filter_empty);
  } else {
    for (size_t i = 0; i < module.children_.size(); ++i) {
      const TensorDict child = from_module(module.children_[i], filter_empty);
      if (filter_empty && child.empty()) continue;
      inner.set(std::to_string(i), child);
    }
  }
  if (filter_empty && inner.empty()) return TensorDict();
  TensorDict out;
  out.set("module", inner);
  return out;
}

void to_module(const TensorDict& params, torch::nn::Module& module) {
  // As Python's in-place `to_module` (`param.data.copy_(value)`): no
  // autograd history, so a parameter that requires grad takes the write.
  c10::NoGradGuard no_grad;
  std::vector<ModuleWrite> writes;
  plan_module_writes(params, module, {}, writes);
  for (const auto& w : writes) {
    if (!w.dest.is_same(w.value)) w.dest.copy_(w.value);
  }
}

}  // namespace tensordict
