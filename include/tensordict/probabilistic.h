// tensordict/probabilistic.h — a policy's sampling step as a module: Python
// tensordict.nn's `ProbabilisticTensorDictModule` and
// `ProbabilisticTensorDictSequential`, with its `InteractionType` and
// `set_interaction_type`.
//
// A `ProbabilisticTensorDictModule` reads a distribution's parameters from a
// dict (`in_keys`, e.g. `{"loc", "scale"}`), builds the distribution with a
// factory (`distributions::normal()`, `categorical()`, `tanh_normal(...)`,
// or your own), takes one value from it and sets it under its out-key (e.g.
// `"action"`); with `return_log_prob` it also sets the value's
// log-probability. It is a `TensorDictModule` (the same key handling,
// errors and all-or-nothing write), so it goes into a `TensorDictSequential`
// like any other; `ProbabilisticTensorDictSequential` is that sequence,
// with `get_dist` and `log_prob` for the losses.
//
// Which value is taken is the interaction type: the innermost
// `InteractionTypeGuard` of the calling thread (Python's
// `set_interaction_type`), else the module's default
// (`ProbabilisticOptions::default_interaction_type`):
//   - `DETERMINISTIC` (the default, as in tensordict 0.14; 0.4's was
//     `MODE`): the distribution's `deterministic_sample()`: a Categorical's
//     mode, a Normal's mean, a TanhNormal's transformed location;
//   - `MODE`, `MEAN`: `mode()`, `mean()` (where `mean()` is not
//     implemented, the mean of `n_empirical_estimate` draws, as Python);
//   - `RANDOM`: `rsample()` where the distribution has it (gradients flow),
//     else `sample()`, from the module's generator or LibTorch's default one;
//   - `MEDIAN`: no distribution here has one; it throws.
//
// Keys, as in tensordict 0.14: a parameter's name is its in-key's last
// component unless `dist_keys` names them (Python's dict form of
// `in_keys`); the log-probability goes under `"<out_key>_log_prob"` (for a
// nested out-key, next to it: `("agent", "action_log_prob")`) unless
// `log_prob_key` says otherwise. tensordict 0.4 wrote it under
// `"sample_log_prob"`; set `log_prob_key("sample_log_prob")` for data that
// Python 0.4 code reads.
//
// Example:
// ```
//   using namespace tensordict;
//   TensorDictModule actor(net, {"observation"}, {"logits"});
//   ProbabilisticTensorDictModule sampler(
//       {"logits"}, {"action"}, distributions::categorical(),
//       ProbabilisticOptions().return_log_prob(true));
//   ProbabilisticTensorDictSequential policy({actor}, sampler);
//   {
//     InteractionTypeGuard explore(InteractionType::RANDOM);
//     policy(td);  // td gains "logits", "action", "action_log_prob"
//   }
// ```
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensordict/distributions.h"
#include "tensordict/nested_key.h"
#include "tensordict/nn.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// How a `ProbabilisticTensorDictModule` turns its distribution into a value
/// (Python's `InteractionType`; see the top of this file).
enum class InteractionType { MODE, MEDIAN, MEAN, RANDOM, DETERMINISTIC };

/// Python's name of `type`: "mode", "median", "mean", "random",
/// "deterministic".
std::string to_string(InteractionType type);
/// The type named `name` (case-insensitive, as Python's `from_str`); throws
/// a `c10::ValueError` for another name.
InteractionType interaction_type_from_string(const std::string& name);

/// The calling thread's interaction type, set by the innermost
/// `InteractionTypeGuard`; `nullopt` outside any (Python's
/// `interaction_type()`).
c10::optional<InteractionType> interaction_type();

/// Sets the calling thread's interaction type for its lifetime, then
/// restores the previous one (Python's `with set_interaction_type(type):`;
/// `nullopt` clears it). Per thread, unlike Python's process-wide setting,
/// so that collector threads choose their own.
class InteractionTypeGuard {
 public:
  /// Sets `type` (Python's default argument, `DETERMINISTIC`); throws a
  /// `c10::ValueError`, setting nothing, for a value that is none of
  /// InteractionType's (an integer cast to it).
  explicit InteractionTypeGuard(
      c10::optional<InteractionType> type = InteractionType::DETERMINISTIC);
  ~InteractionTypeGuard();
  /// Not copyable: one guard, one restore.
  InteractionTypeGuard(const InteractionTypeGuard&) = delete;
  /// Not assignable.
  InteractionTypeGuard& operator=(const InteractionTypeGuard&) = delete;

 private:
  c10::optional<InteractionType> previous_;
};

/// The options of a `ProbabilisticTensorDictModule` (Python's keyword
/// arguments): `ProbabilisticOptions().return_log_prob(true)`.
struct ProbabilisticOptions {
  /// The interaction type when no guard is set (one of InteractionType's
  /// values: the module's constructor rejects another).
  TORCH_ARG(InteractionType,
            default_interaction_type) = InteractionType::DETERMINISTIC;
  /// Whether to set the value's log-probability too.
  TORCH_ARG(bool, return_log_prob) = false;
  /// The parameter names of the in-keys, in order; default each in-key's
  /// last component.
  TORCH_ARG(std::vector<std::string>, dist_keys);
  /// The draws `MEAN` averages where the distribution has no mean.
  TORCH_ARG(int64_t, n_empirical_estimate) = 1000;
  /// The generator of the draws (`RANDOM`, and `MEAN` without a closed
  /// form), shared with copies of the options: its state advances with each
  /// draw. Default LibTorch's.
  TORCH_ARG(c10::optional<at::Generator>, generator) = c10::nullopt;

 public:
  /// Where the log-probability goes; default `"<out_key>_log_prob"`.
  ProbabilisticOptions& log_prob_key(NestedKey key) {
    log_prob_key_ = std::move(key);
    return *this;
  }
  /// The log-probability key set, if any.
  [[nodiscard]] const c10::optional<NestedKey>& log_prob_key() const {
    return log_prob_key_;
  }

 private:
  c10::optional<NestedKey> log_prob_key_;
};

/// Reads a distribution's parameters, writes a value taken from it (see the
/// top of this file). Copies share their settings and generator.
class ProbabilisticTensorDictModule : public TensorDictModule {
 public:
  /// `in_keys` hold the parameters `factory` takes; `out_keys` is the one
  /// key the value goes to. Throws a `c10::ValueError` for another number
  /// of out-keys, `dist_keys` of the wrong length, an empty factory, or a
  /// log-probability key that is the out-key.
  ProbabilisticTensorDictModule(std::vector<NestedKey> in_keys,
                                std::vector<NestedKey> out_keys,
                                distributions::DistributionFactory factory,
                                ProbabilisticOptions options = {});

  /// The distribution of `td`'s parameters (Python's `get_dist`). Throws,
  /// naming it, when an in-key is missing.
  [[nodiscard]] std::shared_ptr<distributions::Distribution> get_dist(
      const TensorDict& td) const;
  /// The log-probability of `td`'s value (under the out-key) under the
  /// distribution of its parameters (Python's `log_prob`).
  [[nodiscard]] at::Tensor log_prob(const TensorDict& td) const;

  /// The key the value goes to (Python's `dist_sample_keys[0]`).
  [[nodiscard]] const NestedKey& sample_key() const;
  /// The key the log-probability goes to (when `return_log_prob`).
  [[nodiscard]] const NestedKey& log_prob_key() const;
  /// The parameter names of the in-keys, in order.
  [[nodiscard]] const std::vector<std::string>& dist_keys() const;
  /// The options it was made with.
  [[nodiscard]] const ProbabilisticOptions& options() const;
  /// The interaction type a call uses now: the thread's guard, else the
  /// default.
  [[nodiscard]] InteractionType current_interaction_type() const;

  /// What the module keeps (defined in the .cpp file).
  struct State;

 private:
  explicit ProbabilisticTensorDictModule(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

/// Modules that compute a distribution's parameters, then the probabilistic
/// module that samples from it (Python's
/// `ProbabilisticTensorDictSequential`). A call runs them all, as a
/// `TensorDictSequential`.
class ProbabilisticTensorDictSequential : public TensorDictSequential {
 public:
  /// `modules` (possibly none) run first, then `last`.
  ProbabilisticTensorDictSequential(std::vector<TensorDictModule> modules,
                                    ProbabilisticTensorDictModule last);

  /// Runs the modules before the probabilistic one on `td` (their results
  /// are set into `td`, as in Python), then returns the distribution of the
  /// parameters.
  [[nodiscard]] std::shared_ptr<distributions::Distribution> get_dist(
      const TensorDict& td) const;
  /// `get_dist(td)->log_prob(td's value)`.
  [[nodiscard]] at::Tensor log_prob(const TensorDict& td) const;
  /// The probabilistic module (the last one).
  [[nodiscard]] const ProbabilisticTensorDictModule& probabilistic_module()
      const {
    return last_;
  }

 private:
  c10::optional<TensorDictSequential> deterministic_;  // none: no modules
  ProbabilisticTensorDictModule last_;
};

}  // namespace tensordict
