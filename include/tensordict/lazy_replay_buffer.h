// tensordict/lazy_replay_buffer.h — a replay buffer of rows whose shapes
// differ (TorchRL's `LazyStackStorage`): each row kept as its own dict, and
// samples returned as lazy stacks (lazy_stack.h). The replay layer's
// counterpart of `ReplayBuffer` (replay_buffer.h), whose options and
// samplers it takes.
//
// Tutorial: docs/tutorials/lazy_stacks.md ("A replay buffer of
// heterogeneous rows").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/lazy_stack.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// A replay buffer of rows whose shapes differ (TorchRL's
/// `ReplayBuffer(storage=LazyStackStorage(capacity))`): each row is kept as
/// its own dict, and `sample` returns a lazy stack of the rows drawn.
///
/// Every sampler of `ReplayBufferOptions` works as in `ReplayBuffer`: the
/// buffer keeps a dense index of the rows (in a `ReplayBuffer` of its own)
/// holding what the sampler reads, the slice samplers' `end_key` or
/// `traj_key`, which every row must therefore hold with one shape. Rows are
/// written round-robin, and must all have the same number of batch dims
/// (usually none). `add` and `extend` store copies of the rows and `sample`
/// returns copies, so neither shares memory with the buffer.
///
/// Not supported here: `storage_dir`, `shared`, `device`, a rate limiter
/// and `MaxValueWriter` (the constructor throws for the options).
/// Synchronized, as `ReplayBuffer` is. `dumps`/`loads` checkpoint it.
///
/// ```
///   tensordict::LazyStackReplayBuffer rb(tensordict::ReplayBufferOptions(1000));
///   rb.add(TensorDict({{"obs", at::zeros({2})}}, {}));
///   rb.add(TensorDict({{"obs", at::zeros({5})}}, {}));
///   auto [batch, info] = rb.sample(4);   // a LazyStackedTensorDict [4]
/// ```
class LazyStackReplayBuffer {
 public:
  /// A buffer of `options.capacity()` rows (see the class comment for the
  /// options it takes).
  explicit LazyStackReplayBuffer(ReplayBufferOptions options);

  /// Stores a copy of `row` and returns its storage index. Throws, changing
  /// nothing, when the row lacks the key its sampler reads or has another
  /// number of batch dims than the rows stored.
  int64_t add(const TensorDict& row);
  /// Stores copies of `rows`, in order; returns their storage indices.
  /// All-or-nothing, as `add`.
  at::Tensor extend(const std::vector<TensorDict>& rows);
  /// `extend(rows.tensordicts())`, for a stack along dim 0.
  at::Tensor extend(const LazyStackedTensorDict& rows);
  /// Draws `batch_size` rows with the sampler: copies of them, stacked
  /// lazily along dim 0, and `SampleInfo` as `ReplayBuffer::sample` gives.
  [[nodiscard]] std::pair<LazyStackedTensorDict, SampleInfo> sample(
      int64_t batch_size);
  /// `ReplayBuffer::update_priority`.
  void update_priority(const at::Tensor& index, const at::Tensor& priority);

  /// The number of rows stored.
  [[nodiscard]] int64_t size() const;
  /// The capacity.
  [[nodiscard]] int64_t capacity() const;
  /// The storage index of the next write.
  [[nodiscard]] int64_t cursor() const;
  /// Drops every row.
  void clear();
  /// Reseeds the sampler's generator.
  void manual_seed(uint64_t seed);
  /// Writes a checkpoint into `dir` (new or empty): the index buffer's
  /// (`ReplayBuffer::dumps`: the sampler's state, generator, cursor and
  /// size) in `dir/index`, the rows as a lazy stack in Python's layout
  /// (`LazyStackedTensorDict::memmap_`, storage order) in `dir/rows`, and
  /// the format version in `dir/lazy`. `loads` of it resumes the buffer
  /// exactly: the same rows, and the same samples afterwards.
  void dumps(const std::string& dir) const;
  /// Replaces this buffer's rows and state with the checkpoint in `dir`.
  /// The buffer must have the capacity and sampler the checkpoint was
  /// written with. All or nothing: every check (the index buffer's, the
  /// rows' count and batch dims) runs before anything changes.
  void loads(const std::string& dir);

  /// The stored row at storage index `i` (the buffer's own: writing into it
  /// changes the stored row). Only the lookup is synchronized.
  [[nodiscard]] TensorDict row(int64_t i) const;

 private:
  TensorDict index_row(const char* op, const TensorDict& row) const;

  mutable std::mutex mutex_;
  ReplayBuffer index_;
  std::vector<TensorDict> rows_;
  int64_t row_dims_ = -1;  // the rows' number of batch dims (-1: none yet)
};

}  // namespace tensordict
