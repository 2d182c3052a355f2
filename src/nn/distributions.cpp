// Categorical, Normal and TanhNormal (see tensordict/distributions.h).
//
// Every formula is torch.distributions' (torch 1.13, unchanged through 2.x)
// or TorchRL 0.14's, written in the same order of operations so that the
// values agree to rounding; every draw is the LibTorch call that Python's
// makes (`multinomial` for a Categorical's sample, `normal` for a Normal's,
// `normal_` on an empty tensor for its rsample), so that a seeded generator
// gives Python's draws.
//
// g++ 14 (Debian trixie) misreads a std::vector<bool>::reserve inlined from
// LibTorch's torch::autograd::Function::apply (the safe tanh's) as an
// out-of-bounds write (-Warray-bounds, -Wstringop-overflow: errors under
// CI's -Werror).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include "tensordict/distributions.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"

namespace tensordict {
namespace distributions {

namespace {

using detail::dtype_name;
using detail::shape_str;

constexpr double kPi = 3.14159265358979323846;

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The broadcast of two shapes, or false where they do not broadcast.
bool broadcast_shape(at::IntArrayRef a, at::IntArrayRef b,
                     std::vector<int64_t>& out) {
  const size_t n = std::max(a.size(), b.size());
  out.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return false;
    out[n - 1 - i] = x == 1 ? y : x;
  }
  return true;
}

void check_floating(const std::string& dist, const char* what,
                    const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.defined(), dist, ": parameter ", what, " is undefined");
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), dist, ": parameter ",
                    what, " must be a floating-point tensor, got ",
                    dtype_name(t.scalar_type()));
}

// torch.distributions' constraint check under validate_args: `ok` holds
// for every element of `t`.
void check_constraint(const std::string& dist, const std::string& what,
                      const at::Tensor& t, const at::Tensor& ok,
                      const char* constraint) {
  TORCH_CHECK_VALUE(ok.all().item<bool>(), dist, ": ", what, " (shape ",
                    shape_str(t.sizes()), ") must be ", constraint,
                    "; found invalid values");
}

// The broadcast shape of loc and scale, checked.
std::vector<int64_t> loc_scale_shape(const std::string& dist,
                                     const at::Tensor& loc,
                                     const at::Tensor& scale) {
  check_floating(dist, "loc", loc);
  check_floating(dist, "scale", scale);
  std::vector<int64_t> shape;
  TORCH_CHECK_VALUE(broadcast_shape(loc.sizes(), scale.sizes(), shape), dist,
                    ": loc of shape ", shape_str(loc.sizes()),
                    " and scale of shape ", shape_str(scale.sizes()),
                    " do not broadcast");
  return shape;
}

// torch.finfo(dtype).eps, .resolution and .min.
double finfo_eps(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return std::numeric_limits<double>::epsilon();
    case at::kHalf:
      return 0.0009765625;
    case at::kBFloat16:
      return 0.0078125;
    default:
      return static_cast<double>(std::numeric_limits<float>::epsilon());
  }
}
double finfo_resolution(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return 1e-15;
    case at::kHalf:
      return 1e-3;
    case at::kBFloat16:
      return 1e-2;
    default:
      return 1e-6;
  }
}
double finfo_min(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    case at::kHalf:
      return -65504.0;
    case at::kBFloat16:
      return -3.3895313892515355e38;
    default:
      return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}

// Python's _sum_rightmost: the sum over the last `k` dims.
at::Tensor sum_rightmost(const at::Tensor& t, int64_t k) {
  if (k == 0) return t;
  std::vector<int64_t> dims;
  for (int64_t d = 1; d <= k; ++d) dims.push_back(-d);
  return t.sum(dims);
}

// TorchRL's safe tanh and atanh: clamped to +-lim, with the gradient of
// the unclamped function at the clamped value (its autograd.Functions).
struct SafeTanh : torch::autograd::Function<SafeTanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& x, double lim) {
    at::Tensor out = x.tanh().clamp(-lim, lim);
    ctx->save_for_backward({out});
    return out;
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad) {
    const at::Tensor out = ctx->get_saved_variables()[0];
    return {grad[0] * (1 - out.pow(2)), at::Tensor()};
  }
};
struct SafeAtanh : torch::autograd::Function<SafeAtanh> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& y, double lim) {
    ctx->save_for_backward({y});
    ctx->saved_data["lim"] = lim;
    return y.clamp(-lim, lim).atanh();
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad) {
    const double lim = ctx->saved_data["lim"].toDouble();
    const at::Tensor y = ctx->get_saved_variables()[0].clamp(-lim, lim);
    return {grad[0] / (1 - y.pow(2)), at::Tensor()};
  }
};

}  // namespace

// ---- Distribution -----------------------------------------------------------

// The generator is taken by value, as the overrides move it into LibTorch's
// calls; this default only throws.
at::Tensor Distribution::rsample(
    at::IntArrayRef /*sample_shape*/,
    // NOLINTNEXTLINE(performance-unnecessary-value-param)
    c10::optional<at::Generator> /*generator*/) const {
  TORCH_CHECK_NOT_IMPLEMENTED(false, name(),
                              ": rsample is not implemented (the "
                              "distribution is not reparameterizable); use "
                              "sample()");
}
at::Tensor Distribution::entropy() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": entropy is not implemented");
}
at::Tensor Distribution::mode() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": mode is not implemented");
}
at::Tensor Distribution::mean() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": mean is not implemented");
}
at::Tensor Distribution::variance() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false, name(), ": variance is not implemented");
}
at::Tensor Distribution::stddev() const { return variance().sqrt(); }

std::vector<int64_t> Distribution::extended_shape(
    at::IntArrayRef sample_shape) const {
  std::vector<int64_t> shape(sample_shape.begin(), sample_shape.end());
  shape.insert(shape.end(), batch_shape_.begin(), batch_shape_.end());
  shape.insert(shape.end(), event_shape_.begin(), event_shape_.end());
  return shape;
}

void Distribution::check_value_shape(const at::Tensor& value) const {
  TORCH_CHECK_VALUE(value.defined(), name(), ": log_prob's value is undefined");
  const at::IntArrayRef actual = value.sizes();
  const size_t ev = event_shape_.size();
  TORCH_CHECK_VALUE(actual.size() >= ev &&
                        actual.slice(actual.size() - ev).equals(event_shape_),
                    name(), ": log_prob's value (shape ", shape_str(actual),
                    ") must end in the event shape ", shape_str(event_shape_));
  const std::vector<int64_t> expected = extended_shape({});
  std::vector<int64_t> unused;
  TORCH_CHECK_VALUE(broadcast_shape(actual, expected, unused), name(),
                    ": log_prob's value (shape ", shape_str(actual),
                    ") does not broadcast with the distribution's shape ",
                    shape_str(expected));
}

// ---- Categorical ------------------------------------------------------------

Categorical::Categorical(at::Tensor logits, at::Tensor probs,
                         bool validate_args)
    : Distribution(
          logits.sizes().slice(0, static_cast<size_t>(logits.dim() - 1)).vec(),
          {}),
      logits_(std::move(logits)),
      probs_(std::move(probs)),
      validate_args_(validate_args) {}

Categorical Categorical::from_logits(const at::Tensor& logits,
                                     bool validate_args) {
  check_floating("Categorical", "logits", logits);
  TORCH_CHECK_VALUE(logits.dim() >= 1,
                    "Categorical: logits must be at least one-dimensional, "
                    "got shape []");
  if (validate_args) {
    check_constraint("Categorical", "parameter logits", logits,
                     logits == logits, "real (no NaN)");
  }
  // torch: logits - logits.logsumexp(dim=-1, keepdim=True), probs = softmax.
  at::Tensor normalized = logits - logits.logsumexp(-1, true);
  at::Tensor probs = at::softmax(normalized, -1);
  return Categorical(std::move(normalized), std::move(probs), validate_args);
}

Categorical Categorical::from_probs(const at::Tensor& probs,
                                    bool validate_args) {
  check_floating("Categorical", "probs", probs);
  TORCH_CHECK_VALUE(probs.dim() >= 1,
                    "Categorical: probs must be at least one-dimensional, "
                    "got shape []");
  if (validate_args) {
    check_constraint(
        "Categorical", "parameter probs", probs,
        at::logical_and((probs >= 0).all(-1), (probs.sum(-1) - 1).abs() < 1e-6),
        "non-negative and sum to 1 over the last dim");
  }
  at::Tensor normalized = probs / probs.sum(-1, true);
  // torch's probs_to_logits: log(probs clamped to [eps, 1 - eps]).
  const double eps = finfo_eps(probs.scalar_type());
  at::Tensor logits = normalized.clamp(eps, 1 - eps).log();
  return Categorical(std::move(logits), std::move(normalized), validate_args);
}

at::Tensor Categorical::sample(at::IntArrayRef sample_shape,
                               c10::optional<at::Generator> generator) const {
  const at::NoGradGuard no_grad;
  const at::Tensor probs_2d = probs_.reshape({-1, num_events()});
  const at::Tensor samples_2d =
      at::multinomial(probs_2d, c10::multiply_integers(sample_shape), true,
                      std::move(generator))
          .t();
  return samples_2d.reshape(extended_shape(sample_shape));
}

at::Tensor Categorical::log_prob(const at::Tensor& value) const {
  check_value_shape(value);
  if (validate_args_) {
    const at::Tensor v = value.to(at::kDouble);
    check_constraint(
        "Categorical", "log_prob's value", value,
        at::logical_and(at::logical_and(v == v.floor(), v >= 0),
                        v <= static_cast<double>(num_events() - 1)),
        ("an integer in [0, " + std::to_string(num_events() - 1) + "]")
            .c_str());
  }
  std::vector<at::Tensor> both =
      at::broadcast_tensors({value.to(at::kLong).unsqueeze(-1), logits_});
  const at::Tensor index = both[0].narrow(-1, 0, 1);
  return both[1].gather(-1, index).squeeze(-1);
}

at::Tensor Categorical::entropy() const {
  const at::Tensor logits = logits_.clamp_min(finfo_min(logits_.scalar_type()));
  return -(logits * probs_).sum(-1);
}

at::Tensor Categorical::mode() const { return probs_.argmax(-1); }

at::Tensor Categorical::mean() const {
  return at::full(extended_shape({}), std::numeric_limits<double>::quiet_NaN(),
                  probs_.options());
}
at::Tensor Categorical::variance() const { return mean(); }

// ---- Normal -----------------------------------------------------------------

Normal::Normal(const at::Tensor& loc, const at::Tensor& scale,
               bool validate_args)
    : Distribution(loc_scale_shape("Normal", loc, scale), {}),
      loc_(loc.expand(batch_shape())),
      scale_(scale.expand(batch_shape())),
      validate_args_(validate_args) {
  if (validate_args) {
    check_constraint("Normal", "parameter loc", loc, loc == loc,
                     "real (no NaN)");
    check_constraint("Normal", "parameter scale", scale, scale > 0, "> 0");
  }
}

at::Tensor Normal::sample(at::IntArrayRef sample_shape,
                          c10::optional<at::Generator> generator) const {
  const at::NoGradGuard no_grad;
  const std::vector<int64_t> shape = extended_shape(sample_shape);
  return at::normal(loc_.expand(shape), scale_.expand(shape),
                    std::move(generator));
}

at::Tensor Normal::rsample(at::IntArrayRef sample_shape,
                           c10::optional<at::Generator> generator) const {
  const at::Tensor eps = at::empty(extended_shape(sample_shape), loc_.options())
                             .normal_(0, 1, std::move(generator));
  return loc_ + eps * scale_;
}

at::Tensor Normal::log_prob(const at::Tensor& value) const {
  check_value_shape(value);
  if (validate_args_) {
    check_constraint("Normal", "log_prob's value", value, value == value,
                     "real (no NaN)");
  }
  const at::Tensor var = scale_.pow(2);
  const at::Tensor log_scale = scale_.log();
  return -((value - loc_).pow(2)) / (2 * var) - log_scale -
         std::log(std::sqrt(2 * kPi));
}

at::Tensor Normal::entropy() const {
  return 0.5 + 0.5 * std::log(2 * kPi) + at::log(scale_);
}

at::Tensor Normal::variance() const { return scale_.pow(2); }

// ---- TanhNormal -------------------------------------------------------------

namespace {

// TanhNormal's checks, then the underlying Normal (after tanh_loc).
Normal tanh_normal_base(const at::Tensor& loc, const at::Tensor& scale,
                        const TanhNormalOptions& o) {
  (void)loc_scale_shape("TanhNormal", loc, scale);
  TORCH_CHECK_VALUE(o.high() > o.low(),
                    "TanhNormal: high must be greater than low, got low=",
                    o.low(), " and high=", o.high());
  at::Tensor l = loc;
  if (o.tanh_loc()) {
    l = (l / o.upscale()).tanh() * o.upscale();
    if (o.low() != -1.0 || o.high() != 1.0)
      l = l + (o.high() - o.low()) / 2 + o.low();
  }
  if (o.validate_args()) {
    check_constraint("TanhNormal", "parameter loc", l, l == l, "real (no NaN)");
    check_constraint("TanhNormal", "parameter scale", scale, scale > 1e-6,
                     "> 1e-06");
  }
  return Normal(l, scale, false);
}

TanhNormalOptions resolve(TanhNormalOptions o, const Normal& base) {
  const auto dims = static_cast<int64_t>(base.batch_shape().size());
  TORCH_CHECK_VALUE(o.event_dims() >= -1,
                    "TanhNormal: event_dims must be >= 0 (or -1 for the "
                    "default), got ",
                    o.event_dims());
  if (o.event_dims() == -1) o.event_dims(std::min<int64_t>(1, dims));
  TORCH_CHECK_VALUE(o.event_dims() <= dims, "TanhNormal: event_dims (",
                    o.event_dims(),
                    ") exceeds the dims of loc and scale (shape ",
                    shape_str(base.batch_shape()), ")");
  return o;
}

}  // namespace

TanhNormal::TanhNormal(const at::Tensor& loc, const at::Tensor& scale,
                       TanhNormalOptions options)
    : Distribution({}, {}), base_(tanh_normal_base(loc, scale, options)) {
  options_ = resolve(options, base_);
  const std::vector<int64_t>& shape = base_.batch_shape();
  const auto cut = static_cast<std::ptrdiff_t>(shape.size()) -
                   static_cast<std::ptrdiff_t>(options_.event_dims());
  set_shapes(std::vector<int64_t>(shape.begin(), shape.begin() + cut),
             std::vector<int64_t>(shape.begin() + cut, shape.end()));
}

at::Tensor TanhNormal::forward_transform(const at::Tensor& x) const {
  at::Tensor y =
      options_.safe_tanh()
          ? SafeTanh::apply(x, 1.0 - finfo_resolution(x.scalar_type()))
          : x.tanh();
  if (affine()) {
    y = (options_.high() + options_.low()) / 2 +
        (options_.high() - options_.low()) / 2 * y;
  }
  return y;
}

at::Tensor TanhNormal::inverse_transform(const at::Tensor& y) const {
  at::Tensor x = y;
  if (affine()) {
    x = (x - (options_.high() + options_.low()) / 2) /
        ((options_.high() - options_.low()) / 2);
  }
  return options_.safe_tanh()
             ? SafeAtanh::apply(x, 1.0 - finfo_resolution(x.scalar_type()))
             : x.atanh();
}

at::Tensor TanhNormal::log_abs_det_jacobian(const at::Tensor& x) const {
  // TanhTransform's: 2 * (log 2 - x - softplus(-2x)); AffineTransform's:
  // log |scale|.
  at::Tensor ladj = 2. * (std::log(2.) - x - at::softplus(-2. * x));
  if (affine()) ladj = ladj + std::log((options_.high() - options_.low()) / 2);
  return sum_rightmost(ladj, options_.event_dims());
}

at::Tensor TanhNormal::log_prob_pre(const at::Tensor& x) const {
  return -log_abs_det_jacobian(x) +
         sum_rightmost(base_.log_prob(x), options_.event_dims());
}

at::Tensor TanhNormal::sample(at::IntArrayRef sample_shape,
                              c10::optional<at::Generator> generator) const {
  const at::NoGradGuard no_grad;
  return forward_transform(base_.sample(sample_shape, std::move(generator)));
}

at::Tensor TanhNormal::rsample(at::IntArrayRef sample_shape,
                               c10::optional<at::Generator> generator) const {
  return forward_transform(base_.rsample(sample_shape, std::move(generator)));
}

at::Tensor TanhNormal::log_prob(const at::Tensor& value) const {
  check_value_shape(value);
  if (options_.validate_args()) {
    check_constraint("TanhNormal", "log_prob's value", value, value == value,
                     "real (no NaN)");
  }
  return log_prob_pre(inverse_transform(value));
}

at::Tensor TanhNormal::entropy() const {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false,
      "TanhNormal: entropy has no closed form (as in TorchRL); "
      "entropy_estimate(dist, n) averages -log_prob over n draws");
}

at::Tensor TanhNormal::mode() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false,
                              "TanhNormal: mode has no closed form (as in "
                              "TorchRL 0.14); use deterministic_sample() "
                              "(InteractionType::DETERMINISTIC)");
}

at::Tensor TanhNormal::mean() const {
  TORCH_CHECK_NOT_IMPLEMENTED(false,
                              "TanhNormal: mean has no closed form (as in "
                              "TorchRL); estimate it as sample({n}).mean(0)");
}

at::Tensor TanhNormal::deterministic_sample() const {
  return forward_transform(base_.loc());
}

std::pair<at::Tensor, at::Tensor> TanhNormal::rsample_and_log_prob(
    at::IntArrayRef sample_shape,
    c10::optional<at::Generator> generator) const {
  const at::Tensor pre = base_.rsample(sample_shape, std::move(generator));
  return {forward_transform(pre), log_prob_pre(pre)};
}

std::pair<at::Tensor, at::Tensor> TanhNormal::sample_and_log_prob(
    at::IntArrayRef sample_shape,
    c10::optional<at::Generator> generator) const {
  const at::Tensor pre = base_.sample(sample_shape, std::move(generator));
  at::Tensor sample;
  {
    const at::NoGradGuard no_grad;
    sample = forward_transform(pre);
  }
  return {sample, log_prob_pre(pre)};
}

at::Tensor entropy_estimate(const Distribution& dist, int64_t samples,
                            c10::optional<at::Generator> generator) {
  TORCH_CHECK_VALUE(samples >= 1,
                    "entropy_estimate: samples must be >= 1, got ", samples);
  try {
    at::Tensor entropy = dist.entropy();
    if (entropy.isfinite().all().item<bool>()) return entropy;
  } catch (const c10::NotImplementedError&) {
  }
  const std::vector<int64_t> shape{samples};
  at::Tensor log_prob;
  if (const auto* tanh = dynamic_cast<const TanhNormal*>(&dist)) {
    log_prob = tanh->rsample_and_log_prob(shape, std::move(generator)).second;
  } else if (dist.has_rsample()) {
    log_prob = dist.log_prob(dist.rsample(shape, std::move(generator)));
  } else {
    log_prob = dist.log_prob(dist.sample(shape, std::move(generator)));
  }
  return -log_prob.mean(0);
}

// ---- Parameters and factories -----------------------------------------------

void DistributionParams::add(std::string name, at::Tensor value) {
  TORCH_CHECK_VALUE(find(name) == nullptr, "DistributionParams: parameter ",
                    name, " is given twice");
  params_.emplace_back(std::move(name), std::move(value));
}

const at::Tensor* DistributionParams::find(const std::string& name) const {
  for (const auto& p : params_) {
    if (p.first == name) return &p.second;
  }
  return nullptr;
}

const at::Tensor& DistributionParams::get(const std::string& dist,
                                          const std::string& name) const {
  const at::Tensor* t = find(name);
  TORCH_CHECK_VALUE(t != nullptr, dist, ": missing parameter ", name,
                    " (parameters given: ", join_names(names()), ")");
  return *t;
}

void DistributionParams::check_names(
    const std::string& dist, const std::vector<std::string>& allowed) const {
  for (const auto& p : params_) {
    TORCH_CHECK_VALUE(
        std::find(allowed.begin(), allowed.end(), p.first) != allowed.end(),
        dist, ": unexpected parameter ", p.first, " (expected ",
        join_names(allowed),
        "); map other keys with ProbabilisticOptions::dist_keys");
  }
}

std::vector<std::string> DistributionParams::names() const {
  std::vector<std::string> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.first);
  return out;
}

DistributionFactory categorical(bool validate_args) {
  return [validate_args](const DistributionParams& p) {
    p.check_names("Categorical", {"logits", "probs"});
    const at::Tensor* logits = p.find("logits");
    const at::Tensor* probs = p.find("probs");
    TORCH_CHECK_VALUE((logits == nullptr) != (probs == nullptr),
                      "Categorical: expected either logits or probs, not "
                      "both (parameters given: ",
                      join_names(p.names()), ")");
    return std::make_shared<Categorical>(
        logits != nullptr ? Categorical::from_logits(*logits, validate_args)
                          : Categorical::from_probs(*probs, validate_args));
  };
}

DistributionFactory normal(bool validate_args) {
  return [validate_args](const DistributionParams& p) {
    p.check_names("Normal", {"loc", "scale"});
    return std::make_shared<Normal>(p.get("Normal", "loc"),
                                    p.get("Normal", "scale"), validate_args);
  };
}

DistributionFactory tanh_normal(TanhNormalOptions options) {
  return [options](const DistributionParams& p) {
    p.check_names("TanhNormal", {"loc", "scale"});
    return std::make_shared<TanhNormal>(p.get("TanhNormal", "loc"),
                                        p.get("TanhNormal", "scale"), options);
  };
}

}  // namespace distributions
}  // namespace tensordict
