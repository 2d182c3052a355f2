// Collector (tensordict/collectors.h): TorchRL 0.14's `Collector.rollout`
// on the env layer's rollout loop (envs/rollout_loop.h), kept for the
// collector's life: one working dict (TorchRL's carrier, which holds
// ("collector", "traj_ids") too) and one `[*env_batch, T]` storage, so that
// after the first batch nothing is allocated. A step: the policy (or random
// actions), the env's step, the write of column t, step_mdp in place, new
// trajectory ids for the envs that are done, their reset.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <memory>
#include <utility>
#include <vector>

#include "collectors/collector_impl.h"
#include "core/names.h"
#include "tensordict/collectors.h"

namespace tensordict {

namespace {

std::unique_ptr<EnvBase> made_env(const EnvFactory& factory) {
  TORCH_CHECK_VALUE(static_cast<bool>(factory),
                    "Collector: the env factory is empty");
  std::unique_ptr<EnvBase> env = factory();
  TORCH_CHECK_VALUE(env != nullptr, "Collector: the env factory returned null");
  return env;
}

Policy module_call(const TensorDictModule& module) {
  return [module](const TensorDict& td) { module(td); };
}

}  // namespace

Collector::Collector(std::unique_ptr<EnvBase> env, Policy policy,
                     const CollectorOptions& options)
    : Collector(std::move(env), std::move(policy), c10::nullopt, options) {}

Collector::Collector(std::unique_ptr<EnvBase> env,
                     const TensorDictModule& policy,
                     const CollectorOptions& options)
    : Collector(std::move(env), module_call(policy), policy, options) {}

Collector::Collector(const EnvFactory& factory, Policy policy,
                     const CollectorOptions& options)
    : Collector(made_env(factory), std::move(policy), c10::nullopt, options) {}

Collector::Collector(const EnvFactory& factory, const TensorDictModule& policy,
                     const CollectorOptions& options)
    : Collector(made_env(factory), module_call(policy), policy, options) {}

Collector::Collector(std::unique_ptr<EnvBase> env, Policy policy,
                     c10::optional<TensorDictModule> module,
                     const CollectorOptions& options) {
  TORCH_CHECK_VALUE(env != nullptr, "Collector: the env is null");
  TORCH_CHECK_VALUE(options.frames_per_batch() > 0,
                    "Collector: frames_per_batch must be positive, got ",
                    options.frames_per_batch());
  TORCH_CHECK_VALUE(options.total_frames() >= -1 && options.total_frames() != 0,
                    "Collector: total_frames must be positive or -1 "
                    "(endless), got ",
                    options.total_frames());
  TORCH_CHECK_VALUE(options.max_frames_per_traj() >= 0,
                    "Collector: max_frames_per_traj must be >= 0 (0: none), "
                    "got ",
                    options.max_frames_per_traj());
  TORCH_CHECK_VALUE(options.init_random_frames() >= 0,
                    "Collector: init_random_frames must be >= 0, got ",
                    options.init_random_frames());
  TORCH_CHECK_VALUE(
      !options.env_device().has_value() ||
          *options.env_device() == env->device(),
      "Collector: env_device is ",
      detail::device_name(options.env_device().value_or(env->device())),
      " but the env is on ", detail::device_name(env->device()),
      " (envs do not move: make it there)");
  TORCH_CHECK_VALUE(!options.processes(),
                    "Collector: processes is an option of the multi "
                    "collectors (a Collector runs in its caller's thread)");
  TORCH_CHECK_VALUE(
      options.replay_buffer() == nullptr || options.rollout_buffer() == nullptr,
      "Collector: replay_buffer and rollout_buffer are "
      "exclusive");
  if (options.max_frames_per_traj() > 0) {
    env = std::make_unique<TransformedEnv>(
        std::move(env),
        std::make_shared<StepCounter>(options.max_frames_per_traj()));
  }
  impl_ = std::make_unique<Impl>(std::move(env), std::move(policy),
                                 std::move(module), options);
  Impl& s = *impl_;
  s.numel = c10::multiply_integers(s.env->batch_size());
  s.steps = (options.frames_per_batch() + s.numel - 1) / s.numel;
  if (RolloutBuffer* rb = options.rollout_buffer()) {
    TORCH_CHECK_VALUE(!options.split_trajs() && !options.postproc(),
                      "Collector: a rollout_buffer takes the steps as they "
                      "come: split_trajs and postproc need a whole batch");
    TORCH_CHECK_VALUE(s.env->batch_size().size() == 1 &&
                          s.env->batch_size()[0] == rb->num_envs() &&
                          s.steps == rb->num_steps(),
                      "Collector: the rollout_buffer holds ", rb->num_steps(),
                      " steps of ", rb->num_envs(),
                      " envs, but the batches are ", s.steps,
                      " steps of an env of batch size ",
                      detail::shape_str(s.env->batch_size()));
  }
  if (s.module.has_value()) {
    s.policy_out_keys = s.module->out_keys();
  } else {
    s.policy_out_keys = s.env->action_keys();
  }
  s.loop = std::make_unique<detail::RolloutLoop>(*s.env, c10::nullopt, false);
  s.store = std::make_unique<detail::StepStore>(
      s.env->batch_size().vec(), s.steps,
      options.storing_device().value_or(s.env->device()));
  s.fresh_traj_ids();
}

Collector::~Collector() = default;

TensorDict Collector::next() { return impl_->collect(); }

bool Collector::finished() const {
  return impl_->shut || (impl_->options.total_frames() >= 0 &&
                         impl_->frames >= impl_->options.total_frames());
}

void Collector::update_policy_weights_(const TensorDict& params) {
  TORCH_CHECK_VALUE(impl_->module.has_value(),
                    "Collector::update_policy_weights_: the policy is not a "
                    "TensorDictModule, so it has no weights to update");
  const at::NoGradGuard no_grad;
  (void)from_module(*impl_->module).update_(params);
}

TensorDict Collector::policy_weights() const {
  if (!impl_->module.has_value()) return TensorDict();
  return from_module(*impl_->module);
}

namespace detail {

int64_t state_int(const TensorDict& state, const NestedKey& key,
                  const std::string& fn) {
  TORCH_CHECK_VALUE(
      state.contains(key) && !state.get_entry(key).is_tensordict(), fn,
      ": the state has no entry ", key.str());
  const at::Tensor value = state.get(key);
  TORCH_CHECK_VALUE(
      value.numel() == 1 && !value.is_floating_point() && !value.is_complex(),
      fn, ": ", key.str(), " must be one integer, got a tensor of shape ",
      shape_str(value.sizes()), " and dtype ", dtype_name(value.scalar_type()));
  return value.item<int64_t>();
}

}  // namespace detail

TensorDict Collector::state_dict() const {
  TensorDict out;
  out.set("frames", at::scalar_tensor(impl_->frames, at::kLong));
  out.set("iter", at::scalar_tensor(impl_->iter, at::kLong));
  out.set({"traj_pool", "traj_id"},
          at::scalar_tensor(impl_->traj_pool->load(), at::kLong));
  out.set("env", impl_->env->state_dict());
  out.set("carrier", impl_->loop->work().clone());
  return out;
}

void Collector::load_state_dict(const TensorDict& state) {
  constexpr const char* fn = "Collector::load_state_dict";
  std::vector<int64_t> values;
  for (const NestedKey& key : {NestedKey("frames"), NestedKey("iter"),
                               NestedKey({"traj_pool", "traj_id"})}) {
    values.push_back(detail::state_int(state, key, fn));
  }
  const bool resume = state.contains("env") || state.contains("carrier");
  const TensorDict& work = impl_->loop->work();
  TensorDict carrier;
  if (resume) {
    for (const char* key : {"env", "carrier"}) {
      TORCH_CHECK_VALUE(
          state.contains(key) && state.get_entry(key).is_tensordict(), fn,
          ": the state has \"env\" and \"carrier\" (the envs "
          "and the step they are at) or neither, got no dict ",
          key);
    }
    // The carrier: the working dict's keys, each of its shape.
    const TensorDict given = state.get_tensordict("carrier");
    for (const NestedKey& key : work.keys(true, true)) {
      TORCH_CHECK_VALUE(given.contains(key), fn, ": the carrier has no entry ",
                        key.str());
      TORCH_CHECK_VALUE(given.get(key).sizes() == work.get(key).sizes(), fn,
                        ": carrier key ", key.str(), ": expected shape ",
                        detail::shape_str(work.get(key).sizes()), ", got ",
                        detail::shape_str(given.get(key).sizes()));
    }
    carrier = work.clone();
    (void)carrier.update_(given.select(work.keys(true, true)));
    // All or nothing itself; the last step that can fail.
    impl_->env->load_state_dict(state.get_tensordict("env"));
  }
  impl_->frames = values[0];
  impl_->iter = values[1];
  impl_->traj_pool->store(values[2]);
  if (resume) {
    (void)work.update_(carrier);
  } else {
    impl_->fresh_traj_ids();
  }
}

uint64_t Collector::set_seed(uint64_t seed) {
  return impl_->env->set_seed(seed);
}

void Collector::reset() {
  impl_->loop->reset_all();
  impl_->fresh_traj_ids();
}

void Collector::shutdown() { impl_->shut = true; }

EnvBase& Collector::env() const { return *impl_->env; }
int64_t Collector::frames() const { return impl_->frames; }
int64_t Collector::steps_per_batch() const { return impl_->steps; }

}  // namespace tensordict
