// Internal: what the envs that wrap other envs (SerialEnv, ParallelEnv,
// TransformedEnv) call on the envs they wrap: the hooks, which are
// protected in EnvBase; and the state of an env's CPU generator, for
// `state_dict` (env_base.cpp).
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string>

#include "tensordict/envs.h"

namespace tensordict {
namespace detail {

struct EnvAccess {
  static void reset(EnvBase& env, const TensorDict& td) { env.reset_impl(td); }
  static void step(EnvBase& env, const TensorDict& td, const TensorDict& next) {
    env.step_impl(td, next);
  }
  static void complete_done(const EnvBase& env, const TensorDict& next) {
    env.complete_done(next);
  }
  static c10::optional<TensorDict> shared_tensordict(const EnvBase& env,
                                                     bool next) {
    return env.shared_tensordict(next);
  }
};

/// `gen`'s state (`get_state()`: uint8 bytes, a copy).
at::Tensor generator_state(const at::Generator& gen);
/// Sets `gen`'s state to `state`, after checking that it is one: its size,
/// and the Mersenne Twister's position, which PyTorch's `set_state` checks
/// too loosely (a position at the end would read past the state). Throws a
/// c10::Error naming `key` otherwise, leaving `gen` as it was.
void set_generator_state(at::Generator& gen, const at::Tensor& state,
                         const std::string& key);

}  // namespace detail
}  // namespace tensordict
