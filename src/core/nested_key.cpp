#include "tensordict/nested_key.h"

#include "core/internal.h"

#include <c10/util/Exception.h>

#include <ostream>
#include <string>
#include <vector>

namespace tensordict {

NestedKey::NestedKey(const char* key) : parts_{std::string(key ? key : "")} {
  validate();
}

NestedKey::NestedKey(std::string key) : parts_{std::move(key)} { validate(); }

NestedKey::NestedKey(std::initializer_list<std::string> parts) : parts_(parts) {
  validate();
}

NestedKey::NestedKey(std::vector<std::string> parts)
    : parts_(std::move(parts)) {
  validate();
}

void NestedKey::validate() const {
  TORCH_CHECK_VALUE(!parts_.empty(), "NestedKey: empty key is not allowed");
  for (const auto& p : parts_) {
    TORCH_CHECK_VALUE(!p.empty(), "NestedKey: empty key is not allowed",
                      parts_.size() > 1 ? " (in nested key " : "",
                      parts_.size() > 1 ? str() : "",
                      parts_.size() > 1 ? ")" : "");
  }
}

NestedKey NestedKey::join(const NestedKey& other) const {
  std::vector<std::string> parts = parts_;
  parts.insert(parts.end(), other.parts_.begin(), other.parts_.end());
  return NestedKey(std::move(parts));
}

std::string NestedKey::str() const {
  if (parts_.size() == 1) return parts_.front();
  std::string out = "(";
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (i) out += ", ";
    out += detail::py_string_repr(parts_[i]);
  }
  out += ")";
  return out;
}

std::ostream& operator<<(std::ostream& os, const NestedKey& key) {
  return os << key.str();
}

namespace detail {

std::vector<std::string> split_key(const std::string& key,
                                   const std::string& sep) {
  std::vector<std::string> parts;
  if (sep.empty()) return {key};
  size_t start = 0;
  while (true) {
    const size_t pos = key.find(sep, start);
    if (pos == std::string::npos) {
      parts.push_back(key.substr(start));
      break;
    }
    parts.push_back(key.substr(start, pos - start));
    start = pos + sep.size();
  }
  return parts;
}

}  // namespace detail

}  // namespace tensordict
