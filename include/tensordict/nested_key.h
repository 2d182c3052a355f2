// tensordict/nested_key.h — keys of a TensorDict.
//
// A `NestedKey` names an entry of a `TensorDict`: either a plain string key
// ("obs") or a path through sub-dicts ({"next", "obs"}). It is built
// implicitly from a string literal, a `std::string`, or a braced list of
// strings, so every API that takes a key accepts all three spellings:
//
//   td.get("obs");
//   td.get(std::string("obs"));
//   td.get({"next", "obs"});
//
// A key is never empty and no component is empty: constructing one that is
// throws a `c10::Error` ("NestedKey: empty key is not allowed").
//
// A one-component path is the same key as the plain string: `{"obs"}` equals
// `"obs"`.
//
// Keys print as Python tensordict prints them: `obs` for a plain key and
// `('next', 'obs')` for a nested one. Error messages use the same form.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

namespace tensordict {

/// A plain or nested key of a TensorDict.
///
/// Example:
/// ```
///   NestedKey a = "obs";                 // plain
///   NestedKey b = {"next", "obs"};       // nested
///   std::cout << b;                       // ('next', 'obs')
/// ```
class NestedKey {
 public:
  /// Plain key. Throws if `key` is empty.
  NestedKey(const char* key);  // NOLINT(google-explicit-constructor)
  /// Plain key. Throws if `key` is empty.
  NestedKey(std::string key);  // NOLINT(google-explicit-constructor)
  /// Nested key from its components. Throws if the list or any component is
  /// empty.
  NestedKey(std::initializer_list<std::string> parts);  // NOLINT
  /// Nested key from its components. Throws if the list or any component is
  /// empty.
  explicit NestedKey(std::vector<std::string> parts);

  /// The components, outermost first. Never empty.
  [[nodiscard]] const std::vector<std::string>& parts() const noexcept {
    return parts_;
  }
  /// Number of components (1 for a plain key).
  [[nodiscard]] size_t depth() const noexcept { return parts_.size(); }
  /// True for a key with more than one component.
  [[nodiscard]] bool is_nested() const noexcept { return parts_.size() > 1; }
  /// The first component.
  [[nodiscard]] const std::string& front() const noexcept {
    return parts_.front();
  }
  /// The last component (the leaf's own name).
  [[nodiscard]] const std::string& back() const noexcept {
    return parts_.back();
  }

  /// This key with `other`'s components appended.
  [[nodiscard]] NestedKey join(const NestedKey& other) const;

  /// Python's rendering: `obs` or `('next', 'obs')`.
  [[nodiscard]] std::string str() const;

  /// Component-wise comparisons (`<` orders lexicographically by
  /// component, for use as a map key).
  ///@{
  friend bool operator==(const NestedKey& a, const NestedKey& b) {
    return a.parts_ == b.parts_;
  }
  friend bool operator!=(const NestedKey& a, const NestedKey& b) {
    return a.parts_ != b.parts_;
  }
  friend bool operator<(const NestedKey& a, const NestedKey& b) {
    return a.parts_ < b.parts_;
  }
  ///@}

 private:
  void validate() const;
  std::vector<std::string> parts_;
};

/// Writes `key.str()`.
std::ostream& operator<<(std::ostream& os, const NestedKey& key);

}  // namespace tensordict
