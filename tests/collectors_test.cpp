// Collector (tensordict/collectors.h): TorchRL 0.14's batches, trajectory
// ids, split_trajs, the options, the buffers, allocation, weights and
// state; TensorDictModule's parameters.
#include <gtest/gtest.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "alloc_util.h"
#include "count_env.h"
#include "test_util.h"

using tensordict::CartPoleEnv;
using tensordict::Collector;
using tensordict::CollectorOptions;
using tensordict::EnvBase;
using tensordict::InteractionType;
using tensordict::NestedKey;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::RolloutBuffer;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using tensordict_test::CountEnv;
using tensordict_test::ExpectThrowsMsg;

namespace {

const NestedKey kTrajIds({"collector", "traj_ids"});

// CountEnv: env 0 terminates at count 2, env 1 at count 3, env 2 is
// truncated at count 4.
std::unique_ptr<EnvBase> Counters() {
  return std::make_unique<CountEnv>(std::vector<int64_t>{2, 3, 0},
                                    std::vector<int64_t>{0, 0, 4});
}

// The values of an int64 tensor, row-major.
std::vector<int64_t> Values(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

// Each batch is [*env_batch, T] with TorchRL's keys; an env that is done
// takes the next id for its next step, and ids go on across batches.
TEST(Collector, BatchesAreEnvBatchByStepsWithTrajectoryIds) {
  Collector collector(Counters(), nullptr,
                      CollectorOptions(12).total_frames(24));
  EXPECT_EQ(collector.steps_per_batch(), 4);
  const TensorDict first = collector.next();
  EXPECT_EQ(first.batch_size().vec(), std::vector<int64_t>({3, 4}));
  for (const char* key : {"obs", "action", "done", "terminated", "truncated"}) {
    EXPECT_TRUE(first.contains(key)) << key;
  }
  for (const char* key : {"obs", "reward", "done", "terminated", "truncated"}) {
    EXPECT_TRUE(first.contains({"next", key})) << key;
  }
  EXPECT_EQ(first.get(kTrajIds).scalar_type(), at::kLong);
  // Env 0 ends at t = 1 (id 3) and t = 3 (id 5), env 1 at t = 2 (id 4),
  // env 2 at t = 3 (id 6).
  EXPECT_EQ(Values(first.get(kTrajIds)),
            std::vector<int64_t>({0, 0, 3, 3, 1, 1, 1, 4, 2, 2, 2, 2}));
  EXPECT_EQ(Values(first.get("obs").squeeze(-1)),
            std::vector<int64_t>({0, 1, 0, 1, 0, 1, 2, 0, 0, 1, 2, 3}));
  EXPECT_EQ(Values(first.get({"next", "done"}).squeeze(-1)),
            std::vector<int64_t>({0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(collector.frames(), 12);
  const std::vector<int64_t> ids = Values(collector.next().get(kTrajIds));
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[4], 4);
  EXPECT_EQ(ids[8], 6);
  EXPECT_TRUE(collector.finished());
  ExpectThrowsMsg([&] { (void)collector.next(); },
                  "Collector: total_frames (24) were collected");
}

// The iterator yields total_frames / frames_per_batch batches, each the
// collector's own storage, written in place.
TEST(Collector, IteratesOverBatchesInOneStorage) {
  Collector collector(Counters(), nullptr,
                      CollectorOptions(10).total_frames(36));
  int batches = 0;
  const void* data = nullptr;
  for (const TensorDict& batch : collector) {
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({3, 4}));
    if (data == nullptr) data = batch.get("obs").data_ptr();
    EXPECT_EQ(batch.get("obs").data_ptr(), data);
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(collector.frames(), 36);
}

// After the first batch, collecting allocates no tensor.
TEST(Collector, SteadyStateAllocatesNothing) {
  Collector collector(std::make_unique<CartPoleEnv>(std::vector<int64_t>{16}),
                      nullptr, CollectorOptions(16 * 64));
  (void)collector.next();
  (void)collector.next();
  const tensordict_test::AllocationCounter counter;
  for (int i = 0; i < 5; ++i) (void)collector.next();
  EXPECT_EQ(counter.count(), 0);
}

TEST(Collector, SplitTrajsPadsEachTrajectoryWithAMask) {
  Collector collector(Counters(), nullptr,
                      CollectorOptions(12).split_trajs(true));
  const TensorDict batch = collector.next();
  EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({5, 4}));
  EXPECT_EQ(Values(batch.get({"collector", "mask"})),
            std::vector<int64_t>(
                {1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(Values(batch.get(kTrajIds)),
            std::vector<int64_t>(
                {0, 0, 0, 0, 3, 3, 0, 0, 1, 1, 1, 0, 4, 0, 0, 0, 2, 2, 2, 2}));
  EXPECT_EQ(Values(batch.get({"next", "obs"}).squeeze(-1)),
            std::vector<int64_t>(
                {1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 3, 0, 1, 0, 0, 0, 1, 2, 3, 4}));
  // Whole rows: the batch itself, with an all-true mask.
  const TensorDict whole = TensorDict(
      {{"collector", TensorDict({{"traj_ids", at::tensor({7, 7, 7})}}, {3})},
       {"x", at::arange(3)}},
      {3});
  const TensorDict split = tensordict::split_trajectories(whole);
  EXPECT_EQ(split.batch_size().vec(), std::vector<int64_t>({1, 3}));
  EXPECT_TRUE(split.get({"collector", "mask"}).all().item<bool>());
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)tensordict::split_trajectories(
            TensorDict({{"x", at::zeros({2})}}, {2}));
      },
      "split_trajectories: the batch has no entry ('collector', 'traj_ids')");
}

// Whole batches go into the replay buffer; one that fails half-way reaches
// it not at all.
TEST(Collector, ReplayBufferTakesWholeBatchesOnly) {
  ReplayBuffer rb(ReplayBufferOptions(100));
  int calls = 0;
  bool fail = false;
  const tensordict::Policy policy = [&](const TensorDict& td) {
    if (fail && ++calls == 3) throw std::runtime_error("policy broke");
    td.set("action", at::zeros({3}, at::kLong));
  };
  Collector collector(Counters(), policy,
                      CollectorOptions(12).replay_buffer(&rb));
  const TensorDict yielded = collector.next();
  EXPECT_TRUE(yielded.empty());
  EXPECT_EQ(rb.size(), 12);
  EXPECT_EQ(Values(rb.storage().get(kTrajIds).narrow(0, 0, 12)),
            std::vector<int64_t>({0, 0, 3, 3, 1, 1, 1, 4, 2, 2, 2, 2}));
  const TensorDict before = rb.storage().clone();
  fail = true;
  EXPECT_THROW((void)collector.next(), std::runtime_error);
  EXPECT_EQ(rb.size(), 12);
  EXPECT_EQ(rb.cursor(), 12);
  EXPECT_TRUE((rb.storage() == before).all());
}

// Each step goes straight into the rollout buffer, [T, E].
TEST(Collector, RolloutBufferTakesEachStep) {
  RolloutBuffer buffer(4, 3);
  Collector collector(Counters(), nullptr,
                      CollectorOptions(12).rollout_buffer(&buffer));
  EXPECT_TRUE(collector.next().empty());
  EXPECT_EQ(buffer.data().batch_size().vec(), std::vector<int64_t>({4, 3}));
  EXPECT_EQ(Values(buffer.data().get(kTrajIds).t()),
            std::vector<int64_t>({0, 0, 3, 3, 1, 1, 1, 4, 2, 2, 2, 2}));
  RolloutBuffer wrong(5, 3);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        Collector c(Counters(), nullptr,
                    CollectorOptions(12).rollout_buffer(&wrong));
      },
      "Collector: the rollout_buffer holds 5 steps of 3 envs, but the "
      "batches are 4 steps of an env of batch size [3]");
}

TEST(Collector, InitRandomFramesSkipThePolicy) {
  int calls = 0;
  const tensordict::Policy policy = [&](const TensorDict& td) {
    ++calls;
    td.set("action", at::ones({3}, at::kLong));
  };
  Collector collector(Counters(), policy,
                      CollectorOptions(12).init_random_frames(20));
  (void)collector.next();
  (void)collector.next();
  EXPECT_EQ(calls, 0);
  const TensorDict third = collector.next();
  EXPECT_EQ(calls, 4);
  EXPECT_TRUE((third.get("action") == 1).all().item<bool>());
}

// max_frames_per_traj adds a StepCounter: every trajectory of a pendulum
// (never done by itself) is 3 steps long.
TEST(Collector, MaxFramesPerTrajTruncates) {
  Collector collector(std::make_unique<tensordict::PendulumEnv>(), nullptr,
                      CollectorOptions(7).max_frames_per_traj(3));
  const TensorDict batch = collector.next();
  EXPECT_EQ(Values(batch.get({"next", "step_count"}).squeeze(-1)),
            std::vector<int64_t>({1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(Values(batch.get({"next", "truncated"}).squeeze(-1)),
            std::vector<int64_t>({0, 0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(Values(batch.get(kTrajIds)),
            std::vector<int64_t>({0, 0, 0, 1, 1, 1, 2}));
}

// reset_at_each_iter: every batch starts from a reset (the ids stay).
TEST(Collector, ResetAtEachIterStartsEachBatchFromAReset) {
  Collector collector(std::make_unique<CountEnv>(std::vector<int64_t>{0, 0, 0},
                                                 std::vector<int64_t>{0, 0, 0}),
                      nullptr, CollectorOptions(6).reset_at_each_iter(true));
  (void)collector.next();
  const TensorDict second = collector.next();
  EXPECT_EQ(Values(second.get("obs").squeeze(-1)),
            std::vector<int64_t>({0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(Values(second.get(kTrajIds)),
            std::vector<int64_t>({0, 0, 1, 1, 2, 2}));
}

TEST(Collector, PolicyRunsUnderTheExplorationType) {
  std::vector<InteractionType> seen;
  const tensordict::Policy policy = [&](const TensorDict& td) {
    seen.push_back(*tensordict::interaction_type());
    td.set("action", at::zeros({3}, at::kLong));
  };
  Collector random(Counters(), policy, CollectorOptions(3));
  (void)random.next();
  Collector deterministic(
      Counters(), policy,
      CollectorOptions(3).exploration_type(InteractionType::DETERMINISTIC));
  (void)deterministic.next();
  EXPECT_EQ(seen,
            std::vector<InteractionType>(
                {InteractionType::RANDOM, InteractionType::DETERMINISTIC}));
}

TEST(Collector, PostprocMakesTheBatch) {
  Collector collector(Counters(), nullptr,
                      CollectorOptions(12).postproc([](const TensorDict& b) {
                        return b.select({NestedKey("obs")});
                      }));
  const TensorDict batch = collector.next();
  EXPECT_EQ(batch.keys(), std::vector<NestedKey>({NestedKey("obs")}));
}

TEST(Collector, RejectsBadOptions) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { Collector c(Counters(), nullptr, CollectorOptions(0)); },
      "Collector: frames_per_batch must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Collector c(Counters(), nullptr, CollectorOptions(3).total_frames(0));
      },
      "Collector: total_frames must be positive or -1 (endless), got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Collector c(Counters(), nullptr,
                    CollectorOptions(3).env_device(at::Device("meta")));
      },
      "Collector: env_device is meta but the env is on cpu (envs do not "
      "move: make it there)");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Collector c(
            tensordict::EnvFactory([] { return std::unique_ptr<EnvBase>(); }),
            nullptr, CollectorOptions(3));
      },
      "Collector: the env factory returned null");
}

// A policy of torch::nn modules: its parameters for an optimizer, its
// weights in from_module's layout, and update_policy_weights_ writes a
// learner's weights into it, all-or-nothing.
TEST(Collector, UpdatePolicyWeightsWritesTheLearnersWeights) {
  auto make_policy = [] {
    TensorDictModule logits(torch::nn::Linear(1, 3), {"obs"}, {"logits"});
    TensorDictModule argmax(
        [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
          return {in[0].argmax(-1)};
        },
        {"logits"}, {"action"});
    return TensorDictSequential({logits, argmax});
  };
  const TensorDictSequential actor = make_policy();
  const TensorDictSequential learner = make_policy();
  Collector collector(Counters(), actor, CollectorOptions(3));
  const TensorDict weights = tensordict::from_module(learner);
  collector.update_policy_weights_(weights);
  EXPECT_TRUE((tensordict::from_module(actor) == weights).all());

  const TensorDict snapshot = tensordict::from_module(actor).clone();
  TensorDict bad = weights.clone();
  bad.set({"module", "0", "module", "bias"}, at::zeros({4}));
  EXPECT_THROW(collector.update_policy_weights_(bad), c10::Error);
  EXPECT_TRUE((tensordict::from_module(actor) == snapshot).all());

  Collector lambda(Counters(), nullptr, CollectorOptions(3));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { lambda.update_policy_weights_(weights); },
      "Collector::update_policy_weights_: the policy is not a "
      "TensorDictModule, so it has no weights to update");
}

TEST(TensorDictModule, ParametersComeFromTheWrappedModules) {
  torch::nn::Linear linear(2, 3);
  const TensorDictModule single(linear, {"x"}, {"y"});
  ASSERT_EQ(single.parameters().size(), 2U);
  EXPECT_TRUE(single.parameters()[0].is_same(linear->weight));
  const TensorDictModule fn(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0]};
      },
      {"y"}, {"z"});
  EXPECT_TRUE(fn.parameters().empty());
  const TensorDictSequential seq({fn, single});
  std::vector<std::string> names;
  for (const auto& [name, tensor] : seq.named_parameters()) {
    names.push_back(name);
  }
  EXPECT_EQ(names, std::vector<std::string>(
                       {"module.1.module.weight", "module.1.module.bias"}));
  const TensorDict params = tensordict::from_module(seq);
  EXPECT_TRUE(
      params.get({"module", "1", "module", "weight"}).is_same(linear->weight));
  EXPECT_FALSE(params.contains({"module", "0"}));
  EXPECT_TRUE(tensordict::from_module(fn).empty());
  // One line for an optimizer.
  torch::optim::Adam adam(seq.parameters(), 1e-3);
  EXPECT_EQ(adam.param_groups()[0].params().size(), 2U);
}

// state_dict holds TorchRL's counters; a collector that loads it goes on
// counting, with fresh trajectory ids.
TEST(Collector, StateDictResumesTheCounters) {
  Collector collector(Counters(), nullptr, CollectorOptions(12));
  (void)collector.next();
  (void)collector.next();
  const TensorDict state = collector.state_dict();
  EXPECT_EQ(state.get("frames").item<int64_t>(), 24);
  EXPECT_EQ(state.get("iter").item<int64_t>(), 2);
  const int64_t next_id = state.get({"traj_pool", "traj_id"}).item<int64_t>();
  Collector resumed(Counters(), nullptr, CollectorOptions(12).total_frames(36));
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed.frames(), 24);
  const std::vector<int64_t> ids = Values(resumed.next().get(kTrajIds));
  EXPECT_EQ(ids[0], next_id);
  EXPECT_EQ(ids[4], next_id + 1);
  EXPECT_EQ(ids[8], next_id + 2);
  EXPECT_TRUE(resumed.finished());
  ExpectThrowsMsg<c10::ValueError>(
      [&] { resumed.load_state_dict(TensorDict()); },
      "Collector::load_state_dict: the state has no entry frames");
  EXPECT_EQ(resumed.frames(), 36);
}
