// The worker processes of a ParallelEnv (envs/parallel_workers.h): forked
// at construction, each makes its envs and loops on a process-shared
// semaphore. The batch they read and write is one anonymous shared mapping:
// the root (observations, state, done flags, actions and the "_reset" and
// "_step" masks), the next step, and a slot per worker (command, status,
// error text). A call copies the caller's inputs into it and its results
// back once all succeeded, but for the leaves that are the shared ones: a
// rollout steps in the shared batch itself (`shared_tensordict`), so only a
// policy's new action tensors cross. The caller waits on each worker's
// semaphore in slices of 50 ms, checking with waitpid that the worker
// lives; a worker dies with its parent (PR_SET_PDEATHSIG).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "envs/batched.h"
#include "envs/flags.h"
#include "envs/parallel_workers.h"
#include "envs/row_views.h"
#include "io/files.h"

namespace tensordict {
namespace detail {

namespace {

// A worker's slot in the shared mapping.
struct Slot {
  sem_t go;
  sem_t done;
  int cmd;
  int64_t failed;  // the env that threw, or -1
  uint64_t seed;
  char error[4096];
};

// The shared batch: each key of `specs` as a tensor in the mapping.
struct SharedLayout {
  struct Leaf {
    NestedKey key;
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    size_t offset;
  };
  std::vector<Leaf> leaves;
  size_t bytes = 0;
  void add(const NestedKey& key, const std::vector<int64_t>& shape,
           at::ScalarType dtype) {
    bytes = (bytes + 63) / 64 * 64;
    leaves.push_back({key, shape, dtype, bytes});
    bytes += static_cast<size_t>(c10::multiply_integers(shape)) *
             c10::elementSize(dtype);
  }
  void add_specs(std::initializer_list<const Composite*> specs) {
    for (const Composite* spec : specs) {
      for (const NestedKey& key : spec->keys(true, true)) {
        bool seen = false;
        for (const Leaf& leaf : leaves) seen = seen || leaf.key == key;
        if (seen) continue;
        const TensorSpec& leaf = spec->leaf(key);
        add(key, std::vector<int64_t>(leaf.shape().begin(), leaf.shape().end()),
            leaf.dtype());
      }
    }
  }
  [[nodiscard]] TensorDict dict(char* base, c10::IntArrayRef batch) const {
    TensorDict out(batch);
    for (const Leaf& leaf : leaves) {
      out.set(leaf.key, at::from_blob(base + leaf.offset, leaf.shape,
                                      at::TensorOptions().dtype(leaf.dtype)));
    }
    return out;
  }
};

struct ProcessWorkers final : ParallelEnv::Workers {
  ProcessWorkers(int64_t n, int64_t workers, const EnvFactory& factory,
                 const EnvBase& meta, double timeout)
      : timeout_s(timeout) {
    num_envs = n;
    const std::vector<int64_t> row(meta.batch_size().begin(),
                                   meta.batch_size().end());
    per_env = c10::multiply_integers(row);
    const std::vector<int64_t> batch = batched_shape(meta, n);
    batch_ = batch;
    // The batch's specs, as the ParallelEnv's.
    const c10::IntArrayRef shape(batch);
    const Composite obs = meta.observation_spec().expand(shape);
    const Composite state = meta.state_spec().expand(shape);
    const Composite action = meta.action_spec().expand(shape);
    const Composite reward = meta.reward_spec().expand(shape);
    const Composite done = meta.done_spec().expand(shape);
    std::vector<int64_t> flags = batch;
    root_.add_specs({&obs, &state, &done, &action});
    root_.add("_step", batch, at::kBool);
    flags.push_back(1);
    root_.add("_reset", flags, at::kBool);
    next_.add_specs({&obs, &reward, &done});
    // What each call reads from the caller and gives back.
    step_in_ = action.keys(true, true);
    for (const NestedKey& key : state.keys(true, true)) {
      step_in_.push_back(key);
    }
    step_in_.emplace_back("_step");
    for (const Composite* spec : {&obs, &state, &done}) {
      for (const NestedKey& key : spec->keys(true, true)) {
        if (std::find(reset_io_.begin(), reset_io_.end(), key) ==
            reset_io_.end()) {
          reset_io_.push_back(key);
        }
      }
    }
    const size_t slots =
        (static_cast<size_t>(workers) * sizeof(Slot) + 63) / 64 * 64;
    map_ = std::make_unique<SharedMap>(
        slots + root_.bytes + next_.bytes + size_t{64} * 2, "ParallelEnv");
    auto* base = static_cast<char*>(map_->base);
    slots_ = reinterpret_cast<Slot*>(base);
    char* root_base = base + slots;
    char* next_base = root_base + (root_.bytes + 63) / 64 * 64;
    shm_root = root_.dict(root_base, batch);
    shm_next = next_.dict(next_base, batch);
    for (int64_t w = 0; w < workers; ++w) {
      Slot& slot = slots_[w];
      TORCH_CHECK(
          sem_init(&slot.go, 1, 0) == 0 && sem_init(&slot.done, 1, 0) == 0,
          "ParallelEnv: sem_init failed: ", std::strerror(errno));
    }
    for (int64_t w = 0; w < workers; ++w) {
      files_.push_back(std::make_unique<DictFile>("ParallelEnv"));
    }
    const pid_t parent = getpid();
    for (int64_t w = 0; w < workers; ++w) {
      const auto [begin, end] = env_range(w, workers, n);
      const pid_t pid = fork();
      TORCH_CHECK(pid >= 0, "ParallelEnv: fork failed: ", std::strerror(errno));
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        try {
          child_main(w, begin, end, factory, row);
        } catch (...) {  // NOLINT(bugprone-empty-catch): never unwind here
        }
        _exit(1);
      }
      pids_.push_back(pid);
      ranges_.emplace_back(begin, end);
    }
    // Each worker reports once its envs are made.
    std::string error;
    for (size_t w = 0; w < pids_.size(); ++w) {
      wait_worker(w, "construction");
      if (error.empty() && slots_[w].failed >= 0) {
        error = "ParallelEnv: env " + std::to_string(slots_[w].failed) +
                " could not be made: " + slots_[w].error;
      }
      if (!broken.empty()) break;
    }
    if (error.empty()) error = broken;
    if (!error.empty()) {
      close();
      TORCH_CHECK(false, error);
    }
  }
  ~ProcessWorkers() override { close(); }

  [[noreturn]] void child_main(int64_t w, int64_t begin, int64_t end,
                               const EnvFactory& factory,
                               const std::vector<int64_t>& row) {
    Slot& slot = slots_[w];
    std::vector<std::unique_ptr<EnvBase>> envs;
    slot.failed = -1;
    for (int64_t e = begin; e < end && slot.failed < 0; ++e) {
      try {
        envs.push_back(factory());
        TORCH_CHECK_VALUE(envs.back() != nullptr,
                          "the factory returned no env");
      } catch (...) {
        write_error(slot, e, current_message());
      }
    }
    sem_post(&slot.done);
    if (slot.failed >= 0) _exit(0);
    RowViews in(begin, end, row), out(begin, end, row);
    const std::vector<TensorDict>& in_rows = in.of(shm_root);
    const std::vector<TensorDict>& out_rows = out.of(shm_next);
    for (;;) {
      if (!spin_wait(&slot.go)) _exit(1);
      const auto cmd = static_cast<Command>(slot.cmd);
      if (cmd == Command::kClose) break;
      std::string error;
      if (cmd == Command::kState || cmd == Command::kLoadState) {
        slot.failed = child_state(cmd, envs, begin, *files_[w], error);
        if (slot.failed >= 0) write_error(slot, slot.failed, error);
        sem_post(&slot.done);
        continue;
      }
      uint64_t seed = slot.seed;
      slot.failed = run_share(cmd, envs, begin, &in_rows, &out_rows, per_env,
                              seed, error, nullptr);
      slot.seed = seed;
      if (slot.failed >= 0) write_error(slot, slot.failed, error);
      sem_post(&slot.done);
    }
    envs.clear();
    _exit(0);
  }

  // A worker's kState (its envs' states into its file) or kLoadState
  // (from it): as run_state.
  static int64_t child_state(Command cmd,
                             std::vector<std::unique_ptr<EnvBase>>& envs,
                             int64_t begin, DictFile& file,
                             std::string& error) {
    TensorDict states;
    try {
      if (cmd == Command::kLoadState) states = file.map("the envs' states");
    } catch (...) {
      error = current_message();
      return begin;
    }
    const int64_t failed = run_state(cmd, envs, begin, states, error);
    if (failed >= 0 || cmd == Command::kLoadState) return failed;
    try {
      (void)file.write(states);
    } catch (...) {
      error = current_message();
      return begin;
    }
    return -1;
  }

  static void write_error(Slot& slot, int64_t env, const std::string& message) {
    slot.failed = env;
    const size_t n = std::min(message.size(), sizeof(slot.error) - 1);
    std::memcpy(slot.error, message.data(), n);
    slot.error[n] = '\0';
  }

  // Waits for worker `w`'s done semaphore; on death or timeout sets
  // `broken` (and kills a stuck worker) and returns false.
  bool wait_worker(size_t w, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      if (sem_wait_for(&slots_[w].done, 50)) return true;
      const std::string died = death(pids_[w]);
      if (!died.empty()) {
        broken = "ParallelEnv: worker " + std::to_string(w) + " (pid " +
                 std::to_string(-pids_[w]) + ") died: " + died;
        return false;
      }
      if (seconds_since(t0) > timeout_s) {
        broken = "ParallelEnv: worker " + std::to_string(w) + " (pid " +
                 std::to_string(pids_[w]) + ", envs " +
                 std::to_string(ranges_[w].first) + " to " +
                 std::to_string(ranges_[w].second - 1) + ") did not finish " +
                 what + " within " + c10::str(timeout_s) + " s";
        kill(pids_[w], SIGKILL);
        return false;
      }
    }
  }

  void run(Command cmd, const TensorDict* td, const TensorDict* next,
           uint64_t& seed) override {
    check_usable();
    if (cmd == Command::kReset || cmd == Command::kStep) {
      // The caller's inputs into the shared batch (a missing mask: all).
      for (const NestedKey& key :
           cmd == Command::kReset ? reset_io_ : step_in_) {
        copy_in(shm_root.get(key), *td, key);
      }
      if (cmd == Command::kReset)
        copy_in(shm_root.get("_reset"), *td, "_reset");
    }
    const size_t workers = pids_.size();
    std::vector<bool> started(workers, false);
    for (size_t w = 0; w < workers; ++w) {
      if (cmd == Command::kSeed) break;
      slots_[w].cmd = static_cast<int>(cmd);
      slots_[w].failed = -1;
      sem_post(&slots_[w].go);
      started[w] = true;
    }
    int64_t failed = -1;
    std::string error;
    for (size_t w = 0; w < workers; ++w) {
      if (cmd == Command::kSeed) {
        // Each env's seed is the previous env's result: one worker after
        // the other.
        slots_[w].cmd = static_cast<int>(cmd);
        slots_[w].seed = seed;
        slots_[w].failed = -1;
        sem_post(&slots_[w].go);
      }
      if (!wait_worker(w, call_name(cmd, steps))) {
        // Wait for the others too, so that none runs on.
        for (size_t o = w + 1; o < workers; ++o) {
          if (started[o] && pids_[o] > 0) {
            const std::string keep = broken;
            wait_worker(o, call_name(cmd, steps));
            broken = keep;
          }
        }
        TORCH_CHECK(false, broken);
      }
      if (cmd == Command::kSeed) seed = slots_[w].seed;
      if (slots_[w].failed >= 0 && failed < 0) {
        failed = slots_[w].failed;
        error = slots_[w].error;
      }
      if (cmd == Command::kSeed && failed >= 0) break;
    }
    if (failed >= 0) TORCH_CHECK(false, failure(failed, cmd, steps, error));
    // All succeeded: the results into the caller's dicts.
    if (cmd == Command::kStep) {
      for (const NestedKey& key : next->keys(true, true)) {
        if (shm_next.contains(key)) copy_out(next->get(key), shm_next.get(key));
      }
    } else if (cmd == Command::kReset) {
      for (const NestedKey& key : reset_io_) {
        if (td->contains(key)) copy_out(td->get(key), shm_root.get(key));
      }
    }
  }

  TensorDict env_states() override {
    uint64_t seed = 0;
    run(Command::kState, nullptr, nullptr, seed);
    TensorDict out;
    for (size_t w = 0; w < files_.size(); ++w) {
      const TensorDict states =
          files_[w]->map("worker " + std::to_string(w) + "'s states").clone();
      for (int64_t e = ranges_[w].first; e < ranges_[w].second; ++e) {
        const std::string key = std::to_string(e);
        out.set(key, states.get_tensordict(key));
      }
    }
    return out;
  }

  void load_env_states(const TensorDict& states) override {
    check_usable();
    for (size_t w = 0; w < files_.size(); ++w) {
      TensorDict mine;
      for (int64_t e = ranges_[w].first; e < ranges_[w].second; ++e) {
        const std::string key = std::to_string(e);
        mine.set(key, states.get_tensordict(key));
      }
      (void)files_[w]->write(mine);
    }
    uint64_t seed = 0;
    run(Command::kLoadState, nullptr, nullptr, seed);
  }

  // `dst` (a leaf of the shared batch) = `td[key]`, unless they are the same
  // memory; a mask `td` lacks is all true.
  static void copy_in(const at::Tensor& dst, const TensorDict& td,
                      const NestedKey& key) {
    if (!td.contains(key)) {
      if (key.front() == "_reset" || key.front() == "_step") dst.fill_(true);
      return;
    }
    const at::Tensor src = td.get(key);
    if (src.data_ptr() != dst.data_ptr()) copy_all(dst, src);
  }
  // `dst` (the caller's) = `src` (shared), unless they are the same memory.
  static void copy_out(const at::Tensor& dst, const at::Tensor& src) {
    if (dst.data_ptr() != src.data_ptr()) copy_all(dst, src);
  }

  [[nodiscard]] c10::optional<TensorDict> shared(bool next) const override {
    if (!broken.empty()) return c10::nullopt;
    if (next) return shm_next.copy();
    TensorDict root(batch_);
    for (const NestedKey& key : shm_root.keys(true, true)) {
      if (key.front() != "_reset" && key.front() != "_step") {
        root.set(key, shm_root.get(key));
      }
    }
    return root;
  }

  void close() override {
    if (slots_ == nullptr) return;
    for (size_t w = 0; w < pids_.size(); ++w) {
      if (pids_[w] <= 0) continue;
      slots_[w].cmd = static_cast<int>(Command::kClose);
      sem_post(&slots_[w].go);
    }
    reap(pids_, 1.0);
    for (size_t w = 0; w < pids_.size(); ++w) {
      sem_destroy(&slots_[w].go);
      sem_destroy(&slots_[w].done);
    }
    if (broken.empty()) broken = "ParallelEnv: closed";
    shm_root = TensorDict();
    shm_next = TensorDict();
    slots_ = nullptr;
    map_.reset();
  }

  [[nodiscard]] std::vector<int64_t> pids() const override {
    std::vector<int64_t> out;
    for (const pid_t pid : pids_) out.push_back(pid > 0 ? pid : -pid);
    return out;
  }

  double timeout_s;
  int64_t per_env = 1;
  std::vector<int64_t> batch_;
  SharedLayout root_, next_;
  std::vector<NestedKey> step_in_, reset_io_;  // see the constructor
  std::unique_ptr<SharedMap> map_;
  Slot* slots_ = nullptr;
  TensorDict shm_root, shm_next;
  std::vector<pid_t> pids_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  std::vector<std::unique_ptr<DictFile>> files_;  // each worker's states
};

}  // namespace

SharedMap::SharedMap(size_t n, const char* who, int fd) : bytes(n) {
  base = mmap(nullptr, n, PROT_READ | PROT_WRITE,
              fd < 0 ? MAP_SHARED | MAP_ANONYMOUS : MAP_SHARED, fd, 0);
  TORCH_CHECK(base != MAP_FAILED, who, ": mmap of ", n,
              " shared bytes failed: ", std::strerror(errno));
}

SharedMap::~SharedMap() {
  if (base != MAP_FAILED) munmap(base, bytes);
}

namespace {
size_t aligned(size_t n) { return (n + 63) / 64 * 64; }
}  // namespace

Layout layout_of(const TensorDict& td) {
  const TensorDict c = td.consolidate();
  const TensorDictImpl& impl = TensorDictImpl::of(c);
  return {consolidated_meta(impl, impl.consolidated), impl.consolidated.numel(),
          impl.consolidated.device()};
}

TensorDict dict_over(const nlohmann::ordered_json& meta, char* data,
                     int64_t bytes, std::shared_ptr<SharedMap> owner,
                     const char* fn, const std::string& source) {
  const at::Tensor buffer = at::from_blob(
      data, {bytes}, [owner = std::move(owner)](void* /*unused*/) {},
      at::TensorOptions().dtype(at::kByte));
  return TensorDictImpl::wrap(
      dict_from_consolidated_meta(meta, buffer, fn, source));
}

DictFile::DictFile(const char* who)
    : who_(who), fd_(memfd_create("tensordict", MFD_CLOEXEC)) {
  TORCH_CHECK(fd_ >= 0, who_, ": memfd_create failed: ", std::strerror(errno));
}

DictFile::~DictFile() { close(fd_); }

TensorDict DictFile::write(const TensorDict& td) {
  const Layout layout = layout_of(td);
  TORCH_CHECK(layout.device.is_cpu(), "the dict is on ",
              device_name(layout.device),
              ": worker processes share dicts in CPU memory");
  const std::string meta = layout.meta.dump();
  const size_t head = aligned(sizeof(uint64_t) + meta.size());
  const auto bytes = static_cast<size_t>(layout.bytes);
  TORCH_CHECK(ftruncate(fd_, static_cast<off_t>(head + bytes)) == 0,
              "could not size its shared memory: ", std::strerror(errno));
  auto map = std::make_shared<SharedMap>(head + bytes, who_, fd_);
  auto* base = static_cast<char*>(map->base);
  const uint64_t length = meta.size();
  std::memcpy(base, &length, sizeof(length));
  std::copy(meta.begin(), meta.end(), base + sizeof(length));
  TensorDict view = dict_over(layout.meta, base + head,
                              static_cast<int64_t>(bytes), map, who_, "a dict");
  (void)view.update_(td);
  return view;
}

TensorDict DictFile::map(const std::string& what) const {
  struct stat st {};
  TORCH_CHECK(fstat(fd_, &st) == 0, who_,
              ": fstat failed: ", std::strerror(errno));
  const auto bytes = static_cast<size_t>(st.st_size);
  uint64_t length = 0;
  TORCH_CHECK(bytes >= sizeof(length), who_, ": ", what, " is empty");
  auto map = std::make_shared<SharedMap>(bytes, who_, fd_);
  auto* base = static_cast<char*>(map->base);
  std::memcpy(&length, base, sizeof(length));
  TORCH_CHECK(length <= bytes - sizeof(length), who_, ": ", what,
              "'s metadata is cut");
  const auto meta = nlohmann::ordered_json::parse(
      base + sizeof(length), base + sizeof(length) + length);
  const size_t head = aligned(sizeof(length) + length);
  TORCH_CHECK(head <= bytes, who_, ": ", what, "'s metadata is cut");
  return dict_over(meta, base + head, static_cast<int64_t>(bytes - head), map,
                   who_, what);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

bool spin_wait(sem_t* sem) {
  // How many times to poll before sleeping (some 100 us).
  constexpr int kSpins = 2000;
  bool posted = false;
  for (int i = 0; i < kSpins && !posted; ++i) {
    posted = sem_trywait(sem) == 0;
    if (!posted && i % 16 == 15) sched_yield();
  }
  while (!posted && sem_wait(sem) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

bool sem_wait_for(sem_t* sem, int64_t ms) {
  timespec until{};
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000L * 1000;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec += 1;
    until.tv_nsec -= 1000000000L;
  }
  return sem_timedwait(sem, &until) == 0;
}

std::string death(pid_t& pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, WNOHANG) != pid) return "";
  pid = -pid;  // reaped
  return WIFSIGNALED(status)
             ? "signal " + std::to_string(WTERMSIG(status))
             : "exit status " + std::to_string(WEXITSTATUS(status));
}

void reap(std::vector<pid_t>& pids, double grace) {
  const auto t0 = std::chrono::steady_clock::now();
  for (pid_t& pid : pids) {
    if (pid <= 0) continue;
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno != EINTR)) break;
      if (seconds_since(t0) > grace) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    pid = -pid;
  }
}

std::unique_ptr<ParallelEnv::Workers> make_process_workers(
    int64_t n, int64_t workers, const EnvFactory& factory, const EnvBase& meta,
    double timeout) {
  return std::make_unique<ProcessWorkers>(n, workers, factory, meta, timeout);
}

}  // namespace detail
}  // namespace tensordict
