// RolloutBuffer and gae(): on-policy rollout storage and generalized
// advantage estimation.
//
// gae() runs the reverse-time recurrence as a plain loop over contiguous CPU
// memory: the time dim is outermost, so each step is one contiguous row of
// `N = numel / T` columns, and the running advantage of every column lives in
// one double array. A loop of per-step tensor ops would cost T dispatches of
// several ops each (about 100x slower at T = 2048).
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

namespace tensordict {

namespace {

using detail::shape_str;

// Reads one input as contiguous `scalar_t` CPU memory (a copy only when the
// tensor is not already that).
at::Tensor as_cpu_contiguous(const at::Tensor& t, at::ScalarType dtype) {
  return t.detach().to(at::kCPU, dtype).contiguous();
}

template <typename scalar_t>
void gae_kernel(const scalar_t* reward, const scalar_t* value,
                const scalar_t* next_value, const bool* done,
                const bool* terminated, int64_t steps, int64_t cols,
                double gamma, double lambda, scalar_t* advantage,
                scalar_t* value_target) {
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  double* a = acc.data();
  const double gl = gamma * lambda;
  for (int64_t t = steps - 1; t >= 0; --t) {
    const int64_t off = t * cols;
    const scalar_t* r = reward + off;
    const scalar_t* v = value + off;
    const scalar_t* nv = next_value + off;
    const bool* d = done + off;
    const bool* term = terminated + off;
    scalar_t* adv = advantage + off;
    scalar_t* tgt = value_target + off;
    for (int64_t j = 0; j < cols; ++j) {
      const double vj = static_cast<double>(v[j]);
      const double boot = term[j] ? 0.0 : static_cast<double>(nv[j]);
      const double delta = static_cast<double>(r[j]) + gamma * boot - vj;
      const double aj = delta + (d[j] ? 0.0 : gl * a[j]);
      a[j] = aj;
      adv[j] = static_cast<scalar_t>(aj);
      tgt[j] = static_cast<scalar_t>(aj + vj);
    }
  }
}

void check_gae_input(const at::Tensor& t, const char* name,
                     const at::Tensor& value) {
  TORCH_CHECK(t.defined(), "gae: ", name, " is an undefined tensor");
  TORCH_CHECK(t.sizes() == value.sizes(), "gae: ", name, " has shape ",
              shape_str(t.sizes()), ", expected value's shape ",
              shape_str(value.sizes()));
}

}  // namespace

GaeResult gae(const at::Tensor& reward, const at::Tensor& value,
              const at::Tensor& next_value, const at::Tensor& done,
              const at::Tensor& terminated, double gamma, double lambda) {
  TORCH_CHECK(value.defined(), "gae: value is an undefined tensor");
  TORCH_CHECK(value.dim() >= 1,
              "gae: value must have a time dim [T, ...], got shape ",
              shape_str(value.sizes()));
  TORCH_CHECK_TYPE(at::isFloatingType(value.scalar_type()),
                   "gae: value must be a floating-point tensor, got ",
                   detail::dtype_name(value.scalar_type()));
  check_gae_input(reward, "reward", value);
  check_gae_input(next_value, "next_value", value);
  check_gae_input(done, "done", value);
  check_gae_input(terminated, "terminated", value);

  // Half and bfloat16 are computed in float and cast back.
  const at::ScalarType out_dtype = value.scalar_type();
  const at::ScalarType dtype =
      out_dtype == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor r = as_cpu_contiguous(reward, dtype);
  const at::Tensor v = as_cpu_contiguous(value, dtype);
  const at::Tensor nv = as_cpu_contiguous(next_value, dtype);
  // Numeric flags count as true when non-zero.
  const at::Tensor d = as_cpu_contiguous(done, at::kBool);
  const at::Tensor term = as_cpu_contiguous(terminated, at::kBool);

  at::Tensor adv = at::empty(v.sizes(), v.options());
  at::Tensor tgt = at::empty(v.sizes(), v.options());
  const int64_t steps = v.size(0);
  const int64_t cols = steps == 0 ? 0 : v.numel() / steps;
  AT_DISPATCH_FLOATING_TYPES(dtype, "gae", [&] {
    gae_kernel<scalar_t>(r.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                         nv.data_ptr<scalar_t>(), d.data_ptr<bool>(),
                         term.data_ptr<bool>(), steps, cols, gamma, lambda,
                         adv.data_ptr<scalar_t>(), tgt.data_ptr<scalar_t>());
  });
  if (out_dtype != dtype || value.device() != adv.device()) {
    adv = adv.to(value.device(), out_dtype);
    tgt = tgt.to(value.device(), out_dtype);
  }
  return {std::move(adv), std::move(tgt)};
}

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
              "] (one row per env), got ", shape_str(data.batch_size()));
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
  auto fetch = [&](const NestedKey& key, const char* role) -> at::Tensor {
    const detail::Node* node =
        detail::lookup(detail::TensorDictImpl::of(data_), key);
    const bool is_value =
        std::strcmp(role, "value") == 0 || std::strcmp(role, "next value") == 0;
    TORCH_CHECK(node != nullptr, "RolloutBuffer::compute_gae: missing key ",
                key, " (", role, ")",
                is_value ? ": set the critic's values, e.g. from one batched "
                           "forward pass, before compute_gae"
                         : "");
    TORCH_CHECK(!node->is_dict(), "RolloutBuffer::compute_gae: key ", key, " (",
                role, ") holds a TensorDict, expected a tensor");
    return node->tensor;
  };
  const at::Tensor value = fetch(keys.value(), "value");
  const at::Tensor next_value = fetch(keys.next_value(), "next value");
  const at::Tensor reward = fetch(keys.reward(), "reward");
  at::Tensor done = fetch(keys.done(), "done");
  const at::Tensor terminated = fetch(keys.terminated(), "terminated");
  at::Tensor truncated;
  if (const detail::Node* n =
          detail::lookup(detail::TensorDictImpl::of(data_), keys.truncated())) {
    TORCH_CHECK(!n->is_dict(), "RolloutBuffer::compute_gae: key ",
                keys.truncated(),
                " (truncated) holds a TensorDict, expected a "
                "tensor");
    truncated = n->tensor;
  }
  TORCH_CHECK_TYPE(at::isFloatingType(value.scalar_type()),
                   "RolloutBuffer::compute_gae: key ", keys.value(),
                   ": the value must be a floating-point tensor, got ",
                   detail::dtype_name(value.scalar_type()));
  const std::pair<const NestedKey*, const at::Tensor*> others[] = {
      {&keys.next_value(), &next_value},
      {&keys.reward(), &reward},
      {&keys.done(), &done},
      {&keys.terminated(), &terminated},
      {&keys.truncated(), &truncated}};
  for (const auto& o : others) {
    if (!o.second->defined()) continue;
    TORCH_CHECK(o.second->sizes() == value.sizes(),
                "RolloutBuffer::compute_gae: key ", *o.first,
                ": expected shape ", shape_str(value.sizes()), " (like ",
                keys.value(), "), got ", shape_str(o.second->sizes()));
  }
  // The outputs must be storable: no sub-dict at the key and no tensor on
  // the way to it (checked now, so that a failure writes nothing).
  auto check_output = [&](const NestedKey& key, const char* role) {
    const std::vector<std::string>& parts = key.parts();
    for (size_t i = 1; i <= parts.size(); ++i) {
      const NestedKey prefix(std::vector<std::string>(
          parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(i)));
      const detail::Node* n =
          detail::lookup(detail::TensorDictImpl::of(data_), prefix);
      if (n == nullptr) return;
      TORCH_CHECK(i == parts.size() || n->is_dict(),
                  "RolloutBuffer::compute_gae: cannot store the ", role, " at ",
                  key, ": ", prefix, " holds a tensor");
      TORCH_CHECK(i < parts.size() || !n->is_dict(),
                  "RolloutBuffer::compute_gae: cannot store the ", role, " at ",
                  key, ": it holds a TensorDict");
    }
  };
  check_output(keys.advantage(), "advantage");
  check_output(keys.value_target(), "value target");
  if (truncated.defined()) done = done.to(at::kBool).logical_or(truncated);

  GaeResult res =
      gae(reward, value, next_value, done, terminated, gamma, lambda);
  // Reuse the previous rollout's tensors when they fit (no reallocation).
  auto store = [&](const NestedKey& key, const at::Tensor& t) {
    const detail::Node* n =
        detail::lookup(detail::TensorDictImpl::of(data_), key);
    if (n != nullptr && !n->is_dict() && n->tensor.sizes() == t.sizes() &&
        n->tensor.scalar_type() == t.scalar_type()) {
      n->tensor.copy_(t);
    } else {
      data_.set(key, t);
    }
  };
  store(keys.advantage(), res.advantage);
  store(keys.value_target(), res.value_target);
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
