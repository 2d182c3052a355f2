// The rollout loop's parts (envs/rollout_loop.h).
#include "envs/rollout_loop.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "envs/flags.h"

namespace tensordict {
namespace detail {

// ---- LeafRef -------------------------------------------------------------------

LeafRef::LeafRef(TensorDict td, NestedKey key)
    : td_(std::move(td)),
      impl_(&TensorDictImpl::of(td_)),
      key_(std::move(key)) {}

const at::Tensor& LeafRef::get() {
  const std::vector<Node>& nodes = impl_->nodes;
  if (node_ != nullptr && nodes.data() == base_ && nodes.size() == size_ &&
      node_->tensor.unsafeGetTensorImpl() == tensor_ &&
      node_->key == key_.front()) {
    return node_->tensor;
  }
  // Throws, as get does, for a missing key or a sub-dict.
  held_ = td_.get(key_);
  if (key_.parts().size() != 1) return held_;
  node_ = lookup(*impl_, key_);
  base_ = nodes.data();
  size_ = nodes.size();
  tensor_ = node_->tensor.unsafeGetTensorImpl();
  return node_->tensor;
}

// ---- BoundValue ----------------------------------------------------------------

void BoundValue::record(const TensorDictImpl& root,
                        const RowWritePlan::Sources& sources) {
  levels_.clear();
  record_level(root, nullptr);
  leaves_.clear();
  for (const at::Tensor* src : sources) {
    leaves_.push_back(
        {src->unsafeGetTensorImpl(), src->sizes().vec(), src->scalar_type()});
  }
}

bool BoundValue::unchanged(const RowWritePlan::Sources& sources) const {
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

void BoundValue::record_level(const TensorDictImpl& impl, const Node* owner) {
  levels_.push_back({owner, &impl, impl.nodes.data(), impl.nodes.size()});
  for (const Node& node : impl.nodes) {
    if (node.is_dict()) record_level(*node.dict, &node);
  }
}

// ---- StepStore -----------------------------------------------------------------

StepStore::StepStore(std::vector<int64_t> batch, int64_t steps,
                     at::Device device)
    : steps_(steps),
      numel_(c10::multiply_integers(batch)),
      value_bd_(batch.empty() ? 0 : 1),
      flat_rows_(batch.size() <= 1) {
  batch.push_back(steps);
  store_ = TensorDict(batch, device);
}

void StepStore::write(int64_t t, const TensorDict& value) {
  if (flat_rows_ && !plan_.empty()) {
    try {
      if (!bound_.unchanged(sources_)) {
        const TensorDictImpl& impl = TensorDictImpl::of(value);
        plan_.bind("rollout", "step", impl, value_bd_, sources_);
        bound_.record(impl, sources_);
      }
      plan_.write_rows(sources_, value_bd_, t, 0, numel_, steps_);
      return;
    } catch (const c10::Error&) {  // other keys: the indexed write below
    }
  }
  bound_.forget();
  store_.index_put_({at::indexing::Ellipsis, t}, value);
  if (flat_rows_) {
    plan_ = RowWritePlan(store_.reshape({numel_ * steps_}), "rollout storage");
  }
}

// ---- RolloutLoop ---------------------------------------------------------------

RolloutLoop::RolloutLoop(EnvBase& env, const c10::optional<TensorDict>& start,
                         bool reset_start)
    : env_(env), done_ref_(TensorDict(), flag_keys().done) {
  const FlagKeys& keys = flag_keys();
  // The working dict: the first step's input, in tensors of the loop's (or
  // in the env's shared batch, `shared_tensordict`).
  const c10::optional<TensorDict> shared = env.shared_tensordict(false);
  shared_ = shared.has_value();
  if (start.has_value()) {
    work_ = env.own_input(*start, "rollout", false);
    if (shared_) {
      // own_input checked the spec keys' shapes and dtypes; the others
      // (actions, a policy's outputs) are the input's own.
      for (const NestedKey& key : work_.keys(true, true)) {
        if (env.observation_spec_.contains(key) ||
            env.state_spec_.contains(key) || env.done_spec_.contains(key)) {
          copy_all(shared->get(key), work_.get(key));
        } else {
          shared->set(key, work_.get(key));
        }
      }
      work_ = *shared;
    }
    if (reset_start) {
      env.reset_rows(work_, at::Tensor());
    } else if (any_flag(work_.get(keys.done), at::Tensor())) {
      // TorchRL's maybe_reset of the input.
      env.reset_rows(work_, work_.get(keys.done).clone());
    }
  } else if (shared_) {
    work_ = *shared;
    env.reset_rows(work_, at::Tensor());
  } else {
    work_ = env.reset();
  }
  next_ = shared_ ? *env.shared_tensordict(true)
                  : env.zeros_of({&env.observation_spec_, &env.reward_spec_,
                                  &env.done_spec_});
  work_.set("next", next_);
  for (const NestedKey& key : env.observation_keys()) {
    moved_.emplace_back(LeafRef(work_, key), LeafRef(next_, key));
  }
  for (const NestedKey& key : env.flag_keys_) {
    moved_.emplace_back(LeafRef(work_, key), LeafRef(next_, key));
    next_flags_.emplace_back(next_, key);
  }
  done_ref_ = LeafRef(work_, keys.done);
  std::vector<int64_t> flag_shape = env.batch_size_;
  flag_shape.push_back(1);
  reset_mask_ = at::zeros(flag_shape, at::kBool);
}

void RolloutLoop::act(const Policy* policy) {
  if (policy != nullptr) {
    at::NoGradGuard no_grad;
    if (pins_ready_) {
      (*policy)(work_);
      repin();
    } else {
      first_call(*policy);
    }
    return;
  }
  if (!actions_ready_) {
    for (const NestedKey& key : env_.action_keys()) {
      const SpecPtr& spec = env_.action_spec_.get(key).leaf_ptr();
      if (!shared_ || !work_.contains(key)) work_.set(key, spec->zero());
      actions_.emplace_back(LeafRef(work_, key), spec);
    }
    actions_ready_ = true;
  }
  for (auto& [leaf, spec] : actions_) spec->rand_(leaf.get(), env_.generator_);
}

namespace {

// Whether a policy's tensor `now` can be copied into the loop's `pin`.
bool fits(const at::Tensor& pin, const at::Tensor& now) {
  return pin.sizes() == now.sizes() && pin.dtype() == now.dtype() &&
         pin.device() == now.device() && !now.requires_grad();
}

}  // namespace

void RolloutLoop::repin() {
  for (auto& [key, pin] : pins_) {
    if (!work_.contains(key)) continue;
    const at::Tensor& now = work_.get(key);
    if (pin.is_same(now)) continue;
    if (fits(pin, now)) {
      copy_all(pin, now);
    } else {
      pin = now.clone();
    }
    work_.set(key, pin);
  }
}

void RolloutLoop::first_call(const Policy& policy) {
  // The leaves before the call, then what it set (into the loop's tensor,
  // or a copy: the policy's tensor may be another leaf, or one it keeps).
  std::vector<std::pair<NestedKey, at::Tensor>> before;
  for (const NestedKey& key : work_.keys(true, true)) {
    if (key.front() != "next") before.emplace_back(key, work_.get(key));
  }
  policy(work_);
  for (const NestedKey& key : work_.keys(true, true)) {
    if (key.front() == "next") continue;
    const at::Tensor& now = work_.get(key);
    auto was = std::find_if(before.begin(), before.end(),
                            [&](const auto& p) { return p.first == key; });
    if (was != before.end() && was->second.is_same(now)) continue;
    if (was != before.end() && fits(was->second, now)) {
      // The loop's tensor (a shared batch's, with worker processes).
      copy_all(was->second, now);
      pins_.emplace_back(key, was->second);
    } else {
      pins_.emplace_back(key, now.clone());
    }
    work_.set(key, pins_.back().second);
  }
  pins_ready_ = true;
}

void RolloutLoop::step(const at::Tensor& stepping) {
  for (LeafRef& flag : next_flags_) clear_flags(flag.get(), at::Tensor());
  const NestedKey& step_key = flag_keys().step;
  const bool partial = stepping.defined();
  if (partial) work_.set(step_key, stepping);
  try {
    env_.step_impl(work_, next_);
  } catch (...) {
    if (partial) work_.erase(step_key);
    throw;
  }
  if (partial) work_.erase(step_key);
  env_.complete_done(next_);
}

void RolloutLoop::step_mdp() {
  for (auto& [dst, src] : moved_) copy_all(dst.get(), src.get());
}

void RolloutLoop::reset_done() {
  const at::Tensor& flags = done();
  if (!any_flag(flags, at::Tensor())) return;
  copy_all(reset_mask_, flags);
  env_.reset_rows(work_, reset_mask_);
}

void RolloutLoop::reset_all() { env_.reset_rows(work_, at::Tensor()); }

}  // namespace detail
}  // namespace tensordict
