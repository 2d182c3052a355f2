// RemoteCollectors and serve_learner (tensordict/collectors.h): a learner
// (this test, rank 0) and an actor process (dist_peer.cpp's
// "serve_collector") over Gloo: the actor acts with the learner's weights,
// the learner gets its batches, and the learner's shutdown ends the actor.
#include <gtest/gtest.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <chrono>
#include <string>
#include <vector>

#include "dist_util.h"
#include "test_paths.h"
#include "test_util.h"

using namespace std::chrono_literals;
using tensordict::RemoteCollectors;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict::TensorDictSequential;
using tensordict_test::ExpectThrowsMsg;

namespace {

std::vector<int64_t> Values(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

}  // namespace

TEST(RemoteCollectors, AnActorServesTheLearnerWithTheLearnersWeights) {
  const int port = tensordict_test::FreePort();
  const pid_t actor = tensordict_test::Spawn({tensordict_test::DistPeerPath(),
                                              "serve_collector", "1", "2",
                                              std::to_string(port), "20000"});
  ASSERT_GT(actor, 0);
  tensordict::GlooGroupOptions options;
  options.port = port;
  options.timeout = 20s;
  const tensordict::Group pg = tensordict::make_gloo_group(0, 2, options);

  // The learner's policy, as the actor's: its weights make action 2 the
  // argmax of every row.
  torch::nn::Linear linear(1, 3);
  {
    const at::NoGradGuard no_grad;
    linear->weight.zero_();
    linear->bias.copy_(at::tensor({0.0F, 0.0F, 5.0F}));
  }
  const TensorDictModule logits(linear, {"obs"}, {"logits"});
  const TensorDictModule argmax(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0].argmax(-1)};
      },
      {"logits"}, {"action"});
  const TensorDictSequential learner({logits, argmax});
  {
    RemoteCollectors collectors(pg, {1}, tensordict::from_module(learner), 24);
    int batches = 0;
    for (const TensorDict& batch : collectors) {
      EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({1, 3, 4}));
      EXPECT_TRUE((batch.get("action") == 2).all().item<bool>());
      if (batches == 0) {
        EXPECT_EQ(Values(batch.get({"collector", "traj_ids"})),
                  std::vector<int64_t>({0, 0, 3, 3, 1, 1, 1, 4, 2, 2, 2, 2}));
      }
      ++batches;
    }
    EXPECT_EQ(batches, 2);
    EXPECT_EQ(collectors.frames(), 24);
    ExpectThrowsMsg([&] { (void)collectors.next(); },
                    "RemoteCollectors: total_frames (24) were received");
  }  // the destructor tells the actor to stop
  EXPECT_EQ(tensordict_test::Reap(actor, 30000ms), 0);

  ExpectThrowsMsg<c10::ValueError>(
      [&] { RemoteCollectors none(pg, {}, TensorDict()); },
      "RemoteCollectors: expected at least one actor rank");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { RemoteCollectors self(pg, {0}, TensorDict()); },
      "RemoteCollectors: actor rank 0 is not another rank of the group of "
      "size 2");
}
