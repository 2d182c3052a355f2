// tensordict/distributions.h — the distributions an RL policy samples from:
// `Categorical`, `Normal` (torch.distributions') and `TanhNormal` (TorchRL's),
// for LibTorch, which has no torch.distributions.
//
// Each one takes its parameters as tensors and offers what Python's does:
// `sample(sample_shape)`, `rsample(sample_shape)` where the distribution is
// reparameterizable (a sample that gradients flow through: `Normal`,
// `TanhNormal`), `log_prob(value)`, `entropy()`, `mode()`, and `mean()`,
// `stddev()` and `variance()` where torch has them. Values are Python's on
// the same inputs (tested against the reference Python to 1e-5).
//
// Randomness comes from LibTorch's generator (`at::normal`,
// `at::multinomial`), the default one or the `at::Generator` passed: a run
// seeded with `torch::manual_seed(s)` draws what Python's
// `torch.manual_seed(s)` draws on the same LibTorch, since the draws are the
// ones torch.distributions makes.
//
// Parameters are checked as torch.distributions checks them with
// `validate_args` (on by default, as in Python): shapes broadcast, `scale`
// is positive, `probs` are non-negative and sum to 1 over the last dim,
// nothing is NaN; and `log_prob`'s value must broadcast with the
// distribution's shape (and, for a `Categorical`, be one of its categories).
// Value checks read the tensors (a device sync on a GPU); `validate_args =
// false` skips them, and only the shape checks remain. A failed check
// throws a `c10::ValueError` naming the parameter and its shape.
//
// Distributions hold their parameters (no copy); results are new tensors.
//
// Example:
// ```
//   namespace D = tensordict::distributions;
//   D::Categorical pi = D::Categorical::from_logits(logits);  // [B, n]
//   at::Tensor action = pi.sample();                           // [B]
//   at::Tensor logp = pi.log_prob(action);                     // [B]
//   D::TanhNormal actor(loc, scale);                           // [B, d]
//   at::Tensor a = actor.rsample();            // in (-1, 1), differentiable
// ```
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tensordict {
namespace distributions {

/// What every distribution offers (see the top of this file). Methods a
/// distribution has no formula for throw a `c10::NotImplementedError`, as
/// Python's raise `NotImplementedError`.
class Distribution {
 public:
  virtual ~Distribution() = default;

  /// The distribution's name, as Python's class ("Normal").
  [[nodiscard]] virtual std::string name() const = 0;
  /// The shape over which parameters vary (Python's `batch_shape`).
  [[nodiscard]] const std::vector<int64_t>& batch_shape() const {
    return batch_shape_;
  }
  /// The shape of one draw (Python's `event_shape`): `[]`, or the dims that
  /// `log_prob` sums over.
  [[nodiscard]] const std::vector<int64_t>& event_shape() const {
    return event_shape_;
  }
  /// Whether `rsample` exists (Python's `has_rsample`).
  [[nodiscard]] virtual bool has_rsample() const { return false; }

  /// A draw of shape `sample_shape + batch_shape + event_shape`, without
  /// gradients.
  [[nodiscard]] virtual at::Tensor sample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const = 0;
  /// A reparameterized draw: gradients flow to the parameters. Throws a
  /// `c10::NotImplementedError` where `has_rsample()` is false.
  [[nodiscard]] virtual at::Tensor rsample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const;
  /// The log-density (or log-mass) of `value`, of shape
  /// `broadcast(value's leading dims, batch_shape)`.
  [[nodiscard]] virtual at::Tensor log_prob(const at::Tensor& value) const = 0;
  /// The entropy, of shape `batch_shape`.
  [[nodiscard]] virtual at::Tensor entropy() const;
  /// The most likely value.
  [[nodiscard]] virtual at::Tensor mode() const;
  /// The mean.
  [[nodiscard]] virtual at::Tensor mean() const;
  /// The standard deviation.
  [[nodiscard]] virtual at::Tensor stddev() const;
  /// The variance.
  [[nodiscard]] virtual at::Tensor variance() const;
  /// The value `InteractionType::DETERMINISTIC` takes (tensordict 0.14's
  /// rule): a `Categorical`'s mode, a `Normal`'s mean, a `TanhNormal`'s
  /// transformed location.
  [[nodiscard]] virtual at::Tensor deterministic_sample() const = 0;

 protected:
  /// A distribution with these shapes.
  Distribution(std::vector<int64_t> batch_shape,
               std::vector<int64_t> event_shape)
      : batch_shape_(std::move(batch_shape)),
        event_shape_(std::move(event_shape)) {}
  /// Sets the shapes (a constructor that computes them first).
  void set_shapes(std::vector<int64_t> batch_shape,
                  std::vector<int64_t> event_shape) {
    batch_shape_ = std::move(batch_shape);
    event_shape_ = std::move(event_shape);
  }
  /// `sample_shape + batch_shape + event_shape`.
  [[nodiscard]] std::vector<int64_t> extended_shape(
      at::IntArrayRef sample_shape) const;
  /// torch.distributions' `_validate_sample` shape rule for `value`: its
  /// trailing dims are `event_shape` and it broadcasts with the rest.
  void check_value_shape(const at::Tensor& value) const;

 private:
  std::vector<int64_t> batch_shape_;
  std::vector<int64_t> event_shape_;
};

/// A categorical distribution over `n` classes, 0 to n - 1 (Python's
/// `torch.distributions.Categorical`): the last dim of the parameter holds
/// the classes, the others are the batch shape. Samples are `int64`.
/// `mean()` and `variance()` are NaN, as in torch.
class Categorical : public Distribution {
 public:
  /// From unnormalized log-probabilities (normalized by `logsumexp`).
  static Categorical from_logits(const at::Tensor& logits,
                                 bool validate_args = true);
  /// From probabilities: non-negative, summing to 1 over the last dim when
  /// `validate_args` (they are normalized either way, as in torch).
  static Categorical from_probs(const at::Tensor& probs,
                                bool validate_args = true);

  [[nodiscard]] std::string name() const override { return "Categorical"; }
  /// The normalized log-probabilities (`[..., n]`).
  [[nodiscard]] const at::Tensor& logits() const { return logits_; }
  /// The probabilities (`[..., n]`).
  [[nodiscard]] const at::Tensor& probs() const { return probs_; }
  /// The number of classes.
  [[nodiscard]] int64_t num_events() const { return logits_.size(-1); }

  [[nodiscard]] at::Tensor sample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const override;
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor entropy() const override;
  [[nodiscard]] at::Tensor mode() const override;
  [[nodiscard]] at::Tensor mean() const override;
  [[nodiscard]] at::Tensor variance() const override;
  [[nodiscard]] at::Tensor deterministic_sample() const override {
    return mode();
  }

 private:
  Categorical(at::Tensor logits, at::Tensor probs, bool validate_args);
  at::Tensor logits_;
  at::Tensor probs_;
  bool validate_args_;
};

/// A normal distribution (Python's `torch.distributions.Normal`): `loc` and
/// `scale` broadcast to the batch shape; the event shape is `[]`.
class Normal : public Distribution {
 public:
  /// `scale` must be positive (checked when `validate_args`).
  Normal(const at::Tensor& loc, const at::Tensor& scale,
         bool validate_args = true);

  [[nodiscard]] std::string name() const override { return "Normal"; }
  /// The mean, broadcast to the batch shape.
  [[nodiscard]] const at::Tensor& loc() const { return loc_; }
  /// The standard deviation, broadcast to the batch shape.
  [[nodiscard]] const at::Tensor& scale() const { return scale_; }

  [[nodiscard]] bool has_rsample() const override { return true; }
  /// `at::normal(loc, scale)`, as torch's `Normal.sample`.
  [[nodiscard]] at::Tensor sample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const override;
  /// `loc + eps * scale` with `eps` standard normal, as torch's.
  [[nodiscard]] at::Tensor rsample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const override;
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor entropy() const override;
  [[nodiscard]] at::Tensor mode() const override { return loc_; }
  [[nodiscard]] at::Tensor mean() const override { return loc_; }
  [[nodiscard]] at::Tensor stddev() const override { return scale_; }
  [[nodiscard]] at::Tensor variance() const override;
  [[nodiscard]] at::Tensor deterministic_sample() const override {
    return loc_;
  }

 private:
  at::Tensor loc_;
  at::Tensor scale_;
  bool validate_args_;
};

/// The options of a `TanhNormal`, TorchRL 0.14's constructor arguments:
/// `TanhNormalOptions().low(0).high(4).event_dims(0)`.
struct TanhNormalOptions {
  /// `upscale` in `loc = tanh(loc / upscale) * upscale` (with `tanh_loc`).
  TORCH_ARG(double, upscale) = 5.0;
  /// The lower bound of the support.
  TORCH_ARG(double, low) = -1.0;
  /// The upper bound of the support; must exceed `low`.
  TORCH_ARG(double, high) = 1.0;
  /// The trailing dims that make one event (that `log_prob` sums over);
  /// -1 means TorchRL's default, `min(1, loc.dim())`.
  TORCH_ARG(int64_t, event_dims) = -1;
  /// Squash the location first (`loc = tanh(loc / upscale) * upscale`,
  /// then shifted by `(high - low) / 2 + low` when the bounds are not -1
  /// and 1, as TorchRL 0.14 does).
  TORCH_ARG(bool, tanh_loc) = false;
  /// Clamp `tanh` to `±(1 - resolution)` (1e-6 for float32) so that it
  /// stays invertible, with the gradient `1 - y²` at the clamped `y`, as
  /// TorchRL's `SafeTanhTransform`.
  TORCH_ARG(bool, safe_tanh) = true;
  /// Check the parameters as torch does (`scale > 1e-6`, no NaN).
  TORCH_ARG(bool, validate_args) = true;
};

/// TorchRL's `TanhNormal`: a normal draw `x` over the last `event_dims`
/// dims, squashed by `tanh` into (-1, 1) and mapped affinely onto
/// (`low`, `high`). Reparameterizable. As in TorchRL 0.14:
///   - `log_prob(y)` inverts the transform (with `atanh` clamped as
///     `safe_tanh` says) and subtracts the log-Jacobian, summed over the
///     event dims;
///   - `deterministic_sample()` is the transformed location (TorchRL 0.4
///     called it `mode`);
///   - `mode()` throws (no closed form; TorchRL's `get_mode` optimizes one
///     numerically), and so do `mean()` and `entropy()`:
///     `entropy_estimate(dist, n)` is the sampled estimate TorchRL's losses
///     take, `-log_prob` averaged over `n` reparameterized draws;
///   - `sample_and_log_prob` / `rsample_and_log_prob` score the exact
///     pre-`tanh` draw, which stays accurate where `tanh` saturates.
class TanhNormal : public Distribution {
 public:
  /// `loc` and `scale` broadcast; `scale` must exceed 1e-6 and `high` must
  /// exceed `low`.
  TanhNormal(const at::Tensor& loc, const at::Tensor& scale,
             TanhNormalOptions options = {});

  [[nodiscard]] std::string name() const override { return "TanhNormal"; }
  /// The location of the underlying normal (after `tanh_loc`).
  [[nodiscard]] const at::Tensor& loc() const { return base_.loc(); }
  /// The scale of the underlying normal.
  [[nodiscard]] const at::Tensor& scale() const { return base_.scale(); }
  /// The options it was made with (`event_dims` resolved).
  [[nodiscard]] const TanhNormalOptions& options() const { return options_; }

  [[nodiscard]] bool has_rsample() const override { return true; }
  [[nodiscard]] at::Tensor sample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const override;
  [[nodiscard]] at::Tensor rsample(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const override;
  [[nodiscard]] at::Tensor log_prob(const at::Tensor& value) const override;
  [[nodiscard]] at::Tensor entropy() const override;
  [[nodiscard]] at::Tensor mode() const override;
  [[nodiscard]] at::Tensor mean() const override;
  [[nodiscard]] at::Tensor deterministic_sample() const override;
  /// A reparameterized draw and its log-probability, scored on the draw
  /// before `tanh` (TorchRL 0.14's `rsample_and_log_prob`).
  [[nodiscard]] std::pair<at::Tensor, at::Tensor> rsample_and_log_prob(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const;
  /// As `rsample_and_log_prob`, with the draw detached (the log-probability
  /// keeps its gradients to the parameters).
  [[nodiscard]] std::pair<at::Tensor, at::Tensor> sample_and_log_prob(
      at::IntArrayRef sample_shape = {},
      c10::optional<at::Generator> generator = c10::nullopt) const;

 private:
  // The transform: (safe) tanh, then the affine map onto (low, high).
  [[nodiscard]] at::Tensor forward_transform(const at::Tensor& x) const;
  // Its inverse.
  [[nodiscard]] at::Tensor inverse_transform(const at::Tensor& y) const;
  // log |d transform / dx| at x, summed over the event dims.
  [[nodiscard]] at::Tensor log_abs_det_jacobian(const at::Tensor& x) const;
  // The log-probability of a pre-tanh draw x.
  [[nodiscard]] at::Tensor log_prob_pre(const at::Tensor& x) const;
  // Whether the affine map is there (bounds other than -1 and 1).
  [[nodiscard]] bool affine() const {
    return options_.low() != -1.0 || options_.high() != 1.0;
  }

  TanhNormalOptions options_;
  Normal base_;
};

/// A distribution's parameters by name, as a `ProbabilisticTensorDictModule`
/// reads them from a dict (`"loc"`, `"scale"`, `"logits"`).
class DistributionParams {
 public:
  /// Adds `name`; throws a `c10::ValueError` when it is already there.
  void add(std::string name, at::Tensor value);
  /// The parameter `name`, or nullptr.
  [[nodiscard]] const at::Tensor* find(const std::string& name) const;
  /// The parameter `name`; throws a `c10::ValueError` naming `dist` and the
  /// parameters given when it is missing.
  [[nodiscard]] const at::Tensor& get(const std::string& dist,
                                      const std::string& name) const;
  /// Throws a `c10::ValueError` naming `dist` when a parameter is not one of
  /// `allowed` (Python's "unexpected keyword argument").
  void check_names(const std::string& dist,
                   const std::vector<std::string>& allowed) const;
  /// The names, in the order added.
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
};

/// Makes a distribution from its parameters: what a
/// `ProbabilisticTensorDictModule` calls (Python's `distribution_class`).
using DistributionFactory =
    std::function<std::shared_ptr<Distribution>(const DistributionParams&)>;

/// A `Categorical` from `"logits"` or `"probs"` (exactly one).
DistributionFactory categorical(bool validate_args = true);
/// A `Normal` from `"loc"` and `"scale"`.
DistributionFactory normal(bool validate_args = true);
/// A `TanhNormal` from `"loc"` and `"scale"`, with `options`.
DistributionFactory tanh_normal(TanhNormalOptions options = {});

/// The entropy as TorchRL's PPO loss takes it: `dist.entropy()` where the
/// distribution has a closed form and it is finite, else the sampled
/// estimate `-log_prob(x)` averaged over `samples` draws `x` (TorchRL's
/// `samples_mc_entropy`), reparameterized where `has_rsample()` so that
/// gradients reach the parameters. A `TanhNormal` (no closed form) scores
/// each draw before `tanh`, as its `rsample_and_log_prob`, which stays
/// accurate where `tanh` saturates. Of shape `batch_shape()`. Throws a
/// `c10::ValueError` for `samples < 1`.
[[nodiscard]] at::Tensor entropy_estimate(
    const Distribution& dist, int64_t samples = 1,
    c10::optional<at::Generator> generator = c10::nullopt);

}  // namespace distributions
}  // namespace tensordict
