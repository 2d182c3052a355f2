// Internal: Python's textwrap.indent, which every repr of the library's
// (print/format.cpp's dicts, envs/'s specs) nests its fields with.
#pragma once

#include <cstddef>
#include <string>

namespace tensordict {
namespace detail {

/// `text` with every line that is not whitespace-only prefixed by `n`
/// spaces (`textwrap.indent(text, " " * n)`).
[[nodiscard]] std::string indent(const std::string& text, size_t n);

}  // namespace detail
}  // namespace tensordict
