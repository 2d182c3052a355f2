// Internal: what the envs that wrap other envs (SerialEnv, ParallelEnv,
// TransformedEnv) call on the envs they wrap: the hooks, which are
// protected in EnvBase.
#pragma once

#include <cstdint>

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

}  // namespace detail
}  // namespace tensordict
