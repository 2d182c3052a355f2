// Internal: the replay buffer's random generator and the draws its samplers
// make from it. The generator is xoshiro256++ (Blackman and Vigna), seeded
// through splitmix64: about five times as fast as std::mt19937_64 here,
// which matters once a sample draws a thousand indices. Its state is saved
// in checkpoints as text ("xoshiro256++" and four integers).
#pragma once

#include <cstdint>
#include <istream>
#include <limits>
#include <ostream>
#include <string>

namespace tensordict {
namespace detail {

/// A UniformRandomBitGenerator of 64-bit values.
class Generator {
 public:
  using result_type = uint64_t;

  explicit Generator(uint64_t seed = 0) { this->seed(seed); }

  /// Resets the state from `seed`, through splitmix64 (never all zero).
  void seed(uint64_t seed) {
    for (uint64_t& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  result_type operator()() {
    const uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() {
    return std::numeric_limits<result_type>::max();
  }

  /// The state as text: the tag, then the four words.
  friend std::ostream& operator<<(std::ostream& os, const Generator& g) {
    os << kTag;
    for (const uint64_t word : g.s_) os << ' ' << word;
    return os;
  }
  /// Reads what `<<` wrote; sets failbit (leaving `g` as it was) on other
  /// text or on the all-zero state, which xoshiro cannot leave.
  friend std::istream& operator>>(std::istream& is, Generator& g) {
    std::string tag;
    uint64_t s[4] = {0, 0, 0, 0};
    is >> tag >> s[0] >> s[1] >> s[2] >> s[3];
    if (!is.fail() && (tag != kTag || (s[0] | s[1] | s[2] | s[3]) == 0)) {
      is.setstate(std::ios::failbit);
    }
    if (!is.fail()) {
      for (int i = 0; i < 4; ++i) g.s_[i] = s[i];
    }
    return is;
  }

 private:
  static constexpr const char* kTag = "xoshiro256++";
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

/// Unbiased uniform integer in [0, n), n > 0 (Lemire's multiply-shift).
inline int64_t uniform_int(Generator& rng, uint64_t n) {
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

/// Uniform double in [0, 1).
inline double uniform01(Generator& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace detail
}  // namespace tensordict
