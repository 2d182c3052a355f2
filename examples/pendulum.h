// examples/pendulum.h — a vectorized Pendulum-v1, for the continuous-control
// example (ppo_pendulum.cpp).
//
// Gymnasium's Pendulum-v1, step for step: a pendulum of mass 1 and length 1
// under gravity g = 10, driven by a torque u clipped to [-2, 2], integrated
// with semi-implicit Euler steps of dt = 0.05 s:
//
//   thdot' = clip(thdot + (3 g / (2 l) sin(th) + 3 / (m l^2) u) dt, -8, 8)
//   th'    = th + thdot' dt
//
// The reward is -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2), computed
// on the state before the step (0 is upright and still; the worst step is
// about -16.3). The observation is [cos th, sin th, thdot]. Episodes never
// terminate: they are truncated after 200 steps (Gymnasium's TimeLimit), and
// the reset state is drawn uniformly, th in [-pi, pi] and thdot in [-1, 1].
// As in cartpole.h, environments reset themselves when an episode ends: the
// `("next", "observation")` a step returns is the final observation of the
// episode, and `observation()` is already the first one of the next.
#pragma once

#include <tensordict/tensordict.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace pendulum {

/// Gymnasium's `angle_normalize`: `x` wrapped into [-pi, pi) (Python's `%`
/// is a floored modulo).
inline double angle_normalize(double x) {
  double y = std::fmod(x + M_PI, 2.0 * M_PI);
  if (y < 0.0) y += 2.0 * M_PI;
  return y - M_PI;
}

class PendulumVec {
 public:
  static constexpr int64_t kObsDim = 3;
  static constexpr int64_t kActionDim = 1;
  static constexpr double kMaxTorque = 2.0;
  static constexpr int64_t kMaxSteps = 200;

  PendulumVec(int64_t num_envs, uint64_t seed)
      : num_envs_(num_envs),
        rng_(seed),
        state_(num_envs),
        steps_(num_envs),
        returns_(num_envs) {
    for (int64_t e = 0; e < num_envs_; ++e) reset_env(e);
  }

  [[nodiscard]] int64_t num_envs() const { return num_envs_; }

  /// The current observations, float32 `[E, 3]` (a new tensor).
  [[nodiscard]] at::Tensor observation() const {
    at::Tensor obs = torch::empty({num_envs_, kObsDim});
    float* p = obs.data_ptr<float>();
    for (int64_t e = 0; e < num_envs_; ++e)
      write_obs(state_[e], p + e * kObsDim);
    return obs;
  }

  /// Advances every env by one step with the torques `action` (float
  /// `[E, 1]`, clipped to [-2, 2]). Returns a `[E]` dict with
  /// `("next", "observation")` `[E, 3]` f32, `("next", "reward")` `[E, 1]`
  /// f32 and `("next", "done" | "terminated" | "truncated")` `[E, 1]` bool
  /// (terminated is always false). Finished episodes' returns are appended
  /// to `finished_returns()`.
  tensordict::TensorDict step(const at::Tensor& action) {
    TORCH_CHECK(action.dim() == 2 && action.size(0) == num_envs_ &&
                    action.size(1) == kActionDim,
                "PendulumVec::step: expected actions of shape [", num_envs_,
                ", 1], got ", action.sizes());
    at::Tensor act = action.to(at::kFloat).contiguous();
    const float* a = act.data_ptr<float>();
    at::Tensor next_obs = torch::empty({num_envs_, kObsDim});
    at::Tensor reward = torch::empty({num_envs_, 1});
    at::Tensor terminated = torch::zeros({num_envs_, 1}, at::kBool);
    at::Tensor truncated = torch::zeros({num_envs_, 1}, at::kBool);
    float* obs_p = next_obs.data_ptr<float>();
    float* rew_p = reward.data_ptr<float>();
    bool* trunc_p = truncated.data_ptr<bool>();
    for (int64_t e = 0; e < num_envs_; ++e) {
      TORCH_CHECK(!std::isnan(a[e]), "PendulumVec::step: the action of env ", e,
                  " is NaN");
      std::array<double, 2>& s = state_[e];
      const double u =
          std::clamp(static_cast<double>(a[e]), -kMaxTorque, kMaxTorque);
      const double r = -advance(s, u);
      write_obs(s, obs_p + e * kObsDim);
      rew_p[e] = static_cast<float>(r);
      steps_[e] += 1;
      returns_[e] += r;
      const bool trunc = steps_[e] >= kMaxSteps;
      trunc_p[e] = trunc;
      if (trunc) {
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
  static constexpr double kMaxSpeed = 8.0;
  static constexpr double kDt = 0.05;
  static constexpr double kG = 10.0;
  static constexpr double kM = 1.0;
  static constexpr double kL = 1.0;

  // One step of Gymnasium's dynamics from s = (th, thdot) with torque u (in
  // [-2, 2]); returns the step's cost, of the state before the step.
  static double advance(std::array<double, 2>& s, double u) {
    const double th = s[0], thdot = s[1];
    const double th_n = angle_normalize(th);
    const double cost = th_n * th_n + 0.1 * thdot * thdot + 0.001 * u * u;
    double new_thdot =
        thdot +
        (3.0 * kG / (2.0 * kL) * std::sin(th) + 3.0 / (kM * kL * kL) * u) * kDt;
    new_thdot = std::clamp(new_thdot, -kMaxSpeed, kMaxSpeed);
    s[0] = th + new_thdot * kDt;
    s[1] = new_thdot;
    return cost;
  }

  static void write_obs(const std::array<double, 2>& s, float* p) {
    p[0] = static_cast<float>(std::cos(s[0]));
    p[1] = static_cast<float>(std::sin(s[0]));
    p[2] = static_cast<float>(s[1]);
  }

  void reset_env(int64_t e) {
    std::uniform_real_distribution<double> th(-M_PI, M_PI);
    std::uniform_real_distribution<double> thdot(-1.0, 1.0);
    state_[e][0] = th(rng_);
    state_[e][1] = thdot(rng_);
    steps_[e] = 0;
    returns_[e] = 0.0;
  }

  int64_t num_envs_;
  std::mt19937_64 rng_;
  std::vector<std::array<double, 2>> state_;
  std::vector<int64_t> steps_;
  std::vector<double> returns_;
  std::vector<double> finished_returns_;
};

}  // namespace pendulum
