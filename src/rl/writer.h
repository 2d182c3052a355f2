// Internal: ReplayBuffer's writers (TorchRL's Writer classes), one class per
// `WriterConfig` alternative of tensordict/replay_buffer.h. A writer decides
// which storage row each incoming row goes to, writes it there through the
// storage's row writes, tells the sampler, and commits the storage's row
// count. ReplayBuffer checks the incoming dict against the storage first
// (ReplayStorage::prepare) and holds its lock through every call but
// `ranks`.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "rl/samplers.h"
#include "rl/storage.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

class Writer {
 public:
  virtual ~Writer() = default;

  // What the writer reads from the rows of a write before the buffer's lock
  // is taken: each row's rank (MaxValueWriter), else nothing.
  using Ranks = std::vector<double>;
  // The ranks of the rows of `value` (batch dims `value_bd`: 0 for a row, 1
  // for a non-empty batch), for `op` (errors call the value the `what`).
  // Throws naming the key before anything changes. Needs no lock.
  [[nodiscard]] virtual Ranks ranks(const char* /*op*/, const char* /*what*/,
                                    const TensorDict& /*value*/,
                                    int64_t /*value_bd*/) const {
    return {};
  }

  // What a write returns to ReplayBuffer: where the rows went (as `add` or
  // `extend` return it), and the rows the rate limiter counts as inserted.
  struct RowWritten {
    int64_t row;
    int64_t inserted;
  };
  struct RowsWritten {
    at::Tensor index;
    int64_t inserted;
  };
  // Writes the row `sources` (batch size []; `ranks` from `ranks()`).
  virtual RowWritten add(ReplayStorage& storage, Sampler& sampler,
                         const Sources& sources, const Ranks& ranks) = 0;
  // Writes the `n` (> 0) rows of `sources` (batch size [n]).
  virtual RowsWritten extend(ReplayStorage& storage, Sampler& sampler,
                             const Sources& sources, int64_t n,
                             const Ranks& ranks) = 0;

  // After `storage.clear()`.
  virtual void clear() {}
  // After the constructor reopened a disk-backed `storage`, or `loads`
  // copied a checkpoint's rows into it: learns the rows it holds.
  virtual void restore(const ReplayStorage& /*storage*/) {}
};

// TorchRL's RoundRobinWriter: rows go to the storage's cursor, which wraps
// (ReplayStorage::write_row, write_rows).
class RoundRobinWriterImpl final : public Writer {
 public:
  RowWritten add(ReplayStorage& storage, Sampler& sampler,
                 const Sources& sources, const Ranks& ranks) override;
  RowsWritten extend(ReplayStorage& storage, Sampler& sampler,
                     const Sources& sources, int64_t n,
                     const Ranks& ranks) override;
};

// TorchRL's TensorDictMaxValueWriter: keeps the `capacity` rows of highest
// rank (see MaxValueWriter in tensordict/replay_buffer.h).
class MaxValueWriterImpl final : public Writer {
 public:
  MaxValueWriterImpl(int64_t capacity, MaxValueWriter config)
      : capacity_(capacity), config_(std::move(config)) {}
  [[nodiscard]] Ranks ranks(const char* op, const char* what,
                            const TensorDict& value,
                            int64_t value_bd) const override;
  RowWritten add(ReplayStorage& storage, Sampler& sampler,
                 const Sources& sources, const Ranks& ranks) override;
  RowsWritten extend(ReplayStorage& storage, Sampler& sampler,
                     const Sources& sources, int64_t n,
                     const Ranks& ranks) override;
  void clear() override { top_.clear(); }
  void restore(const ReplayStorage& storage) override;

 private:
  // Writes the rows whose rank earns them a place; returns each row's
  // destination (-1: not stored) and how many rows it stored.
  std::pair<std::vector<int64_t>, int64_t> write_ranked(ReplayStorage& storage,
                                                        Sampler& sampler,
                                                        const Sources& sources,
                                                        int64_t value_bd,
                                                        const Ranks& rank);

  int64_t capacity_;
  MaxValueWriter config_;
  // A min-heap of (rank, row), one entry per stored row (ties: the lowest
  // row on top, as TorchRL's heapq of tuples).
  using LowestFirst = std::greater<std::pair<double, int64_t>>;
  std::vector<std::pair<double, int64_t>> top_;
};

}  // namespace detail
}  // namespace tensordict
