// EnvBase::rollout (tensordict/envs.h): TorchRL's rollout loop over one
// working dict that this call owns.
//
// The working dict `work` is the current step's input: the env's
// observations, state and done flags at the root, the policy's outputs, and
// under "next" one preallocated dict that every step's `step_impl` writes
// into. A step is:
//   1. the policy (or `rand_` of the action spec into preallocated actions);
//   2. `step_impl(work, next)`, then done |= terminated | truncated;
//   3. `store[t] = work`: one indexed write into the `[T, *batch]` storage,
//      which that write preallocates at t = 0 ("Lazy preallocation",
//      tensor_dict.h); after it, the storage seen as `[T * numel]` rows
//      takes each step through one kept `RowWritePlan` (the replay
//      storage's), a byte copy per leaf;
//   4. TorchRL's step_mdp, in place: next's observations and flags are
//      copied to the root (the storage already holds the step, so nothing
//      that was handed out is overwritten);
//   5. the stop rule, or the reset of the envs that are done.
// Nothing in 2-5 allocates a tensor; the policy runs without autograd, as
// in TorchRL's collectors.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "core/row_copy.h"
#include "core/write_plan.h"
#include "envs/flags.h"
#include "tensordict/envs.h"

namespace tensordict {

using detail::dtype_name;
using detail::shape_str;

namespace {

const char* const kStep = "_step";

// `dst = src` for two leaves of one shape: by bytes when both are
// contiguous CPU tensors of one dtype.
void copy_leaf(const at::Tensor& dst, const at::Tensor& src) {
  if (detail::cpu_bytes(dst) && detail::cpu_bytes(src) &&
      dst.scalar_type() == src.scalar_type() && dst.numel() == src.numel() &&
      dst.is_contiguous() && src.is_contiguous()) {
    detail::copy_bytes(static_cast<char*>(dst.data_ptr()),
                       static_cast<const char*>(src.data_ptr()),
                       static_cast<size_t>(src.nbytes()));
    detail::bump(detail::version_of(dst));
    return;
  }
  dst.copy_(src);
}

}  // namespace

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

  // The working dict: the first step's input, in tensors of this call's.
  TensorDict work;
  if (options.tensordict().has_value()) {
    work = own_input(*options.tensordict(), "rollout", false);
    if (options.auto_reset()) {
      reset_rows(work, at::Tensor());
    } else if (detail::any_flag(work.get("done"), at::Tensor())) {
      // TorchRL's maybe_reset of the input.
      reset_rows(work, work.get("done").clone());
    }
  } else {
    work = reset();
  }
  const TensorDict next =
      zeros_of({&observation_spec_, &reward_spec_, &done_spec_});
  work.set("next", next);
  const std::vector<NestedKey> actions = action_keys();
  if (policy == nullptr) {
    for (const NestedKey& key : actions) {
      work.set(key, action_spec_.leaf(key).zero());
    }
  }
  // What step_mdp moves from "next" to the root.
  std::vector<NestedKey> moved = observation_keys();
  for (const NestedKey& key : done_keys()) moved.push_back(key);

  std::vector<int64_t> flag_shape = batch_size_;
  flag_shape.push_back(1);
  const at::Tensor reset_mask = at::zeros(flag_shape, at::kBool);
  // The envs still stepping (break_when_all_done), `[*batch]`.
  at::Tensor stepping;
  if (break_all) stepping = at::ones(batch_size_, at::kBool);

  std::vector<int64_t> store_batch = {max_steps};
  store_batch.insert(store_batch.end(), batch_size_.begin(), batch_size_.end());
  const TensorDict store(store_batch, device_);
  // Step t's rows of the storage as [T * numel] rows, through one plan
  // made after the first write (which made the storage's leaves); a step
  // whose keys differ from the plan's (a policy that adds an output late)
  // goes through the indexed write, which allocates its new keys, and the
  // plan is made again.
  const int64_t numel = c10::multiply_integers(batch_size_);
  const int64_t value_bd = batch_size_.empty() ? 0 : 1;
  const bool flat_rows = batch_size_.size() <= 1;
  detail::RowWritePlan plan;
  detail::RowWritePlan::Sources sources;
  auto write_step = [&](int64_t step, const TensorDict& value) {
    if (flat_rows && !plan.empty()) {
      try {
        plan.bind("rollout", "step", detail::TensorDictImpl::of(value),
                  value_bd, sources);
        plan.write_rows(sources, value_bd, step * numel, 0, numel);
        return;
      } catch (const c10::Error&) {  // other keys: the indexed write below
      }
    }
    store[step] = value;
    if (flat_rows) {
      plan = detail::RowWritePlan(store.reshape({max_steps * numel}),
                                  "rollout storage");
    }
  };

  int64_t t = 0;
  for (;; ++t) {
    if (policy != nullptr) {
      at::NoGradGuard no_grad;
      (*policy)(work);
    } else {
      for (const NestedKey& key : actions) {
        action_spec_.leaf(key).rand_(work.get(key), generator_);
      }
    }
    for (const auto& entry : done_spec_.entries()) {
      detail::clear_flags(next.get(entry.first), at::Tensor());
    }
    const bool partial = stepping.defined() && t > 0;
    if (partial) work.set(kStep, stepping);
    try {
      step_impl(work, next);
    } catch (...) {
      if (partial) work.erase(kStep);
      throw;
    }
    if (partial) work.erase(kStep);
    complete_done(next);
    write_step(t, work);
    if (partial) {
      // The envs that are done repeat their last step (TorchRL's
      // torch.where over the step mask).
      const TensorDict now = store.index({t}).reshape({-1});
      const TensorDict before = store.index({t - 1}).reshape({-1});
      const bool* on = stepping.data_ptr<bool>();
      for (int64_t row = 0, n = stepping.numel(); row < n; ++row) {
        if (!on[row]) now[row] = before[row];
      }
    }
    if (t + 1 == max_steps) break;

    for (const NestedKey& key : moved) copy_leaf(work.get(key), next.get(key));
    const at::Tensor done = work.get("done");
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
    } else if (detail::any_flag(done, at::Tensor())) {
      copy_leaf(reset_mask, done);
      reset_rows(work, reset_mask);
    }
  }

  const int64_t steps = t + 1;
  TensorDict out =
      steps == max_steps ? store : store.index({at::indexing::Slice(0, steps)});
  if (!batch_size_.empty()) {
    // [T, *batch] -> [*batch, T], TorchRL's layout.
    std::vector<int64_t> dims;
    for (int64_t d = 1; d <= static_cast<int64_t>(batch_size_.size()); ++d) {
      dims.push_back(d);
    }
    dims.push_back(0);
    out = out.permute(dims).contiguous();
  }
  return out;
}

}  // namespace tensordict
