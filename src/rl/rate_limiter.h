// Internal: ReplayBuffer's rate limiter (`RateLimiter` in
// tensordict/replay_buffer.h, Reverb's SampleToInsertRatio): the counts of
// rows inserted and sampled, the range their difference is kept in, and the
// waits that keep it there. Without a configured limiter nothing waits and
// the writes and samples are not counted (the counts a checkpoint restores
// are kept).
//
// Not synchronized: the waits release and retake the buffer's lock, which
// guards every call.
#pragma once

#include <c10/util/Optional.h>

#include <condition_variable>
#include <cstdint>
#include <utility>

#include "rl/storage.h"
#include "tensordict/replay_buffer.h"

namespace tensordict {
namespace detail {

// `options.rate_limiter()`, or a ValueError naming the setting at fault.
c10::optional<RateLimiter> checked_limiter(const ReplayBufferOptions& options);

class RateLimiterImpl {
 public:
  // `config` was checked (checked_limiter).
  explicit RateLimiterImpl(c10::optional<RateLimiter> config)
      : config_(config) {}

  // Waits under `lock` (the buffer's) until `n` rows may be sampled from
  // `storage` (`sample`) or inserted into it; throws naming the counts when
  // the limiter's timeout passes. `storage` is anything with a `size()`
  // (ReplayBuffer's ReplayStorage; a list buffer's index buffer).
  template <typename Lock, typename Storage>
  void wait_to_sample(Lock& lock, const Storage& storage, int64_t n,
                      const char* op = "ReplayBuffer::sample") {
    if (!config_) return;
    wait(lock, op, storage, n, [&] { return may_sample(storage.size(), n); });
  }
  template <typename Lock, typename Storage>
  void wait_to_insert(Lock& lock, const char* op, const Storage& storage,
                      int64_t n) {
    if (!config_ || !config_->block_inserts()) return;
    wait(lock, op, storage, n, [&] { return may_insert(storage.size(), n); });
  }

  // After `n` rows were inserted or sampled: counts them and wakes the
  // other side.
  void count_inserted(int64_t n) { count(inserted_, n); }
  void count_sampled(int64_t n) { count(sampled_, n); }
  // The counts since construction or `reset` (checkpoints).
  [[nodiscard]] int64_t inserted() const { return inserted_; }
  [[nodiscard]] int64_t sampled() const { return sampled_; }
  // Sets the counts (0 and 0 for `clear()`; a checkpoint's for `loads`) and
  // wakes every waiter.
  void reset(int64_t inserted, int64_t sampled);

  // The counts and the range (all zero without a limiter).
  [[nodiscard]] RateLimiterInfo info() const;

 private:
  // inserted * samples_per_insert - sampled.
  [[nodiscard]] double diff() const;
  // The range `diff()` is kept in once min_size_to_sample rows are stored.
  [[nodiscard]] double min_diff() const;
  [[nodiscard]] double max_diff() const;
  [[nodiscard]] double offset() const;
  // Whether `n` rows may be sampled from, or inserted into, a storage of
  // `size` rows now.
  [[nodiscard]] bool may_sample(int64_t size, int64_t n) const;
  [[nodiscard]] bool may_insert(int64_t size, int64_t n) const;

  template <typename Lock, typename Storage, typename Ready>
  void wait(Lock& lock, const char* op, const Storage& storage, int64_t n,
            const Ready& ready) {
    if (ready() || cv_.wait_for(lock, config_->timeout(), ready)) return;
    throw_timeout(op, n, storage.size());
  }
  // The error of a wait that timed out.
  void throw_timeout(const char* op, int64_t n, int64_t size) const;
  void count(int64_t& counter, int64_t n);

  c10::optional<RateLimiter> config_;
  std::condition_variable_any cv_;
  int64_t inserted_ = 0;  // rows, since construction or reset()
  int64_t sampled_ = 0;
};

}  // namespace detail
}  // namespace tensordict
