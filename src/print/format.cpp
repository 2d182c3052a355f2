// Python tensordict's repr.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "io/files.h"
#include "print/indent.h"
#include "tensordict/lazy_stack.h"
#include "tensordict/tensorclass.h"

namespace tensordict {

namespace detail {

std::string indent(const std::string& text, size_t n) {
  const std::string pad(n, ' ');
  std::string out;
  out.reserve(text.size() + 16 * n);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    const size_t stop = end == std::string::npos ? text.size() : end + 1;
    const bool blank = text.find_first_not_of(" \t\r\n", start) >= stop;
    if (!blank) out += pad;
    out.append(text, start, stop - start);
    start = stop;
  }
  return out;
}

}  // namespace detail

namespace {

using detail::indent;

std::string py_bool(bool b) { return b ? "True" : "False"; }

// A leaf over a file mapped by this library prints as Python prints a
// MemoryMappedTensor, which always reports itself shared; one over an
// archive as Python's leaves over an archive, shared tensors (their storage
// is torch.from_file's mapping), though the dict does not report itself so.
// `shape` stands for the tensor's own (a lazy stack's shape with -1).
std::string tensor_repr(const at::Tensor& t, c10::IntArrayRef shape) {
  const bool mapped = detail::is_mapped_tensor(t);
  const bool shared =
      mapped || detail::is_archive_tensor(t) || detail::tensor_is_shared(t);
  return std::string(mapped ? "MemoryMappedTensor" : "Tensor") +
         "(shape=torch.Size(" + detail::shape_str(shape) +
         "), device=" + detail::device_name(t.device()) +
         ", dtype=" + detail::dtype_name(t.scalar_type()) +
         ", is_shared=" + py_bool(shared) + ")";
}

// The repr of one level, given the "key: repr" of each of its entries.
std::string level_repr(const detail::TensorDictImpl& impl,
                       std::vector<std::string> fields) {
  std::sort(fields.begin(), fields.end());
  std::string joined;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) joined += ",\n";
    joined += fields[i];
  }
  std::string out = "TensorDict(\n";
  out += indent("fields={\n" + indent(joined, 4) + "}", 4) + ",\n";
  out += indent("batch_size=torch.Size(" + detail::shape_str(impl.batch_size) +
                    ")",
                4) +
         ",\n";
  out += indent("device=" + (impl.device ? detail::device_name(*impl.device)
                                         : std::string("None")),
                4) +
         ",\n";
  out += indent("is_shared=" + py_bool(detail::is_shared(impl)), 4) + ")";
  return out;
}

std::string dict_repr(const TensorDict& td) {
  // The fields of each level being printed, the innermost last.
  std::vector<std::vector<std::string>> fields;
  std::string out;
  const detail::TensorDictImpl& root = detail::TensorDictImpl::of(td);
  detail::visit(
      root,
      [&](const detail::KeyPath&, const detail::TensorDictImpl& level) {
        fields.emplace_back();
        fields.back().reserve(level.nodes.size());
      },
      [&](const detail::KeyPath& path, const at::Tensor& t) {
        fields.back().push_back(*path.parts.back() + ": " +
                                tensor_repr(t, t.sizes()));
      },
      [&](const detail::KeyPath& path, const detail::TensorDictImpl& level) {
        std::string r = level.non_tensor != nullptr
                            ? detail::non_tensor_repr(level)
                            : level_repr(level, std::move(fields.back()));
        fields.pop_back();
        if (fields.empty()) {
          out = std::move(r);
        } else {
          fields.back().push_back(*path.parts.back() + ": " + r);
        }
      });
  return out;
}

std::string joined_sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",\n";
    out += v[i];
  }
  return out;
}

// Python's repr of a lazy stack (`LazyStackedTensorDict.__repr__`): the
// shared keys ("fields"), each stacked, or, where shapes differ, the first
// dict's leaf with -1 on those dims; then each dict's own keys
// ("exclusive_fields"), as that dict prints them.
std::string lazy_repr(const LazyStackedTensorDict& s) {
  const auto& tds = s.tensordicts();
  std::vector<std::string> fields;
  const auto keys = s.keys();
  for (const auto& key : keys) {
    const std::string name = key.parts().back();
    const detail::Node* n =
        detail::lookup(detail::TensorDictImpl::of(tds[0]), key);
    if (n->is_non_tensor()) {
      fields.push_back(name + ": " + detail::non_tensor_repr(*n->dict));
    } else if (n->is_dict()) {
      fields.push_back(name + ": " + lazy_repr(s.get_tensordict(key)));
    } else {
      const std::vector<int64_t> shape = s.get_item_shape(key);
      if (std::find(shape.begin(), shape.end(), -1) == shape.end()) {
        const at::Tensor stacked = s.get(key);
        fields.push_back(name + ": " + tensor_repr(stacked, stacked.sizes()));
      } else {
        // As Python: the first dict's leaf, with the merged shape.
        fields.push_back(name + ": " + tensor_repr(s.get_list(key)[0], shape));
      }
    }
  }
  std::vector<std::string> exclusive;
  for (size_t i = 0; i < tds.size(); ++i) {
    std::vector<std::string> own;
    const detail::TensorDictImpl& impl = detail::TensorDictImpl::of(tds[i]);
    for (const auto& node : impl.nodes) {
      if (s.contains(NestedKey(node.key))) continue;
      std::string r;
      if (node.is_non_tensor()) {
        r = detail::non_tensor_repr(*node.dict);
      } else if (node.is_dict()) {
        r = dict_repr(detail::TensorDictImpl::wrap(node.dict));
      } else {
        r = tensor_repr(node.tensor, node.tensor.sizes());
      }
      own.push_back(node.key + ": " + r);
    }
    if (own.empty()) continue;
    exclusive.push_back(indent(
        std::to_string(i) + " ->" + indent("\n" + joined_sorted(own), 4), 4));
  }
  std::string excl;
  for (size_t i = 0; i < exclusive.size(); ++i) {
    excl += i ? ",\n" : "";
    excl += exclusive[i];
  }
  bool shared = true;
  for (const auto& td : tds) {
    shared &= detail::is_shared(detail::TensorDictImpl::of(td));
  }
  const auto device = s.device();
  std::string out = "LazyStackedTensorDict(\n";
  out += indent("fields={" + indent("\n" + joined_sorted(fields), 4) + "}", 4) +
         ",\n";
  out += indent("exclusive_fields={\n" + excl + "}", 4) + ",\n";
  out +=
      indent("batch_size=torch.Size(" + detail::shape_str(s.batch_size()) + ")",
             4) +
      ",\n";
  out += indent("device=" + (device ? detail::device_name(*device)
                                    : std::string("None")),
                4) +
         ",\n";
  out += indent("is_shared=" + py_bool(shared), 4) + ",\n";
  out += indent("stack_dim=" + std::to_string(s.stack_dim()), 4) + ")";
  return out;
}

}  // namespace

std::string detail::tensorclass_repr(
    const TensorDict& td, const char* cls,
    const std::vector<TensorClassField>& tensor_fields,
    const std::vector<TensorClassField>& class_fields) {
  std::vector<std::string> set;
  std::vector<std::string> parts;
  for (const auto* fields : {&tensor_fields, &class_fields}) {
    for (const auto& f : *fields) {
      const NestedKey key(f.name);
      if (!td.contains(key)) {
        parts.push_back(indent(std::string(f.name) + "=None", 4));
      } else if (f.repr == nullptr) {
        const at::Tensor t = td.get(key);
        set.push_back(std::string(f.name) + "=" + tensor_repr(t, t.sizes()));
      } else {
        set.push_back(std::string(f.name) + "=" +
                      f.repr(td.get_tensordict(key)));
      }
    }
  }
  if (!set.empty()) parts.insert(parts.begin(), indent(joined_sorted(set), 4));
  const auto& impl = detail::TensorDictImpl::of(td);
  parts.push_back(indent(
      "batch_size=torch.Size(" + detail::shape_str(impl.batch_size) + ")", 4));
  parts.push_back(
      indent("device=" + (impl.device ? detail::device_name(*impl.device)
                                      : std::string("None")),
             4));
  parts.push_back(indent("is_shared=" + py_bool(detail::is_shared(impl)), 4));
  std::string out = std::string(cls) + "(\n";
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i ? ",\n" : "") + parts[i];
  }
  return out + ")";
}

std::string repr(const TensorDict& td) { return dict_repr(td); }

std::string repr(const LazyStackedTensorDict& s) { return lazy_repr(s); }

std::ostream& operator<<(std::ostream& os, const LazyStackedTensorDict& s) {
  return os << lazy_repr(s);
}

std::ostream& operator<<(std::ostream& os, const TensorDict& td) {
  return os << dict_repr(td);
}

}  // namespace tensordict
