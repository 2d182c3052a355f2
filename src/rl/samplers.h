// Internal: ReplayBuffer's samplers (TorchRL's Sampler classes), one class
// per `SamplerConfig` alternative of tensordict/replay_buffer.h. A sampler
// draws storage rows; ReplayBuffer then gathers them. The buffer owns the
// random generator and passes it in; its mutex guards every call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rl/random.h"
#include "rl/sampler_config.h"
#include "rl/segment_tree.h"
#include "rl/storage.h"
#include "tensordict/nested_key.h"
#include "tensordict/replay_buffer.h"

namespace tensordict {
namespace detail {

class Sampler {
 public:
  virtual ~Sampler() = default;

  // Draws `n` rows of the `storage.size()` (> 0) stored into `out[0, n)`;
  // returns their importance weights, float32 [n], or an undefined tensor
  // when the sampler has none.
  virtual at::Tensor sample(const ReplayStorage& storage, Generator& rng,
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

  // ---- Checkpoints (ReplayBuffer::dumps and loads) -------------------------
  // Adds the sampler's state to `state` (entries of a dict of batch size
  // []), and the persisted priorities to `out`, the checkpoint's storage.
  virtual void save_state(const ReplayStorage& /*storage*/,
                          ReplayStorage& /*out*/,
                          std::vector<Item>& /*state*/) const {}
  // Checks `state` (what save_state wrote, for a storage of `size` rows)
  // without changing anything, and returns what sets the sampler to it once
  // the buffer holds the checkpoint's rows. Throws naming the entry.
  using Restore = std::function<void(ReplayStorage&)>;
  virtual Restore load_state(const TensorDict& /*state*/, int64_t /*size*/) {
    return [](ReplayStorage& /*storage*/) {};
  }
};

// Entry `key` of a checkpoint's state: a contiguous CPU tensor of `dtype`
// with `numel` elements (any number when -1), 1-D, or 0-D when `numel` is 0
// (a scalar). Throws a c10::Error naming the entry otherwise; its message
// starts with `fn`.
at::Tensor checkpoint_entry(const TensorDict& state, const char* key,
                            at::ScalarType dtype, int64_t numel,
                            const char* fn = "ReplayBuffer::loads");

// Runs every check `rb.loads(path)` makes, changing nothing of `rb`: loads
// `path` into a scratch buffer with rb's options (on the CPU, without shared
// memory, storage_dir or rate limiter) and, when rb holds rows, one zero row
// of their structure. Returns the number of rows the checkpoint holds.
int64_t check_loads(const ReplayBuffer& rb, const std::string& path);

// A generator's state as a checkpoint entry (its text, uint8), and back:
// false, leaving `rng` as it was, when `bytes` hold no generator state.
at::Tensor generator_entry(const Generator& rng);
bool read_generator(const at::Tensor& bytes, Generator& rng);

// Uniform with replacement.
class RandomSamplerImpl final : public Sampler {
 public:
  at::Tensor sample(const ReplayStorage& storage, Generator& rng, int64_t n,
                    int64_t* out) override;
};

// A random permutation of [0, size) handed out in order, one epoch after
// another: SamplerWithoutReplacement's rows, SliceSamplerWithoutReplacement's
// trajectories.
class Epoch {
 public:
  explicit Epoch(bool drop_last) : drop_last_(drop_last) {}
  // Draws `n` of the `size` (> 0) items into `out`. The epoch renews when
  // it is exhausted, when `size` or `version` differ from its own, and with
  // drop_last when fewer than `n` items are left (the caller checks n <=
  // size); otherwise a request that straddles its end is completed from the
  // next epoch.
  void draw(int64_t size, uint64_t version, Generator& rng, int64_t n,
            int64_t* out);
  void clear();
  // Checkpoints: the epoch as entries "epoch_perm" (int64 [n]),
  // "epoch_pos" and "epoch_size" (int64 scalars). Unless `current` (the
  // epoch belongs to the storage as it is now), it is saved as renewed at
  // the next draw.
  void save(bool current, std::vector<Item>& state) const;
  // Checks the entries `save` wrote.
  [[nodiscard]] Epoch load(const TensorDict& state) const;
  [[nodiscard]] uint64_t version() const { return version_; }
  void set_version(uint64_t version) { version_ = version; }
  [[nodiscard]] bool drop_last() const { return drop_last_; }

 private:
  void renew(int64_t size, uint64_t version, Generator& rng);

  bool drop_last_;
  std::vector<int64_t> perm_;
  size_t pos_ = 0;
  int64_t size_ = -1;
  uint64_t version_ = 0;
};

// A random permutation per epoch, renewed when exhausted or when the
// buffer's size changes.
class WithoutReplacementSamplerImpl final : public Sampler {
 public:
  explicit WithoutReplacementSamplerImpl(bool drop_last) : epoch_(drop_last) {}
  at::Tensor sample(const ReplayStorage& storage, Generator& rng, int64_t n,
                    int64_t* out) override;
  void clear(ReplayStorage& storage) override;
  void save_state(const ReplayStorage& storage, ReplayStorage& out,
                  std::vector<Item>& state) const override;
  Restore load_state(const TensorDict& state, int64_t size) override;

 private:
  Epoch epoch_;
};

// The trajectory boundaries of a storage, in timeline order (position t is
// row (origin + t) % capacity, origin the oldest row).
class Timeline {
 public:
  // Checks that `spec`'s key is a tensor of the allocated `storage`.
  Timeline(const ReplayStorage& storage, const SliceSpec& spec);
  [[nodiscard]] int64_t size() const { return size_; }
  [[nodiscard]] int64_t row(int64_t t) const {
    return (origin_ + t) % capacity_;
  }
  // ends[t - from] for t in [from, to): 1 when position t is the last row
  // of its trajectory (the newest row always is), else 0.
  void ends(int64_t from, int64_t to, uint8_t* ends) const;

 private:
  int64_t capacity_, size_, origin_;
  bool by_id_;       // traj_key: ends where the id changes
  at::Tensor leaf_;  // [capacity, elements], a view of the storage's
};

// Proportional prioritized replay on sum/min segment trees. Row `i`'s
// probability mass is (priority + eps)^alpha; the raw priorities (before eps
// and alpha) also go to a disk-backed storage's priority/.
class PrioritizedSamplerImpl : public Sampler {
 public:
  // alpha, beta and eps are >= 0 (checked by ReplayBuffer).
  // `per_row_drawable`: rows may be kept from being drawn (set_drawable).
  PrioritizedSamplerImpl(int64_t capacity, const PrioritizedSampler& spec,
                         bool per_row_drawable = false);
  at::Tensor sample(const ReplayStorage& storage, Generator& rng, int64_t n,
                    int64_t* out) override;
  void on_write(ReplayStorage& storage, int64_t first, int64_t count) override;
  void clear(ReplayStorage& storage) override;
  void restore(ReplayStorage& storage) override;
  // Sets the raw priorities `priority[k]` of rows `index[k]` (checked by
  // ReplayBuffer: rows stored, priorities finite and >= 0).
  void update_priority(ReplayStorage& storage, const int64_t* index,
                       const double* priority, int64_t n);
  // The masses (priority + eps)^alpha ("mass", float64 [size]) and the
  // largest raw priority ("max_priority"), which restore the trees exactly.
  void save_state(const ReplayStorage& storage, ReplayStorage& out,
                  std::vector<Item>& state) const override;
  Restore load_state(const TensorDict& state, int64_t size) override;

 protected:
  // Draws `n` of the `size` stored rows by mass into `out`, and their
  // importance weights into `w`.
  void draw(int64_t size, Generator& rng, int64_t n, int64_t* out, float* w);
  // Whether row `i` may be drawn (its sum-tree leaf is its mass, else 0);
  // the min tree always holds the mass (its own leaves, per_row_drawable).
  void set_drawable(int64_t i, bool drawable);
  // The mass of the drawable rows.
  [[nodiscard]] double total_mass() const { return sum_tree_.root(); }

  // Empty: every row is drawable; else drawable_[i].
  std::vector<uint8_t> drawable_;

 private:
  void set_priority(int64_t i, double p);
  // set_priority without the trees' ancestors (the caller rebuilds them).
  void set_leaves(int64_t i, double p);

  double alpha_, beta_, eps_;
  // The largest raw priority seen (before eps and alpha).
  double max_priority_ = kInitialMaxPriority;
  detail::SumSegmentTree sum_tree_;
  detail::MinSegmentTree min_tree_;  // after sum_tree_: may share its leaves
  std::vector<double> mass_;
};

// Contiguous segments of `slice_len` rows from single trajectories, with
// replacement (SliceSampler) or one per trajectory per epoch
// (SliceSamplerWithoutReplacement).
class SliceSamplerImpl final : public Sampler {
 public:
  SliceSamplerImpl(SliceSpec spec, c10::optional<bool> without_replacement)
      : spec_(std::move(spec)),
        epoch_(without_replacement.value_or(false)),
        without_replacement_(without_replacement.has_value()) {}
  at::Tensor sample(const ReplayStorage& storage, Generator& rng, int64_t n,
                    int64_t* out) override;
  void clear(ReplayStorage& storage) override;
  void save_state(const ReplayStorage& storage, ReplayStorage& out,
                  std::vector<Item>& state) const override;
  Restore load_state(const TensorDict& state, int64_t size) override;

 private:
  void find_trajectories(const ReplayStorage& storage);

  SliceSpec spec_;
  Epoch epoch_;
  bool without_replacement_;
  // The trajectories of at least slice_len rows: (timeline start, length).
  std::vector<std::pair<int64_t, int64_t>> long_;
  int64_t trajectories_ = 0;              // all of them
  int64_t origin_ = 0;                    // the timeline's row 0
  uint64_t trajs_writes_ = ~uint64_t{0};  // storage.writes() when found
};

// PrioritizedSliceSampler: a PrioritizedSampler whose draws are the start
// rows of slices; a row is drawable when it starts a whole slice within
// its trajectory, which every write updates for the rows it touched.
class PrioritizedSliceSamplerImpl final : public PrioritizedSamplerImpl {
 public:
  PrioritizedSliceSamplerImpl(int64_t capacity,
                              const PrioritizedSliceSampler& config);
  at::Tensor sample(const ReplayStorage& storage, Generator& rng, int64_t n,
                    int64_t* out) override;
  void on_write(ReplayStorage& storage, int64_t first, int64_t count) override;
  void restore(ReplayStorage& storage) override;
  Restore load_state(const TensorDict& state, int64_t size) override;

 private:
  // Recomputes which of timeline positions [from, to) start a slice.
  void refresh(const ReplayStorage& storage, int64_t from, int64_t to);

  SliceSpec spec_;
  std::vector<uint8_t> ends_;  // scratch
  std::vector<int64_t> starts_;
};

}  // namespace detail
}  // namespace tensordict
