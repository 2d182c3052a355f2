// tensordict/envs.h — environments on TensorDicts: TorchRL's `EnvBase`
// (`reset`, `step`, `step_mdp`, `step_and_maybe_reset`, `rollout`), its
// spec check, and two library environments, CartPole-v1 and Pendulum.
//
// An environment is a batch of simulators (`batch_size()`, [] for one) with
// TorchRL's five specs (specs.h), each a `Composite` of the env's batch
// shape: `observation_spec` (what a step observes), `action_spec` (what the
// policy writes), `reward_spec`, `done_spec` (`done`, `terminated` and, for
// envs that can be cut short, `truncated`) and `state_spec` (inputs besides
// the action). A subclass sets them in its constructor and writes the
// physics in two hooks, TorchRL's `_reset` and `_step`:
//
//   - `reset_impl(td)`: write the first observation (and state) of the rows
//     to reset into `td`, in place. Its entries for every key of the
//     observation, state and done specs exist, contiguous and of their
//     specs' dtypes and devices, and belong to the call (writing into them
//     changes nothing a caller holds); `td.get("_reset")` (bool
//     `[*batch, 1]`), when present, says which rows, and the others must
//     not change. Done flags are false on entry and must stay false.
//   - `step_impl(td, next)`: read the action (and state) from `td` and write
//     the step's observation, reward and `terminated`/`truncated` flags into
//     `next`, in place, whose entries for every key of the observation,
//     reward and done specs exist as above (done flags false on entry).
//     `td` holds what the caller or the policy put there (an action may be
//     of any dtype or layout). `td.get("_step")` (bool `[*batch]`), when
//     present, says which rows step; the others may be left as they are.
//
// The base class does the rest, as TorchRL: `step` writes the step's data
// under `"next"`, `done` becomes `terminated | truncated` (or stays what the
// env wrote), `step_mdp` moves `"next"`'s observations and flags to the root,
// a partial reset goes through the `"_reset"` mask, and `rollout` runs a
// policy for up to `max_steps` steps and returns a `[*batch, T]` dict.
//
// Allocation: `reset`, `step`, `step_mdp` and `step_and_maybe_reset` return
// new tensors, never writing into the tensors of their input (which a
// caller may keep), as TorchRL. `rollout` works in dicts of its own: it
// allocates its `[T, *batch]` storage once, on its first step, and then no
// step allocates (the policy's own results aside); the result is that
// storage as `[*batch, T]` (a copy into that layout when the env has batch
// dims, as TorchRL's stack).
//
// Errors: a hook's error propagates, naming the env; `check_env_specs`
// names the key, the spec and the value's shape and dtype.
//
// Thread safety: an env is used from one thread at a time.
//
// Transforms (`TransformedEnv`, `Compose`, TorchRL's `StepCounter`,
// `RewardSum`, `ObservationNorm`, `VecNorm`, ...) are declared in
// `tensordict/transforms.h`, which this header includes.
//
// The environment layer's headers (this one, transforms.h and specs.h) are
// not in the umbrella header `<tensordict/tensordict.h>`: include them.
//
// Tutorial: docs/tutorials/environments.md.
//
// Example:
// ```
//   CartPoleEnv env({16});
//   env.set_seed(0);
//   TensorDict data = env.rollout(200);   // random actions, [16, T]
// ```
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/nn.h"
#include "tensordict/specs.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

namespace detail {
struct EnvAccess;
class RolloutLoop;
}  // namespace detail

/// What `EnvBase::rollout` does besides stepping (TorchRL's `rollout`
/// keyword arguments).
struct RolloutOptions {
  /// Reset the env before the first step. Without it, `tensordict` is the
  /// first step's input (as returned by `reset` or `step_mdp`).
  TORCH_ARG(bool, auto_reset) = true;
  /// Stop after the first step at which any env is done (TorchRL's
  /// default, unless `break_when_all_done`).
  TORCH_ARG(c10::optional<bool>, break_when_any_done) = c10::nullopt;
  /// Step each env until it is done and stop when all are: an env that is
  /// done is not stepped again (`"_step"`), and its rows repeat its last
  /// step. Exclusive with `break_when_any_done`.
  TORCH_ARG(bool, break_when_all_done) = false;
  /// The first step's input when `auto_reset` is false.
  TORCH_ARG(c10::optional<TensorDict>, tensordict) = c10::nullopt;
};

/// A policy: reads a dict of the env's batch size and writes the action
/// keys into it (TensorDictModules are accepted as they are).
using Policy = std::function<void(const TensorDict&)>;

/// TorchRL's `EnvBase` (see the top of this file).
class EnvBase {
 public:
  virtual ~EnvBase() = default;
  EnvBase(const EnvBase&) = delete;
  EnvBase& operator=(const EnvBase&) = delete;

  /// The env's batch size: one simulator per element.
  [[nodiscard]] c10::IntArrayRef batch_size() const { return batch_size_; }
  /// The device of the env's tensors.
  [[nodiscard]] at::Device device() const { return device_; }

  // ---- Specs (each a Composite of shape batch_size()) --------------------

  /// TorchRL's five specs (see the top of this file).
  ///@{
  [[nodiscard]] const Composite& observation_spec() const {
    return observation_spec_;
  }
  [[nodiscard]] const Composite& action_spec() const { return action_spec_; }
  [[nodiscard]] const Composite& reward_spec() const { return reward_spec_; }
  [[nodiscard]] const Composite& done_spec() const { return done_spec_; }
  [[nodiscard]] const Composite& state_spec() const { return state_spec_; }
  ///@}
  /// The leaf keys of each spec, in order.
  ///@{
  [[nodiscard]] std::vector<NestedKey> observation_keys() const;
  [[nodiscard]] std::vector<NestedKey> action_keys() const;
  [[nodiscard]] std::vector<NestedKey> reward_keys() const;
  [[nodiscard]] std::vector<NestedKey> done_keys() const;
  [[nodiscard]] std::vector<NestedKey> state_keys() const;
  ///@}

  /// Setters, for a subclass's constructor (and for transforms): each spec
  /// must have the env's batch shape. `set_action_spec` and
  /// `set_reward_spec` take a leaf, stored under "action" and "reward".
  ///@{
  void set_observation_spec(Composite spec);
  void set_action_spec(Composite spec);
  void set_action_spec(const SpecEntry& spec);
  void set_reward_spec(Composite spec);
  void set_reward_spec(const SpecEntry& spec);
  void set_state_spec(Composite spec);
  ///@}
  /// Must hold "done" and "terminated" (a "truncated" is optional), each a
  /// bool spec of shape `[*batch, 1]`.
  void set_done_spec(Composite spec);

  // ---- TorchRL's calls ---------------------------------------------------

  /// A full reset: a new dict with every observation, state and done key
  /// (done flags false).
  [[nodiscard]] TensorDict reset();
  /// Resets the rows of `td`'s `"_reset"` mask (all rows without one) and
  /// returns `td` with the reset rows' observations and state and false
  /// done flags, in new tensors; `"_reset"` is removed.
  TensorDict reset(const TensorDict& td);
  /// Steps with `td`'s action and sets `td["next"]` to the step's data (new
  /// tensors; keys of an existing `"next"` that the step does not write are
  /// kept); returns `td`.
  TensorDict step(const TensorDict& td);
  /// TorchRL's `step_mdp`: a new dict holding `td`'s root entries but
  /// `"next"`, the reward and done keys and `"_reset"`/`"_step"`, with
  /// `td["next"]`'s observation and done entries moved to the root (the
  /// same tensors, not copies).
  [[nodiscard]] TensorDict step_mdp(const TensorDict& td) const;
  /// `step`, then `step_mdp`, then a reset of the envs that are done:
  /// returns the stepped `td` and the next step's input.
  std::pair<TensorDict, TensorDict> step_and_maybe_reset(const TensorDict& td);
  /// Resets the rows of `td` whose done flag is set (a no-op when none is),
  /// as `step_and_maybe_reset`'s last part; returns `td`.
  TensorDict maybe_reset(const TensorDict& td);
  /// `td` (a new dict when undefined) with random actions from the action
  /// spec.
  TensorDict rand_action(const c10::optional<TensorDict>& td = c10::nullopt);
  /// `rand_action` then `step`.
  TensorDict rand_step(const c10::optional<TensorDict>& td = c10::nullopt);
  /// A dict of zeros shaped as one step of the env: observations, state,
  /// actions and done flags at the root, and `"next"` with observations,
  /// rewards and done flags (TorchRL's `fake_tensordict`).
  [[nodiscard]] TensorDict fake_tensordict() const;

  /// Runs `policy` (random actions from the action spec without one) and
  /// steps for up to `max_steps` steps; returns `[*batch, T]` (T <=
  /// max_steps, see `RolloutOptions`). Without `break_when_*`, finished
  /// envs are reset on the way and the run goes on.
  ///@{
  [[nodiscard]] TensorDict rollout(int64_t max_steps,
                                   const RolloutOptions& options = {});
  [[nodiscard]] TensorDict rollout(int64_t max_steps, const Policy& policy,
                                   const RolloutOptions& options = {});
  [[nodiscard]] TensorDict rollout(int64_t max_steps,
                                   const TensorDictModule& policy,
                                   const RolloutOptions& options = {});
  ///@}

  /// Seeds the env (its hook `set_seed_impl`) and returns the seed for the
  /// next env made along with it, as TorchRL's `set_seed`: a given seed
  /// gives the same results.
  uint64_t set_seed(uint64_t seed);

  /// What the env keeps besides the dicts it is given, so that a copy of it
  /// resumes where it is: the generator of its random actions ("rng", its
  /// `get_state()` bytes) and what its class adds (`state_dict_impl`): the
  /// library's envs add their generator ("generator"), `CartPoleEnv` its
  /// physics ("physics", "steps"), `SerialEnv` and `ParallelEnv` their
  /// envs' states ("envs", "0", ...), `TransformedEnv` its env's ("env")
  /// and its transform's (`Transform::state_dict`, "transform", when it
  /// keeps any). A dict of
  /// copies, batch size [].
  [[nodiscard]] TensorDict state_dict() const;
  /// Restores a `state_dict()`, all or nothing: `state` must have exactly
  /// this env's keys, each of its shape (a c10::Error naming the key
  /// otherwise), and a generator's bytes must be a valid state; on any
  /// error the env is as it was.
  void load_state_dict(const TensorDict& state);

  /// A name for errors and reprs (the class's, "CartPoleEnv").
  [[nodiscard]] virtual std::string name() const = 0;

 protected:
  /// Adds what this class keeps to `out` (`state_dict`; nothing by
  /// default).
  virtual void state_dict_impl(TensorDict& out) const;
  /// Restores what `state_dict_impl` added, from `state`, whose keys,
  /// shapes and dtypes are `state_dict`'s (checked); may throw, leaving
  /// the rest to `load_state_dict`, which then restores the state it had.
  virtual void load_state_dict_impl(const TensorDict& state);

  /// An env of `batch_size` on `device`; the default specs are TorchRL's:
  /// empty observations, actions and state, an unbounded float reward of
  /// shape `[*batch, 1]`, and "done" and "terminated" flags.
  explicit EnvBase(std::vector<int64_t> batch_size = {},
                   at::Device device = at::kCPU);

  /// TorchRL's `_reset` (see the top of this file).
  virtual void reset_impl(const TensorDict& td) = 0;
  /// TorchRL's `_step` (see the top of this file).
  virtual void step_impl(const TensorDict& td, const TensorDict& next) = 0;
  /// TorchRL's `_set_seed`.
  virtual void set_seed_impl(uint64_t seed) = 0;
  /// The dicts that an env stepping elsewhere reads and writes in place
  /// (TorchRL's `shared_tensordict_parent`; ParallelEnv's worker
  /// processes): `rollout` steps in them rather than in dicts of its own, so
  /// that nothing is copied between it and the workers. Each call gives a
  /// new dict over the same tensors: for `next` false the observation,
  /// state, done and action keys, for `next` true the step's observation,
  /// reward and done keys. None (the default) for an env that steps in the
  /// caller's dicts.
  [[nodiscard]] virtual c10::optional<TensorDict> shared_tensordict(
      bool next) const;

 private:
  friend struct detail::EnvAccess;   // batched and transformed envs
  friend class detail::RolloutLoop;  // rollout and the collectors
  // The done flags of `next` made whole: done |= terminated | truncated.
  void complete_done(const TensorDict& next) const;
  // Resets the rows of `mask` (all when undefined) of `work`, a dict of the
  // env's that nothing else holds: in place.
  void reset_rows(const TensorDict& work, const at::Tensor& mask);
  // A dict of zeros for the keys of `specs`, batch size batch_size().
  [[nodiscard]] TensorDict zeros_of(
      std::initializer_list<const Composite*> specs) const;
  // A dict of this env's holding copies of `td`'s entries ("next" aside;
  // only the specs' keys with `spec_keys_only`), the observation, state and
  // done entries contiguous and of their specs' dtypes, zeros for those
  // `td` lacks.
  [[nodiscard]] TensorDict own_input(const TensorDict& td, const char* call,
                                     bool spec_keys_only) const;
  [[nodiscard]] TensorDict run_rollout(int64_t max_steps, const Policy* policy,
                                       const RolloutOptions& options);

  std::vector<int64_t> batch_size_;
  at::Device device_;
  Composite observation_spec_, action_spec_, reward_spec_, done_spec_,
      state_spec_;
  // The keys of done_spec_'s flags, in its order, made once.
  std::vector<NestedKey> flag_keys_;
  // The base's own draws (random actions), seeded by set_seed.
  at::Generator generator_;
};

/// TorchRL's `check_env_specs`: runs a short random rollout (`steps` steps,
/// finished envs reset on the way) and checks that every entry matches its
/// spec, and that no entry is missing. Throws, naming the key, the spec and
/// the value's shape and dtype.
void check_env_specs(EnvBase& env, int64_t steps = 3);

// ---- Batched environments -----------------------------------------------------

/// Makes one env of a batched env: called once per env (and once more, for
/// a spec-only env, by `ParallelEnv`). `ParallelEnv`'s threads call it at
/// the same time, each for its envs: it must be thread-safe.
using EnvFactory = std::function<std::unique_ptr<EnvBase>()>;

/// TorchRL's `SerialEnv`: `num_envs` envs from `factory`, stepped one after
/// the other as one env of batch size `[num_envs, *env_batch]`. Every env
/// must have the same specs, which the batched env's are, expanded. Env `i`
/// reads and writes row `i` of the batch's dicts, through views (no copy);
/// on a partial reset or step (`"_reset"`, `"_step"`), only the envs with a
/// row to reset or step are called. `set_seed(s)` seeds env 0 with `s` and
/// env `i + 1` with what env `i`'s `set_seed` returned.
class SerialEnv final : public EnvBase {
 public:
  /// `num_envs` envs from `factory`, with the same specs.
  SerialEnv(int64_t num_envs, const EnvFactory& factory);
  ~SerialEnv() override;
  [[nodiscard]] std::string name() const override { return "SerialEnv"; }
  /// The number of envs.
  [[nodiscard]] int64_t num_envs() const {
    return static_cast<int64_t>(envs_.size());
  }
  /// The `i`-th env.
  [[nodiscard]] EnvBase& env(int64_t i) const;

 protected:
  void reset_impl(const TensorDict& td) override;
  void step_impl(const TensorDict& td, const TensorDict& next) override;
  void set_seed_impl(uint64_t seed) override;
  void state_dict_impl(TensorDict& out) const override;
  void load_state_dict_impl(const TensorDict& state) override;

 private:
  struct Rows;
  explicit SerialEnv(std::vector<std::unique_ptr<EnvBase>> envs);
  std::vector<std::unique_ptr<EnvBase>> envs_;
  std::unique_ptr<Rows> rows_;
};

/// How a `ParallelEnv` runs its envs.
struct ParallelEnvOptions {
  /// Worker processes (forked, for envs that are not thread-safe) instead
  /// of threads.
  TORCH_ARG(bool, processes) = false;
  /// The number of workers, each running a contiguous share of the envs.
  /// 0: one per env with `processes`, else one per hardware thread (at
  /// most one per env), the calling thread being one of them.
  TORCH_ARG(int64_t, num_workers) = 0;
  /// How long, in seconds, a worker may take over one call (a step, a
  /// reset, a seed) before the call raises.
  TORCH_ARG(double, timeout) = 60.0;
};

/// TorchRL's `ParallelEnv`: `num_envs` envs from `factory`, stepped by
/// workers, as one env of batch size `[num_envs, *env_batch]`, with
/// `SerialEnv`'s results for the same seeds.
///
/// Threads write their envs' rows straight into the batch's dicts (no copy,
/// no allocation per step); the caller runs no env itself, it waits. Processes
/// (`processes(true)`, forked at construction, each making its envs with
/// `factory`) read and write the rows in one shared-memory batch, in which a
/// `rollout` steps (`shared_tensordict`): only a policy's new action tensors
/// are copied in. `step` and `reset`, which give new tensors, fill it from
/// the caller's dict and copy the results back (one copy per key, no
/// allocation).
///
/// It never hangs:
///   - an env that throws makes the call raise "ParallelEnv: env 3 failed at
///     step 17: <its message>" once every worker has finished the call; the
///     caller's dicts are unchanged (the base class writes them only once
///     the call succeeded), and the env stays usable;
///   - a worker process that dies (killed, crashed) makes the call that
///     waits for it raise within a second, "ParallelEnv: worker 3 (pid N)
///     died: signal 9", and every later call raise the same;
///   - a worker that takes longer than `timeout` makes the call raise,
///     naming it; a process is then killed, and every later call raises;
///   - the destructor always returns, and leaves no process or thread
///     behind (a thread stuck in an env's code is left to finish on its
///     own, detached, with the envs it holds).
class ParallelEnv final : public EnvBase {
 public:
  /// `num_envs` envs from `factory`, run by workers as `options` says
  /// (`factory` is called once more first, for the specs).
  ParallelEnv(int64_t num_envs, const EnvFactory& factory,
              const ParallelEnvOptions& options = {});
  /// Stops the workers (see above); always returns.
  ~ParallelEnv() override;
  [[nodiscard]] std::string name() const override { return "ParallelEnv"; }
  /// The number of envs.
  [[nodiscard]] int64_t num_envs() const;
  /// The worker processes' ids (empty with threads).
  [[nodiscard]] std::vector<int64_t> worker_pids() const;
  /// Stops the workers now; every later call raises.
  void close();

  /// @cond
  struct Workers;  // the threads or processes (parallel_env.cpp)
                   /// @endcond

 protected:
  void reset_impl(const TensorDict& td) override;
  void step_impl(const TensorDict& td, const TensorDict& next) override;
  void set_seed_impl(uint64_t seed) override;
  /// The envs' states, as `SerialEnv`'s ("envs", "0", ...), asked of the
  /// workers; a worker's failure raises as a call's.
  void state_dict_impl(TensorDict& out) const override;
  void load_state_dict_impl(const TensorDict& state) override;
  /// The worker processes' shared batch (none for threads, which write
  /// into the caller's dicts).
  [[nodiscard]] c10::optional<TensorDict> shared_tensordict(
      bool next) const override;

 private:
  ParallelEnv(std::unique_ptr<EnvBase> meta, int64_t num_envs,
              const EnvFactory& factory, const ParallelEnvOptions& options);
  std::unique_ptr<Workers> workers_;
};

// ---- Library environments ---------------------------------------------------

/// Gymnasium's CartPole-v1, vectorized over `batch_size`: Euler steps of
/// 0.02 s, a force of ±10 N, reward 1 per step, termination when |x| > 2.4
/// or |theta| > 12°, truncation after 500 steps, reset state uniform in
/// [-0.05, 0.05]^4 (drawn with the env's generator). Keys: "observation"
/// (float32 `[*batch, 4]`), "action" (TorchRL's GymEnv encoding: one-hot
/// `[*batch, 2]` bool, or with `categorical_action_encoding` an int64
/// `[*batch]` in {0, 1}), "reward" (float32 `[*batch, 1]`), "done",
/// "terminated", "truncated", and the state "step_count" is internal.
class CartPoleEnv final : public EnvBase {
 public:
  /// `batch_size` cart-poles (one for `{}`), seeded with 0 until
  /// `set_seed`.
  explicit CartPoleEnv(std::vector<int64_t> batch_size = {},
                       bool categorical_action_encoding = false);
  [[nodiscard]] std::string name() const override { return "CartPoleEnv"; }

 protected:
  void reset_impl(const TensorDict& td) override;
  void step_impl(const TensorDict& td, const TensorDict& next) override;
  void set_seed_impl(uint64_t seed) override;
  void state_dict_impl(TensorDict& out) const override;
  void load_state_dict_impl(const TensorDict& state) override;

 private:
  bool categorical_;
  at::Generator generator_;
  std::vector<double> state_;   // [numel, 4]: x, x_dot, theta, theta_dot
  std::vector<int64_t> steps_;  // steps since each env's reset
  at::Tensor draws_;            // [numel, 4] float64, the reset draws
};

/// TorchRL's `PendulumEnv` (`torchrl.envs.PendulumEnv`, Gymnasium's
/// Pendulum-v1 dynamics), stateless as it is: the state "th" and "thdot"
/// (float32 `[*batch]`) and the physical constants "params" (float32
/// `[*batch]` each: "max_speed" 8, "max_torque" 2, "dt" 0.05, "g" 10, "m" 1,
/// "l" 1) are observations that the next step reads back; the action is a
/// torque (float32 `[*batch, 1]` in [-2, 2]) and the reward `[*batch, 1]`.
/// It is never done by itself (TorchRL's has no time limit: add
/// `StepCounter`). Computed in float32 in TorchRL's order, so that the same
/// state and actions give TorchRL's trajectory; a reset draws "th" then
/// "thdot" uniformly (in [-pi, pi) and [-1, 1)) with `torch.rand` on the
/// env's generator, as TorchRL's does.
class PendulumEnv final : public EnvBase {
 public:
  /// `batch_size` pendulums (one for `{}`) under gravity `g` (TorchRL's
  /// `gen_params(g)`), seeded with 0 until `set_seed`.
  explicit PendulumEnv(std::vector<int64_t> batch_size = {}, double g = 10.0);
  [[nodiscard]] std::string name() const override { return "PendulumEnv"; }

 protected:
  void reset_impl(const TensorDict& td) override;
  void step_impl(const TensorDict& td, const TensorDict& next) override;
  void set_seed_impl(uint64_t seed) override;
  void state_dict_impl(TensorDict& out) const override;
  void load_state_dict_impl(const TensorDict& state) override;

 private:
  double g_;
  at::Generator generator_;
  at::Tensor th_draw_, thdot_draw_;  // the reset draws, float32 [*batch]
};

}  // namespace tensordict

// The transforms (TransformedEnv, Compose, StepCounter, ...): part of this
// header's API, in a file of their own.
#include "tensordict/transforms.h"  // IWYU pragma: export
