// Internal: the state of a `Collector` (collector.cpp), which the multi
// collectors' workers (multi.cpp) drive too.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "envs/flags.h"
#include "envs/rollout_loop.h"
#include "tensordict/collectors.h"

namespace tensordict {
namespace detail {

/// A collected batch as `options` say: split, post-processed, then written
/// whole into the replay buffer (an empty dict is yielded) or yielded.
inline TensorDict finish_batch(const CollectorOptions& options,
                               TensorDict batch) {
  if (options.split_trajs()) batch = split_trajectories(batch);
  if (options.postproc()) batch = options.postproc()(batch);
  if (options.replay_buffer() == nullptr) return batch;
  options.replay_buffer()->extend(batch.reshape({-1}));
  return TensorDict();
}

/// The integer `state[key]` of a collector's state (one element, not a
/// float); "<fn>: ..." otherwise.
int64_t state_int(const TensorDict& state, const NestedKey& key,
                  const std::string& fn);

}  // namespace detail

struct Collector::Impl {
  std::unique_ptr<EnvBase> env;
  Policy policy;  // empty: random actions
  c10::optional<TensorDictModule> module;
  CollectorOptions options;
  std::vector<NestedKey> policy_out_keys;  // moved back from policy_device
  int64_t numel = 0;
  int64_t steps = 0;
  std::unique_ptr<detail::RolloutLoop> loop;
  std::unique_ptr<detail::StepStore> store;
  NestedKey traj_key{"collector", "traj_ids"};
  // The next trajectory id; shared by the workers of a multi collector.
  std::shared_ptr<std::atomic<int64_t>> traj_pool =
      std::make_shared<std::atomic<int64_t>>(0);
  // Called before each step (a multi collector's pause point).
  std::function<void()> before_step;
  int64_t frames = 0;
  int64_t iter = 0;
  bool shut = false;

  Impl(std::unique_ptr<EnvBase> e, Policy p, c10::optional<TensorDictModule> m,
       const CollectorOptions& o)
      : env(std::move(e)),
        policy(std::move(p)),
        module(std::move(m)),
        options(o) {}

  // New ids for every env (TorchRL's carrier).
  void fresh_traj_ids() {
    const int64_t first = traj_pool->fetch_add(numel);
    const at::Tensor ids =
        at::arange(first, first + numel, at::kLong).view(env->batch_size());
    loop->work().set(traj_key, ids);
  }

  // The policy's call on the working dict (on policy_device when set).
  void run_policy(const TensorDict& work) const {
    const at::Device env_device = env->device();
    if (!options.policy_device().has_value() ||
        *options.policy_device() == env_device) {
      policy(work);
      return;
    }
    const TensorDict moved = work.to(*options.policy_device());
    policy(moved);
    for (const NestedKey& key : policy_out_keys) {
      work.set(key, moved.get(key).to(env_device));
    }
  }

  // New ids for the envs whose step ended their trajectory (after
  // step_mdp: the root done flags are the step's).
  void next_traj_ids() {
    const at::Tensor& done = loop->done();
    if (!detail::any_flag(done, at::Tensor())) return;
    const at::Tensor flags = done.contiguous();
    const bool* d = flags.data_ptr<bool>();
    const at::Tensor ids = loop->work().get(traj_key);
    TORCH_CHECK(ids.is_contiguous() && ids.scalar_type() == at::kLong &&
                    ids.device().is_cpu(),
                "Collector: ", traj_key.str(),
                " must stay an int64 contiguous CPU tensor");
    int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t row = 0; row < numel; ++row) {
      if (d[row]) id[row] = traj_pool->fetch_add(1);
    }
  }

  TensorDict collect() {
    TORCH_CHECK(!shut, "Collector: the collector was shut down");
    TORCH_CHECK(options.total_frames() < 0 || frames < options.total_frames(),
                "Collector: total_frames (", options.total_frames(),
                ") were collected");
    if (options.reset_at_each_iter()) loop->reset_all();
    const InteractionTypeGuard explore(options.exploration_type());
    const bool random = frames < options.init_random_frames() || !policy;
    const Policy call = [this](const TensorDict& td) { run_policy(td); };
    const Policy* act = random ? nullptr : &call;
    RolloutBuffer* rollout_buffer = options.rollout_buffer();
    for (int64_t t = 0; t < steps; ++t) {
      if (before_step) before_step();
      loop->act(act);
      loop->step(at::Tensor());
      if (rollout_buffer != nullptr) {
        rollout_buffer->step(t, loop->work());
      } else {
        store->write(t, loop->work());
      }
      loop->step_mdp();
      next_traj_ids();
      loop->reset_done();
    }
    frames += steps * numel;
    ++iter;
    if (rollout_buffer != nullptr) return TensorDict();
    return detail::finish_batch(options, store->data());
  }
};

}  // namespace tensordict
