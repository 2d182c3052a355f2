// Internal: what the parts of ReplayBuffer read from a `SamplerConfig`
// (tensordict/replay_buffer.h) besides the sampler itself.
#pragma once

#include <c10/util/Optional.h>

#include <cstdint>

#include "tensordict/nested_key.h"
#include "tensordict/replay_buffer.h"

namespace tensordict {
namespace detail {

// The trajectory structure a slice sampler reads (SliceSampler,
// SliceSamplerWithoutReplacement, PrioritizedSliceSampler's fields).
struct SliceSpec {
  int64_t slice_len;
  NestedKey end_key;
  c10::optional<NestedKey> traj_key;
  // "SliceSampler" and the like, for errors.
  const char* name;
};

// The slice part of `config`, if it is a slice sampler.
c10::optional<SliceSpec> slice_spec(const SamplerConfig& config);
// The priority parameters of `config`, if it is a prioritized sampler
// (PrioritizedSampler, PrioritizedSliceSampler).
c10::optional<PrioritizedSampler> priority_spec(const SamplerConfig& config);

}  // namespace detail
}  // namespace tensordict
