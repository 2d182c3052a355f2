// examples/cartpole.h — a vectorized CartPole-v1, shared by the RL examples
// and the Python reference tests (tests/python_*_test.cpp, which include it
// through an include directory).
//
// The classic cart-pole of Barto, Sutton and Anderson with Gymnasium's
// CartPole-v1 constants: Euler integration with tau = 0.02 s, a force of
// ±10 N, reward 1 per step (the terminal step included), termination when
// |x| > 2.4 or |theta| > 12 degrees, truncation after 500 steps, and a reset
// state drawn uniformly from [-0.05, 0.05]^4. Environments reset themselves
// when an episode ends (like Gymnasium's vector envs in "same step" mode): the
// `("next", "observation")` a step returns is the final observation of the
// episode, and `observation()` is already the first one of the next episode.
#pragma once

#include <tensordict/tensordict.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace cartpole {

class CartPoleVec {
 public:
  static constexpr int64_t kObsDim = 4;
  static constexpr int64_t kNumActions = 2;
  static constexpr int64_t kMaxSteps = 500;

  CartPoleVec(int64_t num_envs, uint64_t seed)
      : num_envs_(num_envs),
        rng_(seed),
        state_(num_envs),
        steps_(num_envs),
        returns_(num_envs) {
    for (int64_t e = 0; e < num_envs_; ++e) reset_env(e);
  }

  [[nodiscard]] int64_t num_envs() const { return num_envs_; }

  /// The current observations, float32 `[E, 4]` (a new tensor).
  [[nodiscard]] at::Tensor observation() const {
    at::Tensor obs = torch::empty({num_envs_, kObsDim});
    float* p = obs.data_ptr<float>();
    for (int64_t e = 0; e < num_envs_; ++e) {
      for (int64_t i = 0; i < kObsDim; ++i) {
        p[e * kObsDim + i] = static_cast<float>(state_[e][i]);
      }
    }
    return obs;
  }

  /// Advances every env by one step with `action` (int64 `[E]`, 0 = push
  /// left, 1 = push right). Returns a `[E]` dict with
  /// `("next", "observation")` `[E, 4]` f32, `("next", "reward")` `[E, 1]` f32
  /// and `("next", "done" | "terminated" | "truncated")` `[E, 1]` bool.
  /// Finished episodes' returns are appended to `finished_returns()`.
  tensordict::TensorDict step(const at::Tensor& action) {
    TORCH_CHECK(action.dim() == 1 && action.size(0) == num_envs_,
                "CartPoleVec::step: expected actions of shape [", num_envs_,
                "], got ", action.sizes());
    at::Tensor act = action.to(at::kLong).contiguous();
    const int64_t* a = act.data_ptr<int64_t>();
    at::Tensor next_obs = torch::empty({num_envs_, kObsDim});
    at::Tensor reward = torch::ones({num_envs_, 1});
    at::Tensor terminated = torch::zeros({num_envs_, 1}, at::kBool);
    at::Tensor truncated = torch::zeros({num_envs_, 1}, at::kBool);
    float* obs_p = next_obs.data_ptr<float>();
    bool* term_p = terminated.data_ptr<bool>();
    bool* trunc_p = truncated.data_ptr<bool>();
    for (int64_t e = 0; e < num_envs_; ++e) {
      TORCH_CHECK(a[e] == 0 || a[e] == 1, "CartPoleVec::step: action ", a[e],
                  " of env ", e, " is not 0 or 1");
      std::array<double, 4>& s = state_[e];
      advance(s, a[e]);
      steps_[e] += 1;
      returns_[e] += 1.0;
      const bool term = s[0] < -kXThreshold || s[0] > kXThreshold ||
                        s[2] < -kThetaThreshold || s[2] > kThetaThreshold;
      const bool trunc = !term && steps_[e] >= kMaxSteps;
      for (int64_t i = 0; i < kObsDim; ++i) {
        obs_p[e * kObsDim + i] = static_cast<float>(s[i]);
      }
      term_p[e] = term;
      trunc_p[e] = trunc;
      if (term || trunc) {
        finished_returns_.push_back(returns_[e]);
        reset_env(e);
      }
    }
    at::Tensor done = terminated.logical_or(truncated);
    return tensordict::TensorDict({{{"next", "observation"}, next_obs},
                                   {{"next", "reward"}, reward},
                                   {{"next", "done"}, done},
                                   {{"next", "terminated"}, terminated},
                                   {{"next", "truncated"}, truncated}},
                                  {num_envs_});
  }

  /// Returns of every episode finished so far, in order.
  [[nodiscard]] const std::vector<double>& finished_returns() const {
    return finished_returns_;
  }

 private:
  static constexpr double kGravity = 9.8;
  static constexpr double kMassCart = 1.0;
  static constexpr double kMassPole = 0.1;
  static constexpr double kTotalMass = kMassCart + kMassPole;
  static constexpr double kLength = 0.5;  // half the pole's length
  static constexpr double kPoleMassLength = kMassPole * kLength;
  static constexpr double kForceMag = 10.0;
  static constexpr double kTau = 0.02;
  static constexpr double kXThreshold = 2.4;
  static constexpr double kThetaThreshold = 12.0 * 2.0 * M_PI / 360.0;

  static void advance(std::array<double, 4>& s, int64_t action) {
    const double x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const double force = action == 1 ? kForceMag : -kForceMag;
    const double cos_t = std::cos(theta), sin_t = std::sin(theta);
    const double temp =
        (force + kPoleMassLength * theta_dot * theta_dot * sin_t) / kTotalMass;
    const double theta_acc =
        (kGravity * sin_t - cos_t * temp) /
        (kLength * (4.0 / 3.0 - kMassPole * cos_t * cos_t / kTotalMass));
    const double x_acc =
        temp - kPoleMassLength * theta_acc * cos_t / kTotalMass;
    s[0] = x + kTau * x_dot;
    s[1] = x_dot + kTau * x_acc;
    s[2] = theta + kTau * theta_dot;
    s[3] = theta_dot + kTau * theta_acc;
  }

  void reset_env(int64_t e) {
    std::uniform_real_distribution<double> u(-0.05, 0.05);
    for (double& v : state_[e]) v = u(rng_);
    steps_[e] = 0;
    returns_[e] = 0.0;
  }

  int64_t num_envs_;
  std::mt19937_64 rng_;
  std::vector<std::array<double, 4>> state_;
  std::vector<int64_t> steps_;
  std::vector<double> returns_;
  std::vector<double> finished_returns_;
};

}  // namespace cartpole
