// The collectors (tensordict/collectors.h) against the reference Python
// TorchRL 0.14 (python_reference.h): a C++ Collector and TorchRL's over
// PendulumEnv with one deterministic policy and seed give the same batches
// (keys, shapes, values, trajectory ids, split_trajs' padding and masks),
// a buffer directory this library's collector filled loads in TorchRL
// and trains there, and a Python learner drives a C++ actor's collector
// (serve_learner) over Gloo. TorchRL 0.4 has no torchrl.envs.PendulumEnv and no
// torchrl.collectors.Collector: the tests skip for it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "count_env.h"
#include "dist_util.h"
#include "python_reference.h"
#include "torchrl_reference.h"

namespace {

using nlohmann::json;
using tensordict::Collector;
using tensordict::CollectorOptions;
using tensordict::PendulumEnv;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict::TensorDictModule;
using tensordict_test::ExpectSameDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::PyRun;
using tensordict_test::ReadFile;
using tensordict_test::RunTorchRL;
using tensordict_test::TempDir;

constexpr const char* kNo014Message =
    "the reference TorchRL has no torchrl.envs.PendulumEnv (TorchRL 0.4): the "
    "collectors are TorchRL 0.14's";

// The trajectories are bit-identical with the reference's own torch
// (python_envs_test.cpp); room for a LibTorch built otherwise.
constexpr double kTolerance = 1e-5;

// The policy of both sides: a torque from "th" and "thdot", clipped.
TensorDictModule Policy() {
  return TensorDictModule(
      [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {(2.0 * in[0].cos() * in[1]).clamp(-2.0, 2.0).unsqueeze(-1)};
      },
      {"th", "thdot"}, {"action"});
}

// TorchRL's Collector over its PendulumEnv seeded 5, with `policy`, 100
// frames per batch, 300 in all, trajectories of 40 steps at most,
// split_trajs argv[2] ("0" or "1"); the batches to argv[1] as "0", "1",
// "2".
constexpr const char* kCollect = R"py(
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.collectors import Collector
from torchrl.envs import PendulumEnv
policy = TensorDictModule(
    lambda th, thdot: (2.0 * th.cos() * thdot).clamp(-2.0, 2.0).unsqueeze(-1),
    in_keys=["th", "thdot"], out_keys=["action"])
env = PendulumEnv()
env.set_seed(5)
collector = Collector(env, policy, frames_per_batch=100, total_frames=300,
                      max_frames_per_traj=40, split_trajs=sys.argv[2] == "1")
batches = {str(i): batch.clone() for i, batch in enumerate(collector)}
collector.shutdown()
TensorDict(batches, []).memmap(sys.argv[1])
)py";

void ExpectTheBatchesOfTorchRL(bool split_trajs) {
  SCOPED_TRACE(split_trajs ? "split_trajs" : "whole batches");
  TempDir dir("td_pycollectors");
  const PyRun run =
      RunTorchRL(kCollect, {dir / "out", split_trajs ? "1" : "0"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");

  auto env = std::make_unique<PendulumEnv>();
  env->set_seed(5);
  Collector collector(std::move(env), Policy(),
                      CollectorOptions(100)
                          .total_frames(300)
                          .max_frames_per_traj(40)
                          .split_trajs(split_trajs));
  int i = 0;
  for (const TensorDict& batch : collector) {
    SCOPED_TRACE("batch " + std::to_string(i));
    const TensorDict expected = theirs.get_tensordict(std::to_string(i));
    ExpectSameDict(batch, expected, kTolerance);
    ++i;
  }
  EXPECT_EQ(i, 3);
  // Trajectories of 40 steps: ids 0, 1, 2 in the first batch.
  const at::Tensor ids =
      theirs.get_tensordict("0").get({"collector", "traj_ids"}).reshape({-1});
  EXPECT_EQ(ids.max().item<int64_t>(), 2);
}

TEST(PythonReference, CollectorsBatchesMatchTorchRLs) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheBatchesOfTorchRL(false);
}

TEST(PythonReference, CollectorsSplitTrajsMatchTorchRLs) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  ExpectTheBatchesOfTorchRL(true);
}

// Loads the buffer directory argv[1] (capacity 400) in TorchRL, samples
// from it and trains a linear policy on its actions for 50 steps; writes
// the size, the keys and the first and last losses to argv[2].
constexpr const char* kTrain = R"py(
from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(400))
rb.loads(sys.argv[1])
torch.manual_seed(0)
net = torch.nn.Linear(2, 1)
opt = torch.optim.Adam(net.parameters(), lr=0.05)
losses = []
for _ in range(50):
    s = rb.sample(64)
    x = torch.stack([s["th"].cos() * s["thdot"], s["th"]], -1)
    loss = (net(x) - s["action"]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
keys = sorted(str(k) for k in rb._storage._storage.keys(True, True))
with open(sys.argv[2], "w") as f:
    json.dump({"len": len(rb), "keys": keys, "first": losses[0],
               "last": losses[-1]}, f)
)py";

// A C++ collector's batches, written by the collector into a buffer with
// a storage directory, load in TorchRL 0.14 and train there.
TEST(PythonReference, CollectorsBufferDirectoryTrainsInTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pycollectors");
  {
    ReplayBuffer rb(ReplayBufferOptions(400).torchrl_version(
        tensordict::TorchRLVersion::v0_14));
    auto env = std::make_unique<PendulumEnv>(std::vector<int64_t>{4});
    env->set_seed(3);
    Collector collector(
        std::move(env), Policy(),
        CollectorOptions(100).total_frames(300).replay_buffer(&rb));
    for (const TensorDict& batch : collector) EXPECT_TRUE(batch.empty());
    EXPECT_EQ(rb.size(), 300);
    rb.dumps(dir / "dump");
  }
  const PyRun run = RunTorchRL(kTrain, {dir / "dump", dir / "out.json"});
  ASSERT_NE(run, PyRun::kFailed);
  if (run == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;
  const json py = json::parse(ReadFile(dir / "out.json"));
  EXPECT_EQ(py["len"], 300);
  const auto keys = py["keys"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "('collector', 'traj_ids')"),
            keys.end());
  EXPECT_LT(py["last"].get<double>(), py["first"].get<double>() / 4);
}

// A Python learner (rank 0 of a Gloo group at 127.0.0.1:argv[1]) drives
// the C++ actor's `serve_learner`: its command is tensordict.nn's policy
// weights (a Linear(1, 3) whose argmax is action 2 everywhere) and a stop
// flag; it receives two batches (`from_remote_init`, then a consolidated
// `recv`), tells the actor to stop, and writes the batches to argv[2].
constexpr const char* kLearner = R"py(
import torch.distributed as dist
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                        rank=0, world_size=2)
linear = torch.nn.Linear(1, 3)
with torch.no_grad():
    linear.weight.zero_()
    linear.bias.copy_(torch.tensor([0.0, 0.0, 5.0]))
policy = TensorDictSequential(
    TensorDictModule(linear, in_keys=["obs"], out_keys=["logits"]),
    TensorDictModule(lambda logits: logits.argmax(-1), in_keys=["logits"],
                     out_keys=["action"]))
command = TensorDict({"stop": torch.zeros(1, dtype=torch.bool),
                      "weights": TensorDict.from_module(policy)}, [])
batches = {}
for i in range(2):
    command.send(dst=1)
    if i == 0:
        batch = TensorDict.from_remote_init(src=1)
    else:
        batch.recv(src=1, consolidated=True)
    batches[str(i)] = batch.clone()
command["stop"].fill_(True)
command.send(dst=1)
TensorDict(batches, []).memmap(sys.argv[2])
dist.destroy_process_group()
)py";

TEST(PythonReference, CollectorsAPythonLearnerDrivesACppActor) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  // TorchRL 0.4's tensordict has no from_remote_init: skip before the
  // actor waits for a learner.
  const PyRun version = RunTorchRL("", {});
  ASSERT_NE(version, PyRun::kFailed);
  if (version == PyRun::kTorchRL04) GTEST_SKIP() << kNo014Message;
  TempDir dir("td_pycollectors");
  const int port = tensordict_test::FreePort();
  std::string actor_error = "the actor did not finish";
  std::thread actor([&] {
    try {
      tensordict::GlooGroupOptions options;
      options.port = port;
      options.python_world = true;
      options.timeout = std::chrono::seconds(60);
      const tensordict::Group pg = tensordict::make_gloo_group(1, 2, options);
      const TensorDictModule logits(torch::nn::Linear(1, 3), {"obs"},
                                    {"logits"});
      const TensorDictModule argmax(
          [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
            return {in[0].argmax(-1)};
          },
          {"logits"}, {"action"});
      Collector collector(
          std::make_unique<tensordict_test::CountEnv>(
              std::vector<int64_t>{2, 3, 0}, std::vector<int64_t>{0, 0, 4}),
          tensordict::TensorDictSequential({logits, argmax}),
          CollectorOptions(12));
      tensordict::serve_learner(collector, pg, 0);
      actor_error.clear();
    } catch (const std::exception& e) {
      actor_error = e.what();
    }
  });
  const PyRun run = RunTorchRL(kLearner, {std::to_string(port), dir / "out"});
  actor.join();
  ASSERT_EQ(run, PyRun::kDone);
  EXPECT_EQ(actor_error, "");
  const TensorDict theirs = TensorDict::load_memmap(dir / "out");
  for (const char* i : {"0", "1"}) {
    SCOPED_TRACE(std::string("batch ") + i);
    const TensorDict batch = theirs.get_tensordict(i);
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({3, 4}));
    EXPECT_TRUE((batch.get("action") == 2).all().item<bool>());
  }
  const at::Tensor ids =
      theirs.get_tensordict("0").get({"collector", "traj_ids"});
  EXPECT_TRUE(at::equal(
      ids, at::tensor({0, 0, 3, 3, 1, 1, 1, 4, 2, 2, 2, 2}).view({3, 4})));
}

}  // namespace
