// Persistence: memmap directories (Python tensordict's format), consolidate,
// single-file save/load and pickle_save.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tensordict/persistence.h>
#include <tensordict/tensordict.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <complex>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test_paths.h"
#include "test_util.h"

namespace {

using nlohmann::ordered_json;
using tensordict::TensorDict;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::ExpectUnchanged;
using tensordict_test::FileSize;
using tensordict_test::IsRegularFile;
using tensordict_test::ListDir;
using tensordict_test::ListTree;
using tensordict_test::MakeDirs;
using tensordict_test::RemoveTree;
using tensordict_test::Snapshot;
using tensordict_test::TakeSnapshot;
using tensordict_test::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.numel()) * c.element_size());
}

ordered_json ReadJson(const std::string& path) {
  return ordered_json::parse(ReadFile(path));
}

std::vector<std::string> JsonKeys(const ordered_json& j) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
  return out;
}

std::string DataDir() { return tensordict_test::TestDataDir() + "/memmap"; }

TensorDict MakeNested() {
  return TensorDict(
      {{"obs", torch::arange(6, torch::kFloat32).reshape({2, 3})},
       {{"next", "reward"}, torch::tensor({1.5, 2.5}, torch::kFloat64)},
       {{"next", "done"}, torch::tensor({true, false})},
       {"count", torch::tensor({7, 8}, torch::kInt64)}},
      {2});
}

void ExpectSameDict(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(true), b.keys(true));
  EXPECT_EQ(a.batch_size().vec(), b.batch_size().vec());
  for (const auto& k : a.keys(true, true)) {
    EXPECT_EQ(a.get(k).scalar_type(), b.get(k).scalar_type()) << k;
    EXPECT_EQ(a.get(k).sizes(), b.get(k).sizes()) << k;
    EXPECT_EQ(TensorBytes(a.get(k)), TensorBytes(b.get(k))) << k;
  }
}

// Writes a one-level memmap directory with `meta` and the given leaf files.
void MakeDir(
    const std::string& dir, const std::string& meta,
    const std::vector<std::pair<std::string, std::string>>& files = {}) {
  MakeDirs(dir);
  WriteFile(dir + "/meta.json", meta);
  for (const auto& f : files) WriteFile(dir + "/" + f.first, f.second);
}

// The bytes of a file in save()'s format: `data`, then `json`, then its
// length.
std::string SavedFile(const std::string& data, const std::string& json) {
  const int64_t len = static_cast<int64_t>(json.size());
  return data + json +
         std::string(reinterpret_cast<const char*>(&len), sizeof(len));
}

const char* kTail =
    R"("shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})";

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

TEST(Memmap, MemmapInPlaceReplacesLeavesWithMappedFilesWithTheSameValues) {
  TempDir dir;
  TensorDict td = MakeNested();
  TensorDict before = td.clone();
  at::Tensor old_obs = td.get("obs");
  EXPECT_FALSE(td.is_memmap());
  EXPECT_FALSE(td.saved_path().has_value());

  const TensorDict& ret = td.memmap_(dir.str());
  EXPECT_TRUE(ret.is_same(td));
  EXPECT_TRUE(td.is_memmap());
  EXPECT_EQ(td.saved_path().value(), dir.str());
  EXPECT_EQ(td.get_tensordict("next").saved_path().value(), dir / "next");
  EXPECT_FALSE(td.get("obs").is_same(old_obs));
  ExpectSameDict(td, before);

  TensorDict loaded = TensorDict::load_memmap(dir.str());
  EXPECT_TRUE(loaded.is_memmap());
  ExpectSameDict(loaded, before);
  EXPECT_EQ(loaded.device(), c10::Device(c10::kCPU));
}

// As in Python: a memory-mapped dict is on the CPU and locked at every
// level, so that a key added later (which would never reach the disk) is an
// error; in-place writes still reach the files.
TEST(Memmap, EveryMemmappedDictIsLockedOnTheCpu) {
  const std::string locked =
      ": the TensorDict is locked: its entries cannot be added, removed, "
      "renamed or replaced (write into existing tensors with set_() or td[i] "
      "= row, or unlock_() it first)";
  TempDir dir;
  TensorDict src = MakeNested();
  TensorDict copy = src.memmap(dir / "copy");
  EXPECT_FALSE(src.is_locked());
  EXPECT_EQ(src.device(), c10::nullopt);
  TensorDict like = src.memmap_like(dir / "like");
  TensorDict in_place = MakeNested();
  in_place.memmap_(dir / "in_place");
  TensorDict loaded = TensorDict::load_memmap(dir / "in_place");
  TensorDict read_only =
      TensorDict::load_memmap(dir / "in_place", /*read_only=*/true);
  for (const TensorDict* td : {&copy, &like, &in_place, &loaded, &read_only}) {
    EXPECT_TRUE(td->is_locked());
    EXPECT_TRUE(td->get_tensordict("next").is_locked());
    EXPECT_EQ(td->device(), c10::Device(c10::kCPU));
    EXPECT_EQ(td->get_tensordict("next").device(), c10::Device(c10::kCPU));
    Snapshot s = TakeSnapshot(*td);
    ExpectThrowsMsg([&] { td->set("new", torch::zeros({2})); },
                    "set: key new" + locked);
    ExpectThrowsMsg(
        [&] {
          td->set({"next", "new"}, torch::zeros({2}));
        },
        "set: key ('next', 'new')" + locked);
    ExpectUnchanged(*td, s);
  }
  for (const char* d : {"copy", "like", "in_place"}) {
    const std::string sub = std::string(d);
    EXPECT_EQ(ReadJson(dir / (sub + "/meta.json"))["device"], "cpu") << d;
    EXPECT_EQ(ReadJson(dir / (sub + "/next/meta.json"))["device"], "cpu") << d;
  }
  // In-place writes reach the file.
  in_place.set_("count", torch::tensor({70, 80}, torch::kInt64));
  TensorDict reread = TensorDict::load_memmap(dir / "in_place");
  EXPECT_TRUE(
      reread.get("count").equal(torch::tensor({70, 80}, torch::kInt64)));
}

// The repr Python tensordict 0.4.0 prints for the same dict memory-mapped
// (`td.memmap_(dir)`; the dict had no device).
TEST(Memmap, MemmappedLeavesPrintAsPythonsMemoryMappedTensor) {
  TempDir dir;
  TensorDict td({{"a", torch::zeros({3, 2})},
                 {{"n", "b"}, torch::ones({3}, torch::kInt64)}},
                {3});
  td.memmap_(dir.str());
  EXPECT_EQ(tensordict::repr(td),
            "TensorDict(\n"
            "    fields={\n"
            "        a: MemoryMappedTensor(shape=torch.Size([3, 2]), "
            "device=cpu, dtype=torch.float32, is_shared=True),\n"
            "        n: TensorDict(\n"
            "            fields={\n"
            "                b: MemoryMappedTensor(shape=torch.Size([3]), "
            "device=cpu, dtype=torch.int64, is_shared=True)},\n"
            "            batch_size=torch.Size([3]),\n"
            "            device=cpu,\n"
            "            is_shared=False)},\n"
            "    batch_size=torch.Size([3]),\n"
            "    device=cpu,\n"
            "    is_shared=False)");
  EXPECT_EQ(tensordict::repr(TensorDict::load_memmap(dir.str())),
            tensordict::repr(td));
}

TEST(Memmap, MemmapReturnsACopyAndLeavesTheSourceUnchanged) {
  TempDir dir;
  TensorDict td = MakeNested();
  auto snap = tensordict_test::TakeSnapshot(td);
  TensorDict mm = td.memmap(dir.str());
  tensordict_test::ExpectUnchanged(td, snap);
  EXPECT_FALSE(td.is_memmap());
  EXPECT_TRUE(mm.is_memmap());
  ExpectSameDict(mm, td);
  // A copy: writing the mapped dict does not touch the source.
  mm.get("obs").fill_(-1);
  EXPECT_EQ(td.get("obs")[0][0].item<float>(), 0.0F);
}

TEST(Memmap, EveryDtypeRoundTripsBitForBit) {
  TempDir dir;
  std::vector<std::pair<std::string, at::ScalarType>> dtypes = {
      {"f32", at::kFloat},        {"f64", at::kDouble},
      {"f16", at::kHalf},         {"bf16", at::kBFloat16},
      {"i8", at::kChar},          {"i16", at::kShort},
      {"i32", at::kInt},          {"i64", at::kLong},
      {"u8", at::kByte},          {"b", at::kBool},
      {"c64", at::kComplexFloat}, {"c128", at::kComplexDouble}};
  TensorDict td({}, {3});
  for (const auto& [k, dt] : dtypes) {
    at::Tensor t = dt == at::kBool ? torch::tensor({true, false, true})
                                   : (torch::randn({3, 2}) * 100).to(dt);
    td.set(k, t);
  }
  TensorDict mm = td.memmap(dir.str());
  TensorDict loaded = TensorDict::load_memmap(dir.str());
  ExpectSameDict(loaded, td);
  const ordered_json meta = ReadJson(dir / "meta.json");
  const std::vector<std::string> names = {
      "torch.float32", "torch.float64", "torch.float16",   "torch.bfloat16",
      "torch.int8",    "torch.int16",   "torch.int32",     "torch.int64",
      "torch.uint8",   "torch.bool",    "torch.complex64", "torch.complex128"};
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const std::string& k = dtypes[i].first;
    EXPECT_EQ(meta[k]["dtype"], names[i]) << k;
    EXPECT_EQ(ReadFile(dir / (k + ".memmap")), TensorBytes(td.get(k))) << k;
  }
  EXPECT_EQ(ReadFile(dir / "b.memmap"), std::string("\x01\x00\x01", 3));
}

TEST(Memmap, ZeroElementLeavesGetNoFileAndLoadBack) {
  TempDir dir;
  TensorDict td({{"empty", torch::zeros({4, 0, 3})}, {"x", torch::ones({4})}},
                {4});
  td.memmap_(dir.str());
  EXPECT_FALSE(Exists(dir / "empty.memmap"));
  EXPECT_TRUE(Exists(dir / "x.memmap"));
  EXPECT_TRUE(td.is_memmap());
  TensorDict loaded = TensorDict::load_memmap(dir.str());
  EXPECT_EQ(loaded.get("empty").sizes(), (std::vector<int64_t>{4, 0, 3}));
  EXPECT_EQ(ReadJson(dir / "meta.json")["empty"]["shape"],
            ordered_json({4, 0, 3}));

  TempDir empty_batch;
  TensorDict none({{"x", torch::zeros({0, 5})}}, {0});
  none.memmap_(empty_batch.str());
  EXPECT_EQ(TensorDict::load_memmap(empty_batch.str()).get("x").sizes(),
            (std::vector<int64_t>{0, 5}));
}

// By default, as Python tensordict >= 0.13 (robust_key=True): every key
// escaped.
TEST(Memmap, KeysAreStoredUnderTheirEscapedNamesByDefault) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"obs", "obs"},
      {"x y", "x%20y"},
      {"100%", "100%25"},
      {"q?*", "q%3F%2A"},
      {"t\tn", "t%09n"},
      {"caf\xc3\xa9", "caf\xc3\xa9"},
      {".hidden", ".hidden"},
      {"a/b", "a%2Fb"},
      {".", "%2E"},
      {"a%20b", "a%2520b"},
      {"<>:\"|\\", "%3C%3E%3A%22%7C%5C"}};
  TensorDict td({}, {2});
  int64_t i = 0;
  for (const auto& [k, file] : keys) td.set(k, torch::full({2}, ++i));
  td.set({"sub dir", "k 2"}, torch::zeros({2}));
  td.memmap_(dir.str());
  for (const auto& [k, file] : keys) {
    EXPECT_TRUE(IsRegularFile(dir / (file + ".memmap"))) << file;
  }
  EXPECT_TRUE(IsRegularFile(dir / "sub%20dir/k%202.memmap"));
  EXPECT_EQ(ListDir(dir.str()).size(), keys.size() + 2);
  ExpectSameDict(TensorDict::load_memmap(dir.str()), td);
  // An archive names its entries the same way.
  (void)td.memmap(dir / "td.tdz");
  ExpectSameDict(TensorDict::load_memmap(dir / "td.tdz"), td);
}

// MemmapKeyNames::kRaw, for Python tensordict 0.4 to 0.12, which read raw
// names only.
TEST(Memmap, KeysAreStoredUnderTheirRawNamesUnlessIllegalOrAmbiguous) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> keys = {
      // Raw: what Python tensordict 0.4 to 0.12 look for.
      {"x y", "x y"},
      {"100%", "100%"},
      {"%zz", "%zz"},
      {"q?*", "q?*"},
      {"t\tn\n", "t\tn\n"},
      {"<>:\"|\\", "<>:\"|\\"},
      {"caf\xc3\xa9", "caf\xc3\xa9"},
      {".hidden", ".hidden"},
      // Escaped: not one file name...
      {"a/b", "a%2Fb"},
      {".", "%2E"},
      {"..", "%2E%2E"},
      // ... or one that reads as another key's escaped name ("a%20b" is
      // "a b"'s, "%" the empty key's) or as a temporary file.
      {"a%20b", "a%2520b"},
      {"a%2fb", "a%252fb"},
      {"%", "%25"},
      {"50%tmp", "50%25tmp"}};
  TensorDict td({}, {2});
  int64_t i = 0;
  for (const auto& [k, file] : keys) td.set(k, torch::full({2}, ++i));
  td.set({"sub dir", "k/1"}, torch::zeros({2}));
  td.set({"sub dir", "k 2"}, torch::zeros({2}));
  td.memmap_(dir.str(), tensordict::MemmapKeyNames::kRaw);
  for (const auto& [k, file] : keys) {
    EXPECT_TRUE(IsRegularFile(dir / (file + ".memmap"))) << file;
  }
  EXPECT_TRUE(IsRegularFile(dir / "sub dir/k%2F1.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "sub dir/k 2.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "sub dir/meta.json"));
  EXPECT_EQ(ListDir(dir.str()).size(), keys.size() + 2);
  TensorDict loaded = TensorDict::load_memmap(dir.str());
  ExpectSameDict(loaded, td);
  // meta.json keeps the raw keys.
  EXPECT_EQ(JsonKeys(ReadJson(dir / "meta.json"))[8], "a/b");
}

// Python tensordict 0.4 to 0.12 write raw names; this library before and
// Python 0.13 and later write escaped names. Both load the same.
TEST(Memmap, DirectoriesWithRawOrEscapedNamesLoadTheSame) {
  TempDir dir;
  const std::string meta =
      std::string(
          R"({"a b": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )") +
      R"("a%20b": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )" +
      R"("100%": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )" +
      R"("caf\u00e9": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )" +
      R"("s t": {"type": "TensorDict"}, )" + kTail;
  const std::string sub =
      std::string(
          R"({"u v": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )") +
      kTail;
  MakeDir(dir / "raw", meta,
          {{"a b.memmap", "ab"},
           {"a%20b.memmap", "cd"},
           {"100%.memmap", "ef"},
           {"caf\xc3\xa9.memmap", "gh"}});
  MakeDir(dir / "raw/s t", sub, {{"u v.memmap", "ij"}});
  MakeDir(dir / "escaped", meta,
          {{"a%20b.memmap", "ab"},
           {"a%2520b.memmap", "cd"},
           {"100%25.memmap", "ef"},
           {"caf\xc3\xa9.memmap", "gh"}});
  MakeDir(dir / "escaped/s%20t", sub, {{"u%20v.memmap", "ij"}});
  for (const char* d : {"raw", "escaped"}) {
    TensorDict td = TensorDict::load_memmap(dir / d);
    EXPECT_EQ(td.keys(true, true),
              (std::vector<tensordict::NestedKey>{
                  "a b", "a%20b", "100%", "caf\xc3\xa9", {"s t", "u v"}}))
        << d;
    std::string bytes;
    for (const auto& k : td.keys(true, true)) bytes += TensorBytes(td.get(k));
    EXPECT_EQ(bytes, "abcdefghij") << d;
  }
  // When neither name is there, the error names both, in the order tried:
  // "a b"'s escaped name is the key "a%20b", so its raw name comes first.
  MakeDir(dir / "none", meta);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "none"); },
                  "load_memmap: key a b: leaf file '" +
                      (dir / "none/a b.memmap") + "' is missing (and so is '" +
                      (dir / "none/a%20b.memmap") + "')");
  MakeDir(dir / "nosub",
          std::string(R"({"s t": {"type": "TensorDict"}, )") + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "nosub"); },
                  "load_memmap: '" + (dir / "nosub/s%20t") +
                      "' does not exist (nor does '" + (dir / "nosub/s t") +
                      "')");
}

// Readers that try the escaped name first (Python tensordict >= 0.13) must not
// find what an earlier write left there, nor readers of raw names (0.4) what
// an earlier raw write left.
TEST(Memmap, WritingAKeyRemovesWhatAnEarlierWriteLeftUnderItsOtherName) {
  TempDir dir;
  WriteFile(dir / "a%20b.memmap", "stale");
  MakeDirs(dir / "s%20t");
  WriteFile(dir / "s%20t/meta.json", "{}");
  WriteFile(dir / "s%20t/x.memmap", "stale");
  WriteFile(dir / "other%20file", "kept");
  const TensorDict td(
      {{"a b", torch::zeros({2})}, {{"s t", "x"}, torch::zeros({2})}}, {2});
  (void)td.memmap(dir.str(), tensordict::MemmapKeyNames::kRaw);
  EXPECT_FALSE(Exists(dir / "a%20b.memmap"));
  EXPECT_FALSE(Exists(dir / "s%20t/meta.json"));
  EXPECT_TRUE(IsRegularFile(dir / "a b.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "s t/meta.json"));
  EXPECT_EQ(ReadFile(dir / "other%20file"), "kept");
  // And the other way round.
  WriteFile(dir / "other file", "kept");
  (void)td.memmap(dir.str());
  EXPECT_FALSE(Exists(dir / "a b.memmap"));
  EXPECT_FALSE(Exists(dir / "s t/meta.json"));
  EXPECT_TRUE(IsRegularFile(dir / "a%20b.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "s%20t/meta.json"));
  EXPECT_EQ(ReadFile(dir / "other file"), "kept");
  // The raw name of "a%20b" is the escaped name of "a b": in one dict, both
  // keep their files, write after write.
  const TensorDict pair(
      {{"a b", torch::zeros({2})}, {"a%20b", torch::ones({2})}}, {2});
  (void)pair.memmap(dir / "both");
  (void)pair.memmap(dir / "both");
  EXPECT_TRUE(IsRegularFile(dir / "both/a%20b.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "both/a%2520b.memmap"));
  // A later dict without "a b" removes its file: the directory holds the
  // new dict alone.
  (void)TensorDict({{"a%20b", torch::ones({2})}}, {2}).memmap(dir / "both");
  EXPECT_FALSE(Exists(dir / "both/a%20b.memmap"));
  EXPECT_TRUE(IsRegularFile(dir / "both/a%2520b.memmap"));
  EXPECT_TRUE(TensorDict::load_memmap(dir / "both")
                  .get("a%20b")
                  .equal(torch::ones({2})));
}

TEST(Memmap, IndexedWritesGoStraightToTheFile) {
  TempDir dir;
  TensorDict({{"obs", torch::zeros({3, 2})},
              {{"next", "r"}, torch::zeros({3}, torch::kInt32)}},
             {3})
      .memmap_(dir.str());
  TensorDict td = TensorDict::load_memmap(dir.str());
  td[1] = TensorDict({{"obs", torch::tensor({1.0F, 2.0F})},
                      {{"next", "r"}, torch::tensor(9, torch::kInt32)}},
                     {});
  const float obs[] = {0, 0, 1, 2, 0, 0};
  EXPECT_EQ(ReadFile(dir / "obs.memmap"),
            std::string(reinterpret_cast<const char*>(obs), sizeof(obs)));
  const int32_t r[] = {0, 9, 0};
  EXPECT_EQ(ReadFile(dir / "next/r.memmap"),
            std::string(reinterpret_cast<const char*>(r), sizeof(r)));
  EXPECT_TRUE(td.get("obs").is_same(td.get("obs")));  // stored tensors kept
  EXPECT_TRUE(td.is_memmap());
}

TEST(Memmap, MappedLeavesOutliveTheDictAndTheDirectoryEntry) {
  TempDir dir;
  at::Tensor kept;
  {
    TensorDict td({{"x", torch::arange(4)}}, {4});
    td.memmap_(dir.str());
    kept = td.get("x");
  }
  RemoveTree(dir.str());
  EXPECT_TRUE(at::equal(kept, torch::arange(4)));
}

TEST(Memmap, ReadOnlyLoadMapsTheSameValues) {
  TempDir dir;
  TensorDict td = MakeNested();
  td.memmap(dir.str());
  TensorDict ro = TensorDict::load_memmap(dir.str(), /*read_only=*/true);
  EXPECT_TRUE(ro.is_memmap());
  ExpectSameDict(ro, td);
  // Writes into a read-only load stay private: no fault, files unchanged.
  ro.zero_();
  EXPECT_FALSE(ro.any());
  ExpectSameDict(TensorDict::load_memmap(dir.str()), td);
}

TEST(Memmap, MemmapLikeMakesZeroFilledSparseFilesWithTheSameStructure) {
  TempDir dir;
  // A replay-buffer-like storage: batch [capacity], built from one row.
  const int64_t capacity = 1 << 16;
  TensorDict row({{"obs", torch::ones({64})},
                  {{"next", "done"}, torch::ones({1}, torch::kBool)}},
                 {});
  TensorDict spec = row.unsqueeze(0).expand({capacity});
  TensorDict storage = spec.memmap_like(dir.str(), /*sparse=*/true);
  EXPECT_TRUE(storage.is_memmap());
  EXPECT_FALSE(spec.is_memmap());
  EXPECT_EQ(storage.batch_size().vec(), std::vector<int64_t>{capacity});
  EXPECT_EQ(storage.get("obs").sizes(), (std::vector<int64_t>{capacity, 64}));
  EXPECT_EQ(FileSize(dir / "obs.memmap"),
            static_cast<uint64_t>(capacity * 64 * 4));
  struct stat st {};
  ASSERT_EQ(::stat((dir / "obs.memmap").c_str(), &st), 0);
  EXPECT_LT(st.st_blocks * 512, capacity * 64 * 4);  // sparse: nothing written
  EXPECT_FALSE(storage.get("obs").any().item<bool>());
  storage[5] = row;
  TensorDict reopened = TensorDict::load_memmap(dir.str());
  EXPECT_TRUE(reopened[5].value().get("obs").eq(1).all().item<bool>());
  EXPECT_TRUE(reopened.get({"next", "done"})[5].item<bool>());
  EXPECT_FALSE(reopened.get({"next", "done"})[4].item<bool>());
}

TEST(Memmap, MemmapIntoItsOwnDirectoryRewritesTheFiles) {
  TempDir dir;
  TensorDict td = MakeNested();
  td.memmap_(dir.str());
  TensorDict loaded = TensorDict::load_memmap(dir.str());
  loaded.get("obs").add_(10);
  loaded.memmap_(dir.str());
  TensorDict again = TensorDict::load_memmap(dir.str());
  EXPECT_EQ(again.get("obs")[1][2].item<float>(), 15.0F);
  // Temporary files are all renamed away.
  for (const std::string& path : ListTree(dir.str())) {
    EXPECT_EQ(path.find("%tmp"), std::string::npos) << path;
  }
}

// ---------------------------------------------------------------------------
// The files this library writes, byte for byte
// ---------------------------------------------------------------------------

TEST(MemmapFormat, MetaJsonListsEntriesInInsertionOrderThenTheDictMetadata) {
  TempDir dir;
  TensorDict td({{"zeta", torch::zeros({2, 3}, torch::kFloat16)},
                 {{"next", "obs"}, torch::zeros({2, 4, 5})},
                 {"alpha", torch::zeros({2}, torch::kInt64)}},
                {2}, at::Device(at::kCPU));
  td.get_tensordict("next").set("inner", torch::zeros({2, 1}, torch::kBool));
  td.memmap_(dir.str());

  const ordered_json meta = ReadJson(dir / "meta.json");
  EXPECT_EQ(JsonKeys(meta),
            (std::vector<std::string>{"zeta", "next", "alpha", "shape",
                                      "device", "_type"}));
  EXPECT_EQ(meta["zeta"],
            ordered_json::parse(R"({"device": "cpu", "shape": [2, 3],
      "dtype": "torch.float16", "is_nested": false})"));
  EXPECT_EQ(
      JsonKeys(meta["zeta"]),
      (std::vector<std::string>{"device", "shape", "dtype", "is_nested"}));
  EXPECT_EQ(meta["next"], ordered_json::parse(R"({"type": "TensorDict"})"));
  EXPECT_EQ(meta["alpha"]["dtype"], "torch.int64");
  EXPECT_EQ(meta["shape"], ordered_json({2}));
  EXPECT_EQ(meta["device"], "cpu");
  EXPECT_EQ(meta["_type"], "<class 'tensordict._td.TensorDict'>");

  const ordered_json sub = ReadJson(dir / "next/meta.json");
  EXPECT_EQ(JsonKeys(sub), (std::vector<std::string>{"obs", "inner", "shape",
                                                     "device", "_type"}));
  EXPECT_EQ(sub["obs"]["shape"], ordered_json({2, 4, 5}));
  EXPECT_EQ(sub["inner"]["dtype"], "torch.bool");
  EXPECT_EQ(sub["device"], "cpu");

  // Exactly the expected files: no temporary leftovers.
  EXPECT_EQ(ListTree(dir.str()),
            (std::vector<std::string>{"alpha.memmap", "meta.json", "next",
                                      "next/inner.memmap", "next/meta.json",
                                      "next/obs.memmap", "zeta.memmap"}));
}

TEST(MemmapFormat, LeafFilesHoldRawCContiguousLittleEndianBytes) {
  TempDir dir;
  // A non-contiguous leaf is written in C order.
  at::Tensor t = torch::arange(6, torch::kInt16).reshape({3, 2}).t();  // [2, 3]
  TensorDict td({{"t", t}, {"d", torch::tensor({0.5}, torch::kFloat64)}}, {});
  td.memmap(dir.str());
  const unsigned char expected_t[] = {0, 0, 2, 0, 4, 0, 1, 0, 3, 0, 5, 0};
  EXPECT_EQ(ReadFile(dir / "t.memmap"),
            std::string(reinterpret_cast<const char*>(expected_t),
                        sizeof(expected_t)));
  const unsigned char expected_d[] = {0, 0, 0, 0, 0, 0, 0xE0, 0x3F};
  EXPECT_EQ(ReadFile(dir / "d.memmap"),
            std::string(reinterpret_cast<const char*>(expected_d),
                        sizeof(expected_d)));
  EXPECT_EQ(ReadJson(dir / "meta.json")["device"], "cpu");
  EXPECT_EQ(ReadJson(dir / "meta.json")["shape"], ordered_json::array());
}

// ---------------------------------------------------------------------------
// Golden directories written by Python tensordict
// ---------------------------------------------------------------------------

TEST(MemmapGolden, FlatDictFromTensordict04LoadsExactly) {
  TensorDict td = TensorDict::load_memmap(DataDir() + "/v0.4/flat");
  EXPECT_EQ(td.keys(), tensordict_test::Keys({"obs", "done", "count"}));
  EXPECT_EQ(td.batch_size().vec(), std::vector<int64_t>{2});
  EXPECT_EQ(td.device(), at::Device(at::kCPU));
  EXPECT_TRUE(at::equal(td.get("obs"),
                        torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_TRUE(
      at::equal(td.get("done"), torch::tensor({true, false}).reshape({2, 1})));
  EXPECT_TRUE(at::equal(td.get("count"), torch::tensor({7, 8}, torch::kInt64)));
  EXPECT_TRUE(td.is_memmap());
}

TEST(MemmapGolden, NestedDictFromTensordict04LoadsExactly) {
  TensorDict td = TensorDict::load_memmap(DataDir() + "/v0.4/nested", true);
  EXPECT_EQ(td.keys(true),
            tensordict_test::Keys(
                {"obs", "next", {"next", "reward"}, {"next", "idx"}}));
  EXPECT_TRUE(at::equal(td.get("obs"),
                        torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_TRUE(
      at::equal(td.get({"next", "reward"}),
                torch::tensor({1.5, 2.5}, torch::kFloat64).reshape({2, 1})));
  EXPECT_TRUE(
      at::equal(td.get({"next", "idx"}), torch::tensor({7, 8}, torch::kInt64)));
  EXPECT_EQ(td.get_tensordict("next").batch_size().vec(),
            std::vector<int64_t>{2});
}

TEST(MemmapGolden, EveryDtypeFromTensordict04LoadsExactly) {
  TensorDict td = TensorDict::load_memmap(DataDir() + "/v0.4/dtypes");
  EXPECT_TRUE(
      at::equal(td.get("f16"), torch::tensor({1.5, -2.0}).to(torch::kHalf)));
  EXPECT_TRUE(at::equal(td.get("bf16"),
                        torch::tensor({1.5, -2.0}).to(torch::kBFloat16)));
  EXPECT_TRUE(
      at::equal(td.get("u8"), torch::tensor({0, 255}).to(torch::kUInt8)));
  EXPECT_TRUE(
      at::equal(td.get("i8"), torch::tensor({-128, 127}).to(torch::kInt8)));
  EXPECT_TRUE(
      at::equal(td.get("i16"), torch::tensor({-3, 3}).to(torch::kInt16)));
  EXPECT_TRUE(
      at::equal(td.get("i32"), torch::tensor({-5, 5}).to(torch::kInt32)));
  EXPECT_TRUE(
      at::equal(td.get("f64"), torch::tensor({0.1, 0.2}, torch::kFloat64)));
  at::Tensor c = td.get("c64");
  ASSERT_EQ(c.scalar_type(), at::kComplexFloat);
  const auto* cv = c.data_ptr<c10::complex<float>>();
  EXPECT_EQ(cv[0], c10::complex<float>(1, 2));
  EXPECT_EQ(cv[1], c10::complex<float>(3, -4));
  EXPECT_TRUE(at::equal(td.get("b"), torch::tensor({true, false})));
}

TEST(MemmapGolden, BatchedAndScalarDictsFromTensordict04LoadExactly) {
  TensorDict b2 = TensorDict::load_memmap(DataDir() + "/v0.4/batch2d");
  EXPECT_EQ(b2.batch_size().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(b2.get("x"),
                        torch::arange(24, torch::kInt32).reshape({2, 3, 4})));
  TensorDict sc = TensorDict::load_memmap(DataDir() + "/v0.4/scalar_batch");
  EXPECT_EQ(sc.batch_dims(), 0);
  EXPECT_EQ(sc.get("x").dim(), 0);
  EXPECT_EQ(sc.get("x").item<float>(), 3.25F);
}

TEST(MemmapGolden, NewestFormatLoadsWithItsNonTensorData) {
  TensorDict td = TensorDict::load_memmap(DataDir() + "/newest/mmap_example");
  EXPECT_EQ(td.batch_size().vec(), (std::vector<int64_t>{2, 1}));
  // "string" is NonTensorData: an entry, but not a leaf. The newest format
  // stores no batch size for it: it takes its dict's.
  EXPECT_EQ(td.keys(true), tensordict_test::Keys({"nested",
                                                  {"nested", "int64"},
                                                  {"nested", "string"},
                                                  {"nested", "bfloat16"}}));
  EXPECT_EQ(
      td.keys(true, true),
      tensordict_test::Keys({{"nested", "int64"}, {"nested", "bfloat16"}}));
  EXPECT_EQ(td.get_non_tensor({"nested", "string"}),
            nlohmann::ordered_json::array({"a string!"}));
  // As tensordict 0.4 prints it (given the _tensordict/meta.json it needs).
  EXPECT_EQ(tensordict::repr(td),
            "TensorDict(\n"
            "    fields={\n"
            "        nested: TensorDict(\n"
            "            fields={\n"
            "                bfloat16: MemoryMappedTensor(shape=torch.Size([2, "
            "1]), device=cpu, dtype=torch.bfloat16, is_shared=True),\n"
            "                int64: MemoryMappedTensor(shape=torch.Size([2, "
            "1]), device=cpu, dtype=torch.int64, is_shared=True),\n"
            "                string: NonTensorData(data=['a string!'], "
            "batch_size=torch.Size([2, 1]), device=cpu)},\n"
            "            batch_size=torch.Size([2, 1]),\n"
            "            device=cpu,\n"
            "            is_shared=False)},\n"
            "    batch_size=torch.Size([2, 1]),\n"
            "    device=cpu,\n"
            "    is_shared=False)");
  // The leaf files carry trailing bytes beyond their data; they are ignored.
  EXPECT_TRUE(at::equal(td.get({"nested", "int64"}),
                        torch::tensor({1, 2}, torch::kInt64).reshape({2, 1})));
  EXPECT_TRUE(at::equal(td.get({"nested", "bfloat16"}),
                        torch::ones({2, 1}, torch::kBFloat16)));
}

TEST(MemmapGolden, WhatThisLibraryWritesMatchesTheTensordict04Files) {
  // Same dict as the Python fixture: same leaf bytes, same meta entries
  // (apart from is_nested, which newer versions add).
  TempDir dir;
  TensorDict td({{"obs", torch::arange(6, torch::kFloat32).reshape({2, 3})},
                 {"done", torch::tensor({true, false}).reshape({2, 1})},
                 {"count", torch::tensor({7, 8}, torch::kInt64)}},
                {2}, at::Device(at::kCPU));
  td.memmap_(dir.str());
  const std::string golden = DataDir() + "/v0.4/flat";
  for (const char* f : {"obs.memmap", "done.memmap", "count.memmap"}) {
    EXPECT_EQ(ReadFile(dir / f), ReadFile(golden + "/" + f)) << f;
  }
  ordered_json ours = ReadJson(dir / "meta.json");
  for (const char* k : {"obs", "done", "count"}) ours[k].erase("is_nested");
  EXPECT_EQ(ours, ReadJson(golden + "/meta.json"));
  EXPECT_EQ(JsonKeys(ours), JsonKeys(ReadJson(golden + "/meta.json")));
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(MemmapErrors, MissingOrNonTensorDictDirectoriesAreClearErrors) {
  TempDir dir;
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "nope"); },
                  "load_memmap: '" + (dir / "nope") + "' does not exist");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir.str()); },
      "load_memmap: '" + dir.str() +
          "' is not a TensorDict memmap directory: it has no meta.json");
  // A file is read as a .tdz archive (archive_test.cpp), as in Python.
  WriteFile(dir / "file", "x");
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "file"); },
                  "load_memmap: '" + (dir / "file") +
                      "' is a file but not a TensorDict archive (a zip file "
                      "with a top-level meta.json entry): it holds 1 bytes");
  // A NonTensorData directory from Python is not a TensorDict.
  ExpectThrowsMsg(
      [&] {
        (void)TensorDict::load_memmap(DataDir() +
                                      "/newest/mmap_example/nested/string");
      },
      "load_memmap: '" + DataDir() +
          "/newest/mmap_example/nested/string/meta.json' does not describe a "
          "TensorDict "
          "(\"_type\" is \"<class 'tensordict.tensorclass.NonTensorData'>\")");
  MakeDir(dir / "notype", R"({"shape": [2], "device": "cpu"})");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "notype"); },
      "load_memmap: '" + (dir / "notype/meta.json") +
          "' does not describe a TensorDict (\"_type\" is missing)");
}

TEST(MemmapErrors, MalformedMetaJsonIsAClearError) {
  TempDir dir;
  MakeDir(dir / "bad", R"({"x": {"device": "cpu", )");
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "bad"); },
                  "load_memmap: '" + (dir / "bad/meta.json") +
                      "' is not valid JSON (syntax error at byte 25)");
  MakeDir(dir / "array", "[1, 2]");
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "array"); },
                  "load_memmap: '" + (dir / "array/meta.json") +
                      "' must hold a JSON object, got [1,2]");
  MakeDir(
      dir / "shape",
      R"({"shape": [2, -1], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "shape"); },
      "load_memmap: '" + (dir / "shape/meta.json") +
          "': \"shape\" must be a list of non-negative integers, got [2,-1]");
  MakeDir(dir / "entry", std::string(R"({"x": 3, )") + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "entry"); },
                  "load_memmap: '" + (dir / "entry/meta.json") +
                      "': the entry of key x must be a JSON object, got 3");
  MakeDir(
      dir / "leafshape",
      std::string(
          R"({"x": {"device": "cpu", "shape": "2", "dtype": "torch.int8"}, )") +
          kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "leafshape"); },
                  "load_memmap: '" + (dir / "leafshape/meta.json") +
                      "': key x has an invalid shape \"2\" (expected a list of "
                      "non-negative integers)");
  MakeDir(
      dir / "huge",
      std::string(
          R"({"x": {"shape": [2, 4611686018427387904, 4], "dtype": "torch.int8"}, )") +
          kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "huge"); },
                  "load_memmap: '" + (dir / "huge/meta.json") +
                      "': key x has shape [2, 4611686018427387904, 4], which "
                      "is too large");
}

TEST(MemmapErrors, NumbersOutOfRangeAndWronglyTypedFieldsAreClearErrors) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Parsed: a number out of range is an error of its own.
      {R"({"x": {"shape": [1e400], "dtype": "torch.int8"}, )",
       "' is not usable JSON (number overflow parsing '1e400')"},
      {R"({"x": {"shape": [2], "dtype": "torch.int8", "n": -1e400}, )",
       "' is not usable JSON (number overflow parsing '-1e400')"},
      // Fields of the wrong type.
      {R"({"x": {"shape": [2.0], "dtype": "torch.int8"}, )",
       "': key x has an invalid shape [2.0] (expected a list of non-negative "
       "integers)"},
      {R"({"x": {"shape": [18446744073709551616], "dtype": "torch.int8"}, )",
       "': key x has an invalid shape [1.8446744073709552e+19] (expected a "
       "list of "
       "non-negative integers)"},
      {R"({"x": {"shape": {"0": 2}, "dtype": "torch.int8"}, )",
       "': key x has an invalid shape {\"0\":2} (expected a list of "
       "non-negative "
       "integers)"},
      {R"({"x": {"type": 7}, )", "': key x has unsupported type \"7\""},
      {R"({"x": {"shape": [2], "dtype": "torch.int8", "is_nested": "yes"}, "device": 0, )",
       "': \"device\" must be a string, got 0"},
  };
  int i = 0;
  for (const auto& [entries, error] : cases) {
    const std::string d = dir / std::to_string(i++);
    MakeDir(
        d,
        entries +
            R"("shape": [2], "_type": "<class 'tensordict._td.TensorDict'>"})",
        {{"x.memmap", "ab"}});
    ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(d); },
                    "load_memmap: '" + d + "/meta.json" + error);
  }
  MakeDir(dir / "type", R"({"shape": [2], "_type": ["TensorDict"]})");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "type"); },
      "load_memmap: '" + (dir / "type/meta.json") +
          "' does not describe a TensorDict (\"_type\" is [\"TensorDict\"])");
  MakeDir(dir / "batch",
          R"({"shape": 2, "_type": "<class 'tensordict._td.TensorDict'>"})");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "batch"); },
      "load_memmap: '" + (dir / "batch/meta.json") +
          "': \"shape\" must be a list of non-negative integers, got 2");
}

TEST(MemmapErrors, UnknownDtypeIsATypeError) {
  TempDir dir;
  MakeDir(
      dir.str(),
      std::string(
          R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.float8"}, )") +
          kTail,
      {{"x.memmap", std::string(2, '\0')}});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)TensorDict::load_memmap(dir.str()); },
      "load_memmap: '" + (dir / "meta.json") +
          "': key x has unknown dtype \"torch.float8\"");
}

TEST(MemmapErrors, MissingOrShortLeafFilesAreClearErrors) {
  TempDir dir;
  const std::string meta =
      std::string(
          R"({"x": {"device": "cpu", "shape": [2, 3], "dtype": "torch.float32"}, )") +
      kTail;
  MakeDir(dir / "missing", meta);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "missing"); },
                  "load_memmap: key x: leaf file '" +
                      (dir / "missing/x.memmap") + "' is missing");
  MakeDir(dir / "short", meta, {{"x.memmap", std::string(23, '\0')}});
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "short"); },
      "load_memmap: key x: leaf file '" + (dir / "short/x.memmap") +
          "' holds 23 bytes, but shape [2, 3] of torch.float32 needs 24");
  // Extra trailing bytes are fine.
  MakeDir(dir / "long", meta, {{"x.memmap", std::string(25, '\0')}});
  EXPECT_EQ(TensorDict::load_memmap(dir / "long").get("x").sizes(),
            (std::vector<int64_t>{2, 3}));
}

TEST(MemmapErrors, ShapesThatDoNotMatchTheBatchSizeAreClearErrors) {
  TempDir dir;
  MakeDir(
      dir / "leaf",
      std::string(
          R"({"x": {"device": "cpu", "shape": [3], "dtype": "torch.int8"}, )") +
          kTail,
      {{"x.memmap", "abc"}});
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "leaf"); },
                  "load_memmap: '" + (dir / "leaf/meta.json") +
                      "': key x has shape [3], which does not start with the "
                      "batch size [2]");
  MakeDir(dir / "sub",
          std::string(R"({"next": {"type": "TensorDict"}, )") + kTail);
  MakeDir(
      dir / "sub/next",
      R"({"shape": [5], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "sub"); },
      "load_memmap: '" + (dir / "sub/next/meta.json") +
          "': the batch size [5] of key next does not start with the "
          "parent's batch size [2]");
  MakeDir(dir / "nosub",
          std::string(R"({"next": {"type": "TensorDict"}, )") + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "nosub"); },
                  "load_memmap: '" + (dir / "nosub/next") + "' does not exist");
}

TEST(MemmapErrors, NestedKeysAreNamedInFullInLeafErrors) {
  TempDir dir;
  MakeDir(dir.str(),
          std::string(R"({"next": {"type": "TensorDict"}, )") + kTail);
  MakeDir(
      dir / "next",
      std::string(
          R"({"obs": {"device": "cpu", "shape": [2], "dtype": "torch.int16"}, )") +
          kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir.str()); },
                  "load_memmap: key ('next', 'obs'): leaf file '" +
                      (dir / "next/obs.memmap") + "' is missing");
}

TEST(MemmapErrors, ReservedAndCollidingKeysAreRejectedBeforeAnythingIsWritten) {
  TempDir dir;
  for (const char* k : {"shape", "device", "_type"}) {
    TensorDict td({{k, torch::zeros({2})}}, {2});
    auto snap = tensordict_test::TakeSnapshot(td);
    ExpectThrowsMsg<c10::ValueError>(
        [&] { td.memmap_(dir / "r"); },
        std::string("memmap_: key ") + k +
            " is reserved by the memmap format (meta.json uses \"shape\", "
            "\"device\" "
            "and \"_type\" for the dict's own metadata)");
    tensordict_test::ExpectUnchanged(td, snap);
    EXPECT_FALSE(Exists(dir / "r"));
  }
  TensorDict nested({{{"next", "shape"}, torch::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)nested.memmap(dir / "r"); },
      "memmap: key ('next', 'shape') is reserved by the memmap format "
      "(meta.json uses "
      "\"shape\", \"device\" and \"_type\" for the dict's own metadata)");
  TensorDict clash(
      {{"a", torch::zeros({2})}, {{"a.memmap", "x"}, torch::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)clash.memmap_like(dir / "r"); },
      "memmap_like: key a.memmap would be stored as 'a.memmap', which "
      "another entry of "
      "the same dict uses");
  TensorDict bad_utf8(
      {{"ok", torch::zeros({2})}, {{"n", "\xff"}, torch::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::ValueError>([&] { bad_utf8.memmap_(dir / "r"); },
                                   "memmap_: key ('n', '\xff') is not valid "
                                   "UTF-8, which meta.json cannot hold");
  TensorDict unsupported({{"q", torch::zeros({2}, torch::kComplexHalf)}}, {2});
  ExpectThrowsMsg<c10::TypeError>([&] { unsupported.memmap_(dir / "r"); },
                                  "memmap_: key q has dtype torch.complex32, "
                                  "which the memmap format does not support");
  // 216 bytes fit a name (with room for the temporary suffix); 75 '/' do
  // not, once escaped.
  TensorDict long_ok({{std::string(216, 'x'), torch::zeros({2})}}, {2});
  (void)long_ok.memmap(dir / "ok");
  std::string escaped;
  for (int i = 0; i < 75; ++i) escaped += "%2F";
  TensorDict too_long({{std::string(75, '/'), torch::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::ValueError>([&] { (void)too_long.memmap(dir / "r"); },
                                   "memmap: key " + std::string(75, '/') +
                                       " is too long for a file name ('" +
                                       escaped + ".memmap' has 232 bytes)");
  EXPECT_FALSE(Exists(dir / "r"));
}

TEST(MemmapErrors, APrefixThatIsAFileIsAClearErrorAndTheDictIsUnchanged) {
  TempDir dir;
  WriteFile(dir / "file", "x");
  TensorDict td = MakeNested();
  auto snap = tensordict_test::TakeSnapshot(td);
  ExpectThrowsMsg(
      [&] { td.memmap_(dir / "file"); },
      "memmap_: '" + (dir / "file") + "' exists and is not a directory");
  tensordict_test::ExpectUnchanged(td, snap);
  EXPECT_FALSE(td.is_memmap());
}

TEST(MemmapErrors, DeeplyNestedJsonValuesAreReportedWithoutBeingPrinted) {
  TempDir dir;
  MakeDir(dir.str(), std::string(R"({"x": {"shape": )") +
                         std::string(500, '[') + std::string(500, ']') +
                         R"(, "dtype": "torch.int8"}, )" + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir.str()); },
                  "load_memmap: '" + (dir / "meta.json") +
                      "': key x has an invalid shape (deeply nested JSON) "
                      "(expected a list "
                      "of non-negative integers)");
}

TEST(MemmapErrors, JsonNestedDeeperThan512LevelsIsRejectedWhileParsing) {
  TempDir dir;
  // Adding "shape" to the root object copies the value of "x", recursively:
  // without the limit, 100000 levels (200 kB) overflow an 8 MB stack in a
  // sanitized build, and 1000000 levels in a release build.
  for (const size_t depth : {size_t{100000}, size_t{1000000}}) {
    MakeDir(dir / "deep", std::string(R"({"x": )") + std::string(depth, '[') +
                              std::string(depth, ']') + ", " + kTail);
    ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "deep"); },
                    "load_memmap: '" + (dir / "deep/meta.json") +
                        "' nests JSON values more than 512 levels deep");
  }
  // 512 levels (the object and 511 arrays) parse; 513 do not.
  MakeDir(dir / "limit", std::string(R"({"x": )") + std::string(511, '[') +
                             std::string(511, ']') + ", " + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "limit"); },
                  "load_memmap: '" + (dir / "limit/meta.json") +
                      "': the entry of key x must be a JSON object, got "
                      "(deeply nested JSON)");
  MakeDir(dir / "over", std::string(R"({"x": )") + std::string(512, '[') +
                            std::string(512, ']') + ", " + kTail);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "over"); },
                  "load_memmap: '" + (dir / "over/meta.json") +
                      "' nests JSON values more than 512 levels deep");
}

// Opening a FIFO to read blocks until a writer comes: without the check, these
// calls hang.
TEST(MemmapErrors, FifosAndOtherNonRegularFilesAreRejectedWithoutBlocking) {
  TempDir dir;
  MakeDirs(dir / "meta");
  ASSERT_EQ(::mkfifo((dir / "meta/meta.json").c_str(), 0644), 0);
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "meta"); },
      "load_memmap: '" + (dir / "meta/meta.json") + "' is not a regular file");
  MakeDirs(dir / "dirmeta/meta.json");
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "dirmeta"); },
                  "load_memmap: '" + (dir / "dirmeta/meta.json") +
                      "' is not a regular file");
  MakeDir(
      dir / "leaf",
      std::string(
          R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )") +
          kTail);
  ASSERT_EQ(::mkfifo((dir / "leaf/x.memmap").c_str(), 0644), 0);
  for (const bool read_only : {true, false}) {
    ExpectThrowsMsg(
        [&] { (void)TensorDict::load_memmap(dir / "leaf", read_only); },
        "load_memmap: key x: '" + (dir / "leaf/x.memmap") +
            "' is not a regular file");
  }
  MakeDir(
      dir / "dev",
      std::string(
          R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.int8"}, )") +
          kTail);
  ASSERT_EQ(::symlink("/dev/zero", (dir / "dev/x.memmap").c_str()), 0);
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "dev", /*read_only=*/true); },
      "load_memmap: key x: '" + (dir / "dev/x.memmap") +
          "' is not a regular file");
  ASSERT_EQ(::mkfifo((dir / "saved").c_str(), 0644), 0);
  ExpectThrowsMsg([&] { (void)TensorDict::load(dir / "saved"); },
                  "load: '" + (dir / "saved") + "' is not a regular file");
}

TEST(MemmapErrors, NestedTensorEntriesAndUnknownTypesAreRejected) {
  TempDir dir;
  MakeDir(
      dir / "nt",
      std::string(
          R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.int8", "is_nested": true}, )") +
          kTail,
      {{"x.memmap", "ab"}});
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "nt"); },
      "load_memmap: '" + (dir / "nt/meta.json") +
          "': key x is a nested (jagged) tensor, which is not supported");
  MakeDir(dir / "lazy",
          std::string(R"({"x": {"type": "LazyStackedTensorDict"}, )") + kTail);
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(dir / "lazy"); },
      "load_memmap: '" + (dir / "lazy/meta.json") +
          "': key x has unsupported type \"LazyStackedTensorDict\"");
}

TEST(MemmapErrors, ADirectoryThatContainsItselfIsAnErrorNotARecursion) {
  TempDir dir;
  MakeDir(dir.str(),
          std::string(R"({"loop": {"type": "TensorDict"}, )") + kTail);
  ASSERT_EQ(::symlink(".", (dir / "loop").c_str()), 0);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir.str()); },
                  "load_memmap: '" + (dir / "loop") +
                      "' is one of its own parent directories");
}

// ---------------------------------------------------------------------------
// Interrupted writes
// ---------------------------------------------------------------------------

TEST(MemmapCrash, LeftoverTemporaryFilesFromAnInterruptedWriteAreIgnored) {
  TempDir dir;
  TensorDict td = MakeNested();
  td.memmap(dir.str());
  // What a writer killed before its renames leaves behind.
  WriteFile(dir / "obs.memmap%tmp.12345.0", "garbage");
  WriteFile(dir / "meta.json%tmp.12345.1", "{\"trunc");
  ExpectSameDict(TensorDict::load_memmap(dir.str()), td);
  TensorDict td2 = td.clone();
  td2.get("obs").fill_(3);
  td2.memmap(dir.str());
  ExpectSameDict(TensorDict::load_memmap(dir.str()), td2);
}

TEST(MemmapCrash, AWriterKilledMidWayNeverLeavesMetaJsonDescribingMissingData) {
  TempDir dir;
  TensorDict v1(
      {{"a", torch::full({4, 2}, 1.0)}, {{"next", "b"}, torch::full({4}, 1.0)}},
      {4});
  v1.memmap(dir.str());
  // The second version is large, so the child is still writing when killed.
  const int64_t n = 1 << 19;
  TensorDict v2({}, {n});
  for (int i = 0; i < 8; ++i)
    v2.set("k" + std::to_string(i), torch::full({n, 4}, 2.0));
  v2.set({"next", "b"}, torch::full({n}, 2.0));

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      v2.memmap_(dir.str());
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  // Kill the child as soon as its first temporary file shows up.
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; ++i) {
    for (const std::string& name : ListDir(dir.str())) {
      if (name.find("%tmp") != std::string::npos) seen = true;
    }
    if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);

  // Whatever the child got to, what is there is either a complete version or
  // no meta.json at all.
  try {
    TensorDict got = TensorDict::load_memmap(dir.str());
    ::testing::Test::RecordProperty("outcome", got.contains("a") ? "v1" : "v2");
    if (got.contains("a")) {
      ExpectSameDict(got, v1);
    } else {
      ExpectSameDict(got, v2);
    }
  } catch (const c10::Error& e) {
    ::testing::Test::RecordProperty("outcome", "no meta.json");
    EXPECT_EQ(
        e.msg(),
        "load_memmap: '" + dir.str() +
            "' is not a TensorDict memmap directory: it has no meta.json");
  }
  // A new write over the debris succeeds.
  v1.memmap(dir.str());
  ExpectSameDict(TensorDict::load_memmap(dir.str()), v1);
}

// ---------------------------------------------------------------------------
// consolidate, save, load
// ---------------------------------------------------------------------------

TEST(Consolidate, LeavesBecomeAlignedViewsIntoOneStorage) {
  TensorDict td(
      {{"a", torch::arange(3, torch::kInt8)},
       {{"n", "c"}, torch::tensor({1.0, 2.0}, torch::kComplexDouble)},
       {"b", torch::arange(6, torch::kFloat32).reshape({3, 2}).t().t()},
       {"t", torch::arange(6, torch::kInt16)
                 .reshape({2, 3})
                 .t()}},  // non-contiguous
      {});
  EXPECT_FALSE(td.is_consolidated());
  TensorDict c = td.consolidate();
  EXPECT_TRUE(c.is_consolidated());
  EXPECT_TRUE(c.get_tensordict("n").is_consolidated());
  ExpectSameDict(c, td);
  const auto* base = static_cast<const char*>(c.get("a").storage().data());
  for (const auto& k : c.keys(true, true)) {
    at::Tensor t = c.get(k);
    EXPECT_TRUE(tensordict_test::SharesStorage(t, c.get("a"))) << k;
    const auto off = static_cast<const char*>(t.data_ptr()) - base;
    EXPECT_EQ(off % 8, 0) << k;
    EXPECT_TRUE(t.is_contiguous()) << k;
  }
  // a: [0, 3), pad to 16 for complex128; c: [16, 48); b: [48, 72); t: [72, 84).
  EXPECT_EQ(static_cast<const char*>(c.get({"n", "c"}).data_ptr()) - base, 16);
  EXPECT_EQ(static_cast<const char*>(c.get("b").data_ptr()) - base, 48);
  EXPECT_EQ(static_cast<const char*>(c.get("t").data_ptr()) - base, 72);
  EXPECT_EQ(c.get("a").storage().nbytes(), 84U);
  // Replacing a leaf breaks consolidation; writing into one does not.
  c.get("a").fill_(5);
  EXPECT_TRUE(c.is_consolidated());
  c.set("a", torch::zeros({3}, torch::kInt8));
  EXPECT_FALSE(c.is_consolidated());
  EXPECT_FALSE(td.is_consolidated());
}

TEST(Consolidate, ToAnotherDeviceIsOneCopyWithTheViewsRebuilt) {
  TensorDict td({{"x", torch::ones({4, 3})},
                 {{"n", "y"}, torch::zeros({4}, torch::kInt64)}},
                {4});
  TensorDict c = td.consolidate();
  TensorDict m = c.to(at::Device(at::kMeta));
  EXPECT_EQ(m.device(), at::Device(at::kMeta));
  EXPECT_TRUE(m.is_consolidated());
  EXPECT_TRUE(m.get("x").is_meta());
  EXPECT_TRUE(tensordict_test::SharesStorage(m.get("x"), m.get({"n", "y"})));
  EXPECT_EQ(m.get("x").sizes(), c.get("x").sizes());
  EXPECT_EQ(m.get({"n", "y"}).storage_offset(),
            c.get({"n", "y"}).storage_offset());
  // Back on the same device: nothing is copied.
  EXPECT_TRUE(c.to(at::kCPU).get("x").is_same(c.get("x")));
}

TEST(SaveLoad, SaveWritesDataThenJsonThenItsLengthAndLoadMapsItBack) {
  TempDir dir;
  TensorDict td = MakeNested();
  const std::string path = dir / "td.bin";
  td.save(path);
  const std::string bytes = ReadFile(path);
  ASSERT_GE(bytes.size(), 8U);
  int64_t len = 0;
  std::memcpy(&len, bytes.data() + bytes.size() - 8, 8);
  ASSERT_LE(len, static_cast<int64_t>(bytes.size()) - 8);
  const size_t data_size = bytes.size() - 8 - static_cast<size_t>(len);
  const ordered_json meta =
      ordered_json::parse(bytes.substr(data_size, static_cast<size_t>(len)));
  EXPECT_EQ(meta["type"], "TensorDict");
  EXPECT_EQ(meta["batch_size"], ordered_json({2}));
  EXPECT_EQ(JsonKeys(meta["entries"]),
            (std::vector<std::string>{"obs", "next", "count"}));
  EXPECT_EQ(meta["entries"]["obs"]["offset"], 0);
  EXPECT_EQ(meta["entries"]["obs"]["dtype"], "torch.float32");
  EXPECT_EQ(bytes.substr(0, 24), TensorBytes(td.get("obs")));
  const int64_t count_off = meta["entries"]["count"]["offset"].get<int64_t>();
  EXPECT_EQ(bytes.substr(static_cast<size_t>(count_off), 16),
            TensorBytes(td.get("count")));

  TensorDict loaded = TensorDict::load(path);
  EXPECT_TRUE(loaded.is_consolidated());
  ExpectSameDict(loaded, td);
  // Copy-on-write: writing the loaded dict leaves the file alone.
  loaded.get("obs").fill_(9);
  EXPECT_EQ(ReadFile(path), bytes);
  // A consolidated dict saves its buffer as is.
  TensorDict c = td.consolidate();
  c.save(dir / "c.bin");
  ExpectSameDict(TensorDict::load(dir / "c.bin"), td);
}

TEST(SaveLoad, CorruptFilesAreClearErrors) {
  TempDir dir;
  ExpectThrowsMsg([&] { (void)TensorDict::load(dir / "none"); },
                  "load: '" + (dir / "none") + "' does not exist");
  WriteFile(dir / "tiny", "abc");
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load(dir / "tiny"); },
      "load: '" + (dir / "tiny") +
          "' holds 3 bytes, too few for a saved TensorDict (it ends with an "
          "8-byte length)");
  std::string bad(16, '\0');
  bad[8] = 100;
  WriteFile(dir / "len", bad);
  ExpectThrowsMsg([&] { (void)TensorDict::load(dir / "len"); },
                  "load: '" + (dir / "len") +
                      "' is not a saved TensorDict (its metadata length 100 "
                      "does not fit in "
                      "its 16 bytes)");
  // A leaf that points past the data.
  const std::string json =
      R"({"type": "TensorDict", "batch_size": [], "device": "None", "entries": {"x": {"dtype": "torch.int64", "shape": [2], "offset": 8}}})";
  std::string file = std::string(16, '\0') + json;
  const int64_t jl = static_cast<int64_t>(json.size());
  file.append(reinterpret_cast<const char*>(&jl), 8);
  WriteFile(dir / "oob", file);
  ExpectThrowsMsg([&] { (void)TensorDict::load(dir / "oob"); },
                  "load: '" + (dir / "oob") +
                      "': key x has offset 8 and 16 bytes, which do not fit "
                      "in the file's 16 "
                      "data bytes");
}

TEST(SaveLoad,
     TruncatedFilesNumbersOutOfRangeAndWronglyTypedFieldsAreClearErrors) {
  TempDir dir;
  const std::string path = dir / "td.bin";
  MakeNested().save(path);
  const std::string bytes = ReadFile(path);
  // Cut short: the last 8 bytes are no longer the length.
  const std::string cut = bytes.substr(0, bytes.size() - 3);
  WriteFile(path, cut);
  int64_t len = 0;
  std::memcpy(&len, cut.data() + cut.size() - 8, 8);
  ExpectThrowsMsg([&] { (void)TensorDict::load(path); },
                  "load: '" + path +
                      "' is not a saved TensorDict (its metadata length " +
                      std::to_string(len) + " does not fit in its " +
                      std::to_string(cut.size()) + " bytes)");
  // A whole length, but the JSON cut short.
  const std::string json =
      R"({"type": "TensorDict", "batch_size": [], "device": "None", "entries": {"x": )";
  WriteFile(path, SavedFile("", json));
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load(path); },
      "load: '" + path +
          "': the metadata is not valid JSON (syntax error at byte " +
          std::to_string(json.size() + 1) + ")");
  const std::string head =
      R"({"type": "TensorDict", "batch_size": [], "device": )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("None", "entries": {"x": {"dtype": "torch.int8", "shape": [2], "offset": 1e400}}})",
       "': the metadata is not usable JSON (number overflow parsing '1e400')"},
      {R"("None", "entries": {"x": {"dtype": "torch.int8", "shape": [2], "offset": "0"}}})",
       "': key x has offset \"0\" and 2 bytes, which do not fit in the "
       "file's 8 data "
       "bytes"},
      {R"("None", "entries": {"x": {"dtype": 8, "shape": [2], "offset": 0}}})",
       "': key x has unknown dtype 8"},
      {R"("None", "entries": {"x": {"dtype": "torch.int8", "shape": 2, "offset": 0}}})",
       "': key x has an invalid shape"},
      {R"("None", "entries": []})", "': malformed metadata at the root"},
      {R"(["cpu"], "entries": {}})",
       "': \"device\" must be a string, got [\"cpu\"]"},
  };
  for (const auto& [tail, error] : cases) {
    WriteFile(path, SavedFile(std::string(8, '\0'), head + tail));
    ExpectThrowsMsg([&] { (void)TensorDict::load(path); },
                    "load: '" + path + error);
  }
  WriteFile(path, SavedFile("", R"({"type": ["TensorDict"], "entries": {}})"));
  ExpectThrowsMsg([&] { (void)TensorDict::load(path); },
                  "load: '" + path + "' does not hold a saved TensorDict");
}

TEST(SaveLoad, MetadataNestedDeeperThan512LevelsIsRejectedWhileParsing) {
  TempDir dir;
  // As for meta.json: adding "type" copies the value of "entries".
  for (const size_t depth : {size_t{100000}, size_t{1000000}}) {
    WriteFile(dir / "deep", SavedFile("", std::string(R"({"entries": )") +
                                              std::string(depth, '[') +
                                              std::string(depth, ']') +
                                              R"(, "type": "TensorDict"})"));
    ExpectThrowsMsg(
        [&] { (void)TensorDict::load(dir / "deep"); },
        "load: '" + (dir / "deep") +
            "': the metadata nests JSON values more than 512 levels deep");
  }
}

// ---------------------------------------------------------------------------
// pickle_save
// ---------------------------------------------------------------------------

TEST(PickleSave, WritesANestedDictOfTensorsThatPickleLoadReadsBack) {
  TensorDict td = MakeNested();
  std::vector<char> bytes = tensordict::pickle_save(td);
  // torch.save's zip format.
  ASSERT_GE(bytes.size(), 4U);
  EXPECT_EQ(std::string(bytes.data(), 2), "PK");
  // No TorchScript type tags: torch.load(weights_only=True) refuses their
  // global (PythonReference.TorchLoadWithWeightsOnlyReadsPickleSave).
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()).find("restore_type_tag"),
            std::string::npos);
  c10::IValue v = torch::jit::pickle_load(bytes);
  ASSERT_TRUE(v.isGenericDict());
  c10::impl::GenericDict d = v.toGenericDict();
  std::vector<std::string> keys;
  for (const auto& e : d) keys.push_back(e.key().toStringRef());
  EXPECT_EQ(keys, (std::vector<std::string>{"obs", "next", "count"}));
  EXPECT_TRUE(at::equal(d.at("obs").toTensor(), td.get("obs")));
  EXPECT_TRUE(at::equal(d.at("count").toTensor(), td.get("count")));
  c10::impl::GenericDict next = d.at("next").toGenericDict();
  EXPECT_TRUE(
      at::equal(next.at("reward").toTensor(), td.get({"next", "reward"})));
  EXPECT_TRUE(at::equal(next.at("done").toTensor(), td.get({"next", "done"})));
}

}  // namespace

// ---------------------------------------------------------------------------
// Crashes and full disks
// ---------------------------------------------------------------------------

namespace {

std::vector<std::string> TmpFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& name : ListDir(dir)) {
    if (name.find("%tmp.") != std::string::npos) out.push_back(name);
  }
  return out;
}

}  // namespace

// A writer killed mid-way leaves temporary files. The old names were
// "<file>%tmp.<pid>.<n>": a restarted writer with the same PID (PID 1 in a
// container) hit "File exists". Names now carry a per-process random nonce,
// and the next write removes the temporary files no live writer holds.
TEST(MemmapCrash, StaleTempFilesOfDeadWritersAreRemovedByTheNextWrite) {
  TempDir dir;
  const std::string pid = std::to_string(::getpid());
  MakeDirs(dir / "next");
  for (const std::string& name :
       {"obs.memmap%tmp." + pid + ".0", "meta.json%tmp." + pid + ".1",
        std::string("count.memmap%tmp.1.0123456789abcdef.7")}) {
    WriteFile(dir / name, "stale");
  }
  WriteFile(dir / ("next/reward.memmap%tmp." + pid + ".2"), "stale");
  // A live writer's temporary file: held under an exclusive flock.
  const std::string live = dir / "obs.memmap%tmp.99.fedcba9876543210.0";
  WriteFile(live, "live");
  const int held = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);

  TensorDict td = MakeNested();
  td.memmap_(dir.str());
  EXPECT_EQ(TmpFilesIn(dir.str()),
            std::vector<std::string>{"obs.memmap%tmp.99.fedcba9876543210.0"});
  EXPECT_EQ(TmpFilesIn(dir / "next"), std::vector<std::string>{});
  ExpectSameDict(TensorDict::load_memmap(dir.str()), MakeNested());
  ::close(held);  // its writer "dies": the next write removes it
  TensorDict::load_memmap(dir.str()).unlock_().memmap_(dir.str());
  EXPECT_EQ(TmpFilesIn(dir.str()), std::vector<std::string>{});

  // save() cleans up next to its file the same way.
  WriteFile(dir / ("blob.td%tmp." + pid + ".0"), "stale");
  td.save(dir / "blob.td");
  EXPECT_EQ(TmpFilesIn(dir.str()), std::vector<std::string>{});
  ExpectSameDict(TensorDict::load(dir / "blob.td"), MakeNested());
  // In a directory of the user's, save() removes only its own file's.
  MakeDirs(dir / "user");
  WriteFile(dir / ("user/notes%tmp." + pid + ".0"), "not ours");
  WriteFile(dir / ("user/blob.td%tmp." + pid + ".0"), "stale");
  td.save(dir / "user/blob.td");
  EXPECT_EQ(TmpFilesIn(dir / "user"),
            std::vector<std::string>{"notes%tmp." + pid + ".0"});
}

// memmap_like reserves the files' space unless asked for sparse files.
TEST(MemmapCrash, MemmapLikeReservesSpaceUnlessSparse) {
  TempDir dir;
  TensorDict tmpl({{"x", torch::zeros({1}).expand({1 << 20})}}, {1 << 20});
  const int64_t bytes = int64_t{4} << 20;
  TensorDict reserved = tmpl.memmap_like(dir / "reserved");
  TensorDict sparse = tmpl.memmap_like(dir / "sparse", /*sparse=*/true);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "reserved/x.memmap").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, bytes);
  EXPECT_GE(static_cast<int64_t>(st.st_blocks) * 512, bytes);
  ASSERT_EQ(::stat((dir / "sparse/x.memmap").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, bytes);
  EXPECT_LT(static_cast<int64_t>(st.st_blocks) * 512, bytes);
  EXPECT_FALSE(reserved.any());
  EXPECT_FALSE(sparse.any());
}

// On a disk too small for the files, reserving fails up front with a clear
// error and leaves no file behind; sparse files are created (and would die
// of SIGBUS when a write needs a page the disk cannot give).
TEST(MemmapCrash, AFullDiskIsAClearErrorWhenTheSpaceIsReserved) {
  TempDir dir;
  const std::string mnt = dir / "small";
  MakeDirs(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs at " << mnt << " ("
                 << std::strerror(errno)
                 << "): needs root or CAP_SYS_ADMIN; the full-disk test is "
                    "skipped";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mnt};
  TensorDict tmpl({{"x", torch::zeros({1}).expand({1 << 20})}}, {1 << 20});
  ExpectThrowsMsgPrefix([&] { (void)tmpl.memmap_like(mnt + "/buf"); },
                        "memmap_like: cannot reserve 4194304 bytes for '" +
                            mnt + "/buf/x.memmap%tmp.");
  try {
    (void)tmpl.memmap_like(mnt + "/buf");
  } catch (const c10::Error& e) {
    EXPECT_NE(e.msg().find("': No space left on device"), std::string::npos)
        << e.msg();
  }
  EXPECT_EQ(TmpFilesIn(mnt + "/buf"), std::vector<std::string>{});
  EXPECT_FALSE(Exists(mnt + "/buf/meta.json"));

  TensorDict sparse = tmpl.memmap_like(mnt + "/sparse", /*sparse=*/true);
  EXPECT_EQ(sparse.batch_size().vec(), std::vector<int64_t>{1 << 20});

  // The replay buffer's disk storage reserves its space at the first write.
  tensordict::ReplayBuffer rb(
      tensordict::ReplayBufferOptions(1 << 20).storage_dir(mnt + "/rb"));
  ExpectThrowsMsgPrefix(
      [&] {
        rb.add(TensorDict({{"x", torch::zeros({})}}, {}));
      },
      "memmap_like: cannot reserve 4194304 bytes for '" + mnt +
          "/rb/storage/x.memmap%tmp.");
  EXPECT_EQ(rb.size(), 0);
}
