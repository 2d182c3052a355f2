// Internal: TorchRL's rollout loop in two parts that outlive one call: the
// working dict of an env and the steps on it (`RolloutLoop`), and the
// `[*batch, T]` storage that takes one step at a time (`StepStore`).
// `EnvBase::rollout` makes one of each per call (rollout.cpp); a collector
// keeps them for its whole life, so that no batch allocates.
//
// The working dict is the current step's input: the env's observations,
// state and done flags at the root, the policy's outputs (and whatever a
// caller sets there), and under "next" one preallocated dict that every
// step's `step_impl` writes into. A step is:
//   1. `act`: the policy (without autograd, as TorchRL's collectors), or
//      `rand_` of the action spec into preallocated actions;
//   2. `step`: `step_impl(work, next)`, then done |= terminated | truncated;
//   3. the caller's `StepStore::write(t, work)`;
//   4. `step_mdp`, in place: next's observations and flags are copied to
//      the root (the storage already holds the step);
//   5. the caller's stop rule, or `reset_done`.
// Nothing in 2-5 allocates a tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/write_plan.h"
#include "tensordict/envs.h"

namespace tensordict {
namespace detail {

// A leaf of a dict that the loop owns, looked up again only when that dict
// changed: a top-level key keeps its node while the dict's entries stay
// where they were and the node still holds the same tensor (a policy that
// sets its output replaces it; keys set or erased move the entries). A
// nested key is looked up every time.
class LeafRef {
 public:
  LeafRef(TensorDict td, NestedKey key);
  const at::Tensor& get();

 private:
  TensorDict td_;
  const TensorDictImpl* impl_;
  NestedKey key_;
  const Node* node_ = nullptr;
  const Node* base_ = nullptr;
  size_t size_ = 0;
  const c10::TensorImpl* tensor_ = nullptr;
  at::Tensor held_;
};

// What a `RowWritePlan::bind` of a value saw, so that the next write skips
// the bind while nothing in the value changed: every level of it still has
// its entries where they were (no key set or erased), each sub-dict is the
// same one, and each source is the same tensor of the same shape and dtype.
class BoundValue {
 public:
  void record(const TensorDictImpl& root, const RowWritePlan::Sources& sources);
  void forget() { levels_.clear(); }
  [[nodiscard]] bool unchanged(const RowWritePlan::Sources& sources) const;

 private:
  struct Level {
    const Node* owner;  // the parent's entry (null at the root)
    const TensorDictImpl* impl;
    const Node* data;
    size_t size;
  };
  struct Leaf {
    const c10::TensorImpl* impl;
    std::vector<int64_t> sizes;
    at::ScalarType dtype;
  };
  void record_level(const TensorDictImpl& impl, const Node* owner);
  std::vector<Level> levels_;
  std::vector<Leaf> leaves_;
};

// A `[*batch, T]` storage (TorchRL's layout) written one step (column t) at
// a time. The first write preallocates its leaves ("Lazy preallocation",
// tensor_dict.h); after it, the storage seen as `[numel * T]` rows takes
// each step through one kept `RowWritePlan` (the replay storage's): rows t,
// T + t, 2T + t, ... of each leaf, by bytes, bound again only when the
// value changed. A value whose keys differ from the plan's (a policy that
// adds an output late) goes through the indexed write, which allocates its
// new keys, and the plan is made again.
class StepStore {
 public:
  StepStore(std::vector<int64_t> batch, int64_t steps, at::Device device);
  // `data()[..., t] = value` (value: batch size `batch`).
  void write(int64_t t, const TensorDict& value);
  [[nodiscard]] const TensorDict& data() const { return store_; }

 private:
  TensorDict store_;
  int64_t steps_;
  int64_t numel_;
  int64_t value_bd_;
  bool flat_rows_;
  RowWritePlan plan_;
  RowWritePlan::Sources sources_;
  BoundValue bound_;
};

// The working dict of `env` and the steps on it (see the top of this file).
// `env` must outlive the loop.
class RolloutLoop {
 public:
  // The first step's input: `start` (copied into tensors of the loop's, or
  // into the env's shared batch), reset when `reset_start` (else its rows
  // that are done are reset, as TorchRL's maybe_reset), or a reset.
  RolloutLoop(EnvBase& env, const c10::optional<TensorDict>& start,
              bool reset_start);

  // The current step's input (its "next" is the last step's output).
  [[nodiscard]] const TensorDict& work() const { return work_; }
  // Runs `policy` on the working dict, or draws random actions from the
  // action spec (null `policy`). The tensors a policy sets (new ones at
  // each call) are copied into the ones the working dict held before, when
  // they fit: its leaves keep their identity from step to step, so that
  // what views them (a batched env's rows) is made once.
  void act(const Policy* policy);
  // Steps the env (the rows of `stepping`, `[*batch]` bool, when defined)
  // into "next" and completes its done flags.
  void step(const at::Tensor& stepping);
  // TorchRL's step_mdp, in place.
  void step_mdp();
  // The root done flags, `[*batch, 1]`.
  [[nodiscard]] const at::Tensor& done() { return done_ref_.get(); }
  // Resets the rows whose root done flag is set (none: nothing).
  void reset_done();
  // Resets every row.
  void reset_all();

 private:
  EnvBase& env_;
  TensorDict work_;
  TensorDict next_;
  bool shared_ = false;
  // The random actions: each leaf with its spec (made on the first `act`
  // without a policy).
  std::vector<std::pair<LeafRef, SpecPtr>> actions_;
  bool actions_ready_ = false;
  // The leaves a policy's first call set (but under "next"), each with the
  // tensor the working dict keeps for it.
  std::vector<std::pair<NestedKey, at::Tensor>> pins_;
  bool pins_ready_ = false;  // after the first policy call
  // Runs the policy's first call and pins what it set.
  void first_call(const Policy& policy);
  // Copies what the policy set into the pins.
  void repin();
  // What step_mdp moves from "next" to the root, and next's flags.
  std::vector<std::pair<LeafRef, LeafRef>> moved_;
  std::vector<LeafRef> next_flags_;
  LeafRef done_ref_;
  at::Tensor reset_mask_;
};

}  // namespace detail
}  // namespace tensordict
