// Internal: ReplayBuffer's samplers (TorchRL's Sampler classes), one class
// per `SamplerConfig` alternative of tensordict/replay_buffer.h. A sampler
// draws storage rows; ReplayBuffer then gathers them. The buffer owns the
// random generator and passes it in; its mutex guards every call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "rl/segment_tree.h"
#include "rl/storage.h"
#include "tensordict/replay_buffer.h"

namespace tensordict {
namespace detail {

class Sampler {
 public:
  virtual ~Sampler() = default;

  // Draws `n` rows of the `storage.size()` (> 0) stored into `out[0, n)`;
  // returns their importance weights, float32 [n], or an undefined tensor
  // when the sampler has none.
  virtual at::Tensor sample(const ReplayStorage& storage, std::mt19937_64& rng,
                            int64_t n, int64_t* out) = 0;
  // After `storage` wrote `count` rows from row `first` (wrapping), before
  // it commits the write.
  virtual void on_write(ReplayStorage& /*storage*/, int64_t /*first*/,
                        int64_t /*count*/) {}
  // After `storage.clear()`.
  virtual void clear(ReplayStorage& /*storage*/) {}
  // After the constructor reopened a disk-backed `storage`: restores the
  // state the storage persists for the sampler.
  virtual void restore(ReplayStorage& /*storage*/) {}
};

// Uniform with replacement.
class RandomSamplerImpl final : public Sampler {
 public:
  at::Tensor sample(const ReplayStorage& storage, std::mt19937_64& rng,
                    int64_t n, int64_t* out) override;
};

// A random permutation per epoch, renewed when exhausted or when the
// buffer's size changes.
class WithoutReplacementSamplerImpl final : public Sampler {
 public:
  explicit WithoutReplacementSamplerImpl(bool drop_last)
      : drop_last_(drop_last) {}
  at::Tensor sample(const ReplayStorage& storage, std::mt19937_64& rng,
                    int64_t n, int64_t* out) override;
  void clear(ReplayStorage& storage) override;

 private:
  void new_epoch(int64_t size, std::mt19937_64& rng);

  bool drop_last_;
  std::vector<int64_t> perm_;
  size_t perm_pos_ = 0;
  int64_t perm_size_ = -1;
};

// Proportional prioritized replay on sum/min segment trees. Row `i`'s
// probability mass is (priority + eps)^alpha; the raw priorities (before eps
// and alpha) also go to a disk-backed storage's priority/.
class PrioritizedSamplerImpl final : public Sampler {
 public:
  // alpha, beta and eps are >= 0 (checked by ReplayBuffer).
  PrioritizedSamplerImpl(int64_t capacity, double alpha, double beta,
                         double eps);
  at::Tensor sample(const ReplayStorage& storage, std::mt19937_64& rng,
                    int64_t n, int64_t* out) override;
  void on_write(ReplayStorage& storage, int64_t first, int64_t count) override;
  void clear(ReplayStorage& storage) override;
  void restore(ReplayStorage& storage) override;
  // Sets the raw priorities `priority[k]` of rows `index[k]` (checked by
  // ReplayBuffer: rows stored, priorities finite and >= 0).
  void update_priority(ReplayStorage& storage, const int64_t* index,
                       const double* priority, int64_t n);

 private:
  void set_priority(int64_t i, double p);

  double alpha_, beta_, eps_;
  // The largest raw priority seen (before eps and alpha).
  double max_priority_ = kInitialMaxPriority;
  detail::SumSegmentTree sum_tree_;
  detail::MinSegmentTree min_tree_;
  std::vector<double> mass_;
};

// Contiguous segments of `slice_len` rows from single trajectories.
class SliceSamplerImpl final : public Sampler {
 public:
  explicit SliceSamplerImpl(SliceSampler config) : config_(std::move(config)) {}
  at::Tensor sample(const ReplayStorage& storage, std::mt19937_64& rng,
                    int64_t n, int64_t* out) override;

 private:
  void find_trajectories(const ReplayStorage& storage);

  SliceSampler config_;
  std::vector<std::pair<int64_t, int64_t>> trajs_;  // (timeline start, length)
  uint64_t trajs_writes_ = ~uint64_t{0};  // storage.writes() when built
};

}  // namespace detail
}  // namespace tensordict
