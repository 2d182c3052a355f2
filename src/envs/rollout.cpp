// EnvBase::rollout (tensordict/envs.h): TorchRL's rollout loop over one
// working dict that this call owns.
//
// The working dict `work` is the current step's input: the env's
// observations, state and done flags at the root, the policy's outputs, and
// under "next" one preallocated dict that every step's `step_impl` writes
// into. A step is:
//   1. the policy (or `rand_` of the action spec into preallocated actions);
//   2. `step_impl(work, next)`, then done |= terminated | truncated;
//   3. `store[..., t] = work`: one indexed write into the `[*batch, T]`
//      storage (TorchRL's layout), which that write preallocates at t = 0
//      ("Lazy preallocation", tensor_dict.h); after it, the storage seen
//      as `[numel * T]` rows takes each step through one kept
//      `RowWritePlan` (the replay storage's): rows t, T + t, 2T + t, ...
//      of each leaf, by bytes, bound again only when the working dict
//      changed;
//   4. TorchRL's step_mdp, in place: next's observations and flags are
//      copied to the root (the storage already holds the step, so nothing
//      that was handed out is overwritten);
//   5. the stop rule, or the reset of the envs that are done.
// Nothing in 2-5 allocates a tensor; the policy runs without autograd, as
// in TorchRL's collectors.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <utility>
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

// A leaf of a dict that the rollout owns, looked up again only when that
// dict changed: a top-level key keeps its node while the dict's entries
// stay where they were and the node still holds the same tensor (a policy
// that sets its output replaces it; keys set or erased move the entries).
// A nested key is looked up every time.
class LeafRef {
 public:
  LeafRef(TensorDict td, NestedKey key)
      : td_(std::move(td)),
        impl_(&detail::TensorDictImpl::of(td_)),
        key_(std::move(key)) {}

  const at::Tensor& get() {
    const std::vector<detail::Node>& nodes = impl_->nodes;
    if (node_ != nullptr && nodes.data() == base_ && nodes.size() == size_ &&
        node_->tensor.unsafeGetTensorImpl() == tensor_ &&
        node_->key == key_.front()) {
      return node_->tensor;
    }
    // Throws, as get does, for a missing key or a sub-dict.
    held_ = td_.get(key_);
    if (key_.parts().size() != 1) return held_;
    node_ = detail::lookup(*impl_, key_);
    base_ = nodes.data();
    size_ = nodes.size();
    tensor_ = node_->tensor.unsafeGetTensorImpl();
    return node_->tensor;
  }

 private:
  TensorDict td_;
  const detail::TensorDictImpl* impl_;
  NestedKey key_;
  const detail::Node* node_ = nullptr;
  const detail::Node* base_ = nullptr;
  size_t size_ = 0;
  const c10::TensorImpl* tensor_ = nullptr;
  at::Tensor held_;
};

// What a `RowWritePlan::bind` of the working dict saw, so that the next
// step skips the bind while nothing in the dict changed: every level of it
// still has its entries where they were (no key set or erased), each
// sub-dict is the same one, and each source is the same tensor of the same
// shape and dtype (a policy that sets its output replaces the tensor).
class BoundValue {
 public:
  void record(const detail::TensorDictImpl& root,
              const detail::RowWritePlan::Sources& sources) {
    levels_.clear();
    record_level(root, nullptr);
    leaves_.clear();
    for (const at::Tensor* src : sources) {
      leaves_.push_back(
          {src->unsafeGetTensorImpl(), src->sizes().vec(), src->scalar_type()});
    }
  }
  void forget() { levels_.clear(); }

  [[nodiscard]] bool unchanged(
      const detail::RowWritePlan::Sources& sources) const {
    if (levels_.empty() || sources.size() != leaves_.size()) return false;
    for (const Level& l : levels_) {  // parents first
      if ((l.owner != nullptr && l.owner->dict.get() != l.impl) ||
          l.impl->nodes.data() != l.data || l.impl->nodes.size() != l.size) {
        return false;
      }
    }
    for (size_t i = 0; i < leaves_.size(); ++i) {
      const at::Tensor& src = *sources[i];
      if (src.unsafeGetTensorImpl() != leaves_[i].impl ||
          src.sizes() != c10::IntArrayRef(leaves_[i].sizes) ||
          src.scalar_type() != leaves_[i].dtype) {
        return false;
      }
    }
    return true;
  }

 private:
  struct Level {
    const detail::Node* owner;  // the parent's entry (null at the root)
    const detail::TensorDictImpl* impl;
    const detail::Node* data;
    size_t size;
  };
  struct Leaf {
    const c10::TensorImpl* impl;
    std::vector<int64_t> sizes;
    at::ScalarType dtype;
  };
  void record_level(const detail::TensorDictImpl& impl,
                    const detail::Node* owner) {
    levels_.push_back({owner, &impl, impl.nodes.data(), impl.nodes.size()});
    for (const detail::Node& node : impl.nodes) {
      if (node.is_dict()) record_level(*node.dict, &node);
    }
  }
  std::vector<Level> levels_;
  std::vector<Leaf> leaves_;
};

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

  const detail::FlagKeys& keys = detail::flag_keys();
  // The working dict: the first step's input, in tensors of this call's
  // (or in the env's shared batch, `shared_tensordict`).
  const c10::optional<TensorDict> shared = shared_tensordict(false);
  TensorDict work;
  if (options.tensordict().has_value()) {
    work = own_input(*options.tensordict(), "rollout", false);
    if (shared.has_value()) {
      // own_input checked the spec keys' shapes and dtypes; the others
      // (actions, a policy's outputs) are the input's own.
      for (const NestedKey& key : work.keys(true, true)) {
        if (observation_spec_.contains(key) || state_spec_.contains(key) ||
            done_spec_.contains(key)) {
          detail::copy_all(shared->get(key), work.get(key));
        } else {
          shared->set(key, work.get(key));
        }
      }
      work = *shared;
    }
    if (options.auto_reset()) {
      reset_rows(work, at::Tensor());
    } else if (detail::any_flag(work.get(keys.done), at::Tensor())) {
      // TorchRL's maybe_reset of the input.
      reset_rows(work, work.get(keys.done).clone());
    }
  } else if (shared.has_value()) {
    work = *shared;
    reset_rows(work, at::Tensor());
  } else {
    work = reset();
  }
  const TensorDict next =
      shared.has_value()
          ? *shared_tensordict(true)
          : zeros_of({&observation_spec_, &reward_spec_, &done_spec_});
  work.set("next", next);
  // The random actions (without a policy): each leaf with its spec.
  std::vector<std::pair<LeafRef, SpecPtr>> actions;
  if (policy == nullptr) {
    for (const NestedKey& key : action_keys()) {
      const SpecPtr& spec = action_spec_.get(key).leaf_ptr();
      if (!shared.has_value() || !work.contains(key)) {
        work.set(key, spec->zero());
      }
      actions.emplace_back(LeafRef(work, key), spec);
    }
  }
  // What step_mdp moves from "next" to the root, and next's flags.
  std::vector<std::pair<LeafRef, LeafRef>> moved;
  for (const NestedKey& key : observation_keys()) {
    moved.emplace_back(LeafRef(work, key), LeafRef(next, key));
  }
  std::vector<LeafRef> next_flags;
  for (const NestedKey& key : flag_keys_) {
    moved.emplace_back(LeafRef(work, key), LeafRef(next, key));
    next_flags.emplace_back(next, key);
  }
  LeafRef done_ref(work, keys.done);

  std::vector<int64_t> flag_shape = batch_size_;
  flag_shape.push_back(1);
  const at::Tensor reset_mask = at::zeros(flag_shape, at::kBool);
  // The envs still stepping (break_when_all_done), `[*batch]`.
  at::Tensor stepping;
  if (break_all) stepping = at::ones(batch_size_, at::kBool);

  // The storage, `[*batch, T]` (TorchRL's layout); step t is column t.
  std::vector<int64_t> store_batch = batch_size_;
  store_batch.push_back(max_steps);
  TensorDict store(store_batch, device_);
  using at::indexing::Ellipsis;
  // Step t's rows of the storage as [numel * T] rows, through one plan
  // made after the first write (which made the storage's leaves); a step
  // whose keys differ from the plan's (a policy that adds an output late)
  // goes through the indexed write, which allocates its new keys, and the
  // plan is made again.
  const int64_t numel = c10::multiply_integers(batch_size_);
  const int64_t value_bd = batch_size_.empty() ? 0 : 1;
  const bool flat_rows = batch_size_.size() <= 1;
  detail::RowWritePlan plan;
  detail::RowWritePlan::Sources sources;
  BoundValue bound;
  auto write_step = [&](int64_t step, const TensorDict& value) {
    if (flat_rows && !plan.empty()) {
      try {
        if (!bound.unchanged(sources)) {
          const detail::TensorDictImpl& impl =
              detail::TensorDictImpl::of(value);
          plan.bind("rollout", "step", impl, value_bd, sources);
          bound.record(impl, sources);
        }
        plan.write_rows(sources, value_bd, step, 0, numel, max_steps);
        return;
      } catch (const c10::Error&) {  // other keys: the indexed write below
      }
    }
    bound.forget();
    store.index_put_({Ellipsis, step}, value);
    if (flat_rows) {
      plan = detail::RowWritePlan(store.reshape({numel * max_steps}),
                                  "rollout storage");
    }
  };

  int64_t t = 0;
  for (;; ++t) {
    if (policy != nullptr) {
      at::NoGradGuard no_grad;
      (*policy)(work);
    } else {
      for (auto& [leaf, spec] : actions) spec->rand_(leaf.get(), generator_);
    }
    for (LeafRef& flag : next_flags) {
      detail::clear_flags(flag.get(), at::Tensor());
    }
    const bool partial = stepping.defined() && t > 0;
    if (partial) work.set(keys.step, stepping);
    try {
      step_impl(work, next);
    } catch (...) {
      if (partial) work.erase(keys.step);
      throw;
    }
    if (partial) work.erase(keys.step);
    complete_done(next);
    write_step(t, work);
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

    for (auto& [dst, src] : moved) detail::copy_all(dst.get(), src.get());
    const at::Tensor& done = done_ref.get();
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
      detail::copy_all(reset_mask, done);
      reset_rows(work, reset_mask);
    }
  }

  const int64_t steps = t + 1;
  if (steps == max_steps) return store;
  // A run that stopped early: its steps, contiguous.
  return store.index({Ellipsis, at::indexing::Slice(0, steps)}).contiguous();
}

}  // namespace tensordict
