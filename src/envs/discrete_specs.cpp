// TorchRL 0.14's discrete tensor specs (tensordict/specs.h): Categorical,
// OneHot, Binary and MultiCategorical. The TensorSpec base is in specs.cpp.
//
// As there, each class follows `torchrl.data.tensor_specs`; where this file
// departs from it, the comment at the function says why.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "envs/specs_internal.h"
#include "tensordict/specs.h"

namespace tensordict {

using detail::check_spec_out;
using detail::check_spec_shape;
using detail::shape_str;
using detail::spec_checked_expand;

namespace {

std::string categorical_box_repr(int64_t n) {
  return "CategoricalBox(n=" + std::to_string(n) + ")";
}

void check_n(const char* what, int64_t n) {
  TORCH_CHECK_VALUE(n > 0, what, ": n must be positive, got ", n);
}

// The default shape `{n}`, or `shape` after checking that it ends with n.
std::vector<int64_t> last_dim_shape(const char* what, const char* n_name,
                                    int64_t n, std::vector<int64_t> shape) {
  if (shape.empty()) return {n};
  TORCH_CHECK_VALUE(shape.back() == n, what, ": the last dim of shape must be ",
                    n_name, " = ", n, ", got shape ", shape_str(shape));
  return shape;
}

// Rounds (floating values) and clamps into [0, n - 1] (TorchRL's
// Categorical._project), as int64 for bool values.
at::Tensor round_and_clamp(const at::Tensor& value, int64_t n) {
  at::Tensor v = value.scalar_type() == at::kBool ? value.to(at::kLong) : value;
  if (v.is_floating_point()) v = at::round(v);
  return at::clamp(v, 0, n - 1);
}

}  // namespace

// ---- Categorical --------------------------------------------------------------

Categorical::Categorical(int64_t n, std::vector<int64_t> shape,
                         at::ScalarType dtype, at::Device device)
    : TensorSpec(std::move(shape), dtype, device), n_(n) {
  check_n("Categorical", n);
  check_spec_shape("Categorical", shape_);
}

std::string Categorical::domain() const { return "discrete"; }

std::string Categorical::type_name() const { return "Categorical"; }

void Categorical::rand_(const at::Tensor& out,
                        c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  out.random_(0, n_, std::move(generator));
}

SpecPtr Categorical::expand(c10::IntArrayRef shape) const {
  return std::make_shared<const Categorical>(
      n_, spec_checked_expand(*this, shape), dtype_, device_);
}

SpecPtr Categorical::to(at::Device device) const {
  return std::make_shared<const Categorical>(n_, shape_, dtype_, device);
}

std::string Categorical::space_repr() const { return categorical_box_repr(n_); }

bool Categorical::values_in(const at::Tensor& value) const {
  return (value >= 0).all().item<bool>() && (value < n_).all().item<bool>();
}

at::Tensor Categorical::project_values(const at::Tensor& value) const {
  return round_and_clamp(value, n_);
}

bool Categorical::same_space(const TensorSpec& other) const {
  return n_ == static_cast<const Categorical&>(other).n_;
}

// ---- OneHot -------------------------------------------------------------------

OneHot::OneHot(int64_t n, std::vector<int64_t> shape, at::ScalarType dtype,
               at::Device device)
    : TensorSpec(std::move(shape), dtype, device), n_(n) {
  check_n("OneHot", n);
  check_spec_shape("OneHot", shape_);
  shape_ = last_dim_shape("OneHot", "n", n, std::move(shape_));
}

std::string OneHot::domain() const { return "discrete"; }

std::string OneHot::type_name() const { return "OneHot"; }

void OneHot::rand_(const at::Tensor& out,
                   c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  out.zero_();
  if (out.numel() == 0) return;
  if (out.device().is_cpu() && out.is_contiguous() &&
      (out.scalar_type() == at::kBool || out.scalar_type() == at::kByte)) {
    // One draw per vector, as `random_(0, n)` of an int64 index draws it
    // (a 32-bit draw modulo n), written by bytes: nothing allocated.
    auto* gen = at::get_generator_or_default<at::CPUGeneratorImpl>(
        generator, at::detail::getDefaultCPUGenerator());
    std::lock_guard<std::mutex> lock(gen->mutex_);
    auto* bytes = static_cast<uint8_t*>(out.data_ptr());
    for (int64_t v = 0, rows = out.numel() / n_; v < rows; ++v) {
      bytes[v * n_ + static_cast<int64_t>(gen->random() %
                                          static_cast<uint64_t>(n_))] = 1;
    }
    return;
  }
  // The index of the one per vector: one allocation.
  std::vector<int64_t> sizes = out.sizes().vec();
  sizes.back() = 1;
  at::Tensor index = at::empty(sizes, out.options().dtype(at::kLong));
  index.random_(0, n_, std::move(generator));
  out.scatter_(-1, index, 1);
}

SpecPtr OneHot::expand(c10::IntArrayRef shape) const {
  std::vector<int64_t> s = spec_checked_expand(*this, shape);
  const int64_t n = s.back();  // TorchRL: n=shape[-1]
  return std::make_shared<const OneHot>(n, std::move(s), dtype_, device_);
}

SpecPtr OneHot::to(at::Device device) const {
  return std::make_shared<const OneHot>(n_, shape_, dtype_, device);
}

std::string OneHot::space_repr() const { return categorical_box_repr(n_); }

bool OneHot::values_in(const at::Tensor& value) const {
  // TorchRL: the entries of each vector sum to 1.
  return (value.sum(-1) == 1).all().item<bool>();
}

at::Tensor OneHot::project_values(const at::Tensor& value) const {
  // The one-hot vector of the argmax. (TorchRL samples the index from the
  // vector's entries as weights, torch.multinomial, with the global
  // generator; it fails on a vector of zeros or negative entries.)
  const at::Tensor v = value.is_floating_point() ? value : value.to(at::kLong);
  return at::one_hot(v.argmax(-1), n_);
}

bool OneHot::same_space(const TensorSpec& other) const {
  return n_ == static_cast<const OneHot&>(other).n_;
}

// ---- Binary -------------------------------------------------------------------

Binary::Binary(int64_t n, std::vector<int64_t> shape, at::ScalarType dtype,
               at::Device device)
    : TensorSpec(std::move(shape), dtype, device), n_(n) {
  check_n("Binary", n);
  check_spec_shape("Binary", shape_);
  shape_ = last_dim_shape("Binary", "n", n, std::move(shape_));
}

std::string Binary::domain() const { return "discrete"; }

std::string Binary::type_name() const { return "Binary"; }

void Binary::rand_(const at::Tensor& out,
                   c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  out.random_(0, 2, std::move(generator));
}

SpecPtr Binary::expand(c10::IntArrayRef shape) const {
  std::vector<int64_t> s = spec_checked_expand(*this, shape);
  const int64_t n = s.back();  // TorchRL: n=shape[-1]
  return std::make_shared<const Binary>(n, std::move(s), dtype_, device_);
}

SpecPtr Binary::to(at::Device device) const {
  return std::make_shared<const Binary>(n_, shape_, dtype_, device);
}

// TorchRL's Binary is a Categorical of n = 2.
std::string Binary::space_repr() const { return categorical_box_repr(2); }

bool Binary::values_in(const at::Tensor& value) const {
  return (value >= 0).all().item<bool>() && (value < 2).all().item<bool>();
}

at::Tensor Binary::project_values(const at::Tensor& value) const {
  return round_and_clamp(value, 2);
}

bool Binary::same_space(const TensorSpec& other) const {
  return n_ == static_cast<const Binary&>(other).n_;
}

// ---- MultiCategorical ---------------------------------------------------------

MultiCategorical::MultiCategorical(std::vector<int64_t> nvec,
                                   std::vector<int64_t> shape,
                                   at::ScalarType dtype, at::Device device)
    : TensorSpec(std::move(shape), dtype, device), nvec_(std::move(nvec)) {
  TORCH_CHECK_VALUE(!nvec_.empty(), "MultiCategorical: nvec must not be empty");
  for (const int64_t n : nvec_) {
    TORCH_CHECK_VALUE(n > 0,
                      "MultiCategorical: every entry of nvec must be positive, "
                      "got nvec ",
                      shape_str(nvec_));
  }
  check_spec_shape("MultiCategorical", shape_);
  shape_ =
      last_dim_shape("MultiCategorical", "nvec.size()",
                     static_cast<int64_t>(nvec_.size()), std::move(shape_));
}

std::string MultiCategorical::domain() const { return "discrete"; }

std::string MultiCategorical::type_name() const { return "MultiCategorical"; }

void MultiCategorical::rand_(const at::Tensor& out,
                             c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  if (out.numel() == 0) return;
  if (std::all_of(nvec_.begin(), nvec_.end(),
                  [&](int64_t n) { return n == nvec_[0]; })) {
    out.random_(0, nvec_[0], std::move(generator));
    return;
  }
  for (size_t i = 0; i < nvec_.size(); ++i) {
    out.select(-1, static_cast<int64_t>(i)).random_(0, nvec_[i], generator);
  }
}

SpecPtr MultiCategorical::expand(c10::IntArrayRef shape) const {
  return std::make_shared<const MultiCategorical>(
      nvec_, spec_checked_expand(*this, shape), dtype_, device_);
}

SpecPtr MultiCategorical::to(at::Device device) const {
  return std::make_shared<const MultiCategorical>(nvec_, shape_, dtype_,
                                                  device);
}

namespace {

// TorchRL's BoxList.from_nvec of nvec expanded to the spec's shape: nested
// BoxLists over the dims (unbind(-1) first), a CategoricalBox per element.
std::string box_list_repr(c10::IntArrayRef dims, int64_t n) {
  if (dims.empty()) return categorical_box_repr(n);
  const std::string inner = box_list_repr(dims.slice(0, dims.size() - 1), n);
  std::string out = "BoxList(boxes=[";
  for (int64_t i = 0; i < dims.back(); ++i) {
    if (i) out += ", ";
    out += inner;
  }
  return out + "])";
}

}  // namespace

std::string MultiCategorical::space_repr() const {
  const c10::IntArrayRef batch =
      c10::IntArrayRef(shape_).slice(0, shape_.size() - 1);
  std::string out = "BoxList(boxes=[";
  for (size_t i = 0; i < nvec_.size(); ++i) {
    if (i) out += ", ";
    out += box_list_repr(batch, nvec_[i]);
  }
  return out + "])";
}

bool MultiCategorical::values_in(const at::Tensor& value) const {
  const at::Tensor nvec =
      at::tensor(nvec_, at::TensorOptions().dtype(at::kLong))
          .to(value.device());
  return (value >= 0).all().item<bool>() && (value < nvec).all().item<bool>();
}

at::Tensor MultiCategorical::project_values(const at::Tensor& value) const {
  // Rounded, then clamped into [0, nvec[i] - 1]. (TorchRL clamps from above
  // only: a negative value stays out of the space.)
  at::Tensor v = value.scalar_type() == at::kBool ? value.to(at::kLong) : value;
  if (v.is_floating_point()) v = at::round(v);
  const at::Tensor top = at::tensor(nvec_, at::TensorOptions().dtype(at::kLong))
                             .to(value.device()) -
                         1;
  return at::minimum(v.clamp_min(0), top);
}

bool MultiCategorical::same_space(const TensorSpec& other) const {
  return nvec_ == static_cast<const MultiCategorical&>(other).nvec_;
}

}  // namespace tensordict
