// EnvBase::rollout (tensordict/envs.h): TorchRL's rollout loop, in the
// parts of envs/rollout_loop.h: one working dict that this call owns
// (`RolloutLoop`) and one `[*batch, T]` storage (`StepStore`), then the stop
// rules of `RolloutOptions`.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "envs/flags.h"
#include "envs/rollout_loop.h"
#include "tensordict/envs.h"

namespace tensordict {

TensorDict EnvBase::rollout(int64_t max_steps, const RolloutOptions& options) {
  return run_rollout(max_steps, nullptr, options);
}

TensorDict EnvBase::rollout(int64_t max_steps, const Policy& policy,
                            const RolloutOptions& options) {
  TORCH_CHECK_VALUE(static_cast<bool>(policy), name(),
                    "::rollout: the policy is empty");
  return run_rollout(max_steps, &policy, options);
}

TensorDict EnvBase::rollout(int64_t max_steps, const TensorDictModule& policy,
                            const RolloutOptions& options) {
  const Policy call = [&policy](const TensorDict& td) { policy(td); };
  return run_rollout(max_steps, &call, options);
}

TensorDict EnvBase::run_rollout(int64_t max_steps, const Policy* policy,
                                const RolloutOptions& options) {
  TORCH_CHECK_VALUE(max_steps > 0, name(),
                    "::rollout: max_steps must be positive, got ", max_steps);
  const bool break_all = options.break_when_all_done();
  const bool break_any = options.break_when_any_done().value_or(!break_all);
  TORCH_CHECK_VALUE(!(break_any && break_all), name(),
                    "::rollout: break_when_any_done and break_when_all_done "
                    "cannot both be true");
  TORCH_CHECK_VALUE(options.auto_reset() || options.tensordict().has_value(),
                    name(),
                    "::rollout: auto_reset is false, so options.tensordict "
                    "must hold the first step's input");

  detail::RolloutLoop loop(*this, options.tensordict(), options.auto_reset());
  // The envs still stepping (break_when_all_done), `[*batch]`.
  at::Tensor stepping;
  if (break_all) stepping = at::ones(batch_size_, at::kBool);
  detail::StepStore storage(batch_size_, max_steps, device_);
  const TensorDict& store = storage.data();
  using at::indexing::Ellipsis;

  int64_t t = 0;
  for (;; ++t) {
    loop.act(policy);
    const bool partial = stepping.defined() && t > 0;
    loop.step(partial ? stepping : at::Tensor());
    storage.write(t, loop.work());
    if (partial) {
      // The envs that are done repeat their last step (TorchRL's
      // torch.where over the step mask).
      const TensorDict now = store.index({Ellipsis, t}).reshape({-1});
      const TensorDict before = store.index({Ellipsis, t - 1}).reshape({-1});
      const bool* on = stepping.data_ptr<bool>();
      for (int64_t row = 0, n = stepping.numel(); row < n; ++row) {
        if (!on[row]) now[row] = before[row];
      }
    }
    if (t + 1 == max_steps) break;

    loop.step_mdp();
    const at::Tensor& done = loop.done();
    if (break_any) {
      if (detail::any_flag(done, at::Tensor())) break;
    } else if (break_all) {
      bool* on = stepping.data_ptr<bool>();
      const at::Tensor flags = done.contiguous();
      const bool* d = flags.data_ptr<bool>();
      bool any_on = false;
      for (int64_t row = 0, n = stepping.numel(); row < n; ++row) {
        on[row] = on[row] && !d[row];
        any_on = any_on || on[row];
      }
      if (!any_on) break;
    } else {
      loop.reset_done();
    }
  }

  const int64_t steps = t + 1;
  if (steps == max_steps) return store;
  // A run that stopped early: its steps, contiguous.
  return store.index({Ellipsis, at::indexing::Slice(0, steps)}).contiguous();
}

}  // namespace tensordict
