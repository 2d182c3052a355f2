// tensordict/tensorclass.h — typed containers: Python tensordict's
// `@tensorclass`, the C++ way.
//
// A tensor class is a struct of named fields over a TensorDict. Its fields
// are declared once, and each gets typed accessors, so a misspelt field is
// a compile error rather than a missing key at run time:
// ```
//   struct Next : tensordict::TensorClass<Next> {
//     TENSORDICT_TENSORCLASS(Next)
//     TENSORDICT_FIELDS(obs, reward, done)
//   };
//   struct Transition : tensordict::TensorClass<Transition> {
//     TENSORDICT_TENSORCLASS(Transition)
//     TENSORDICT_FIELDS(obs, action)
//     TENSORDICT_CLASS_FIELDS(Next, next)   // a field of another tensor class
//   };
//
//   Transition t(TensorDict({{"obs", obs}, {"action", action}}, {N}));
//   t.set_next(Next(TensorDict({{"obs", next_obs}}, {N})));
//   at::Tensor o = t.obs();            // t.tensordict().get("obs")
//   Transition row = t[0];             // typed views
//   t[1] = row;                        // a write into t, as td[1] = row
// ```
// `TENSORDICT_FIELDS(names...)` declares tensor fields: `name()` returns the
// tensor (the stored one, as `TensorDict::get`) and `set_name(tensor)` sets
// it (as `TensorDict::set`). `TENSORDICT_CLASS_FIELDS(Type, name, ...)`
// declares fields holding another tensor class (pairs of a type and a
// name): `name()` returns a `Type` over the sub-dict (shared, not copied)
// and `set_name(value)` sets it. Each macro is used at most once per class,
// after `TENSORDICT_TENSORCLASS(ClassName)`.
//
// The dict. A tensor class holds a TensorDict handle (`tensordict()`): it
// is the whole state, so a tensor class costs what its dict costs, and
// every TensorDict operation is one call away. Building one from a dict
// (`Transition(td)`, `from_tensordict(td)`) shares the dict, zero-copy, and
// checks its keys: each must be a field, holding a tensor (a tensor field)
// or a dict that is itself a valid `Type` (a class field). As in Python,
// a field may be missing (Python's `None`): reading it is then the dict's
// missing-key error, and a dict that starts empty fills by `t[i] = row`.
//
// Operations that return the typed class (no key check: the structure is
// the same): indexing (`t[i]`, `t.index({...})`), `clone`, `to`, `cpu`,
// `contiguous`, `detach`, `tensordict::stack` and `tensordict::cat` of a
// vector of them, `memmap_`/`memmap`/`load_memmap`, and `sample_as<T>(rb,
// n)` on a replay buffer.
//
// Persistence is Python's tensorclass layout, so a directory written by
// `t.memmap_(dir)` loads in Python with `Transition.load_memmap(dir)` (the
// class defined there with the same name and fields), and one written by
// Python loads here:
//   dir/meta.json            {"_type": "<class '__main__.Transition'>"}
//   dir/_tensordict/         the dict, as TensorDict::memmap_ writes it,
//                            a class field's sub-dict in the same layout
// The Python class's module is `__main__` unless the struct says otherwise
// with `static std::string python_module() { return "my.module"; }`.
// Loading checks the field names (recursively), not the module.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensordict/functional.h"
#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

template <typename Derived>
class TensorClass;

namespace detail {

/// The Python type (`module.Name`) of the tensor class at a field path
/// (empty: the root).
struct TensorClassType {
  std::vector<std::string> path;
  std::string type;
};

/// A field of a tensor class, as its macros list them.
struct TensorClassField {
  const char* name;
  /// For a class field: checks a sub-dict against the field's class (null
  /// for a tensor field).
  void (*check)(const TensorDict& td, const std::vector<std::string>& where);
  /// For a class field: appends the Python types of the field's class (at
  /// `at`) and of its own class fields (null for a tensor field).
  void (*python_types)(const std::vector<std::string>& at,
                       std::vector<TensorClassType>& out);
  /// For a class field: the repr of a sub-dict as the field's class (null
  /// for a tensor field).
  std::string (*repr)(const TensorDict& td);
};

/// Throws unless every key of `td` is one of `tensor_fields` (holding a
/// tensor) or `class_fields` (holding a dict that its `check` accepts).
/// `cls` names the class, and `where` the key of `td` in the outermost dict
/// checked (empty for that dict), in the messages.
void check_tensorclass_keys(const TensorDict& td, const char* cls,
                            const std::vector<std::string>& where,
                            const std::vector<TensorClassField>& tensor_fields,
                            const std::vector<TensorClassField>& class_fields);

/// Python's repr of the tensor class `cls` over `td`: its set fields sorted,
/// then its missing fields (Python's `None`) in declaration order, tensor
/// fields first.
std::string tensorclass_repr(const TensorDict& td, const char* cls,
                             const std::vector<TensorClassField>& tensor_fields,
                             const std::vector<TensorClassField>& class_fields);

/// Writes `td` under `prefix` in Python's tensorclass layout: `types` gives
/// the Python types of the root and of each class field's sub-dict. `copy`:
/// as `memmap` (a new dict over the files, returned), else as `memmap_`
/// (returns `td`).
TensorDict memmap_tensorclass(const TensorDict& td, const std::string& prefix,
                              const std::vector<TensorClassType>& types,
                              bool copy);

template <typename T>
struct IsTensorClass : std::is_base_of<TensorClass<T>, T> {};

/// Selects the constructor that skips the key check (`wrap_unchecked`).
struct Unchecked {};

}  // namespace detail

/// `t[index]` of a tensor class `D`: reads as a `D` of views, and assignment
/// writes a `D` into the indexed region (as `IndexedTensorDict`).
template <typename D>
class IndexedTensorClass {
 public:
  /// The rows `index` selects (`TensorClass::operator[]` makes them).
  explicit IndexedTensorClass(IndexedTensorDict index)
      : index_(std::move(index)) {}

  /// Copies and moves of the proxy (the same rows of the same object).
  ///@{
  IndexedTensorClass(const IndexedTensorClass&) = default;
  IndexedTensorClass(IndexedTensorClass&&) noexcept = default;
  ///@}
  ~IndexedTensorClass() = default;

  /// `t[i] = row`: writes `row` into the indexed region, all-or-nothing.
  /// Only the temporary `t[i]` writes (as `IndexedTensorDict`).
  IndexedTensorClass& operator=(const D& row) && {
    std::move(index_) = row.tensordict();
    return *this;
  }
  /// `t[i] = t[j]`: writes the other indexed rows' contents.
  IndexedTensorClass& operator=(const IndexedTensorClass& other) && {
    std::move(index_) = other.index_;
    return *this;
  }

  /// The indexed rows (views where LibTorch gives views).
  ///@{
  [[nodiscard]] D value() const { return D::wrap_unchecked(index_.value()); }
  // NOLINTNEXTLINE(google-explicit-constructor)
  operator D() const { return value(); }
  ///@}

 private:
  IndexedTensorDict index_;
};

/// The base of a tensor class `Derived` (see the top of this file).
template <typename Derived>
class TensorClass {
 public:
  /// An empty dict with no batch dims.
  TensorClass() = default;
  /// Over `td` (shared, not copied), after checking its keys against the
  /// fields.
  explicit TensorClass(TensorDict td) : td_(std::move(td)) { check(td_, {}); }
  /// Over `td`, without the check (`wrap_unchecked`).
  TensorClass(detail::Unchecked /*unused*/, TensorDict td)
      : td_(std::move(td)) {}

  /// Over `td` (shared, not copied), after checking its keys.
  [[nodiscard]] static Derived from_tensordict(TensorDict td) {
    return Derived(std::move(td));
  }
  /// The dict this class is a view of (shared: writes into it are writes
  /// into this object). Python's `to_tensordict()` copies; `clone()` this
  /// for a copy.
  [[nodiscard]] const TensorDict& tensordict() const noexcept { return td_; }

  /// The dict's batch size, dims, device and element count.
  ///@{
  [[nodiscard]] c10::IntArrayRef batch_size() const { return td_.batch_size(); }
  [[nodiscard]] int64_t batch_dims() const { return td_.batch_dims(); }
  [[nodiscard]] c10::optional<at::Device> device() const {
    return td_.device();
  }
  ///@}

  /// `t[i]`, `t[Slice(...)]`, `t[mask]`, `t[index_tensor]`: typed reads and
  /// writes (see `IndexedTensorClass`).
  ///@{
  [[nodiscard]] IndexedTensorClass<Derived> operator[](int64_t i) const {
    return IndexedTensorClass<Derived>(td_[i]);
  }
  [[nodiscard]] IndexedTensorClass<Derived> operator[](
      const at::indexing::TensorIndex& index) const {
    return IndexedTensorClass<Derived>(td_[index]);
  }
  ///@}
  /// `TensorDict::index`, typed.
  [[nodiscard]] Derived index(
      const std::vector<at::indexing::TensorIndex>& indices) const {
    return wrap_unchecked(td_.index(indices));
  }

  /// The TensorDict operations of the same names, typed.
  ///@{
  [[nodiscard]] Derived clone() const { return wrap_unchecked(td_.clone()); }
  [[nodiscard]] Derived to(at::Device device, bool non_blocking = false) const {
    return wrap_unchecked(td_.to(device, non_blocking));
  }
  [[nodiscard]] Derived to(at::ScalarType dtype) const {
    return wrap_unchecked(td_.to(dtype));
  }
  [[nodiscard]] Derived cpu() const { return wrap_unchecked(td_.cpu()); }
  [[nodiscard]] Derived contiguous() const {
    return wrap_unchecked(td_.contiguous());
  }
  [[nodiscard]] Derived detach() const { return wrap_unchecked(td_.detach()); }
  ///@}

  /// `TensorDict::memmap_` in Python's tensorclass layout (see the top of
  /// this file). Returns `*this`.
  const Derived& memmap_(const std::string& prefix) const {
    detail::memmap_tensorclass(td_, prefix, python_types(), /*copy=*/false);
    return static_cast<const Derived&>(*this);
  }
  /// A memory-mapped copy under `prefix`, in the tensorclass layout.
  [[nodiscard]] Derived memmap(const std::string& prefix) const {
    return wrap_unchecked(
        detail::memmap_tensorclass(td_, prefix, python_types(), true));
  }
  /// Loads a directory in the tensorclass layout (Python's, or `memmap_`'s)
  /// or a plain dict's, checking its keys against the fields.
  [[nodiscard]] static Derived load_memmap(const std::string& prefix) {
    return Derived(TensorDict::load_memmap(prefix));
  }

  /// Throws unless `td`'s keys fit the fields (`where`: the field path, for
  /// the messages; empty at the root).
  static void check(const TensorDict& td,
                    const std::vector<std::string>& where) {
    detail::check_tensorclass_keys(td, Derived::tensorclass_name(), where,
                                   Derived::tensorclass_tensor_fields(),
                                   Derived::tensorclass_class_fields());
  }
  /// Python's repr of `td` as this class (`repr(t)`).
  static std::string repr_of(const TensorDict& td) {
    return detail::tensorclass_repr(td, Derived::tensorclass_name(),
                                    Derived::tensorclass_tensor_fields(),
                                    Derived::tensorclass_class_fields());
  }
  /// The Python types of the class (the root, first) and of its class
  /// fields, by field path.
  static std::vector<detail::TensorClassType> python_types() {
    std::vector<detail::TensorClassType> out;
    append_python_types({}, out);
    return out;
  }
  /// Appends the Python types of this class, at `at`, and of its class
  /// fields below it.
  static void append_python_types(const std::vector<std::string>& at,
                                  std::vector<detail::TensorClassType>& out) {
    out.push_back({at, python_type()});
    for (const auto& f : Derived::tensorclass_class_fields()) {
      std::vector<std::string> sub = at;
      sub.emplace_back(f.name);
      f.python_types(sub, out);
    }
  }
  /// `module.Name`: the Python class this class stands for.
  static std::string python_type() {
    return Derived::python_module() + "." + Derived::tensorclass_name();
  }
  /// The Python module of the class (see the top of this file).
  static std::string python_module() { return "__main__"; }
  /// Over `td` without checking its keys: for results of operations on a
  /// dict that was checked.
  [[nodiscard]] static Derived wrap_unchecked(TensorDict td) {
    return Derived(detail::Unchecked{}, std::move(td));
  }

  /// The fields (empty unless the class declares some).
  ///@{
  static const std::vector<detail::TensorClassField>&
  tensorclass_tensor_fields() {
    static const std::vector<detail::TensorClassField> none;
    return none;
  }
  static const std::vector<detail::TensorClassField>&
  tensorclass_class_fields() {
    static const std::vector<detail::TensorClassField> none;
    return none;
  }
  ///@}

 private:
  TensorDict td_;
};

/// `tensordict::stack` and `tensordict::cat` of tensor classes, typed.
///@{
template <typename D,
          std::enable_if_t<detail::IsTensorClass<D>::value, int> = 0>
[[nodiscard]] D stack(const std::vector<D>& items, int64_t dim = 0) {
  std::vector<TensorDict> tds;
  tds.reserve(items.size());
  for (const auto& t : items) tds.push_back(t.tensordict());
  return D::wrap_unchecked(stack(tds, dim));
}
template <typename D,
          std::enable_if_t<detail::IsTensorClass<D>::value, int> = 0>
[[nodiscard]] D cat(const std::vector<D>& items, int64_t dim = 0) {
  std::vector<TensorDict> tds;
  tds.reserve(items.size());
  for (const auto& t : items) tds.push_back(t.tensordict());
  return D::wrap_unchecked(cat(tds, dim));
}
///@}

/// Python's repr of a tensor class, byte for byte, as Python prints a
/// `@tensorclass` with the same fields.
///@{
template <typename D,
          std::enable_if_t<detail::IsTensorClass<D>::value, int> = 0>
[[nodiscard]] std::string repr(const D& t) {
  return D::repr_of(t.tensordict());
}
template <typename D,
          std::enable_if_t<detail::IsTensorClass<D>::value, int> = 0>
std::ostream& operator<<(std::ostream& os, const D& t) {
  return os << D::repr_of(t.tensordict());
}
///@}

/// `rb.sample(n)` (a ReplayBuffer) as a typed batch, its keys checked:
/// `auto [batch, info] = sample_as<Transition>(rb, 32);`.
template <typename D, typename ReplayBufferT>
[[nodiscard]] auto sample_as(ReplayBufferT& rb, int64_t n) {
  auto [data, info] = rb.sample(n);
  return std::make_pair(D(std::move(data)), std::move(info));
}

}  // namespace tensordict

// ---- The field macros -----------------------------------------------------

/// @cond
#define TENSORDICT_PP_EXPAND(x) x
#define TENSORDICT_PP_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11,     \
                             _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, \
                             _22, _23, _24, N, ...)                            \
  N
#define TENSORDICT_PP_NARGS(...)                                            \
  TENSORDICT_PP_EXPAND(                                                     \
      TENSORDICT_PP_NARGS_(__VA_ARGS__, 24, 23, 22, 21, 20, 19, 18, 17, 16, \
                           15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1))
#define TENSORDICT_PP_CAT_(a, b) a##b
#define TENSORDICT_PP_CAT(a, b) TENSORDICT_PP_CAT_(a, b)

// m(x) for each argument (up to 24).
#define TENSORDICT_PP_EACH_1(m, x) m(x)
#define TENSORDICT_PP_EACH_2(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_1(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_3(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_2(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_4(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_3(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_5(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_4(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_6(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_5(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_7(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_6(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_8(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_7(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_9(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_8(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_10(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_9(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_11(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_10(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_12(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_11(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_13(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_12(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_14(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_13(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_15(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_14(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_16(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_15(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_17(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_16(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_18(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_17(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_19(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_18(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_20(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_19(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_21(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_20(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_22(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_21(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_23(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_22(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH_24(m, x, ...) \
  m(x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_EACH_23(m, __VA_ARGS__))
#define TENSORDICT_PP_EACH(m, ...)        \
  TENSORDICT_PP_EXPAND(TENSORDICT_PP_CAT( \
      TENSORDICT_PP_EACH_, TENSORDICT_PP_NARGS(__VA_ARGS__))(m, __VA_ARGS__))

// m(T, x) for each pair of arguments (up to 12 pairs).
#define TENSORDICT_PP_PAIRS_2(m, t, x) m(t, x)
#define TENSORDICT_PP_PAIRS_4(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_2(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_6(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_4(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_8(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_6(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_10(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_8(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_12(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_10(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_14(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_12(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_16(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_14(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_18(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_16(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_20(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_18(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_22(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_20(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS_24(m, t, x, ...) \
  m(t, x) TENSORDICT_PP_EXPAND(TENSORDICT_PP_PAIRS_22(m, __VA_ARGS__))
#define TENSORDICT_PP_PAIRS(m, ...)       \
  TENSORDICT_PP_EXPAND(TENSORDICT_PP_CAT( \
      TENSORDICT_PP_PAIRS_, TENSORDICT_PP_NARGS(__VA_ARGS__))(m, __VA_ARGS__))

#define TENSORDICT_TENSOR_FIELD_ENTRY_(name) \
  ::tensordict::detail::TensorClassField{#name, nullptr, nullptr, nullptr},
#define TENSORDICT_TENSOR_FIELD_ACCESSORS_(name)                       \
  [[nodiscard]] ::at::Tensor name() const {                            \
    return this->tensordict().get(tensordict_key_##name());            \
  }                                                                    \
  const tensordict_self& set_##name(const ::at::Tensor& value) const { \
    this->tensordict().set(tensordict_key_##name(), value);            \
    return static_cast<const tensordict_self&>(*this);                 \
  }                                                                    \
  static const ::tensordict::NestedKey& tensordict_key_##name() {      \
    static const ::tensordict::NestedKey key(#name);                   \
    return key;                                                        \
  }
#define TENSORDICT_CLASS_FIELD_ENTRY_(type, name) \
  ::tensordict::detail::TensorClassField{         \
      #name, &type::check, &type::append_python_types, &type::repr_of},
#define TENSORDICT_CLASS_FIELD_ACCESSORS_(type, name)                    \
  [[nodiscard]] type name() const {                                      \
    return type::wrap_unchecked(                                         \
        this->tensordict().get_tensordict(tensordict_key_##name()));     \
  }                                                                      \
  const tensordict_self& set_##name(const type& value) const {           \
    this->tensordict().set(tensordict_key_##name(), value.tensordict()); \
    return static_cast<const tensordict_self&>(*this);                   \
  }                                                                      \
  static const ::tensordict::NestedKey& tensordict_key_##name() {        \
    static const ::tensordict::NestedKey key(#name);                     \
    return key;                                                          \
  }
/// @endcond

/// Opens a tensor class's declarations: its name and constructors.
#define TENSORDICT_TENSORCLASS(ClassName)                  \
  using tensordict_self = ClassName;                       \
  using ::tensordict::TensorClass<ClassName>::TensorClass; \
  static const char* tensorclass_name() { return #ClassName; }

/// Declares the tensor fields `names...` (see the top of this file).
#define TENSORDICT_FIELDS(...)                                             \
  static const std::vector<::tensordict::detail::TensorClassField>&        \
  tensorclass_tensor_fields() {                                            \
    static const std::vector<::tensordict::detail::TensorClassField> f = { \
        TENSORDICT_PP_EACH(TENSORDICT_TENSOR_FIELD_ENTRY_, __VA_ARGS__)};  \
    return f;                                                              \
  }                                                                        \
  TENSORDICT_PP_EACH(TENSORDICT_TENSOR_FIELD_ACCESSORS_, __VA_ARGS__)

/// Declares fields of other tensor classes, as pairs `Type, name, ...`.
#define TENSORDICT_CLASS_FIELDS(...)                                       \
  static const std::vector<::tensordict::detail::TensorClassField>&        \
  tensorclass_class_fields() {                                             \
    static const std::vector<::tensordict::detail::TensorClassField> f = { \
        TENSORDICT_PP_PAIRS(TENSORDICT_CLASS_FIELD_ENTRY_, __VA_ARGS__)};  \
    return f;                                                              \
  }                                                                        \
  TENSORDICT_PP_PAIRS(TENSORDICT_CLASS_FIELD_ACCESSORS_, __VA_ARGS__)
