// Python tensordict's repr.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace {

// textwrap.indent: prefix every line that is not whitespace-only.
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

std::string py_bool(bool b) { return b ? "True" : "False"; }

std::string tensor_repr(const at::Tensor& t) {
  return "Tensor(shape=torch.Size(" + detail::shape_str(t.sizes()) +
         "), device=" + detail::device_name(t.device()) +
         ", dtype=" + detail::dtype_name(t.scalar_type()) +
         ", is_shared=" + py_bool(detail::tensor_is_shared(t)) + ")";
}

std::string dict_repr(const TensorDict& td) {
  const detail::TensorDictImpl& impl = detail::TensorDictImpl::of(td);
  std::vector<std::string> fields;
  fields.reserve(impl.nodes.size());
  for (const auto& n : impl.nodes) {
    if (n.is_dict()) {
      fields.push_back(n.key + ": " +
                       dict_repr(detail::TensorDictImpl::wrap(n.dict)));
    } else {
      fields.push_back(n.key + ": " + tensor_repr(n.tensor));
    }
  }
  std::sort(fields.begin(), fields.end());
  std::string joined;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) joined += ",\n";
    joined += fields[i];
  }
  std::string out = "TensorDict(\n";
  out += indent("fields={\n" + indent(joined, 4) + "}", 4) + ",\n";
  out += indent("batch_size=torch.Size(" + detail::shape_str(impl.batch_size) + ")", 4) + ",\n";
  out += indent("device=" + (impl.device ? detail::device_name(*impl.device)
                                          : std::string("None")),
                4) +
         ",\n";
  out += indent("is_shared=" + py_bool(td.is_shared()), 4) + ")";
  return out;
}

}  // namespace

std::string repr(const TensorDict& td) { return dict_repr(td); }

std::ostream& operator<<(std::ostream& os, const TensorDict& td) {
  return os << dict_repr(td);
}

}  // namespace tensordict
