// Interop with the reference Python tensordict (python_reference.h): memmap
// directories both ways, with keys that need care as file names and with
// non-tensor data, and pickle_save's files read by torch.load.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "python_reference.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tensordict::TensorDict;
using tensordict_test::IsRegularFile;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

// Keys that need care as file names, the file this library stores each in
// with MemmapKeyNames::kRaw, and the one Python >= 0.13 stores it in, as this
// library does by default (escaped wherever the key holds a byte that needs
// it). Python 0.4 to 0.12 read and write raw names only, so they skip the
// entries that kRaw escapes.
struct KeyCase {
  std::vector<std::string> key;
  std::string file;     // relative to the root directory
  std::string py_file;  // what Python >= 0.13 writes
  bool escaped;         // by kRaw
};

const std::vector<KeyCase>& Cases() {
  static const std::vector<KeyCase> cases = {
      {{"obs"}, "obs.memmap", "obs.memmap", false},
      {{"a b"}, "a b.memmap", "a%20b.memmap", false},
      {{"100%"}, "100%.memmap", "100%25.memmap", false},
      {{"caf\xc3\xa9"}, "caf\xc3\xa9.memmap", "caf\xc3\xa9.memmap", false},
      {{"q?*"}, "q?*.memmap", "q%3F%2A.memmap", false},
      {{"a/b"}, "a%2Fb.memmap", "a%2Fb.memmap", true},
      {{"a%20b"}, "a%2520b.memmap", "a%2520b.memmap", true},
      {{"sub dir", "k 2"},
       "sub dir/k 2.memmap",
       "sub%20dir/k%202.memmap",
       false},
  };
  return cases;
}

// Whether Python reads and writes escaped file names (tensordict >= 0.13).
bool PythonEscapes() { return tensordict_test::TensordictAtLeast(0, 13); }

tensordict::NestedKey ToNestedKey(const std::vector<std::string>& key) {
  return key.size() == 1 ? tensordict::NestedKey(key[0])
                         : tensordict::NestedKey({key[0], key[1]});
}

// Leaf i holds [i, i + 0.5], so every value tells its key.
at::Tensor Value(size_t i) {
  return torch::tensor({static_cast<double>(i), static_cast<double>(i) + 0.5},
                       torch::kFloat64);
}

// Reads a directory and writes {"keys": [[...], ...], "values": [[...], ...]}
// (keys(True, True) order) and "empty": the sorted keys of its empty sub-dicts
// with their batch sizes, to the file argv[2].
constexpr const char* kLoadScript = R"(
import json, sys
from tensordict import TensorDict
td = TensorDict.load_memmap(sys.argv[1])
keys = [list(k) if isinstance(k, tuple) else [k] for k in td.keys(True, True)]
values = [td.get(tuple(k)).tolist() for k in keys]
empty = sorted([str(k), list(td.get(k).batch_size)] for k in td.keys(True)
               if isinstance(td.get(k), TensorDict) and td.get(k).is_empty())
with open(sys.argv[2], "w") as f:
    json.dump({"keys": keys, "values": values, "empty": empty}, f)
)";

TEST(PythonReference, TensordictLoadsTheFileNamesThisLibraryWrites) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  // Python 0.4 reads raw names only: kRaw is what it needs.
  std::vector<tensordict::MemmapKeyNames> modes = {
      tensordict::MemmapKeyNames::kRaw};
  if (PythonEscapes()) modes.push_back(tensordict::MemmapKeyNames::kEscaped);
  for (const auto names : modes) {
    const bool raw = names == tensordict::MemmapKeyNames::kRaw;
    SCOPED_TRACE(raw ? "kRaw" : "kEscaped");
    TempDir dir;
    TensorDict td({}, {2});
    for (size_t i = 0; i < Cases().size(); ++i) {
      td.set(ToNestedKey(Cases()[i].key), Value(i));
    }
    td.set("empty sub", TensorDict({}, {2}));
    td.set({"sub dir", "e"}, TensorDict({}, {2, 0}));
    td.memmap_(dir / "td", names);
    for (const auto& c : Cases()) {
      const std::string& file = raw ? c.file : c.py_file;
      ASSERT_TRUE(IsRegularFile(dir / ("td/" + file))) << file;
    }
    ASSERT_TRUE(RunPython(kLoadScript, {dir / "td", dir / "out.json"}));
    const json out = json::parse(ReadFile(dir / "out.json"));
    std::vector<std::vector<std::string>> keys;
    std::vector<std::vector<double>> values;
    for (size_t i = 0; i < Cases().size(); ++i) {
      if (Cases()[i].escaped && !PythonEscapes()) continue;
      keys.push_back(Cases()[i].key);
      values.push_back({static_cast<double>(i), static_cast<double>(i) + 0.5});
    }
    // Python lists sub-dicts after the leaves; 0.4 skips escaped names.
    EXPECT_EQ(out["keys"].get<std::vector<std::vector<std::string>>>(), keys);
    EXPECT_EQ(out["values"].get<std::vector<std::vector<double>>>(), values);
    EXPECT_EQ(out["empty"].dump(),
              R"js([["('sub dir', 'e')",[2,0]],["empty sub",[2]]])js");
  }
}

// Writes a directory with the keys given as "a" or "sub|b" (values as above),
// and the empty sub-dicts "empty sub" and ("sub dir", "e").
constexpr const char* kWriteScript = R"(
import sys, torch
from tensordict import TensorDict
td = TensorDict({}, batch_size=[2])
for i, k in enumerate(sys.argv[2:]):
    td.set(tuple(k.split("|")), torch.tensor([float(i), i + 0.5], dtype=torch.float64))
td["empty sub"] = TensorDict({}, [2])
td["sub dir", "e"] = TensorDict({}, [2, 0])
td.memmap_(prefix=sys.argv[1])
)";

TEST(PythonReference, ThisLibraryLoadsTheFileNamesTensordictWrites) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  std::vector<std::string> args = {dir / "td"};
  std::vector<KeyCase> raw;  // Python 0.4 cannot write the others
  for (const auto& c : Cases()) {
    if (c.escaped && !PythonEscapes()) continue;
    raw.push_back(c);
    args.push_back(c.key.size() == 1 ? c.key[0] : c.key[0] + "|" + c.key[1]);
  }
  ASSERT_TRUE(RunPython(kWriteScript, args));
  for (const auto& c : raw) {
    const std::string& file = PythonEscapes() ? c.py_file : c.file;
    EXPECT_TRUE(IsRegularFile(dir / ("td/" + file))) << file;
  }
  TensorDict td = TensorDict::load_memmap(dir / "td");
  std::vector<tensordict::NestedKey> expected;
  for (const auto& c : raw) expected.push_back(ToNestedKey(c.key));
  EXPECT_EQ(td.keys(true, true), expected);
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_TRUE(at::equal(td.get(ToNestedKey(raw[i].key)), Value(i)))
        << raw[i].file;
  }
  const TensorDict empty = td.get_tensordict("empty sub");
  EXPECT_TRUE(empty.keys().empty());
  EXPECT_EQ(empty.batch_size().vec(), (std::vector<int64_t>{2}));
  const TensorDict e = td.get_tensordict({"sub dir", "e"});
  EXPECT_TRUE(e.keys().empty());
  EXPECT_EQ(e.batch_size().vec(), (std::vector<int64_t>{2, 0}));
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
TEST(PythonReference, AMemmappedDictIsWhatTensordictMakesOfIt) {
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
  td.set_non_tensor(
      "l", nlohmann::ordered_json::array({1, "a", nullptr, true, 2.0}));
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
TEST(PythonReference, ThisLibraryLoadsNonTensorDataTensordictWrote) {
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
TEST(PythonReference, TensordictLoadsNonTensorDataThisLibraryWrote) {
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

// ---- pickle_save ----------------------------------------------------------------

namespace {

// Loads the file argv[1] with torch.load(weights_only=True), the default
// from torch 2.6, which refuses to unpickle anything but tensors and plain
// containers (a pickled TensorDict fails it: tensordict#1363); writes its
// keys, types and values to argv[2].
constexpr const char* kTorchLoadScript = R"py(
import json, sys, torch
d = torch.load(sys.argv[1], weights_only=True)
def flat(o, prefix):
    out = []
    for k, v in o.items():
        if isinstance(v, dict):
            out += flat(v, prefix + [k])
        else:
            out.append([prefix + [k], str(v.dtype), list(v.shape), v.double().flatten().tolist()])
    return out
with open(sys.argv[2], "w") as f:
    json.dump({"type": type(d).__name__, "leaves": flat(d, [])}, f)
)py";

}  // namespace

// torch.load(weights_only=True) reads what pickle_save writes: the nested
// dict with its keys in order, dtypes, shapes and values.
TEST(PythonReference, TorchLoadWithWeightsOnlyReadsPickleSave) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  TensorDict td(
      {{"obs", torch::arange(6, torch::kFloat32).view({2, 3})},
       {{"next", "reward"}, torch::tensor({1.5, -2.0}, torch::kFloat64)},
       {{"next", "done"}, torch::tensor({true, false})},
       {"count", torch::tensor({7, 8}, torch::kInt64)}},
      {2});
  const std::vector<char> bytes = tensordict::pickle_save(td);
  std::ofstream(dir / "td.pt", std::ios::binary)
      .write(bytes.data(), bytes.size());
  ASSERT_TRUE(RunPython(kTorchLoadScript, {dir / "td.pt", dir / "out.json"}));
  EXPECT_EQ(
      ReadFile(dir / "out.json"),
      R"({"type": "dict", "leaves": [[["obs"], "torch.float32", [2, 3], )"
      R"([0.0, 1.0, 2.0, 3.0, 4.0, 5.0]], [["next", "reward"], "torch.float64", )"
      R"([2], [1.5, -2.0]], [["next", "done"], "torch.bool", [2], [1.0, 0.0]], )"
      R"([["count"], "torch.int64", [2], [7.0, 8.0]]]})");
}
