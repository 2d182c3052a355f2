// The worker processes of MultiSyncCollector and MultiAsyncCollector
// (collectors/multi_workers.h), forked at construction: each makes its
// collector (env and all) and waits for commands on a process-shared
// semaphore, as ParallelEnv's processes (envs/parallel_processes.cpp).
//
// Shared memory:
//   - one anonymous mapping, made before the fork: a `Header` (the
//     trajectory-id counter, the stop and pause flags, the weights'
//     version), a `Slot` per worker (semaphores, command, state, error
//     text) and the policy's weights (`from_module`'s layout, consolidated);
//   - a memfd per worker for its batch, sized by the worker on its first
//     batch: the consolidated metadata (JSON, io/files.h) then the buffer.
//     The worker copies each batch into it; the caller maps it once.
// Sync: the caller posts "collect" to every worker and waits for each.
// Async: the caller posts "start"; each worker collects, waits until its
// slot is free, copies the batch in and marks it full; the caller takes the
// oldest full slot and frees it on its next call.
// Weights: the caller raises `pause` and waits until every worker is
// outside a batch or paused at a step, writes the shared weights, bumps
// the version and lowers `pause`; a worker copies the shared weights into
// its policy at its next step when the version changed.
// The caller waits in slices of 50 ms, checking with waitpid that the
// workers live; a worker dies with its parent (PR_SET_PDEATHSIG).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectors/collector_impl.h"
#include "collectors/multi_workers.h"
#include "core/internal.h"
#include "core/names.h"
#include "envs/parallel_workers.h"
#include "io/files.h"
#include "tensordict/collectors.h"
#include "tensordict/functional.h"

namespace tensordict {
namespace detail {

namespace {

static_assert(std::atomic<int64_t>::is_always_lock_free &&
                  std::atomic<int>::is_always_lock_free,
              "the workers share atomics across processes");

enum class Cmd : int {
  kIds = 1,
  kSeed,
  kCollect,
  kStart,
  kClose,
  kState,      // the collector's state_dict into the worker's state file
  kLoadState,  // load_state_dict from it
};
enum SlotState : int { kFree = 0, kFull = 1, kLent = 2 };
constexpr int kMaxDims = 16;

struct Header {
  std::atomic<int64_t> traj_pool{0};
  std::atomic<int64_t> claimed{0};  // async: the frames of batches begun
  std::atomic<int64_t> filled{0};   // async: batches handed over so far
  std::atomic<int64_t> weights_version{0};
  std::atomic<int> stopping{0};
  std::atomic<int> pause{0};
  sem_t ready;  // async: posted for each full slot
};

struct Slot {
  sem_t go;    // a command
  sem_t done;  // the command's end
  sem_t free;  // async: the slot was freed
  int cmd = 0;
  uint64_t seed = 0;
  std::atomic<int> busy{0};    // inside a batch
  std::atomic<int> paused{0};  // waiting at a step for new weights
  std::atomic<int> state{kFree};
  int64_t order = 0;   // async: when it was filled
  int64_t frames = 0;  // per batch
  int64_t ndim = 0;    // the batch shape, [*env_batch, T]
  int64_t shape[kMaxDims] = {};
  int failed = 0;  // the last command failed: `error`
  char error[4096] = {};
};

size_t aligned(size_t n) { return (n + 63) / 64 * 64; }

void write_error(Slot& slot, const std::string& message) {
  const std::string text = message.empty() ? "(no message)" : message;
  const size_t n = std::min(text.size(), sizeof(slot.error) - 1);
  std::memcpy(slot.error, text.data(), n);
  slot.error[n] = '\0';
  slot.failed = 1;
}

struct ProcessWorkers final : MultiWorkers {
  ProcessWorkers(bool is_sync, const std::vector<EnvFactory>& env_fns,
                 const Policy& policy, c10::optional<TensorDictModule> m,
                 const CollectorOptions& o)
      : MultiWorkers(is_sync, env_fns.size(), o, std::move(m)),
        each(worker_options(false)) {
    for (const auto& device :
         {options.storing_device(), options.policy_device()}) {
      TORCH_CHECK_VALUE(!device.has_value() || device->is_cpu(), name,
                        ": worker processes run on the CPU and share their "
                        "batches in CPU memory, got the device ",
                        device_name(*device));
    }
    for (const EnvFactory& fn : env_fns) {
      TORCH_CHECK_VALUE(static_cast<bool>(fn), name,
                        ": an env factory is empty");
    }
    // The weights' layout, for the shared copy.
    nlohmann::ordered_json weights_meta;
    int64_t weights_bytes = 0;
    TensorDict weights;
    const at::NoGradGuard no_grad;
    if (module.has_value()) {
      weights = from_module(*module);
      for (const NestedKey& key : weights.keys(true, true)) {
        TORCH_CHECK_VALUE(weights.get(key).device().is_cpu(), name,
                          ": worker processes run the policy on the CPU, but "
                          "its weight ",
                          key.str(), " is on ",
                          device_name(weights.get(key).device()));
      }
      Layout layout = layout_of(weights);
      weights_meta = std::move(layout.meta);
      weights_bytes = layout.bytes;
    }
    const size_t slots_at = aligned(sizeof(Header));
    const size_t weights_at =
        slots_at + aligned(sizeof(Slot) * static_cast<size_t>(num_workers));
    map_ = std::make_shared<SharedMap>(
        weights_at + static_cast<size_t>(weights_bytes) + 64, name);
    auto* base = static_cast<char*>(map_->base);
    header_ = new (base) Header();
    slots_ = reinterpret_cast<Slot*>(base + slots_at);
    for (int64_t w = 0; w < num_workers; ++w) {
      Slot* slot = new (slots_ + w) Slot();
      TORCH_CHECK(sem_init(&slot->go, 1, 0) == 0 &&
                      sem_init(&slot->done, 1, 0) == 0 &&
                      sem_init(&slot->free, 1, 0) == 0,
                  name, ": sem_init failed: ", std::strerror(errno));
    }
    TORCH_CHECK(sem_init(&header_->ready, 1, 0) == 0, name,
                ": sem_init failed: ", std::strerror(errno));
    semaphores_ = true;
    if (module.has_value()) {
      shared_weights_ = dict_over(weights_meta, base + weights_at,
                                  weights_bytes, nullptr, name, "the weights");
      (void)shared_weights_.update_(weights);
    }
    views_.resize(num_workers);
    try {
      for (int64_t w = 0; w < num_workers; ++w) {
        files_.push_back(std::make_unique<DictFile>(name));
        states_.push_back(std::make_unique<DictFile>(name));
      }
    } catch (...) {
      stop();
      throw;
    }
    const pid_t parent = getpid();
    for (int64_t w = 0; w < num_workers; ++w) {
      const pid_t pid = fork();
      if (pid < 0) {
        stop();
        TORCH_CHECK(false, name, ": fork failed: ", std::strerror(errno));
      }
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        try {
          child_main(w, env_fns[w], policy);
        } catch (...) {  // NOLINT(bugprone-empty-catch): never unwind here
        }
        _exit(1);
      }
      pids_.push_back(pid);
      died_.emplace_back();
    }
    try {
      // Each worker reports once its collector is made; then the
      // trajectory ids, from the shared counter, in worker order.
      std::vector<std::vector<int64_t>> shapes;
      for (int64_t w = 0; w < num_workers; ++w) {
        wait_done(w, "its construction");
        check_failed(w);
        const Slot& slot = slots_[w];
        shapes.emplace_back(slot.shape, slot.shape + slot.ndim);
      }
      if (sync && options.replay_buffer() == nullptr) check_one_shape(shapes);
      for (int64_t w = 0; w < num_workers; ++w) {
        command(w, Cmd::kIds);
        wait_done(w, "its first trajectory ids");
        check_failed(w);
      }
    } catch (...) {
      stop();
      throw;
    }
  }

  ~ProcessWorkers() override { stop(); }

  // ---- The worker's side --------------------------------------------------

  [[noreturn]] void child_main(int64_t w, const EnvFactory& fn,
                               const Policy& policy) {
    Slot& slot = slots_[w];
    std::unique_ptr<Collector> collector;
    TensorDict own_weights;
    int64_t version = 0;
    try {
      collector = module.has_value()
                      ? std::make_unique<Collector>(fn, *module, each)
                      : std::make_unique<Collector>(fn, policy, each);
      auto& impl = MultiWorkers::impl(*collector);
      // The shared counter (in the mapping, which outlives the collector).
      impl.traj_pool = std::shared_ptr<std::atomic<int64_t>>(
          std::shared_ptr<void>(), &header_->traj_pool);
      if (module.has_value()) own_weights = from_module(*module);
      impl.before_step = [&] { step_check(slot, own_weights, version); };
      std::vector<int64_t> shape = collector->env().batch_size().vec();
      shape.push_back(collector->steps_per_batch());
      TORCH_CHECK(shape.size() <= static_cast<size_t>(kMaxDims),
                  "the batch has ", shape.size(), " dims, more than ",
                  kMaxDims);
      slot.ndim = static_cast<int64_t>(shape.size());
      std::copy(shape.begin(), shape.end(), slot.shape);
      slot.frames = c10::multiply_integers(shape);
    } catch (...) {
      write_error(slot, current_message());
    }
    sem_post(&slot.done);
    if (slot.failed != 0) _exit(0);
    TensorDict view;  // the batch file, once made
    for (;;) {
      if (!spin_wait(&slot.go)) _exit(1);
      if (header_->stopping.load() != 0) break;
      const auto cmd = static_cast<Cmd>(slot.cmd);
      if (cmd == Cmd::kClose) break;
      slot.failed = 0;
      try {
        if (cmd == Cmd::kIds) {
          MultiWorkers::impl(*collector).fresh_traj_ids();
        } else if (cmd == Cmd::kSeed) {
          slot.seed = collector->set_seed(slot.seed);
        } else if (cmd == Cmd::kCollect) {
          if (!collect(slot, w, *collector, view)) break;
        } else if (cmd == Cmd::kStart) {
          run_async(slot, w, *collector, view);
          break;
        } else if (cmd == Cmd::kState) {
          (void)states_[w]->write(collector->state_dict());
        } else if (cmd == Cmd::kLoadState) {
          collector->load_state_dict(states_[w]->map("the state"));
        }
      } catch (...) {
        write_error(slot, current_message());
      }
      sem_post(&slot.done);
    }
    try {
      collector.reset();
    } catch (...) {  // NOLINT(bugprone-empty-catch): leaving anyway
    }
    _exit(0);
  }

  // Before each step of a worker: leave when stopping, wait while paused,
  // take new weights.
  void step_check(Slot& slot, const TensorDict& own_weights,
                  int64_t& version) const {
    if (header_->stopping.load() != 0) throw Stopped();
    if (header_->pause.load() != 0) {
      slot.paused.store(1);
      while (header_->pause.load() != 0 && header_->stopping.load() == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      slot.paused.store(0);
      if (header_->stopping.load() != 0) throw Stopped();
    }
    const int64_t now = header_->weights_version.load();
    if (now != version) {
      const at::NoGradGuard no_grad;
      (void)own_weights.update_(shared_weights_);
      version = now;
    }
  }

  // One batch into the worker's file (its error into the slot). Returns
  // false when stopping.
  bool collect(Slot& slot, int64_t w, Collector& collector, TensorDict& view) {
    slot.busy.store(1);
    bool stopped = false;
    try {
      const TensorDict batch = collector.next();
      write_batch(w, batch, view);
    } catch (const Stopped&) {
      stopped = true;
    } catch (...) {
      write_error(slot, current_message());
    }
    slot.busy.store(0);
    return !stopped;
  }

  // `batch` into the worker's file, made on the first call.
  void write_batch(int64_t w, const TensorDict& batch, TensorDict& view) {
    if (view.empty()) {
      view = files_[w]->write(batch);
      return;
    }
    (void)view.update_(batch);
  }

  // Async: batches until stopping, each handed over in the slot.
  void run_async(Slot& slot, int64_t w, Collector& collector,
                 TensorDict& view) {
    for (;;) {
      if (options.total_frames() >= 0 &&
          header_->claimed.fetch_add(slot.frames) >= options.total_frames()) {
        // A batch only within total_frames, so that a buffer gets no more.
        while (header_->stopping.load() == 0) (void)sem_wait_for(&slot.go, 50);
        return;
      }
      slot.failed = 0;
      slot.busy.store(1);
      TensorDict batch;
      try {
        batch = collector.next();
      } catch (const Stopped&) {
        return;
      } catch (...) {
        write_error(slot, current_message());
      }
      slot.busy.store(0);
      while (slot.state.load() != kFree) {
        if (header_->stopping.load() != 0) return;
        (void)sem_wait_for(&slot.free, 50);
      }
      if (slot.failed == 0) {
        try {
          write_batch(w, batch, view);
        } catch (...) {
          write_error(slot, current_message());
        }
      }
      slot.order = header_->filled.fetch_add(1);
      slot.state.store(kFull);
      sem_post(&header_->ready);
      if (slot.failed != 0) {
        while (header_->stopping.load() == 0) (void)sem_wait_for(&slot.go, 50);
        return;
      }
    }
  }

  // ---- The caller's side --------------------------------------------------

  void command(int64_t w, Cmd cmd) {
    slots_[w].cmd = static_cast<int>(cmd);
    sem_post(&slots_[w].go);
  }

  // Whether worker `w` lives (a dead one is reaped and its death kept).
  bool alive(int64_t w) {
    if (died_[w].empty()) {
      const pid_t pid = pids_[w];
      const std::string cause = death(pids_[w]);
      if (!cause.empty()) {
        died_[w] =
            c10::str(name, ": worker ", w, " (pid ", pid, ") died: ", cause);
      }
    }
    return died_[w].empty();
  }

  // Raises (for good) when worker `w` died.
  void check_alive(int64_t w) {
    if (alive(w)) return;
    failure = died_[w];
    TORCH_CHECK(false, failure);
  }

  // Waits for worker `w`'s command to end, within the timeout.
  void wait_done(int64_t w, const char* what) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!sem_wait_for(&slots_[w].done, 50)) {
      check_alive(w);
      if (seconds_since(t0) > options.timeout()) {
        failure = c10::str(name, ": worker ", w, " did not finish ", what,
                           " within ", options.timeout(), " s");
        TORCH_CHECK(false, failure);
      }
    }
  }

  void check_failed(int64_t w) {
    if (slots_[w].failed != 0) fail(w, slots_[w].error);
  }

  // Worker `w`'s batch file, mapped on first use.
  const TensorDict& view(int64_t w) {
    if (views_[w].empty()) {
      views_[w] = files_[w]->map("worker " + std::to_string(w) + "'s batch");
    }
    return views_[w];
  }

  TensorDict next() override {
    for (int64_t w = 0; w < num_workers; ++w) check_alive(w);
    return sync ? next_sync() : next_async();
  }

  TensorDict next_sync() {
    for (int64_t w = 0; w < num_workers; ++w) command(w, Cmd::kCollect);
    for (int64_t w = 0; w < num_workers; ++w) {
      wait_done(w, "its batch");
      check_failed(w);
    }
    std::vector<TensorDict> batches;
    for (int64_t w = 0; w < num_workers; ++w) {
      frames += slots_[w].frames;
      batches.push_back(view(w));
    }
    if (options.replay_buffer() != nullptr) {
      for (const TensorDict& batch : batches)
        (void)finish_batch(options, batch);
      return TensorDict();
    }
    return finish_batch(options, stack_batches(batches));
  }

  TensorDict next_async() {
    if (!started_) {
      for (int64_t w = 0; w < num_workers; ++w) command(w, Cmd::kStart);
      started_ = true;
    }
    if (lent_ >= 0) {
      slots_[lent_].state.store(kFree);
      sem_post(&slots_[lent_].free);
      lent_ = -1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int64_t best = -1;
      for (int64_t w = 0; w < num_workers; ++w) {
        if (slots_[w].state.load() == kFull &&
            (best < 0 || slots_[w].order < slots_[best].order)) {
          best = w;
        }
      }
      if (best >= 0) {
        Slot& slot = slots_[best];
        check_failed(best);
        slot.state.store(kLent);
        lent_ = best;
        last_worker = best;
        frames += slot.frames;
        return finish_batch(options, view(best));
      }
      if (sem_wait_for(&header_->ready, 50)) continue;
      for (int64_t w = 0; w < num_workers; ++w) check_alive(w);
      if (seconds_since(t0) > options.timeout()) {
        failure = c10::str(name, ": no worker finished a batch within ",
                           options.timeout(), " s");
        TORCH_CHECK(false, failure);
      }
    }
  }

  void update_weights(const TensorDict& params) override {
    check_weights();
    header_->pause.store(1);
    const auto unpause = [&] { header_->pause.store(0); };
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t w = 0; w < num_workers; ++w) {
      while (slots_[w].busy.load() != 0 && slots_[w].paused.load() == 0) {
        if (!alive(w)) break;  // raised by the next call
        if (seconds_since(t0) > options.timeout()) {
          unpause();
          TORCH_CHECK(false, name,
                      "::update_policy_weights_: the workers did not pause "
                      "within ",
                      options.timeout(), " s");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    try {
      const at::NoGradGuard no_grad;
      const TensorDict own = from_module(*module);
      (void)own.update_(params);
      (void)shared_weights_.update_(own);
    } catch (...) {
      unpause();
      throw;
    }
    header_->weights_version.fetch_add(1);
    unpause();
  }

  uint64_t set_seed(uint64_t seed) override {
    TORCH_CHECK(frames == 0 && !started_, name,
                "::set_seed: seed the workers before the first batch");
    for (int64_t w = 0; w < num_workers; ++w) {
      slots_[w].seed = seed;
      command(w, Cmd::kSeed);
      wait_done(w, "set_seed");
      TORCH_CHECK(slots_[w].failed == 0, slots_[w].error);
      seed = slots_[w].seed;
    }
    return seed;
  }

  void check_idle(const char* fn) override {
    TORCH_CHECK(failure.empty(), failure);
    TORCH_CHECK(!shut, name, "::", fn, ": the collector was shut down");
    TORCH_CHECK(!started_, name, "::", fn, kBusyWorkers);
  }
  TensorDict worker_state(int64_t w) override {
    state_command(w, Cmd::kState, "its state_dict");
    return states_[w]->map("worker " + std::to_string(w) + "'s state").clone();
  }
  void load_worker_state(int64_t w, const TensorDict& state) override {
    (void)states_[w]->write(state);
    state_command(w, Cmd::kLoadState, "its load_state_dict");
  }
  // Runs `cmd` on idle worker `w`; raises its error (a death or a timeout:
  // the collector's failure).
  void state_command(int64_t w, Cmd cmd, const char* what) {
    check_alive(w);
    command(w, cmd);
    wait_done(w, what);
    TORCH_CHECK(slots_[w].failed == 0, slots_[w].error);
  }

  void stop() override {
    shut = true;
    if (header_ == nullptr) return;
    header_->stopping.store(1);
    for (int64_t w = 0; w < static_cast<int64_t>(pids_.size()); ++w) {
      command(w, Cmd::kClose);
      sem_post(&slots_[w].free);
    }
    reap(pids_, 1.0);
    if (semaphores_) {
      for (int64_t w = 0; w < num_workers; ++w) {
        sem_destroy(&slots_[w].go);
        sem_destroy(&slots_[w].done);
        sem_destroy(&slots_[w].free);
      }
      sem_destroy(&header_->ready);
    }
    files_.clear();
    states_.clear();
    shared_weights_ = TensorDict();
    header_ = nullptr;
    slots_ = nullptr;
  }

  [[nodiscard]] std::vector<int64_t> worker_pids() const override {
    std::vector<int64_t> out;
    for (const pid_t pid : pids_) out.push_back(pid > 0 ? pid : -pid);
    return out;
  }

  const CollectorOptions each;  // the workers' options
  std::shared_ptr<SharedMap> map_;
  Header* header_ = nullptr;
  Slot* slots_ = nullptr;
  bool semaphores_ = false;
  TensorDict shared_weights_;                      // in the mapping
  std::vector<std::unique_ptr<DictFile>> files_;   // each worker's batch
  std::vector<std::unique_ptr<DictFile>> states_;  // and its state
  std::vector<TensorDict> views_;                  // the caller's views of them
  std::vector<pid_t> pids_;
  std::vector<std::string> died_;  // why each worker died; empty: alive
  bool started_ = false;           // async: the workers run
  int64_t lent_ = -1;              // async: the slot the caller holds
};

}  // namespace

std::shared_ptr<MultiWorkers> make_collector_processes(
    bool sync, const std::vector<EnvFactory>& env_fns, const Policy& policy,
    c10::optional<TensorDictModule> module, const CollectorOptions& options) {
  return std::make_shared<ProcessWorkers>(sync, env_fns, policy,
                                          std::move(module), options);
}

}  // namespace detail
}  // namespace tensordict
