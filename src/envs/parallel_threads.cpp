// The threads of a ParallelEnv (envs/parallel_workers.h): the caller runs
// the first share of the envs itself; the other threads spin for a while
// after each call, then sleep on a condition variable, so that a rollout's
// steps meet awake workers. Each worker reads and writes its envs' rows of
// the caller's dicts through views (envs/row_views.h).
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "envs/parallel_workers.h"
#include "envs/row_views.h"

namespace tensordict {
namespace detail {

namespace {

struct ThreadShare {
  std::vector<std::unique_ptr<EnvBase>> envs;
  int64_t begin = 0, end = 0;  // the envs' range
  std::unique_ptr<RowViews> in, out;
  std::string error;
  int64_t failed = -1;
  uint64_t seed = 0;
  std::atomic<int64_t> current{-1};
  std::atomic<bool> exited{false};
};

// What the threads share with the caller; a thread holds it too, so that a
// thread left behind (stuck) keeps what it uses.
struct ThreadState {
  std::mutex mu;
  std::condition_variable wake, finished;
  std::atomic<uint64_t> generation{0};
  std::atomic<int64_t> done{0};
  int64_t sleepers = 0;
  bool stop = false;
  // The call.
  Command cmd = Command::kStep;
  const TensorDict* td = nullptr;
  const TensorDict* next = nullptr;
  int64_t per_env = 1;
  std::vector<ThreadShare> shares;  // [0] is the caller's
};

// How long a waiting thread spins before it sleeps: some 100 us, about
// the gap between two steps of a rollout.
constexpr int kSpins = 4000;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void run_thread_share(ThreadState& s, ThreadShare& share) {
  const std::vector<TensorDict>* in = nullptr;
  const std::vector<TensorDict>* out = nullptr;
  try {
    if (s.cmd != Command::kSeed) in = &share.in->of(*s.td);
    if (s.cmd == Command::kStep) out = &share.out->of(*s.next);
  } catch (...) {
    share.error = current_message();
    share.failed = share.begin;
    return;
  }
  share.failed = run_share(s.cmd, share.envs, share.begin, in, out, s.per_env,
                           share.seed, share.error, &share.current);
}

void thread_main(const std::shared_ptr<ThreadState>& state, size_t w,
                 const EnvFactory* factory, std::promise<std::string>* made) {
  ThreadState& s = *state;
  ThreadShare& share = s.shares[w];
  {
    std::string error;
    for (int64_t e = share.begin; e < share.end && error.empty(); ++e) {
      try {
        share.envs.push_back((*factory)());
        TORCH_CHECK_VALUE(share.envs.back() != nullptr,
                          "the factory returned no env");
      } catch (...) {
        error = "ParallelEnv: env " + std::to_string(e) +
                " could not be made: " + current_message();
      }
    }
    made->set_value(error);
    if (!error.empty()) {
      share.exited = true;
      return;
    }
  }
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = s.generation.load(std::memory_order_acquire);
    for (int i = 0; i < kSpins && now == seen; ++i) {
      cpu_relax();
      now = s.generation.load(std::memory_order_acquire);
    }
    if (now == seen) {
      std::unique_lock<std::mutex> lock(s.mu);
      ++s.sleepers;
      s.wake.wait(lock, [&] {
        return s.stop || s.generation.load(std::memory_order_acquire) != seen;
      });
      --s.sleepers;
      if (s.stop) break;
      now = s.generation.load(std::memory_order_acquire);
    }
    seen = now;
    if (s.stop) break;
    run_thread_share(s, share);
    share.current.store(-1, std::memory_order_relaxed);
    if (s.done.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<int64_t>(s.shares.size()) - 1) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.finished.notify_all();
    }
  }
  share.envs.clear();
  share.exited = true;
  std::lock_guard<std::mutex> lock(s.mu);
  s.finished.notify_all();
}

struct ThreadWorkers final : ParallelEnv::Workers {
  ThreadWorkers(int64_t n, int64_t workers, const EnvFactory& factory,
                const std::vector<int64_t>& row_batch, double timeout)
      : state(std::make_shared<ThreadState>()), timeout_s(timeout) {
    num_envs = n;
    state->per_env = c10::multiply_integers(row_batch);
    state->shares = std::vector<ThreadShare>(static_cast<size_t>(workers));
    for (int64_t w = 0; w < workers; ++w) {
      ThreadShare& share = state->shares[static_cast<size_t>(w)];
      const auto [begin, end] = env_range(w, workers, n);
      share.begin = begin;
      share.end = end;
      share.in = std::make_unique<RowViews>(begin, end, row_batch);
      share.out = std::make_unique<RowViews>(begin, end, row_batch);
    }
    // The threads make their envs; the caller makes the first share's.
    std::vector<std::promise<std::string>> made(static_cast<size_t>(workers));
    for (int64_t w = 1; w < workers; ++w) {
      threads.emplace_back(thread_main, state, static_cast<size_t>(w), &factory,
                           &made[static_cast<size_t>(w)]);
    }
    std::string error;
    ThreadShare& own = state->shares[0];
    for (int64_t e = own.begin; e < own.end && error.empty(); ++e) {
      try {
        own.envs.push_back(factory());
        TORCH_CHECK_VALUE(own.envs.back() != nullptr,
                          "the factory returned no env");
      } catch (...) {
        error = "ParallelEnv: env " + std::to_string(e) +
                " could not be made: " + current_message();
      }
    }
    for (int64_t w = 1; w < workers; ++w) {
      const std::string made_error =
          made[static_cast<size_t>(w)].get_future().get();
      if (error.empty()) error = made_error;
    }
    if (!error.empty()) {
      close();
      TORCH_CHECK(false, error);
    }
  }
  ~ThreadWorkers() override { close(); }

  void run(Command cmd, const TensorDict* td, const TensorDict* next,
           uint64_t& seed) override {
    check_usable();
    ThreadState& s = *state;
    if (cmd == Command::kSeed) {
      // Each env's seed is the previous env's result: the caller seeds
      // them in turn (the threads are idle between calls).
      for (ThreadShare& share : s.shares) {
        std::string error;
        const int64_t failed = run_share(cmd, share.envs, share.begin, nullptr,
                                         nullptr, 1, seed, error, nullptr);
        if (failed >= 0) TORCH_CHECK(false, failure(failed, cmd, steps, error));
      }
      return;
    }
    s.cmd = cmd;
    s.td = td;
    s.next = next;
    s.done.store(0, std::memory_order_relaxed);
    s.generation.fetch_add(1, std::memory_order_acq_rel);
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.sleepers > 0) s.wake.notify_all();
    }
    run_thread_share(s, s.shares[0]);
    wait_for_threads(cmd);
    int64_t failed = -1;
    std::string error;
    for (ThreadShare& share : s.shares) {
      if (share.failed >= 0 && (failed < 0 || share.failed < failed)) {
        failed = share.failed;
        error = share.error;
      }
    }
    if (failed >= 0) TORCH_CHECK(false, failure(failed, cmd, steps, error));
  }

  void wait_for_threads(Command cmd) {
    ThreadState& s = *state;
    const int64_t expected = static_cast<int64_t>(s.shares.size()) - 1;
    for (int i = 0; i < kSpins; ++i) {
      if (s.done.load(std::memory_order_acquire) == expected) return;
      cpu_relax();
    }
    std::unique_lock<std::mutex> lock(s.mu);
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(timeout_s));
    if (s.finished.wait_until(lock, deadline, [&] {
          return s.done.load(std::memory_order_acquire) == expected;
        })) {
      return;
    }
    // A thread is stuck: name the first env still running.
    int64_t env = -1;
    for (size_t w = 1; w < s.shares.size() && env < 0; ++w) {
      env = s.shares[w].current.load(std::memory_order_relaxed);
    }
    broken = "ParallelEnv: env " + std::to_string(env) + " did not finish " +
             call_name(cmd, steps) + " within " + c10::str(timeout_s) + " s";
    TORCH_CHECK(false, broken);
  }

  void close() override {
    if (state == nullptr) return;
    ThreadState& s = *state;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stop = true;
      s.wake.notify_all();
    }
    // Join the threads that stop within the timeout; leave a stuck one
    // running, detached (it holds the state it uses).
    {
      std::unique_lock<std::mutex> lock(s.mu);
      const auto deadline =
          std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(std::min(timeout_s, 5.0)));
      s.finished.wait_until(lock, deadline, [&] {
        for (size_t w = 1; w < s.shares.size(); ++w) {
          if (!s.shares[w].exited) return false;
        }
        return true;
      });
    }
    for (size_t t = 0; t < threads.size(); ++t) {
      if (s.shares[t + 1].exited) {
        threads[t].join();
      } else {
        threads[t].detach();
      }
    }
    threads.clear();
    s.shares[0].envs.clear();
    if (broken.empty()) broken = "ParallelEnv: closed";
    state.reset();
  }

  std::shared_ptr<ThreadState> state;
  std::vector<std::thread> threads;
  double timeout_s;
};

}  // namespace

std::unique_ptr<ParallelEnv::Workers> make_thread_workers(
    int64_t n, int64_t workers, const EnvFactory& factory,
    const std::vector<int64_t>& row_batch, double timeout) {
  return std::make_unique<ThreadWorkers>(n, workers, factory, row_batch,
                                         timeout);
}

}  // namespace detail
}  // namespace tensordict
