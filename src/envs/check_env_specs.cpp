// check_env_specs (tensordict/envs.h): TorchRL's check that what an env
// returns matches its specs, on a short random rollout.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/names.h"
#include "tensordict/envs.h"

namespace tensordict {

using detail::dtype_name;
using detail::shape_str;

namespace {

std::string key_list(const std::vector<NestedKey>& keys) {
  std::string out;
  for (const NestedKey& key : keys) {
    if (!out.empty()) out += ", ";
    out += key.str();
  }
  return out;
}

bool has(const std::vector<NestedKey>& keys, const NestedKey& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// `value` (`[*batch, T, ...]`) holds T values of `spec` (`[*batch, ...]`).
void check_value(const EnvBase& env, const NestedKey& key,
                 const TensorSpec& spec, const at::Tensor& value,
                 int64_t steps) {
  const int64_t nb = static_cast<int64_t>(env.batch_size().size());
  std::vector<int64_t> expected(spec.shape().begin(), spec.shape().end());
  expected.insert(expected.begin() + nb, steps);
  const bool fits = value.sizes() == c10::IntArrayRef(expected) &&
                    value.scalar_type() == spec.dtype() &&
                    value.device() == spec.device() &&
                    spec.is_in(value.movedim(nb, 0));
  TORCH_CHECK(fits, "check_env_specs: ", env.name(), ": key ", key.str(),
              ": expected a value of ", spec.repr(), "\ngot a value of shape ",
              shape_str(value.sizes()),
              " (one step: ", shape_str(value.movedim(nb, 0).sizes().slice(1)),
              ") and dtype ", dtype_name(value.scalar_type()),
              value.sizes() == c10::IntArrayRef(expected) &&
                      value.scalar_type() == spec.dtype()
                  ? ", out of the spec's space"
                  : "");
}

}  // namespace

void check_env_specs(EnvBase& env, int64_t steps) {
  TORCH_CHECK_VALUE(steps > 0, "check_env_specs: steps must be positive, got ",
                    steps);
  const TensorDict data =
      env.rollout(steps, RolloutOptions().break_when_any_done(false));
  const TensorDict fake = env.fake_tensordict();
  const std::vector<NestedKey> real_keys = data.keys(true, true);
  const std::vector<NestedKey> fake_keys = fake.keys(true, true);
  std::vector<NestedKey> missing, extra;
  for (const NestedKey& key : fake_keys) {
    if (!has(real_keys, key)) missing.push_back(key);
  }
  for (const NestedKey& key : real_keys) {
    if (!has(fake_keys, key)) extra.push_back(key);
  }
  TORCH_CHECK(missing.empty() && extra.empty(), "check_env_specs: ", env.name(),
              ": the keys of the specs and of the data differ:",
              "\n - in the data but in no spec: [", key_list(extra), "]",
              "\n - in a spec but not in the data: [", key_list(missing), "]");
  const std::vector<std::pair<const Composite*, bool>> checks = {
      {&env.observation_spec(), false}, {&env.state_spec(), false},
      {&env.action_spec(), false},      {&env.done_spec(), false},
      {&env.observation_spec(), true},  {&env.reward_spec(), true},
      {&env.done_spec(), true}};
  for (const auto& check : checks) {
    for (const NestedKey& key : check.first->keys(true, true)) {
      const NestedKey at = check.second ? NestedKey("next").join(key) : key;
      check_value(env, at, check.first->leaf(key), data.get(at),
                  data.batch_size()[env.batch_size().size()]);
    }
  }
}

}  // namespace tensordict
