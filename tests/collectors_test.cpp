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

// A state with TorchRL's counters only (TorchRL's state_dict) makes a
// collector go on counting, with fresh trajectory ids.
TEST(Collector, TorchRLsCountersResumeWithFreshTrajectories) {
  Collector collector(Counters(), nullptr, CollectorOptions(12));
  (void)collector.next();
  (void)collector.next();
  const TensorDict state =
      collector.state_dict().select({"frames", "iter", "traj_pool"});
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

namespace {

// CartPole x4 with random actions and a StepCounter (max_frames_per_traj),
// or three Pendulums in a SerialEnv under VecNorm, run by a policy.
std::unique_ptr<Collector> ResumableCollector(bool pendulum, uint64_t seed) {
  std::unique_ptr<EnvBase> env;
  if (pendulum) {
    env = std::make_unique<tensordict::TransformedEnv>(
        std::make_unique<tensordict::SerialEnv>(
            3, [] { return std::make_unique<tensordict::PendulumEnv>(); }),
        std::make_shared<tensordict::VecNorm>(
            std::vector<NestedKey>{"reward"}));
  } else {
    env = std::make_unique<CartPoleEnv>(std::vector<int64_t>{4});
  }
  env->set_seed(seed);
  const auto options = CollectorOptions(pendulum ? 24 : 32)
                           .max_frames_per_traj(pendulum ? 5 : 12);
  if (!pendulum)
    return std::make_unique<Collector>(std::move(env), nullptr, options);
  const TensorDictModule torque(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {(in[0] * 0.5 - in[1]).clamp(-2, 2).unsqueeze(-1)};
      },
      {"th", "thdot"}, {"action"});
  return std::make_unique<Collector>(std::move(env), torque, options);
}

}  // namespace

// state_dict covers the envs (their generators, CartPole's physics, the
// transforms' statistics), the step they are at (the carrier: step
// counters, trajectory ids, observations) and the counters: a collector
// that loads it gives the batches the first one gives next.
TEST(Collector, StateDictResumesTheSameStream) {
  for (bool pendulum : {false, true}) {
    SCOPED_TRACE(pendulum ? "SerialEnv of Pendulums, VecNorm" : "CartPole");
    const auto first = ResumableCollector(pendulum, 0);
    (void)first->next();
    (void)first->next();
    const TensorDict state = first->state_dict();
    EXPECT_TRUE(state.contains({"carrier", "collector", "traj_ids"}));
    EXPECT_TRUE(state.contains({"carrier", "step_count"}));
    EXPECT_TRUE(state.contains({"env", "rng"}));
    const TensorDict third = first->next().clone();
    const TensorDict fourth = first->next().clone();
    const auto resumed = ResumableCollector(pendulum, 123);
    (void)resumed->next();
    resumed->load_state_dict(state);
    EXPECT_EQ(resumed->frames(), first->frames() - 2 * third.numel());
    for (const TensorDict& expected : {third, fourth}) {
      const TensorDict got = resumed->next();
      ASSERT_EQ(got.keys(true, true), expected.keys(true, true));
      for (const NestedKey& key : expected.keys(true, true)) {
        EXPECT_TRUE(at::equal(got.get(key), expected.get(key))) << key.str();
      }
    }
  }
}

// A state that does not fit, or whose generator bytes are no generator's,
// is refused with the key, and nothing changes: the env's state, the
// collector's and its batch.
TEST(Collector, LoadStateDictIsAllOrNothing) {
  const auto collector = ResumableCollector(true, 0);
  const TensorDict batch = collector->next();
  const TensorDict good = collector->state_dict();
  (void)collector->next();
  const tensordict_test::Snapshot batch_before =
      tensordict_test::TakeSnapshot(batch);
  const TensorDict state_before = collector->state_dict();
  auto expect_unchanged = [&] {
    tensordict_test::ExpectUnchanged(batch, batch_before);
    const TensorDict now = collector->state_dict();
    ASSERT_EQ(now.keys(true, true), state_before.keys(true, true));
    for (const NestedKey& key : now.keys(true, true)) {
      EXPECT_TRUE(at::equal(now.get(key), state_before.get(key))) << key.str();
    }
  };
  // The last env's generator (under the StepCounter's TransformedEnv and
  // VecNorm's): a position past the end of the state.
  TensorDict bad = good.clone();
  const NestedKey last_gen({"env", "env", "env", "envs", "2", "generator"});
  const at::Tensor bytes = bad.get(last_gen);
  bytes.narrow(0, 8, 4).copy_(
      at::tensor({624}, at::kInt).view(at::kByte));  // left
  bytes.narrow(0, 16, 8).copy_(
      at::tensor({int64_t{624}}, at::kLong).view(at::kByte));  // next
  ExpectThrowsMsg<c10::ValueError>(
      [&] { collector->load_state_dict(bad); },
      "TransformedEnv::load_state_dict: TransformedEnv::load_state_dict: "
      "SerialEnv::load_state_dict: PendulumEnv::load_state_dict: the "
      "generator state generator is not a Mersenne Twister state (position "
      "624, left 624)");
  expect_unchanged();
  // A shape that does not fit, deep in the env's state.
  bad = good.clone();
  bad.set({"env", "env", "env", "envs", "1", "rng"}, at::zeros({3}, at::kByte));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { collector->load_state_dict(bad); },
      "TransformedEnv::load_state_dict: key ('env', 'env', 'envs', '1', "
      "'rng'): expected shape [" +
          std::to_string(good.get({"env", "rng"}).numel()) +
          "] and dtype torch.uint8, got shape [3] and dtype torch.uint8");
  expect_unchanged();
  // A carrier without a key, a state without the carrier.
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        collector->load_state_dict(
            good.exclude({NestedKey({"carrier", "step_count"})}));
      },
      "Collector::load_state_dict: the carrier has no entry step_count");
  expect_unchanged();
  ExpectThrowsMsg<c10::ValueError>(
      [&] { collector->load_state_dict(good.exclude({"carrier"})); },
      "Collector::load_state_dict: the state has \"env\" and \"carrier\" "
      "(the envs and the step they are at) or neither, got no dict carrier");
  expect_unchanged();
  // The good state loads.
  collector->load_state_dict(good);
  EXPECT_EQ(collector->frames(), 24);
}
