// Interop with the reference Python TorchRL (python_reference.h): replay
// buffers this library writes in a storage_dir load in TorchRL, and the
// directories TorchRL's dumps writes open here.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "python_reference.h"
#include "test_util.h"

using nlohmann::json;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::RunPython;
using tensordict_test::TempDir;
using tensordict_test::TutorialPython;
using tensordict_test::WriteFile;

// ---- TorchRL 0.4's replay-buffer directories ------------------------------------

namespace {

using tensordict::PrioritizedSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;

constexpr const char* kNoExtMessage =
    "TENSORDICT_TORCHRL_EXT is not set: TorchRL's PrioritizedSampler needs "
    "its C++ extension, which .ci/torchrl_ext.sh builds";

// The directory of TorchRL's C++ extension (.ci/torchrl_ext.sh), or "".
std::string TorchRLExt() {
  const char* p = std::getenv("TENSORDICT_TORCHRL_EXT");
  return p == nullptr ? std::string() : std::string(p);
}

// Put before every TorchRL script: the reference setup does not build
// TorchRL's extension (its segment trees), so it comes from
// TENSORDICT_TORCHRL_EXT when set.
constexpr const char* kTorchRLPreamble = R"py(
import json, os, sys
import torch, torchrl
from tensordict import TensorDict
_ext = os.environ.get("TENSORDICT_TORCHRL_EXT")
if _ext:
    torchrl.__path__.append(_ext)
    import torchrl._torchrl as _trl
    from torchrl.data.replay_buffers import samplers as _samplers
    for _n in ("SumSegmentTreeFp32", "MinSegmentTreeFp32",
               "SumSegmentTreeFp64", "MinSegmentTreeFp64"):
        setattr(_samplers, _n, getattr(_trl, _n))
from torchrl.data import (LazyMemmapStorage, PrioritizedSampler,
                          RandomSampler, TensorDictReplayBuffer)
)py";

// TorchRL's buffer of capacity 16 with the sampler argv[2] names
// ("random" or "prioritized": alpha 0.7, beta 0.5, eps 1e-6).
constexpr const char* kMakeBuffer = R"py(
def make_buffer():
    sampler = (PrioritizedSampler(16, alpha=0.7, beta=0.5, eps=1e-6)
               if sys.argv[2] == "prioritized" else RandomSampler())
    return TensorDictReplayBuffer(storage=LazyMemmapStorage(16), sampler=sampler)

def state(rb):
    st = rb._storage._storage
    out = {"len": len(rb), "cursor": rb._writer._cursor,
           "obs": st["obs"][:, 0].tolist(), "done": st["next", "done"][:, 0].tolist(),
           "keys": sorted(str(k) for k in st.keys(True, True))}
    if sys.argv[2] == "prioritized":
        mp = rb._sampler._max_priority  # (value, row) from TorchRL 0.14
        out["max_priority"] = float(mp[0] if isinstance(mp, tuple) else mp)
        out["mass"] = [rb._sampler._sum_tree[i] for i in range(16)]
    return out
)py";

// Loads the buffer in argv[1], samples from it and writes its state to
// argv[3].
constexpr const char* kLoadBuffer = R"py(
rb = make_buffer()
rb.loads(sys.argv[1])
s = rb.sample(64)
out = state(rb)
out["sample_consistent"] = bool((s["obs"][:, 0] == -s["obs"][:, 1]).all())
out["sample_index_ok"] = bool((rb._storage._storage["obs"][s["index"]] == s["obs"]).all())
with open(sys.argv[3], "w") as f:
    json.dump(out, f)
)py";

// Fills a buffer with 20 rows (obs [i, -i], done i % 3 == 2; the last 16
// kept), sets priorities (i + 1) / 4 for rows 0..5 when prioritized, dumps
// it in argv[1] and writes its state to argv[3].
constexpr const char* kDumpBuffer = R"py(
rb = make_buffer()
i = torch.arange(20, dtype=torch.float32)
rb.extend(TensorDict({"obs": torch.stack([i, -i], 1),
                      ("next", "done"): (i % 3 == 2).unsqueeze(1)}, [20]))
if sys.argv[2] == "prioritized":
    rb.update_priority(torch.arange(6), (torch.arange(6) + 1.0) / 4)
rb.dumps(sys.argv[1])
with open(sys.argv[3], "w") as f:
    json.dump(state(rb), f)
)py";

// Rows first, ..., first + n - 1 as kDumpBuffer writes them.
TensorDict TorchRLRows(int64_t first, int64_t n) {
  at::Tensor i = torch::arange(first, first + n, torch::kFloat32);
  return TensorDict({{"obs", torch::stack({i, -i}, 1)},
                     {{"next", "done"}, (i.remainder(3) == 2).unsqueeze(1)}},
                    {n});
}

std::vector<double> Column0(const at::Tensor& t) {
  at::Tensor c = t.select(1, 0).to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(),
                             c.data_ptr<double>() + c.numel());
}

// The reference's TorchRL (the same release line as its tensordict).
tensordict::TorchRLVersion ReferenceVersion() {
  return tensordict_test::TensordictAtLeast(0, 14)
             ? tensordict::TorchRLVersion::v0_14
             : tensordict::TorchRLVersion::v0_4;
}

bool SkipTorchRL(bool prioritized) {
  return PyRef().empty() || (prioritized && TorchRLExt().empty());
}

// TorchRL loads a buffer this library wrote in a storage_dir: its rows,
// length, cursor and (prioritized) the trees and the largest priority.
void TorchRLLoadsABufferThisLibraryWrote(bool prioritized) {
  TempDir dir;
  auto options = ReplayBufferOptions(16)
                     .storage_dir(dir / "rb")
                     .seed(0)
                     .torchrl_version(ReferenceVersion());
  if (prioritized)
    options.sampler(PrioritizedSampler().alpha(0.7).beta(0.5).eps(1e-6));
  {
    ReplayBuffer rb(options);
    rb.extend(TorchRLRows(0, 20));
    if (prioritized) {
      rb.update_priority(torch::arange(6), (torch::arange(6) + 1.0) / 4);
      rb.update_priority(torch::tensor({7}), torch::tensor({2.5}));
    }
  }
  const std::string script =
      std::string(kTorchRLPreamble) + kMakeBuffer + kLoadBuffer;
  ASSERT_TRUE(RunPython(
      script,
      {dir / "rb", prioritized ? "prioritized" : "random", dir / "out.json"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  EXPECT_EQ(py["len"], 16);
  EXPECT_EQ(py["cursor"], 4);
  std::vector<double> obs(16);
  for (int r = 0; r < 16; ++r) obs[r] = r < 4 ? 16 + r : r;
  EXPECT_EQ(py["obs"].get<std::vector<double>>(), obs);
  EXPECT_TRUE(py["sample_consistent"].get<bool>());
  EXPECT_TRUE(py["sample_index_ok"].get<bool>());
  if (prioritized) {
    EXPECT_EQ(py["max_priority"].get<double>(), 2.5);
    const auto mass = py["mass"].get<std::vector<double>>();
    for (int r = 0; r < 16; ++r) {
      const double raw = r < 6 ? (r + 1) / 4.0 : r == 7 ? 2.5 : 1.0;
      // TorchRL's trees hold float32.
      EXPECT_NEAR(mass[r], std::pow(raw + 1e-6, 0.7), 1e-6) << r;
    }
  }
}

// This library opens a buffer TorchRL dumped, writes into it, and TorchRL
// loads the result.
void ThisLibraryOpensABufferTorchRLDumped(bool prioritized) {
  TempDir dir;
  const std::string sampler = prioritized ? "prioritized" : "random";
  ASSERT_TRUE(
      RunPython(std::string(kTorchRLPreamble) + kMakeBuffer + kDumpBuffer,
                {dir / "rb", sampler, dir / "dumped.json"}));
  auto options = ReplayBufferOptions(16)
                     .storage_dir(dir / "rb")
                     .seed(0)
                     .torchrl_version(ReferenceVersion());
  if (prioritized)
    options.sampler(PrioritizedSampler().alpha(0.7).beta(0.5).eps(1e-6));
  {
    ReplayBuffer rb(options);
    EXPECT_EQ(rb.size(), 16);
    EXPECT_EQ(rb.cursor(), 4);
    TensorDict st = rb.storage();
    std::vector<double> obs(16);
    for (int r = 0; r < 16; ++r) obs[r] = r < 4 ? 16 + r : r;
    EXPECT_EQ(Column0(st.get("obs")), obs);
    // TorchRL's writer stored each row's index.
    EXPECT_TRUE(at::equal(st.get("index"), torch::arange(16)));
    if (prioritized) {
      const at::Tensor p =
          TensorDict::load_memmap(dir / "rb/priority").get("priority");
      for (int r = 0; r < 16; ++r) {
        const double raw = r < 6 ? (r + 1) / 4.0 : 1.0;
        EXPECT_NEAR(p[r].item<double>(), raw, 1e-5) << r;
      }
    }
    rb.add(TorchRLRows(20, 1)[0]);  // "index" is filled in, as TorchRL does
  }
  ASSERT_TRUE(
      RunPython(std::string(kTorchRLPreamble) + kMakeBuffer + kLoadBuffer,
                {dir / "rb", sampler, dir / "out.json"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  EXPECT_EQ(py["len"], 16);
  EXPECT_EQ(py["cursor"], 5);
  EXPECT_EQ(py["obs"][4], 20.0);
  EXPECT_EQ(py["done"][4], true);
  EXPECT_TRUE(py["sample_index_ok"].get<bool>());
  EXPECT_EQ(py["keys"], json::parse(ReadFile(dir / "dumped.json"))["keys"]);
}

}  // namespace

// Both ways, with TorchRL's RandomSampler and PrioritizedSampler.
#define TD_TORCHRL_TEST(name, fn, prioritized)                   \
  TEST(PythonReference, name) {                                  \
    if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;           \
    if (SkipTorchRL(prioritized)) GTEST_SKIP() << kNoExtMessage; \
    fn(prioritized);                                             \
  }
TD_TORCHRL_TEST(TorchRLLoadsARandomSamplerBufferThisLibraryWrote,
                TorchRLLoadsABufferThisLibraryWrote, false)
TD_TORCHRL_TEST(TorchRLLoadsAPrioritizedBufferThisLibraryWrote,
                TorchRLLoadsABufferThisLibraryWrote, true)
TD_TORCHRL_TEST(ThisLibraryOpensARandomSamplerBufferTorchRLDumped,
                ThisLibraryOpensABufferTorchRLDumped, false)
TD_TORCHRL_TEST(ThisLibraryOpensAPrioritizedBufferTorchRLDumped,
                ThisLibraryOpensABufferTorchRLDumped, true)
#undef TD_TORCHRL_TEST

// The persistence tutorial's replay-buffer section, both ways: its C++ code
// (as in examples/memmap_and_python_interop.cpp) and its Python snippets, as
// they stand in the tutorial, against the reference's TorchRL (the C++ side
// writes for its version: ReplayBufferOptions::torchrl_version).
TEST(PythonReference, TheTutorialsTorchRLSnippetsRun) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (TorchRLExt().empty()) GTEST_SKIP() << kNoExtMessage;
  TempDir dir;
  const std::string actor_rb = dir / "actor_rb";
  {
    ReplayBuffer rb(ReplayBufferOptions(1000)
                        .storage_dir(actor_rb)
                        .torchrl_version(ReferenceVersion())
                        .sampler(PrioritizedSampler().alpha(0.7).beta(0.5)));
    for (int step = 0; step < 3; ++step) {
      torch::Tensor obs = torch::randn({100, 4});
      rb.extend(
          TensorDict({{"obs", obs},
                      {"action", torch::randint(2, {100})},
                      {{"next", "obs"}, obs + 1},
                      {{"next", "done"}, torch::zeros({100, 1}, torch::kBool)}},
                     {100}));
    }
    auto [batch, info] = rb.sample(64);
    rb.update_priority(info.index, torch::rand({64}));
  }
  const std::string load =
      TutorialPython("memmap_and_python_interop.md", "torchrl-load",
                     "\"actor_rb\"", "\"" + actor_rb + "\"");
  ASSERT_FALSE(load.empty());
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + load + R"py(
assert len(rb) == 300, len(rb)
assert batch["obs"].shape == torch.Size([64, 4])
assert (batch["next", "obs"] == batch["obs"] + 1).all()
)py",
                        {}));

  const std::string learner_rb = dir / "learner_rb";
  const std::string dump =
      TutorialPython("memmap_and_python_interop.md", "torchrl-dump",
                     "\"learner_rb\"", "\"" + learner_rb + "\"");
  ASSERT_FALSE(dump.empty());
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + dump, {}));
  ReplayBuffer rb(ReplayBufferOptions(1000)
                      .storage_dir(learner_rb)
                      .torchrl_version(ReferenceVersion()));
  EXPECT_EQ(rb.size(), 1000);
  EXPECT_EQ(rb.cursor(), 200);
  EXPECT_TRUE(at::equal(rb.storage().get("index"), torch::arange(1000)));
  rb.add(TensorDict({{"obs", torch::randn({4})}, {"action", torch::tensor(1)}},
                    {}));
  EXPECT_EQ(rb.storage().get("index")[200].item<int64_t>(), 200);
  EXPECT_EQ(rb.cursor(), 201);
}
