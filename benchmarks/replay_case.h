// What the replay-buffer benchmarks share: the rollout-step rows they store
// (5 leaves: obs, action, reward, done, ("next", "obs")), and the buffer's
// index generation (uniform integers from the buffer's xoshiro256++, Lemire's
// method), shared with the raw-LibTorch baselines so that both sides of a
// sampling ratio draw their indices alike.
#pragma once

#include <ATen/ATen.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <vector>

#include "rl/random.h"

namespace tensordict_bench {

// `n` rows of obs f32[obs], action f32[action], reward f32[1], done bool[1]
// and next obs f32[obs], random, one tensor per leaf.
inline std::vector<at::Tensor> make_leaves(int64_t n, int64_t obs,
                                           int64_t action) {
  return {torch::rand({n, obs}), torch::rand({n, action}), torch::rand({n, 1}),
          torch::rand({n, 1}) > 0.5, torch::rand({n, obs})};
}

// The dict of `make_leaves`'s tensors, batch size [n].
inline tensordict::TensorDict make_batch(const std::vector<at::Tensor>& l,
                                         int64_t n) {
  return tensordict::TensorDict({{"obs", l[0]},
                                 {"action", l[1]},
                                 {"reward", l[2]},
                                 {"done", l[3]},
                                 {{"next", "obs"}, l[4]}},
                                {n});
}

// The buffer's generator and index draw (src/rl/random.h), so that a
// baseline draws its indices with the same code.
using tensordict::detail::Generator;
using tensordict::detail::uniform_int;

inline at::Tensor draw_indices(Generator& rng, int64_t n, int64_t high) {
  at::Tensor idx = at::empty({n}, at::kLong);
  int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t q = 0; q < n; ++q)
    p[q] = uniform_int(rng, static_cast<uint64_t>(high));
  return idx;
}

}  // namespace tensordict_bench
