// TorchRL 0.14's continuous tensor specs (tensordict/specs.h): the
// TensorSpec base (rand, zero, is_in, project, repr, ==), Unbounded and
// Bounded, and the helpers every spec file shares (specs_internal.h). The
// discrete specs live in discrete_specs.cpp, Composite in composite.cpp.
//
// Each class follows `torchrl.data.tensor_specs` (its constructor checks,
// `is_in`'s shape rule, `expand`'s rule, the repr byte for byte); where this
// file departs from it, the comment at the function says why.
#include "tensordict/specs.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/names.h"
#include "core/non_tensor.h"
#include "envs/specs_internal.h"

namespace tensordict {

using detail::check_spec_out;
using detail::check_spec_shape;
using detail::device_name;
using detail::dtype_name;
using detail::ends_with_broadcast;
using detail::shape_str;
using detail::spec_checked_expand;
using detail::spec_device;
using detail::torch_size_str;

// ---- Shared helpers ----------------------------------------------------------

namespace detail {

std::string torch_size_str(c10::IntArrayRef shape) {
  return "torch.Size(" + shape_str(shape) + ")";
}

at::Device spec_device(at::Device device) {
  // TorchRL's _make_ordinal_device: "cuda" is "cuda:0".
  if (device.is_cuda() && !device.has_index()) return at::Device(at::kCUDA, 0);
  return device;
}

void check_spec_shape(const std::string& what, c10::IntArrayRef shape) {
  for (const int64_t d : shape) {
    TORCH_CHECK_VALUE(d >= 0, what, ": the dims of a shape must be >= 0, got ",
                      shape_str(shape));
  }
}

bool ends_with_broadcast(c10::IntArrayRef shape, c10::IntArrayRef tail) {
  if (shape.size() < tail.size()) return false;
  const size_t offset = shape.size() - tail.size();
  for (size_t i = 0; i < tail.size(); ++i) {
    if (tail[i] != 1 && shape[offset + i] != tail[i]) return false;
  }
  return true;
}

void check_spec_out(const TensorSpec& spec, const at::Tensor& out,
                    const std::string& where) {
  TORCH_CHECK_VALUE(out.defined(), where, ": out is an undefined tensor");
  TORCH_CHECK_TYPE(out.scalar_type() == spec.dtype(), where,
                   ": expected out of dtype ", dtype_name(spec.dtype()),
                   ", got ", dtype_name(out.scalar_type()));
  TORCH_CHECK_VALUE(out.device() == spec.device(), where, ": expected out on ",
                    device_name(spec.device()), ", got ",
                    device_name(out.device()));
  const c10::IntArrayRef s = spec.shape();
  const c10::IntArrayRef o = out.sizes();
  TORCH_CHECK_VALUE(o.size() >= s.size() && o.slice(o.size() - s.size()) == s,
                    where, ": expected out of a shape ending with ",
                    shape_str(s), ", got ", shape_str(o));
}

std::vector<int64_t> spec_checked_expand(const TensorSpec& spec,
                                         c10::IntArrayRef shape) {
  const std::string what = spec.type_name() + ".expand";
  check_spec_shape(what, shape);
  TORCH_CHECK_VALUE(ends_with_broadcast(shape, spec.shape()), what,
                    ": expected a shape ending with ", shape_str(spec.shape()),
                    " (where a dim of size 1 may take any size), got ",
                    shape_str(shape));
  return shape.vec();
}

}  // namespace detail

namespace {

bool is_float(at::ScalarType dtype) { return at::isFloatingType(dtype); }

at::TensorOptions options(at::ScalarType dtype, at::Device device) {
  return at::TensorOptions().dtype(dtype).device(device);
}

std::vector<int64_t> concat(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// TorchRL's ContinuousBox repr (low and high have the spec's shape, dtype
// and device; TorchRL's getters return contiguous copies).
std::string continuous_box_repr(c10::IntArrayRef shape, at::Device device,
                                at::ScalarType dtype) {
  const std::string tensor = "=Tensor(shape=" + torch_size_str(shape) +
                             ", device=" + device_name(device) +
                             ", dtype=" + dtype_name(dtype) +
                             ", contiguous=True)";
  return "ContinuousBox(" + detail::indent("\nlow" + tensor, 4) + "," +
         detail::indent("\nhigh" + tensor, 4) + ")";
}

std::string scalar_str(const at::Scalar& s) {
  if (s.isFloatingPoint()) return detail::py_float_repr(s.toDouble());
  if (s.isBoolean()) return s.toBool() ? "True" : "False";
  return std::to_string(s.toLong());
}

}  // namespace

// ---- TensorSpec ---------------------------------------------------------------

TensorSpec::TensorSpec(std::vector<int64_t> shape, at::ScalarType dtype,
                       at::Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(spec_device(device)) {}

at::Tensor TensorSpec::rand(c10::IntArrayRef batch,
                            c10::optional<at::Generator> generator) const {
  check_spec_shape(type_name() + ".rand: batch", batch);
  at::Tensor out = at::empty(concat(batch, shape_), options(dtype_, device_));
  rand_(out, std::move(generator));
  return out;
}

at::Tensor TensorSpec::zero(c10::IntArrayRef batch) const {
  check_spec_shape(type_name() + ".zero: batch", batch);
  return at::zeros(concat(batch, shape_), options(dtype_, device_));
}

bool TensorSpec::has_spec_shape(const at::Tensor& value) const {
  // TorchRL: broadcast_shapes(spec.shape, value.shape) == value.shape.
  return ends_with_broadcast(value.sizes(), shape_);
}

bool TensorSpec::is_in(const at::Tensor& value) const {
  if (!value.defined() || value.scalar_type() != dtype_ ||
      !has_spec_shape(value)) {
    return false;
  }
  return values_in(value);
}

at::Tensor TensorSpec::project(const at::Tensor& value) const {
  TORCH_CHECK_VALUE(value.defined(), type_name(),
                    ".project: value is an undefined tensor");
  if (is_in(value)) return value;
  TORCH_CHECK_VALUE(has_spec_shape(value), type_name(),
                    ".project: expected a value of a shape ending with ",
                    shape_str(shape_), ", got ", shape_str(value.sizes()));
  // TorchRL leaves the projection in the value's dtype (a float value of a
  // Categorical stays float); here it has the spec's, so that it is in.
  at::Tensor out = project_values(value);
  return out.scalar_type() == dtype_ ? out : out.to(dtype_);
}

std::string TensorSpec::repr() const {
  std::string out = type_name() + "(\n";
  out += detail::indent("shape=" + torch_size_str(shape_), 4) + ",\n";
  out += detail::indent("space=" + space_repr(), 4) + ",\n";
  out += detail::indent("device=" + device_name(device_), 4) + ",\n";
  out += detail::indent("dtype=" + dtype_name(dtype_), 4) + ",\n";
  out += detail::indent("domain=" + domain(), 4) + ")";
  return out;
}

bool TensorSpec::operator==(const TensorSpec& other) const {
  return typeid(*this) == typeid(other) && shape() == other.shape() &&
         dtype_ == other.dtype_ && device_ == other.device_ &&
         same_space(other);
}

std::ostream& operator<<(std::ostream& os, const TensorSpec& spec) {
  return os << spec.repr();
}

// ---- Unbounded ----------------------------------------------------------------

Unbounded::Unbounded(std::vector<int64_t> shape, at::ScalarType dtype,
                     at::Device device)
    : TensorSpec(std::move(shape), dtype, device) {
  check_spec_shape("Unbounded", shape_);
}

std::string Unbounded::domain() const {
  return is_float(dtype_) ? "continuous" : "discrete";
}

std::string Unbounded::type_name() const {
  return is_float(dtype_) ? "UnboundedContinuous" : "UnboundedDiscrete";
}

void Unbounded::rand_(const at::Tensor& out,
                      c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  // TorchRL: randn for floating dtypes, random_() (any value of the dtype
  // from 0 up) for the others.
  if (is_float(dtype_)) {
    out.normal_(0, 1, std::move(generator));
  } else {
    out.random_(std::move(generator));
  }
}

SpecPtr Unbounded::expand(c10::IntArrayRef shape) const {
  return std::make_shared<const Unbounded>(spec_checked_expand(*this, shape),
                                           dtype_, device_);
}

SpecPtr Unbounded::to(at::Device device) const {
  return std::make_shared<const Unbounded>(shape_, dtype_, device);
}

std::string Unbounded::space_repr() const {
  return continuous_box_repr(shape_, device_, dtype_);
}

bool Unbounded::values_in(const at::Tensor& /*value*/) const { return true; }

at::Tensor Unbounded::project_values(const at::Tensor& value) const {
  return value;  // only its dtype is wrong: TensorSpec::project casts it
}

bool Unbounded::same_space(const TensorSpec& /*other*/) const { return true; }

// ---- Bounded ------------------------------------------------------------------

Bounded::Bounded(double low, double high, std::vector<int64_t> shape,
                 at::ScalarType dtype, at::Device device)
    // scalar_tensor checks that the values fit the dtype, as torch.tensor
    // does.
    : Bounded(at::scalar_tensor(low, at::TensorOptions().dtype(dtype)),
              at::scalar_tensor(high, at::TensorOptions().dtype(dtype)),
              std::move(shape), dtype, device) {}

Bounded::Bounded(const at::Tensor& low, const at::Tensor& high,
                 std::vector<int64_t> shape, at::ScalarType dtype,
                 at::Device device)
    : TensorSpec(std::move(shape), dtype, device) {
  check_spec_shape("Bounded", shape_);
  TORCH_CHECK_VALUE(low.defined() && high.defined(),
                    "Bounded: low and high must be defined tensors");
  const auto check_bound = [&](const char* name, const at::Tensor& bound) {
    TORCH_CHECK_VALUE(ends_with_broadcast(shape_, bound.sizes()),
                      "Bounded: ", name, " of shape ", shape_str(bound.sizes()),
                      " does not broadcast to the spec's shape ",
                      shape_str(shape_));
  };
  check_bound("low", low);
  check_bound("high", high);
  // Copies of their own (the caller's tensors may change), contiguous.
  low_ = low.to(device_, dtype_)
             .expand(shape_)
             .clone(at::MemoryFormat::Contiguous);
  high_ = high.to(device_, dtype_)
              .expand(shape_)
              .clone(at::MemoryFormat::Contiguous);
  const int64_t numel = low_.numel();
  if (numel == 0) {
    uniform_ = true;
    return;
  }
  low_scalar_ = low_.reshape(-1)[0].item();
  high_scalar_ = high_.reshape(-1)[0].item();
  uniform_ = at::equal(low_, at::full_like(low_, low_scalar_)) &&
             at::equal(high_, at::full_like(high_, high_scalar_));
  const int64_t above = (low_ > high_).sum().item<int64_t>();
  if (above > 0) {
    TORCH_CHECK_VALUE(!uniform_, "Bounded: low (", scalar_str(low_scalar_),
                      ") is greater than high (", scalar_str(high_scalar_),
                      ")");
    TORCH_CHECK_VALUE(false, "Bounded: low is greater than high at ", above,
                      " of ", numel, " elements");
  }
}

std::string Bounded::domain() const {
  return is_float(dtype_) ? "continuous" : "discrete";
}

std::string Bounded::type_name() const {
  return is_float(dtype_) ? "BoundedContinuous" : "BoundedDiscrete";
}

void Bounded::rand_(const at::Tensor& out,
                    c10::optional<at::Generator> generator) const {
  check_spec_out(*this, out, type_name() + ".rand_");
  if (out.numel() == 0) return;
  if (is_float(dtype_)) {
    // TorchRL: uniform in [0, 1), scaled to [low, high), clamped to the
    // bounds. lerp writes low + u * (high - low) over u in place.
    at::Tensor o = out;
    o.uniform_(0, 1, std::move(generator));
    at::lerp_out(o, low_, high_, o);
    o.clamp_(low_, high_);
    return;
  }
  if (uniform_) {
    // Every integer of [low, high] alike. (TorchRL truncates a float draw of
    // [low, high), so that it never draws `high` when low >= 0.)
    const int64_t lo = low_scalar_.toLong();
    const int64_t hi = high_scalar_.toLong();
    if (hi == std::numeric_limits<int64_t>::max()) {
      out.random_(lo, c10::nullopt, std::move(generator));
    } else {
      out.random_(lo, hi + 1, std::move(generator));
    }
    return;
  }
  // Per-element integer bounds: floor(low + u * (high - low + 1)) from a
  // double draw, the one temporary.
  const at::Tensor lo = low_.to(at::kDouble);
  const at::Tensor hi = high_.to(at::kDouble);
  at::Tensor u = at::empty(out.sizes(), out.options().dtype(at::kDouble));
  u.uniform_(0, 1, std::move(generator));
  u.mul_(hi - lo + 1).add_(lo).floor_().clamp_(lo, hi);
  out.copy_(u);
}

SpecPtr Bounded::expand(c10::IntArrayRef shape) const {
  std::vector<int64_t> s = spec_checked_expand(*this, shape);
  return std::make_shared<const Bounded>(low_.expand(s), high_.expand(s), s,
                                         dtype_, device_);
}

SpecPtr Bounded::to(at::Device device) const {
  return std::make_shared<const Bounded>(low_, high_, shape_, dtype_, device);
}

std::string Bounded::space_repr() const {
  return continuous_box_repr(shape_, device_, dtype_);
}

bool Bounded::values_in(const at::Tensor& value) const {
  const at::Tensor lo = low_.to(value.device());
  const at::Tensor hi = high_.to(value.device());
  return (value >= lo).all().item<bool>() && (value <= hi).all().item<bool>();
}

at::Tensor Bounded::project_values(const at::Tensor& value) const {
  // TorchRL: clamp to the bounds (a discrete spec's float value is not
  // rounded: the cast to the dtype truncates it).
  at::Tensor v = value.scalar_type() == at::kBool ? value.to(dtype_) : value;
  if (dtype_ == at::kBool) return v;
  return at::clamp(v, low_.to(value.device()), high_.to(value.device()));
}

bool Bounded::same_space(const TensorSpec& other) const {
  const auto& o = static_cast<const Bounded&>(other);
  // TorchRL's ContinuousBox.__eq__: torch.isclose for floating bounds.
  if (is_float(dtype_)) {
    return at::allclose(low_, o.low_) && at::allclose(high_, o.high_);
  }
  return at::equal(low_, o.low_) && at::equal(high_, o.high_);
}

}  // namespace tensordict
