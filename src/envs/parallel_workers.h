// Internal: the workers of a ParallelEnv (tensordict/envs.h), threads
// (parallel_threads.cpp) or forked processes (parallel_processes.cpp),
// behind one interface, and what both run.
//
// A call (reset, step, seed) is published to every worker and the caller
// waits for all of them, with the options' timeout; each worker catches
// what its envs throw, and the caller raises the failure of the lowest env
// once every worker is done, so no worker is ever left running a call
// behind the caller's back (but a stuck one, past the timeout).
#pragma once

#include <c10/util/Exception.h>
#include <semaphore.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/envs.h"

namespace tensordict {

namespace detail {

enum class Command : int {
  kReset = 0,
  kStep = 1,
  kSeed = 2,
  kClose = 3,
  kState = 4,      // each env's state_dict
  kLoadState = 5,  // each env's load_state_dict
};

/// The message of the exception in flight (inside a catch block).
std::string current_message();
/// What a call is, for errors: "step 17", "reset", "set_seed",
/// "state_dict", "load_state_dict".
std::string call_name(Command cmd, int64_t step);
/// "ParallelEnv: env 3 failed at step 17: <message>"; a load_state_dict's:
/// "env 3: <message>" (EnvBase::load_state_dict names the env class).
std::string failure(int64_t env, Command cmd, int64_t step,
                    const std::string& message);
/// The env range [begin, end) of worker `w` of `workers` over `n` envs.
std::pair<int64_t, int64_t> env_range(int64_t w, int64_t workers, int64_t n);
/// Runs `cmd` on `envs` (envs begin, begin + 1, ...) with their row dicts
/// `in` and `out` (`in` holds the call's "_reset" or "_step" mask, whose
/// rows are `per_env` flags each: an env with no row set is skipped).
/// Returns the index of the env that threw, its message in `error`, or -1.
/// `seed` is the first env's seed on the way in and the next one's on the
/// way out. `current`, when given, follows the env being run.
int64_t run_share(Command cmd, std::vector<std::unique_ptr<EnvBase>>& envs,
                  int64_t begin, const std::vector<TensorDict>* in,
                  const std::vector<TensorDict>* out, int64_t per_env,
                  uint64_t& seed, std::string& error,
                  std::atomic<int64_t>* current);

/// Runs kState (each env's `state_dict()` into `states`, under its index:
/// "3") or kLoadState (each env loads `states`' entry of its index) on
/// `envs` (envs begin, begin + 1, ...). Returns the index of the env that
/// threw, its message in `error`, or -1.
int64_t run_state(Command cmd, std::vector<std::unique_ptr<EnvBase>>& envs,
                  int64_t begin, TensorDict& states, std::string& error);

// ---- What forked workers share (parallel_processes.cpp; the multi
// collectors' processes use them too) -------------------------------------

/// A shared mapping of `n` bytes, anonymous or of the file `fd`, unmapped
/// with its owner (in each process). `who` starts the error.
struct SharedMap {
  SharedMap(size_t n, const char* who, int fd = -1);
  ~SharedMap();
  SharedMap(const SharedMap&) = delete;
  SharedMap& operator=(const SharedMap&) = delete;
  void* base;
  size_t bytes;
};

/// A dict's layout once consolidated: the metadata (JSON, io/files.h's
/// consolidated_meta), the bytes, and the device of its storage.
struct Layout {
  nlohmann::ordered_json meta;
  int64_t bytes;
  at::Device device;
};
Layout layout_of(const TensorDict& td);
/// The dict of `meta` (a Layout's) over `bytes` bytes at `data`, which
/// `owner` (may be null) keeps mapped. `fn` and `source` name it in errors.
TensorDict dict_over(const nlohmann::ordered_json& meta, char* data,
                     int64_t bytes, std::shared_ptr<SharedMap> owner,
                     const char* fn, const std::string& source);

/// A memfd shared across a fork, through which a dict crosses whole: the
/// length of its consolidated metadata, the metadata (JSON, io/files.h),
/// then its bytes, 64-aligned. One side writes while the other waits (the
/// callers' semaphores order them).
class DictFile {
 public:
  /// `who` starts the errors.
  explicit DictFile(const char* who);
  ~DictFile();
  DictFile(const DictFile&) = delete;
  DictFile& operator=(const DictFile&) = delete;
  /// Sizes the file for `td` (CPU leaves), writes it, and returns the
  /// dict over the file's memory (which it keeps mapped).
  TensorDict write(const TensorDict& td);
  /// The dict the file holds, over its memory (which it keeps mapped);
  /// `what` names it in errors.
  [[nodiscard]] TensorDict map(const std::string& what) const;

 private:
  const char* who_;
  int fd_;
};

/// Seconds since `t0`.
double seconds_since(std::chrono::steady_clock::time_point t0);
/// Waits for `sem`, polling it for a while before sleeping, so that a
/// worker's next call meets it awake (a wake-up takes tens of microseconds
/// on a virtual machine); yields now and then to the caller. False on an
/// error.
bool spin_wait(sem_t* sem);
/// Waits at most `ms` milliseconds for `sem`; whether it was taken.
bool sem_wait_for(sem_t* sem, int64_t ms);
/// How the child `pid` ended ("signal 9", "exit status 1"), reaping it and
/// negating `pid`; empty while it runs (or was reaped: `pid` <= 0).
std::string death(pid_t& pid);
/// Waits for each child in `pids` (those > 0) to exit, for `grace` seconds
/// in all, then kills the rest; reaps all and negates their pids.
void reap(std::vector<pid_t>& pids, double grace);

}  // namespace detail

struct ParallelEnv::Workers {
  virtual ~Workers() = default;
  /// Runs `cmd`: `td` is the reset dict or the step's input, `next` the
  /// step's output. Throws the first env's failure.
  virtual void run(detail::Command cmd, const TensorDict* td,
                   const TensorDict* next, uint64_t& seed) = 0;
  virtual void close() = 0;
  [[nodiscard]] virtual std::vector<int64_t> pids() const { return {}; }
  /// The envs' states, under their indices ("0", "1", ...).
  [[nodiscard]] virtual TensorDict env_states() = 0;
  /// Each env loads `states`' entry of its index (checked by the caller:
  /// every index, each of the env's state's structure).
  virtual void load_env_states(const TensorDict& states) = 0;
  /// The batch the workers read and write in place (EnvBase's
  /// `shared_tensordict`), for workers that do not write into the
  /// caller's dicts.
  [[nodiscard]] virtual c10::optional<TensorDict> shared(bool /*next*/) const {
    return c10::nullopt;
  }

  int64_t num_envs = 0;
  int64_t steps = 0;   // step calls so far
  std::string broken;  // set once a call left the workers unusable
  void check_usable() const { TORCH_CHECK(broken.empty(), broken); }
};

namespace detail {

std::unique_ptr<ParallelEnv::Workers> make_thread_workers(
    int64_t n, int64_t workers, const EnvFactory& factory,
    const std::vector<int64_t>& row_batch, double timeout);
std::unique_ptr<ParallelEnv::Workers> make_process_workers(
    int64_t n, int64_t workers, const EnvFactory& factory, const EnvBase& meta,
    double timeout);

}  // namespace detail
}  // namespace tensordict
