// Mixed replay against TorchRL 0.14 (python_reference.h): how
// OfflineToOnlineReplayBuffer splits each batch between its two buffers,
// before and after anneal, and the layout of ReplayBufferEnsemble's sample
// with sample_from_all (one sub-batch per buffer, stacked).
#include <gtest/gtest.h>
#include <tensordict/replay_ensemble.h>
#include <tensordict/tensordict.h>

#include <memory>
#include <string>
#include <vector>

#include "python_reference.h"
#include "test_paths.h"

using tensordict::OfflineToOnlineReplayBuffer;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferEnsemble;
using tensordict::ReplayBufferEnsembleOptions;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

const std::vector<double> kFractions = {0.5, 0.3, 0.25, 0.7, 0.1, 0.05};
const std::vector<int64_t> kSizes = {1, 2, 5, 7, 8, 33};
const std::vector<int64_t> kAnnealSteps = {0, 3, 5, 7, 10, 12};

// argv[1]: where TorchRL's counts go. Offline rows hold 0..99, online rows
// 1000 and up: a row's origin is its value.
constexpr const char* kScript = R"py(
import sys, torch
from tensordict import TensorDict
from torchrl.data import (LazyTensorStorage, OfflineToOnlineReplayBuffer,
                          ReplayBuffer, ReplayBufferEnsemble)

def filled(first, n):
    rb = ReplayBuffer(storage=LazyTensorStorage(200))
    rb.extend(TensorDict({"x": torch.arange(first, first + n, dtype=torch.float32)}, [n]))
    return rb

fractions = [0.5, 0.3, 0.25, 0.7, 0.1, 0.05]
sizes = [1, 2, 5, 7, 8, 33]
split = torch.zeros(len(fractions), len(sizes), dtype=torch.int64)
for i, f in enumerate(fractions):
    o2o = OfflineToOnlineReplayBuffer(filled(0, 100), online_capacity=200, offline_fraction=f)
    o2o.extend(TensorDict({"x": torch.arange(1000, 1050, dtype=torch.float32)}, [50]))
    for j, n in enumerate(sizes):
        split[i, j] = int((o2o.sample(n)["x"] < 1000).sum())

steps = [0, 3, 5, 7, 10, 12]
annealed = torch.zeros(len(steps), dtype=torch.int64)
o2o = OfflineToOnlineReplayBuffer(filled(0, 100), online_capacity=200, offline_fraction=0.6)
o2o.extend(TensorDict({"x": torch.arange(1000, 1050, dtype=torch.float32)}, [50]))
for k, step in enumerate(steps):
    o2o.anneal(step, 10)
    annealed[k] = int((o2o.sample(9)["x"] < 1000).sum())

empty_online = OfflineToOnlineReplayBuffer(filled(0, 100), online_capacity=200, offline_fraction=0.5)
all_offline = int((empty_online.sample(8)["x"] < 1000).sum())

ens = ReplayBufferEnsemble(filled(0, 100), filled(1000, 100), sample_from_all=True)
s = ens.sample(8)
TensorDict({"split": split, "annealed": annealed,
            "all_offline": torch.tensor(all_offline),
            "ensemble_shape": torch.tensor(list(s.batch_size)),
            "ensemble_origin": (s["x"] >= 1000).to(torch.int64)}, []).memmap(sys.argv[1])
)py";

std::shared_ptr<ReplayBuffer> Filled(float first, int64_t n) {
  auto rb = std::make_shared<ReplayBuffer>(ReplayBufferOptions(200).seed(1));
  (void)rb->extend(TensorDict(
      {{"x", at::arange(first, first + static_cast<float>(n))}}, {n}));
  return rb;
}

int64_t Offline(const TensorDict& batch) {
  return batch.get("x").lt(1000).sum().item<int64_t>();
}

}  // namespace

TEST(PythonReference, MixedReplayMatchesTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 14)) {
    GTEST_SKIP() << "OfflineToOnlineReplayBuffer is TorchRL 0.14's (CI's "
                    "Python 0.14 stage)";
  }
  TempDir dir("td_mixed_replay");
  ASSERT_TRUE(RunPython(kScript, {dir / "out"}));
  const TensorDict py = TensorDict::load_memmap(dir / "out");

  const at::Tensor split = py.get("split");
  for (size_t i = 0; i < kFractions.size(); ++i) {
    OfflineToOnlineReplayBuffer rb(Filled(0, 100), ReplayBufferOptions(200),
                                   kFractions[i]);
    (void)rb.extend(TensorDict({{"x", at::arange(1000.0f, 1050.0f)}}, {50}));
    for (size_t j = 0; j < kSizes.size(); ++j) {
      EXPECT_EQ(Offline(rb.sample(kSizes[j]).first),
                split[static_cast<int64_t>(i)][static_cast<int64_t>(j)]
                    .item<int64_t>())
          << "offline_fraction " << kFractions[i] << ", batch " << kSizes[j];
    }
  }

  OfflineToOnlineReplayBuffer annealing(Filled(0, 100),
                                        ReplayBufferOptions(200), 0.6);
  (void)annealing.extend(
      TensorDict({{"x", at::arange(1000.0f, 1050.0f)}}, {50}));
  for (size_t k = 0; k < kAnnealSteps.size(); ++k) {
    annealing.anneal(kAnnealSteps[k], 10);
    EXPECT_EQ(Offline(annealing.sample(9).first),
              py.get("annealed")[static_cast<int64_t>(k)].item<int64_t>())
        << "anneal(" << kAnnealSteps[k] << ", 10)";
  }

  OfflineToOnlineReplayBuffer empty_online(Filled(0, 100),
                                           ReplayBufferOptions(200), 0.5);
  EXPECT_EQ(Offline(empty_online.sample(8).first),
            py.get("all_offline").item<int64_t>());

  ReplayBufferEnsemble all({Filled(0, 100), Filled(1000, 100)},
                           ReplayBufferEnsembleOptions().sample_from_all(true));
  const TensorDict batch = all.sample(8).first;
  EXPECT_EQ(
      at::tensor(batch.batch_size().vec()).equal(py.get("ensemble_shape")),
      true);
  EXPECT_TRUE(
      batch.get("x").ge(1000).to(at::kLong).equal(py.get("ensemble_origin")));
}
