// Transform's defaults, Compose and TransformedEnv (tensordict/envs.h):
// TorchRL's transformed env, over dicts made once.
//
// A TransformedEnv owns three dicts of its base env's (`inner_td_`, the
// step's input; `inner_next_`, the step; `inner_reset_`, the reset), made in
// its constructor from the base env's specs. A step is the transform's
// `inv` (outer input -> `inner_td_`), the base env's `step_impl` into
// `inner_next_` (done flags cleared before and completed after, as EnvBase
// does around its own hook), then the transform's `step` (`inner_next_` ->
// the outer "next"). A reset copies the outer input's shared entries and
// "_reset" into `inner_reset_`, runs the base env's `reset_impl`, then the
// transform's `reset`. A Compose chains its transforms through dicts of its
// own, made once from the specs between them (`Stages`).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>
#include <vector>

#include "envs/env_access.h"
#include "envs/flags.h"
#include "envs/transform_rows.h"
#include "tensordict/envs.h"

namespace tensordict {

namespace {

EnvSpecs specs_of(const EnvBase& env) {
  return EnvSpecs{env.observation_spec(), env.action_spec(), env.reward_spec(),
                  env.done_spec(), env.state_spec()};
}

EnvSpecs transformed(const Transform& t, const EnvSpecs& inner) {
  return EnvSpecs{t.transform_observation_spec(inner.observation),
                  t.transform_action_spec(inner.action),
                  t.transform_reward_spec(inner.reward),
                  t.transform_done_spec(inner.done),
                  t.transform_state_spec(inner.state)};
}

// The dicts of an env of `specs`: a step's input, a step, a reset; and its
// done keys.
struct StageDicts {
  TensorDict input, next, reset;
  std::vector<NestedKey> done_keys;
};

StageDicts stage_dicts(const EnvSpecs& s) {
  const c10::IntArrayRef batch = s.observation.shape();
  return StageDicts{
      detail::zeros_of_specs(batch, {&s.observation, &s.state, &s.action}),
      detail::zeros_of_specs(batch, {&s.observation, &s.reward, &s.done}),
      detail::zeros_of_specs(batch, {&s.observation, &s.state, &s.done}),
      s.done.keys(true, true)};
}

// The done flags of `td` (of the rows of `mask`, all when undefined) set to
// false: what a transform's step and reset find, as EnvBase's hooks.
void clear_done(const TensorDict& td, const std::vector<NestedKey>& keys,
                const at::Tensor& mask) {
  for (const NestedKey& key : keys) detail::clear_flags(td.get(key), mask);
}

// Sets `key` of `td` to `value` for the scope (when defined).
class ScopedKey {
 public:
  ScopedKey(const TensorDict& td, const char* key, const at::Tensor& value)
      : td_(td), key_(key), set_(value.defined()) {
    if (set_) td_.set(key_, value);
  }
  ~ScopedKey() {
    if (set_ && td_.contains(key_)) td_.erase(key_);
  }
  ScopedKey(const ScopedKey&) = delete;
  ScopedKey& operator=(const ScopedKey&) = delete;

 private:
  const TensorDict& td_;
  const char* key_;
  bool set_;
};

}  // namespace

// ---- Transform ------------------------------------------------------------

void Transform::step(const TensorDict& /*td*/, const TensorDict& inner_next,
                     const TensorDict& next) {
  detail::copy_shared(next, inner_next, at::Tensor(), "Transform::step");
}

void Transform::reset(const TensorDict& inner, const TensorDict& td) {
  detail::copy_shared(td, inner, detail::reset_mask_of(td), "Transform::reset");
}

void Transform::inv(const TensorDict& td, const TensorDict& inner_td) {
  detail::copy_shared(inner_td, td, at::Tensor(), "Transform::inv");
}

void Transform::bind(const EnvSpecs& inner) { inner_specs_ = inner; }

void Transform::refresh_parent_specs() const {
  if (parent_ != nullptr) parent_->update_specs();
}

// ---- Compose --------------------------------------------------------------

struct Compose::Stages {
  // stages[i]: the dicts between transform i - 1 and transform i (i >= 1;
  // stages[0] is unused: the env's own dicts come in).
  std::vector<StageDicts> stages;
};

Compose::Compose(std::vector<TransformPtr> transforms)
    : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) {
    TORCH_CHECK_VALUE(transforms_[i] != nullptr, "Compose: transform ", i,
                      " is null");
  }
}

Composite Compose::transform_observation_spec(Composite spec) const {
  for (const auto& t : transforms_) {
    spec = t->transform_observation_spec(std::move(spec));
  }
  return spec;
}
Composite Compose::transform_reward_spec(Composite spec) const {
  for (const auto& t : transforms_) {
    spec = t->transform_reward_spec(std::move(spec));
  }
  return spec;
}
Composite Compose::transform_done_spec(Composite spec) const {
  for (const auto& t : transforms_) {
    spec = t->transform_done_spec(std::move(spec));
  }
  return spec;
}
Composite Compose::transform_state_spec(Composite spec) const {
  for (const auto& t : transforms_) {
    spec = t->transform_state_spec(std::move(spec));
  }
  return spec;
}
Composite Compose::transform_action_spec(Composite spec) const {
  for (const auto& t : transforms_) {
    spec = t->transform_action_spec(std::move(spec));
  }
  return spec;
}

int64_t Compose::frame_skip() const {
  int64_t n = 1;
  for (const auto& t : transforms_) n *= t->frame_skip();
  return n;
}

void Compose::set_parent(TransformedEnv* parent) {
  if (parent != nullptr) {
    for (size_t i = 0; i < transforms_.size(); ++i) {
      TORCH_CHECK_VALUE(transforms_[i]->parent() == nullptr,
                        "Compose: transform ", i, " is already part of an env");
    }
  }
  Transform::set_parent(parent);
  for (const auto& t : transforms_) t->set_parent(parent);
}

void Compose::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  auto stages = std::make_shared<Stages>();
  stages->stages.resize(transforms_.size());
  EnvSpecs specs = inner;
  for (size_t i = 0; i < transforms_.size(); ++i) {
    if (i > 0) stages->stages[i] = stage_dicts(specs);
    transforms_[i]->bind(specs);
    specs = transformed(*transforms_[i], specs);
  }
  stages_ = std::move(stages);
}

namespace {

void check_bound(const void* stages) {
  TORCH_CHECK(stages != nullptr,
              "Compose: the transform is not part of an env yet");
}

}  // namespace

void Compose::step(const TensorDict& td, const TensorDict& inner_next,
                   const TensorDict& next) {
  if (transforms_.empty()) {
    Transform::step(td, inner_next, next);
    return;
  }
  check_bound(stages_.get());
  const size_t n = transforms_.size();
  const TensorDict* from = &inner_next;
  for (size_t i = 0; i < n; ++i) {
    if (i + 1 == n) {
      transforms_[i]->step(td, *from, next);
      break;
    }
    const StageDicts& stage = stages_->stages[i + 1];
    clear_done(stage.next, stage.done_keys, at::Tensor());
    transforms_[i]->step(td, *from, stage.next);
    // The stage's observations that the outer input lacks come back to the
    // next step from here (inv overwrites the others).
    detail::copy_shared(stage.input, stage.next, at::Tensor(), "Compose::step");
    from = &stage.next;
  }
}

TensorDict Compose::state_dict() const {
  TensorDict out;
  for (size_t i = 0; i < transforms_.size(); ++i) {
    const TensorDict state = transforms_[i]->state_dict();
    if (!state.empty()) out.set(std::to_string(i), state);
  }
  return out;
}

void Compose::load_state_dict(const TensorDict& state) {
  const TensorDict mine = state_dict();
  for (const NestedKey& key : mine.keys()) {
    TORCH_CHECK_INDEX(
        state.contains(key) && state.get_entry(key).is_tensordict(),
        "Compose.load_state_dict: transform ", key.str(),
        "'s state is missing");
  }
  // Each transform's load is all or nothing; one that fails after others
  // loaded puts theirs back.
  const auto load = [&](const TensorDict& from) {
    for (size_t i = 0; i < transforms_.size(); ++i) {
      const std::string key = std::to_string(i);
      if (mine.contains(key)) {
        transforms_[i]->load_state_dict(from.get_tensordict(key));
      }
    }
  };
  try {
    load(state);
  } catch (...) {
    load(mine);
    throw;
  }
}

void Compose::reset(const TensorDict& inner, const TensorDict& td) {
  if (transforms_.empty()) {
    Transform::reset(inner, td);
    return;
  }
  check_bound(stages_.get());
  const size_t n = transforms_.size();
  const at::Tensor mask = detail::reset_mask_of(td);
  const TensorDict* from = &inner;
  for (size_t i = 0; i < n; ++i) {
    if (i + 1 == n) {
      transforms_[i]->reset(*from, td);
      break;
    }
    const StageDicts& stage = stages_->stages[i + 1];
    clear_done(stage.reset, stage.done_keys, mask);
    {
      const ScopedKey reset_key(stage.reset, "_reset", mask);
      transforms_[i]->reset(*from, stage.reset);
    }
    detail::copy_shared(stage.input, stage.reset, mask, "Compose::reset");
    from = &stage.reset;
  }
}

void Compose::inv(const TensorDict& td, const TensorDict& inner_td) {
  if (transforms_.empty()) {
    Transform::inv(td, inner_td);
    return;
  }
  check_bound(stages_.get());
  const TensorDict* from = &td;
  for (size_t i = transforms_.size(); i-- > 0;) {
    const TensorDict& to = i == 0 ? inner_td : stages_->stages[i].input;
    transforms_[i]->inv(*from, to);
    from = &to;
  }
}

// ---- TransformedEnv -------------------------------------------------------

namespace {

const EnvBase& checked_env(const std::unique_ptr<EnvBase>& env) {
  TORCH_CHECK_VALUE(env != nullptr, "TransformedEnv: the env is null");
  return *env;
}

}  // namespace

TransformedEnv::TransformedEnv(std::unique_ptr<EnvBase> env,
                               TransformPtr transform)
    : EnvBase(checked_env(env).batch_size().vec(), env->device()),
      env_(std::move(env)),
      transform_(std::move(transform)) {
  TORCH_CHECK_VALUE(transform_ != nullptr,
                    "TransformedEnv: the transform is null");
  TORCH_CHECK_VALUE(transform_->parent() == nullptr,
                    "TransformedEnv: the transform is already part of an env "
                    "(a transform belongs to one env)");
  transform_->set_parent(this);
  try {
    transform_->bind(specs_of(*env_));
    update_specs();
    frame_skip_ = transform_->frame_skip();
    TORCH_CHECK_VALUE(frame_skip_ >= 1,
                      "TransformedEnv: the transform's frame skip must be at "
                      "least 1, got ",
                      frame_skip_);
  } catch (...) {
    transform_->set_parent(nullptr);
    throw;
  }
  const EnvSpecs inner = specs_of(*env_);
  const StageDicts dicts = stage_dicts(inner);
  inner_td_ = dicts.input;
  inner_next_ = dicts.next;
  inner_reset_ = dicts.reset;
  inner_done_keys_ = env_->done_keys();
  inner_observation_keys_ = env_->observation_keys();
  inner_reward_keys_ = env_->reward_keys();
  if (frame_skip_ > 1) {
    reward_sum_ = detail::zeros_of_specs(batch_size(), {&inner.reward});
  }
}

TransformedEnv::~TransformedEnv() { transform_->set_parent(nullptr); }

std::string TransformedEnv::name() const { return "TransformedEnv"; }

void TransformedEnv::update_specs() {
  const EnvSpecs outer = transformed(*transform_, specs_of(*env_));
  set_observation_spec(outer.observation);
  set_action_spec(outer.action);
  set_reward_spec(outer.reward);
  set_done_spec(outer.done);
  set_state_spec(outer.state);
}

void TransformedEnv::reset_impl(const TensorDict& td) {
  const at::Tensor mask = detail::reset_mask_of(td);
  // The base env sees the outer entries it shares (its rows that are not
  // reset among them), and false done flags on the rows it resets.
  detail::copy_shared(inner_reset_, td, at::Tensor(), "TransformedEnv::reset");
  clear_done(inner_reset_, inner_done_keys_, mask);
  {
    const ScopedKey reset_key(inner_reset_, "_reset", mask);
    detail::EnvAccess::reset(*env_, inner_reset_);
  }
  // What the next step gets of the entries the outer dicts lack.
  detail::copy_shared(inner_td_, inner_reset_, mask, "TransformedEnv::reset");
  transform_->reset(inner_reset_, td);
}

void TransformedEnv::step_impl(const TensorDict& td, const TensorDict& next) {
  transform_->inv(td, inner_td_);
  {
    const ScopedKey step_key(
        inner_td_, "_step",
        td.contains("_step") ? td.get("_step") : at::Tensor());
    for (int64_t k = 0; k < frame_skip_; ++k) {
      clear_done(inner_next_, inner_done_keys_, at::Tensor());
      detail::EnvAccess::step(*env_, inner_td_, inner_next_);
      detail::EnvAccess::complete_done(*env_, inner_next_);
      // The next frame, and the next step for the entries the outer dicts
      // lack, start from this step's observations.
      detail::copy_shared(inner_td_, inner_next_, at::Tensor(),
                          "TransformedEnv::step");
      if (frame_skip_ == 1) break;
      for (const NestedKey& key : inner_reward_keys_) {
        const at::Tensor sum = reward_sum_.get(key);
        if (k == 0) {
          detail::copy_all(sum, inner_next_.get(key));
        } else {
          sum.add_(inner_next_.get(key));
        }
      }
      if (detail::any_flag(inner_next_.get("done"), at::Tensor())) break;
    }
    if (frame_skip_ > 1) {
      for (const NestedKey& key : inner_reward_keys_) {
        detail::copy_all(inner_next_.get(key), reward_sum_.get(key));
      }
    }
  }
  transform_->step(td, inner_next_, next);
}

void TransformedEnv::set_seed_impl(uint64_t seed) {
  (void)env_->set_seed(seed);
}

void TransformedEnv::state_dict_impl(TensorDict& out) const {
  out.set("env", env_->state_dict());
  const TensorDict transform = transform_->state_dict();
  if (!transform.empty()) out.set("transform", transform);
}

void TransformedEnv::load_state_dict_impl(const TensorDict& state) {
  if (state.contains("transform")) {
    transform_->load_state_dict(state.get_tensordict("transform"));
  }
  env_->load_state_dict(state.get_tensordict("env"));
}

}  // namespace tensordict
