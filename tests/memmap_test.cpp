// Memory-mapped directories in Python tensordict's format: round trips
// (memmap_, memmap, memmap_like, load_memmap), the files this library writes,
// byte for byte, and golden directories written by Python tensordict. Bad
// directories and interrupted writes are tested in memmap_errors_test.cpp,
// consolidate, save/load and pickle_save in save_load_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <tensordict/tensordict.h>

#include <complex>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memmap_test_util.h"
#include "test_util.h"

namespace {

using nlohmann::ordered_json;
using tensordict::TensorDict;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
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
using tensordict_test::memmap_test::DataDir;
using tensordict_test::memmap_test::ExpectSameDict;
using tensordict_test::memmap_test::JsonKeys;
using tensordict_test::memmap_test::kTail;
using tensordict_test::memmap_test::MakeDir;
using tensordict_test::memmap_test::MakeNested;
using tensordict_test::memmap_test::ReadFile;
using tensordict_test::memmap_test::TensorBytes;
using tensordict_test::memmap_test::WriteFile;

ordered_json ReadJson(const std::string& path) {
  return ordered_json::parse(ReadFile(path));
}

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

}  // namespace
