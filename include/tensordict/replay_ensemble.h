// tensordict/replay_ensemble.h — sampling from several replay buffers at
// once: TorchRL 0.14's `ReplayBufferEnsemble` and
// `OfflineToOnlineReplayBuffer`.
//
// An ensemble holds `ReplayBuffer`s (shared with their owners, who keep
// writing into them) and samples a batch from them, in one of two ways:
//   - fixed ratios (`ReplayBufferEnsembleOptions::ratios`): a batch of `n`
//     takes exactly `split(n)[i]` rows from buffer `i`, concatenated in
//     buffer order into a `[n]` batch, on every call (rlox's `sample_mixed`;
//     TorchRL's `OfflineToOnlineReplayBuffer` for two buffers);
//   - TorchRL's `SamplerEnsemble`: `num_buffer_sampled` buffers (by default
//     as many as there are) drawn with replacement, uniformly or by the
//     weights `p`, or every buffer once (`sample_from_all`), each giving
//     `n / num_buffer_sampled` rows, stacked into a `[num_buffer_sampled,
//     n / num_buffer_sampled]` batch.
// Each buffer samples with its own sampler (its rate limiter included), so
// a prioritized buffer's rows come with their importance weights.
//
// `EnsembleSampleInfo` says where each row came from (`buffer_ids`, and
// `index`, the row in that buffer: TorchRL's `("index", "buffer_ids")` and
// `("index", "index")`), shaped like the batch; `update_priority` routes new
// priorities back to the buffers they belong to.
//
// Errors: a sample needs the buffers it draws from to hold rows of one
// structure (the same keys, row shapes and dtypes: the batch is one dict);
// it is checked, naming the key and both buffers, before any buffer
// samples, so a refused call leaves every buffer's sampler as it was.
//
// Checkpoints: `dumps` saves every buffer and the ensemble's generator
// together, and `loads` restores them all or none.
//
// Thread safety: an ensemble is synchronized as a `ReplayBuffer` is (its
// own generator under a lock, each buffer under its own); the buffers may
// be written by other threads meanwhile.
//
// Tutorial: docs/tutorials/replay_buffer.md ("Mixed replay").
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Where the rows of an ensemble's sample came from, each shaped like the
/// sample's batch.
struct EnsembleSampleInfo {
  /// The buffer of each row (its position in the ensemble), int64.
  at::Tensor buffer_ids;
  /// The row's storage index in that buffer, int64.
  at::Tensor index;
  /// The importance weights, float32, when a buffer sampled is prioritized
  /// (the rows of the other buffers weigh 1); undefined otherwise.
  at::Tensor weight;
};

/// How an ensemble samples (see the top of this file).
struct ReplayBufferEnsembleOptions {
  /// Fixed ratios, one per buffer (finite, >= 0, not all 0; normalized):
  /// each batch is split exactly (`ReplayBufferEnsemble::split`). When set,
  /// `p`, `sample_from_all` and `num_buffer_sampled` must keep their
  /// defaults.
  TORCH_ARG(std::vector<double>, ratios);
  /// TorchRL's `p`: the weights the sampled buffers are drawn with (one per
  /// buffer; normalized); uniform when empty.
  TORCH_ARG(std::vector<double>, p);
  /// TorchRL's `sample_from_all`: every buffer gives `n / num_buffers`
  /// rows, in order. Not with `p`.
  TORCH_ARG(bool, sample_from_all) = false;
  /// TorchRL's `num_buffer_sampled`: the buffers drawn per batch; 0 means
  /// the number of buffers.
  TORCH_ARG(int64_t, num_buffer_sampled) = 0;
  /// The seed of the ensemble's generator (which buffers are drawn).
  TORCH_ARG(uint64_t, seed) = 0;
};

/// TorchRL's `ReplayBufferEnsemble` (see the top of this file).
///
/// Example:
/// ```
///   auto expert = std::make_shared<ReplayBuffer>(ReplayBufferOptions(10000));
///   auto online = std::make_shared<ReplayBuffer>(ReplayBufferOptions(10000));
///   ReplayBufferEnsemble mixed({expert, online},
///                              ReplayBufferEnsembleOptions().ratios({1, 3}));
///   auto [batch, info] = mixed.sample(256);  // 64 expert rows, 192 online
/// ```
class ReplayBufferEnsemble {
 public:
  /// An ensemble of `buffers` (at least one, none null, none twice).
  /// Throws a ValueError naming a bad option.
  explicit ReplayBufferEnsemble(
      std::vector<std::shared_ptr<ReplayBuffer>> buffers,
      ReplayBufferEnsembleOptions options = {});
  /// Movable, not copyable; the buffers stay with their other owners.
  ///@{
  ~ReplayBufferEnsemble();
  ReplayBufferEnsemble(ReplayBufferEnsemble&&) noexcept;
  ReplayBufferEnsemble& operator=(ReplayBufferEnsemble&&) noexcept;
  ///@}
  ReplayBufferEnsemble(const ReplayBufferEnsemble&) = delete;
  ReplayBufferEnsemble& operator=(const ReplayBufferEnsemble&) = delete;

  /// A batch of `batch_size` (> 0) rows and where they came from. With
  /// fixed ratios, `[batch_size]`; otherwise `[num_buffer_sampled,
  /// batch_size / num_buffer_sampled]` (`batch_size` must divide). Throws,
  /// before any buffer samples, when a buffer it would draw from is empty
  /// or holds rows of another structure than the others.
  [[nodiscard]] std::pair<TensorDict, EnsembleSampleInfo> sample(
      int64_t batch_size);

  /// With fixed ratios, the rows a batch of `batch_size` takes from each
  /// buffer: the cumulative ratios times `batch_size`, rounded half to
  /// even (Python's `round`), differenced; so two buffers split as
  /// TorchRL's `OfflineToOnlineReplayBuffer` does. Throws without ratios.
  [[nodiscard]] std::vector<int64_t> split(int64_t batch_size) const;

  /// Sets the priorities of the rows `info` names (`priority` has as many
  /// elements as `info.index`), each in the buffer it came from. Every
  /// buffer named must have a prioritized sampler and every index must be
  /// below its size, and the priorities finite and >= 0: all checked
  /// before any buffer changes (a `clear()` from another thread in between
  /// can still make a later buffer refuse).
  void update_priority(const EnsembleSampleInfo& info,
                       const at::Tensor& priority);

  /// Writes a checkpoint into `dir`, which must not exist or be empty:
  /// buffer `i`'s `ReplayBuffer::dumps` into `dir/<i>` (`dir/0`, `dir/1`,
  /// ...), and the ensemble's own state into `dir/ensemble`, a memmap
  /// directory (Python tensordict's format) of `format_version`,
  /// `num_buffers`, `rng` (the generator's state as text, uint8) and
  /// `ratios` (float64, as given; empty without fixed ratios). `loads` of
  /// it resumes the same samples as the uninterrupted ensemble. The buffers
  /// are dumped one after another: rows that other threads write meanwhile
  /// may be in one buffer's checkpoint and not yet in another's.
  void dumps(const std::string& dir) const;
  /// Replaces the state of every buffer and of the ensemble with the
  /// checkpoint `dumps` wrote in `dir`. All or nothing: each buffer's
  /// checkpoint is first loaded into a scratch buffer with that buffer's
  /// options and row structure (so every check of `ReplayBuffer::loads`
  /// runs), and only then do the buffers load; `loads` reads each
  /// checkpoint twice and holds one scratch buffer at a time. A damaged
  /// checkpoint, another number of buffers, fixed ratios on one side only,
  /// or a buffer's capacity, sampler or rows that differ throw a
  /// `c10::Error` naming them and change nothing (provided no other thread
  /// writes the buffers during the call).
  void loads(const std::string& dir);

  /// Replaces the fixed ratios (same rules as the option).
  void set_ratios(std::vector<double> ratios);
  /// The buffer at `i` (TorchRL's `rb[i]`), to write into.
  [[nodiscard]] ReplayBuffer& operator[](int64_t i) const;
  /// The number of buffers.
  [[nodiscard]] int64_t num_buffers() const;
  /// The rows of all the buffers together.
  [[nodiscard]] int64_t size() const;
  /// Reseeds the ensemble's generator (not the buffers').
  void manual_seed(uint64_t seed);
  /// The options (with the ratios `set_ratios` gave).
  [[nodiscard]] ReplayBufferEnsembleOptions options() const;

 private:
  friend class OfflineToOnlineReplayBuffer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// TorchRL 0.14's `OfflineToOnlineReplayBuffer`: an offline dataset (a
/// buffer that is only read) and an online buffer that `extend` fills.
/// `sample(n)` takes exactly `round(offline_fraction * n)` rows from the
/// offline buffer and the rest from the online one, concatenated into a
/// `[n]` batch (offline rows first); all from the offline buffer while the
/// online one is empty, all from the online one when the offline share
/// rounds to 0. `anneal(step, total_steps)` lowers the fraction linearly
/// to 0 at `total_steps`.
class OfflineToOnlineReplayBuffer {
 public:
  /// `offline` (not null) with an online buffer made from `online`;
  /// `offline_fraction` in (0, 1), else a ValueError.
  OfflineToOnlineReplayBuffer(std::shared_ptr<ReplayBuffer> offline,
                              const ReplayBufferOptions& online,
                              double offline_fraction = 0.5);
  OfflineToOnlineReplayBuffer(const OfflineToOnlineReplayBuffer&) = delete;
  OfflineToOnlineReplayBuffer& operator=(const OfflineToOnlineReplayBuffer&) =
      delete;

  /// Writes `batch` into the online buffer; returns its indices there.
  at::Tensor extend(const TensorDict& batch);
  /// A `[batch_size]` batch split as described above, and where each row
  /// came from (buffer 0 is the offline one, 1 the online one).
  [[nodiscard]] std::pair<TensorDict, EnsembleSampleInfo> sample(
      int64_t batch_size);
  /// Routes priorities back, as `ReplayBufferEnsemble::update_priority`.
  void update_priority(const EnsembleSampleInfo& info,
                       const at::Tensor& priority);
  /// `offline_fraction = initial * max(0, 1 - step / total_steps)`.
  void anneal(int64_t step, int64_t total_steps);
  /// The current offline fraction.
  [[nodiscard]] double offline_fraction() const;
  /// `ReplayBufferEnsemble::dumps` of the two buffers (`dir/0` the offline
  /// one, `dir/1` the online one), with the current offline fraction as
  /// `offline_fraction` (float64) in `dir/ensemble`.
  void dumps(const std::string& dir) const;
  /// `ReplayBufferEnsemble::loads`, the offline fraction included (all or
  /// nothing); a later `anneal` starts again from the constructor's
  /// fraction.
  void loads(const std::string& dir);
  /// The offline dataset.
  [[nodiscard]] ReplayBuffer& offline_buffer() const;
  /// The online buffer.
  [[nodiscard]] ReplayBuffer& online_buffer() const;
  /// The rows of both buffers.
  [[nodiscard]] int64_t size() const;

 private:
  std::shared_ptr<ReplayBuffer> offline_;
  std::shared_ptr<ReplayBuffer> online_;
  double initial_fraction_;
  std::atomic<double> fraction_;
  ReplayBufferEnsemble ensemble_;
};

}  // namespace tensordict
