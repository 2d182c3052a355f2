// PendulumEnv (tensordict/envs.h): TorchRL's PendulumEnv, stateless. Every
// value is computed in float32 in the order of TorchRL's tensor
// expressions, so that a trajectory matches TorchRL's.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/sin_cpu_dispatch.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <utility>

#include "envs/env_access.h"
#include "envs/flags.h"
#include "tensordict/envs.h"

namespace tensordict {

namespace {

// The physical constants, in TorchRL's gen_params order.
const char* const kParams[] = {"max_speed", "max_torque", "dt", "g", "m", "l"};

constexpr auto kPi = static_cast<float>(M_PI);
constexpr auto kTwoPi = static_cast<float>(2 * M_PI);

// TorchRL's angle_normalize: ((x + pi) % (2 pi)) - pi, Python's floored
// remainder in float32.
float angle_normalize(float x) {
  const float y = x + kPi;
  float r = std::fmod(y, kTwoPi);
  if (r != 0.0F && r < 0.0F) r += kTwoPi;
  return r - kPi;
}

// The keys a step reads and writes, made once (each NestedKey holds a
// vector: a step that made them would allocate some twenty per env).
struct Keys {
  NestedKey th{"th"}, thdot{"thdot"}, action{"action"}, reward{"reward"},
      step{"_step"}, reset{"_reset"};
  std::vector<NestedKey> params;
  Keys() {
    for (const char* name : kParams)
      params.emplace_back(NestedKey({"params", name}));
  }
};
const Keys& keys() {
  static const Keys k;
  return k;
}

// A float32 view of `td`'s `key` as a contiguous tensor: the tensor itself
// when it is one (without a call through the dispatcher: a step makes nine
// per env).
at::Tensor floats(const TensorDict& td, const NestedKey& key) {
  at::Tensor t = td.get(key);
  if (t.scalar_type() == at::kFloat && t.is_contiguous()) return t;
  return t.to(at::kFloat).contiguous();
}

}  // namespace

PendulumEnv::PendulumEnv(std::vector<int64_t> batch_size, double g)
    : EnvBase(std::move(batch_size)),
      g_(g),
      generator_(at::make_generator<at::CPUGeneratorImpl>(0)) {
  const std::vector<int64_t> batch(this->batch_size().begin(),
                                   this->batch_size().end());
  Composite params(batch);
  for (const char* key : kParams) params.set(key, Unbounded(batch));
  const Composite observation({{"th", Bounded(-M_PI, M_PI, batch)},
                               {"thdot", Bounded(-8.0, 8.0, batch)},
                               {"params", params}},
                              batch);
  set_observation_spec(observation);
  set_state_spec(observation);
  std::vector<int64_t> action_shape = batch;
  action_shape.push_back(1);
  set_action_spec(Bounded(-2.0, 2.0, action_shape));
  th_draw_ = at::empty(batch);
  thdot_draw_ = at::empty(batch);
}

void PendulumEnv::set_seed_impl(uint64_t seed) {
  generator_.set_current_seed(seed);
}

void PendulumEnv::reset_impl(const TensorDict& td) {
  const bool* mask = td.contains(keys().reset)
                         ? detail::flag_bytes(td.get(keys().reset))
                         : nullptr;
  // TorchRL draws every row, "th" then "thdot": torch.rand(shape) * (high -
  // low) + low.
  th_draw_.uniform_(0.0, 1.0, generator_);
  thdot_draw_.uniform_(0.0, 1.0, generator_);
  const float* u_th = th_draw_.data_ptr<float>();
  const float* u_thdot = thdot_draw_.data_ptr<float>();
  float* th = td.get(keys().th).data_ptr<float>();
  float* thdot = td.get(keys().thdot).data_ptr<float>();
  const float values[] = {8.0F, 2.0F, 0.05F, static_cast<float>(g_),
                          1.0F, 1.0F};
  float* params[6];
  for (size_t i = 0; i < 6; ++i) {
    params[i] = td.get(keys().params[i]).data_ptr<float>();
  }
  for (int64_t e = 0, n = th_draw_.numel(); e < n; ++e) {
    if (mask != nullptr && !mask[e]) continue;
    th[e] = u_th[e] * kTwoPi + -kPi;
    thdot[e] = u_thdot[e] * 2.0F + -1.0F;
    for (size_t i = 0; i < 6; ++i) params[i][e] = values[i];
  }
}

void PendulumEnv::step_impl(const TensorDict& td, const TensorDict& next) {
  const at::Tensor th_t = floats(td, keys().th);
  const at::Tensor thdot_t = floats(td, keys().thdot);
  const at::Tensor action_t = floats(td, keys().action);
  at::Tensor param_t[6];
  float* next_params[6];
  for (size_t i = 0; i < 6; ++i) {
    param_t[i] = floats(td, keys().params[i]);
    next_params[i] = next.get(keys().params[i]).data_ptr<float>();
  }
  const float* th = th_t.data_ptr<float>();
  const float* thdot = thdot_t.data_ptr<float>();
  const float* action = action_t.data_ptr<float>();
  const float* max_speed = param_t[0].data_ptr<float>();
  const float* max_torque = param_t[1].data_ptr<float>();
  const float* dt = param_t[2].data_ptr<float>();
  const float* g = param_t[3].data_ptr<float>();
  const float* m = param_t[4].data_ptr<float>();
  const float* l = param_t[5].data_ptr<float>();
  const bool* stepping = td.contains(keys().step)
                             ? detail::flag_bytes(td.get(keys().step))
                             : nullptr;
  // sin(th) from torch's kernel, as TorchRL's `th.sin()`: its vectorized
  // sin (SLEEF) and std::sin differ by an ulp now and then, which parts the
  // trajectories by 1e-5 within 200 steps. Into th_draw_, a scratch buffer
  // outside reset_impl, so that a step allocates nothing; straight to the
  // CPU kernel, and without a reshape when "th" has the batch's shape (a
  // step of a SerialEnv of Pendulums makes one per env).
  const at::Tensor th_in =
      th_t.sizes() == th_draw_.sizes() ? th_t : th_t.reshape(th_draw_.sizes());
  at::cpu::sin_out(th_draw_, th_in);
  const float* sin_th = th_draw_.data_ptr<float>();
  float* next_th = next.get(keys().th).data_ptr<float>();
  float* next_thdot = next.get(keys().thdot).data_ptr<float>();
  float* reward = next.get(keys().reward).data_ptr<float>();
  for (int64_t e = 0, n = th_t.numel(); e < n; ++e) {
    if (stepping != nullptr && !stepping[e]) continue;
    TORCH_CHECK_VALUE(!std::isnan(action[e]), "PendulumEnv: the action of env ",
                      e, " is NaN");
    const float u =
        std::min(std::max(action[e], -max_torque[e]), max_torque[e]);
    const float an = angle_normalize(th[e]);
    const float costs =
        an * an + 0.1F * (thdot[e] * thdot[e]) + 0.001F * (u * u);
    const float gravity = 3.0F * g[e] / (2.0F * l[e]) * sin_th[e];
    // TorchRL's `3.0 / (mass * length**2)` is Tensor.__rtruediv__:
    // reciprocal(mass * length**2) * 3.0.
    const float torque = 1.0F / (m[e] * (l[e] * l[e])) * 3.0F * u;
    float new_thdot = thdot[e] + (gravity + torque) * dt[e];
    new_thdot = std::min(std::max(new_thdot, -max_speed[e]), max_speed[e]);
    next_th[e] = angle_normalize(th[e] + new_thdot * dt[e]);
    next_thdot[e] = new_thdot;
    reward[e] = -costs;
    for (size_t i = 0; i < 6; ++i) {
      next_params[i][e] = param_t[i].data_ptr<float>()[e];
    }
  }
}

void PendulumEnv::state_dict_impl(TensorDict& out) const {
  out.set("generator", detail::generator_state(generator_));
}

void PendulumEnv::load_state_dict_impl(const TensorDict& state) {
  detail::set_generator_state(generator_, state.get("generator"), "generator");
}

}  // namespace tensordict
