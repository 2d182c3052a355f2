// RolloutBuffer: on-policy rollout storage; its estimates are returns.cpp's.
#include "tensordict/rollout_buffer.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/tree.h"
#include "rl/returns_keys.h"

namespace tensordict {

// ---- RolloutBuffer -----------------------------------------------------------

RolloutBuffer::RolloutBuffer(int64_t num_steps, int64_t num_envs,
                             c10::optional<at::Device> device)
    : num_steps_(num_steps), num_envs_(num_envs) {
  TORCH_CHECK_VALUE(num_steps > 0 && num_envs > 0,
                    "RolloutBuffer: num_steps and num_envs must be positive, "
                    "got num_steps=",
                    num_steps, ", num_envs=", num_envs);
  data_ = device ? TensorDict({num_steps, num_envs},
                              detail::usable_device("RolloutBuffer", *device))
                 : TensorDict({num_steps, num_envs});
}

void RolloutBuffer::step(int64_t t, const TensorDict& data) {
  TORCH_CHECK_INDEX(t >= 0 && t < num_steps_, "RolloutBuffer::step: step ", t,
                    " is out of range for a buffer of ", num_steps_, " steps");
  TORCH_CHECK(data.batch_dims() == 1 && data.batch_size()[0] == num_envs_,
              "RolloutBuffer::step: expected a dict of batch size [", num_envs_,
              "] (one row per env), got ",
              detail::shape_str(data.batch_size()));
  const detail::TensorDictImpl& value = detail::TensorDictImpl::of(data);
  if (step_keys_ != nullptr && !detail::same_keys(*step_keys_, value)) {
    const std::string name = "step " + std::to_string(t);
    detail::throw_key_difference("RolloutBuffer::step", *step_keys_, value,
                                 "the first step", name.c_str());
  }
  data_[t] = data;
  if (step_keys_ == nullptr) {
    const at::Tensor placeholder = at::empty({0});
    step_keys_ = detail::rebuild(
        value, value.batch_size,
        // A capture, returned (copied) for every leaf: never moved from.
        // NOLINTNEXTLINE(performance-no-automatic-move)
        [&](const detail::KeyPath&, const at::Tensor&) { return placeholder; });
  }
}

TensorDict RolloutBuffer::data() const { return data_; }

void RolloutBuffer::compute_gae(double gamma, double lambda,
                                const GaeKeys& keys) {
  store(ValueEstimator::gae(gamma, lambda).keys(keys),
        "RolloutBuffer::compute_gae", "compute_gae");
}

void RolloutBuffer::compute(const ValueEstimator& estimator) {
  store(estimator, "RolloutBuffer::compute", "compute");
}

void RolloutBuffer::store(const ValueEstimator& estimator, const char* fn,
                          const char* before) {
  const EstimatorKeys& keys = estimator.keys();
  // The outputs must be storable (checked first, so that a failure writes
  // nothing).
  detail::check_estimator_outputs(data_, keys, fn);
  AdvantageEstimate res = estimator.run(data_, 0, fn, before);
  // Reuse the previous rollout's tensors when they fit (no reallocation).
  auto put = [&](const NestedKey& key, const at::Tensor& t) {
    const detail::Node* n =
        detail::lookup(detail::TensorDictImpl::of(data_), key);
    if (n != nullptr && !n->is_dict() && n->tensor.sizes() == t.sizes() &&
        n->tensor.scalar_type() == t.scalar_type() &&
        n->tensor.device() == t.device()) {
      n->tensor.copy_(t);
    } else {
      data_.set(key, t);
    }
  };
  put(keys.advantage(), res.advantage);
  put(keys.value_target(), res.value_target);
}

std::vector<TensorDict> RolloutBuffer::minibatches(
    int64_t num_minibatches, c10::optional<at::Generator> generator) const {
  const int64_t total = num_steps_ * num_envs_;
  TORCH_CHECK_VALUE(num_minibatches >= 1 && num_minibatches <= total,
                    "RolloutBuffer::minibatches: num_minibatches must be in "
                    "[1, ",
                    total, "] (num_steps * num_envs), got ", num_minibatches);
  TORCH_CHECK(!data_.empty(),
              "RolloutBuffer::minibatches: the buffer is empty (write the "
              "steps with step() first)");
  const TensorDict flat = data_.reshape({total});
  const at::Tensor perm = at::randperm(total, std::move(generator),
                                       at::TensorOptions().dtype(at::kLong));
  const int64_t size = total / num_minibatches;
  std::vector<TensorDict> out;
  out.reserve(static_cast<size_t>(num_minibatches));
  for (int64_t i = 0; i < num_minibatches; ++i) {
    // The same rows as flat[idx]: a row memcpy per contiguous CPU leaf,
    // index_select for the others (the replay buffer's sample path).
    out.push_back(detail::TensorDictImpl::wrap(detail::gather_rows(
        detail::TensorDictImpl::of(flat), perm.narrow(0, i * size, size))));
  }
  return out;
}

}  // namespace tensordict
