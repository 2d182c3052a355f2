// Tests of RateLimiter (Reverb's SampleToInsertRatio) on ReplayBuffer: the
// ratio holds within the error buffer between producer and consumer
// threads, waits time out with a clear error, and the options are checked.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using tensordict::RateLimiter;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;

TensorDict Row(float v) {
  return TensorDict({{"obs", torch::full({3}, v)}}, {});
}

TEST(RateLimiterTest, TheRatioHoldsWithinTheErrorBufferBetweenThreads) {
  // 4 rows sampled per row inserted, from 10 rows on, +-20.
  ReplayBuffer rb(ReplayBufferOptions(100).seed(0).rate_limiter(
      RateLimiter(4.0).min_size_to_sample(10).error_buffer(20).block_inserts(
          true)));
  constexpr int64_t kInserts = 1000;
  constexpr int64_t kSamples = 990;  // calls of sample(4): all reachable
  std::atomic<int64_t> out_of_range{0};
  auto check = [&] {
    const auto info = rb.rate_limiter_info();
    if (info.inserted >= 10 &&
        (info.diff < info.min_diff || info.diff > info.max_diff)) {
      ++out_of_range;
    }
  };
  std::thread producer([&] {
    for (int64_t i = 0; i < kInserts; ++i) {
      rb.add(Row(static_cast<float>(i)));
      check();
    }
  });
  std::thread consumer([&] {
    for (int64_t k = 0; k < kSamples; ++k) {
      (void)rb.sample(4);
      check();
    }
  });
  producer.join();
  consumer.join();
  const auto info = rb.rate_limiter_info();
  EXPECT_EQ(info.inserted, kInserts);
  EXPECT_EQ(info.sampled, 4 * kSamples);
  EXPECT_EQ(info.min_diff, 20);
  EXPECT_EQ(info.max_diff, 60);
  EXPECT_EQ(out_of_range.load(), 0);
  EXPECT_DOUBLE_EQ(info.diff, 4.0 * kInserts - 4.0 * kSamples);
}

TEST(RateLimiterTest, SamplingWaitsForTheMinimumSizeThenForInserts) {
  ReplayBuffer rb(ReplayBufferOptions(100).seed(0).rate_limiter(
      RateLimiter(1.0).min_size_to_sample(3).error_buffer(2).timeout(
          std::chrono::milliseconds(50))));
  rb.add(Row(0));
  rb.add(Row(1));
  ExpectThrowsMsg([&] { (void)rb.sample(1); },
                  "ReplayBuffer::sample: the rate limiter did not allow 1 rows "
                  "within 50 ms "
                  "(2 rows inserted, 0 sampled, size 2; samples_per_insert 1, "
                  "min_size_to_sample 3, error_buffer 2)");
  EXPECT_EQ(rb.rate_limiter_info().sampled, 0);
  rb.add(Row(2));  // diff 3, min_diff 1: two rows may be sampled
  (void)rb.sample(2);
  ExpectThrowsMsgPrefix([&] { (void)rb.sample(1); },
                        "ReplayBuffer::sample: the rate limiter did not allow "
                        "1 rows within 50 ms");
  // Inserts never wait without block_inserts.
  for (int i = 0; i < 20; ++i) rb.add(Row(3));
  EXPECT_EQ(rb.rate_limiter_info().inserted, 23);
  // A waiting sample wakes up when a row comes in.
  ReplayBuffer rb2(ReplayBufferOptions(10).rate_limiter(
      RateLimiter(1.0).min_size_to_sample(1).error_buffer(1)));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rb2.add(Row(9));
    rb2.add(Row(9));
  });
  auto [batch, info] = rb2.sample(1);
  late.join();
  EXPECT_EQ(batch.get("obs")[0][0].item<float>(), 9.f);
}

TEST(RateLimiterTest, BlockedInsertsTimeOutAndChangeNothing) {
  ReplayBuffer rb(ReplayBufferOptions(100).rate_limiter(
      RateLimiter(2.0)
          .min_size_to_sample(2)
          .error_buffer(2)
          .block_inserts(true)
          .timeout(std::chrono::milliseconds(30))));
  // offset 4, diff kept in [2, 6] from 2 rows on.
  rb.add(Row(0));
  rb.add(Row(1));  // diff 4
  rb.add(Row(2));  // diff 6: the next insert would pass max_diff
  ExpectThrowsMsg(
      [&] { rb.add(Row(3)); },
      "ReplayBuffer::add: the rate limiter did not allow 1 rows within 30 ms "
      "(3 rows inserted, 0 sampled, size 3; samples_per_insert 2, "
      "min_size_to_sample 2, error_buffer 2)");
  EXPECT_EQ(rb.size(), 3);
  EXPECT_EQ(rb.cursor(), 3);
  (void)rb.sample(2);  // diff 4: an insert fits again
  rb.extend(TensorDict({{"obs", torch::zeros({1, 3})}}, {1}));
  EXPECT_EQ(rb.size(), 4);
  rb.clear();
  EXPECT_EQ(rb.rate_limiter_info().inserted, 0);
}

TEST(RateLimiterTest, OptionsAreChecked) {
  auto make = [](RateLimiter r, bool shared = false) {
    ReplayBuffer rb(ReplayBufferOptions(10).rate_limiter(r).shared(shared));
  };
  ExpectThrowsMsg<c10::ValueError>(
      [&] { make(RateLimiter(0)); },
      "RateLimiter: samples_per_insert must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { make(RateLimiter(1).min_size_to_sample(11)); },
      "RateLimiter: min_size_to_sample must be in [1, capacity 10], got 11");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { make(RateLimiter(4).error_buffer(3)); },
      "RateLimiter: error_buffer must be at least max(1, samples_per_insert) = "
      "4, "
      "got 3");
  ExpectThrowsMsg<c10::ValueError>([&] { make(RateLimiter(1), true); },
                                   "ReplayBufferOptions: a shared buffer "
                                   "cannot use a rate limiter (it makes "
                                   "threads of one process wait)");
  EXPECT_EQ(ReplayBuffer(ReplayBufferOptions(10)).rate_limiter_info().max_diff,
            0);
}

}  // namespace
