// The replay buffer's index generation (uniform integers from
// std::mt19937_64, Lemire's method), reproduced for the raw-LibTorch
// baselines, so that both sides of a sampling ratio draw their indices alike.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <random>

namespace tensordict_bench {

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
