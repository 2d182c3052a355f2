// SerialEnv (tensordict/envs.h) and the spec helpers of the batched envs
// (envs/batched.h).
#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "core/names.h"
#include "envs/batched.h"
#include "envs/env_access.h"
#include "envs/flags.h"
#include "envs/row_views.h"

namespace tensordict {

namespace detail {

std::vector<int64_t> batched_shape(const EnvBase& env, int64_t n) {
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), env.batch_size().begin(), env.batch_size().end());
  return shape;
}

void set_batched_specs(EnvBase& batched, const EnvBase& env) {
  const c10::IntArrayRef shape = batched.batch_size();
  batched.set_observation_spec(env.observation_spec().expand(shape));
  batched.set_action_spec(env.action_spec().expand(shape));
  batched.set_reward_spec(env.reward_spec().expand(shape));
  batched.set_done_spec(env.done_spec().expand(shape));
  batched.set_state_spec(env.state_spec().expand(shape));
}

void check_same_specs(const EnvBase& first, const EnvBase& env,
                      const std::string& what) {
  TORCH_CHECK_VALUE(env.batch_size() == first.batch_size(), what,
                    " has batch size ", shape_str(env.batch_size()),
                    ", the first env ", shape_str(first.batch_size()));
  const std::pair<const char*, bool> same[] = {
      {"observation", env.observation_spec() == first.observation_spec()},
      {"action", env.action_spec() == first.action_spec()},
      {"reward", env.reward_spec() == first.reward_spec()},
      {"done", env.done_spec() == first.done_spec()},
      {"state", env.state_spec() == first.state_spec()}};
  for (const auto& spec : same) {
    TORCH_CHECK_VALUE(spec.second, what, "'s ", spec.first,
                      " spec differs from the first env's");
  }
}

}  // namespace detail

namespace {

std::vector<std::unique_ptr<EnvBase>> make_envs(int64_t n,
                                                const EnvFactory& factory) {
  TORCH_CHECK_VALUE(n > 0, "SerialEnv: num_envs must be positive, got ", n);
  TORCH_CHECK_VALUE(static_cast<bool>(factory),
                    "SerialEnv: the factory is empty");
  std::vector<std::unique_ptr<EnvBase>> envs;
  for (int64_t i = 0; i < n; ++i) {
    envs.push_back(factory());
    TORCH_CHECK_VALUE(envs.back() != nullptr,
                      "SerialEnv: the factory returned "
                      "no env for env ",
                      i);
  }
  return envs;
}

}  // namespace

struct SerialEnv::Rows {
  detail::RowViews in, next;
};

SerialEnv::SerialEnv(int64_t num_envs, const EnvFactory& factory)
    : SerialEnv(make_envs(num_envs, factory)) {}

SerialEnv::SerialEnv(std::vector<std::unique_ptr<EnvBase>> envs)
    : EnvBase(detail::batched_shape(*envs.front(),
                                    static_cast<int64_t>(envs.size())),
              envs.front()->device()),
      envs_(std::move(envs)) {
  for (size_t i = 1; i < envs_.size(); ++i) {
    detail::check_same_specs(*envs_.front(), *envs_[i],
                             "SerialEnv: env " + std::to_string(i));
  }
  detail::set_batched_specs(*this, *envs_.front());
  const std::vector<int64_t> row(envs_.front()->batch_size().begin(),
                                 envs_.front()->batch_size().end());
  const auto n = static_cast<int64_t>(envs_.size());
  rows_ = std::make_unique<Rows>(
      Rows{detail::RowViews(0, n, row), detail::RowViews(0, n, row)});
}

SerialEnv::~SerialEnv() = default;

EnvBase& SerialEnv::env(int64_t i) const {
  TORCH_CHECK_INDEX(i >= 0 && i < num_envs(), "SerialEnv::env: index ", i,
                    " is out of range for ", num_envs(), " envs");
  return *envs_[static_cast<size_t>(i)];
}

void SerialEnv::reset_impl(const TensorDict& td) {
  const std::vector<TensorDict>& rows = rows_->in.of(td);
  const bool* mask =
      td.contains("_reset") ? detail::flag_bytes(td.get("_reset")) : nullptr;
  const int64_t per_env = c10::multiply_integers(envs_.front()->batch_size());
  for (size_t i = 0; i < envs_.size(); ++i) {
    if (!detail::any_of(mask, static_cast<int64_t>(i) * per_env, per_env)) {
      continue;
    }
    detail::EnvAccess::reset(*envs_[i], rows[i]);
  }
}

void SerialEnv::step_impl(const TensorDict& td, const TensorDict& next) {
  const std::vector<TensorDict>& in = rows_->in.of(td);
  const std::vector<TensorDict>& out = rows_->next.of(next);
  const at::Tensor step_mask = td.contains("_step")
                                   ? td.get("_step").to(at::kBool).contiguous()
                                   : at::Tensor();
  const bool* stepping = detail::flag_bytes(step_mask);
  const int64_t per_env = c10::multiply_integers(envs_.front()->batch_size());
  for (size_t i = 0; i < envs_.size(); ++i) {
    if (!detail::any_of(stepping, static_cast<int64_t>(i) * per_env, per_env)) {
      continue;
    }
    detail::EnvAccess::step(*envs_[i], in[i], out[i]);
  }
}

void SerialEnv::set_seed_impl(uint64_t seed) {
  for (const auto& env : envs_) seed = env->set_seed(seed);
}

void SerialEnv::state_dict_impl(TensorDict& out) const {
  for (size_t i = 0; i < envs_.size(); ++i) {
    out.set({"envs", std::to_string(i)}, envs_[i]->state_dict());
  }
}

void SerialEnv::load_state_dict_impl(const TensorDict& state) {
  for (size_t i = 0; i < envs_.size(); ++i) {
    envs_[i]->load_state_dict(
        state.get_tensordict({"envs", std::to_string(i)}));
  }
}

}  // namespace tensordict
