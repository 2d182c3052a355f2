// Tests for RolloutBuffer and gae().
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.h"

using tensordict::GaeKeys;
using tensordict::GaeResult;
using tensordict::RolloutBuffer;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::Snapshot;
using tensordict_test::TakeSnapshot;

namespace {

// The textbook reverse-time recurrence, one column at a time, in double.
GaeResult NaiveGae(const at::Tensor& reward, const at::Tensor& value,
                   const at::Tensor& next_value, const at::Tensor& done,
                   const at::Tensor& terminated, double gamma, double lambda) {
  const int64_t T = value.size(0);
  const int64_t N = value.numel() / T;
  auto as_vec = [&](const at::Tensor& t) {
    at::Tensor c = t.to(at::kDouble).reshape({T, N}).contiguous();
    return std::vector<double>(c.data_ptr<double>(),
                               c.data_ptr<double>() + T * N);
  };
  const std::vector<double> r = as_vec(reward), v = as_vec(value),
                            nv = as_vec(next_value), d = as_vec(done),
                            term = as_vec(terminated);
  std::vector<double> adv(T * N), tgt(T * N);
  for (int64_t j = 0; j < N; ++j) {
    double next_adv = 0.0;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t i = t * N + j;
      const double delta = r[i] + gamma * nv[i] * (1.0 - term[i]) - v[i];
      next_adv = delta + gamma * lambda * (1.0 - d[i]) * next_adv;
      adv[i] = next_adv;
      tgt[i] = next_adv + v[i];
    }
  }
  auto to_tensor = [&](const std::vector<double>& x) {
    return torch::tensor(x, torch::kDouble).reshape(value.sizes());
  };
  return {to_tensor(adv), to_tensor(tgt)};
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

struct RandomRollout {
  at::Tensor reward, value, next_value, done, terminated;
};

// Random inputs with episode ends (about 10% of steps) inside the window;
// about half of them are terminations, the rest truncations.
RandomRollout MakeRandomRollout(std::vector<int64_t> shape,
                                at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  RandomRollout r;
  auto opts = torch::TensorOptions().dtype(dtype);
  r.reward = at::randn(shape, gen, opts);
  r.value = at::randn(shape, gen, opts);
  r.next_value = at::randn(shape, gen, opts);
  r.done = at::rand(shape, gen) < 0.1;
  r.terminated = r.done.logical_and(at::rand(shape, gen) < 0.5);
  return r;
}

}  // namespace

// ---- gae() -------------------------------------------------------------------

TEST(GaeTest, MatchesTheNaiveDoubleRecurrenceWithEpisodeEndsInsideTheWindow) {
  const RandomRollout r = MakeRandomRollout({200, 16}, at::kDouble, 1);
  ASSERT_GT(r.done.sum().item<int64_t>(), 100);
  ASSERT_GT(r.terminated.sum().item<int64_t>(), 50);
  ASSERT_LT(r.terminated.sum().item<int64_t>(), r.done.sum().item<int64_t>());
  const GaeResult got = tensordict::gae(r.reward, r.value, r.next_value, r.done,
                                        r.terminated, 0.99, 0.95);
  const GaeResult want = NaiveGae(r.reward, r.value, r.next_value, r.done,
                                  r.terminated, 0.99, 0.95);
  EXPECT_EQ(got.advantage.scalar_type(), at::kDouble);
  EXPECT_EQ(got.advantage.sizes(), r.value.sizes());
  EXPECT_LE(MaxAbsDiff(got.advantage, want.advantage), 1e-6);
  EXPECT_LE(MaxAbsDiff(got.value_target, want.value_target), 1e-6);
}

TEST(GaeTest, FloatInputsGiveFloatResultsWithin1e5OfTheDoubleReference) {
  const RandomRollout r = MakeRandomRollout({300, 8}, at::kFloat, 2);
  const GaeResult got = tensordict::gae(r.reward, r.value, r.next_value, r.done,
                                        r.terminated, 0.99, 0.95);
  const GaeResult want = NaiveGae(r.reward, r.value, r.next_value, r.done,
                                  r.terminated, 0.99, 0.95);
  EXPECT_EQ(got.advantage.scalar_type(), at::kFloat);
  EXPECT_EQ(got.value_target.scalar_type(), at::kFloat);
  EXPECT_LE(MaxAbsDiff(got.advantage, want.advantage), 1e-5);
  EXPECT_LE(MaxAbsDiff(got.value_target, want.value_target), 1e-5);
}

TEST(GaeTest, TrailingDimsAndNumericFlagsGiveTheSameResult) {
  const RandomRollout r = MakeRandomRollout({64, 5}, at::kDouble, 3);
  const GaeResult flat = tensordict::gae(r.reward, r.value, r.next_value,
                                         r.done, r.terminated, 0.9, 0.8);
  const GaeResult trailing = tensordict::gae(
      r.reward.unsqueeze(-1), r.value.unsqueeze(-1), r.next_value.unsqueeze(-1),
      r.done.to(at::kFloat).unsqueeze(-1),
      r.terminated.to(at::kLong).unsqueeze(-1), 0.9, 0.8);
  EXPECT_EQ(trailing.advantage.sizes(), (std::vector<int64_t>{64, 5, 1}));
  EXPECT_TRUE(trailing.advantage.squeeze(-1).equal(flat.advantage));
  EXPECT_TRUE(trailing.value_target.squeeze(-1).equal(flat.value_target));
}

TEST(GaeTest, NonContiguousAndHalfInputsAreConvertedOnce) {
  const RandomRollout r = MakeRandomRollout({32, 6}, at::kFloat, 4);
  const GaeResult want = tensordict::gae(r.reward, r.value, r.next_value,
                                         r.done, r.terminated, 0.99, 0.95);
  // The same data, stored env-major and viewed time-major.
  auto strided = [](const at::Tensor& t) { return t.t().contiguous().t(); };
  ASSERT_FALSE(strided(r.value).is_contiguous());
  const GaeResult got = tensordict::gae(strided(r.reward), strided(r.value),
                                        strided(r.next_value), strided(r.done),
                                        strided(r.terminated), 0.99, 0.95);
  EXPECT_TRUE(got.advantage.equal(want.advantage));
  EXPECT_TRUE(got.value_target.equal(want.value_target));
  const GaeResult half = tensordict::gae(
      r.reward.to(at::kHalf), r.value.to(at::kHalf), r.next_value.to(at::kHalf),
      r.done, r.terminated, 0.99, 0.95);
  EXPECT_EQ(half.advantage.scalar_type(), at::kHalf);
  const GaeResult half_ref =
      NaiveGae(r.reward.to(at::kHalf), r.value.to(at::kHalf),
               r.next_value.to(at::kHalf), r.done, r.terminated, 0.99, 0.95);
  EXPECT_TRUE(half.advantage.to(at::kDouble)
                  .allclose(half_ref.advantage,
                            /*rtol=*/1e-3,
                            /*atol=*/1e-2));
}

TEST(GaeTest, TruncationBootstrapsFromTheNextValueAndTerminationDoesNot) {
  // One env, three steps; step 1 ends the episode. gamma = 0.5, lambda = 0.5.
  const at::Tensor reward = torch::tensor({1.0, 1.0, 1.0}, torch::kDouble);
  const at::Tensor value = torch::tensor({2.0, 4.0, 8.0}, torch::kDouble);
  const at::Tensor next_value =
      torch::tensor({4.0, 10.0, 16.0}, torch::kDouble);  // 10: final obs
  const at::Tensor done = torch::tensor({false, true, false});
  const at::Tensor no_term = torch::tensor({false, false, false});
  // Step 2: delta = 1 + 0.5 * 16 - 8 = 1; A_2 = 1.
  // Truncated step 1: delta = 1 + 0.5 * 10 - 4 = 2; A_1 = 2 (no recursion).
  // Step 0: delta = 1 + 0.5 * 4 - 2 = 1; A_0 = 1 + 0.25 * 2 = 1.5.
  const GaeResult trunc =
      tensordict::gae(reward, value, next_value, done, no_term, 0.5, 0.5);
  EXPECT_TRUE(
      trunc.advantage.equal(torch::tensor({1.5, 2.0, 1.0}, torch::kDouble)));
  EXPECT_TRUE(
      trunc.value_target.equal(torch::tensor({3.5, 6.0, 9.0}, torch::kDouble)));
  // Terminated step 1: delta = 1 - 4 = -3; A_0 = 1 + 0.25 * -3 = 0.25.
  const GaeResult term =
      tensordict::gae(reward, value, next_value, done, done, 0.5, 0.5);
  EXPECT_TRUE(
      term.advantage.equal(torch::tensor({0.25, -3.0, 1.0}, torch::kDouble)));
  // Without an episode end the recursion crosses step 1:
  // A_1 = 2 + 0.25 * 1 = 2.25, A_0 = 1 + 0.25 * 2.25 = 1.5625.
  const GaeResult none =
      tensordict::gae(reward, value, next_value, no_term, no_term, 0.5, 0.5);
  EXPECT_TRUE(
      none.advantage.equal(torch::tensor({1.5625, 2.25, 1.0}, torch::kDouble)));
}

TEST(GaeTest, MismatchedShapesThrowNamingTheInput) {
  const at::Tensor v = torch::zeros({4, 2});
  const at::Tensor bad = torch::zeros({4, 3});
  const at::Tensor flag = torch::zeros({4, 2}, torch::kBool);
  ExpectThrowsMsg(
      [&] { (void)tensordict::gae(bad, v, v, flag, flag, 1, 1); },
      "gae: reward has shape [4, 3], expected value's shape [4, 2]");
  ExpectThrowsMsg(
      [&] { (void)tensordict::gae(v, v, v.unsqueeze(-1), flag, flag, 1, 1); },
      "gae: next_value has shape [4, 2, 1], expected value's shape [4, 2]");
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::gae(v, v, v, torch::zeros({4}, torch::kBool), flag, 1,
                              1);
      },
      "gae: done has shape [4], expected value's shape [4, 2]");
  ExpectThrowsMsg(
      [&] { (void)tensordict::gae(v, v, v, flag, at::Tensor(), 1, 1); },
      "gae: terminated is an undefined tensor");
}

TEST(GaeTest, NonFloatingValuesAndScalarsThrow) {
  const at::Tensor l = torch::zeros({4, 2}, torch::kLong);
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::gae(l, l, l, l, l, 1, 1); },
      "gae: value must be a floating-point tensor, got torch.int64");
  const at::Tensor s = torch::zeros({});
  ExpectThrowsMsg(
      [&] { (void)tensordict::gae(s, s, s, s, s, 1, 1); },
      "gae: value must have a time dim, got shape [] (a 0-dim tensor)");
}

// ---- RolloutBuffer ------------------------------------------------------------

namespace {

// One env step for E envs, TorchRL's layout.
TensorDict MakeStep(int64_t E, int64_t t, bool with_values = false) {
  TensorDict td({{"observation", torch::full({E, 3}, static_cast<float>(t))},
                 {"action", torch::arange(E) + t * E},
                 {{"next", "observation"},
                  torch::full({E, 3}, static_cast<float>(t) + 1.0f)},
                 {{"next", "reward"}, torch::ones({E, 1})},
                 {{"next", "done"}, torch::zeros({E, 1}, torch::kBool)},
                 {{"next", "terminated"}, torch::zeros({E, 1}, torch::kBool)}},
                {E});
  if (with_values) {
    td.set("state_value", torch::full({E, 1}, 0.5f));
    td.set({"next", "state_value"}, torch::full({E, 1}, 0.25f));
  }
  return td;
}

RolloutBuffer FilledBuffer(int64_t T, int64_t E, bool with_values = true) {
  RolloutBuffer buf(T, E);
  for (int64_t t = 0; t < T; ++t) buf.step(t, MakeStep(E, t, with_values));
  return buf;
}

}  // namespace

TEST(RolloutBufferTest,
     FirstStepAllocatesTheWholeRolloutAndLaterStepsWriteInPlace) {
  RolloutBuffer buf(5, 3);
  EXPECT_EQ(buf.num_steps(), 5);
  EXPECT_EQ(buf.num_envs(), 3);
  EXPECT_EQ(buf.data().batch_size(), (std::vector<int64_t>{5, 3}));
  EXPECT_TRUE(buf.data().empty());
  buf.step(2, MakeStep(3, 2));
  const at::Tensor obs = buf.data().get("observation");
  EXPECT_EQ(obs.sizes(), (std::vector<int64_t>{5, 3, 3}));
  EXPECT_EQ(buf.data().get({"next", "done"}).sizes(),
            (std::vector<int64_t>{5, 3, 1}));
  EXPECT_TRUE(obs[2].eq(2.0f).all().item<bool>());
  EXPECT_TRUE(obs[0].eq(0.0f).all().item<bool>());  // zero-filled
  for (int64_t t = 0; t < 5; ++t) buf.step(t, MakeStep(3, t));
  EXPECT_TRUE(buf.data().get("observation").is_same(obs));
  EXPECT_TRUE(buf.data().get("action").equal(torch::arange(15).view({5, 3})));
}

// A partial step would leave the previous rollout's values in place (and a
// new key would be zeros in the steps before it): every step brings the
// first step's keys, and a failed step changes nothing.
TEST(RolloutBufferTest,
     AStepWithOtherKeysThanTheFirstThrowsNamingThemAndChangesNothing) {
  RolloutBuffer buf(4, 2);
  for (int64_t t = 0; t < 4; ++t) buf.step(t, MakeStep(2, t));
  buf.data().set("advantage", torch::zeros({4, 2, 1}));  // not a step key
  const Snapshot before = TakeSnapshot(buf.data());
  TensorDict partial = MakeStep(2, 7);
  partial.erase({"next", "reward"});
  ExpectThrowsMsg(
      [&] { buf.step(1, partial); },
      "RolloutBuffer::step: TensorDicts have different keys: missing from "
      "step 1: [('next', 'reward')]");
  ExpectUnchanged(buf.data(), before);
  TensorDict extra = MakeStep(2, 7);
  extra.set("mask", torch::ones({2}, torch::kBool));
  ExpectThrowsMsg(
      [&] { buf.step(2, extra); },
      "RolloutBuffer::step: TensorDicts have different keys: missing from "
      "the first step: [mask]");
  ExpectUnchanged(buf.data(), before);
  extra.erase("action");
  ExpectThrowsMsg(
      [&] { buf.step(3, extra); },
      "RolloutBuffer::step: TensorDicts have different keys: missing from "
      "the first step: [mask]; missing from step 3: [action]");
  ExpectUnchanged(buf.data(), before);
  // The next rollout: the same keys, in another order, are accepted.
  TensorDict reordered(
      {{{"next", "terminated"}, torch::ones({2, 1}, torch::kBool)},
       {{"next", "done"}, torch::ones({2, 1}, torch::kBool)},
       {{"next", "reward"}, torch::full({2, 1}, 3.0f)},
       {{"next", "observation"}, torch::zeros({2, 3})},
       {"action", torch::tensor({7, 8})},
       {"observation", torch::zeros({2, 3})}},
      {2});
  buf.step(0, reordered);
  EXPECT_TRUE(
      buf.data().get({"next", "reward"})[0].eq(3.0f).all().item<bool>());
}

TEST(RolloutBufferTest, StepRejectsAnOutOfRangeStepAndAWrongBatchSize) {
  RolloutBuffer buf(4, 2);
  ExpectThrowsMsg<c10::IndexError>(
      [&] { buf.step(4, MakeStep(2, 0)); },
      "RolloutBuffer::step: step 4 is out of range for a buffer of 4 steps");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { buf.step(-1, MakeStep(2, 0)); },
      "RolloutBuffer::step: step -1 is out of range for a buffer of 4 steps");
  ExpectThrowsMsg(
      [&] { buf.step(0, MakeStep(3, 0)); },
      "RolloutBuffer::step: expected a dict of batch size [2] (one row per "
      "env), got [3]");
  ExpectThrowsMsg(
      [&] { buf.step(0, MakeStep(2, 0).unsqueeze(0)); },
      "RolloutBuffer::step: expected a dict of batch size [2] (one row per "
      "env), got [1, 2]");
  EXPECT_TRUE(buf.data().empty());
}

TEST(RolloutBufferTest, ConstructorWithADeviceGivesStorageOnIt) {
  RolloutBuffer buf(2, 3, at::Device(at::kCPU));
  ASSERT_TRUE(buf.data().device().has_value());
  EXPECT_EQ(*buf.data().device(), at::Device(at::kCPU));
  buf.step(1, MakeStep(3, 1));
  EXPECT_TRUE(buf.data().get("observation").device().is_cpu());
}

TEST(RolloutBufferTest, ConstructorRejectsNonPositiveSizes) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { RolloutBuffer(0, 4); },
      "RolloutBuffer: num_steps and num_envs must be positive, got "
      "num_steps=0, num_envs=4");
}

TEST(RolloutBufferTest, ComputeGaeStoresTheFreeFunctionsResult) {
  RolloutBuffer buf = FilledBuffer(6, 4);
  const TensorDict d = buf.data();
  d.set("state_value", torch::randn({6, 4, 1}));
  d.get({"next", "done"})[2][1] = true;
  d.get({"next", "terminated"})[2][1] = true;
  d.get({"next", "done"})[4][3] = true;  // a truncation
  buf.compute_gae(0.99, 0.95);
  const GaeResult want =
      NaiveGae(d.get({"next", "reward"}), d.get("state_value"),
               d.get({"next", "state_value"}), d.get({"next", "done"}),
               d.get({"next", "terminated"}), 0.99, 0.95);
  const at::Tensor adv = d.get("advantage");
  EXPECT_EQ(adv.sizes(), (std::vector<int64_t>{6, 4, 1}));
  // The buffer's float32 rollout is computed in float (as TorchRL does),
  // the reference in double: a few float roundings apart, which reached
  // 1.3e-6 on some draws (the values are unseeded).
  EXPECT_LE(MaxAbsDiff(adv, want.advantage), 1e-5);
  EXPECT_LE(MaxAbsDiff(d.get("value_target"), want.value_target), 1e-5);
  // A second call writes into the same tensors.
  d.set("state_value", torch::zeros({6, 4, 1}));
  buf.compute_gae(0.99, 0.95);
  EXPECT_TRUE(d.get("advantage").is_same(adv));
  EXPECT_FALSE(adv.allclose(want.advantage.to(at::kFloat)));
}

TEST(RolloutBufferTest,
     ComputeGaeEndsTheEpisodeOnTruncatedEvenWhenDoneIsNotSet) {
  RolloutBuffer buf = FilledBuffer(5, 2);
  const TensorDict d = buf.data();
  d.set("state_value", torch::randn({5, 2, 1}));
  at::Tensor truncated = torch::zeros({5, 2, 1}, torch::kBool);
  truncated[1][0] = true;
  d.set({"next", "truncated"}, truncated);
  buf.compute_gae(0.9, 0.9);
  const GaeResult want =
      NaiveGae(d.get({"next", "reward"}), d.get("state_value"),
               d.get({"next", "state_value"}), truncated,
               d.get({"next", "terminated"}), 0.9, 0.9);
  EXPECT_LE(MaxAbsDiff(d.get("advantage"), want.advantage), 1e-5);
  // Without the truncated key, the recursion crosses step 1.
  d.erase({"next", "truncated"});
  buf.compute_gae(0.9, 0.9);
  EXPECT_GT(MaxAbsDiff(d.get("advantage"), want.advantage), 1e-3);
}

TEST(RolloutBufferTest, ComputeGaeNamesAMissingValueKeyAndChangesNothing) {
  RolloutBuffer buf = FilledBuffer(3, 2, /*with_values=*/false);
  const auto before = tensordict_test::TakeSnapshot(buf.data());
  ExpectThrowsMsg(
      [&] { buf.compute_gae(0.99, 0.95); },
      "RolloutBuffer::compute_gae: missing key state_value (value): set the "
      "critic's values, e.g. from one batched forward pass, before "
      "compute_gae");
  buf.data().set("state_value", torch::zeros({3, 2, 1}));
  ExpectThrowsMsg(
      [&] { buf.compute_gae(0.99, 0.95); },
      "RolloutBuffer::compute_gae: missing key ('next', 'state_value') (next "
      "value): set the critic's values, e.g. from one batched forward pass, "
      "before compute_gae");
  buf.data().erase("state_value");
  tensordict_test::ExpectUnchanged(buf.data(), before);
}

TEST(RolloutBufferTest, ComputeGaeNamesOtherMissingOrMisshapenKeys) {
  RolloutBuffer buf = FilledBuffer(3, 2);
  buf.data().erase({"next", "terminated"});
  ExpectThrowsMsg([&] { buf.compute_gae(0.99, 0.95); },
                  "RolloutBuffer::compute_gae: missing key ('next', "
                  "'terminated') (terminated)");
  ExpectThrowsMsg([&] { buf.compute_gae(0.99, 0.95, GaeKeys().reward("rew")); },
                  "RolloutBuffer::compute_gae: missing key rew (reward)");
  buf.data().set({"next", "terminated"}, torch::zeros({3, 2}, torch::kBool));
  ExpectThrowsMsg([&] { buf.compute_gae(0.99, 0.95); },
                  "RolloutBuffer::compute_gae: key ('next', 'terminated'): "
                  "expected shape [3, 2, 1] (like state_value), got [3, 2]");
  buf.data().set({"next", "terminated"}, torch::zeros({3, 2, 1}, torch::kBool));
  buf.data().set("state_value", torch::zeros({3, 2, 1}, torch::kLong));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { buf.compute_gae(0.99, 0.95); },
      "RolloutBuffer::compute_gae: key state_value: the value must be a "
      "floating-point tensor, got torch.int64");
  EXPECT_FALSE(buf.data().contains("advantage"));
}

TEST(RolloutBufferTest,
     ComputeGaeRejectsOutputKeysItCannotStoreAndWritesNothing) {
  RolloutBuffer buf = FilledBuffer(3, 2);
  ExpectThrowsMsg(
      [&] { buf.compute_gae(0.99, 0.95, GaeKeys().value_target("next")); },
      "RolloutBuffer::compute_gae: cannot store the value target at next: it "
      "holds a TensorDict");
  EXPECT_FALSE(buf.data().contains("advantage"));
  ExpectThrowsMsg(
      [&] {
        buf.compute_gae(0.99, 0.95,
                        GaeKeys().value_target({"action", "target"}));
      },
      "RolloutBuffer::compute_gae: cannot store the value target at "
      "('action', 'target'): action holds a tensor");
  EXPECT_FALSE(buf.data().contains("advantage"));
}

TEST(RolloutBufferTest, ComputeGaeUsesConfiguredKeys) {
  RolloutBuffer buf = FilledBuffer(4, 2);
  const TensorDict d = buf.data();
  d.rename_key_("state_value", "v");
  buf.compute_gae(0.99, 0.95,
                  GaeKeys().value("v").advantage("adv").value_target("ret"));
  EXPECT_TRUE(d.contains("adv"));
  EXPECT_TRUE(d.contains("ret"));
  EXPECT_FALSE(d.contains("advantage"));
  EXPECT_TRUE(d.get("ret").allclose(d.get("adv") + d.get("v")));
}

TEST(RolloutBufferTest, MinibatchesPartitionAShuffledFlatBatch) {
  RolloutBuffer buf = FilledBuffer(8, 4);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const std::vector<TensorDict> mbs = buf.minibatches(4, gen);
  ASSERT_EQ(mbs.size(), 4u);
  std::vector<at::Tensor> actions;
  for (const TensorDict& mb : mbs) {
    EXPECT_EQ(mb.batch_size(), (std::vector<int64_t>{8}));
    EXPECT_EQ(mb.get({"next", "observation"}).sizes(),
              (std::vector<int64_t>{8, 3}));
    // Rows stay whole: observation t goes with action t * 4 + e.
    EXPECT_TRUE(mb.get("observation")
                    .select(1, 0)
                    .to(at::kLong)
                    .equal(mb.get("action").div(4, "floor")));
    actions.push_back(mb.get("action"));
  }
  const at::Tensor all = torch::cat(actions);
  EXPECT_TRUE(std::get<0>(all.sort()).equal(torch::arange(32)));
  EXPECT_FALSE(all.equal(torch::arange(32)));  // shuffled
  // Copies: writing into a minibatch does not touch the buffer.
  mbs[0].get("action").fill_(-1);
  EXPECT_EQ(buf.data().get("action").min().item<int64_t>(), 0);
  // The same generator seed gives the same minibatches.
  at::Generator gen2 = at::make_generator<at::CPUGeneratorImpl>(7);
  EXPECT_TRUE(buf.minibatches(4, gen2)[1].get("action").equal(actions[1]));
}

TEST(RolloutBufferTest, MinibatchesDropTheRemainderRows) {
  RolloutBuffer buf = FilledBuffer(5, 2);
  const std::vector<TensorDict> mbs = buf.minibatches(3);
  ASSERT_EQ(mbs.size(), 3u);
  for (const TensorDict& mb : mbs) {
    EXPECT_EQ(mb.batch_size(), (std::vector<int64_t>{3}));
  }
}

TEST(RolloutBufferTest, MinibatchesRejectABadCountAndAnEmptyBuffer) {
  RolloutBuffer empty(3, 2);
  ExpectThrowsMsg(
      [&] { (void)empty.minibatches(2); },
      "RolloutBuffer::minibatches: the buffer is empty (write the steps with "
      "step() first)");
  RolloutBuffer buf = FilledBuffer(3, 2);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)buf.minibatches(0); },
      "RolloutBuffer::minibatches: num_minibatches must be in [1, 6] "
      "(num_steps * num_envs), got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)buf.minibatches(7); },
      "RolloutBuffer::minibatches: num_minibatches must be in [1, 6] "
      "(num_steps * num_envs), got 7");
}
