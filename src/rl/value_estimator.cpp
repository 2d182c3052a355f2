// The TensorDict forms of the return estimators (tensordict/returns.h):
// ValueEstimator, which reads and writes a rollout's keys and calls the
// functions on tensors (returns.cpp); multi_step; and the key reading and
// output checks that ValueEstimator and RolloutBuffer share
// (rl/returns_keys.h).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "rl/returns_keys.h"
#include "tensordict/returns.h"

namespace tensordict {

using detail::dtype_name;
using detail::shape_str;

// ---- ValueEstimator -----------------------------------------------------------

ValueEstimator::ValueEstimator(Kind kind, double gamma, double lambda,
                               double rho_thresh, double c_thresh)
    : kind_(kind),
      gamma_(gamma),
      lambda_(lambda),
      rho_thresh_(rho_thresh),
      c_thresh_(c_thresh) {}

ValueEstimator ValueEstimator::td0(double gamma) {
  return {Kind::kTD0, gamma, 0.0, 1.0, 1.0};
}
ValueEstimator ValueEstimator::td1(double gamma) {
  return {Kind::kTD1, gamma, 1.0, 1.0, 1.0};
}
ValueEstimator ValueEstimator::td_lambda(double gamma, double lambda) {
  return {Kind::kTDLambda, gamma, lambda, 1.0, 1.0};
}
ValueEstimator ValueEstimator::gae(double gamma, double lambda) {
  return {Kind::kGAE, gamma, lambda, 1.0, 1.0};
}
ValueEstimator ValueEstimator::vtrace(double gamma, double rho_thresh,
                                      double c_thresh) {
  return {Kind::kVTrace, gamma, 1.0, rho_thresh, c_thresh};
}

const char* ValueEstimator::name() const noexcept {
  switch (kind_) {
    case Kind::kTD0:
      return "TD0Estimator";
    case Kind::kTD1:
      return "TD1Estimator";
    case Kind::kTDLambda:
      return "TDLambdaEstimator";
    case Kind::kGAE:
      return "GAE";
    case Kind::kVTrace:
      return "VTrace";
  }
  return "ValueEstimator";
}

AdvantageEstimate ValueEstimator::run(const TensorDict& data, int64_t time_dim,
                                      const char* fn,
                                      const char* before) const {
  const EstimatorKeys& k = keys_;
  const detail::EstimatorInputs x(data, k, fn, before);
  const bool numeric = kind_ == Kind::kGAE;
  const at::Tensor value = x.value();
  const at::Tensor next_value = x.tensor("next value", k.next_value(), value);
  const at::Tensor reward = x.tensor("reward", k.reward(), value);
  const at::Tensor terminated =
      x.flag("terminated", k.terminated(), value, numeric);
  const at::Tensor done = x.done(value, numeric);
  at::Tensor log_pi;
  at::Tensor log_mu;
  if (kind_ == Kind::kVTrace) {
    log_pi = x.tensor("log prob", k.log_prob(), value);
    log_mu = x.tensor("sample log prob", k.sample_log_prob(), value);
  }
  const at::Tensor steps_to_next =
      kind_ == Kind::kTD0
          ? x.optional("steps to next obs", k.steps_to_next_obs())
          : at::Tensor();
  // The leaves' leading dims are the batch dims: a batch dim is the same
  // dim of every input.
  const int64_t nd = data.batch_dims();
  TORCH_CHECK_INDEX(time_dim >= -nd && time_dim < nd, fn, ": time_dim ",
                    time_dim, " is not a batch dim of the data (batch size ",
                    shape_str(data.batch_size()), ")");
  const int64_t dim = time_dim < 0 ? time_dim + nd : time_dim;
  switch (kind_) {
    case Kind::kTD0: {
      at::Tensor target;
      if (steps_to_next.defined()) {
        // TorchRL's gamma ** steps_to_next_obs, one discount per step.
        TORCH_CHECK(steps_to_next.numel() == value.numel(), fn, ": key ",
                    k.steps_to_next_obs(), ": expected ", value.numel(),
                    " elements (like ", k.value(), "), got shape ",
                    shape_str(steps_to_next.sizes()));
        const at::Tensor discount =
            at::pow(gamma_, steps_to_next.detach()
                                .to(at::kCPU, at::kDouble)
                                .reshape(value.sizes()));
        target =
            td0_return(1.0,
                       next_value.detach().to(at::kCPU, at::kDouble) * discount,
                       reward, terminated)
                .to(next_value.device(), next_value.scalar_type());
      } else {
        target = td0_return(gamma_, next_value, reward, terminated);
      }
      return {target - value.detach(), target};
    }
    case Kind::kTD1: {
      const at::Tensor target =
          td1_return(gamma_, next_value, reward, done, terminated, dim);
      return {target - value.detach(), target};
    }
    case Kind::kTDLambda: {
      const at::Tensor target = td_lambda_return(gamma_, lambda_, next_value,
                                                 reward, done, terminated, dim);
      return {target - value.detach(), target};
    }
    case Kind::kGAE:
      return tensordict::gae(reward, value, next_value, done, terminated,
                             gamma_, lambda_, dim);
    case Kind::kVTrace:
      return tensordict::vtrace(gamma_, log_pi, log_mu, value, next_value,
                                reward, done, terminated, rho_thresh_,
                                c_thresh_, dim);
  }
  TORCH_CHECK(false, fn, ": unknown estimator");
}

AdvantageEstimate ValueEstimator::estimate(const TensorDict& data) const {
  return run(data, time_dim_.value_or(data.batch_dims() - 1), name(),
             "calling the estimator");
}

const TensorDict& ValueEstimator::operator()(const TensorDict& data) const {
  detail::check_estimator_outputs(data, keys_, name());
  AdvantageEstimate res = estimate(data);
  data.set(keys_.advantage(), res.advantage);
  data.set(keys_.value_target(), res.value_target);
  return data;
}

// ---- multi_step ----------------------------------------------------------------

namespace {

// The tensor at `key` of `data`, shaped `[*B, T]` or `[*B, T, 1]`.
at::Tensor step_tensor(const TensorDict& data, const NestedKey& key,
                       const char* role) {
  at::Tensor t = detail::input_tensor("multi_step", role, data, key);
  const c10::IntArrayRef batch = data.batch_size();
  const bool fits =
      t.sizes() == batch ||
      (t.dim() == static_cast<int64_t>(batch.size()) + 1 && t.size(-1) == 1 &&
       t.sizes().slice(0, batch.size()) == batch);
  std::vector<int64_t> with_one = batch.vec();
  with_one.push_back(1);
  TORCH_CHECK(fits, "multi_step: key ", key, " (", role, "): expected shape ",
              shape_str(batch), " or ", shape_str(with_one), ", got ",
              shape_str(t.sizes()));
  return t;
}

}  // namespace

TensorDict multi_step(const TensorDict& data, int64_t n_steps, double gamma,
                      const MultiStepKeys& keys) {
  TORCH_CHECK_VALUE(n_steps >= 1,
                    "multi_step: n_steps must be at least 1, got ", n_steps);
  TORCH_CHECK_VALUE(gamma > 0.0 && gamma <= 1.0,
                    "multi_step: gamma must be in (0, 1], got ", gamma);
  TORCH_CHECK(data.batch_dims() >= 1,
              "multi_step: the data needs a time dim (its last batch dim), "
              "got batch size []");
  TORCH_CHECK(
      keys.reward().is_nested(), "multi_step: the reward key ", keys.reward(),
      " must be under the next step's dict, such as ('next', 'reward')");
  const at::Tensor reward = step_tensor(data, keys.reward(), "reward");
  TORCH_CHECK_TYPE(at::isFloatingType(reward.scalar_type()), "multi_step: key ",
                   keys.reward(),
                   " (reward) must be a floating-point tensor, got ",
                   dtype_name(reward.scalar_type()));
  const at::Tensor done = step_tensor(data, keys.done(), "done");
  TORCH_CHECK_TYPE(done.scalar_type() == at::kBool, "multi_step: key ",
                   keys.done(), " (done) must be a bool tensor, got ",
                   dtype_name(done.scalar_type()));
  const NestedKey parent(std::vector<std::string>(
      keys.reward().parts().begin(), keys.reward().parts().end() - 1));
  const TensorDict next = data.get_tensordict(parent);

  const c10::IntArrayRef batch = data.batch_size();
  const int64_t steps = batch.back();
  const int64_t rows = steps == 0 ? 0 : data.numel() / steps;
  const at::Tensor r = reward.detach().to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor d = done.detach().to(at::kCPU).contiguous();
  at::Tensor summed = at::empty({rows, steps}, r.options());
  at::Tensor count =
      at::empty({rows, steps}, at::TensorOptions().dtype(at::kLong));
  at::Tensor index = at::empty({rows, steps}, count.options());
  const double* rp = r.data_ptr<double>();
  const bool* dp = d.data_ptr<bool>();
  double* sp = summed.data_ptr<double>();
  int64_t* kp = count.data_ptr<int64_t>();
  int64_t* ip = index.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t base = row * steps;
    int64_t end = steps - 1;  // the last step of the current episode
    for (int64_t t = steps - 1; t >= 0; --t) {
      if (dp[base + t]) end = t;
      const int64_t k = std::min(n_steps, end - t + 1);
      double sum = 0.0;
      double discount = 1.0;
      for (int64_t i = 0; i < k; ++i, discount *= gamma) {
        sum += discount * rp[base + t + i];
      }
      sp[base + t] = sum;
      kp[base + t] = k;
      ip[base + t] = base + t + k - 1;
    }
  }

  // Every other leaf of the next step's dict, from the window's last step.
  const NestedKey own(keys.reward().parts().back());
  const TensorDict gathered = next.exclude({own})
                                  .reshape({rows * steps})
                                  .index({index.reshape({-1})})
                                  .reshape(batch);
  TensorDict out = data.copy();
  out.set(parent, gathered);
  out.set(keys.original_reward(), reward);
  out.set(
      keys.reward(),
      summed.reshape(reward.sizes()).to(reward.device(), reward.scalar_type()));
  const at::Tensor k = count.reshape(batch).to(done.device());
  out.set(keys.steps_to_next_obs(), k);
  out.set(keys.gamma(), at::pow(gamma, k.to(at::kDouble)).to(at::kFloat));
  out.set(keys.nonterminal(), k.ne(1));
  return out;
}

// ---- The TensorDict forms' keys (rl/returns_keys.h) ---------------------------

namespace detail {

at::Tensor input_tensor(const char* fn, const char* role,
                        const TensorDict& data, const NestedKey& key,
                        const char* hint, const char* hint_end) {
  const Node* node = lookup(TensorDictImpl::of(data), key);
  TORCH_CHECK(node != nullptr, fn, ": missing key ", key, " (", role, ")", hint,
              hint_end);
  TORCH_CHECK(!node->is_dict(), fn, ": key ", key, " (", role,
              ") holds a TensorDict, expected a tensor");
  return node->tensor;
}

at::Tensor EstimatorInputs::fetch(const char* role, const NestedKey& key,
                                  bool is_value) const {
  return is_value ? input_tensor(fn_, role, data_, key,
                                 ": set the critic's values, e.g. from one "
                                 "batched forward pass, before ",
                                 before_)
                  : input_tensor(fn_, role, data_, key);
}

void EstimatorInputs::check_shape(const NestedKey& key, const at::Tensor& t,
                                  const at::Tensor& value) const {
  TORCH_CHECK(t.sizes() == value.sizes(), fn_, ": key ", key,
              ": expected shape ", shape_str(value.sizes()), " (like ",
              keys_.value(), "), got ", shape_str(t.sizes()));
}

at::Tensor EstimatorInputs::value() const {
  at::Tensor v = fetch("value", keys_.value(), true);
  TORCH_CHECK_TYPE(at::isFloatingType(v.scalar_type()), fn_, ": key ",
                   keys_.value(),
                   ": the value must be a floating-point tensor, got ",
                   dtype_name(v.scalar_type()));
  return v;
}

at::Tensor EstimatorInputs::tensor(const char* role, const NestedKey& key,
                                   const at::Tensor& value) const {
  at::Tensor t = fetch(role, key, key == keys_.next_value());
  check_shape(key, t, value);
  return t;
}

at::Tensor EstimatorInputs::flag(const char* role, const NestedKey& key,
                                 const at::Tensor& value, bool numeric) const {
  at::Tensor t = tensor(role, key, value);
  TORCH_CHECK_TYPE(numeric || t.scalar_type() == at::kBool, fn_, ": key ", key,
                   " (", role, ") must be a bool tensor, got ",
                   dtype_name(t.scalar_type()));
  return t;
}

at::Tensor EstimatorInputs::done(const at::Tensor& value, bool numeric) const {
  at::Tensor done = flag("done", keys_.done(), value, numeric);
  if (lookup(TensorDictImpl::of(data_), keys_.truncated()) == nullptr) {
    return done;
  }
  const at::Tensor truncated =
      flag("truncated", keys_.truncated(), value, numeric);
  return done.to(at::kBool).logical_or(truncated);
}

at::Tensor EstimatorInputs::optional(const char* role,
                                     const NestedKey& key) const {
  if (lookup(TensorDictImpl::of(data_), key) == nullptr) return {};
  return fetch(role, key, false);
}

void check_estimator_outputs(const TensorDict& data, const EstimatorKeys& keys,
                             const char* fn) {
  auto check = [&](const NestedKey& key, const char* role) {
    const std::vector<std::string>& parts = key.parts();
    for (size_t i = 1; i <= parts.size(); ++i) {
      const NestedKey prefix(std::vector<std::string>(
          parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i)));
      const Node* n = lookup(TensorDictImpl::of(data), prefix);
      if (n == nullptr) return;
      TORCH_CHECK(i == parts.size() || n->is_dict(), fn, ": cannot store the ",
                  role, " at ", key, ": ", prefix, " holds a tensor");
      TORCH_CHECK(i < parts.size() || !n->is_dict(), fn, ": cannot store the ",
                  role, " at ", key, ": it holds a TensorDict");
    }
  };
  check(keys.advantage(), "advantage");
  check(keys.value_target(), "value target");
}

}  // namespace detail

}  // namespace tensordict
