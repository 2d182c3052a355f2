// tensordict/collectors.h — TorchRL's collectors: one object that runs a
// policy in environments and yields batches of steps, or writes them into a
// replay or rollout buffer.
//
// A `Collector` owns an env (envs.h) and a policy. Each batch is
// `frames_per_batch` frames, `T = ceil(frames_per_batch / numel(env batch))`
// steps of every env, in TorchRL's layout `[*env_batch, T]`: the step's
// input at the root (observations, state, done flags, the policy's
// outputs), its result under "next", and `("collector", "traj_ids")`
// (int64 `[*env_batch, T]`), the id of the trajectory each step belongs to.
// Ids come from one counter: the envs start with 0, 1, ..., numel - 1, and
// each env that is done takes the next id for its next step. Finished envs
// are reset on the way, and a trajectory goes on across batches.
//
// Options (`CollectorOptions`), as TorchRL 0.14's keyword arguments:
// `total_frames` (-1: endless), `max_frames_per_traj` (a `StepCounter` of
// that many steps is added to the env), `init_random_frames` (the first
// batches take random actions from the action spec, until the frames
// collected reach it), `reset_at_each_iter` (every batch starts with a
// reset; the trajectory ids stay, as TorchRL's), `split_trajs` (each batch
// as `split_trajectories` gives it), `postproc` (a function of the batch),
// `exploration_type` (the `InteractionType` the policy runs under, TorchRL's
// default `RANDOM`), the devices, and `replay_buffer`/`rollout_buffer`.
//
// Memory: the batch is the collector's own storage, allocated on the first
// batch and written in place by every later one (TorchRL's
// `return_same_td=True`): a batch stays valid until the next one is
// collected; `clone()` it to keep it. Steady-state collection allocates no
// tensor beyond what the policy allocates (`split_trajs` and `postproc`
// make new dicts). With a `replay_buffer` the batch goes into the buffer,
// whole (`extend`, so its sampler and writer see it as TorchRL's
// `extend_buffer=True`), and the iterator yields an empty dict; with a
// `rollout_buffer` each step is written straight into the buffer (its
// `step(t, ...)`, the only copy), which needs T to be its `num_steps` and
// the env batch `[num_envs]`.
//
// Weights: `update_policy_weights_(params)` copies `params` (the
// `from_module` layout: `from_module(learner_policy)`) into the collector's
// policy, between steps. A policy that is a `TensorDictModule` has
// `parameters()` for an optimizer and `from_module` for its weights.
//
// Errors: an error in the env or the policy propagates from the call that
// collects the batch; that batch reaches no buffer.
//
// Thread safety: a collector is used from one thread (the multi collectors
// run one per worker thread).
//
// Tutorial: docs/tutorials/collectors.md.
//
// Example:
// ```
//   Collector collector(std::make_unique<CartPoleEnv>(std::vector<int64_t>{16}),
//                       policy, CollectorOptions(1024).total_frames(100000));
//   for (const TensorDict& batch : collector) {   // [16, 64]
//     train(batch);
//   }
// ```
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensordict/distributed.h"
#include "tensordict/envs.h"
#include "tensordict/nn.h"
#include "tensordict/probabilistic.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/rollout_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// TorchRL's `split_trajectories(batch, prefix="collector")`: the steps of
/// `batch` (`[*B, T]`, read in row-major order) cut wherever
/// `("collector", "traj_ids")` changes, each run a row of a new
/// `[n_traj, T_max]` dict padded with zeros, with a bool
/// `("collector", "mask")` that marks the real steps. When every run is a
/// whole row of T steps, the batch itself (its tensors, `[1, T]` for a 1-D
/// batch) with an all-true mask. Throws when the key is missing.
[[nodiscard]] TensorDict split_trajectories(const TensorDict& batch);

/// What a collector does (TorchRL 0.14's keyword arguments; see the top of
/// this file).
struct CollectorOptions {
  /// Frames per batch (> 0), rounded up to a multiple of the env's numel.
  explicit CollectorOptions(int64_t frames_per_batch)
      : frames_per_batch_(frames_per_batch) {}
  /// Frames per batch.
  TORCH_ARG(int64_t, frames_per_batch);
  /// Frames in all (-1: endless); the last batch may go past it.
  TORCH_ARG(int64_t, total_frames) = -1;
  /// Steps after which an env's trajectory is truncated and the env reset
  /// (a `StepCounter`); 0: none.
  TORCH_ARG(int64_t, max_frames_per_traj) = 0;
  /// Batches take random actions (from the action spec) while the frames
  /// collected before them are fewer than this.
  TORCH_ARG(int64_t, init_random_frames) = 0;
  /// Reset every env at the start of each batch.
  TORCH_ARG(bool, reset_at_each_iter) = false;
  /// Yield `split_trajectories` of each batch.
  TORCH_ARG(bool, split_trajs) = false;
  /// Applied to each batch (after `split_trajs`), before it is yielded or
  /// written into a replay buffer.
  TORCH_ARG(std::function<TensorDict(const TensorDict&)>, postproc);
  /// The interaction type the policy runs under (an `InteractionTypeGuard`
  /// around each batch).
  TORCH_ARG(InteractionType, exploration_type) = InteractionType::RANDOM;
  /// Where the batch is stored (the env's device by default).
  TORCH_ARG(c10::optional<at::Device>, storing_device) = c10::nullopt;
  /// The env's device: must be the env's own (envs do not move).
  TORCH_ARG(c10::optional<at::Device>, env_device) = c10::nullopt;
  /// Where the policy runs: each step's input is moved there and the
  /// policy's outputs back (the env's device by default).
  TORCH_ARG(c10::optional<at::Device>, policy_device) = c10::nullopt;
  /// Write each batch into this buffer (which must outlive the collector)
  /// instead of yielding it.
  TORCH_ARG(std::add_pointer_t<ReplayBuffer>, replay_buffer) = nullptr;
  /// Write each step into this buffer (which must outlive the collector).
  TORCH_ARG(std::add_pointer_t<RolloutBuffer>, rollout_buffer) = nullptr;
  /// The multi collectors: how long, in seconds, to wait for a worker's
  /// batch (or for the workers to pause for new weights) before raising.
  TORCH_ARG(double, timeout) = 60.0;
  /// The multi collectors: worker processes (forked at construction, each
  /// making its env, for envs that are not thread-safe) instead of threads.
  /// See `MultiCollector`. A `Collector` refuses it.
  TORCH_ARG(bool, processes) = false;
};

namespace detail {
struct MultiWorkers;
}  // namespace detail

/// The batches of a collector `C` (its `next()` until `finished()`), as an
/// input iterator: `for (const TensorDict& batch : collector)`.
template <typename C>
class BatchIterator {
 public:
  /// @cond
  using iterator_category = std::input_iterator_tag;
  using value_type = TensorDict;
  using difference_type = std::ptrdiff_t;
  using pointer = const TensorDict*;
  using reference = const TensorDict&;
  /// @endcond
  /// At the first batch of `collector` (collected here), or the end (null).
  explicit BatchIterator(C* collector) : collector_(collector) { advance(); }
  /// The current batch.
  const TensorDict& operator*() const { return batch_; }
  /// Collects the next batch.
  BatchIterator& operator++() {
    advance();
    return *this;
  }
  /// Whether both are at the end.
  bool operator==(const BatchIterator& other) const {
    return collector_ == other.collector_;
  }
  /// Whether one is not at the end.
  bool operator!=(const BatchIterator& other) const {
    return !(*this == other);
  }

 private:
  void advance() {
    if (collector_ == nullptr || collector_->finished()) {
      collector_ = nullptr;
      batch_ = TensorDict();
      return;
    }
    batch_ = collector_->next();
  }
  C* collector_;
  TensorDict batch_;
};

/// TorchRL 0.14's `Collector` (see the top of this file).
class Collector {
 public:
  /// `env` (or the env `factory` makes) run by `policy` (random actions
  /// from the action spec when it is empty). Resets the env, as TorchRL's
  /// constructor. Throws a ValueError naming a bad option.
  ///@{
  Collector(std::unique_ptr<EnvBase> env, Policy policy,
            const CollectorOptions& options);
  Collector(std::unique_ptr<EnvBase> env, const TensorDictModule& policy,
            const CollectorOptions& options);
  Collector(const EnvFactory& factory, Policy policy,
            const CollectorOptions& options);
  Collector(const EnvFactory& factory, const TensorDictModule& policy,
            const CollectorOptions& options);
  ///@}
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  /// Collects the next batch (an empty dict with a buffer). Throws once
  /// `total_frames` were collected, or after `shutdown`.
  TensorDict next();
  /// Whether `total_frames` were collected (or the collector was shut down).
  [[nodiscard]] bool finished() const;

  /// The batches, one per step of the iteration (`for (const TensorDict&
  /// batch : collector)`), until `total_frames`.
  using Iterator = BatchIterator<Collector>;
  /// Collects the first batch.
  Iterator begin() { return Iterator(this); }
  /// The end of the batches.
  Iterator end() { return Iterator(nullptr); }

  /// Copies `params` (`from_module(policy)`'s layout, or a subset of it)
  /// into the policy's parameters and buffers, in place, checking every
  /// key and shape first. Throws when the policy is not a
  /// `TensorDictModule`.
  void update_policy_weights_(const TensorDict& params);

  /// The policy's parameters and buffers in `from_module`'s layout (its
  /// own tensors); an empty dict when the policy is not a
  /// `TensorDictModule`.
  [[nodiscard]] TensorDict policy_weights() const;

  /// What a collector needs to continue its stream, copied: the frames,
  /// batches and next trajectory id (TorchRL's "frames", "iter",
  /// ("traj_pool", "traj_id"), int64 scalars), the env's state under "env"
  /// (`EnvBase::state_dict`: generators, physics, transforms' statistics)
  /// and the step the envs are at under "carrier" (observations, step
  /// counters, trajectory ids).
  [[nodiscard]] TensorDict state_dict() const;
  /// Restores a `state_dict()`: its next batches are those the saved
  /// collector would have collected. A state with TorchRL's counters only
  /// restores them, and the envs start new trajectories (fresh ids), as
  /// TorchRL's. All or nothing: throws a ValueError naming the key for a
  /// counter missing, an env state or a carrier that does not fit this
  /// collector's, changing nothing.
  void load_state_dict(const TensorDict& state);

  /// Seeds the env (`EnvBase::set_seed`); returns the next seed.
  uint64_t set_seed(uint64_t seed);
  /// Resets every env (new trajectory ids).
  void reset();
  /// Stops: `next` throws from now on. Always returns.
  void shutdown();

  /// The env (with the `StepCounter` of `max_frames_per_traj`).
  [[nodiscard]] EnvBase& env() const;
  /// Frames collected so far.
  [[nodiscard]] int64_t frames() const;
  /// The steps per batch, T.
  [[nodiscard]] int64_t steps_per_batch() const;

 private:
  friend struct detail::MultiWorkers;
  struct Impl;
  Collector(std::unique_ptr<EnvBase> env, Policy policy,
            c10::optional<TensorDictModule> module,
            const CollectorOptions& options);
  std::unique_ptr<Impl> impl_;
};

/// TorchRL's `MultiCollector`: what `MultiSyncCollector` and
/// `MultiAsyncCollector` share. One `Collector` per env factory, each run
/// by a worker thread (or, with `processes`, a worker process), with
/// `ceil(frames_per_batch / num_workers)` frames per worker and batch. The
/// trajectory ids come from one counter shared by the workers. With a
/// `replay_buffer`, each whole batch of a worker goes into it (after
/// `split_trajs` and `postproc`; a worker thread writes it, a worker
/// process's batch is written by `next`), and the iterator yields empty
/// dicts; a worker's batch that fails reaches the buffer not at all.
///
/// Weights: `update_policy_weights_` pauses every worker between two steps,
/// writes the weights, and lets them go on (so a learner trains a policy of
/// its own and pushes its weights, as with TorchRL's worker processes).
/// Worker threads share the policy; worker processes each have a copy of
/// it (made by the fork), which reads the pushed weights from shared
/// memory at its next step.
///
/// Worker processes are forked at construction (before any thread of
/// their own), one per factory, and each makes its env and collector
/// there; the policy is the one given (a copy, by the fork), on the CPU.
/// A worker's batch crosses in shared memory: a sync batch is stacked from
/// it, an async batch is that memory itself, lent until the next call. A
/// worker dies with its parent.
///
/// It never hangs: a worker that throws makes `next` raise at once,
/// "MultiSyncCollector: worker 1 failed: <its message>", and every later
/// call raise the same; a worker process that dies makes it raise within
/// 50 ms, "MultiSyncCollector: worker 1 (pid 1234) died: signal 9"; a
/// worker that takes longer than `timeout` makes `next` raise, naming it;
/// `shutdown()` and the destructor stop the workers at their next step and
/// return within a second or so, leaving a worker thread stuck in an env's
/// code to finish on its own, detached, with what it holds (a stuck
/// process is killed).
class MultiCollector {
 public:
  /// Stops the workers (see above); always returns.
  virtual ~MultiCollector();
  MultiCollector(const MultiCollector&) = delete;
  MultiCollector& operator=(const MultiCollector&) = delete;

  /// The next batch (see the subclasses).
  TensorDict next();
  /// Whether `total_frames` were collected, or the collector stopped.
  [[nodiscard]] bool finished() const;
  /// The batches (`for (const TensorDict& batch : collector)`).
  using Iterator = BatchIterator<MultiCollector>;
  /// Collects the first batch.
  Iterator begin() { return Iterator(this); }
  /// The end of the batches.
  Iterator end() { return Iterator(nullptr); }

  /// Writes `params` into the workers' policy between two steps (see
  /// above and `Collector::update_policy_weights_`).
  void update_policy_weights_(const TensorDict& params);
  /// Seeds worker 0's env with `seed`, worker i + 1's with what worker i's
  /// `set_seed` returned; returns the next seed.
  uint64_t set_seed(uint64_t seed);
  /// Stops the workers: `next` throws from now on. Always returns.
  void shutdown();
  /// Frames collected so far (of the batches yielded).
  [[nodiscard]] int64_t frames() const;
  /// The number of workers.
  [[nodiscard]] int64_t num_workers() const;
  /// The worker processes' ids (empty with threads).
  [[nodiscard]] std::vector<int64_t> worker_pids() const;
  /// TorchRL's layout: each worker's `Collector::state_dict` ("worker0",
  /// "worker1", ...), the frames yielded ("frames") and the batches
  /// ("iter"). Taken between two batches of a `MultiSyncCollector`, before
  /// the first batch of a `MultiAsyncCollector` (whose workers then
  /// collect on their own); a collector that loads it gives the same
  /// batches next (sync) or the same batches per worker (async).
  [[nodiscard]] TensorDict state_dict() const;
  /// Restores `state_dict()`'s result, all or nothing (a worker that
  /// refuses its state leaves every worker as it was), at the same times.
  void load_state_dict(const TensorDict& state);

 protected:
  /// The workers (sync or not) of one collector per factory.
  MultiCollector(bool sync, const std::vector<EnvFactory>& env_fns,
                 const Policy& policy, c10::optional<TensorDictModule> module,
                 const CollectorOptions& options);
  /// The worker threads or processes (collectors/multi_workers.h).
  std::shared_ptr<detail::MultiWorkers> workers_;
};

/// TorchRL's `MultiSyncCollector`: a batch is every worker's, stacked,
/// `[num_workers, *env_batch, T]` (TorchRL's `cat_results="stack"`), in
/// storage of the collector's own, written in place by every batch (as
/// `Collector`'s). The workers' envs must have one batch size. See
/// `MultiCollector`.
class MultiSyncCollector final : public MultiCollector {
 public:
  /// One worker per factory (at least one), each with the env it makes,
  /// run by `policy` (random actions when empty).
  ///@{
  MultiSyncCollector(const std::vector<EnvFactory>& env_fns,
                     const Policy& policy, const CollectorOptions& options);
  MultiSyncCollector(const std::vector<EnvFactory>& env_fns,
                     const TensorDictModule& policy,
                     const CollectorOptions& options);
  ///@}
};

/// TorchRL's `MultiAsyncCollector`: each worker collects batches on its
/// own; `next` yields the batch of whichever worker finished first
/// (`[*env_batch, T]`), from storage of that worker's that it does not
/// write again until the next call. A worker that finished a batch goes on
/// with the next one while the learner trains. See `MultiCollector`.
class MultiAsyncCollector final : public MultiCollector {
 public:
  /// One worker per factory (at least one), each with the env it makes,
  /// run by `policy` (random actions when empty).
  ///@{
  MultiAsyncCollector(const std::vector<EnvFactory>& env_fns,
                      const Policy& policy, const CollectorOptions& options);
  MultiAsyncCollector(const std::vector<EnvFactory>& env_fns,
                      const TensorDictModule& policy,
                      const CollectorOptions& options);
  ///@}
  /// The worker whose batch `next` returned last (-1 before the first).
  [[nodiscard]] int64_t last_worker() const;
};

// ---- A learner in another process ---------------------------------------------
//
// A learner (rank `learner` of a c10d group, `<tensordict/distributed.h>`)
// and actors, each running a `Collector` through `serve_learner`. Every
// round, for each actor:
//   1. the learner sends the command `{"stop": bool [1], "weights": <the
//      learner's weights, from_module's layout>}` (`send`, one message per
//      leaf; without weights, only "stop");
//   2. the actor receives it into its policy's own weights
//      (`Collector::policy_weights()`), in place and all-or-nothing, and
//      returns when "stop" is set;
//   3. the actor collects a batch and sends it: the first with its
//      structure (`init_remote`), then as one consolidated message
//      (`send(..., consolidated=true)`).
// It is Python tensordict's wire protocol, message for message, so either
// side may be Python's (`TensorDict.send`, `from_remote_init`, `recv`).

/// The actor's side: serves `collector`'s batches to the learner at rank
/// `learner` of `pg` until the learner says stop (see above). Throws when a
/// transfer fails (the learner died: Gloo's error, after the group's
/// timeout) or the collector does.
void serve_learner(Collector& collector, const Group& pg, int learner = 0);

/// The learner's side: the batches of the actors at ranks `actors` of `pg`
/// that run `serve_learner`. `next` sends every actor the command with
/// `weights` (the learner's own tensors, read at each call: its training
/// reaches the actors at the next batch), then receives each actor's batch
/// and yields them stacked, `[num_actors, *env_batch, T]` (as
/// `MultiSyncCollector`), in storage of its own written in place by every
/// batch. `total_frames` (-1: endless) ends the iteration. `shutdown()` and
/// the destructor send "stop", so the actors' `serve_learner` returns.
class RemoteCollectors {
 public:
  /// The actors at `actors` (ranks of `pg`, at least one), sent `weights`
  /// (an empty dict for none) with every command.
  RemoteCollectors(const Group& pg, std::vector<int> actors, TensorDict weights,
                   int64_t total_frames = -1);
  /// Tells the actors to stop (once); never throws.
  ~RemoteCollectors();
  RemoteCollectors(const RemoteCollectors&) = delete;
  RemoteCollectors& operator=(const RemoteCollectors&) = delete;

  /// Every actor's next batch, stacked.
  TensorDict next();
  /// Whether `total_frames` were received, or the collectors stopped.
  [[nodiscard]] bool finished() const;
  /// The batches (`for (const TensorDict& batch : collectors)`).
  using Iterator = BatchIterator<RemoteCollectors>;
  /// Receives the first batch.
  Iterator begin() { return Iterator(this); }
  /// The end of the batches.
  Iterator end() { return Iterator(nullptr); }
  /// Tells the actors to stop: `next` throws from now on.
  void shutdown();
  /// Frames received so far.
  [[nodiscard]] int64_t frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensordict
