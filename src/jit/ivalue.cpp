// to_ivalue / from_ivalue / forward: TensorDicts as TorchScript dicts (see
// tensordict/jit.h for the contract); and TensorDictModule's TorchScript
// constructor (tensordict/nn.h). The only file that includes LibTorch's jit
// module header.
#include "tensordict/jit.h"
#include "tensordict/nn.h"

#include <ATen/core/Dict.h>
#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/module.h>

#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"

namespace tensordict {

namespace {

using Entries = std::vector<std::pair<std::string, c10::IValue>>;

// A TorchScript dict of `entries`, typed as narrowly as they allow:
// Dict[str, T] when every value has type T, Dict[str, Any] otherwise, and
// Dict[str, Tensor] when there are none.
c10::IValue typed_dict(Entries& entries) {
  c10::TypePtr value_type = c10::TensorType::get();
  for (size_t i = 0; i < entries.size(); ++i) {
    const c10::IValue& v = entries[i].second;
    c10::TypePtr t = v.isTensor() ? c10::TensorType::get() : v.type();
    if (i == 0) {
      value_type = std::move(t);
    } else if (*t != *value_type) {
      value_type = c10::AnyType::get();
    }
  }
  c10::impl::GenericDict dict(c10::StringType::get(), value_type);
  dict.reserve(entries.size());
  for (auto& e : entries) dict.insert(std::move(e.first), std::move(e.second));
  return dict;
}

std::string ivalue_type_name(const c10::IValue& v) {
  return v.isNone() ? std::string("None") : v.type()->annotation_str();
}

// ---- from_ivalue ----------------------------------------------------------

class Builder {
 public:
  Builder(c10::optional<std::vector<int64_t>> batch_size,
          c10::optional<int64_t> max_batch_dims)
      : batch_size_(std::move(batch_size)), max_batch_dims_(max_batch_dims) {}

  // The level `value` (at key path `path`; empty for the root).
  TensorDict level(const c10::IValue& value,
                   const std::vector<std::string>& path) {
    const std::string where = path.empty() ? std::string("the value")
                                           : "key " + NestedKey(path).str();
    TORCH_CHECK(value.isGenericDict(), "from_ivalue: ", where, " is a ",
                ivalue_type_name(value),
                ", expected a Dict[str, Tensor] (nested dicts allowed)");
    const c10::impl::GenericDict dict = value.toGenericDict();
    TORCH_CHECK(dict.keyType()->kind() == c10::TypeKind::StringType,
                "from_ivalue: ", where, " is a ", ivalue_type_name(value),
                ", expected string keys");
    // The values, sub-dicts built first (their batch sizes take part in
    // this level's).
    std::vector<std::pair<std::string, Entry>> values;
    values.reserve(dict.size());
    for (const auto& kv : dict) {
      std::vector<std::string> sub = path;
      sub.push_back(kv.key().toStringRef());
      const c10::IValue& v = kv.value();
      if (v.isTensor()) {
        values.emplace_back(sub.back(), Entry(v.toTensor()));
      } else {
        TORCH_CHECK(v.isGenericDict(), "from_ivalue: key ",
                    NestedKey(sub).str(), " holds a ", ivalue_type_name(v),
                    ", expected a Tensor or a dict of them");
        values.emplace_back(sub.back(), Entry(level(v, sub)));
      }
    }
    const std::vector<int64_t> batch =
        batch_size_ ? *batch_size_ : inferred_batch(values);
    TensorDict out{c10::IntArrayRef(batch)};
    for (auto& [key, entry] : values) {
      if (entry.is_tensor()) {
        if (!detail::starts_with(entry.tensor().sizes(), batch)) {
          std::vector<std::string> full = path;
          full.push_back(key);
          detail::check_leading_dims(NestedKey(full), entry.tensor(), batch,
                                     "from_ivalue: ");
        }
        out.set(key, entry.tensor());
        continue;
      }
      TensorDict child = entry.tensordict();
      // An empty sub-dict takes its parent's batch size, as in Python.
      if (child.keys().empty() &&
          !detail::starts_with(child.batch_size(), batch)) {
        child = TensorDict(c10::IntArrayRef(batch));
      }
      out.set(key, child);
    }
    return out;
  }

 private:
  // Python's `_set_max_batch_size`: the leading dims the first value shares
  // with every other one (empty sub-dicts after the first are skipped).
  std::vector<int64_t> inferred_batch(
      const std::vector<std::pair<std::string, Entry>>& values) const {
    std::vector<int64_t> batch;
    if (values.empty()) return batch;
    auto shape = [](const Entry& e) -> std::vector<int64_t> {
      return e.is_tensor() ? e.tensor().sizes().vec()
                           : e.tensordict().batch_size().vec();
    };
    const std::vector<int64_t> first = shape(values[0].second);
    for (size_t dim = 0; dim < first.size(); ++dim) {
      for (size_t i = 1; i < values.size(); ++i) {
        const Entry& e = values[i].second;
        if (e.is_tensordict() && e.tensordict().keys().empty()) continue;
        const std::vector<int64_t> s = shape(e);
        if (s.size() <= dim || s[dim] != first[dim]) return batch;
      }
      if (!max_batch_dims_ ||
          static_cast<int64_t>(batch.size()) < *max_batch_dims_) {
        batch.push_back(first[dim]);
      }
    }
    return batch;
  }

  c10::optional<std::vector<int64_t>> batch_size_;
  c10::optional<int64_t> max_batch_dims_;
};

}  // namespace

c10::IValue to_ivalue(const TensorDict& td) {
  const auto& root = detail::TensorDictImpl::of(td);
  detail::check_no_non_tensor("to_ivalue", "a TorchScript dict", root);
  // One list of entries per open level; a level becomes a typed dict when
  // it is left, and an entry of its parent.
  std::vector<Entries> open;
  c10::IValue result;
  detail::visit(
      root,
      [&](const detail::KeyPath&, const detail::TensorDictImpl&) {
        open.emplace_back();
      },
      [&](const detail::KeyPath& path, const at::Tensor& t) {
        open.back().emplace_back(*path.parts.back(), t);
      },
      [&](const detail::KeyPath& path, const detail::TensorDictImpl&) {
        c10::IValue dict = typed_dict(open.back());
        open.pop_back();
        if (open.empty()) {
          result = std::move(dict);
        } else {
          open.back().emplace_back(*path.parts.back(), std::move(dict));
        }
      });
  return result;
}

TensorDict from_ivalue(const c10::IValue& value,
                       c10::optional<std::vector<int64_t>> batch_size,
                       c10::optional<int64_t> max_batch_dims) {
  TORCH_CHECK_VALUE(!max_batch_dims || *max_batch_dims >= 0,
                    "from_ivalue: max_batch_dims must be >= 0, got ",
                    *max_batch_dims);
  return Builder(std::move(batch_size), max_batch_dims).level(value, {});
}

TensorDict forward(torch::jit::Module& module, const TensorDict& input) {
  c10::IValue out;
  std::string error;
  try {
    out = module.forward({to_ivalue(input)});
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  TORCH_CHECK(error.empty(), "forward: ", error);
  TensorDict result = from_ivalue(out, c10::nullopt, input.batch_dims());
  // Keep only the leading dims that are the input's batch dims.
  const c10::IntArrayRef in = input.batch_size();
  const c10::IntArrayRef got = result.batch_size();
  size_t k = 0;
  while (k < got.size() && got[k] == in[k]) ++k;
  if (k == got.size()) return result;
  return from_ivalue(out, in.slice(0, k).vec());
}

TensorDictModule::TensorDictModule(const torch::jit::Module& module,
                                   std::vector<NestedKey> in_keys,
                                   std::vector<NestedKey> out_keys)
    : TensorDictModule(
          [m = module](const std::vector<at::Tensor>& in) mutable {
            std::vector<c10::IValue> args(in.begin(), in.end());
            const c10::IValue r = m.forward(std::move(args));
            std::vector<at::Tensor> out;
            if (r.isTensor()) {
              out.push_back(r.toTensor());
              return out;
            }
            TORCH_CHECK(r.isTuple(),
                        "TensorDictModule: the TorchScript module "
                        "returned a ",
                        ivalue_type_name(r),
                        ", expected a Tensor or a tuple of Tensors");
            for (const c10::IValue& e : r.toTupleRef().elements()) {
              TORCH_CHECK(e.isTensor(),
                          "TensorDictModule: the TorchScript "
                          "module returned a ",
                          ivalue_type_name(r),
                          ", expected a Tensor or a tuple of Tensors");
              out.push_back(e.toTensor());
            }
            return out;
          },
          std::move(in_keys), std::move(out_keys), Wrapped()) {
  // The module's tensors, as from_module lays out a torch::nn module's:
  // each level's parameters, then its buffers, then its submodules.
  tensors_.dict = [m = module](bool filter_empty) {
    std::function<c10::optional<TensorDict>(const torch::jit::Module&)> level =
        [&](const torch::jit::Module& mod) -> c10::optional<TensorDict> {
      TensorDict td;
      bool any = false;
      for (const auto& p : mod.named_parameters(/*recurse=*/false)) {
        td.set(p.name, p.value);
        any = true;
      }
      for (const auto& b : mod.named_buffers(/*recurse=*/false)) {
        td.set(b.name, b.value);
        any = true;
      }
      for (const auto& c : mod.named_children()) {
        c10::optional<TensorDict> sub = level(c.value);
        if (!sub.has_value()) continue;
        td.set(c.name, *sub);
        any = true;
      }
      if (!any && filter_empty) return c10::nullopt;
      return td;
    };
    c10::optional<TensorDict> td = level(m);
    return td.has_value() ? *td : TensorDict();
  };
  tensors_.parameters = [m = module]() {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& p : m.named_parameters(/*recurse=*/true)) {
      named.emplace_back(p.name, p.value);
    }
    return named;
  };
}

}  // namespace tensordict
