// ClipPPOLoss (tensordict/objectives.h): TorchRL 0.14's ClipPPOLoss.forward,
// its critic loss and its advantage standardization.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/names.h"
#include "objectives/loss_common.h"
#include "rl/returns_keys.h"
#include "tensordict/objectives.h"

namespace tensordict {
namespace {

constexpr const char* kWhat = "ClipPPOLoss";

void check_options(const ClipPPOLossOptions& o) {
  TORCH_CHECK_VALUE(o.clip_epsilon() >= 0.0 && o.clip_epsilon() < 1.0,
                    "ClipPPOLoss: clip_epsilon must be within [0, 1), got ",
                    o.clip_epsilon());
  TORCH_CHECK_VALUE(o.samples_mc_entropy() >= 1,
                    "ClipPPOLoss: samples_mc_entropy must be >= 1, got ",
                    o.samples_mc_entropy());
  TORCH_CHECK_VALUE(!o.clip_value() || *o.clip_value() > 0.0,
                    "ClipPPOLoss: clip_value must be > 0, got ",
                    o.clip_value() ? *o.clip_value() : 0.0);
}

// The dims of `x` the standardization reduces over: all but `exclude`
// (checked: in range, no repeats).
std::vector<int64_t> reduce_dims(const at::Tensor& x,
                                 const std::vector<int64_t>& exclude) {
  std::vector<bool> excluded(static_cast<size_t>(x.dim()), false);
  for (const int64_t d : exclude) {
    const int64_t w = d < 0 ? d + x.dim() : d;
    TORCH_CHECK_VALUE(w >= 0 && w < x.dim(), kWhat,
                      ": normalize_advantage_exclude_dims holds ", d,
                      ", outside the advantage's dims (shape ",
                      detail::shape_str(x.sizes()), ")");
    TORCH_CHECK_VALUE(!excluded[static_cast<size_t>(w)], kWhat,
                      ": normalize_advantage_exclude_dims repeats dim ", d);
    excluded[static_cast<size_t>(w)] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!excluded[static_cast<size_t>(d)]) dims.push_back(d);
  }
  return dims;
}

// TorchRL's `_standardize`: (x - mean) / std over every dim but `exclude`,
// std clamped to float32's resolution.
at::Tensor standardize(const at::Tensor& x,
                       const std::vector<int64_t>& exclude) {
  constexpr double kEps = 1e-6;  // torch.finfo(torch.float).resolution
  if (exclude.empty()) return (x - x.mean()) / x.std().clamp_min(kEps);
  const std::vector<int64_t> dims = reduce_dims(x, exclude);
  if (dims.empty()) return x;
  const at::Tensor mean = x.mean(dims, /*keepdim=*/true);
  const at::Tensor std = x.std(dims, /*unbiased=*/true, /*keepdim=*/true);
  return (x - mean) / std.clamp_min(kEps);
}

// TorchRL's masked form, over the steps "shifted_valid" marks valid.
at::Tensor standardize_valid(const at::Tensor& x, at::Tensor mask,
                             const std::vector<int64_t>& exclude) {
  while (mask.dim() < x.dim()) mask = mask.unsqueeze(-1);
  mask = mask.expand_as(x).to(x.scalar_type());
  const std::vector<int64_t> dims = reduce_dims(x, exclude);
  const at::Tensor count = mask.sum(dims, true).clamp_min(1);
  const at::Tensor loc = (x * mask).sum(dims, true) / count;
  const at::Tensor scale = ((x - loc).pow(2) * mask)
                               .sum(dims, true)
                               .div(count)
                               .sqrt()
                               .clamp_min(1e-4);
  return (x - loc) / scale;
}

// TorchRL's `_broadcast_advantage_to_log_weight`: a per-decision advantage
// `[*B, 1]` spread over a per-token log-weight `[*B, *T, 1]`.
at::Tensor spread_advantage(const at::Tensor& adv, const at::Tensor& lw) {
  if (adv.sizes() == lw.sizes() || adv.dim() < 2 || adv.size(-1) != 1 ||
      lw.size(-1) != 1 || lw.dim() <= adv.dim()) {
    return adv;
  }
  const int64_t b = adv.dim() - 1;
  if (lw.sizes().slice(0, static_cast<size_t>(b)) !=
      adv.sizes().slice(0, static_cast<size_t>(b))) {
    return adv;
  }
  std::vector<int64_t> shape =
      adv.sizes().slice(0, static_cast<size_t>(b)).vec();
  shape.resize(static_cast<size_t>(lw.dim()), 1);
  return adv.reshape(shape).expand(lw.sizes());
}

}  // namespace

ClipPPOLoss::ClipPPOLoss(ProbabilisticTensorDictSequential actor,
                         TensorDictModule critic, ClipPPOLossOptions options)
    : actor_(std::move(actor)),
      critic_(std::move(critic)),
      options_(std::move(options)) {
  check_options(options_);
  keys_.action(actor_.probabilistic_module().sample_key());
  keys_.sample_log_prob(actor_.probabilistic_module().log_prob_key());
}

ClipPPOLoss::ClipPPOLoss(ProbabilisticTensorDictSequential actor,
                         ClipPPOLossOptions options)
    : actor_(std::move(actor)), options_(std::move(options)) {
  TORCH_CHECK_VALUE(options_.critic_coeff() == 0.0,
                    "ClipPPOLoss: without a critic, critic_coeff must be 0, "
                    "got ",
                    options_.critic_coeff());
  check_options(options_);
  keys_.action(actor_.probabilistic_module().sample_key());
  keys_.sample_log_prob(actor_.probabilistic_module().log_prob_key());
}

at::Tensor ClipPPOLoss::advantage(const TensorDict& td) const {
  at::Tensor adv;
  if (td.contains(keys_.advantage())) {
    adv = detail::input_tensor(kWhat, "advantage", td, keys_.advantage());
  } else {
    TORCH_CHECK(critic_.has_value(), kWhat, ": missing key ", keys_.advantage(),
                " (advantage), and no critic to estimate it with");
    ValueEstimator estimator = options_.value_estimator().has_value()
                                   ? *options_.value_estimator()
                                   : ValueEstimator::gae(0.99, 0.95);
    std::vector<std::string> next{"next"};
    for (const std::string& p : keys_.value().parts()) next.push_back(p);
    estimator.keys(EstimatorKeys(estimator.keys())
                       .advantage(keys_.advantage())
                       .value_target(keys_.value_target())
                       .value(keys_.value())
                       .next_value(NestedKey(std::move(next))));
    {
      const c10::NoGradGuard no_grad;
      (*critic_)(td);
      TORCH_CHECK(td.contains("next"), kWhat, ": missing key ",
                  NestedKey("next"),
                  " (the next step, for the advantage estimate)");
      (*critic_)(td.get_tensordict("next"));
    }
    estimator(td);
    adv = td.get(keys_.advantage());
  }
  if (options_.normalize_advantage() && adv.numel() > 1) {
    if (td.contains("shifted_valid")) {
      return standardize_valid(adv, td.get("shifted_valid"),
                               options_.normalize_advantage_exclude_dims());
    }
    return standardize(adv, options_.normalize_advantage_exclude_dims());
  }
  return adv;
}

TensorDict ClipPPOLoss::operator()(const TensorDict& batch) const {
  const TensorDict td = batch.copy();
  at::Tensor adv = advantage(td);

  const at::Tensor prev = detail::input_tensor(
      kWhat, "the stored log-probability", td, keys_.sample_log_prob());
  TORCH_CHECK(!prev.requires_grad(), kWhat,
              ": the stored log-probability (key ", keys_.sample_log_prob(),
              ") requires grad");
  const at::Tensor action =
      detail::input_tensor(kWhat, "action", td, keys_.action());
  TORCH_CHECK(!action.requires_grad(), kWhat, ": the stored action (key ",
              keys_.action(), ") requires grad");
  const std::shared_ptr<distributions::Distribution> dist = actor_.get_dist(td);
  const at::Tensor log_prob = dist->log_prob(action);
  TORCH_CHECK(log_prob.sizes() == prev.sizes(), kWhat,
              ": the log-probability of the actions (shape ",
              detail::shape_str(log_prob.sizes()), ") and the stored one (key ",
              keys_.sample_log_prob(), ", shape ",
              detail::shape_str(prev.sizes()),
              ") differ in shape: their difference would broadcast");
  const at::Tensor log_weight = (log_prob - prev).unsqueeze(-1);
  const at::Tensor kl_approx = (prev - log_prob).unsqueeze(-1);

  adv = spread_advantage(adv, log_weight);
  const std::vector<int64_t> both =
      at::infer_size(adv.sizes(), log_weight.sizes());
  const int64_t n = c10::multiply_integers(both);
  TORCH_CHECK(n <= std::max(adv.numel(), log_weight.numel()), kWhat,
              ": the advantage (key ", keys_.advantage(), ", shape ",
              detail::shape_str(adv.sizes()), ") and the log-weight (shape ",
              detail::shape_str(log_weight.sizes()), ") would broadcast to ",
              detail::shape_str(both),
              ": give the advantage the batch shape + [1] "
              "(advantage.unsqueeze(-1))");

  at::Tensor ess;
  {
    const c10::NoGradGuard no_grad;
    const at::Tensor lw = log_weight.squeeze(-1);
    ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() /
          static_cast<double>(log_weight.size(0));
  }
  const at::Tensor gain1 = log_weight.exp() * adv;
  const double eps = options_.clip_epsilon();
  const at::Tensor clipped =
      log_weight.clamp(std::log1p(-eps), std::log1p(eps));
  const at::Tensor clip_fraction =
      clipped.ne(log_weight).to(log_weight.scalar_type()).mean();
  const at::Tensor gain2 = clipped.exp() * adv;
  const at::Tensor gain = std::get<0>(at::stack({gain1, gain2}, -1).min(-1));

  TensorDict out;
  const auto reduced = [&](const at::Tensor& loss) {
    return detail::reduce_loss(kWhat, loss, td, options_.reduction())
        .squeeze(-1);
  };
  out.set("loss_objective", reduced(-gain));
  out.set("clip_fraction", clip_fraction);
  out.set("kl_approx", kl_approx.detach().mean());
  if (options_.entropy_bonus()) {
    const at::Tensor entropy =
        distributions::entropy_estimate(*dist, options_.samples_mc_entropy(),
                                        options_.generator())
            .unsqueeze(-1);
    out.set("entropy", entropy.detach().mean());
    out.set("loss_entropy", reduced(-options_.entropy_coeff() * entropy));
  }
  if (critic_.has_value() && options_.critic_coeff() > 0.0) {
    critic_loss(td, out);
  }
  out.set("ESS", ess);
  {
    const c10::NoGradGuard no_grad;
    const at::Tensor ratio = log_weight.exp();
    out.set("max_ratio", ratio.max());
    out.set("mean_ratio", ratio.mean());
  }
  return out;
}

void ClipPPOLoss::critic_loss(const TensorDict& batch,
                              const TensorDict& out) const {
  const TensorDict td = options_.separate_losses() ? batch.detach() : batch;
  const at::Tensor target = detail::input_tensor(
      kWhat, "value target", td, keys_.value_target(),
      ": compute it first, e.g. ValueEstimator::gae(gamma, lambda)(batch)");
  at::Tensor old_value;
  if (options_.clip_value()) {
    old_value = detail::input_tensor(kWhat, "the stored value, for clip_value",
                                     td, keys_.value());
  }
  (*critic_)(td);
  const at::Tensor value =
      detail::input_tensor(kWhat, "the critic's value", td, keys_.value());
  TORCH_CHECK(target.sizes() == value.sizes(), kWhat,
              ": the value target (key ", keys_.value_target(), ", shape ",
              detail::shape_str(target.sizes()),
              ") and the critic's value (key ", keys_.value(), ", shape ",
              detail::shape_str(value.sizes()), ") differ in shape");
  at::Tensor loss = distance_loss(target, value, options_.loss_critic_type());
  at::Tensor clip_fraction;
  if (options_.clip_value()) {
    const double c = *options_.clip_value();
    const at::Tensor pre = value - old_value;
    const at::Tensor clipped = pre.clamp(-c, c);
    {
      const c10::NoGradGuard no_grad;
      clip_fraction = pre.ne(clipped).to(value.scalar_type()).mean();
    }
    loss = at::maximum(loss, distance_loss(target, old_value + clipped,
                                           options_.loss_critic_type()));
  }
  // TorchRL's order: the loss, then what it logs.
  out.set("loss_critic",
          detail::reduce_loss(kWhat, options_.critic_coeff() * loss, batch,
                              options_.reduction())
              .squeeze(-1));
  if (clip_fraction.defined()) out.set("value_clip_fraction", clip_fraction);
  if (options_.log_explained_variance()) {
    const c10::NoGradGuard no_grad;
    const at::Tensor t = target.detach();
    const at::Tensor resid =
        at::var(t - value.detach(), {0}, /*unbiased=*/false);
    const at::Tensor total = at::var(t, {0}, /*unbiased=*/false);
    const double eps = t.scalar_type() == at::kDouble
                           ? std::numeric_limits<double>::epsilon()
                           : std::numeric_limits<float>::epsilon();
    out.set("explained_variance", 1.0 - resid / (total + eps));
  }
}

}  // namespace tensordict
