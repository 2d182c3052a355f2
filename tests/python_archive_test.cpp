// Interop with the reference Python tensordict (python_reference.h): `.tdz`
// memmap archives both ways. tensordict 0.14 reads and writes archives
// itself (`load_memmap`, `memmap("x.tdz")`, `pack_memmap`, `unpack_memmap`);
// with 0.4, which has no archives, Python's zipfile stands in: it checks
// every CRC-32, extracts what this library writes for 0.4 to load, and zips
// 0.4's directories as `zip -r` would.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/persistence.h>
#include <tensordict/tensordict.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "python_reference.h"
#include "test_util.h"

namespace {

using nlohmann::json;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

// Python tensordict has archives from 0.14.
bool PythonArchives() { return tensordict_test::TensordictAtLeast(0, 14); }

// Keys as "a" or "sub|b", each leaf i holding [i, i + 0.5] (float64): keys
// that need care as file names, nested.
const std::vector<std::string>& KeySpecs() {
  static const std::vector<std::string> keys = {
      "obs", "a b", "100%", "q?*", "sub dir|k 2", "next|reward"};
  return keys;
}

tensordict::NestedKey Key(const std::string& spec) {
  const size_t bar = spec.find('|');
  if (bar == std::string::npos) return tensordict::NestedKey(spec);
  return tensordict::NestedKey({spec.substr(0, bar), spec.substr(bar + 1)});
}

at::Tensor Value(size_t i) {
  return at::tensor({static_cast<double>(i), static_cast<double>(i) + 0.5},
                    at::kDouble);
}

// The dict both sides write: the keys above, an empty sub-dict, and the
// non-tensor value "note".
TensorDict MakeDict() {
  TensorDict td({}, {2});
  for (size_t i = 0; i < KeySpecs().size(); ++i)
    td.set(Key(KeySpecs()[i]), Value(i));
  td.set("empty", TensorDict({}, {2}));
  td.set_non_tensor("note", "hello");
  return td;
}

// Checks, for each archive argv[2:], every CRC-32 (zipfile.testzip) and
// loads it: with tensordict >= 0.14 directly (and prints it) and after
// unpack_memmap, with 0.4 after zipfile's extractall. Writes {archive:
// {"bad": first bad entry or null, "names": [...], "repr": ..., "loads":
// [{"keys", "values", "note", "empty"}]}} to argv[1].
constexpr const char* kReadScript = R"py(
import json, os, sys, tempfile, zipfile, torch
import tensordict
from tensordict import TensorDict
newest = hasattr(tensordict, "unpack_memmap")
def describe(td):
    keys = [list(k) if isinstance(k, tuple) else [k] for k in td.keys(True, True)
            if isinstance(td.get(k), torch.Tensor)]
    return {"keys": keys, "values": [td.get(tuple(k)).tolist() for k in keys],
            "note": td.get_non_tensor("note"), "empty": list(td["empty"].batch_size)}
out = {}
for path in sys.argv[2:]:
    with zipfile.ZipFile(path) as z:
        entry = {"bad": z.testzip(), "names": z.namelist(), "loads": []}
    unpacked = tempfile.mkdtemp()
    if newest:
        loaded = TensorDict.load_memmap(path)
        entry["repr"] = repr(loaded)
        entry["loads"].append(describe(loaded))
        tensordict.unpack_memmap(path, unpacked)
    else:
        with zipfile.ZipFile(path) as z:
            z.extractall(unpacked)
    entry["loads"].append(describe(TensorDict.load_memmap(unpacked)))
    out[os.path.basename(path)] = entry
with open(sys.argv[1], "w") as f:
    json.dump(out, f)
)py";

// Writes the dict of MakeDict() as archives in directory argv[1]: with
// tensordict >= 0.14 "py.tdz" (memmap), "packed.tdz" (pack_memmap of a
// directory) and "deflate.tdz" (memmap with compression="deflate"); with 0.4
// "packed.tdz" and "deflate.tdz", zipfile's STORED and DEFLATED zips of a
// memmap directory.
constexpr const char* kWriteScript = R"py(
import os, sys, zipfile, torch
import tensordict
from tensordict import TensorDict
out = sys.argv[1]
td = TensorDict({}, batch_size=[2])
for i, k in enumerate(sys.argv[2:]):
    td.set(tuple(k.split("|")), torch.tensor([float(i), i + 0.5], dtype=torch.float64))
td["empty"] = TensorDict({}, [2])
td.set_non_tensor("note", "hello")
td.memmap(os.path.join(out, "dir"))
if hasattr(tensordict, "pack_memmap"):
    td.memmap(os.path.join(out, "py.tdz"))
    tensordict.pack_memmap(os.path.join(out, "dir"), os.path.join(out, "packed.tdz"))
    td.memmap(os.path.join(out, "deflate.tdz"), compression="deflate")
else:
    for name, method in (("packed.tdz", zipfile.ZIP_STORED), ("deflate.tdz", zipfile.ZIP_DEFLATED)):
        with zipfile.ZipFile(os.path.join(out, name), "w", method) as z:
            for root, dirs, files in sorted(os.walk(os.path.join(out, "dir"))):
                for f in sorted(files):
                    full = os.path.join(root, f)
                    z.write(full, os.path.relpath(full, os.path.join(out, "dir")))
)py";

}  // namespace

// Python reads what this library writes: every CRC-32 holds (writes into a
// memmap_like archive included, after refresh_archive_checksums), and the
// keys, escaped or not, the values, the empty sub-dict and the non-tensor
// value load as written.
TEST(PythonReference, TensordictLoadsTheArchivesThisLibraryWrites) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  const TensorDict td = MakeDict();
  // Escaped file names, as 0.14 writes them; raw ones for 0.4 to read.
  const auto names = PythonArchives() ? tensordict::MemmapKeyNames::kEscaped
                                      : tensordict::MemmapKeyNames::kRaw;
  (void)td.memmap(dir / "cpp.tdz", names);
  TensorDict buf = td.memmap_like(dir / "buf.tdz", /*sparse=*/false, names);
  for (size_t i = 0; i < KeySpecs().size(); ++i)
    buf.get(Key(KeySpecs()[i])).copy_(Value(i));
  tensordict::refresh_archive_checksums(dir / "buf.tdz");
  ASSERT_TRUE(RunPython(kReadScript,
                        {dir / "out.json", dir / "cpp.tdz", dir / "buf.tdz"}));
  const json out = json::parse(ReadFile(dir / "out.json"));
  json keys = json::array();
  json values = json::array();
  // Python lists nested leaves in insertion order, sub-dicts after leaves.
  for (const std::string& spec : KeySpecs()) {
    const size_t bar = spec.find('|');
    keys.push_back(
        bar == std::string::npos
            ? json::array({spec})
            : json::array({spec.substr(0, bar), spec.substr(bar + 1)}));
  }
  for (size_t i = 0; i < KeySpecs().size(); ++i)
    values.push_back({double(i), double(i) + 0.5});
  for (const char* name : {"cpp.tdz", "buf.tdz"}) {
    SCOPED_TRACE(name);
    const json& e = out[name];
    EXPECT_TRUE(e["bad"].is_null()) << e["bad"];
    EXPECT_EQ(e["names"][0], "meta.json");
    ASSERT_EQ(e["loads"].size(), PythonArchives() ? 2u : 1u);
    if (PythonArchives()) {
      EXPECT_EQ(e["repr"],
                tensordict::repr(TensorDict::load_memmap(dir / name)));
    }
    for (const json& load : e["loads"]) {
      EXPECT_EQ(load["keys"], keys);
      EXPECT_EQ(load["values"], values);
      EXPECT_EQ(load["note"], "hello");
      EXPECT_EQ(load["empty"], json::array({2}));
    }
  }
}

// This library reads what Python writes: tensordict 0.14's own archives
// (aligned: the leaves are views into the file, writable in place) and
// zips of memmap directories, stored or deflated (read into memory).
TEST(PythonReference, ThisLibraryLoadsTheArchivesTensordictWrites) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir;
  std::vector<std::string> args = {dir.str()};
  for (const std::string& k : KeySpecs()) args.push_back(k);
  ASSERT_TRUE(RunPython(kWriteScript, args));
  std::vector<std::string> names = {"packed.tdz", "deflate.tdz"};
  if (PythonArchives()) names.push_back("py.tdz");
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    TensorDict td = TensorDict::load_memmap(dir / name, /*read_only=*/true);
    std::vector<tensordict::NestedKey> keys;
    for (const std::string& k : KeySpecs()) keys.push_back(Key(k));
    std::vector<tensordict::NestedKey> got = td.keys(true, true);
    std::sort(keys.begin(), keys.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, keys);
    for (size_t i = 0; i < KeySpecs().size(); ++i) {
      EXPECT_TRUE(at::equal(td.get(Key(KeySpecs()[i])), Value(i)))
          << KeySpecs()[i];
    }
    EXPECT_EQ(td.get_non_tensor("note"), "hello");
    EXPECT_EQ(td.get_tensordict("empty").batch_size().vec(),
              (std::vector<int64_t>{2}));
  }
  if (PythonArchives()) {
    // Python aligns its leaves: they load writable, over the file.
    TensorDict td = TensorDict::load_memmap(dir / "py.tdz");
    td.get("obs").fill_(9);
    EXPECT_TRUE(
        at::equal(TensorDict::load_memmap(dir / "py.tdz", true).get("obs"),
                  at::full({2}, 9.0, at::kDouble)));
  }
}
