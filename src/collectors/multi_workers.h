// Internal: the workers of MultiSyncCollector and MultiAsyncCollector
// (tensordict/collectors.h), threads (multi.cpp) or forked processes
// (multi_processes.cpp), behind one interface; what both share: the
// options' checks, the workers' options, the yielded form of a batch and
// the caller's counters and failure.
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectors/collector_impl.h"
#include "tensordict/collectors.h"

namespace tensordict {
namespace detail {

// Thrown by a worker's step check once the collector stops.
struct Stopped {};

// Why a state cannot be taken or loaded now (check_idle).
constexpr const char* kBusyWorkers =
    ": the workers are collecting; a MultiAsyncCollector's state is taken "
    "or loaded before its first batch (a MultiSyncCollector's between "
    "batches)";

struct MultiWorkers {
  MultiWorkers(bool is_sync, size_t workers, const CollectorOptions& o,
               c10::optional<TensorDictModule> m);
  virtual ~MultiWorkers() = default;
  MultiWorkers(const MultiWorkers&) = delete;
  MultiWorkers& operator=(const MultiWorkers&) = delete;

  /// The next batch (after `check_usable`).
  virtual TensorDict next() = 0;
  /// Writes `params` into every worker's policy between two steps.
  virtual void update_weights(const TensorDict& params) = 0;
  virtual uint64_t set_seed(uint64_t seed) = 0;
  /// Stops the workers; returns within about a second.
  virtual void stop() = 0;
  /// The worker processes' ids (none for threads).
  [[nodiscard]] virtual std::vector<int64_t> worker_pids() const { return {}; }
  /// Raises "<name>::<fn>: ..." unless the workers are between batches
  /// (sync) or not started (async), and the failure.
  virtual void check_idle(const char* fn) = 0;
  /// Worker `w`'s `Collector::state_dict` (workers idle).
  virtual TensorDict worker_state(int64_t w) = 0;
  /// Worker `w`'s `Collector::load_state_dict(state)`, all or nothing;
  /// raises its message (workers idle).
  virtual void load_worker_state(int64_t w, const TensorDict& state) = 0;

  /// {"worker0": ..., "frames", "iter"} (TorchRL's layout).
  TensorDict state_dict();
  /// Loads `state_dict()`'s result, all or nothing.
  void load_state_dict(const TensorDict& state);

  /// Raises the failure, the shutdown or the end of `total_frames`.
  void check_usable() const;
  [[nodiscard]] bool finished() const;
  /// Sync: the workers' batches stacked into `stacked` (made by the first
  /// call, written in place by the later ones).
  const TensorDict& stack_batches(const std::vector<TensorDict>& batches);
  /// Raises a ValueError unless every worker's batch shape ([*env_batch,
  /// T]) is the first's (sync batches are stacked).
  void check_one_shape(const std::vector<std::vector<int64_t>>& shapes) const;
  /// "<name>: worker <w> failed: <error>", kept for every later call.
  [[noreturn]] void fail(int64_t w, const std::string& error);
  /// "<name>::update_policy_weights_: the policy is not a
  /// TensorDictModule, ..." unless it is; raises the failure.
  void check_weights() const;
  /// Each worker's options: its share of frames_per_batch, endless; the
  /// caller splits and post-processes unless the worker writes a buffer.
  [[nodiscard]] CollectorOptions worker_options(bool writes_buffer) const;
  /// The state of a collector (the workers drive collectors).
  static Collector::Impl& impl(Collector& c) { return *c.impl_; }

  const bool sync;
  const char* const name;
  const int64_t num_workers;
  const CollectorOptions options;
  const c10::optional<TensorDictModule> module;
  // The caller's side.
  int64_t frames = 0;
  int64_t iters = 0;  // batches yielded
  int64_t last_worker = -1;
  bool shut = false;
  std::string failure;  // set once a worker failed: every call raises it
  TensorDict stacked;   // sync: the stacked batch
};

std::shared_ptr<MultiWorkers> make_collector_threads(
    bool sync, const std::vector<EnvFactory>& env_fns, const Policy& policy,
    c10::optional<TensorDictModule> module, const CollectorOptions& options);
std::shared_ptr<MultiWorkers> make_collector_processes(
    bool sync, const std::vector<EnvFactory>& env_fns, const Policy& policy,
    c10::optional<TensorDictModule> module, const CollectorOptions& options);

}  // namespace detail
}  // namespace tensordict
