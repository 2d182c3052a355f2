// HERReplayBuffer against TorchRL 0.14's (python_reference.h): the same
// episodes written in the same pieces, the same sampled rows (TorchRL's
// buffer takes ours through a sampler that returns them) and the same seed
// (torch.manual_seed there): every strategy relabels the same rows with the
// same goals and rewards, in a buffer that is not full, one that wrapped
// to row 0, and one that wrapped elsewhere with no episode across the end
// of the storage (where TorchRL's episode lookup and ours agree).
#include <gtest/gtest.h>
#include <tensordict/her.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "her_test_util.h"
#include "python_reference.h"
#include "test_paths.h"

using tensordict::HEROptions;
using tensordict::HERReplayBuffer;
using tensordict::HindsightStrategy;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

// argv[1]: the cases (rows, capacity, chunk, per strategy the sampled
// index, the ratio and the seed); argv[2]: TorchRL's relabelled batches.
constexpr const char* kScript = R"py(
import sys, torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage
from torchrl.data.replay_buffers.her import HERReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler

class Given(Sampler):
    def __init__(self):
        self.index = None
    def sample(self, storage, batch_size):
        return self.index, {}
    def state_dict(self):
        return {}
    def load_state_dict(self, state_dict):
        pass
    def _empty(self):
        pass
    def dumps(self, path):
        pass
    def loads(self, path):
        pass

def reward(td):
    return -(td["next", "achieved_goal"] - td["desired_goal"]).abs().sum(-1, keepdim=True)

cases = TensorDict.load_memmap(sys.argv[1])
out = {}
for name in cases.keys():
    case = cases[name]
    rows = case["rows"]
    chunk = int(case["chunk"])
    for strategy in ["future", "final", "episode", "random"]:
        given = Given()
        rb = HERReplayBuffer(reward_fn=reward, her_ratio=float(case[strategy, "ratio"]),
                             strategy=strategy, storage=LazyTensorStorage(int(case["capacity"])),
                             sampler=given)
        for start in range(0, rows.shape[0], chunk):
            rb.extend(rows[start:start + chunk])
        given.index = case[strategy, "index"]
        torch.manual_seed(int(case[strategy, "seed"]))
        data = rb.sample(given.index.numel())
        out[name + "_" + strategy] = data.select("desired_goal", ("next", "desired_goal"),
                                                 ("next", "reward")).clone()
TensorDict(out, []).memmap(sys.argv[2])
)py";

struct Case {
  std::string name;
  TensorDict rows;
  int64_t capacity;
  int64_t chunk;
};

const std::vector<std::pair<const char*, HindsightStrategy>> kStrategies = {
    {"future", HindsightStrategy::kFuture},
    {"final", HindsightStrategy::kFinal},
    {"episode", HindsightStrategy::kEpisode},
    {"random", HindsightStrategy::kRandom}};

}  // namespace

TEST(PythonReference, HindsightRelabellingMatchesTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 14)) {
    GTEST_SKIP() << "HERReplayBuffer is TorchRL 0.14's (CI's Python 0.14 "
                    "stage)";
  }
  using tensordict_test::Episodes;
  const std::vector<Case> cases = {
      // 13 rows of 64, the last episode still running.
      {"open", Episodes({3, 5, 1, 4}, 0, true), 64, 13},
      // 40 rows into 20, in pieces of 10: full, the cursor back at 0.
      {"wrapped", Episodes({7, 6, 9, 5, 8, 5}), 20, 10},
      // 13 rows into 10: full, the cursor at 3, an episode ends at row 9.
      {"cursor", Episodes({4, 6, 3}), 10, 10},
  };
  TempDir dir("td_her_pyref");
  TensorDict input({}, {});
  std::vector<std::vector<TensorDict>> ours(cases.size());
  uint64_t seed = 17;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    TensorDict entry({{"rows", k.rows},
                      {"capacity", at::tensor(k.capacity)},
                      {"chunk", at::tensor(k.chunk)}},
                     {});
    for (const auto& [name, strategy] : kStrategies) {
      const double ratio = strategy == HindsightStrategy::kFinal ? 1.0 : 0.75;
      HERReplayBuffer rb(
          tensordict_test::Reward, ReplayBufferOptions(k.capacity).seed(seed),
          HEROptions().strategy(strategy).her_ratio(ratio).seed(seed));
      const int64_t n = k.rows.batch_size()[0];
      for (int64_t start = 0; start < n; start += k.chunk) {
        (void)rb.extend(k.rows.index(
            {at::indexing::Slice(start, std::min(n, start + k.chunk))}));
      }
      auto [batch, info] = rb.sample(16);
      ours[c].push_back(batch);
      entry.set({name, "index"}, info.index);
      entry.set({name, "ratio"}, at::tensor(ratio, at::kDouble));
      entry.set({name, "seed"}, at::tensor(static_cast<int64_t>(seed)));
      ++seed;
    }
    input.set(k.name, entry);
  }
  input.memmap(dir / "in");
  ASSERT_TRUE(RunPython(kScript, {dir / "in", dir / "out"}));
  const TensorDict py = TensorDict::load_memmap(dir / "out");
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t s = 0; s < kStrategies.size(); ++s) {
      const std::string name = cases[c].name + "_" + kStrategies[s].first;
      SCOPED_TRACE(name);
      for (const tensordict::NestedKey& key :
           {tensordict::NestedKey("desired_goal"),
            tensordict::NestedKey({"next", "desired_goal"}),
            tensordict::NestedKey({"next", "reward"})}) {
        EXPECT_TRUE(
            at::equal(ours[c][s].get(key), py.get_tensordict(name).get(key)))
            << key << "\nours:\n"
            << ours[c][s].get(key) << "\nTorchRL's:\n"
            << py.get_tensordict(name).get(key);
      }
    }
  }
}
