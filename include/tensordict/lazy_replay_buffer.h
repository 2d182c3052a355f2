// tensordict/lazy_replay_buffer.h — replay buffers that keep each row on its
// own and sample lazy stacks (lazy_stack.h), TorchRL's list storages:
//   - `LazyStackReplayBuffer` (TorchRL's `LazyStackStorage`): rows whose
//     shapes differ, each kept as its own dict;
//   - `CompressedReplayBuffer` (TorchRL's `CompressedListStorage`): rows
//     kept compressed (zlib, or functions of your own), for observations
//     such as images that compress well.
// The replay layer's counterparts of `ReplayBuffer` (replay_buffer.h),
// whose options and samplers they take.
//
// Tutorial: docs/tutorials/lazy_stacks.md ("A replay buffer of
// heterogeneous rows", "A compressed replay buffer").
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/ArrayRef.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/lazy_stack.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

namespace detail {
struct ListState;      // rl/list_buffer.h
struct CompressedRow;  // rl/compressed_replay_buffer.cpp
}  // namespace detail

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
/// returns copies, so neither shares memory with the buffer. A row that
/// fits the stored row it overwrites (the same keys in the same order and
/// batch size, leaves of the same shapes and dtypes, none tracked by
/// autograd) is copied into that row's tensors, with no allocation; any
/// other row is cloned. With `ReplayBufferOptions::device`, the copies are
/// made on that device (as TorchRL's storage `device` moves what it
/// stores).
///
/// `MaxValueWriter` works as in `ReplayBuffer` (every row must hold its
/// rank key as a tensor; `add` returns -1 for a row it drops), and so does
/// a `RateLimiter`: its waits release the buffer's lock.
///
/// Not supported (the constructor throws for them), as in TorchRL, whose
/// `LazyStackStorage` is an in-memory list with neither an on-disk form
/// (its checkpointer raises `NotImplementedError`) nor shared memory:
///   - `storage_dir`: rows of different shapes have no fixed layout to map
///     to files; `dumps` writes them to disk, in Python's lazy-stack layout.
///   - `shared`: each row is allocated as it arrives, in the memory of the
///     process that writes it, so a forked actor's rows would never reach
///     the parent. Send them to the learner's process (tensordict's c10d
///     transfers) and add them there, or pad them into a `ReplayBuffer`
///     with `shared(true)` and a mask.
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
  ~LazyStackReplayBuffer();

  /// Stores a copy of `row` and returns its storage index (-1 when a
  /// `MaxValueWriter` drops it). Throws, changing nothing, when the row
  /// lacks the key its sampler or writer reads or has another number of
  /// batch dims than the rows stored.
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
  /// `ReplayBuffer::rate_limiter_info`.
  [[nodiscard]] RateLimiterInfo rate_limiter_info() const;
  /// Drops every row (and resets the rate limiter's counts).
  void clear();
  /// Reseeds the sampler's generator.
  void manual_seed(uint64_t seed);
  /// Writes a checkpoint into `dir` (new or empty): the index buffer's
  /// (`ReplayBuffer::dumps`: the sampler's state, generator, cursor and
  /// size) in `dir/index`, the rows as a lazy stack in Python's layout
  /// (`LazyStackedTensorDict::memmap_`, storage order) in `dir/rows`, and
  /// the format version and the rate limiter's counts in `dir/lazy`. `loads` of it resumes the buffer
  /// exactly: the same rows, and the same samples afterwards.
  void dumps(const std::string& dir) const;
  /// Replaces this buffer's rows and state with the checkpoint in `dir`.
  /// The buffer must have the capacity and sampler the checkpoint was
  /// written with. All or nothing: every check (the index buffer's, the
  /// rows' count and batch dims) runs before anything changes.
  void loads(const std::string& dir);

  /// The stored row at storage index `i` (the buffer's own: writing into it
  /// changes the stored row, and a later write into its slot of a row that
  /// fits it overwrites it in place). Only the lookup is synchronized: read
  /// the dict while no other thread writes into the buffer.
  [[nodiscard]] TensorDict row(int64_t i) const;

 private:
  at::Tensor write(const char* op, const std::vector<TensorDict>& rows,
                   bool one);

  mutable std::mutex mutex_;
  // The index buffer, the rate limiter, the device, the rows' batch dims.
  std::unique_ptr<detail::ListState> state_;
  std::vector<TensorDict> rows_;
};

/// How `CompressedReplayBuffer` compresses each leaf of a row (the
/// arguments of TorchRL's `CompressedListStorage`). By default a leaf's
/// bytes (C order) go through zlib at `level`, as TorchRL compresses them
/// on Python up to 3.13 (on 3.14 it uses zstd, which this library does not
/// decompress: pass your own functions for such data).
struct RowCompression {
  /// A leaf in, its compressed bytes out: a 1-D uint8 tensor.
  using CompressFn = std::function<at::Tensor(const at::Tensor& leaf)>;
  /// Compressed bytes in, with the leaf's shape and dtype; the leaf out, of
  /// that shape and dtype (its device is the buffer's to choose).
  using DecompressFn = std::function<at::Tensor(
      const at::Tensor& bytes, c10::IntArrayRef shape, at::ScalarType dtype)>;
  /// zlib's level, 0 (none) to 9 (smallest); TorchRL's default is 3.
  TORCH_ARG(int64_t, level) = 3;
  /// Replaces zlib for compressing (set `decompress` too).
  TORCH_ARG(CompressFn, compress) = nullptr;
  /// Replaces zlib for decompressing (set `compress` too).
  TORCH_ARG(DecompressFn, decompress) = nullptr;
};

/// A replay buffer that keeps its rows compressed (TorchRL's
/// `ReplayBuffer(storage=CompressedListStorage(capacity))`): every tensor
/// leaf of a row is compressed on its own (`RowCompression`), non-tensor
/// data is kept as it is, and `sample` decompresses the rows drawn and
/// stacks them lazily along dim 0, as TorchRL's does. For observations
/// that compress well (Atari frames, masks, sparse features), it holds many
/// more rows than a `ReplayBuffer` in the same memory, at the cost of a
/// decompression per sampled leaf.
///
/// It is `LazyStackReplayBuffer` in every other way: every sampler of
/// `ReplayBufferOptions` (through a dense index of the rows holding what
/// the sampler reads), both writers, a rate limiter, rows of any shapes
/// with one number of batch dims, `device` (where the sampled rows are
/// decompressed; by default each leaf's own device), synchronized calls.
/// Rows are compressed before the lock is taken and decompressed after it,
/// so threads compress and decompress in parallel. Not supported here:
/// `storage_dir` and `shared` (the constructor throws for them).
///
/// `dumps` writes TorchRL's layout (see there): TorchRL's
/// `CompressedListStorage` loads the rows, and `loads` reads what TorchRL's
/// `ReplayBuffer.dumps` wrote for one.
///
/// ```
///   tensordict::CompressedReplayBuffer rb(tensordict::ReplayBufferOptions(1000));
///   rb.extend(TensorDict({{"pixels", at::zeros({8, 3, 84, 84}, at::kByte)}}, {8}));
///   auto [batch, info] = rb.sample(4);   // a LazyStackedTensorDict [4]
///   int64_t held = rb.bytes();           // compressed bytes stored
/// ```
class CompressedReplayBuffer {
 public:
  /// A buffer of `options.capacity()` rows, compressed with `compression`
  /// (zlib at level 3 by default). Throws for a level outside 0-9, or for
  /// only one of `compress` and `decompress`.
  explicit CompressedReplayBuffer(ReplayBufferOptions options,
                                  RowCompression compression = {});
  ~CompressedReplayBuffer();

  /// Compresses `row`, stores it and returns its storage index (-1 when a
  /// `MaxValueWriter` drops it). Throws, changing nothing, when the row
  /// lacks the key its sampler or writer reads, has
  /// another number of batch dims than the rows stored, or a compression
  /// function fails or returns something other than 1-D uint8 bytes.
  int64_t add(const TensorDict& row);
  /// Stores `rows`, in order; returns their storage indices. All or
  /// nothing, as `add`: every row is compressed before any is stored.
  at::Tensor extend(const std::vector<TensorDict>& rows);
  /// `extend(rows.unbind(0))`: the rows of a dict along its first batch dim
  /// (TorchRL's `extend` of a TensorDict).
  at::Tensor extend(const TensorDict& rows);
  /// `extend(rows.tensordicts())`, for a stack along dim 0.
  at::Tensor extend(const LazyStackedTensorDict& rows);
  /// Draws `batch_size` rows with the sampler, decompressed and stacked
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
  /// The compressed bytes stored (TorchRL's `CompressedListStorage.bytes()`:
  /// non-tensor data not counted).
  [[nodiscard]] int64_t bytes() const;
  /// `ReplayBuffer::rate_limiter_info`.
  [[nodiscard]] RateLimiterInfo rate_limiter_info() const;
  /// Drops every row (and resets the rate limiter's counts).
  void clear();
  /// Reseeds the sampler's generator.
  void manual_seed(uint64_t seed);
  /// The row at storage index `i`, decompressed (a copy).
  [[nodiscard]] TensorDict row(int64_t i) const;

  /// Writes a checkpoint into `dir` (new or empty), in TorchRL's layout of
  /// a `ReplayBuffer(storage=CompressedListStorage(...))`:
  ///   - `storage/`: the compressed rows in storage order as a lazy stack
  ///     (`compressed_data/`, Python's memmap layout), with each row's
  ///     shapes, dtypes and devices (`metadata.json`) and
  ///     `data_indices.json`: TorchRL's `CompressedListStorage.loads` reads
  ///     it (for rows of top-level tensors and non-tensor data; TorchRL does
  ///     not compress sub-dicts, so a row holding one gives metadata it
  ///     cannot read);
  ///   - `writer/metadata.json` and `buffer_metadata.json`: with
  ///     `storage/`, what TorchRL's `ReplayBuffer.loads` reads for a
  ///     `RandomSampler`;
  ///   - `index/`: the index buffer's checkpoint (`ReplayBuffer::dumps`:
  ///     the sampler's state, generator, cursor and size) and
  ///     `compressed/` (the format version and the rate limiter's counts),
  ///     so that `loads` resumes this buffer exactly.
  void dumps(const std::string& dir) const;
  /// Replaces this buffer's rows and state with the checkpoint in `dir`:
  /// one that `dumps` wrote (which needs the capacity and sampler it was
  /// written with), or one that TorchRL's `ReplayBuffer.dumps` wrote for a
  /// `CompressedListStorage` (no `index/`: the rows and the writer's cursor
  /// are read, the sampler starts afresh). All or nothing: every row is
  /// decompressed and checked before anything changes, so data that does
  /// not decompress to its shape and dtype is refused at load, not at a
  /// later sample.
  void loads(const std::string& dir);

 private:
  using RowPtr = std::shared_ptr<const detail::CompressedRow>;
  RowPtr compress_row(const TensorDict& row) const;
  TensorDict decompress_row(const detail::CompressedRow& row) const;

  at::Tensor write(const char* op, const std::vector<TensorDict>& rows,
                   bool one);

  RowCompression compression_;
  mutable std::mutex mutex_;
  // The index buffer, the rate limiter, the device, the rows' batch dims.
  std::unique_ptr<detail::ListState> state_;
  std::vector<RowPtr> rows_;
};

}  // namespace tensordict
