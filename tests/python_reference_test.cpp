// Interop with the reference Python tensordict 0.4.0: memmap directories both
// ways, with keys that need care as file names.
//
// ../shared/python-reference/setup.sh makes the reference importable and
// prints, last, the command prefix that runs it (such as
// `PYTHONPATH=~/.cache/tensordict-pyref/py /usr/bin/python3`). These tests
// run it from the environment variable TENSORDICT_PYREF and are skipped when
// it is not set, so `./dev test` never depends on Python. CI sets it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../examples/cartpole.h"
#include "dist_util.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tensordict::TensorDict;
using tensordict_test::IsRegularFile;
using tensordict_test::TempDir;

constexpr const char* kSkipMessage =
    "TENSORDICT_PYREF is not set: run ../shared/python-reference/setup.sh and "
    "set TENSORDICT_PYREF to the command prefix it prints last";

// The command prefix that runs the reference Python, or "" when unset.
std::string PyRef() {
  const char* p = std::getenv("TENSORDICT_PYREF");
  return p == nullptr ? std::string() : std::string(p);
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs the Python `script` with `args` (paths without single quotes) under
// the reference. Adds a test failure with Python's output when it fails.
bool RunPython(const std::string& script,
               const std::vector<std::string>& args) {
  TempDir tmp("td_pyref");
  const std::string file = tmp / "script.py";
  WriteFile(file, script);
  std::string cmd = PyRef() + " -W ignore '" + file + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run: " << cmd;
    return false;
  }
  std::string output;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << "the reference Python failed (status " << status
                  << "): " << cmd << "\n"
                  << output;
    return false;
  }
  return true;
}

// Keys that need care as file names, and the file each is stored in.
// Python 0.4 reads raw names only, so it skips the escaped entries.
struct KeyCase {
  std::vector<std::string> key;
  std::string file;  // relative to the root directory
  bool escaped;
};

const std::vector<KeyCase>& Cases() {
  static const std::vector<KeyCase> cases = {
      {{"obs"}, "obs.memmap", false},
      {{"a b"}, "a b.memmap", false},
      {{"100%"}, "100%.memmap", false},
      {{"caf\xc3\xa9"}, "caf\xc3\xa9.memmap", false},
      {{"q?*"}, "q?*.memmap", false},
      {{"sub dir", "k 2"}, "sub dir/k 2.memmap", false},
      {{"a/b"}, "a%2Fb.memmap", true},
      {{"a%20b"}, "a%2520b.memmap", true},
  };
  return cases;
}

tensordict::NestedKey ToNestedKey(const std::vector<std::string>& key) {
  return key.size() == 1 ? tensordict::NestedKey(key[0])
                         : tensordict::NestedKey({key[0], key[1]});
}

// Leaf i holds [i, i + 0.5], so every value tells its key.
at::Tensor Value(size_t i) {
  return torch::tensor({static_cast<double>(i), i + 0.5}, torch::kFloat64);
}

// Reads a directory and writes {"keys": [[...], ...], "values": [[...], ...]}
// (keys(True, True) order) to the file argv[2].
constexpr const char* kLoadScript = R"(
import json, sys
from tensordict import TensorDict
td = TensorDict.load_memmap(sys.argv[1])
keys = [list(k) if isinstance(k, tuple) else [k] for k in td.keys(True, True)]
values = [td.get(tuple(k)).tolist() for k in keys]
with open(sys.argv[2], "w") as f:
    json.dump({"keys": keys, "values": values}, f)
)";

TEST(PythonReference, Tensordict04LoadsWhatThisLibraryWritesWithRawKeyNames) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  TensorDict td({}, {2});
  for (size_t i = 0; i < Cases().size(); ++i) {
    td.set(ToNestedKey(Cases()[i].key), Value(i));
  }
  td.memmap_(dir / "td");
  for (const auto& c : Cases()) {
    ASSERT_TRUE(IsRegularFile(dir / ("td/" + c.file))) << c.file;
  }
  ASSERT_TRUE(RunPython(kLoadScript, {dir / "td", dir / "out.json"}));
  const json out = json::parse(ReadFile(dir / "out.json"));
  std::vector<std::vector<std::string>> keys;
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < Cases().size(); ++i) {
    if (Cases()[i].escaped) continue;
    keys.push_back(Cases()[i].key);
    values.push_back({static_cast<double>(i), i + 0.5});
  }
  // Python 0.4 lists sub-dicts after the leaves, and skips escaped names.
  EXPECT_EQ(out["keys"].get<std::vector<std::vector<std::string>>>(), keys);
  EXPECT_EQ(out["values"].get<std::vector<std::vector<double>>>(), values);
}

// Writes a directory with the keys given as "a" or "sub/b" (values as above).
constexpr const char* kWriteScript = R"(
import sys, torch
from tensordict import TensorDict
td = TensorDict({}, batch_size=[2])
for i, k in enumerate(sys.argv[2:]):
    td.set(tuple(k.split("/")), torch.tensor([float(i), i + 0.5], dtype=torch.float64))
td.memmap_(prefix=sys.argv[1])
)";

TEST(PythonReference, ThisLibraryLoadsWhatTensordict04WritesWithRawKeyNames) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  std::vector<std::string> args = {dir / "td"};
  std::vector<KeyCase> raw;  // Python 0.4 cannot write the others
  for (const auto& c : Cases()) {
    if (c.escaped) continue;
    raw.push_back(c);
    args.push_back(c.key.size() == 1 ? c.key[0] : c.key[0] + "/" + c.key[1]);
  }
  ASSERT_TRUE(RunPython(kWriteScript, args));
  for (const auto& c : raw) {
    EXPECT_TRUE(IsRegularFile(dir / ("td/" + c.file))) << c.file;
  }
  TensorDict td = TensorDict::load_memmap(dir / "td");
  std::vector<tensordict::NestedKey> expected;
  for (const auto& c : raw) expected.push_back(ToNestedKey(c.key));
  EXPECT_EQ(td.keys(true, true), expected);
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_TRUE(at::equal(td.get(ToNestedKey(raw[i].key)), Value(i)))
        << raw[i].file;
  }
}

}  // namespace

namespace {

// Python memory-maps the same dict in place and records what it then is.
constexpr const char* kMemmapScript = R"py(
import json, sys, torch
from tensordict import TensorDict
td = TensorDict({"a": torch.zeros(3, 2), "n": {"b": torch.ones(3, dtype=torch.int64)}}, [3])
td.memmap_(sys.argv[1])
with open(sys.argv[2], "w") as f:
    json.dump({"repr": repr(td), "locked": td.is_locked,
               "sub_locked": td["n"].is_locked, "device": str(td.device)}, f)
)py";

}  // namespace

// A memory-mapped dict prints, locks and reports its device as Python's does.
TEST(PythonReference, AMemmappedDictIsWhatTensordict04MakesOfIt) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  ASSERT_TRUE(RunPython(kMemmapScript, {dir / "py", dir / "out.json"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  TensorDict td({{"a", torch::zeros({3, 2})},
                 {{"n", "b"}, torch::ones({3}, torch::kInt64)}},
                {3});
  td.memmap_(dir / "cpp");
  EXPECT_EQ(tensordict::repr(td), py["repr"].get<std::string>());
  EXPECT_EQ(td.is_locked(), py["locked"].get<bool>());
  EXPECT_EQ(td.get_tensordict("n").is_locked(), py["sub_locked"].get<bool>());
  EXPECT_EQ(td.device().value().str(), py["device"].get<std::string>());
  EXPECT_EQ(json::parse(ReadFile(dir / "cpp/meta.json"))["device"],
            json::parse(ReadFile(dir / "py/meta.json"))["device"]);
}

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
        out["max_priority"] = rb._sampler._max_priority
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

bool SkipTorchRL(bool prioritized) {
  return PyRef().empty() || (prioritized && TorchRLExt().empty());
}

// TorchRL loads a buffer this library wrote in a storage_dir: its rows,
// length, cursor and (prioritized) the trees and the largest priority.
void TorchRLLoadsABufferThisLibraryWrote(bool prioritized) {
  TempDir dir;
  auto options = ReplayBufferOptions(16).storage_dir(dir / "rb").seed(0);
  if (prioritized) options.sampler(PrioritizedSampler().alpha(0.7).beta(0.5).eps(1e-6));
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
  ASSERT_TRUE(RunPython(script, {dir / "rb", prioritized ? "prioritized" : "random",
                                 dir / "out.json"}));
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
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + kMakeBuffer + kDumpBuffer,
                        {dir / "rb", sampler, dir / "dumped.json"}));
  auto options = ReplayBufferOptions(16).storage_dir(dir / "rb").seed(0);
  if (prioritized) options.sampler(PrioritizedSampler().alpha(0.7).beta(0.5).eps(1e-6));
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
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + kMakeBuffer + kLoadBuffer,
                        {dir / "rb", sampler, dir / "out.json"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  EXPECT_EQ(py["len"], 16);
  EXPECT_EQ(py["cursor"], 5);
  EXPECT_EQ(py["obs"][4], 20.0);
  EXPECT_EQ(py["done"][4], true);
  EXPECT_TRUE(py["sample_index_ok"].get<bool>());
  EXPECT_EQ(py["keys"],
            json::parse(ReadFile(dir / "dumped.json"))["keys"]);
}

}  // namespace

// Both ways, with TorchRL's RandomSampler and PrioritizedSampler.
#define TD_TORCHRL_TEST(name, fn, prioritized)                  \
  TEST(PythonReference, name) {                                 \
    if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;          \
    if (SkipTorchRL(prioritized)) GTEST_SKIP() << kNoExtMessage; \
    fn(prioritized);                                            \
  }
TD_TORCHRL_TEST(TorchRL04LoadsARandomSamplerBufferThisLibraryWrote,
                TorchRLLoadsABufferThisLibraryWrote, false)
TD_TORCHRL_TEST(TorchRL04LoadsAPrioritizedBufferThisLibraryWrote,
                TorchRLLoadsABufferThisLibraryWrote, true)
TD_TORCHRL_TEST(ThisLibraryOpensARandomSamplerBufferTorchRL04Dumped,
                ThisLibraryOpensABufferTorchRLDumped, false)
TD_TORCHRL_TEST(ThisLibraryOpensAPrioritizedBufferTorchRL04Dumped,
                ThisLibraryOpensABufferTorchRLDumped, true)
#undef TD_TORCHRL_TEST

namespace {

// The ```python block after the marker `<!-- ci: python <name> -->` in the
// tutorial `docs/tutorials/<tutorial>`, with `from` replaced by `to`.
std::string TutorialPython(const std::string& tutorial, const std::string& name,
                           const std::string& from, const std::string& to) {
  const std::string md = ReadFile(std::string(TENSORDICT_TEST_DATA_DIR) +
                                  "/../../docs/tutorials/" + tutorial);
  const std::string marker = "<!-- ci: python " + name + " -->\n```python\n";
  const size_t start = md.find(marker);
  if (start == std::string::npos) {
    ADD_FAILURE() << "the tutorial has no block " << marker;
    return std::string();
  }
  const size_t begin = start + marker.size();
  std::string code = md.substr(begin, md.find("```", begin) - begin);
  for (size_t at = code.find(from); at != std::string::npos;
       at = code.find(from, at + to.size())) {
    code.replace(at, from.size(), to);
  }
  return code;
}

}  // namespace

// The persistence tutorial's replay-buffer section, both ways: its C++ code
// (as in examples/memmap_and_python_interop.cpp) and its Python snippets, as
// they stand in the tutorial, against TorchRL 0.4.
TEST(PythonReference, TheTutorialsTorchRLSnippetsRun) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (TorchRLExt().empty()) GTEST_SKIP() << kNoExtMessage;
  TempDir dir;
  const std::string actor_rb = dir / "actor_rb";
  {
    ReplayBuffer rb(ReplayBufferOptions(1000).storage_dir(actor_rb).sampler(
        PrioritizedSampler().alpha(0.7).beta(0.5)));
    for (int step = 0; step < 3; ++step) {
      torch::Tensor obs = torch::randn({100, 4});
      rb.extend(TensorDict({{"obs", obs},
                            {"action", torch::randint(2, {100})},
                            {{"next", "obs"}, obs + 1},
                            {{"next", "done"}, torch::zeros({100, 1}, torch::kBool)}},
                           {100}));
    }
    auto [batch, info] = rb.sample(64);
    rb.update_priority(info.index, torch::rand({64}));
  }
  const std::string load = TutorialPython("memmap_and_python_interop.md", "torchrl-load", "/data/actor_rb", actor_rb);
  ASSERT_FALSE(load.empty());
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + load + R"py(
assert len(rb) == 300, len(rb)
assert batch["obs"].shape == torch.Size([64, 4])
assert (batch["next", "obs"] == batch["obs"] + 1).all()
)py",
                        {}));

  const std::string learner_rb = dir / "learner_rb";
  const std::string dump =
      TutorialPython("memmap_and_python_interop.md", "torchrl-dump", "/data/learner_rb", learner_rb);
  ASSERT_FALSE(dump.empty());
  ASSERT_TRUE(RunPython(std::string(kTorchRLPreamble) + dump, {}));
  ReplayBuffer rb(ReplayBufferOptions(1000).storage_dir(learner_rb));
  EXPECT_EQ(rb.size(), 1000);
  EXPECT_EQ(rb.cursor(), 200);
  EXPECT_TRUE(at::equal(rb.storage().get("index"), torch::arange(1000)));
  rb.add(TensorDict({{"obs", torch::randn({4})}, {"action", torch::tensor(1)}}, {}));
  EXPECT_EQ(rb.storage().get("index")[200].item<int64_t>(), 200);
  EXPECT_EQ(rb.cursor(), 201);
}

// ---- Non-tensor data ----------------------------------------------------------

namespace {

// Builds the dicts of MakeNonTensorDicts in Python, memory-maps them to
// argv[1] and argv[2] (unless argv[4] is "load"), then loads both and writes
// their reprs and values to argv[3].
constexpr const char* kNonTensorScript = R"py(
import json, sys, torch
from tensordict import TensorDict
if sys.argv[4] != "load":
    td = TensorDict({"a": torch.zeros(3)}, [3])
    td.set_non_tensor("s", "it's")
    td.set_non_tensor(("n", "x"), 5)
    td.set_non_tensor("f", 1e15)
    td.set_non_tensor("l", [1, "a", None, True, 2.0])
    td.set_non_tensor("d", {"k": 1, "z": [1, 2]})
    rows = []
    for v in ["hello", "world", "hello"]:
        r = TensorDict({"a": torch.zeros(())}, [])
        r.set_non_tensor("s", v)
        rows.append(r)
    td.memmap(sys.argv[1])
    torch.stack(rows).memmap(sys.argv[2])
a = TensorDict.load_memmap(sys.argv[1])
b = TensorDict.load_memmap(sys.argv[2])
with open(sys.argv[3], "w") as f:
    json.dump({"repr_a": repr(a), "repr_b": repr(b),
               "s": a.get_non_tensor("s"), "l": a.get_non_tensor("l"),
               "stack": b.get_non_tensor("s")}, f)
)py";

// The same dicts as kNonTensorScript builds.
std::pair<TensorDict, TensorDict> MakeNonTensorDicts() {
  TensorDict td({{"a", torch::zeros({3})}}, {3});
  td.set_non_tensor("s", "it's");
  td.set_non_tensor({"n", "x"}, 5);
  td.set_non_tensor("f", 1e15);
  td.set_non_tensor("l", nlohmann::ordered_json::array({1, "a", nullptr, true, 2.0}));
  td.set_non_tensor("d", nlohmann::ordered_json{{"k", 1}, {"z", {1, 2}}});
  std::vector<TensorDict> rows;
  for (const char* v : {"hello", "world", "hello"}) {
    TensorDict r({{"a", torch::zeros({})}}, {});
    r.set_non_tensor("s", v);
    rows.push_back(r);
  }
  return {td, tensordict::stack(rows)};
}

}  // namespace

// Python writes non-tensor data, this library loads it: the same reprs.
TEST(PythonReference, ThisLibraryLoadsNonTensorDataTensordict04Wrote) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  ASSERT_TRUE(RunPython(kNonTensorScript,
                        {dir / "a", dir / "b", dir / "out.json", "write"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  TensorDict a = TensorDict::load_memmap(dir / "a");
  TensorDict b = TensorDict::load_memmap(dir / "b");
  EXPECT_EQ(tensordict::repr(a), py["repr_a"].get<std::string>());
  EXPECT_EQ(tensordict::repr(b), py["repr_b"].get<std::string>());
  EXPECT_EQ(a.get_non_tensor("l").dump(), py["l"].dump());
  EXPECT_EQ(b.get_non_tensor("s").dump(), py["stack"].dump());
}

// This library writes non-tensor data, Python loads it: the same reprs as
// this library's own load, and the same values.
TEST(PythonReference, Tensordict04LoadsNonTensorDataThisLibraryWrote) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  auto [td, st] = MakeNonTensorDicts();
  td.memmap(dir / "a");
  st.memmap(dir / "b");
  ASSERT_TRUE(RunPython(kNonTensorScript,
                        {dir / "a", dir / "b", dir / "out.json", "load"}));
  const json py = json::parse(ReadFile(dir / "out.json"));
  EXPECT_EQ(py["repr_a"].get<std::string>(),
            tensordict::repr(TensorDict::load_memmap(dir / "a")));
  EXPECT_EQ(py["repr_b"].get<std::string>(),
            tensordict::repr(TensorDict::load_memmap(dir / "b")));
  EXPECT_EQ(py["s"], "it's");
  EXPECT_EQ(py["stack"], json::parse(R"(["hello", "world", "hello"])"));
}

// ---- Point to point with Python's td.send / td.recv ------------------------

// Python's side of the point-to-point tests: joins the default Gloo group at
// 127.0.0.1:argv[1] as rank 1 of 2, then either receives into zeros and
// checks the values (argv[2] == "recv") or sends (argv[2] == "send"). The
// dict is tensordict_test::WireDict, built the same way.
constexpr const char* kWireScript = R"py(
import io, pickle, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from tensordict import TensorDict

def wire(seed):
    def v(k, shape, dtype):
        n = 1
        for s in shape:
            n *= s
        return ((torch.arange(n, dtype=torch.float64) + 10 * (seed + k))
                .reshape(shape).remainder(100).to(dtype))
    return TensorDict({
        "zeta": v(0, (2, 3), torch.float32),
        "alpha": v(1, (2,), torch.float64),
        "next": {"obs": v(2, (2, 4), torch.float16),
                 "done": v(3, (2, 1), torch.bool),
                 "Reward": v(4, (2,), torch.bfloat16)},
        "i8": v(5, (2, 2), torch.int8),
        "i16": v(6, (2,), torch.int16),
        "i32": v(7, (2, 5), torch.int32),
        "i64": v(8, (2,), torch.int64),
        "u8": v(9, (2, 3), torch.uint8),
        "c64": v(10, (2,), torch.complex64),
        "c128": v(11, (2, 2), torch.complex128),
        "empty": torch.zeros(2, 0),
    }, [2])

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                        rank=1, world_size=2, timeout=timedelta(seconds=30))
RESERVED = ("cls", "non_tensors", "leaves", "cls_metadata", "_total_bytes")

# torch >= 2's send_object_list / recv_object_list for one object (torch
# 1.13 lacks them): an int64 [1] holding the pickle's length, then the
# pickle (pickle.Pickler's default protocol) as uint8.
def send_object_list(objs, dst):
    f = io.BytesIO()
    pickle.Pickler(f).dump(objs[0])
    data = torch.frombuffer(bytearray(f.getvalue()), dtype=torch.uint8)
    dist.send(torch.tensor([data.numel()], dtype=torch.long), dst=dst)
    dist.send(data, dst=dst)

def recv_object_list(objs, src):
    size = torch.empty(1, dtype=torch.long)
    dist.recv(size, src=src)
    data = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(data, src=src)
    objs[0] = pickle.loads(data.numpy().tobytes())

def from_remote_init(src):
    # tensordict >= 0.5's TensorDict.from_remote_init, message for message.
    meta = [None]
    recv_object_list(meta, src=src)
    meta = meta[0]
    storage = torch.empty(meta.pop("_total_bytes"), dtype=torch.uint8)
    dist.recv(storage, src=src)
    def rebuild(m):
        d = {}
        for k, (dtype, shape, start, stop, pad) in m["leaves"].items():
            v = storage[start:stop].view(getattr(torch, dtype[len("torch."):]))
            if pad:
                v = v[: torch.Size(shape).numel()]
            d[k] = v.view(shape)
        for k, v in m.items():
            if k not in RESERVED:
                d[k] = rebuild(v)
        return TensorDict(d, m["cls_metadata"]["batch_size"])
    return rebuild(meta)

def init_remote(td, dst):
    # tensordict >= 0.5's td.init_remote(dst): consolidate()'s layout (each
    # leaf padded to 8 bytes, depth first in insertion order), its metadata
    # pickled by send_object_list, then the storage.
    chunks, offset = [], [0]
    def level(t):
        m = {"cls": "TensorDict", "non_tensors": {}, "leaves": {},
             "cls_metadata": {"device": None, "names": None,
                              "batch_size": list(t.batch_size), "is_locked": False}}
        for k in t.keys():
            v = t.get(k)
            if isinstance(v, TensorDict):
                m[k] = level(v)
                continue
            b = v.contiguous().view(-1).view(torch.uint8)
            n = b.numel()
            pad = (8 - n % 8) % 8
            chunks.extend([b, torch.zeros(pad, dtype=torch.uint8)])
            m["leaves"][k] = (str(v.dtype), list(v.shape), offset[0], offset[0] + n + pad, pad)
            offset[0] += n + pad
        return m
    meta = level(td)
    storage = torch.cat(chunks)
    meta["_total_bytes"] = storage.numel()
    send_object_list([meta], dst=dst)
    dist.send(storage, dst=dst)

def check(td, expected):
    for key in expected.keys(True, True):
        assert torch.equal(td[key], expected[key]), (key, td[key], expected[key])

mode, tag = sys.argv[2], int(sys.argv[3])
if mode == "recv":
    td = wire(0).apply(torch.zeros_like)
    td.recv(0, init_tag=tag)
    check(td, wire(2))
elif mode == "send":
    wire(1).send(0, init_tag=tag)
elif mode == "remote_recv":
    check(from_remote_init(0), wire(2))
elif mode == "remote_send":
    # complex128 first: after an odd number of 8-byte blocks its offset
    # would not be a multiple of 16, which Python's own view(dtype) rejects.
    w = wire(1)
    td = TensorDict({"c128": w["c128"]}, [2])
    td.update(w.exclude("c128"))
    init_remote(td, 0)
print("python ok")
)py";

// Runs the Python `script` with `args` in the background and `cpp_side`
// here; returns the script's exit status (-1 when it had to be killed, or
// when `cpp_side` threw: a test failure with Python's output), with its
// output in `output`.
int WithPythonScript(const std::string& script, const std::string& args,
                     const std::function<void()>& cpp_side,
                     std::string& output) {
  TempDir tmp("td_pyref_dist");
  WriteFile(tmp / "script.py", script);
  const std::string cmd = PyRef() + " -W ignore '" + (tmp / "script.py") +
                          "' " + args + " > '" + (tmp / "out") + "' 2>&1";
  const pid_t pid = tensordict_test::Spawn({"/bin/sh", "-c", cmd});
  try {
    cpp_side();
  } catch (const c10::Error& e) {
    tensordict_test::Reap(pid, std::chrono::seconds(5));
    output = ReadFile(tmp / "out");
    ADD_FAILURE() << e.what_without_backtrace() << "\nPython's output:\n"
                  << output;
    return -1;
  }
  const int status = tensordict_test::Reap(pid, std::chrono::seconds(60));
  output = ReadFile(tmp / "out");
  return status;
}

// kWireScript as rank 1 of a group with this process (rank 0).
int WithPythonPeer(const std::string& mode, int init_tag,
                   const std::function<void(const tensordict::Group&)>& cpp_side,
                   std::string& output) {
  const int port = tensordict_test::FreePort();
  return WithPythonScript(
      kWireScript,
      std::to_string(port) + " " + mode + " " + std::to_string(init_tag),
      [&] {
        tensordict::GlooGroupOptions options;
        options.port = port;
        options.python_world = true;
        cpp_side(tensordict::make_gloo_group(0, 2, options));
      },
      output);
}

// Python's td.recv(0) receives what this library's send sends: the same
// leaves in the same order, under the same tags.
TEST(PythonReference, Tensordict04RecvsWhatThisLibrarySends) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  for (int init_tag : {0, 5}) {
    std::string output;
    const int status = WithPythonPeer(
        "recv", init_tag,
        [&](const tensordict::Group& pg) {
          tensordict::send(tensordict_test::WireDict(2), 1, pg, init_tag);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    EXPECT_EQ(output, "python ok\n");
  }
}

// This library's recv receives what Python's td.send(0) sends.
TEST(PythonReference, ThisLibraryRecvsWhatTensordict04Sends) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  for (int init_tag : {0, 5}) {
    TensorDict td = tensordict_test::ZeroWireDict();
    std::string output;
    const int status = WithPythonPeer(
        "send", init_tag,
        [&](const tensordict::Group& pg) {
          tensordict::recv(td, 1, pg, init_tag);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    const TensorDict expected = tensordict_test::WireDict(1);
    for (const auto& key : expected.keys(true, true)) {
      EXPECT_TRUE(at::equal(td.get(key), expected.get(key))) << key;
    }
  }
}

// Python tensordict >= 0.5's from_remote_init (emulated message for message
// with torch.distributed, which the reference's 0.4 lacks) receives what
// init_remote sends, and this library's from_remote_init receives what
// Python's init_remote sends.
TEST(PythonReference, InitRemoteAndFromRemoteInitInPythonsMessageLayout) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  {
    std::string output;
    const int status = WithPythonPeer(
        "remote_recv", 0,
        [&](const tensordict::Group& pg) {
          tensordict::init_remote(tensordict_test::WireDict(2), 1, pg);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    EXPECT_EQ(output, "python ok\n");
  }
  {
    TensorDict td;
    std::string output;
    const int status = WithPythonPeer(
        "remote_send", 0,
        [&](const tensordict::Group& pg) {
          td = tensordict::from_remote_init(1, pg);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    EXPECT_TRUE(tensordict_test::SameDict(td, tensordict_test::WireDict(1)));
    EXPECT_TRUE(td.is_consolidated());
  }
}

// The distributed tutorial's last section, as it stands there: its Python
// learner (tensordict 0.4) and its C++ actor (copied below, the port
// replaced by a free one).
TEST(PythonReference, TheDistributedTutorialsPythonLearnerRuns) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const std::string port = std::to_string(tensordict_test::FreePort());
  const std::string learner = TutorialPython(
      "distributed.md", "distributed-learner", "29500", port);
  ASSERT_FALSE(learner.empty());
  TensorDict sent;
  at::Tensor final_weight;
  std::string output;
  // After the tutorial's code, the learner reports what it received last.
  const std::string script = learner + R"py(
print("received: action sum %d, observation sum %.3f" % (
    int(rollout["action"].sum()), float(rollout["observation"].double().sum())))
)py";
  at::Tensor initial_weight;
  const int status = WithPythonScript(
      script, "",
      [&] {
        tensordict::GlooGroupOptions options;
        options.port = std::stoi(port);
        options.python_world = true;  // join Python's init_process_group
        const tensordict::Group pg =
            tensordict::make_gloo_group(/*rank=*/1, 2, options);

        const int64_t T = 16, E = 8;
        torch::nn::Linear policy(4, 2);
        initial_weight = policy->weight.detach().clone();
        TensorDict weights({{"weight", policy->weight}, {"bias", policy->bias}},
                           {});
        cartpole::CartPoleVec env(E, /*seed=*/0);
        torch::NoGradGuard no_grad;  // writes into the parameters
        TensorDict rollout({}, {T, E});
        for (int iteration = 0; iteration < 3; ++iteration) {
          tensordict::recv(weights, 0, pg);  // into the policy, in place
          for (int64_t t = 0; t < T; ++t) {
            const torch::Tensor obs = env.observation();
            const torch::Tensor action =
                policy(obs).softmax(-1).multinomial(1).squeeze(-1);
            TensorDict step = env.step(action);
            step.set("observation", obs);
            step.set("action", action);
            rollout[t] = step;  // the first write allocates
          }
          tensordict::send(rollout, 0, pg);  // one message per leaf
        }
        sent = rollout;
        final_weight = policy->weight.detach().clone();
      },
      output);
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("iteration 2: 128 transitions, "), std::string::npos)
      << output;
  char expected[128];
  std::snprintf(expected, sizeof(expected),
                "received: action sum %lld, observation sum %.3f\n",
                static_cast<long long>(sent.get("action").sum().item<int64_t>()),
                sent.get("observation").to(at::kDouble).sum().item<double>());
  EXPECT_NE(output.find(expected), std::string::npos) << expected << output;
  // The actor acted with the learner's weights, not its own initial ones.
  EXPECT_FALSE(at::equal(final_weight, initial_weight));
}

// ---- TorchScript dicts ------------------------------------------------------

namespace {

// Python's side: for each JSON line of argv[1] ({"dict": a dict whose lists
// are tensor shapes, "batch_dims": optional}), the batch sizes that
// TensorDict.from_dict gives the root and every sub-dict, one line per case
// in argv[2].
constexpr const char* kAutoBatchScript = R"py(
import json, sys, torch
from tensordict import TensorDict
def build(o):
    return {k: build(v) if isinstance(v, dict) else torch.zeros(v) for k, v in o.items()}
def sizes(td, prefix):
    out = [f"{prefix}={list(td.batch_size)}"]
    for k, v in td.items():
        if isinstance(v, TensorDict):
            out += sizes(v, k if prefix == "<root>" else prefix + "." + k)
    return out
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        case = json.loads(line)
        td = TensorDict.from_dict(build(case["dict"]), batch_dims=case.get("batch_dims"))
        out.write(" ".join(sizes(td, "<root>")) + "\n")
)py";

c10::IValue ShapesToIValue(const nlohmann::ordered_json& o) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : o.items()) {
    d.insert(k, v.is_object() ? ShapesToIValue(v)
                              : c10::IValue(torch::zeros(v.get<std::vector<int64_t>>())));
  }
  return d;
}

std::string BatchSizes(const TensorDict& td, const std::string& prefix) {
  std::string out = prefix + "=[";
  for (size_t i = 0; i < td.batch_size().size(); ++i) {
    out += (i ? ", " : "") + std::to_string(td.batch_size()[i]);
  }
  out += "]";
  for (const auto& [key, entry] : td.items()) {
    if (!entry.is_tensordict()) continue;
    const std::string k = key.str();
    out += " " + BatchSizes(entry.tensordict(), prefix == "<root>" ? k : prefix + "." + k);
  }
  return out;
}

}  // namespace

// from_ivalue infers, for the same nested dicts, the batch sizes that Python
// tensordict 0.4's TensorDict.from_dict (auto_batch_size_'s rule) gives.
TEST(PythonReference, FromIValueInfersTheBatchSizesOfPythonsFromDict) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const std::vector<std::string> cases = {
      R"({"dict": {"a": [4, 3, 2], "b": [4, 3]}})",
      R"({"dict": {"a": [4, 3], "n": {"x": [4, 3, 5], "y": [4, 3, 5, 1]}, "e": {}}})",
      R"({"dict": {"a": [4], "e": {}}})",
      R"({"dict": {"e": {}, "a": [4]}})",
      R"({"dict": {"n": {"x": [2, 3]}, "m": {"y": [2, 4]}}})",
      R"({"dict": {"a": []}})",
      R"({"dict": {"a": [4, 3], "b": [5, 3]}})",
      R"({"dict": {}})",
      R"({"dict": {"a": [4, 3, 2], "b": [4, 3]}, "batch_dims": 1})",
      R"({"dict": {"a": [4, 3], "n": {"x": [4, 3, 5]}}, "batch_dims": 1})",
  };
  TempDir dir;
  std::string in;
  std::string expected;
  for (const auto& c : cases) {
    in += c + "\n";
    const auto j = nlohmann::ordered_json::parse(c);
    const c10::optional<int64_t> dims =
        j.contains("batch_dims") ? c10::optional<int64_t>(j["batch_dims"].get<int64_t>())
                                 : c10::nullopt;
    expected += BatchSizes(tensordict::from_ivalue(ShapesToIValue(j["dict"]), c10::nullopt, dims),
                           "<root>") +
                "\n";
  }
  WriteFile(dir / "cases.jsonl", in);
  ASSERT_TRUE(RunPython(kAutoBatchScript, {dir / "cases.jsonl", dir / "out.txt"}));
  EXPECT_EQ(ReadFile(dir / "out.txt"), expected);
}

// The TorchScript tutorial's Python side, as it stands in the repository:
// examples/python/train_cartpole_policy.py trains and scripts the policy with
// the reference Python's torch, and C++ runs it on TensorDicts (as
// examples/deploy_torchscript.cpp does with the checked-in copy).
TEST(PythonReference, ThePolicyTrainedAndScriptedInPythonRunsInCpp) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  const std::string script = ReadFile(std::string(TENSORDICT_TEST_DATA_DIR) +
                                      "/../../examples/python/train_cartpole_policy.py");
  ASSERT_TRUE(RunPython(script, {dir / "policy.pt"}));
  torch::jit::Module policy = torch::jit::load(dir / "policy.pt");
  torch::NoGradGuard no_grad;
  const int64_t E = 8;
  cartpole::CartPoleVec env(E, /*seed=*/1);
  TensorDict obs(c10::IntArrayRef({E}));
  while (env.finished_returns().size() < 16) {
    obs.set("observation", env.observation());
    const TensorDict out = tensordict::forward(policy, obs);
    ASSERT_EQ(out.batch_size(), c10::IntArrayRef({E}));
    env.step(out.get("action"));
  }
  double sum = 0;
  for (size_t i = 0; i < 16; ++i) sum += env.finished_returns()[i];
  EXPECT_GE(sum / 16, 475.0);
}

// ---- Ops ----------------------------------------------------------------------

namespace {

// Python's side: the ops on the dict built below, each result's leaves
// (keys(True, True) order) with their shapes and values, as JSON in argv[1].
// (Not norm and clamp_max: tensordict 0.4's call torch._foreach_ kernels
// that torch 1.13 lacks or takes other arguments for.)
constexpr const char* kOpsScript = R"py(
import json, sys, torch
from tensordict import TensorDict, pad, pad_sequence
td = TensorDict({"a": torch.arange(24.).view(4, 3, 2),
                 "n": TensorDict({"b": -torch.arange(24.).view(4, 3, 2)}, [4, 3, 2])},
                [4, 3])
index = torch.tensor([2, 0, 1, 1, 0, 2, 2, 2]).view(4, 2)
mask = torch.tensor([True, False, True]).repeat(4, 1)
results = {
    "pad": pad(td, [1, 2], -1.0),
    "pad2": pad(td, [0, 1, 2, 0]),
    "pad_sequence": pad_sequence([td[:2], td, td[:1]], return_mask=True),
    "gather": td.gather(1, index),
    "masked_select": td.masked_select(mask),
    "std": td.std(0),
    "var": td.var(1, keepdim=True, correction=0),
    "maximum": td.maximum(td * -1 + 5),
}
out = {}
for name, r in results.items():
    out[name] = {"batch_size": list(r.batch_size),
                 "leaves": [[str(k), list(r[k].shape), r[k].double().flatten().tolist()]
                            for k in r.keys(True, True)]}
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
)py";

}  // namespace

// The ops give what Python tensordict 0.4 gives on the same dict: batch
// sizes, keys, leaf shapes and values.
TEST(PythonReference, OpsMatchTensordict04) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  ASSERT_TRUE(RunPython(kOpsScript, {dir / "ops.json"}));
  const auto expected = nlohmann::json::parse(ReadFile(dir / "ops.json"));
  const TensorDict td(
      {{"a", torch::arange(24, torch::kFloat).view({4, 3, 2})},
       {"n", TensorDict({{"b", -torch::arange(24, torch::kFloat).view({4, 3, 2})}},
                        {4, 3, 2})}},
      {4, 3});
  const at::Tensor index = torch::tensor({2, 0, 1, 1, 0, 2, 2, 2}).view({4, 2});
  const at::Tensor mask = torch::tensor({true, false, true}).repeat({4, 1});
  using torch::indexing::Slice;
  const std::vector<std::pair<std::string, TensorDict>> results = {
      {"pad", tensordict::pad(td, {1, 2}, -1.0)},
      {"pad2", tensordict::pad(td, {0, 1, 2, 0})},
      {"pad_sequence",
       tensordict::pad_sequence({td[Slice(0, 2)], td, td[Slice(0, 1)]}, 0, 0.0, true)},
      {"gather", td.gather(1, index)},
      {"masked_select", td.masked_select(mask)},
      {"std", td.std(0)},
      {"var", td.var(1, true, 0)},
      {"maximum", td.maximum(td * -1 + 5)},
  };
  for (const auto& [name, r] : results) {
    SCOPED_TRACE(name);
    const auto& e = expected.at(name);
    EXPECT_EQ(r.batch_size().vec(), e.at("batch_size").get<std::vector<int64_t>>());
    // By key: the order of pad_sequence's masks follows a Python set.
    std::map<std::string, nlohmann::json> py_leaves;
    for (const auto& leaf : e.at("leaves")) py_leaves[leaf[0].get<std::string>()] = leaf;
    const auto keys = r.keys(true, true);
    EXPECT_EQ(keys.size(), py_leaves.size());
    for (const tensordict::NestedKey& key : keys) {
      const auto it = py_leaves.find(key.str());
      ASSERT_NE(it, py_leaves.end()) << key.str() << " is not in Python's result";
      const auto& leaf = it->second;
      const at::Tensor t = r.get(key);
      EXPECT_EQ(t.sizes().vec(), leaf[1].get<std::vector<int64_t>>()) << key.str();
      const auto values = leaf[2].get<std::vector<double>>();
      const at::Tensor flat = t.to(at::kDouble).flatten().contiguous();
      ASSERT_EQ(flat.numel(), static_cast<int64_t>(values.size())) << key.str();
      EXPECT_TRUE(torch::allclose(flat, torch::tensor(values, torch::kDouble), 1e-5, 1e-6))
          << key.str();
    }
  }
}

// ---- Non-tensor stacks under index and shape ops ------------------------------

namespace {

// Python's side: a NonTensorStack along dim 0 (`st`), along dim 1 (`st1`), a
// stack of stacks (`nst`) and one in a sub-dict with dims of its own
// (`ns`), then index and shape ops; the repr of each result, as JSON in
// argv[1]. Python gives NonTensorData where integers removed every stack
// dim, and a stack otherwise; comparisons give bool tensors, or
// NonTensorData(None) where Python compares no values.
constexpr const char* kNonTensorIndexScript = R"py(
import json, sys, torch
from tensordict import TensorDict
def mk(v, b=(2,)):
    t = TensorDict({"x": torch.zeros(b)}, list(b))
    t.set_non_tensor("s", v)
    return t
def row(v):
    t = TensorDict({"x": torch.zeros(()), "n": TensorDict({"y": torch.zeros(2)}, [2])}, [])
    t["n"].set_non_tensor("s", v)
    return t
st = torch.stack([mk("v%d" % i) for i in range(3)], 0)
st1 = torch.stack([mk("v%d" % i) for i in range(3)], 1)
nst = torch.stack([torch.stack([mk("a%d%d" % (i, j), ()) for j in range(2)], 0)
                   for i in range(3)], 0)
ns = torch.stack([row("w%d" % i) for i in range(3)], 0)
results = {
    "st[1]": st[1], "st[-1]": st[-1], "st[1:3]": st[1:3], "st[1:2]": st[1:2],
    "st[:,0]": st[:, 0], "st[0,1]": st[0, 1], "st[tensor([1])]": st[torch.tensor([1])],
    "st[tensor(1)]": st[torch.tensor(1)], "st[None]": st[None], "st[...,0]": st[..., 0],
    "st[1,None]": st[1, None], "st[None,1]": st[None, 1],
    "st[mask]": st[torch.tensor([True, False, True])],
    "st1[0]": st1[0], "st1[:,1]": st1[:, 1], "st1[0,1]": st1[0, 1],
    "nst[0]": nst[0], "nst[:,1]": nst[:, 1], "nst[0,1]": nst[0, 1],
    "ns[1]": ns[1], "ns[:,]": ns[0:2],
    "unsqueeze(0)[0]": st.unsqueeze(0)[0], "unsqueeze(0)[0,1]": st.unsqueeze(0)[0, 1],
    "unsqueeze(1)[1]": st.unsqueeze(1)[1], "unsqueeze(0).squeeze(0)[1]": st.unsqueeze(0).squeeze(0)[1],
    "permute(1,0)[:,0]": st.permute(1, 0)[:, 0], "transpose(0,1)[0]": st.transpose(0, 1)[0],
    "expand(4,3,2)[0,1]": st.expand(4, 3, 2)[0, 1],
    "unbind(0)[1]": st.unbind(0)[1], "unbind(1)[0]": st.unbind(1)[0],
    "split(1,0)[1]": st.split(1, 0)[1],
    "stack(0)[0]": torch.stack([st, st], 0)[0], "stack(1)[:,0]": torch.stack([st, st], 1)[:, 0],
    "st==st": st == st.clone(), "st!=st1.T": st != st1.transpose(0, 1)[:, [1, 0]],
    "data==data": st[0] == st[1], "data!=data": st[0] != st[0],
    "data==stack": st[1] == nst[0], "ns==ns": ns == ns,
    "st==0": st == 0, "st!=1": st != 1,
}
with open(sys.argv[1], "w") as f:
    json.dump({k: repr(v) for k, v in results.items()}, f)
)py";

TensorDict NonTensorRow(const std::string& v, std::vector<int64_t> batch = {2}) {
  TensorDict t({{"x", torch::zeros(batch)}}, batch);
  t.set_non_tensor("s", v);
  return t;
}

}  // namespace

TEST(PythonReference, NonTensorEntriesIndexAndCompareAsTensordict04) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  ASSERT_TRUE(RunPython(kNonTensorIndexScript, {dir / "nt.json"}));
  const auto expected = json::parse(ReadFile(dir / "nt.json"));
  using torch::indexing::Ellipsis;
  using torch::indexing::None;
  using torch::indexing::Slice;
  std::vector<TensorDict> rows;
  for (int i = 0; i < 3; ++i) rows.push_back(NonTensorRow("v" + std::to_string(i)));
  const TensorDict st = tensordict::stack(rows, 0);
  const TensorDict st1 = tensordict::stack(rows, 1);
  std::vector<TensorDict> inner;
  for (int i = 0; i < 3; ++i) {
    std::vector<TensorDict> pair;
    for (int j = 0; j < 2; ++j) {
      pair.push_back(NonTensorRow("a" + std::to_string(i) + std::to_string(j), {}));
    }
    inner.push_back(tensordict::stack(pair, 0));
  }
  const TensorDict nst = tensordict::stack(inner, 0);
  std::vector<TensorDict> nested;
  for (int i = 0; i < 3; ++i) {
    TensorDict n({{"y", torch::zeros({2})}}, {2});
    n.set_non_tensor("s", "w" + std::to_string(i));
    nested.push_back(TensorDict({{"x", torch::zeros({})}, {"n", n}}, {}));
  }
  const TensorDict ns = tensordict::stack(nested, 0);
  const std::vector<std::pair<std::string, TensorDict>> results = {
      {"st[1]", st[1]},
      {"st[-1]", st[-1]},
      {"st[1:3]", st[Slice(1, 3)]},
      {"st[1:2]", st[Slice(1, 2)]},
      {"st[:,0]", st.index({Slice(), 0})},
      {"st[0,1]", st.index({0, 1})},
      {"st[tensor([1])]", st[torch::tensor({1})]},
      {"st[tensor(1)]", st[torch::tensor(1)]},
      {"st[None]", st[None]},
      {"st[...,0]", st.index({Ellipsis, 0})},
      {"st[1,None]", st.index({1, None})},
      {"st[None,1]", st.index({None, 1})},
      {"st[mask]", st[torch::tensor({true, false, true})]},
      {"st1[0]", st1[0]},
      {"st1[:,1]", st1.index({Slice(), 1})},
      {"st1[0,1]", st1.index({0, 1})},
      {"nst[0]", nst[0]},
      {"nst[:,1]", nst.index({Slice(), 1})},
      {"nst[0,1]", nst.index({0, 1})},
      {"ns[1]", ns[1]},
      {"ns[:,]", ns[Slice(0, 2)]},
      {"unsqueeze(0)[0]", st.unsqueeze(0)[0]},
      {"unsqueeze(0)[0,1]", st.unsqueeze(0).index({0, 1})},
      {"unsqueeze(1)[1]", st.unsqueeze(1)[1]},
      {"unsqueeze(0).squeeze(0)[1]", st.unsqueeze(0).squeeze(0)[1]},
      {"permute(1,0)[:,0]", st.permute({1, 0}).index({Slice(), 0})},
      {"transpose(0,1)[0]", st.transpose(0, 1)[0]},
      {"expand(4,3,2)[0,1]", st.expand({4, 3, 2}).index({0, 1})},
      {"unbind(0)[1]", st.unbind(0)[1]},
      {"unbind(1)[0]", st.unbind(1)[0]},
      {"split(1,0)[1]", st.split(1, 0)[1]},
      {"stack(0)[0]", tensordict::stack({st, st}, 0)[0]},
      {"stack(1)[:,0]", tensordict::stack({st, st}, 1).index({Slice(), 0})},
      {"st==st", st == st.clone()},
      {"st!=st1.T", st != st1.transpose(0, 1).index({Slice(), torch::tensor({1, 0})})},
      {"data==data", st[0] == st[1]},
      {"data!=data", st[0] != st[0]},
      {"data==stack", st[1] == nst[0]},
      {"ns==ns", ns == ns},
      {"st==0", st == 0},
      {"st!=1", st != 1},
  };
  ASSERT_EQ(results.size(), expected.size());
  for (const auto& [name, r] : results) {
    EXPECT_EQ(tensordict::repr(r), expected.at(name).get<std::string>()) << name;
  }
}
