// Non-tensor data: NonTensorData and NonTensorStack levels (see
// core/non_tensor.h).
#include "core/non_tensor.h"

#include "core/tree.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace tensordict {
namespace detail {

namespace {

// Exact comparison of JSON integers of either sign (a GNU extension, which
// -Wpedantic accepts under __extension__).
__extension__ typedef __int128 Int128;

// Whether `v` holds only what JSON (and Python's json module without NaN)
// can: finite numbers, at any depth (bounded: values come from callers or
// from the depth-limited JSON reader).
bool finite_json(const ordered_json& v) {
  if (v.is_number_float()) return std::isfinite(v.get<double>());
  if (v.is_structured()) {
    for (const auto& e : v) {
      if (!finite_json(e)) return false;
    }
  }
  return true;
}

// Element `e` (row-major) of a non-tensor level.
const ordered_json& element(const NonTensor& nt, int64_t e) {
  if (!nt.is_stack) return nt.data;
  return (*nt.values)[static_cast<size_t>(nt.ids.data_ptr<int64_t>()[e])];
}

ordered_json tolist(const NonTensor& nt, c10::IntArrayRef batch, size_t dim,
                    int64_t& e) {
  if (dim == batch.size()) return element(nt, e++);
  ordered_json out = ordered_json::array();
  for (int64_t i = 0; i < batch[dim]; ++i) {
    out.push_back(tolist(nt, batch, dim + 1, e));
  }
  return out;
}

}  // namespace

ImplPtr make_non_tensor_data(ordered_json value, std::vector<int64_t> batch,
                             c10::optional<at::Device> device,
                             const std::string& key) {
  TORCH_CHECK_VALUE(finite_json(value), "set_non_tensor: key ", key,
                    ": the value holds NaN or an infinity, which JSON (and "
                    "so the memmap format) cannot hold");
  auto nt = std::make_shared<NonTensor>();
  nt->data = std::move(value);
  ImplPtr level = make_impl(std::move(batch), device);
  level->non_tensor = std::move(nt);
  return level;
}

NonTensorPtr non_tensor_stack(
    std::shared_ptr<const std::vector<ordered_json>> values, at::Tensor ids,
    std::vector<char> stack_dims) {
  auto nt = std::make_shared<NonTensor>();
  ids = ids.to(at::kCPU).contiguous();
  TORCH_INTERNAL_ASSERT(stack_dims.empty() ||
                        static_cast<int64_t>(stack_dims.size()) == ids.dim());
  const bool stacked =
      stack_dims.empty() || std::any_of(stack_dims.begin(), stack_dims.end(),
                                        [](char c) { return c != 0; });
  // Without stack dims, every element holds the first one's value (one
  // NonTensorData was indexed out of the stack).
  if (ids.dim() == 0 || (!stacked && ids.numel() > 0 &&
                         ids.eq(ids.flatten()[0]).all().item<bool>())) {
    nt->data = (*values)[static_cast<size_t>(ids.flatten()[0].item<int64_t>())];
    return nt;
  }
  nt->is_stack = true;
  nt->values = std::move(values);
  nt->ids = std::move(ids);
  nt->stack_dims = std::move(stack_dims);
  return nt;
}

DimMap DimMap::identity(int64_t in_dims) {
  DimMap m;
  m.in_dims = in_dims;
  for (int64_t d = 0; d < in_dims; ++d) m.from.push_back(d);
  return m;
}

ordered_json non_tensor_tolist(const TensorDictImpl& level) {
  int64_t e = 0;
  return tolist(*level.non_tensor, level.batch_size, 0, e);
}

ordered_json non_tensor_value(const TensorDictImpl& level) {
  const NonTensor& nt = *level.non_tensor;
  return nt.is_stack ? non_tensor_tolist(level) : nt.data;
}

bool py_equal(const ordered_json& a, const ordered_json& b) {
  const bool a_num = a.is_number() || a.is_boolean();
  const bool b_num = b.is_number() || b.is_boolean();
  if (a_num || b_num) {
    if (!(a_num && b_num)) return false;
    if (a.is_number_float() || b.is_number_float()) {
      const auto as_double = [](const ordered_json& v) {
        return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
      };
      return as_double(a) == as_double(b);  // NaN != NaN
    }
    const auto as_int = [](const ordered_json& v) -> Int128 {
      if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
      if (v.is_number_unsigned()) return v.get<uint64_t>();
      return v.get<int64_t>();
    };
    return as_int(a) == as_int(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!py_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !py_equal(it.value(), *jt)) return false;
    }
    return true;
  }
  return a == b;  // strings, null
}

at::Tensor non_tensor_eq(const TensorDictImpl& a, const TensorDictImpl& b) {
  const NonTensor& x = *a.non_tensor;
  const NonTensor& y = *b.non_tensor;
  if (x.is_stack != y.is_stack) return at::Tensor();
  if (!x.is_stack)
    return at::full(a.batch_size, py_equal(x.data, y.data), at::kBool);
  at::Tensor out = at::empty(a.batch_size, at::kBool);
  const int64_t n = out.numel();
  const int64_t* xi = x.ids.data_ptr<int64_t>();
  const int64_t* yi = y.ids.data_ptr<int64_t>();
  bool* o = out.data_ptr<bool>();
  for (int64_t e = 0; e < n; ++e) {
    o[e] = py_equal((*x.values)[static_cast<size_t>(xi[e])],
                    (*y.values)[static_cast<size_t>(yi[e])]);
  }
  return out;
}

NonTensorPtr non_tensor_none(const TensorDictImpl& level) {
  const NonTensor& nt = *level.non_tensor;
  if (!nt.is_stack) return std::make_shared<const NonTensor>();
  auto values = std::make_shared<std::vector<ordered_json>>(1);
  return non_tensor_stack(std::move(values), at::zeros_like(nt.ids),
                          nt.stack_dims);
}

at::Tensor append_elements(std::vector<ordered_json>& values,
                           const TensorDictImpl& level) {
  const NonTensor& nt = *level.non_tensor;
  const int64_t offset = static_cast<int64_t>(values.size());
  if (nt.is_stack) {
    values.insert(values.end(), nt.values->begin(), nt.values->end());
    return nt.ids + offset;
  }
  values.push_back(nt.data);
  return at::full(level.batch_size, offset, at::kLong);
}

ImplPtr join_non_tensor(const std::vector<const TensorDictImpl*>& items,
                        int64_t dim, bool stacking, std::vector<int64_t> batch,
                        c10::optional<at::Device> device) {
  ImplPtr out = make_impl(std::move(batch), device);
  const NonTensor& first = *items[0]->non_tensor;
  bool all_equal = !first.is_stack;
  for (const TensorDictImpl* it : items) {
    all_equal = all_equal && !it->non_tensor->is_stack &&
                py_equal(it->non_tensor->data, first.data);
  }
  if (all_equal) {
    out->non_tensor = items[0]->non_tensor;
    return out;
  }
  auto values = std::make_shared<std::vector<ordered_json>>();
  std::vector<at::Tensor> ids;
  ids.reserve(items.size());
  // Python stacks lazily along `dim`: the inputs' stack dims stay stack dims
  // (a cat joins along `dim`, which becomes one).
  std::vector<char> stack_dims(items[0]->batch_size.size(), 0);
  for (const TensorDictImpl* it : items) {
    ids.push_back(append_elements(*values, *it));
    const NonTensor& nt = *it->non_tensor;
    for (size_t d = 0; d < stack_dims.size(); ++d) {
      if (nt.is_stack && (nt.stack_dims.empty() || nt.stack_dims[d])) {
        stack_dims[d] = 1;
      }
    }
  }
  if (stacking) {
    stack_dims.insert(stack_dims.begin() + dim, 1);
  } else {
    stack_dims[static_cast<size_t>(dim)] = 1;
  }
  out->non_tensor = non_tensor_stack(
      std::move(values), stacking ? at::stack(ids, dim) : at::cat(ids, dim),
      std::move(stack_dims));
  return out;
}

const at::Tensor& non_tensor_ids(const NonTensor& nt) { return nt.ids; }

void check_no_non_tensor(const char* op, const char* what,
                         const TensorDictImpl& root) {
  visit(
      root,
      [&](const KeyPath& path, const TensorDictImpl& level) {
        TORCH_CHECK_TYPE(level.non_tensor == nullptr, op, ": key ",
                         path.key().str(), " holds non-tensor data, which ",
                         what, " cannot hold (tensors only)");
      },
      Ignore(), Ignore());
}

namespace tree_impl {

void carry_non_tensor(const TensorDictImpl& src, TensorDictImpl& out,
                      const at::Tensor& new_ids, const char* op,
                      const KeyPath& path, const DimMap* dims) {
  const NonTensor& nt = *src.non_tensor;
  if (!nt.is_stack ||
      (!new_ids.defined() && src.batch_size == out.batch_size)) {
    out.non_tensor = src.non_tensor;
    return;
  }
  TORCH_CHECK(new_ids.defined(), op != nullptr ? op : "this operation",
              ": key ", path.key().str(),
              " holds a NonTensorStack, whose values cannot follow a change "
              "of its batch size from ",
              shape_str(src.batch_size), " to ", shape_str(out.batch_size));
  TORCH_INTERNAL_ASSERT(new_ids.sizes() == c10::IntArrayRef(out.batch_size));
  // The stack dims of the result: the root's dims as `dims` maps them, then
  // this level's own dims beyond the root's, unchanged.
  std::vector<char> stack_dims;
  if (dims != nullptr) {
    const auto is_stack_dim = [&](int64_t d) {
      return nt.stack_dims.empty() || nt.stack_dims[static_cast<size_t>(d)];
    };
    for (int64_t from : dims->from) {
      stack_dims.push_back(from >= 0 ? is_stack_dim(from)
                                     : from == DimMap::kMixed);
    }
    for (int64_t d = dims->in_dims;
         d < static_cast<int64_t>(src.batch_size.size()); ++d) {
      stack_dims.push_back(is_stack_dim(d));
    }
  }
  out.non_tensor = non_tensor_stack(nt.values, new_ids, std::move(stack_dims));
}

}  // namespace tree_impl

}  // namespace detail
}  // namespace tensordict
