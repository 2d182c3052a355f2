// The threads of a ParallelEnv (envs/parallel_workers.h): each share of the
// envs has its thread, and the caller only waits for them, with the
// timeout (an env stuck in the caller's own thread could not be timed
// out). The threads spin for a while after each call, then sleep on a
// condition variable, so that a rollout's steps meet awake workers; the
// caller sleeps at once (on a futex), so that it takes no core from them. Each worker
// reads and writes its envs' rows of the caller's dicts through views
// (envs/row_views.h).
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
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
  TensorDict states;  // kState's, kLoadState's: its envs' states
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
  bool caller_waits = false;  // the caller sleeps on `finished` (close)
  // Set by the last share to finish a call; the caller sleeps on it (a
  // futex) while `caller_sleeps`.
  std::atomic<int32_t> call_done{0};
  std::atomic<bool> caller_sleeps{false};
  bool stop = false;
  // The call.
  Command cmd = Command::kStep;
  const TensorDict* td = nullptr;
  const TensorDict* next = nullptr;
  int64_t only = -1;  // the one share that runs the call (seeds), or -1
  int64_t per_env = 1;
  std::vector<ThreadShare> shares;
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
  if (s.cmd == Command::kState || s.cmd == Command::kLoadState) {
    share.failed =
        run_state(s.cmd, share.envs, share.begin, share.states, share.error);
    return;
  }
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
      // Let the caller, woken by the last share, have this core.
      if (i % 16 == 15) std::this_thread::yield();
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
    if (s.only < 0 || s.only == static_cast<int64_t>(w)) {
      run_thread_share(s, share);
      share.current.store(-1, std::memory_order_relaxed);
    }
    if (s.done.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<int64_t>(s.shares.size())) {
      s.call_done.store(1);
      if (s.caller_sleeps.load()) {
        syscall(SYS_futex, &s.call_done, FUTEX_WAKE_PRIVATE, 1, nullptr,
                nullptr, 0);
      }
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
    // The threads make their envs.
    std::vector<std::promise<std::string>> made(static_cast<size_t>(workers));
    for (int64_t w = 0; w < workers; ++w) {
      threads.emplace_back(thread_main, state, static_cast<size_t>(w), &factory,
                           &made[static_cast<size_t>(w)]);
    }
    std::string error;
    for (int64_t w = 0; w < workers; ++w) {
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
      // Each env's seed is the previous env's result: the shares seed
      // their envs one after the other.
      for (size_t w = 0; w < s.shares.size(); ++w) {
        s.shares[w].seed = seed;
        publish(cmd, nullptr, nullptr, static_cast<int64_t>(w));
        wait_for_threads(cmd);
        const ThreadShare& share = s.shares[w];
        if (share.failed >= 0) {
          TORCH_CHECK(false, failure(share.failed, cmd, steps, share.error));
        }
        seed = share.seed;
      }
      return;
    }
    publish(cmd, td, next, -1);
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

  TensorDict env_states() override {
    for (ThreadShare& share : state->shares) share.states = TensorDict();
    uint64_t seed = 0;
    run(Command::kState, nullptr, nullptr, seed);
    TensorDict out;
    for (ThreadShare& share : state->shares) {
      for (int64_t e = share.begin; e < share.end; ++e) {
        const std::string key = std::to_string(e);
        out.set(key, share.states.get_tensordict(key));
      }
      share.states = TensorDict();
    }
    return out;
  }

  void load_env_states(const TensorDict& states) override {
    // Each share its own dict: the threads read no dict in common.
    for (ThreadShare& share : state->shares) {
      share.states = TensorDict();
      for (int64_t e = share.begin; e < share.end; ++e) {
        const std::string key = std::to_string(e);
        share.states.set(key, states.get_tensordict(key));
      }
    }
    uint64_t seed = 0;
    run(Command::kLoadState, nullptr, nullptr, seed);
  }

  // Starts a call on the threads (only share `only`'s runs it when it is
  // not -1).
  void publish(Command cmd, const TensorDict* td, const TensorDict* next,
               int64_t only) {
    ThreadState& s = *state;
    s.cmd = cmd;
    s.td = td;
    s.next = next;
    s.only = only;
    for (ThreadShare& share : s.shares) share.failed = -1;
    s.done.store(0, std::memory_order_relaxed);
    s.call_done.store(0);
    s.generation.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.sleepers > 0) s.wake.notify_all();
  }

  // Waits for every share to finish the call, at most the timeout: on a
  // futex on `call_done`, which the last share sets (a condition variable's
  // mutex hand-off would add a second wake-up to each step).
  void wait_for_threads(Command cmd) {
    using Clock = std::chrono::steady_clock;
    ThreadState& s = *state;
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(timeout_s));
    bool finished = s.call_done.load() != 0;
    while (!finished) {
      const Clock::duration left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) break;
      s.caller_sleeps.store(true);
      if (s.call_done.load() == 0) {
        const auto ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        timespec rel{};
        rel.tv_sec = static_cast<time_t>(ns / 1000000000);
        rel.tv_nsec = static_cast<long>(ns % 1000000000);
        syscall(SYS_futex, &s.call_done, FUTEX_WAIT_PRIVATE, 0, &rel, nullptr,
                0);
      }
      s.caller_sleeps.store(false);
      finished = s.call_done.load() != 0;
    }
    if (finished) return;
    // A thread is stuck: name the first env still running.
    int64_t env = -1;
    for (size_t w = 0; w < s.shares.size() && env < 0; ++w) {
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
      s.caller_waits = true;
      s.finished.wait_until(lock, deadline, [&] {
        for (const ThreadShare& share : s.shares) {
          if (!share.exited) return false;
        }
        return true;
      });
      s.caller_waits = false;
    }
    for (size_t t = 0; t < threads.size(); ++t) {
      if (s.shares[t].exited) {
        threads[t].join();
      } else {
        threads[t].detach();
      }
    }
    threads.clear();
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
