// MultiStepTransform (tensordict/multi_step.h): a stream cut into batches
// comes out as one multi_step over the whole stream would (every step but
// the last n_steps, once, with its whole window), short first batches, the
// kept steps a copy, refused batches keep what was kept, reset, and the
// argument errors.
#include <gtest/gtest.h>
#include <tensordict/multi_step.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "test_util.h"

using tensordict::MultiStepTransform;
using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;

namespace {

// Two envs, `steps` steps: obs t, next obs t + 1, reward t + 1 (env 0) or
// 2 (t + 1) (env 1), an episode end every 5 steps in env 0 and every 7 in
// env 1.
TensorDict Stream(int64_t steps) {
  const at::Tensor t = torch::arange(steps, torch::kFloat);
  const at::Tensor obs = torch::stack({t, t + 100}).unsqueeze(-1);
  const at::Tensor reward = torch::stack({t + 1, 2 * (t + 1)}).unsqueeze(-1);
  const at::Tensor idx = torch::arange(steps);
  const at::Tensor done =
      torch::stack({idx.remainder(5).eq(4), idx.remainder(7).eq(6)})
          .unsqueeze(-1);
  return TensorDict({{"obs", obs},
                     {{"next", "obs"}, obs + 1},
                     {{"next", "reward"}, reward},
                     {{"next", "done"}, done}},
                    {2, steps});
}

TensorDict Steps(const TensorDict& td, int64_t from, int64_t to) {
  return td.index({at::indexing::Slice(), at::indexing::Slice(from, to)});
}

void ExpectSameLeaves(const TensorDict& got, const TensorDict& want) {
  ASSERT_EQ(got.batch_size().vec(), want.batch_size().vec());
  ASSERT_EQ(got.keys(true, true), want.keys(true, true));
  for (const NestedKey& key : want.keys(true, true)) {
    EXPECT_TRUE(at::equal(got.get(key), want.get(key))) << key;
  }
}

}  // namespace

// Batches of 6, 2, 9, 1 and 12 steps: the outputs, joined, are multi_step
// over the 30 steps at once, but its last 3 (whose windows the stream has
// not finished); the kept steps are the last 3.
TEST(MultiStepTransform, BatchesComeOutAsOneStream) {
  const TensorDict stream = Stream(30);
  MultiStepTransform transform(3, 0.9);
  std::vector<TensorDict> parts;
  std::vector<int64_t> lengths;
  int64_t at = 0;
  for (int64_t len : {6, 2, 9, 1, 12}) {
    parts.push_back(transform(Steps(stream, at, at + len)));
    lengths.push_back(parts.back().batch_size()[1]);
    at += len;
  }
  EXPECT_EQ(lengths, std::vector<int64_t>({3, 2, 9, 1, 12}));
  const TensorDict whole = tensordict::multi_step(stream, 3, 0.9);
  ExpectSameLeaves(tensordict::cat(parts, 1), Steps(whole, 0, 27));
  ExpectSameLeaves(transform.kept(), Steps(stream, 27, 30));
  // Without the kept steps, the windows at a batch's end are cut short.
  const TensorDict alone = tensordict::multi_step(Steps(stream, 0, 6), 3, 0.9);
  EXPECT_FALSE(at::equal(Steps(alone, 0, 6).get("steps_to_next_obs"),
                         Steps(whole, 0, 6).get("steps_to_next_obs")));
}

// Fewer steps than n_steps: nothing comes out yet ([2, 0]), all are kept.
TEST(MultiStepTransform, ShortBatchesAreKept) {
  const TensorDict stream = Stream(8);
  MultiStepTransform transform(4, 0.5);
  EXPECT_EQ(transform(Steps(stream, 0, 2)).batch_size().vec(),
            std::vector<int64_t>({2, 0}));
  EXPECT_EQ(transform(Steps(stream, 2, 4)).batch_size().vec(),
            std::vector<int64_t>({2, 0}));
  const TensorDict out = transform(Steps(stream, 4, 8));
  ExpectSameLeaves(out, Steps(tensordict::multi_step(stream, 4, 0.5), 0, 4));
  transform.reset();
  EXPECT_TRUE(transform.kept().empty());
  EXPECT_EQ(transform(Steps(stream, 0, 5)).batch_size().vec(),
            std::vector<int64_t>({2, 1}));
}

// The kept steps are a copy: a collector may write its next batch into the
// same memory.
TEST(MultiStepTransform, KeptStepsAreACopy) {
  const TensorDict stream = Stream(12);
  MultiStepTransform transform(3, 0.9);
  const TensorDict batch = Steps(stream, 0, 6).clone();
  (void)transform(batch);
  const TensorDict kept = transform.kept().clone();
  for (const NestedKey& key : batch.keys(true, true)) {
    (void)batch.get(key).zero_();
  }
  ExpectSameLeaves(transform.kept(), kept);
  const TensorDict out = transform(Steps(stream, 6, 12));
  ExpectSameLeaves(out, Steps(tensordict::multi_step(stream, 3, 0.9), 3, 9));
}

// A refused batch keeps what was kept: the next good batch continues the
// stream.
TEST(MultiStepTransform, ARefusedBatchKeepsTheStream) {
  const TensorDict stream = Stream(12);
  MultiStepTransform transform(3, 0.9);
  (void)transform(Steps(stream, 0, 5));
  const tensordict_test::Snapshot before =
      tensordict_test::TakeSnapshot(transform.kept());
  ExpectThrowsMsg(
      [&] {
        (void)transform(Steps(stream, 5, 8).exclude({{"next", "reward"}}));
      },
      "MultiStepTransform: the batch does not continue the kept steps: cat: "
      "TensorDicts have different keys: missing from input 1: [('next', "
      "'reward')]");
  EXPECT_THROW((void)transform(Steps(stream, 5, 8).exclude({"obs"})),
               c10::Error);
  ExpectThrowsMsg(
      [&] {
        (void)transform(stream.index({0, 0}));
      },
      "MultiStepTransform: the batch needs a time dim (its last "
      "batch dim), got batch size []");
  tensordict_test::ExpectUnchanged(transform.kept(), before);
  const TensorDict out = transform(Steps(stream, 5, 12));
  MultiStepTransform fresh(3, 0.9);
  ExpectThrowsMsg(
      [&] {
        (void)fresh(Steps(stream, 0, 5).exclude({{"next", "reward"}}));
      },
      "multi_step: missing key ('next', 'reward') (reward)");
  EXPECT_TRUE(fresh.kept().empty());
  ExpectSameLeaves(out, Steps(tensordict::multi_step(stream, 3, 0.9), 2, 9));
}

TEST(MultiStepTransform, BadArgumentsThrow) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { MultiStepTransform t(0, 0.9); },
      "MultiStepTransform: n_steps must be at least 1, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] { MultiStepTransform t(2, 0.0); },
      "MultiStepTransform: gamma must be in (0, 1], got 0");
}
