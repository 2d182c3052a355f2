// The normalizing transforms (tensordict/envs.h): ObservationNorm (an
// affine map, its statistics from random rollouts of its env) and VecNorm
// (TorchRL 0.14's legacy running normalization), with TorchRL's formulas in
// TorchRL's order of operations.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cfloat>
#include <utility>

#include "core/names.h"
#include "envs/flags.h"
#include "envs/transform_rows.h"
#include "tensordict/envs.h"

namespace tensordict {

using detail::key_list;
using detail::shape_str;

namespace {

// torch.finfo(dtype).eps of a floating `scale`, else 1e-6 (TorchRL's).
double default_eps(const at::Tensor& scale) {
  if (!scale.defined()) return 1e-6;
  switch (scale.scalar_type()) {
    case at::kFloat:
      return FLT_EPSILON;
    case at::kDouble:
      return DBL_EPSILON;
    case at::kHalf:
      return 0.0009765625;
    case at::kBFloat16:
      return 0.0078125;
    default:
      return 1e-6;
  }
}

bool is_observation(const Composite& spec, const NestedKey& key) {
  return spec.contains(key) && !spec.get(key).is_composite();
}

// Visits the transforms of `t` in order (a Compose's one by one), until
// `visit` returns false.
template <typename F>
bool walk(Transform& t, F& visit) {
  if (auto* compose = dynamic_cast<Compose*>(&t)) {
    for (const TransformPtr& child : compose->transforms()) {
      if (!walk(*child, visit)) return false;
    }
    return true;
  }
  return visit(t);
}

// Resets the recording of ObservationNorm::init_stats when it ends.
template <typename F>
class OnExit {
 public:
  explicit OnExit(F f) : f_(std::move(f)) {}
  ~OnExit() { f_(); }
  OnExit(const OnExit&) = delete;
  OnExit& operator=(const OnExit&) = delete;

 private:
  F f_;
};

}  // namespace

// ---- ObservationNorm ------------------------------------------------------

ObservationNorm::ObservationNorm(at::Tensor loc, at::Tensor scale,
                                 std::vector<NestedKey> in_keys,
                                 bool standard_normal)
    : loc_(std::move(loc)),
      scale_(std::move(scale)),
      in_keys_(std::move(in_keys)),
      standard_normal_(standard_normal),
      eps_(default_eps(scale_)) {
  TORCH_CHECK_VALUE(
      loc_.defined() == scale_.defined(),
      "Cannot have an mixed initialized and uninitialized loc and scale");
  TORCH_CHECK_VALUE(!in_keys_.empty(),
                    "ObservationNorm: in_keys must name the observations to "
                    "normalize");
}

ObservationNorm::ObservationNorm(double loc, double scale,
                                 std::vector<NestedKey> in_keys,
                                 bool standard_normal)
    : ObservationNorm(at::scalar_tensor(loc, at::kFloat),
                      at::scalar_tensor(scale, at::kFloat).clamp_min(1e-6),
                      std::move(in_keys), standard_normal) {
  eps_ = 1e-6;
}

ObservationNorm::ObservationNorm(std::vector<NestedKey> in_keys,
                                 bool standard_normal)
    : ObservationNorm(at::Tensor(), at::Tensor(), std::move(in_keys),
                      standard_normal) {}

void ObservationNorm::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  const std::vector<NestedKey> observations =
      inner.observation.keys(true, true);
  scratch_ = TensorDict(inner.observation.shape(),
                        inner.observation.device().value_or(at::kCPU));
  for (const NestedKey& key : in_keys_) {
    TORCH_CHECK_VALUE(is_observation(inner.observation, key),
                      "ObservationNorm: key ", key.str(),
                      " is not an observation of the env (observations: ",
                      key_list(observations), ")");
    const c10::IntArrayRef shape = inner.observation.leaf(key).shape();
    const at::Tensor* stats[] = {&loc_, &scale_};
    for (const at::Tensor* stat : stats) {
      TORCH_CHECK_VALUE(!stat->defined() ||
                            at::infer_size(shape, stat->sizes()) == shape.vec(),
                        "ObservationNorm: ", stat == &loc_ ? "loc" : "scale",
                        " of shape ", shape_str(stat->sizes()),
                        " does not broadcast to key ", key.str(), " of shape ",
                        shape_str(shape));
    }
    scratch_.set(key, inner.observation.leaf(key).zero());
  }
}

void ObservationNorm::check_initialized() const {
  TORCH_CHECK(initialized(),
              "Loc/Scale have not been initialized. Either pass in values in "
              "the constructor or call the init_stats method");
}

void ObservationNorm::apply(const at::Tensor& out,
                            const at::Tensor& obs) const {
  at::Tensor o = out;
  if (standard_normal_) {
    at::sub_out(o, obs, loc_);
    o.div_(scale_);
  } else {
    at::mul_out(o, obs, scale_);
    o.add_(loc_);
  }
}

Composite ObservationNorm::transform_observation_spec(Composite spec) const {
  if (!initialized()) return spec;
  for (const NestedKey& key : in_keys_) {
    if (!is_observation(spec, key)) continue;
    const auto* bounded = dynamic_cast<const Bounded*>(&spec.leaf(key));
    if (bounded == nullptr) continue;
    const at::Tensor low = at::empty_like(bounded->low());
    const at::Tensor high = at::empty_like(bounded->high());
    apply(low, bounded->low());
    apply(high, bounded->high());
    spec.set(key, Bounded(low, high, bounded->shape().vec(), bounded->dtype(),
                          bounded->device()));
  }
  return spec;
}

void ObservationNorm::record(const NestedKey& key, const TensorDict& src) {
  records_.push_back(src.get(key).clone());
}

void ObservationNorm::step(const TensorDict& td, const TensorDict& inner_next,
                           const TensorDict& next) {
  if (recording_.has_value() || bypass_) {
    Transform::step(td, inner_next, next);
    if (recording_.has_value()) record(*recording_, inner_next);
    return;
  }
  check_initialized();
  detail::copy_shared(next, inner_next, at::Tensor(), "ObservationNorm::step",
                      in_keys_);
  for (const NestedKey& key : in_keys_) {
    apply(next.get(key), inner_next.get(key));
  }
}

void ObservationNorm::reset(const TensorDict& inner, const TensorDict& td) {
  if (recording_.has_value() || bypass_) {
    Transform::reset(inner, td);
    if (recording_.has_value()) record(*recording_, inner);
    return;
  }
  check_initialized();
  const at::Tensor mask = detail::reset_mask_of(td);
  detail::copy_shared(td, inner, mask, "ObservationNorm::reset", in_keys_);
  for (const NestedKey& key : in_keys_) {
    if (!mask.defined()) {
      apply(td.get(key), inner.get(key));
      continue;
    }
    const at::Tensor rows = scratch_.get(key);
    apply(rows, inner.get(key));
    detail::copy_rows(td.get(key), rows, mask);
  }
}

void ObservationNorm::init_stats(int64_t num_iter,
                                 std::vector<int64_t> reduce_dim,
                                 c10::optional<int64_t> cat_dim,
                                 const c10::optional<NestedKey>& key) {
  TORCH_CHECK_VALUE(!reduce_dim.empty(),
                    "ObservationNorm.init_stats: reduce_dim is empty");
  if (!cat_dim.has_value()) {
    TORCH_CHECK_VALUE(
        reduce_dim.size() == 1,
        "cat_dim must be specified if reduce_dim is not an integer.");
    cat_dim = reduce_dim.front();
  }
  TORCH_CHECK_VALUE(std::find(reduce_dim.begin(), reduce_dim.end(), *cat_dim) !=
                        reduce_dim.end(),
                    "cat_dim must be part of or equal to reduce_dim.");
  TORCH_CHECK(!initialized(), "Loc/Scale are already initialized");
  TORCH_CHECK(in_keys_.size() == 1 || key.has_value(),
              "Transform has multiple in_keys but no specific key was passed "
              "as an argument");
  TORCH_CHECK_VALUE(num_iter > 0,
                    "ObservationNorm.init_stats: num_iter must be positive, "
                    "got ",
                    num_iter);
  const NestedKey stat_key = key.value_or(in_keys_.front());
  TransformedEnv* env = parent();
  TORCH_CHECK(env != nullptr,
              "Cannot initialize the transform if parent env is not defined.");
  // TorchRL: every ObservationNorm before this one must be initialized.
  // The uninitialized ones after it pass their values on meanwhile.
  bool before = true;
  std::vector<ObservationNorm*> bypassed;
  auto check = [this, &before, &bypassed](Transform& t) {
    auto* norm = dynamic_cast<ObservationNorm*>(&t);
    if (&t == this) {
      before = false;
    } else if (before) {
      TORCH_CHECK(norm == nullptr || norm->initialized(),
                  "ObservationNorms need to be initialized in the right "
                  "order. Trying to initialize an ObservationNorm while a "
                  "parent ObservationNorm transform is still uninitialized");
    } else if (norm != nullptr && !norm->initialized()) {
      bypassed.push_back(norm);
    }
    return true;
  };
  walk(*env->transform(), check);
  TORCH_CHECK_VALUE(is_observation(inner_specs().observation, stat_key),
                    "ObservationNorm.init_stats: key ", stat_key.str(),
                    " is not an observation of the env below the transform");

  // The rollouts run through this transform, which passes its inputs on
  // unchanged and records the values of `stat_key` it receives: the reset's,
  // then each step's. A rollout of T steps holds the first T of them at its
  // root.
  recording_ = stat_key;
  for (ObservationNorm* norm : bypassed) norm->bypass_ = true;
  const OnExit reset_recording([this, &bypassed] {
    recording_.reset();
    records_.clear();
    for (ObservationNorm* norm : bypassed) norm->bypass_ = false;
  });
  const auto batch_dims = static_cast<int64_t>(env->batch_size().size());
  int64_t collected = 0;
  std::vector<at::Tensor> data;
  while (collected < num_iter) {
    records_.clear();
    const TensorDict rollout = env->rollout(num_iter);
    const int64_t steps = rollout.batch_size()[batch_dims];
    collected += rollout.numel();
    const std::vector<at::Tensor> frames(records_.begin(),
                                         records_.begin() + steps);
    data.push_back(at::stack(frames, batch_dims));  // [*batch, T, ...]
  }
  const at::Tensor all = at::cat(data, *cat_dim);
  std::vector<int64_t> dims;
  dims.reserve(reduce_dim.size());
  for (const int64_t d : reduce_dim) dims.push_back(d < 0 ? d : d - all.dim());
  std::sort(dims.begin(), dims.end());
  at::Tensor loc = all.mean(dims, /*keepdim=*/true);
  at::Tensor scale = at::std(all, dims, /*unbiased=*/true, /*keepdim=*/true);
  for (const int64_t d : dims) {
    loc = loc.squeeze(d);
    scale = scale.squeeze(d);
  }
  if (!standard_normal_) {
    scale = scale.clamp_min(eps_).reciprocal();
    loc = -loc * scale;
  }
  TORCH_CHECK(at::isfinite(loc).all().item<bool>(),
              "Non-finite values found in loc");
  TORCH_CHECK(at::isfinite(scale).all().item<bool>(),
              "Non-finite values found in scale");
  loc_ = loc;
  scale_ = scale.clamp_min(eps_);
  refresh_parent_specs();
}

// ---- VecNorm --------------------------------------------------------------

namespace {

// TorchRL's _append_last: the key with `suffix` after its last part.
NestedKey append_last(const NestedKey& key, const std::string& suffix) {
  std::vector<std::string> parts = key.parts();
  parts.back() += suffix;
  return NestedKey(std::move(parts));
}

// TorchRL's _sum_left: `value` summed over its leading dims down to `dims`.
at::Tensor sum_left(at::Tensor value, int64_t dims) {
  while (value.dim() > dims) value = value.sum(0);
  return value;
}

}  // namespace

VecNorm::VecNorm(std::vector<NestedKey> in_keys, double decay, double eps)
    : in_keys_(std::move(in_keys)), decay_(decay), eps_(eps) {}

void VecNorm::bind(const EnvSpecs& inner) {
  Transform::bind(inner);
  batch_dims_ = inner.observation.shape().size();
  stats_.clear();
  for (const NestedKey& key : in_keys_) {
    const Composite* spec = is_observation(inner.observation, key)
                                ? &inner.observation
                            : is_observation(inner.reward, key) ? &inner.reward
                                                                : nullptr;
    if (spec == nullptr) continue;  // TorchRL skips keys the data lacks
    const TensorSpec& leaf = spec->leaf(key);
    const std::vector<int64_t> shape(leaf.shape().begin() + batch_dims_,
                                     leaf.shape().end());
    const at::TensorOptions options =
        at::TensorOptions().dtype(leaf.dtype()).device(leaf.device());
    stats_.push_back(Stats{key, at::zeros(shape, options),
                           at::zeros(shape, options),
                           at::zeros({1}, options.dtype(at::kFloat))});
  }
}

Composite VecNorm::transform_observation_spec(Composite spec) const {
  for (const NestedKey& key : in_keys_) {
    if (!is_observation(spec, key)) continue;
    const TensorSpec& leaf = spec.leaf(key);
    if (dynamic_cast<const Bounded*>(&leaf) == nullptr) continue;
    spec.set(key, Unbounded(leaf.shape().vec(), leaf.dtype(), leaf.device()));
  }
  return spec;
}

void VecNorm::update(Stats& stats, const at::Tensor& rows, int64_t n) {
  if (frozen_) return;
  // TorchRL's _update: sum, then the squares, then the count, each decayed
  // then increased.
  const auto dims = static_cast<int64_t>(stats.sum.dim());
  const at::Tensor value_sum = sum_left(rows, dims);
  stats.sum.mul_(decay_);
  stats.sum.add_(value_sum);
  const at::Tensor value_ssq = sum_left(rows.pow(2), dims);
  stats.ssq.mul_(decay_);
  stats.ssq.add_(value_ssq);
  stats.count.mul_(decay_);
  stats.count.add_(n);
}

at::Tensor VecNorm::normalized(const Stats& stats,
                               const at::Tensor& value) const {
  const at::Tensor mean = stats.sum / stats.count;
  const at::Tensor std =
      (stats.ssq / stats.count - mean.pow(2)).clamp_min(eps_).sqrt();
  return (value - mean) / std.clamp_min(eps_);
}

std::vector<NestedKey> VecNorm::stat_keys() const {
  std::vector<NestedKey> keys;
  for (const Stats& s : stats_) keys.push_back(s.key);
  return keys;
}

void VecNorm::step(const TensorDict& td, const TensorDict& inner_next,
                   const TensorDict& next) {
  (void)td;
  detail::copy_shared(next, inner_next, at::Tensor(), "VecNorm::step",
                      stat_keys());
  const int64_t n = std::max<int64_t>(1, next.numel());
  for (Stats& s : stats_) {
    if (!inner_next.contains(s.key) || !next.contains(s.key)) continue;
    const at::Tensor value = inner_next.get(s.key);
    update(s, value, n);
    detail::copy_all(next.get(s.key), normalized(s, value));
  }
}

void VecNorm::reset(const TensorDict& inner, const TensorDict& td) {
  const at::Tensor mask = detail::reset_mask_of(td);
  detail::copy_shared(td, inner, mask, "VecNorm::reset", stat_keys());
  for (Stats& s : stats_) {
    if (!inner.contains(s.key) || !td.contains(s.key)) continue;
    const at::Tensor value = inner.get(s.key);
    if (!mask.defined()) {
      update(s, value, std::max<int64_t>(1, td.numel()));
    } else {
      // The reset rows alone, as `[rows, *feature]`.
      std::vector<int64_t> shape = s.sum.sizes().vec();
      shape.insert(shape.begin(), mask.numel());
      const at::Tensor rows =
          value.reshape(shape).index({mask.reshape({-1}).to(value.device())});
      if (rows.size(0) > 0) update(s, rows, rows.size(0));
    }
    detail::copy_rows(td.get(s.key), normalized(s, value), mask);
  }
}

TensorDict VecNorm::state_dict() const {
  TensorDict out(std::vector<int64_t>{});
  for (const Stats& s : stats_) {
    out.set(append_last(s.key, "_sum"), s.sum.clone());
    out.set(append_last(s.key, "_ssq"), s.ssq.clone());
    out.set(append_last(s.key, "_count"), s.count.clone());
  }
  return out;
}

void VecNorm::load_state_dict(const TensorDict& state) {
  // Every entry checked before the first copy.
  for (const Stats& s : stats_) {
    const std::pair<const char*, const at::Tensor*> stats[] = {
        {"_sum", &s.sum}, {"_ssq", &s.ssq}, {"_count", &s.count}};
    for (const auto& [suffix, stat] : stats) {
      const NestedKey name = append_last(s.key, suffix);
      TORCH_CHECK_INDEX(
          state.contains(name) && state.get_entry(name).is_tensor(),
          "VecNorm.load_state_dict: key ", name.str(), " is missing");
      const at::Tensor value = state.get(name);
      TORCH_CHECK_VALUE(value.sizes() == stat->sizes(),
                        "VecNorm.load_state_dict: key ", name.str(),
                        ": expected shape ", shape_str(stat->sizes()), ", got ",
                        shape_str(value.sizes()));
    }
  }
  for (Stats& s : stats_) {
    s.sum.copy_(state.get(append_last(s.key, "_sum")));
    s.ssq.copy_(state.get(append_last(s.key, "_ssq")));
    s.count.copy_(state.get(append_last(s.key, "_count")));
  }
}

TensorDict VecNorm::loc() const {
  TensorDict out(std::vector<int64_t>{});
  for (const Stats& s : stats_) out.set(s.key, s.sum / s.count);
  return out;
}

TensorDict VecNorm::scale() const {
  TensorDict out(std::vector<int64_t>{});
  for (const Stats& s : stats_) {
    const at::Tensor mean = s.sum / s.count;
    out.set(s.key, (s.ssq / s.count - mean.pow(2)).clamp_min(eps_).sqrt());
  }
  return out;
}

}  // namespace tensordict
