// Internal: what SerialEnv and ParallelEnv share: the batch of `n` envs of
// one kind as one env's shape and specs.
#pragma once

#include <cstdint>
#include <vector>

#include "tensordict/envs.h"

namespace tensordict {
namespace detail {

/// `[n, *env.batch_size()]`.
std::vector<int64_t> batched_shape(const EnvBase& env, int64_t n);
/// Sets `batched`'s five specs to `env`'s, expanded to `batched`'s batch.
void set_batched_specs(EnvBase& batched, const EnvBase& env);
/// Throws, naming `what` and the spec, unless `env` has `first`'s specs.
void check_same_specs(const EnvBase& first, const EnvBase& env,
                      const std::string& what);

}  // namespace detail
}  // namespace tensordict
