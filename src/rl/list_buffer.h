// Internal: what LazyStackReplayBuffer and CompressedReplayBuffer
// (tensordict/lazy_replay_buffer.h) share. Both keep each row on its own, in
// a vector of slots indexed by storage index, beside a `ListState`: a dense
// ReplayBuffer of small index rows (a marker, and what the sampler and the
// writer read: a slice sampler's end or trajectory key, a MaxValueWriter's
// rank key) that does the writing order, the sampling and the priorities
// and reports the storage index of every write and draw, and the buffer's
// rate limiter, row dims and device.
//
// The rate limiter is the list buffer's own, not the index buffer's: its
// waits release the list buffer's lock (the index buffer's would hold it
// and block every other call). Not synchronized: the list buffer's mutex
// guards every call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rl/rate_limiter.h"
#include "tensordict/functional.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

using ListLock = std::unique_lock<std::mutex>;

struct ListState {
  // Throws a ValueError naming the first option the list buffer `name`
  // does not support (storage_dir, shared) or a rate limiter setting at
  // fault.
  ListState(ReplayBufferOptions options, const char* name);

  const char* cls;
  c10::optional<at::Device> device;  // where the rows go (none: as written)
  RateLimiterImpl limiter;
  ReplayBuffer index;     // on the CPU, without a rate limiter
  int64_t row_dims = -1;  // the rows' number of batch dims (-1: none yet)

  // The index buffer's row for `row`: a marker, and the keys the sampler
  // and the writer read (a c10::Error starting with `op` when the row does
  // not hold one as a tensor).
  [[nodiscard]] TensorDict index_row(const char* op,
                                     const TensorDict& row) const;
  // `index_row` of each of `rows`.
  [[nodiscard]] std::vector<TensorDict> index_rows(
      const char* op, const std::vector<TensorDict>& rows) const;

  // The rows' common number of batch dims: `row_dims`, or the first row's
  // when none is stored. Throws naming the first row that differs: "this
  // row" when `one` (an add), else "rows[k]".
  [[nodiscard]] int64_t check_dims(const char* op,
                                   const std::vector<TensorDict>& rows,
                                   bool one) const;

  // The storage indices the next write of `n` rows takes, where the writer
  // fixes them in advance (round-robin, and at most a capacity of rows);
  // empty otherwise (a MaxValueWriter). Under the list buffer's lock, the
  // write that follows takes exactly these.
  [[nodiscard]] std::vector<int64_t> next_slots(int64_t n) const;

  // One write under `lock`: checks the rows' batch dims, waits for the rate
  // limiter, calls `prepare(next_slots(n))` (the last step that may throw),
  // writes `index_rows` into the index buffer, then calls `store(k,
  // slots[i])` for each row k kept, `i` the storage index reported for it
  // (a batch larger than the capacity keeps its last rows; a
  // MaxValueWriter's dropped rows, -1, go nowhere); returns those indices.
  // `store` must not throw. `slots` is sized to the capacity on the first
  // write. Nothing changes when it throws.
  template <typename Row, typename Prepare, typename Store>
  at::Tensor write(ListLock& lock, std::vector<Row>& slots, const char* op,
                   const std::vector<TensorDict>& rows, bool one,
                   const std::vector<TensorDict>& index_rows, Prepare prepare,
                   Store store) {
    const int64_t dims = check_dims(op, rows, one);
    const auto n = static_cast<int64_t>(rows.size());
    if (n == 0) return at::empty({0}, at::kLong);
    limiter.wait_to_insert(lock, op, index, n);
    prepare(next_slots(n));
    at::Tensor written = index.extend(tensordict::stack(index_rows, 0));
    if (slots.empty()) slots.resize(static_cast<size_t>(index.capacity()));
    const int64_t m = written.numel();
    const int64_t skip = n - m;
    const int64_t* ip = written.data_ptr<int64_t>();
    int64_t inserted = 0;
    for (int64_t k = 0; k < m; ++k) {
      if (ip[k] < 0) continue;
      store(static_cast<size_t>(skip + k), slots[static_cast<size_t>(ip[k])]);
      ++inserted;
    }
    limiter.count_inserted(skip > 0 ? n : inserted);
    row_dims = dims;
    return written;
  }

  // One draw under `lock`: waits for the rate limiter, samples `n` storage
  // indices from the index buffer and counts them.
  SampleInfo draw(ListLock& lock, const char* op, int64_t n);

  // Drops every row and resets the limiter's counts.
  void clear();

  // The list buffer's own part of a checkpoint (`dir`, a memmap directory):
  // the format version, the row dims and the limiter's counts; and reading
  // it back, checked (throws naming `dir`; changes nothing). `restore` sets
  // what `read` returned.
  struct Saved {
    int64_t row_dims = -1;
    int64_t inserted = 0;
    int64_t sampled = 0;
  };
  void save(const std::string& dir) const;
  [[nodiscard]] static Saved read(const std::string& dir, const char* fn);
  void restore(const Saved& saved, int64_t rows);
};

// Copies of `rows` (a sample's): every contiguous CPU leaf that autograd
// does not track is copied by bytes into one new buffer that the copies'
// leaves view (one allocation for the whole sample, as ReplayBuffer's
// gather makes); any other leaf is cloned.
std::vector<TensorDict> copy_rows(const std::vector<TensorDict>& rows);

// The slots of `index` (int64, any shape), in order.
template <typename Row>
std::vector<Row> list_gather(const std::vector<Row>& slots,
                             const at::Tensor& index) {
  const at::Tensor flat = index.contiguous();
  const int64_t* ip = flat.data_ptr<int64_t>();
  std::vector<Row> out;
  out.reserve(static_cast<size_t>(flat.numel()));
  for (int64_t k = 0; k < flat.numel(); ++k) {
    out.push_back(slots[static_cast<size_t>(ip[k])]);
  }
  return out;
}

}  // namespace detail
}  // namespace tensordict
