// Single-buffer persistence: consolidate, single-file save/load and
// pickle_save.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/persistence.h>
#include <tensordict/tensordict.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memmap_test_util.h"
#include "test_util.h"

namespace {

using nlohmann::ordered_json;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::TempDir;
using tensordict_test::memmap_test::ExpectSameDict;
using tensordict_test::memmap_test::JsonKeys;
using tensordict_test::memmap_test::MakeNested;
using tensordict_test::memmap_test::ReadFile;
using tensordict_test::memmap_test::TensorBytes;
using tensordict_test::memmap_test::WriteFile;

// The bytes of a file in save()'s format: `data`, then `json`, then its
// length.
std::string SavedFile(const std::string& data, const std::string& json) {
  const int64_t len = static_cast<int64_t>(json.size());
  return data + json +
         std::string(reinterpret_cast<const char*>(&len), sizeof(len));
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
