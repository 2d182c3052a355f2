// tensordict/format.h — fmt support for TensorDict and NestedKey.
//
// `fmt::format("{}", td)` gives the same bytes as `operator<<`: Python
// tensordict's repr. `fmt::format("{}", key)` gives `obs` or
// `('next', 'obs')`. Only the empty format spec is accepted.
#pragma once

#include <fmt/format.h>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {
/// A formatter that renders `T` through a `std::string str(const T&)`.
template <typename T, std::string (*Render)(const T&)>
struct StringFormatter {
  constexpr auto parse(fmt::format_parse_context& ctx)
      -> decltype(ctx.begin()) {
    auto it = ctx.begin();
    if (it != ctx.end() && *it != '}') {
      throw fmt::format_error("tensordict: invalid format spec");
    }
    return it;
  }
  template <typename FormatContext>
  auto format(const T& value, FormatContext& ctx) const -> decltype(ctx.out()) {
    const std::string s = Render(value);
    return std::copy(s.begin(), s.end(), ctx.out());
  }
};
inline std::string render_key(const NestedKey& k) { return k.str(); }
inline std::string render_indexed(const IndexedTensorDict& td) {
  return repr(td.value());
}
}  // namespace detail
}  // namespace tensordict

namespace fmt {
/// `fmt::format("{}", td)`: Python's repr, as `operator<<`.
template <>
struct formatter<tensordict::TensorDict>
    : tensordict::detail::StringFormatter<tensordict::TensorDict,
                                          &tensordict::repr> {};
/// `fmt::format("{}", td[i])`: the indexed dict's repr.
template <>
struct formatter<tensordict::IndexedTensorDict>
    : tensordict::detail::StringFormatter<tensordict::IndexedTensorDict,
                                          &tensordict::detail::render_indexed> {
};
/// `fmt::format("{}", key)`: `obs` or `('next', 'obs')`.
template <>
struct formatter<tensordict::NestedKey>
    : tensordict::detail::StringFormatter<tensordict::NestedKey,
                                          &tensordict::detail::render_key> {};
}  // namespace fmt
