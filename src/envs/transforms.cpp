// The transforms that count, flag and move entries (tensordict/envs.h):
// StepCounter, RewardSum, InitTracker, FrameSkip, DoubleToFloat, CatTensors,
// RenameTransform, ExcludeTransform and SelectTransform, with TorchRL
// 0.14's specs and values. The normalizations (ObservationNorm, VecNorm)
// are in transforms_norm.cpp.
//
// Each step writes into the dicts it is given, in place. The per-step work
// of StepCounter, RewardSum and InitTracker is a loop over the bytes of
// contiguous CPU tensors (ATen for any other), so that a rollout through
// them allocates nothing.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/names.h"
#include "core/row_copy.h"
#include "envs/flags.h"
#include "envs/transform_rows.h"
#include "tensordict/envs.h"

namespace tensordict {

using detail::dtype_name;
using detail::key_list;
using detail::shape_str;

namespace {

// `[*spec.shape(), 1]`: the shape of a done flag of an env of `spec`'s.
std::vector<int64_t> flag_shape(const Composite& spec) {
  std::vector<int64_t> shape = spec.shape().vec();
  shape.push_back(1);
  return shape;
}

at::Device device_of(const Composite& spec) {
  return spec.device().value_or(at::kCPU);
}

bool contains_key(const std::vector<NestedKey>& keys, const NestedKey& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// `key` with its last part replaced by `last` (TorchRL's _replace_last).
NestedKey replace_last(const NestedKey& key, const std::string& last) {
  std::vector<std::string> parts = key.parts();
  parts.back() = last;
  return NestedKey(std::move(parts));
}

// TorchRL's _sort_keys: a key's name, a nested key's parts joined.
std::string sort_name(const NestedKey& key) {
  std::string out;
  for (size_t i = 0; i < key.parts().size(); ++i) {
    if (i > 0) out += "_-|-_";
    out += key.parts()[i];
  }
  return out;
}

// `out = prev + add` element-wise, or `out = add` without `prev`: a loop
// over contiguous CPU tensors of one dtype, ATen otherwise.
template <typename T>
bool add_loop(const at::Tensor& out, const at::Tensor& prev,
              const at::Tensor& add, at::ScalarType dtype) {
  if (!detail::plain_cpu(out, dtype) || !detail::plain_cpu(add, dtype) ||
      add.numel() != out.numel() ||
      (prev.defined() &&
       (!detail::plain_cpu(prev, dtype) || prev.numel() != out.numel()))) {
    return false;
  }
  T* o = out.data_ptr<T>();
  const T* a = add.data_ptr<T>();
  const T* p = prev.defined() ? prev.data_ptr<T>() : nullptr;
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    o[i] = p != nullptr ? static_cast<T>(p[i] + a[i]) : a[i];
  }
  detail::bump(detail::version_of(out));
  return true;
}

void add_into(const at::Tensor& out, const at::Tensor& prev,
              const at::Tensor& add) {
  if (add_loop<float>(out, prev, add, at::kFloat) ||
      add_loop<double>(out, prev, add, at::kDouble) ||
      add_loop<int64_t>(out, prev, add, at::kLong)) {
    return;
  }
  const at::Tensor a = add.reshape(out.sizes());
  if (prev.defined()) {
    at::Tensor o = out;
    at::add_out(o, prev.reshape(out.sizes()), a);
  } else {
    out.copy_(a);
  }
}

// A leaf spec of `dtype` with `spec`'s class, shape, device and space.
SpecPtr with_dtype(const TensorSpec& spec, at::ScalarType dtype) {
  const std::vector<int64_t> shape = spec.shape().vec();
  const at::Device device = spec.device();
  if (const auto* b = dynamic_cast<const Bounded*>(&spec)) {
    return std::make_shared<const Bounded>(
        b->low().to(dtype), b->high().to(dtype), shape, dtype, device);
  }
  if (dynamic_cast<const Unbounded*>(&spec) != nullptr) {
    return std::make_shared<const Unbounded>(shape, dtype, device);
  }
  if (const auto* c = dynamic_cast<const Categorical*>(&spec)) {
    return std::make_shared<const Categorical>(c->n(), shape, dtype, device);
  }
  if (const auto* o = dynamic_cast<const OneHot*>(&spec)) {
    return std::make_shared<const OneHot>(o->n(), shape, dtype, device);
  }
  if (const auto* b = dynamic_cast<const Binary*>(&spec)) {
    return std::make_shared<const Binary>(b->n(), shape, dtype, device);
  }
  const auto& m = dynamic_cast<const MultiCategorical&>(spec);
  return std::make_shared<const MultiCategorical>(m.nvec(), shape, dtype,
                                                  device);
}

}  // namespace

// ---- StepCounter ----------------------------------------------------------

StepCounter::StepCounter(int64_t max_steps) : max_steps_(max_steps) {
  TORCH_CHECK_VALUE(max_steps >= 0,
                    "StepCounter: max_steps should have a value greater or "
                    "equal to one (or 0, no truncation), got ",
                    max_steps);
}

namespace {

const char* const kStepCount = "step_count";

Composite with_step_count(Composite spec) {
  const std::vector<int64_t> shape = flag_shape(spec);
  const at::Device device = device_of(spec);
  spec.set(kStepCount,
           Bounded(at::zeros({}, at::kLong),
                   at::full({}, std::numeric_limits<int64_t>::max(), at::kLong),
                   shape, at::kLong, device));
  return spec;
}

}  // namespace

Composite StepCounter::transform_observation_spec(Composite spec) const {
  return with_step_count(std::move(spec));
}

Composite StepCounter::transform_state_spec(Composite spec) const {
  return with_step_count(std::move(spec));
}

Composite StepCounter::transform_done_spec(Composite spec) const {
  if (max_steps_ > 0) {
    const Categorical flag(2, flag_shape(spec), at::kBool, device_of(spec));
    spec.set("truncated", flag);
    spec.set("done", flag);
  }
  return spec;
}

void StepCounter::step(const TensorDict& td, const TensorDict& inner_next,
                       const TensorDict& next) {
  TORCH_CHECK_INDEX(
      td.contains(kStepCount) && td.get_entry(kStepCount).is_tensor(),
      "StepCounter: the step's input has no \"step_count\" "
      "(step from what reset or step_mdp returns)");
  Transform::step(td, inner_next, next);
  const at::Tensor prev = td.get(kStepCount);
  const at::Tensor count = next.get(kStepCount);
  const bool truncates = max_steps_ > 0;
  const at::Tensor truncated = truncates ? next.get("truncated") : at::Tensor();
  const at::Tensor done = truncates ? next.get("done") : at::Tensor();
  bool* t = truncates ? detail::flag_bytes(truncated) : nullptr;
  bool* d = truncates ? detail::flag_bytes(done) : nullptr;
  const int64_t n = count.numel();
  if (detail::plain_cpu(count, at::kLong) &&
      detail::plain_cpu(prev, at::kLong) && prev.numel() == n &&
      (!truncates || (t != nullptr && d != nullptr && truncated.numel() == n &&
                      done.numel() == n))) {
    int64_t* c = count.data_ptr<int64_t>();
    const int64_t* p = prev.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      c[i] = p[i] + 1;
      if (truncates) {
        t[i] = t[i] || c[i] >= max_steps_;
        d[i] = d[i] || t[i];
      }
    }
    detail::bump(detail::version_of(count));
    if (truncates) {
      detail::bump(detail::version_of(truncated));
      detail::bump(detail::version_of(done));
    }
    return;
  }
  count.copy_(prev.reshape(count.sizes()) + 1);
  if (truncates) {
    truncated.logical_or_(count >= max_steps_);
    done.logical_or_(truncated);
  }
}

void StepCounter::reset(const TensorDict& inner, const TensorDict& td) {
  Transform::reset(inner, td);
  // TorchRL: step_count = where(~reset, step_count, 0), and truncated =
  // (0 >= max_steps) | truncated on the reset rows: false, as EnvBase left
  // it.
  detail::fill_rows(td.get(kStepCount), detail::reset_mask_of(td), false);
}

// ---- RewardSum ------------------------------------------------------------

RewardSum::RewardSum(std::vector<NestedKey> in_keys,
                     std::vector<NestedKey> out_keys)
    : in_keys_(std::move(in_keys)),
      out_keys_(std::move(out_keys)),
      default_in_(in_keys_.empty()),
      default_out_(out_keys_.empty()) {
  TORCH_CHECK_VALUE(default_out_ || out_keys_.size() == in_keys_.size(),
                    "RewardSum expects the same number of input and output "
                    "keys, got ",
                    in_keys_.size(), " and ", out_keys_.size());
}

void RewardSum::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  const std::vector<NestedKey> rewards = inner.reward.keys(true, true);
  if (default_in_) in_keys_ = rewards;
  for (const NestedKey& key : in_keys_) {
    TORCH_CHECK_VALUE(contains_key(rewards, key), "RewardSum: the in_key ",
                      key.str(), " is not present in the reward spec (",
                      key_list(rewards), ")");
  }
  if (default_out_) {
    out_keys_.clear();
    for (const NestedKey& key : in_keys_) {
      out_keys_.push_back(replace_last(key, "episode_" + key.back()));
    }
  }
}

Composite RewardSum::transform_observation_spec(Composite spec) const {
  for (size_t i = 0; i < in_keys_.size(); ++i) {
    spec.set(out_keys_[i], inner_specs().reward.get(in_keys_[i]));
  }
  return spec;
}

Composite RewardSum::transform_state_spec(Composite spec) const {
  return transform_observation_spec(std::move(spec));
}

void RewardSum::step(const TensorDict& td, const TensorDict& inner_next,
                     const TensorDict& next) {
  Transform::step(td, inner_next, next);
  for (size_t i = 0; i < in_keys_.size(); ++i) {
    const NestedKey& out = out_keys_[i];
    // TorchRL: tensordict.get(out_key, 0.0) + reward.
    const at::Tensor prev = td.contains(out) && td.get_entry(out).is_tensor()
                                ? td.get(out)
                                : at::Tensor();
    add_into(next.get(out), prev, inner_next.get(in_keys_[i]));
  }
}

void RewardSum::reset(const TensorDict& inner, const TensorDict& td) {
  Transform::reset(inner, td);
  const at::Tensor mask = detail::reset_mask_of(td);
  for (const NestedKey& out : out_keys_) {
    detail::fill_rows(td.get(out), mask, false);
  }
}

// ---- InitTracker ----------------------------------------------------------

InitTracker::InitTracker(std::string init_key)
    : init_key_(std::move(init_key)) {}

Composite InitTracker::transform_observation_spec(Composite spec) const {
  spec.set(init_key_,
           Categorical(2, flag_shape(spec), at::kBool, device_of(spec)));
  return spec;
}

void InitTracker::step(const TensorDict& td, const TensorDict& inner_next,
                       const TensorDict& next) {
  Transform::step(td, inner_next, next);
  detail::fill_rows(next.get(init_key_), at::Tensor(), false);
}

void InitTracker::reset(const TensorDict& inner, const TensorDict& td) {
  Transform::reset(inner, td);
  detail::fill_rows(td.get(init_key_), detail::reset_mask_of(td), true);
}

// ---- FrameSkip ------------------------------------------------------------

FrameSkip::FrameSkip(int64_t n) : n_(n) {
  TORCH_CHECK_VALUE(n >= 1,
                    "FrameSkip: frame_skip should have a value greater or "
                    "equal to one, got ",
                    n);
}

// ---- DoubleToFloat --------------------------------------------------------

DoubleToFloat::DoubleToFloat(c10::optional<std::vector<NestedKey>> in_keys,
                             c10::optional<std::vector<NestedKey>> in_keys_inv)
    : given_in_(std::move(in_keys)), given_inv_(std::move(in_keys_inv)) {}

namespace {

std::vector<NestedKey> double_keys(
    std::initializer_list<const Composite*> specs) {
  std::vector<NestedKey> out;
  for (const Composite* spec : specs) {
    for (const NestedKey& key : spec->keys(true, true)) {
      if (spec->leaf(key).dtype() == at::kDouble) out.push_back(key);
    }
  }
  return out;
}

void check_double(const Composite& spec, const NestedKey& key,
                  const char* what) {
  const at::ScalarType dtype = spec.leaf(key).dtype();
  TORCH_CHECK_TYPE(dtype == at::kDouble, "DoubleToFloat: key ", key.str(),
                   ": the ", what, " spec's dtype is ", dtype_name(dtype),
                   ", not torch.float64");
}

Composite to_float(Composite spec, const std::vector<NestedKey>& keys) {
  for (const NestedKey& key : keys) {
    if (spec.contains(key) && !spec.get(key).is_composite()) {
      spec.set(key, with_dtype(spec.leaf(key), at::kFloat));
    }
  }
  return spec;
}

}  // namespace

void DoubleToFloat::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  if (given_in_.has_value()) {
    in_keys_ = *given_in_;
    in_keys_inv_ = given_inv_.value_or(std::vector<NestedKey>{});
  } else {
    in_keys_ = double_keys({&inner.observation, &inner.reward});
    in_keys_inv_ = given_inv_.has_value()
                       ? *given_inv_
                       : double_keys({&inner.action, &inner.state});
  }
  const std::pair<const Composite*, const char*> outputs[] = {
      {&inner.observation, "observation"}, {&inner.reward, "reward"}};
  for (const NestedKey& key : in_keys_) {
    for (const auto& [spec, what] : outputs) {
      if (spec->contains(key) && !spec->get(key).is_composite()) {
        check_double(*spec, key, what);
      }
    }
  }
  for (const NestedKey& key : in_keys_inv_) {
    const bool action = inner.action.contains(key);
    TORCH_CHECK_INDEX(action || inner.state.contains(key),
                      "DoubleToFloat: key ", key.str(),
                      " not found in state_spec and action_spec");
    check_double(action ? inner.action : inner.state, key,
                 action ? "action" : "state");
  }
}

Composite DoubleToFloat::transform_observation_spec(Composite spec) const {
  return to_float(std::move(spec), in_keys_);
}
Composite DoubleToFloat::transform_reward_spec(Composite spec) const {
  return to_float(std::move(spec), in_keys_);
}
Composite DoubleToFloat::transform_action_spec(Composite spec) const {
  return to_float(std::move(spec), in_keys_inv_);
}
Composite DoubleToFloat::transform_state_spec(Composite spec) const {
  // TorchRL: an inv key goes to the action spec when it has it, else to
  // the state spec.
  std::vector<NestedKey> keys;
  for (const NestedKey& key : in_keys_inv_) {
    if (!inner_specs().action.contains(key)) keys.push_back(key);
  }
  return to_float(std::move(spec), keys);
}

// ---- CatTensors -----------------------------------------------------------

CatTensors::CatTensors(std::vector<NestedKey> in_keys, NestedKey out_key,
                       int64_t dim, bool del_keys, bool sort)
    : in_keys_(std::move(in_keys)),
      out_key_(std::move(out_key)),
      dim_(dim),
      del_keys_(del_keys),
      sort_(sort) {
  TORCH_CHECK_VALUE(!in_keys_.empty() || dim == -1,
                    "Lazy call to CatTensors is only supported when `dim=-1`.");
  if (sort_) {
    std::stable_sort(in_keys_.begin(), in_keys_.end(),
                     [](const NestedKey& a, const NestedKey& b) {
                       return sort_name(a) < sort_name(b);
                     });
  }
}

void CatTensors::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  const Composite& obs = inner.observation;
  const size_t batch_dims = obs.shape().size();
  if (in_keys_.empty()) {
    for (const NestedKey& key : obs.keys(true, true)) {
      if (obs.leaf(key).shape().size() == batch_dims + 1) {
        in_keys_.push_back(key);
      }
    }
    std::stable_sort(in_keys_.begin(), in_keys_.end(),
                     [](const NestedKey& a, const NestedKey& b) {
                       return sort_name(a) < sort_name(b);
                     });
    TORCH_CHECK_VALUE(!in_keys_.empty(),
                      "CatTensors: the env has no observation of one dim to "
                      "concatenate");
  }
  for (const NestedKey& key : in_keys_) {
    TORCH_CHECK_VALUE(
        obs.contains(key) && !obs.get(key).is_composite(),
        "CatTensor got a list of keys that does not match the keys in "
        "observation_spec. Make sure the environment has an observation_spec "
        "attribute that includes all the specs needed for CatTensor.");
  }
  scratch_ = transform_observation_spec(obs).leaf(out_key_).zero();
}

Composite CatTensors::transform_observation_spec(Composite spec) const {
  // TorchRL: the keys in the spec's order, each shape[dim] summed.
  std::vector<NestedKey> keys;
  for (const NestedKey& key : spec.keys(true, true)) {
    if (contains_key(in_keys_, key)) keys.push_back(key);
  }
  TORCH_CHECK_VALUE(!keys.empty(), "CatTensors: none of the keys ",
                    key_list(in_keys_), " is an observation");
  const TensorSpec& first = spec.leaf(keys.front());
  std::vector<int64_t> shape = first.shape().vec();
  TORCH_CHECK_INDEX(!shape.empty() &&
                        dim_ >= -static_cast<int64_t>(shape.size()) &&
                        dim_ < static_cast<int64_t>(shape.size()),
                    "CatTensors: dim ", dim_, " is out of range for key ",
                    keys.front().str(), " of shape ", shape_str(shape));
  const size_t d = static_cast<size_t>(
      dim_ < 0 ? dim_ + static_cast<int64_t>(shape.size()) : dim_);
  int64_t total = 0;
  for (const NestedKey& key : keys) {
    const c10::IntArrayRef s = spec.leaf(key).shape();
    total += s.empty() ? 1 : s[d];
  }
  shape[d] = total;
  const at::ScalarType dtype = first.dtype();
  const at::Device device = first.device();
  spec.set(out_key_, Unbounded(shape, dtype, device));
  if (del_keys_) {
    for (const NestedKey& key : in_keys_) {
      if (key != out_key_ && spec.contains(key)) spec.erase(key);
    }
  }
  return spec;
}

void CatTensors::cat_into(const at::Tensor& out, const TensorDict& src) {
  values_.clear();
  for (const NestedKey& key : in_keys_) values_.push_back(src.get(key));
  at::Tensor o = out;
  at::cat_out(o, values_, dim_);
}

void CatTensors::step(const TensorDict& td, const TensorDict& inner_next,
                      const TensorDict& next) {
  (void)td;
  detail::copy_shared(next, inner_next, at::Tensor(), "CatTensors::step",
                      {out_key_});
  cat_into(next.get(out_key_), inner_next);
}

void CatTensors::reset(const TensorDict& inner, const TensorDict& td) {
  const at::Tensor mask = detail::reset_mask_of(td);
  detail::copy_shared(td, inner, mask, "CatTensors::reset", {out_key_});
  cat_into(scratch_, inner);
  detail::copy_rows(td.get(out_key_), scratch_, mask);
}

// ---- RenameTransform ------------------------------------------------------

RenameTransform::RenameTransform(std::vector<NestedKey> in_keys,
                                 std::vector<NestedKey> out_keys,
                                 std::vector<NestedKey> in_keys_inv,
                                 std::vector<NestedKey> out_keys_inv,
                                 bool create_copy)
    : in_keys_(std::move(in_keys)),
      out_keys_(std::move(out_keys)),
      in_keys_inv_(std::move(in_keys_inv)),
      out_keys_inv_(std::move(out_keys_inv)),
      create_copy_(create_copy) {
  if (out_keys_inv_.empty()) out_keys_inv_ = in_keys_inv_;
  TORCH_CHECK_VALUE(in_keys_.size() == out_keys_.size(),
                    "RenameTransform: the number of in_keys (", in_keys_.size(),
                    ") should match the number of out_keys (", out_keys_.size(),
                    ")");
  TORCH_CHECK_VALUE(
      in_keys_inv_.size() == out_keys_inv_.size(),
      "RenameTransform: the number of in_keys_inv (", in_keys_inv_.size(),
      ") should match the number of out_keys_inv (", out_keys_inv_.size(), ")");
  for (const NestedKey& key : out_keys_) {
    TORCH_CHECK_VALUE(!contains_key(in_keys_, key),
                      "RenameTransform: cannot have matching in and out_keys "
                      "because order is unclear. Please use separated "
                      "transforms. Got in_keys=",
                      key_list(in_keys_), " and out_keys=", key_list(out_keys_),
                      ".");
  }
}

Composite RenameTransform::rename(Composite spec,
                                  const std::vector<NestedKey>& from,
                                  const std::vector<NestedKey>& to) const {
  // TorchRL: in the spec's order, each renamed entry set at its new key
  // (appended), then the old one removed.
  for (const NestedKey& key : spec.keys(true)) {
    const auto it = std::find(from.begin(), from.end(), key);
    if (it == from.end() || !spec.contains(key)) continue;
    const NestedKey& target = to[static_cast<size_t>(it - from.begin())];
    spec.set(target, spec.get(key));
    if (!create_copy_) spec.erase(key);
  }
  return spec;
}

Composite RenameTransform::transform_observation_spec(Composite spec) const {
  return rename(std::move(spec), in_keys_, out_keys_);
}
Composite RenameTransform::transform_reward_spec(Composite spec) const {
  return rename(std::move(spec), in_keys_, out_keys_);
}
Composite RenameTransform::transform_done_spec(Composite spec) const {
  return rename(std::move(spec), in_keys_, out_keys_);
}
Composite RenameTransform::transform_state_spec(Composite spec) const {
  return rename(std::move(spec), in_keys_inv_, out_keys_inv_);
}
Composite RenameTransform::transform_action_spec(Composite spec) const {
  return rename(std::move(spec), in_keys_inv_, out_keys_inv_);
}

namespace {

// dst[to[i]] = src[from[i]] (the rows of `mask`) where both dicts have them.
void copy_renamed(const TensorDict& dst, const TensorDict& src,
                  const std::vector<NestedKey>& from,
                  const std::vector<NestedKey>& to, const at::Tensor& mask) {
  for (size_t i = 0; i < from.size(); ++i) {
    if (dst.contains(to[i]) && dst.get_entry(to[i]).is_tensor() &&
        src.contains(from[i]) && src.get_entry(from[i]).is_tensor()) {
      detail::copy_rows(dst.get(to[i]), src.get(from[i]), mask);
    }
  }
}

}  // namespace

void RenameTransform::step(const TensorDict& td, const TensorDict& inner_next,
                           const TensorDict& next) {
  (void)td;
  detail::copy_shared(next, inner_next, at::Tensor(), "RenameTransform::step",
                      out_keys_);
  copy_renamed(next, inner_next, in_keys_, out_keys_, at::Tensor());
}

void RenameTransform::reset(const TensorDict& inner, const TensorDict& td) {
  const at::Tensor mask = detail::reset_mask_of(td);
  detail::copy_shared(td, inner, mask, "RenameTransform::reset", out_keys_);
  copy_renamed(td, inner, in_keys_, out_keys_, mask);
}

void RenameTransform::inv(const TensorDict& td, const TensorDict& inner_td) {
  detail::copy_shared(inner_td, td, at::Tensor(), "RenameTransform::inv",
                      in_keys_inv_);
  copy_renamed(inner_td, td, out_keys_inv_, in_keys_inv_, at::Tensor());
}

// ---- ExcludeTransform -----------------------------------------------------

ExcludeTransform::ExcludeTransform(std::vector<NestedKey> keys)
    : keys_(std::move(keys)) {}

void ExcludeTransform::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  for (const NestedKey& key : keys_) {
    TORCH_CHECK_INDEX(inner.done.contains(key) || inner.reward.contains(key) ||
                          inner.observation.contains(key),
                      "ExcludeTransform: key ", key.str(),
                      " not found in the environment outputs");
  }
}

namespace {

Composite without(Composite spec, const std::vector<NestedKey>& keys) {
  for (const NestedKey& key : keys) {
    if (spec.contains(key)) spec.erase(key);
  }
  return spec;
}

}  // namespace

Composite ExcludeTransform::transform_observation_spec(Composite spec) const {
  // TorchRL looks a key up in the done, the reward, then the observation
  // spec, and removes it from the first that has it.
  std::vector<NestedKey> keys;
  for (const NestedKey& key : keys_) {
    if (!inner_specs().done.contains(key) &&
        !inner_specs().reward.contains(key)) {
      keys.push_back(key);
    }
  }
  return without(std::move(spec), keys);
}
Composite ExcludeTransform::transform_reward_spec(Composite spec) const {
  std::vector<NestedKey> keys;
  for (const NestedKey& key : keys_) {
    if (!inner_specs().done.contains(key)) keys.push_back(key);
  }
  return without(std::move(spec), keys);
}
Composite ExcludeTransform::transform_done_spec(Composite spec) const {
  return without(std::move(spec), keys_);
}

// ---- SelectTransform ------------------------------------------------------

SelectTransform::SelectTransform(std::vector<NestedKey> keys, bool keep_rewards,
                                 bool keep_dones)
    : keys_(std::move(keys)),
      keep_rewards_(keep_rewards),
      keep_dones_(keep_dones) {}

Composite SelectTransform::keep(Composite spec) const {
  for (const NestedKey& key : spec.keys(true, true)) {
    if (!contains_key(keys_, key)) spec.erase(key);
  }
  return spec;
}

Composite SelectTransform::transform_observation_spec(Composite spec) const {
  return keep(std::move(spec));
}
Composite SelectTransform::transform_reward_spec(Composite spec) const {
  return keep_rewards_ ? spec : keep(std::move(spec));
}
Composite SelectTransform::transform_done_spec(Composite spec) const {
  return keep_dones_ ? spec : keep(std::move(spec));
}

}  // namespace tensordict
