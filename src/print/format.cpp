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

// A leaf over a file mapped by this library prints as Python prints a
// MemoryMappedTensor, which always reports itself shared; one over an
// archive as Python's leaves over an archive, shared tensors (their storage
// is torch.from_file's mapping), though the dict does not report itself so.
std::string tensor_repr(const at::Tensor& t) {
  const bool mapped = detail::is_mapped_tensor(t);
  const bool shared =
      mapped || detail::is_archive_tensor(t) || detail::tensor_is_shared(t);
  return std::string(mapped ? "MemoryMappedTensor" : "Tensor") +
         "(shape=torch.Size(" + detail::shape_str(t.sizes()) +
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
        fields.back().push_back(*path.parts.back() + ": " + tensor_repr(t));
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

}  // namespace

std::string repr(const TensorDict& td) { return dict_repr(td); }

std::ostream& operator<<(std::ostream& os, const TensorDict& td) {
  return os << dict_repr(td);
}

}  // namespace tensordict
