// tensordict/transforms.h — TorchRL's transforms: `TransformedEnv` (an env
// seen through a transform), `Compose`, and `StepCounter`, `RewardSum`,
// `ObservationNorm`, `DoubleToFloat`, `InitTracker`, `VecNorm`, `FrameSkip`,
// `CatTensors`, `RenameTransform`, `ExcludeTransform`, `SelectTransform`.
//
// Included by `<tensordict/envs.h>` (the environment layer's header); it
// holds the transforms' half of that API.
//
// Example:
// ```
//   TransformedEnv env(std::make_unique<PendulumEnv>(),
//                      std::make_shared<Compose>(std::vector<TransformPtr>{
//                          std::make_shared<StepCounter>(200),
//                          std::make_shared<RewardSum>()}));
// ```
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/envs.h"
#include "tensordict/nested_key.h"
#include "tensordict/specs.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

class TransformedEnv;

/// The five specs of an env, as a transform sees those of the env below it
/// (`Transform::inner_specs`).
struct EnvSpecs {
  /// What a step observes.
  Composite observation;
  /// What the policy writes.
  Composite action;
  /// The rewards.
  Composite reward;
  /// "done", "terminated" and "truncated".
  Composite done;
  /// The inputs besides the action.
  Composite state;
};

/// TorchRL's `Transform`: what changes the data and the specs of the env it
/// wraps (in a `TransformedEnv`).
///
/// A transform maps the dicts of the env below it ("inner": the base env,
/// or the transforms before it in a `Compose`) to its own ("outer"), and
/// back for the inputs:
///   - its `transform_*_spec` give its specs from the inner ones;
///   - `step(td, inner_next, next)` writes the outer step (`next`, every key
///     of its observation, reward and done specs) from the inner one
///     (`inner_next`) and the outer input `td` (where state such as a step
///     count lives);
///   - `reset(inner, td)` writes the outer reset rows of `td` (its
///     observation, state and done keys; `"_reset"` says which rows, all
///     without one) from the inner reset `inner`;
///   - `inv(td, inner_td)` writes the inner step's inputs (the inner action
///     and state keys) from the outer ones.
/// Every dict exists with all its keys, contiguous and of the specs'
/// dtypes, and belongs to the call; the done flags of `next` (of the reset
/// rows of `td`) are false on entry. The defaults copy the keys that both
/// sides have (the masked rows of a reset): a transform that adds a key
/// calls them, then writes its key.
///
/// A transform belongs to one env: `TransformedEnv` calls `bind` with the
/// specs of the env below it before any spec method, and a transform that
/// already has a parent is refused.
///
/// A new transform overrides a spec method and `step`/`reset`.
class Transform {
 public:
  /// A transform of no env yet.
  Transform() = default;
  virtual ~Transform() = default;
  Transform(const Transform&) = delete;
  Transform& operator=(const Transform&) = delete;

  /// The outer observation spec from the inner one.
  [[nodiscard]] virtual Composite transform_observation_spec(
      Composite spec) const {
    return spec;
  }
  /// The outer reward spec from the inner one.
  [[nodiscard]] virtual Composite transform_reward_spec(Composite spec) const {
    return spec;
  }
  /// The outer done spec from the inner one.
  [[nodiscard]] virtual Composite transform_done_spec(Composite spec) const {
    return spec;
  }
  /// The outer state spec from the inner one.
  [[nodiscard]] virtual Composite transform_state_spec(Composite spec) const {
    return spec;
  }
  /// The outer action spec from the inner one.
  [[nodiscard]] virtual Composite transform_action_spec(Composite spec) const {
    return spec;
  }

  /// TorchRL's `_step`: writes `next` from `inner_next` and `td` (see the
  /// class comment). The default copies every key of `next` that
  /// `inner_next` has.
  virtual void step(const TensorDict& td, const TensorDict& inner_next,
                    const TensorDict& next);
  /// TorchRL's `_reset`: writes the reset rows of `td` from `inner`. The
  /// default copies the reset rows of every key of `td` that `inner` has.
  virtual void reset(const TensorDict& inner, const TensorDict& td);
  /// TorchRL's `inv`: writes the inner step's inputs `inner_td` from `td`.
  /// The default copies every key of `inner_td` that `td` has.
  virtual void inv(const TensorDict& td, const TensorDict& inner_td);
  /// How many steps of the base env one step is (FrameSkip's).
  [[nodiscard]] virtual int64_t frame_skip() const { return 1; }
  /// The transform's own state (TorchRL's `state_dict`): `VecNorm`'s
  /// statistics, a `Compose`'s transforms' under "0", "1", ...; empty by
  /// default. Copies.
  [[nodiscard]] virtual TensorDict state_dict() const { return TensorDict(); }
  /// Restores `state_dict()`'s result; throws, changing nothing, when a key
  /// is missing or a shape differs. Does nothing by default.
  virtual void load_state_dict(const TensorDict& /*state*/) {}
  /// The env this transform is part of (set by TransformedEnv), or null.
  [[nodiscard]] TransformedEnv* parent() const { return parent_; }
  /// The specs of the env below this transform (the base env's, or what
  /// the transforms before it in a `Compose` make of them), as `bind` got
  /// them; empty before the transform joins an env.
  [[nodiscard]] const EnvSpecs& inner_specs() const { return inner_specs_; }

 protected:
  /// Sets the env this transform is part of (null when it leaves it).
  virtual void set_parent(TransformedEnv* parent) { parent_ = parent; }
  /// Called when the transform joins an env, before any spec method, with
  /// the specs of the env below it: the default keeps them
  /// (`inner_specs()`). A transform that resolves default keys or
  /// preallocates from the specs overrides it and calls the base first;
  /// errors about keys are thrown here.
  virtual void bind(const EnvSpecs& inner);
  /// Asks the parent env (if any) to compute its specs again, after a
  /// change of this transform's parameters (`ObservationNorm::init_stats`).
  void refresh_parent_specs() const;

 private:
  /// @cond
  friend class TransformedEnv;
  friend class Compose;
  /// @endcond
  TransformedEnv* parent_ = nullptr;
  EnvSpecs inner_specs_;
};

/// Shared, so that a caller keeps a handle to a transform it configures
/// later (`ObservationNorm::init_stats`, `VecNorm::freeze`).
using TransformPtr = std::shared_ptr<Transform>;

/// TorchRL's `Compose`: transforms applied in order (the first next to the
/// base env). The dicts between two transforms are made once, when the
/// Compose joins an env, from the specs between them; `inv` runs the
/// transforms from the last to the first, as TorchRL's.
class Compose final : public Transform {
 public:
  /// The transforms, in order (none is null).
  explicit Compose(std::vector<TransformPtr> transforms);
  /// The transforms, in order.
  [[nodiscard]] const std::vector<TransformPtr>& transforms() const {
    return transforms_;
  }
  /// Each transform's observation spec, in order.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Each transform's reward spec, in order.
  [[nodiscard]] Composite transform_reward_spec(Composite spec) const override;
  /// Each transform's done spec, in order.
  [[nodiscard]] Composite transform_done_spec(Composite spec) const override;
  /// Each transform's state spec, in order.
  [[nodiscard]] Composite transform_state_spec(Composite spec) const override;
  /// Each transform's action spec, in order (TorchRL's order too).
  [[nodiscard]] Composite transform_action_spec(Composite spec) const override;
  /// Each transform's step, first to last, through the dicts between them;
  /// every transform reads the outer input `td`, as in TorchRL.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Each transform's reset, first to last.
  void reset(const TensorDict& inner, const TensorDict& td) override;
  /// Each transform's state, under its index ("0", "1", ...), for those
  /// that have one.
  [[nodiscard]] TensorDict state_dict() const override;
  /// Each transform's `load_state_dict`, all or nothing.
  void load_state_dict(const TensorDict& state) override;
  /// Each transform's inv, last to first.
  void inv(const TensorDict& td, const TensorDict& inner_td) override;
  /// The product of the transforms' frame skips.
  [[nodiscard]] int64_t frame_skip() const override;

 protected:
  /// Sets the parent of every transform too.
  void set_parent(TransformedEnv* parent) override;
  /// Binds each transform to the specs the ones before it give, and makes
  /// the dicts between them.
  void bind(const EnvSpecs& inner) override;

 private:
  struct Stages;  // the dicts between the transforms, made by bind
  std::vector<TransformPtr> transforms_;
  std::shared_ptr<Stages> stages_;
};

/// TorchRL's `TransformedEnv`: `env` seen through `transform`. Its specs
/// are the transform's, computed in the constructor; a step runs the
/// transform's `inv`, the env's step and the transform's `step`, a reset
/// the env's reset then the transform's `reset`, in dicts of its own made
/// once in the constructor: a rollout of a TransformedEnv allocates nothing
/// per step either (the transforms' own work aside).
///
/// With a frame skip (`FrameSkip`), a step runs the env's step up to
/// `frame_skip()` times with the same action, summing the rewards, and
/// stops after the first of those steps at which any env of the batch is
/// done (TorchRL's FrameSkipTransform steps on past the end of an episode).
/// Each of those steps reads the observations of the one before (TorchRL's
/// gives the same input to each, so a stateless env such as Pendulum
/// repeats one transition).
///
/// The env reads its step's inputs from the outer dict through `inv`. Its
/// observations that no outer dict has (removed or renamed by a transform)
/// are kept from its last reset or step and given back to its next step
/// (TorchRL's base env would not find them); likewise between the
/// transforms of a `Compose`. `set_seed` seeds the env.
class TransformedEnv final : public EnvBase {
 public:
  /// Throws when `transform` is null or already part of an env, or when a
  /// spec method or `bind` does.
  TransformedEnv(std::unique_ptr<EnvBase> env, TransformPtr transform);
  /// The transform leaves the env (its `parent()` becomes null).
  ~TransformedEnv() override;
  /// "TransformedEnv".
  [[nodiscard]] std::string name() const override;
  /// The env below the transform.
  [[nodiscard]] EnvBase& base_env() const { return *env_; }
  /// The transform.
  [[nodiscard]] const TransformPtr& transform() const { return transform_; }

 protected:
  /// The base env's reset into a dict of its own, then the transform's.
  void reset_impl(const TensorDict& td) override;
  /// The transform's inv, the base env's step(s), the transform's step.
  void step_impl(const TensorDict& td, const TensorDict& next) override;
  /// Seeds the base env.
  void set_seed_impl(uint64_t seed) override;
  /// The base env's state, under "env", and the transform's, under
  /// "transform" when it has one.
  void state_dict_impl(TensorDict& out) const override;
  void load_state_dict_impl(const TensorDict& state) override;

 private:
  /// @cond
  friend class Transform;  // refresh_parent_specs
  /// @endcond
  // Sets this env's specs to the transform's of the base env's.
  void update_specs();
  std::unique_ptr<EnvBase> env_;
  TransformPtr transform_;
  int64_t frame_skip_ = 1;
  // The base env's keys.
  std::vector<NestedKey> inner_done_keys_, inner_observation_keys_,
      inner_reward_keys_;
  // The base env's step input (its observation, state and action keys),
  // its step (observation, reward and done keys), its reset (observation,
  // state and done keys), and with a frame skip the rewards' sums.
  TensorDict inner_td_, inner_next_, inner_reset_, reward_sum_;
};

/// TorchRL's `StepCounter`: counts the steps since each env's reset in
/// "step_count" (int64 `[*batch, 1]`, `Bounded(0, 2^63 - 1)`, an
/// observation and a state), and with `max_steps` > 0 sets "truncated"
/// (added to the done spec when the env has none) once the count reaches
/// `max_steps`, and "done" with it. A truncation of the env itself stays
/// (TorchRL: `truncated = step_count >= max_steps | truncated`).
///
/// The step reads the count of the input dict (`td["step_count"]`), as
/// TorchRL's: a step from a dict without one throws.
class StepCounter final : public Transform {
 public:
  /// `max_steps` 0: count without truncating (TorchRL's None); negative
  /// values are refused.
  explicit StepCounter(int64_t max_steps = 0);
  /// The truncation length (0: none).
  [[nodiscard]] int64_t max_steps() const { return max_steps_; }
  /// Adds "step_count".
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Adds "truncated" (with `max_steps`).
  [[nodiscard]] Composite transform_done_spec(Composite spec) const override;
  /// Adds "step_count".
  [[nodiscard]] Composite transform_state_spec(Composite spec) const override;
  /// `step_count + 1`, and the truncation.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// A count of 0 on the reset rows.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 private:
  int64_t max_steps_;
};

/// TorchRL's `RewardSum`: the sum of each reward since the env's reset, in
/// "episode_<reward key>" (an observation and a state, with the reward's
/// spec), 0 on the rows of a reset. `in_keys` defaults to the env's reward
/// keys, `out_keys` to "episode_" and the in key's last part (a nested key
/// keeps its path). A step from a dict without the sum starts from 0, as
/// TorchRL's.
class RewardSum final : public Transform {
 public:
  /// `out_keys` empty or one per in key.
  explicit RewardSum(std::vector<NestedKey> in_keys = {},
                     std::vector<NestedKey> out_keys = {});
  /// The reward keys summed (resolved once the transform joins an env).
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }
  /// The keys of the sums.
  [[nodiscard]] const std::vector<NestedKey>& out_keys() const {
    return out_keys_;
  }
  /// Adds the sums.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Adds the sums.
  [[nodiscard]] Composite transform_state_spec(Composite spec) const override;
  /// `td`'s sums plus the step's rewards.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Sums of 0 on the reset rows.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 protected:
  /// Resolves the default keys; checks that each in key is a reward.
  void bind(const EnvSpecs& inner) override;

 private:
  std::vector<NestedKey> in_keys_, out_keys_;
  bool default_in_ = false, default_out_ = false;
};

/// TorchRL's `ObservationNorm`: an affine map of observations,
/// `obs * scale + loc`, or with `standard_normal` `(obs - loc) / scale`,
/// in place (out keys are the in keys), on every step and reset. A `Bounded`
/// spec of a key gets its bounds mapped.
///
/// Without `loc` and `scale` the transform is uninitialized: `init_stats`
/// sets them from random rollouts of its env; until then its specs are the
/// inner ones and a step or reset throws. TorchRL's `in_keys_inv`,
/// `out_keys` and `keep_dims` are not offered.
class ObservationNorm final : public Transform {
 public:
  /// `loc` and `scale` broadcast to the observations (both given, or both
  /// undefined for an uninitialized transform). `eps` (the bound of
  /// `scale` in `init_stats`) is the machine epsilon of a floating `scale`,
  /// 1e-6 otherwise, as TorchRL's.
  ObservationNorm(at::Tensor loc, at::Tensor scale,
                  std::vector<NestedKey> in_keys, bool standard_normal = false);
  /// Scalars as float32 tensors, `scale` clamped to at least `eps` (1e-6),
  /// as TorchRL's for Python numbers.
  ObservationNorm(double loc, double scale, std::vector<NestedKey> in_keys,
                  bool standard_normal = false);
  /// An uninitialized transform: call `init_stats` once it is part of an
  /// env.
  explicit ObservationNorm(std::vector<NestedKey> in_keys,
                           bool standard_normal = false);

  /// Whether `loc` and `scale` are set.
  [[nodiscard]] bool initialized() const { return loc_.defined(); }
  /// The location (undefined when uninitialized).
  [[nodiscard]] const at::Tensor& loc() const { return loc_; }
  /// The scale (undefined when uninitialized).
  [[nodiscard]] const at::Tensor& scale() const { return scale_; }
  /// `(obs - loc) / scale` rather than `obs * scale + loc`.
  [[nodiscard]] bool standard_normal() const { return standard_normal_; }
  /// The lower bound of `scale`.
  [[nodiscard]] double eps() const { return eps_; }
  /// The keys normalized.
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }

  /// TorchRL's `init_stats`: runs random rollouts of the parent env
  /// (`rollout(num_iter)`, stopping at the first done) until they hold at
  /// least `num_iter` frames, takes the values of `key` (the first in key
  /// by default) that this transform receives from the env below it (the
  /// base env and the transforms before it; each rollout's
  /// `[*batch, T, ...]`), concatenates them along `cat_dim` (`reduce_dim`'s
  /// when it has one dim), and sets `loc` and `scale` to their mean and
  /// standard deviation over `reduce_dim` (`scale = 1 / std`, `loc = -mean *
  /// scale` without `standard_normal`); `scale` is at least `eps()`.
  /// Updates the env's specs. Throws when already initialized, without a
  /// parent, or when an ObservationNorm before this one is uninitialized.
  void init_stats(int64_t num_iter, std::vector<int64_t> reduce_dim = {0},
                  c10::optional<int64_t> cat_dim = c10::nullopt,
                  const c10::optional<NestedKey>& key = c10::nullopt);

  /// Maps the bounds of `Bounded` in keys (when initialized).
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Normalizes the in keys.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Normalizes the in keys on the reset rows.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 protected:
  /// Checks that each in key is an observation; makes the reset buffers.
  void bind(const EnvSpecs& inner) override;

 private:
  void apply(const at::Tensor& out, const at::Tensor& obs) const;
  void check_initialized() const;
  void record(const NestedKey& key, const TensorDict& src);
  at::Tensor loc_, scale_;
  // Set while an ObservationNorm before this one runs init_stats: values
  // pass through unchanged (TorchRL's rollout would not run this one).
  bool bypass_ = false;
  std::vector<NestedKey> in_keys_;
  bool standard_normal_;
  double eps_;
  TensorDict scratch_;  // the reset rows before their masked copy
  // init_stats: the key recorded and the values seen so far.
  c10::optional<NestedKey> recording_;
  std::vector<at::Tensor> records_;
};

/// TorchRL's `DoubleToFloat`: float64 entries seen as float32. `in_keys`
/// (observations and rewards) default to every float64 entry of the
/// observation and reward specs, `in_keys_inv` (actions and states, cast
/// back to float64 for the env) to every float64 entry of the action and
/// state specs; given `in_keys` alone, `in_keys_inv` is empty, as in
/// TorchRL. Spec keys must be float64 (TypeError otherwise); an in key that
/// no spec has is ignored, an inv key that no action or state spec has is a
/// KeyError.
class DoubleToFloat final : public Transform {
 public:
  /// The keys to cast (see the class comment).
  explicit DoubleToFloat(
      c10::optional<std::vector<NestedKey>> in_keys = c10::nullopt,
      c10::optional<std::vector<NestedKey>> in_keys_inv = c10::nullopt);
  /// The observation and reward keys cast (resolved once bound).
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }
  /// The action and state keys cast back (resolved once bound).
  [[nodiscard]] const std::vector<NestedKey>& in_keys_inv() const {
    return in_keys_inv_;
  }
  /// float32 in keys.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// float32 in keys.
  [[nodiscard]] Composite transform_reward_spec(Composite spec) const override;
  /// float32 inv keys.
  [[nodiscard]] Composite transform_state_spec(Composite spec) const override;
  /// float32 inv keys.
  [[nodiscard]] Composite transform_action_spec(Composite spec) const override;

 protected:
  /// Resolves the keys and checks their dtypes.
  void bind(const EnvSpecs& inner) override;

 private:
  c10::optional<std::vector<NestedKey>> given_in_, given_inv_;
  std::vector<NestedKey> in_keys_, in_keys_inv_;
};

/// TorchRL's `InitTracker`: "is_init" (bool `[*batch, 1]`, an observation),
/// true on the rows of a reset and false after a step.
class InitTracker final : public Transform {
 public:
  /// The key of the flag.
  explicit InitTracker(std::string init_key = "is_init");
  /// Adds the flag.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// The flag false.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// The flag true on the reset rows.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 private:
  std::string init_key_;
};

/// TorchRL 0.14's (legacy) `VecNorm`: running normalization of observations
/// and rewards, in place. For each in key it keeps a decayed sum, sum of
/// squares and count of the values seen; each step (and reset, for
/// observations) first updates them with the batch (`sum = sum * decay +
/// values summed over the batch`, likewise the squares, `count = count *
/// decay + rows`), then writes `(value - mean) / max(std, eps)` with
/// `mean = sum / count` and `std = sqrt(max(ssq / count - mean^2, eps))`.
/// `freeze()` stops the updates (evaluation). `Bounded` observation specs
/// become `Unbounded`.
///
/// In keys that no observation or reward spec has are ignored (TorchRL
/// skips keys missing from the data). The statistics are made, as zeros,
/// when the transform joins an env (TorchRL makes them on the first data).
/// A partial reset updates them with the reset rows only (TorchRL's with
/// every row of the base env's reset output).
class VecNorm final : public Transform {
 public:
  /// `decay` and `eps` as TorchRL's defaults.
  explicit VecNorm(std::vector<NestedKey> in_keys = {"observation", "reward"},
                   double decay = 0.9999, double eps = 1e-4);
  /// Stops the updates of the statistics.
  void freeze() { frozen_ = true; }
  /// Updates them again.
  void unfreeze() { frozen_ = false; }
  /// Whether the statistics are frozen.
  [[nodiscard]] bool frozen() const { return frozen_; }
  /// The keys normalized (as given).
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }
  /// The statistics, copied: for each key normalized, `<key>_sum`,
  /// `<key>_ssq` (the key's dtype and shape without the batch dims) and
  /// `<key>_count` (float32 `[1]`), TorchRL's names (a nested key's last
  /// part gets the suffix). Empty before the transform joins an env.
  [[nodiscard]] TensorDict state_dict() const override;
  /// Copies `state` (as `state_dict()` gives) into the statistics; throws,
  /// changing nothing, when a key is missing or a shape differs.
  void load_state_dict(const TensorDict& state) override;
  /// The mean of each key normalized (TorchRL's `loc`).
  [[nodiscard]] TensorDict loc() const;
  /// The standard deviation of each key normalized (TorchRL's `scale`).
  [[nodiscard]] TensorDict scale() const;
  /// `Bounded` in keys become `Unbounded`.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Updates and normalizes the in keys.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Updates with and normalizes the reset rows of the observations.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 protected:
  /// Makes the statistics.
  void bind(const EnvSpecs& inner) override;

 private:
  // (Hidden from the API reference, which would list it as a class.)
  /// @cond
  struct Stats {
    NestedKey key;
    at::Tensor sum, ssq, count;
  };
  /// @endcond
  void update(Stats& stats, const at::Tensor& rows, int64_t n);
  [[nodiscard]] at::Tensor normalized(const Stats& stats,
                                      const at::Tensor& value) const;
  [[nodiscard]] std::vector<NestedKey> stat_keys() const;
  std::vector<NestedKey> in_keys_;
  double decay_, eps_;
  bool frozen_ = false;
  std::vector<Stats> stats_;
  size_t batch_dims_ = 0;
};

/// TorchRL's `FrameSkipTransform`: each step repeats the action `n` times
/// on the base env, summing the rewards (see `TransformedEnv` for when it
/// stops early).
class FrameSkip final : public Transform {
 public:
  /// `n` >= 1.
  explicit FrameSkip(int64_t n = 1);
  /// `n`.
  [[nodiscard]] int64_t frame_skip() const override { return n_; }

 private:
  int64_t n_;
};

/// TorchRL's `CatTensors`: the observations `in_keys` concatenated along
/// `dim` into `out_key` (`Unbounded`, the first key's dtype), the in keys
/// removed with `del_keys`. The keys are sorted (by name, nested keys
/// joined) unless `sort` is false; empty `in_keys` take every observation
/// with one dim besides the batch dims (TorchRL: with one dim, which for a
/// batched env are none), with `dim` -1 only. The values are written with
/// `at::cat_out` into the step's dict, allocating nothing.
class CatTensors final : public Transform {
 public:
  /// The keys, the result's key and the dim (of the whole tensors, batch
  /// dims included, as TorchRL's).
  explicit CatTensors(std::vector<NestedKey> in_keys = {},
                      NestedKey out_key = "observation_vector",
                      int64_t dim = -1, bool del_keys = true, bool sort = true);
  /// The keys concatenated, in order (resolved once bound).
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }
  /// Adds `out_key`, removes the in keys (`del_keys`).
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Concatenates.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Concatenates the reset rows.
  void reset(const TensorDict& inner, const TensorDict& td) override;

 protected:
  /// Resolves the default keys; checks that every key is an observation.
  void bind(const EnvSpecs& inner) override;

 private:
  void cat_into(const at::Tensor& out, const TensorDict& src);
  std::vector<NestedKey> in_keys_;
  NestedKey out_key_;
  int64_t dim_;
  bool del_keys_, sort_;
  std::vector<at::Tensor> values_;  // reused by each call
  at::Tensor scratch_;              // a reset's result before the masked copy
};

/// TorchRL's `RenameTransform`: the observation, reward and done keys
/// `in_keys` seen as `out_keys` (appended at the end of their spec), and
/// the action and state keys `in_keys_inv` seen as `out_keys_inv`
/// (`out_keys_inv` defaults to `in_keys_inv`). With `create_copy`, the old
/// keys stay.
class RenameTransform final : public Transform {
 public:
  /// Throws when the counts differ or an in key is an out key.
  RenameTransform(std::vector<NestedKey> in_keys,
                  std::vector<NestedKey> out_keys,
                  std::vector<NestedKey> in_keys_inv = {},
                  std::vector<NestedKey> out_keys_inv = {},
                  bool create_copy = false);
  /// Renames in the observation spec.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Renames in the reward spec.
  [[nodiscard]] Composite transform_reward_spec(Composite spec) const override;
  /// Renames in the done spec.
  [[nodiscard]] Composite transform_done_spec(Composite spec) const override;
  /// Renames inv keys in the state spec.
  [[nodiscard]] Composite transform_state_spec(Composite spec) const override;
  /// Renames inv keys in the action spec.
  [[nodiscard]] Composite transform_action_spec(Composite spec) const override;
  /// Copies the renamed entries and the others.
  void step(const TensorDict& td, const TensorDict& inner_next,
            const TensorDict& next) override;
  /// Copies the reset rows of the renamed entries and the others.
  void reset(const TensorDict& inner, const TensorDict& td) override;
  /// Copies the renamed inputs back and the others.
  void inv(const TensorDict& td, const TensorDict& inner_td) override;

 private:
  Composite rename(Composite spec, const std::vector<NestedKey>& from,
                   const std::vector<NestedKey>& to) const;
  std::vector<NestedKey> in_keys_, out_keys_, in_keys_inv_, out_keys_inv_;
  bool create_copy_;
};

/// TorchRL's `ExcludeTransform`: the observation, reward or done entries
/// `keys` removed from the outer specs and dicts (each key is looked up in
/// the done, then the reward, then the observation spec; one that none
/// has is a KeyError).
class ExcludeTransform final : public Transform {
 public:
  /// The keys to remove.
  explicit ExcludeTransform(std::vector<NestedKey> keys);
  /// Removes the excluded observations.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Removes the excluded rewards.
  [[nodiscard]] Composite transform_reward_spec(Composite spec) const override;
  /// Removes the excluded done entries.
  [[nodiscard]] Composite transform_done_spec(Composite spec) const override;

 protected:
  /// Checks that every key is an output of the env.
  void bind(const EnvSpecs& inner) override;

 private:
  std::vector<NestedKey> keys_;
};

/// TorchRL's `SelectTransform`: only the observations `keys` stay, with the
/// rewards and done entries (unless `keep_rewards` / `keep_dones` is
/// false, then only those among `keys`). State keys stay.
class SelectTransform final : public Transform {
 public:
  /// The keys to keep.
  explicit SelectTransform(std::vector<NestedKey> keys,
                           bool keep_rewards = true, bool keep_dones = true);
  /// Keeps the selected observations.
  [[nodiscard]] Composite transform_observation_spec(
      Composite spec) const override;
  /// Keeps every reward, or the selected ones.
  [[nodiscard]] Composite transform_reward_spec(Composite spec) const override;
  /// Keeps every done entry, or the selected ones.
  [[nodiscard]] Composite transform_done_spec(Composite spec) const override;

 private:
  Composite keep(Composite spec) const;
  std::vector<NestedKey> keys_;
  bool keep_rewards_, keep_dones_;
};

}  // namespace tensordict
