// What the replay-buffer benchmarks share: the rollout-step rows they store
// (5 leaves: obs, action, reward, done, ("next", "obs")), and the buffer's
// index generation (uniform integers from std::mt19937_64, Lemire's method),
// reproduced for the raw-LibTorch baselines so that both sides of a sampling
// ratio draw their indices alike.
#pragma once

#include <ATen/ATen.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <random>
#include <vector>

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

inline int64_t uniform_int(std::mt19937_64& rng, uint64_t n) {
  uint64_t x = rng();
  __uint128_t m = static_cast<__uint128_t>(x) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      x = rng();
      m = static_cast<__uint128_t>(x) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(m >> 64);
}

inline at::Tensor draw_indices(std::mt19937_64& rng, int64_t n, int64_t high) {
  at::Tensor idx = at::empty({n}, at::kLong);
  int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t q = 0; q < n; ++q)
    p[q] = uniform_int(rng, static_cast<uint64_t>(high));
  return idx;
}

}  // namespace tensordict_bench
