// MultiSyncCollector and MultiAsyncCollector (tensordict/collectors.h):
// what both kinds of workers share (collectors/multi_workers.h), the public
// API, and the worker threads: one `Collector` per thread, and one state
// (`ThreadWorkers`) that the threads and the caller share, under one mutex:
//   - sync: the caller opens a round; each worker collects one batch into
//     its collector's storage and marks the round done; the caller stacks
//     the batches into storage of its own (allocated on the first round);
//   - async: each worker collects a batch, waits until its hand-off slot is
//     free, copies the batch into the slot (`update_`, in place after the
//     first) and goes on; the caller takes the oldest full slot, and frees
//     it on its next call;
//   - weights: the caller raises `pause` and waits until no worker is
//     inside a batch or between two steps of one (every worker checks the
//     flag before each step), writes the weights, and lowers it;
//   - stop: `stopping` makes every worker leave at its next step (a step
//     check throws `Stopped`) or wait; the caller waits a second for the
//     threads, joins those that left (so that none is still ending, maybe
//     freeing memory, when the caller goes on: a fork then would copy its
//     locks taken) and leaves those still in an env's code detached, each
//     holding the state.
// A worker's error is kept with its index; the caller raises it at once.
// The worker processes are in multi_processes.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectors/collector_impl.h"
#include "collectors/multi_workers.h"
#include "core/names.h"
#include "envs/parallel_workers.h"
#include "tensordict/collectors.h"
#include "tensordict/functional.h"

namespace tensordict {
namespace detail {

MultiWorkers::MultiWorkers(bool is_sync, size_t workers,
                           const CollectorOptions& o,
                           c10::optional<TensorDictModule> m)
    : sync(is_sync),
      name(is_sync ? "MultiSyncCollector" : "MultiAsyncCollector"),
      num_workers(static_cast<int64_t>(workers)),
      options(o),
      module(std::move(m)) {
  TORCH_CHECK_VALUE(workers > 0, name, ": expected at least one env factory");
  TORCH_CHECK_VALUE(options.frames_per_batch() > 0, name,
                    ": frames_per_batch must be positive, got ",
                    options.frames_per_batch());
  TORCH_CHECK_VALUE(options.rollout_buffer() == nullptr, name,
                    ": a rollout_buffer takes one collector's steps; give "
                    "it to a Collector");
  TORCH_CHECK_VALUE(options.timeout() > 0, name,
                    ": timeout must be positive, got ", options.timeout());
}

CollectorOptions MultiWorkers::worker_options(bool writes_buffer) const {
  CollectorOptions each = options;
  each.frames_per_batch((options.frames_per_batch() + num_workers - 1) /
                        num_workers)
      .total_frames(-1)
      .processes(false);
  if (!writes_buffer) each.replay_buffer(nullptr);
  if (each.replay_buffer() == nullptr) {
    // The caller splits and post-processes what it yields.
    each.split_trajs(false).postproc(nullptr);
  }
  return each;
}

void MultiWorkers::check_one_shape(
    const std::vector<std::vector<int64_t>>& shapes) const {
  for (size_t w = 1; w < shapes.size(); ++w) {
    TORCH_CHECK_VALUE(shapes[w] == shapes[0], name, ": worker ", w,
                      "'s batches are ", detail::shape_str(shapes[w]),
                      " but worker 0's are ", detail::shape_str(shapes[0]),
                      ": the batches are stacked, so every env must have "
                      "one batch size");
  }
}

void MultiWorkers::check_usable() const {
  TORCH_CHECK(failure.empty(), failure);
  TORCH_CHECK(!shut, name, ": the collector was shut down");
  TORCH_CHECK(!finished(), name, ": total_frames (", options.total_frames(),
              ") were collected");
}

bool MultiWorkers::finished() const {
  return shut || !failure.empty() ||
         (options.total_frames() >= 0 && frames >= options.total_frames());
}

void MultiWorkers::fail(int64_t w, const std::string& error) {
  failure =
      std::string(name) + ": worker " + std::to_string(w) + " failed: " + error;
  TORCH_CHECK(false, failure);
}

void MultiWorkers::check_weights() const {
  TORCH_CHECK_VALUE(module.has_value(), name,
                    "::update_policy_weights_: the policy is not a "
                    "TensorDictModule, so it has no weights to update");
  TORCH_CHECK(failure.empty(), failure);
}

const TensorDict& MultiWorkers::stack_batches(
    const std::vector<TensorDict>& batches) {
  if (stacked.empty()) {
    stacked = tensordict::stack(batches, 0);
  } else {
    (void)tensordict::stack_out(stacked, batches, 0);
  }
  return stacked;
}

TensorDict MultiWorkers::state_dict() {
  check_idle("state_dict");
  TensorDict out;
  for (int64_t w = 0; w < num_workers; ++w) {
    out.set("worker" + std::to_string(w), worker_state(w));
  }
  out.set("frames", at::scalar_tensor(frames, at::kLong));
  out.set("iter", at::scalar_tensor(iters, at::kLong));
  return out;
}

void MultiWorkers::load_state_dict(const TensorDict& state) {
  const std::string fn = std::string(name) + "::load_state_dict";
  check_idle("load_state_dict");
  for (int64_t w = 0; w < num_workers; ++w) {
    const std::string key = "worker" + std::to_string(w);
    TORCH_CHECK_VALUE(
        state.contains(key) && state.get_entry(key).is_tensordict(), fn,
        ": the state has no dict ", key, " (", num_workers, " workers)");
  }
  const int64_t new_frames = state_int(state, "frames", fn);
  const int64_t new_iters = state_int(state, "iter", fn);
  // Each worker's load is all or nothing; the ones before a failure go
  // back to where they were.
  std::vector<TensorDict> before;
  for (int64_t w = 0; w < num_workers; ++w) before.push_back(worker_state(w));
  for (int64_t w = 0; w < num_workers; ++w) {
    try {
      load_worker_state(w, state.get_tensordict("worker" + std::to_string(w)));
    } catch (const c10::Error& e) {
      for (int64_t v = 0; v < w; ++v) load_worker_state(v, before[v]);
      TORCH_CHECK_VALUE(false, fn, ": worker ", w, ": ", e.msg());
    }
  }
  frames = new_frames;
  iters = new_iters;
}

namespace {

std::chrono::duration<double> seconds(double s) {
  return std::chrono::duration<double>(s);
}

struct ThreadWorkers final : MultiWorkers {
  enum class SlotState { kFree, kFull, kLent };
  struct Slot {
    int64_t done_round = 0;  // sync: the last round finished
    SlotState state = SlotState::kFree;
    int64_t order = 0;  // async: when it was filled
    TensorDict batch;   // sync: the collector's; async: the hand-off
    int64_t frames = 0;
    std::string error;  // empty: none
    bool exited = false;
  };

  std::vector<std::unique_ptr<Collector>> collectors;
  std::vector<Slot> slots;
  std::vector<std::thread> threads;  // the caller's: joined or detached by stop

  std::mutex mu;
  std::condition_variable to_workers;
  std::condition_variable to_caller;
  std::atomic<bool> stopping{false};
  std::atomic<bool> pause{false};
  int running = 0;  // workers inside a batch, not paused
  std::atomic<int64_t> round{
      0};               // sync: the round the caller asked for; async:
                        // 1 once the caller asked for a batch
  int64_t filled = 0;   // async: slots filled so far
  int64_t lent = -1;    // async: the slot the caller holds
  int64_t claimed = 0;  // async: the frames of the batches begun

  ThreadWorkers(bool is_sync, const std::vector<EnvFactory>& env_fns,
                const Policy& policy, c10::optional<TensorDictModule> m,
                const CollectorOptions& o)
      : MultiWorkers(is_sync, env_fns.size(), o, std::move(m)) {
    const CollectorOptions each = worker_options(true);
    const auto pool = std::make_shared<std::atomic<int64_t>>(0);
    for (const EnvFactory& fn : env_fns) {
      auto c = module.has_value()
                   ? std::make_unique<Collector>(fn, *module, each)
                   : std::make_unique<Collector>(fn, policy, each);
      // One counter of trajectory ids for every worker.
      impl(*c).traj_pool = pool;
      collectors.push_back(std::move(c));
    }
    if (sync && options.replay_buffer() == nullptr) {
      // The batches are stacked: one shape for every worker's.
      std::vector<std::vector<int64_t>> shapes;
      for (const auto& c : collectors) {
        shapes.push_back(c->env().batch_size().vec());
        shapes.back().push_back(c->steps_per_batch());
      }
      check_one_shape(shapes);
    }
    // The ids again, now from the shared counter, in worker order.
    for (auto& c : collectors) impl(*c).fresh_traj_ids();
    slots.resize(collectors.size());
  }

  // Starts the threads; each holds `self`.
  static void start(const std::shared_ptr<ThreadWorkers>& self) {
    for (size_t w = 0; w < self->collectors.size(); ++w) {
      impl(*self->collectors[w]).before_step = [raw = self.get()] {
        raw->step_check();
      };
      try {
        self->threads.emplace_back(
            [self, w] { self->run(static_cast<int64_t>(w)); });
      } catch (...) {
        self->stop();  // the threads started leave
        throw;
      }
    }
  }

  // Before each step of a worker: leave when stopping, wait while paused.
  void step_check() {
    if (stopping.load(std::memory_order_acquire)) throw Stopped();
    if (!pause.load(std::memory_order_acquire)) return;
    std::unique_lock<std::mutex> lock(mu);
    --running;
    to_caller.notify_all();
    to_workers.wait(lock, [&] { return !pause.load() || stopping.load(); });
    ++running;
    if (stopping.load()) throw Stopped();
  }

  // One batch of worker `w` into its slot's error, or its batch.
  // Returns false when stopping.
  bool collect(int64_t w, TensorDict& batch, std::string& error) {
    {
      std::unique_lock<std::mutex> lock(mu);
      to_workers.wait(lock, [&] { return !pause.load() || stopping.load(); });
      if (stopping.load()) return false;
      ++running;
    }
    bool stopped = false;
    try {
      batch = collectors[w]->next();
    } catch (const Stopped&) {
      stopped = true;
    } catch (...) {
      error = current_message();
      if (error.empty()) error = "(no message)";
    }
    std::lock_guard<std::mutex> lock(mu);
    --running;
    to_caller.notify_all();
    return !stopped;
  }

  void run(int64_t w) {
    // LibTorch's intra-op settings (at::set_num_threads) for this thread,
    // as its own pools' threads take them.
    at::init_num_threads();
    const int64_t frames_each =
        collectors[w]->steps_per_batch() *
        c10::multiply_integers(collectors[w]->env().batch_size());
    int64_t done_round = 0;  // sync: this worker's last round
    for (;;) {
      // Sync: a round for this worker; async: the first call. A worker
      // yields a while before it sleeps: the caller usually asks for the
      // next round within a few microseconds, and a sleeping thread takes
      // tens of them to wake.
      auto asked = [&] {
        const int64_t r = round.load();
        return stopping.load() || (sync ? done_round < r : r > 0);
      };
      for (int i = 0; i < 256 && !asked(); ++i) std::this_thread::yield();
      {
        std::unique_lock<std::mutex> lock(mu);
        to_workers.wait(lock, asked);
        if (stopping.load()) break;
        if (!sync && options.total_frames() >= 0) {
          // Async: a batch only within total_frames (counted as claimed),
          // so that a buffer gets no more.
          if (claimed >= options.total_frames()) {
            to_workers.wait(lock, [&] { return stopping.load(); });
            break;
          }
          claimed += frames_each;
        }
      }
      TensorDict batch;
      std::string error;
      if (!collect(w, batch, error)) break;
      std::unique_lock<std::mutex> lock(mu);
      Slot& slot = slots[w];
      if (sync) {
        slot.batch = batch;
        slot.error = error;
        slot.frames = frames_each;
        slot.done_round = round.load();
        done_round = slot.done_round;
        to_caller.notify_all();
        if (!error.empty()) break;
        continue;
      }
      to_workers.wait(lock, [&] {
        return stopping.load() || slot.state == SlotState::kFree;
      });
      if (stopping.load()) break;
      if (error.empty() && !batch.empty()) {
        if (slot.batch.empty()) {
          slot.batch = batch.clone();
        } else {
          (void)slot.batch.update_(batch);
        }
      }
      slot.error = error;
      slot.frames = frames_each;
      slot.state = SlotState::kFull;
      slot.order = filled++;
      to_caller.notify_all();
      if (!error.empty()) break;
    }
    std::lock_guard<std::mutex> lock(mu);
    slots[w].exited = true;
    to_caller.notify_all();
  }

  TensorDict next_sync() {
    std::vector<TensorDict> batches;
    {
      std::unique_lock<std::mutex> lock(mu);
      ++round;
      to_workers.notify_all();
      const auto deadline =
          std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              seconds(options.timeout()));
      for (;;) {
        int64_t late = -1;
        for (size_t w = 0; w < slots.size(); ++w) {
          if (slots[w].done_round == round && !slots[w].error.empty()) {
            fail(static_cast<int64_t>(w), slots[w].error);
          }
          if (late < 0 && slots[w].done_round < round) {
            late = static_cast<int64_t>(w);
          }
        }
        if (late < 0) break;
        if (to_caller.wait_until(lock, deadline) == std::cv_status::timeout &&
            slots[late].done_round < round) {
          failure = c10::str(name, ": worker ", late,
                             " did not finish its batch within ",
                             options.timeout(), " s");
          TORCH_CHECK(false, failure);
        }
      }
      for (Slot& slot : slots) {
        frames += slot.frames;
        batches.push_back(slot.batch);
      }
    }
    if (options.replay_buffer() != nullptr) return TensorDict();
    return finish_batch(options, stack_batches(batches));
  }

  TensorDict next_async() {
    std::unique_lock<std::mutex> lock(mu);
    if (round == 0) {  // the workers start
      round = 1;
      to_workers.notify_all();
    }
    if (lent >= 0) {
      slots[lent].state = SlotState::kFree;
      lent = -1;
      to_workers.notify_all();
    }
    auto full = [&] {
      int64_t best = -1;
      for (size_t w = 0; w < slots.size(); ++w) {
        if (slots[w].state == SlotState::kFull &&
            (best < 0 || slots[w].order < slots[best].order)) {
          best = static_cast<int64_t>(w);
        }
      }
      return best;
    };
    const bool ready = to_caller.wait_for(lock, seconds(options.timeout()),
                                          [&] { return full() >= 0; });
    if (!ready) {
      failure = c10::str(name, ": no worker finished a batch within ",
                         options.timeout(), " s");
      TORCH_CHECK(false, failure);
    }
    const int64_t w = full();
    if (!slots[w].error.empty()) fail(w, slots[w].error);
    slots[w].state = SlotState::kLent;
    lent = w;
    last_worker = w;
    frames += slots[w].frames;
    const TensorDict batch = slots[w].batch;
    lock.unlock();
    if (options.replay_buffer() != nullptr) return TensorDict();
    return finish_batch(options, batch);
  }

  TensorDict next() override { return sync ? next_sync() : next_async(); }

  void update_weights(const TensorDict& params) override {
    check_weights();
    std::unique_lock<std::mutex> lock(mu);
    pause.store(true);
    const bool paused = to_caller.wait_for(lock, seconds(options.timeout()),
                                           [&] { return running == 0; });
    if (paused) {
      try {
        const at::NoGradGuard no_grad;
        (void)from_module(*module).update_(params);
      } catch (...) {
        pause.store(false);
        to_workers.notify_all();
        throw;
      }
    }
    pause.store(false);
    to_workers.notify_all();
    TORCH_CHECK(paused, name,
                "::update_policy_weights_: the workers did not pause within ",
                options.timeout(), " s");
  }

  uint64_t set_seed(uint64_t seed) override {
    std::unique_lock<std::mutex> lock(mu);
    TORCH_CHECK(running == 0 && (sync || round == 0), name,
                "::set_seed: seed the workers before the first batch");
    for (auto& c : collectors) seed = c->set_seed(seed);
    return seed;
  }

  void check_idle(const char* fn) override {
    TORCH_CHECK(failure.empty(), failure);
    TORCH_CHECK(!shut, name, "::", fn, ": the collector was shut down");
    std::unique_lock<std::mutex> lock(mu);
    TORCH_CHECK(running == 0 && (sync || round == 0), name, "::", fn,
                kBusyWorkers);
  }
  // The workers wait for the caller (check_idle): their collectors are the
  // caller's to use.
  TensorDict worker_state(int64_t w) override {
    std::unique_lock<std::mutex> lock(mu);
    return collectors[w]->state_dict();
  }
  void load_worker_state(int64_t w, const TensorDict& state) override {
    std::unique_lock<std::mutex> lock(mu);
    collectors[w]->load_state_dict(state);
  }

  // Stops the workers; waits a second for them to leave, joins those that
  // left and detaches the others.
  void stop() override {
    std::vector<bool> left;
    {
      std::unique_lock<std::mutex> lock(mu);
      shut = true;
      stopping.store(true);
      to_workers.notify_all();
      to_caller.wait_for(lock, std::chrono::seconds(1), [&] {
        for (const Slot& slot : slots) {
          if (!slot.exited) return false;
        }
        return true;
      });
      for (const Slot& slot : slots) left.push_back(slot.exited);
    }
    for (size_t w = 0; w < threads.size(); ++w) {
      if (left[w]) {
        threads[w].join();
      } else {
        threads[w].detach();
      }
    }
    threads.clear();
  }
};

}  // namespace

std::shared_ptr<MultiWorkers> make_collector_threads(
    bool sync, const std::vector<EnvFactory>& env_fns, const Policy& policy,
    c10::optional<TensorDictModule> module, const CollectorOptions& options) {
  auto workers = std::make_shared<ThreadWorkers>(sync, env_fns, policy,
                                                 std::move(module), options);
  ThreadWorkers::start(workers);
  return workers;
}

}  // namespace detail

MultiCollector::MultiCollector(bool sync,
                               const std::vector<EnvFactory>& env_fns,
                               const Policy& policy,
                               c10::optional<TensorDictModule> module,
                               const CollectorOptions& options)
    : workers_(options.processes()
                   ? detail::make_collector_processes(
                         sync, env_fns, policy, std::move(module), options)
                   : detail::make_collector_threads(
                         sync, env_fns, policy, std::move(module), options)) {}

MultiCollector::~MultiCollector() { workers_->stop(); }
TensorDict MultiCollector::state_dict() const { return workers_->state_dict(); }
void MultiCollector::load_state_dict(const TensorDict& state) {
  workers_->load_state_dict(state);
}
TensorDict MultiCollector::next() {
  workers_->check_usable();
  TensorDict batch = workers_->next();
  ++workers_->iters;
  return batch;
}
bool MultiCollector::finished() const { return workers_->finished(); }
void MultiCollector::update_policy_weights_(const TensorDict& params) {
  workers_->update_weights(params);
}
uint64_t MultiCollector::set_seed(uint64_t seed) {
  return workers_->set_seed(seed);
}
void MultiCollector::shutdown() { workers_->stop(); }
int64_t MultiCollector::frames() const { return workers_->frames; }
int64_t MultiCollector::num_workers() const { return workers_->num_workers; }
std::vector<int64_t> MultiCollector::worker_pids() const {
  return workers_->worker_pids();
}

MultiSyncCollector::MultiSyncCollector(const std::vector<EnvFactory>& env_fns,
                                       const Policy& policy,
                                       const CollectorOptions& options)
    : MultiCollector(true, env_fns, policy, c10::nullopt, options) {}
MultiSyncCollector::MultiSyncCollector(const std::vector<EnvFactory>& env_fns,
                                       const TensorDictModule& policy,
                                       const CollectorOptions& options)
    : MultiCollector(true, env_fns, nullptr, policy, options) {}

MultiAsyncCollector::MultiAsyncCollector(const std::vector<EnvFactory>& env_fns,
                                         const Policy& policy,
                                         const CollectorOptions& options)
    : MultiCollector(false, env_fns, policy, c10::nullopt, options) {}
MultiAsyncCollector::MultiAsyncCollector(const std::vector<EnvFactory>& env_fns,
                                         const TensorDictModule& policy,
                                         const CollectorOptions& options)
    : MultiCollector(false, env_fns, nullptr, policy, options) {}
int64_t MultiAsyncCollector::last_worker() const {
  return workers_->last_worker;
}

}  // namespace tensordict
