// CartPoleEnv (tensordict/envs.h): Gymnasium's CartPole-v1, vectorized.
// The simulators' state lives here in double precision, as Gymnasium's;
// the hooks read the action and write the observation rows in place.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "envs/env_access.h"
#include "envs/flags.h"
#include "tensordict/envs.h"

namespace tensordict {

namespace {

constexpr double kGravity = 9.8;
constexpr double kMassCart = 1.0;
constexpr double kMassPole = 0.1;
constexpr double kTotalMass = kMassCart + kMassPole;
constexpr double kLength = 0.5;  // half the pole's length
constexpr double kPoleMassLength = kMassPole * kLength;
constexpr double kForceMag = 10.0;
constexpr double kTau = 0.02;
constexpr double kXThreshold = 2.4;
constexpr double kThetaThreshold = 12.0 * 2.0 * M_PI / 360.0;
constexpr int64_t kMaxSteps = 500;

std::vector<int64_t> with(c10::IntArrayRef batch, int64_t last) {
  std::vector<int64_t> shape(batch.begin(), batch.end());
  shape.push_back(last);
  return shape;
}

// One Euler step of the cart-pole from `s` (x, x_dot, theta, theta_dot).
void advance(double* s, bool push_right) {
  const double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
  const double force = push_right ? kForceMag : -kForceMag;
  const double cos_t = std::cos(theta), sin_t = std::sin(theta);
  const double temp =
      (force + kPoleMassLength * theta_dot * theta_dot * sin_t) / kTotalMass;
  const double theta_acc =
      (kGravity * sin_t - cos_t * temp) /
      (kLength * (4.0 / 3.0 - kMassPole * cos_t * cos_t / kTotalMass));
  const double x_acc = temp - kPoleMassLength * theta_acc * cos_t / kTotalMass;
  s[0] = x + kTau * x_dot;
  s[1] = x_dot + kTau * x_acc;
  s[2] = theta + kTau * theta_dot;
  s[3] = theta_dot + kTau * theta_acc;
}

}  // namespace

CartPoleEnv::CartPoleEnv(std::vector<int64_t> batch_size,
                         bool categorical_action_encoding)
    : EnvBase(std::move(batch_size)),
      categorical_(categorical_action_encoding),
      generator_(at::make_generator<at::CPUGeneratorImpl>(0)) {
  const std::vector<int64_t> batch(this->batch_size().begin(),
                                   this->batch_size().end());
  const int64_t n = c10::multiply_integers(batch);
  state_.assign(static_cast<size_t>(n) * 4, 0.0);
  steps_.assign(static_cast<size_t>(n), 0);
  draws_ = at::empty({n, 4}, at::kDouble);
  // Gymnasium's observation space: twice the termination thresholds, and
  // float32's largest value for the velocities.
  const float big = std::numeric_limits<float>::max();
  const at::Tensor high =
      at::tensor({static_cast<float>(2 * kXThreshold), big,
                  static_cast<float>(2 * kThetaThreshold), big})
          .expand(with(batch, 4))
          .contiguous();
  set_observation_spec(Composite(
      {{"observation", Bounded(-high, high, with(batch, 4), at::kFloat)}},
      batch));
  if (categorical_) {
    set_action_spec(Categorical(2, batch, at::kLong));
  } else {
    set_action_spec(OneHot(2, with(batch, 2), at::kBool));
  }
  const Categorical flag(2, with(batch, 1), at::kBool);
  set_done_spec(Composite(
      {{"done", flag}, {"terminated", flag}, {"truncated", flag}}, batch));
}

void CartPoleEnv::set_seed_impl(uint64_t seed) {
  generator_.set_current_seed(seed);
}

void CartPoleEnv::reset_impl(const TensorDict& td) {
  const bool* mask =
      td.contains("_reset") ? detail::flag_bytes(td.get("_reset")) : nullptr;
  draws_.uniform_(-0.05, 0.05, generator_);
  const double* draw = draws_.data_ptr<double>();
  float* obs = td.get("observation").data_ptr<float>();
  for (size_t e = 0; e < steps_.size(); ++e) {
    if (mask != nullptr && !mask[e]) continue;
    for (size_t i = 0; i < 4; ++i) {
      state_[e * 4 + i] = draw[e * 4 + i];
      obs[e * 4 + i] = static_cast<float>(draw[e * 4 + i]);
    }
    steps_[e] = 0;
  }
}

void CartPoleEnv::step_impl(const TensorDict& td, const TensorDict& next) {
  const int64_t n = static_cast<int64_t>(steps_.size());
  const at::Tensor action = categorical_
                                ? td.get("action").to(at::kLong).contiguous()
                                : td.get("action").to(at::kBool).contiguous();
  const bool* stepping =
      td.contains("_step") ? detail::flag_bytes(td.get("_step")) : nullptr;
  float* obs = next.get("observation").data_ptr<float>();
  float* reward = next.get("reward").data_ptr<float>();
  bool* terminated = next.get("terminated").data_ptr<bool>();
  bool* truncated = next.get("truncated").data_ptr<bool>();
  for (int64_t e = 0; e < n; ++e) {
    if (stepping != nullptr && !stepping[e]) continue;
    bool right = false;
    if (categorical_) {
      const int64_t a = action.data_ptr<int64_t>()[e];
      TORCH_CHECK_VALUE(a == 0 || a == 1, "CartPoleEnv: the action of env ", e,
                        " is ", a, ", not 0 or 1");
      right = a == 1;
    } else {
      const bool* a = action.data_ptr<bool>() + 2 * e;
      TORCH_CHECK_VALUE(a[0] != a[1], "CartPoleEnv: the action of env ", e,
                        " is not one-hot: [", a[0], ", ", a[1], "]");
      right = a[1];
    }
    double* s = &state_[static_cast<size_t>(e) * 4];
    advance(s, right);
    steps_[e] += 1;
    const bool term = s[0] < -kXThreshold || s[0] > kXThreshold ||
                      s[2] < -kThetaThreshold || s[2] > kThetaThreshold;
    for (int64_t i = 0; i < 4; ++i) obs[e * 4 + i] = static_cast<float>(s[i]);
    reward[e] = 1.0F;
    terminated[e] = term;
    truncated[e] = !term && steps_[e] >= kMaxSteps;
  }
}

void CartPoleEnv::state_dict_impl(TensorDict& out) const {
  const auto n = static_cast<int64_t>(steps_.size());
  out.set("generator", detail::generator_state(generator_));
  out.set("physics", at::tensor(state_, at::kDouble).view({n, 4}));
  out.set("steps", at::tensor(steps_, at::kLong));
}

void CartPoleEnv::load_state_dict_impl(const TensorDict& state) {
  detail::set_generator_state(generator_, state.get("generator"), "generator");
  const at::Tensor physics = state.get("physics").contiguous();
  const at::Tensor steps = state.get("steps").contiguous();
  std::copy_n(physics.data_ptr<double>(), state_.size(), state_.begin());
  std::copy_n(steps.data_ptr<int64_t>(), steps_.size(), steps_.begin());
}

}  // namespace tensordict
