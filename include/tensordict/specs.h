// tensordict/specs.h — TorchRL's tensor specs: what an environment's
// tensors hold (shape, dtype, device, and the space of valid values).
//
// A spec describes a tensor without holding one. Environments (envs.h) read
// their specs to preallocate their data, to draw random actions and to check
// what a step returned. The classes and their behaviour are TorchRL 0.14's
// (`torchrl.data.tensor_specs`):
//
//   Unbounded(shape, dtype)          any value of the dtype
//   Bounded(low, high, shape, dtype) low <= value <= high, element-wise
//   Categorical(n, shape, dtype)     an integer in [0, n)
//   OneHot(n, shape, dtype)          a one-hot vector of n entries (last dim n)
//   Binary(n, shape, dtype)          n values in {0, 1} (last dim n)
//   MultiCategorical(nvec, shape)    integers in [0, nvec[i]) along the last dim
//   Composite({{key, spec}, ...}, shape)
//                                    a tree of specs keyed like a TensorDict,
//                                    with a batch shape every entry starts with
//
// A leaf spec's `shape` is the whole shape of the tensor it describes, batch
// dims included: in a `Composite` of shape [16], an observation of 4 floats
// per env is `Unbounded({16, 4})`. `rand(batch)` and `zero(batch)` return a
// tensor of shape `[*batch, *shape]`; a `Composite`'s return a TensorDict of
// batch size `[*batch, *shape]`. Specs are immutable values except
// `Composite`, which is edited with `set` and `erase` like a dict; a
// `Composite` copies its sub-composites when copied and shares its leaves
// (which never change).
//
// Printing (`repr()`, `operator<<`) is TorchRL 0.14's `repr`, byte for byte:
// a `Bounded` spec of floats prints as `BoundedContinuous(...)`, of integers
// as `BoundedDiscrete(...)`, as Python's metaclass renames them.
//
// Example:
// ```
//   Composite spec({{"observation", Unbounded({4})},
//                   {"action", Categorical(2, {})}});
//   TensorDict td = spec.rand({16});   // batch size [16]
//   spec.is_in(td);                    // true
// ```
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

class TensorSpec;
/// A shared, immutable leaf spec.
using SpecPtr = std::shared_ptr<const TensorSpec>;

/// The base of the leaf specs (every class above but `Composite`).
class TensorSpec {
 public:
  virtual ~TensorSpec() = default;

  /// The whole shape of the tensor described, batch dims included.
  [[nodiscard]] c10::IntArrayRef shape() const { return shape_; }
  /// The dtype of the tensor described.
  [[nodiscard]] at::ScalarType dtype() const { return dtype_; }
  /// The device of the tensor described.
  [[nodiscard]] at::Device device() const { return device_; }
  /// "continuous" or "discrete", as TorchRL's `domain`.
  [[nodiscard]] virtual std::string domain() const = 0;
  /// TorchRL's class name as printed ("BoundedContinuous", "Categorical").
  [[nodiscard]] virtual std::string type_name() const = 0;

  /// A value drawn uniformly from the space (an `Unbounded` float spec
  /// draws from a standard normal, as TorchRL), of shape
  /// `[*batch, *shape()]`, with `generator` when given.
  [[nodiscard]] at::Tensor rand(
      c10::IntArrayRef batch = {},
      c10::optional<at::Generator> generator = c10::nullopt) const;
  /// `rand` into `out`, in place: `out` must have the spec's dtype and
  /// device and a shape that ends with `shape()`. Allocates nothing for a
  /// CPU `out` of the spec's dtype.
  virtual void rand_(const at::Tensor& out,
                     c10::optional<at::Generator> generator) const = 0;
  /// Zeros of shape `[*batch, *shape()]` (TorchRL's `zero`).
  [[nodiscard]] at::Tensor zero(c10::IntArrayRef batch = {}) const;
  /// True when `value` has the spec's dtype, a shape ending with `shape()`
  /// and values in the space.
  [[nodiscard]] bool is_in(const at::Tensor& value) const;
  /// `value` mapped into the space (clamped, rounded, one-hot of its
  /// argmax), a new tensor; `value` itself when it is already in it.
  [[nodiscard]] at::Tensor project(const at::Tensor& value) const;

  /// The spec with shape `shape`, which must end with `shape()` (or
  /// broadcast to it, as `Tensor::expand`): a batch of this spec.
  [[nodiscard]] virtual SpecPtr expand(c10::IntArrayRef shape) const = 0;
  /// The spec on `device`.
  [[nodiscard]] virtual SpecPtr to(at::Device device) const = 0;

  /// TorchRL 0.14's repr.
  [[nodiscard]] std::string repr() const;
  /// Same class, shape, dtype, device and space.
  bool operator==(const TensorSpec& other) const;
  /// Not `==`.
  bool operator!=(const TensorSpec& other) const { return !(*this == other); }

 protected:
  /// A spec of `shape`, `dtype` and `device` (for the subclasses).
  TensorSpec(std::vector<int64_t> shape, at::ScalarType dtype,
             at::Device device);
  /// The `space=...` part of the repr.
  [[nodiscard]] virtual std::string space_repr() const = 0;
  /// The values (of a tensor of the right dtype and shape) are in the space.
  [[nodiscard]] virtual bool values_in(const at::Tensor& value) const = 0;
  /// The space's projection of a tensor of the right shape, in any dtype
  /// (`project` casts the result to the spec's).
  [[nodiscard]] virtual at::Tensor project_values(
      const at::Tensor& value) const = 0;
  /// The spaces are equal (`other` is of the same class).
  [[nodiscard]] virtual bool same_space(const TensorSpec& other) const = 0;
  /// The shape of `value` ends with `shape()`; returns the batch dims before.
  [[nodiscard]] bool has_spec_shape(const at::Tensor& value) const;

  /// The whole shape (`shape()`).
  std::vector<int64_t> shape_;
  /// The dtype (`dtype()`).
  at::ScalarType dtype_;
  /// The device (`device()`).
  at::Device device_;
};

/// Any value of the dtype (TorchRL's `Unbounded`: `UnboundedContinuous`
/// for floating dtypes, `UnboundedDiscrete` for the others).
class Unbounded final : public TensorSpec {
 public:
  /// Any value of `dtype`, of shape `shape`, on `device`.
  explicit Unbounded(std::vector<int64_t> shape = {},
                     at::ScalarType dtype = at::kFloat,
                     at::Device device = at::kCPU);
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;
};

/// Values between `low` and `high`, element-wise (TorchRL's `Bounded`:
/// `BoundedContinuous` for floating dtypes, `BoundedDiscrete` for the
/// others). `low` and `high` broadcast to `shape`; `low <= high` is checked.
class Bounded final : public TensorSpec {
 public:
  /// Values in [`low`, `high`] (the same bounds for every element).
  Bounded(double low, double high, std::vector<int64_t> shape = {},
          at::ScalarType dtype = at::kFloat, at::Device device = at::kCPU);
  /// Values between `low` and `high`, which broadcast to `shape`.
  Bounded(const at::Tensor& low, const at::Tensor& high,
          std::vector<int64_t> shape, at::ScalarType dtype = at::kFloat,
          at::Device device = at::kCPU);
  /// The bounds, of shape `shape()`.
  [[nodiscard]] const at::Tensor& low() const { return low_; }
  /// The upper bound, of shape `shape()`.
  [[nodiscard]] const at::Tensor& high() const { return high_; }
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;

 private:
  at::Tensor low_, high_;
  // Every element has the same bounds, `low_scalar_` and `high_scalar_`: an
  // integer `rand_` is then one `random_` call, allocating nothing.
  bool uniform_ = false;
  at::Scalar low_scalar_, high_scalar_;
};

/// An integer in [0, n) per element (TorchRL's `Categorical`; int64 by
/// default, bool for n = 2 done flags).
class Categorical : public TensorSpec {
 public:
  /// Integers in [0, `n`), of shape `shape`.
  Categorical(int64_t n, std::vector<int64_t> shape = {},
              at::ScalarType dtype = at::kLong, at::Device device = at::kCPU);
  /// The number of values (categories, entries) of an element.
  [[nodiscard]] int64_t n() const { return n_; }
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;

 private:
  int64_t n_;
};

/// One-hot vectors of `n` entries (TorchRL's `OneHot`): the last dim of
/// `shape` is `n` (the default shape is `{n}`), exactly one entry is 1.
class OneHot final : public TensorSpec {
 public:
  /// One-hot vectors of `n` entries (`shape` ends with `n`; `{n}` when empty).
  explicit OneHot(int64_t n, std::vector<int64_t> shape = {},
                  at::ScalarType dtype = at::kBool,
                  at::Device device = at::kCPU);
  /// The number of values (categories, entries) of an element.
  [[nodiscard]] int64_t n() const { return n_; }
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;

 private:
  int64_t n_;
};

/// `n` values in {0, 1} (TorchRL's `Binary`): the last dim of `shape` is `n`
/// (the default shape is `{n}`); int8 by default.
class Binary final : public TensorSpec {
 public:
  /// `n` values in {0, 1} (`shape` ends with `n`; `{n}` when empty).
  explicit Binary(int64_t n, std::vector<int64_t> shape = {},
                  at::ScalarType dtype = at::kChar,
                  at::Device device = at::kCPU);
  /// The number of values (categories, entries) of an element.
  [[nodiscard]] int64_t n() const { return n_; }
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;

 private:
  int64_t n_;
};

/// Integers in [0, nvec[i]) along the last dim (TorchRL's
/// `MultiCategorical`): the last dim of `shape` is `nvec.size()` (the default
/// shape is `{nvec.size()}`).
class MultiCategorical final : public TensorSpec {
 public:
  /// Integers in [0, `nvec[i]`) along the last dim (`shape` ends with
  /// `nvec.size()`; `{nvec.size()}` when empty).
  explicit MultiCategorical(std::vector<int64_t> nvec,
                            std::vector<int64_t> shape = {},
                            at::ScalarType dtype = at::kLong,
                            at::Device device = at::kCPU);
  /// The number of categories of each entry of the last dim.
  [[nodiscard]] const std::vector<int64_t>& nvec() const { return nvec_; }
  [[nodiscard]] std::string domain() const override;
  [[nodiscard]] std::string type_name() const override;
  void rand_(const at::Tensor& out,
             c10::optional<at::Generator> generator) const override;
  [[nodiscard]] SpecPtr expand(c10::IntArrayRef shape) const override;
  [[nodiscard]] SpecPtr to(at::Device device) const override;

 protected:
  [[nodiscard]] std::string space_repr() const override;
  [[nodiscard]] bool values_in(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor project_values(
      const at::Tensor& value) const override;
  [[nodiscard]] bool same_space(const TensorSpec& other) const override;

 private:
  std::vector<int64_t> nvec_;
};

class Composite;

/// An entry of a `Composite`: a leaf spec or a sub-composite. Made
/// implicitly from any leaf spec value, a `SpecPtr` or a `Composite`.
class SpecEntry {
 public:
  /// A leaf spec value (`Unbounded({4})`), copied into a shared one.
  template <typename S, std::enable_if_t<std::is_base_of_v<TensorSpec, S>,
                                         int> = 0>
  SpecEntry(S spec)  // NOLINT(google-explicit-constructor)
      : leaf_(std::make_shared<const S>(std::move(spec))) {}
  /// A shared leaf spec.
  SpecEntry(SpecPtr spec);  // NOLINT(google-explicit-constructor)
  /// A sub-composite (copied).
  SpecEntry(const Composite& spec);  // NOLINT(google-explicit-constructor)
  /// Copies a sub-composite, shares a leaf.
  SpecEntry(const SpecEntry& other);
  /// Moves.
  SpecEntry(SpecEntry&& other) noexcept = default;
  /// Copies a sub-composite, shares a leaf.
  SpecEntry& operator=(const SpecEntry& other);
  /// Moves.
  SpecEntry& operator=(SpecEntry&& other) noexcept = default;
  ~SpecEntry();

  /// Whether the entry is a sub-composite.
  [[nodiscard]] bool is_composite() const noexcept { return leaf_ == nullptr; }
  /// The leaf; throws for a sub-composite.
  [[nodiscard]] const TensorSpec& leaf() const;
  /// The leaf, shared; throws for a sub-composite.
  [[nodiscard]] const SpecPtr& leaf_ptr() const;
  /// The sub-composite; throws for a leaf.
  [[nodiscard]] const Composite& composite() const;
  /// The sub-composite, to edit; throws for a leaf.
  [[nodiscard]] Composite& composite();

 private:
  SpecPtr leaf_;
  std::unique_ptr<Composite> composite_;
};

/// A tree of specs keyed like a TensorDict (TorchRL's `Composite`), with a
/// batch shape that every entry's shape starts with and an optional device.
/// Entries keep their insertion order. `rand`, `zero` and `project` return
/// TensorDicts of batch size `[*batch, *shape()]`.
class Composite {
 public:
  /// An empty spec with shape [].
  Composite();
  /// An empty spec with `shape`.
  explicit Composite(std::vector<int64_t> shape,
                     c10::optional<at::Device> device = c10::nullopt);
  /// The same, for a braced shape: `Composite({16})` would otherwise be
  /// ambiguous with the constructor below.
  explicit Composite(std::initializer_list<int64_t> shape,
                     c10::optional<at::Device> device = c10::nullopt)
      : Composite(std::vector<int64_t>(shape), device) {}
  /// `specs` in order (nested keys create sub-composites of this shape).
  /// Throws, naming the key, when an entry's shape does not start with
  /// `shape` or lives on another device than `device`.
  Composite(std::vector<std::pair<NestedKey, SpecEntry>> specs,
            std::vector<int64_t> shape = {},
            c10::optional<at::Device> device = c10::nullopt);

  /// The batch shape every entry starts with.
  [[nodiscard]] c10::IntArrayRef shape() const { return shape_; }
  /// The device of every entry, if one was given.
  [[nodiscard]] c10::optional<at::Device> device() const { return device_; }
  /// The number of top-level entries.
  [[nodiscard]] size_t size() const { return entries_.size(); }
  /// Whether there is no entry.
  [[nodiscard]] bool empty() const { return entries_.empty(); }
  /// Whether `key` (nested or not) is an entry.
  [[nodiscard]] bool contains(const NestedKey& key) const;
  /// The keys in order; with `include_nested`, the sub-composites' keys too
  /// (depth first, each before the sub-composite's own key, as TorchRL),
  /// and with `leaves_only` only the leaves' keys.
  [[nodiscard]] std::vector<NestedKey> keys(bool include_nested = false,
                                            bool leaves_only = false) const;
  /// The entry at `key`; throws a KeyError naming it when missing.
  [[nodiscard]] const SpecEntry& get(const NestedKey& key) const;
  /// The leaf spec at `key`; throws when missing or a sub-composite.
  [[nodiscard]] const TensorSpec& leaf(const NestedKey& key) const;
  /// Sets `key` (creating sub-composites of this shape on the way); returns
  /// `*this`. Throws, changing nothing, when the shape does not start with
  /// `shape()`.
  Composite& set(const NestedKey& key, SpecEntry spec);
  /// Removes `key`; throws a KeyError when missing.
  void erase(const NestedKey& key);

  /// Random values of every leaf, batch size `[*batch, *shape()]`.
  [[nodiscard]] TensorDict rand(
      c10::IntArrayRef batch = {},
      c10::optional<at::Generator> generator = c10::nullopt) const;
  /// `rand` into `out`'s leaves (every leaf of the spec must be in `out`),
  /// in place.
  void rand_(const TensorDict& out,
             c10::optional<at::Generator> generator = c10::nullopt) const;
  /// Zeros of every leaf, batch size `[*batch, *shape()]`.
  [[nodiscard]] TensorDict zero(c10::IntArrayRef batch = {}) const;
  /// Every leaf of the spec is in `value` and `is_in` its spec (keys of
  /// `value` that the spec lacks are ignored, as TorchRL).
  [[nodiscard]] bool is_in(const TensorDict& value) const;
  /// `value` with every leaf the spec has projected; a new dict.
  [[nodiscard]] TensorDict project(const TensorDict& value) const;
  /// Every entry expanded to `[*shape, ...]`; `shape` must end with
  /// `shape()`.
  [[nodiscard]] Composite expand(c10::IntArrayRef shape) const;
  /// Every entry on `device`.
  [[nodiscard]] Composite to(at::Device device) const;

  /// TorchRL 0.14's repr.
  [[nodiscard]] std::string repr() const;
  /// Same keys (in any order, as TorchRL), shape, device and entries.
  bool operator==(const Composite& other) const;
  /// Not `==`.
  bool operator!=(const Composite& other) const { return !(*this == other); }

  /// The entries in order.
  [[nodiscard]] const std::vector<std::pair<std::string, SpecEntry>>& entries()
      const {
    return entries_;
  }

 private:
  std::vector<std::pair<std::string, SpecEntry>> entries_;
  std::vector<int64_t> shape_;
  c10::optional<at::Device> device_;
};

std::ostream& operator<<(std::ostream& os, const TensorSpec& spec);
std::ostream& operator<<(std::ostream& os, const Composite& spec);

}  // namespace tensordict
