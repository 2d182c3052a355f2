// ReplayBuffer's rate limiter (see rl/rate_limiter.h).
#include "rl/rate_limiter.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace tensordict {
namespace detail {

c10::optional<RateLimiter> checked_limiter(const ReplayBufferOptions& options) {
  const auto& r = options.rate_limiter();
  if (!r) return r;
  TORCH_CHECK_VALUE(!options.shared(),
                    "ReplayBufferOptions: a shared buffer cannot use a rate "
                    "limiter (it makes threads of one process wait)");
  TORCH_CHECK_VALUE(
      std::isfinite(r->samples_per_insert()) && r->samples_per_insert() > 0,
      "RateLimiter: samples_per_insert must be positive, got ",
      r->samples_per_insert());
  TORCH_CHECK_VALUE(r->min_size_to_sample() >= 1 &&
                        r->min_size_to_sample() <= options.capacity(),
                    "RateLimiter: min_size_to_sample must be in [1, capacity ",
                    options.capacity(), "], got ", r->min_size_to_sample());
  const double least = std::max(1.0, r->samples_per_insert());
  TORCH_CHECK_VALUE(
      std::isfinite(r->error_buffer()) && r->error_buffer() >= least,
      "RateLimiter: error_buffer must be at least max(1, "
      "samples_per_insert) = ",
      least, ", got ", r->error_buffer());
  TORCH_CHECK_VALUE(r->timeout().count() >= 0,
                    "RateLimiter: timeout must not be negative, got ",
                    r->timeout().count(), " ms");
  return r;
}

double RateLimiterImpl::diff() const {
  return static_cast<double>(inserted_) * config_->samples_per_insert() -
         static_cast<double>(sampled_);
}

double RateLimiterImpl::min_diff() const {
  return offset() - config_->error_buffer();
}

double RateLimiterImpl::max_diff() const {
  return offset() + config_->error_buffer();
}

double RateLimiterImpl::offset() const {
  return config_->samples_per_insert() *
         static_cast<double>(config_->min_size_to_sample());
}

bool RateLimiterImpl::may_sample(int64_t size, int64_t n) const {
  return size >= config_->min_size_to_sample() &&
         diff() - static_cast<double>(n) >= min_diff();
}

bool RateLimiterImpl::may_insert(int64_t size, int64_t n) const {
  return size < config_->min_size_to_sample() ||
         diff() + static_cast<double>(n) * config_->samples_per_insert() <=
             max_diff();
}

void RateLimiterImpl::throw_timeout(const char* op, int64_t n,
                                    int64_t size) const {
  TORCH_CHECK(false, op, ": the rate limiter did not allow ", n,
              " rows within ", config_->timeout().count(), " ms (", inserted_,
              " rows inserted, ", sampled_, " sampled, size ", size,
              "; samples_per_insert ", config_->samples_per_insert(),
              ", min_size_to_sample ", config_->min_size_to_sample(),
              ", error_buffer ", config_->error_buffer(), ")");
}

void RateLimiterImpl::count(int64_t& counter, int64_t n) {
  if (!config_) return;
  counter += n;
  cv_.notify_all();
}

void RateLimiterImpl::reset(int64_t inserted, int64_t sampled) {
  inserted_ = inserted;
  sampled_ = sampled;
  cv_.notify_all();
}

RateLimiterInfo RateLimiterImpl::info() const {
  RateLimiterInfo info;
  if (!config_) return info;
  info.inserted = inserted_;
  info.sampled = sampled_;
  info.diff = diff();
  info.min_diff = min_diff();
  info.max_diff = max_diff();
  return info;
}

}  // namespace detail
}  // namespace tensordict
