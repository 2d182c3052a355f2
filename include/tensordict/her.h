// tensordict/her.h — hindsight experience replay: TorchRL 0.14's
// `HERReplayBuffer` (Andrychowicz et al., 2017).
//
// A `HERReplayBuffer` is a `ReplayBuffer` of transitions of goal-conditioned
// episodes that relabels part of each sample: for the first
// `floor(n * her_ratio)` rows of a batch of `n`, the desired goal (and the
// next step's, when stored) becomes a goal achieved elsewhere, and the
// reward is recomputed by the given reward function. The rest of the batch
// is returned as stored. Where the new goal comes from (`HindsightStrategy`):
//   - `kFuture`: a transition of the same episode at or after the sampled
//     one, uniformly (the paper's "future", the default);
//   - `kFinal`: the last transition of the episode;
//   - `kEpisode`: any transition of the episode, uniformly;
//   - `kRandom`: any transition of the buffer, uniformly.
// The paper's `future` with `k` goals per transition is `her_ratio = k / (k
// + 1)` (k = 4: 0.8, the default).
//
// Episodes. The rows are kept in write order (a round-robin writer: a
// `MaxValueWriter` is refused) and an episode ends at a row whose `end_key`
// (`("next", "done")`) or the `"terminated"` beside it is set; the newest
// row ends the episode still being written. Once the buffer is full and
// wraps, an episode that crosses the end of the storage goes on at row 0:
// its rows are those between the previous end and its own in write order.
// (TorchRL 0.14 looks for a row's episode by storage index, so for the rows
// after the storage's last end it takes the range of another episode; for
// every other row the two agree, draw for draw.)
//
// The draws. The goals are drawn with the buffer's own `at::Generator`
// (`HEROptions::seed`), with the arithmetic of TorchRL 0.14: for the same
// sampled rows and the same seed (`torch.manual_seed` there), the same
// goals (checked against TorchRL in CI's Python 0.14 stage).
//
// Checks. Each row written must hold `goal_key` and `achieved_goal_key` as
// tensors of one row shape, the reward, and `end_key` or the `"terminated"`
// beside it with one element per row; a row without them is refused before
// anything is written, as any row the buffer refuses. The reward function
// gets the relabelled rows (`[m]`, `m = floor(n * her_ratio)`) and must
// return `m` rewards of the stored reward's row shape (`[m]` or `[m, 1]`
// for a `[1]` reward); anything else throws, naming both shapes.
//
// Thread safety: every call is synchronized (one lock per buffer, held
// while the reward function runs). A rate limiter and `shared` are refused:
// the lock would be held while the limiter waits.
//
// Tutorial: docs/tutorials/replay_buffer.md ("Hindsight relabelling").
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "tensordict/nested_key.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Where a relabelled row's goal comes from (see the top of this file).
enum class HindsightStrategy { kFuture, kFinal, kEpisode, kRandom };

/// The reward of relabelled rows: gets them (goals already replaced) and
/// returns one reward per row.
using HERRewardFn = std::function<at::Tensor(const TensorDict&)>;

/// What a `HERReplayBuffer` relabels, and how (TorchRL 0.14's keyword
/// arguments and defaults).
struct HEROptions {
  /// The share of each batch relabelled, in [0, 1].
  TORCH_ARG(double, her_ratio) = 0.8;
  /// Where the new goals come from.
  TORCH_ARG(HindsightStrategy, strategy) = HindsightStrategy::kFuture;
  /// The desired goal, replaced (and `("next", goal_key)`, when stored).
  TORCH_ARG(NestedKey, goal_key) = NestedKey("desired_goal");
  /// The goal a transition achieved: the new goals are taken from it.
  TORCH_ARG(NestedKey, achieved_goal_key) = NestedKey("achieved_goal");
  /// Where the recomputed reward goes.
  TORCH_ARG(NestedKey, reward_key) = NestedKey({"next", "reward"});
  /// The episode ends; the `"terminated"` beside it counts too.
  TORCH_ARG(NestedKey, end_key) = NestedKey({"next", "done"});
  /// The seed of the goals' draws; unset, a random one.
  TORCH_ARG(c10::optional<uint64_t>, seed) = c10::nullopt;
};

/// What `HERReplayBuffer::sample` returns besides the data.
struct HERSampleInfo {
  /// The sampled storage rows, int64 `[n]`.
  at::Tensor index;
  /// Importance weights (prioritized sampler only; undefined otherwise).
  at::Tensor weight;
  /// The row each relabelled row's goal came from, int64 `[m]`: row `i` of
  /// the batch (`i < m`) took the achieved goal of storage row
  /// `goal_index[i]`.
  at::Tensor goal_index;
};

/// TorchRL 0.14's `HERReplayBuffer` (see the top of this file).
///
/// Example:
/// ```
///   HERReplayBuffer rb(
///       [](const TensorDict& td) {  // 0 at the goal, -1 elsewhere
///         return (td.get({"next", "achieved_goal"}) - td.get("desired_goal"))
///                    .norm(2, {-1}, true).lt(0.05).to(at::kFloat) - 1;
///       },
///       ReplayBufferOptions(100000), HEROptions().seed(0));
///   rb.extend(episode);                  // transitions, [T]
///   auto [batch, info] = rb.sample(256); // the first 204 rows relabelled
/// ```
class HERReplayBuffer {
 public:
  /// A buffer made with `options` (no rate limiter, not shared, a
  /// round-robin writer) that relabels with `reward_fn` (not empty) as
  /// `her` says. Throws a ValueError naming a bad option.
  HERReplayBuffer(HERRewardFn reward_fn, ReplayBufferOptions options,
                  HEROptions her = {});
  /// Movable, not copyable.
  ///@{
  ~HERReplayBuffer();
  HERReplayBuffer(HERReplayBuffer&&) noexcept;
  HERReplayBuffer& operator=(HERReplayBuffer&&) noexcept;
  ///@}
  HERReplayBuffer(const HERReplayBuffer&) = delete;
  HERReplayBuffer& operator=(const HERReplayBuffer&) = delete;

  /// Writes one transition (batch size []), as `ReplayBuffer::add`, after
  /// checking the keys above.
  int64_t add(const TensorDict& row);
  /// Writes transitions (batch size `[n]`, in time order), as
  /// `ReplayBuffer::extend`, after checking the keys above.
  at::Tensor extend(const TensorDict& batch);
  /// Samples `batch_size` rows with the buffer's sampler and relabels the
  /// first `floor(batch_size * her_ratio)`. When the reward function throws
  /// or returns the wrong shape, the call throws (the rows stay as they
  /// were; the samplers' draws are spent).
  [[nodiscard]] std::pair<TensorDict, HERSampleInfo> sample(int64_t batch_size);
  /// As `ReplayBuffer::update_priority`.
  void update_priority(const at::Tensor& index, const at::Tensor& priority);

  /// `ReplayBuffer::dumps`, plus the goals' generator in `her_rng` (a
  /// memmap directory, uint8): `loads` resumes the same samples, goals
  /// included.
  void dumps(const std::string& dir) const;
  /// Replaces the state with what `dumps` wrote in `dir`; checked first,
  /// as `ReplayBuffer::loads` (a damaged or missing `her_rng` too): a
  /// refused checkpoint leaves the buffer as it was.
  void loads(const std::string& dir);

  /// As `ReplayBuffer`'s.
  ///@{
  [[nodiscard]] int64_t size() const;
  [[nodiscard]] int64_t capacity() const;
  [[nodiscard]] int64_t cursor() const;
  void clear();
  [[nodiscard]] TensorDict storage() const;
  [[nodiscard]] const ReplayBufferOptions& options() const;
  ///@}
  /// Reseeds the sampler's generator and the goals' (with `seed` both).
  void manual_seed(uint64_t seed);
  /// The relabelling options.
  [[nodiscard]] const HEROptions& her_options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensordict
