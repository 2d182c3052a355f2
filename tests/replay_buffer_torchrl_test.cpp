// A disk-backed ReplayBuffer and TorchRL's replay-buffer directory
// (ReplayBuffer.dumps / loads, TorchRL 0.4): the files a storage_dir keeps
// for TorchRL, and opening a directory TorchRL dumped. The directories
// TorchRL itself writes and loads are tested in python_torchrl_test.cpp;
// here the files are checked against the layout and built by hand.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <sys/stat.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

using nlohmann::json;
using tensordict::PrioritizedSampler;
using tensordict::RandomSampler;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::SamplerWithoutReplacement;
using tensordict::TensorDict;
using tensordict::TorchRLVersion;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::IsRegularFile;
using tensordict_test::ListTree;
using tensordict_test::MakeDirs;
using tensordict_test::ParentPath;
using tensordict_test::RemoveTree;
using tensordict_test::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& text) {
  MakeDirs(ParentPath(path));
  std::ofstream(path, std::ios::binary) << text;
}

json ReadJson(const std::string& path) { return json::parse(ReadFile(path)); }

std::vector<double> ReadDoubles(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<double> out(bytes.size() / sizeof(double));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const std::string& rel : ListTree(dir)) {
    const std::string path = dir + "/" + rel;
    if (IsRegularFile(path)) out[path] = ReadFile(path);
  }
  return out;
}

// Rows i = first, ..., first + n - 1: obs [i, -i], ("next", "done") i % 3 == 2.
TensorDict Rows(int64_t first, int64_t n) {
  at::Tensor i = torch::arange(first, first + n, torch::kFloat32);
  return TensorDict({{"obs", torch::stack({i, -i}, 1)},
                     {{"next", "done"}, (i.remainder(3) == 2).unsqueeze(1)}},
                    {n});
}

std::vector<float> Obs0(const TensorDict& storage) {
  at::Tensor t = storage.get("obs").select(1, 0).contiguous();
  return std::vector<float>(t.data_ptr<float>(),
                            t.data_ptr<float>() + t.numel());
}

ReplayBufferOptions Disk(int64_t capacity, const std::string& dir) {
  return ReplayBufferOptions(capacity).storage_dir(dir).seed(0);
}

// ---- The files a storage_dir keeps for TorchRL -------------------------------

TEST(ReplayBufferTorchRL,
     ADiskBackedBufferKeepsTheLengthAndCursorTorchRLReads) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  ReplayBuffer rb(Disk(8, dir));
  rb.extend(Rows(0, 5));
  EXPECT_EQ(ReadJson(dir + "/storage/storage_metadata.json"),
            json::parse(R"({"metadata": {}, "is_pytree": false, "len": 5})"));
  EXPECT_EQ(ReadJson(dir + "/writer/metadata.json"),
            json::parse(R"({"cursor": 5})"));
  EXPECT_EQ(ReadFile(dir + "/buffer_metadata.json"), R"({"batch_size": null})");
  // RandomSampler.dumps writes nothing.
  EXPECT_FALSE(Exists(dir + "/sampler"));

  // Each number has a fixed-width field, rewritten in place.
  rb.extend(Rows(5, 4));
  EXPECT_EQ(ReadFile(dir + "/writer/metadata.json"),
            "{\"cursor\": 1" + std::string(19, ' ') + "}");
  EXPECT_EQ(ReadJson(dir + "/storage/storage_metadata.json")["len"], 8);
  rb.add(Rows(9, 1)[0]);
  EXPECT_EQ(ReadJson(dir + "/writer/metadata.json")["cursor"], 2);
  rb.clear();
  EXPECT_EQ(ReadJson(dir + "/storage/storage_metadata.json")["len"], 0);
  EXPECT_EQ(ReadJson(dir + "/writer/metadata.json")["cursor"], 0);
}

// The largest priority is [value, null] for TorchRL 0.14 (the default), a
// number for 0.4.
TEST(ReplayBufferTorchRL, APrioritizedBufferKeepsTheTreesTorchRLReads) {
  for (const auto version : {TorchRLVersion::v0_14, TorchRLVersion::v0_4}) {
    const bool v014 = version == TorchRLVersion::v0_14;
    auto max_priority = [&](const char* value) {
      return json::parse(v014 ? std::string("[") + value + ", null]" : value);
    };
    TempDir tmp;
    const std::string dir = tmp / "rb";
    ReplayBuffer rb(Disk(4, dir).torchrl_version(version).sampler(
        PrioritizedSampler().alpha(0.5).beta(0.25).eps(0.01)));
    rb.extend(Rows(0, 3));
    const std::string meta = dir + "/sampler/sampler_metadata.json";
    EXPECT_EQ(ReadFile(meta).find(v014 ? "\"_max_priority\": [1.0"
                                       : "\"_max_priority\": 1.0"),
              std::string("{\"_alpha\": 0.5, \"_beta\": 0.25, \"_eps\": 0.01, ")
                  .size());
    EXPECT_EQ(ReadJson(meta),
              json::parse(v014 ? R"({"_alpha": 0.5, "_beta": 0.25, "_eps": 0.01,
                                     "_max_priority": [1.0, null], "_max_capacity": 4,
                                     "_schema_version": 1})"
                               : R"({"_alpha": 0.5, "_beta": 0.25, "_eps": 0.01,
                                     "_max_priority": 1.0, "_max_capacity": 4})"));
    const double m1 = std::sqrt(1.01);
    EXPECT_EQ(ReadDoubles(dir + "/sampler/sumtree.memmap"),
              (std::vector<double>{m1, m1, m1, 0}));
    EXPECT_EQ(ReadDoubles(dir + "/sampler/mintree.memmap"),
              (std::vector<double>{m1, m1, m1, FLT_MAX}));

    rb.update_priority(torch::tensor({0, 2}), torch::tensor({4.0, 0.5}));
    EXPECT_EQ(ReadJson(meta)["_max_priority"], max_priority("4.0"));
    EXPECT_EQ(
        ReadDoubles(dir + "/sampler/sumtree.memmap"),
        (std::vector<double>{std::pow(4.01, 0.5), m1, std::pow(0.51, 0.5), 0}));
    rb.add(Rows(3, 1)[0]);  // a new row gets the largest priority
    EXPECT_EQ(ReadDoubles(dir + "/sampler/sumtree.memmap")[3],
              std::pow(4.01, 0.5));
    rb.clear();
    EXPECT_EQ(ReadJson(meta)["_max_priority"], max_priority("1.0"));
  }
}

TEST(ReplayBufferTorchRL, ARowOfMassZeroHoldsTheMinTreesInitialValue) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  ReplayBuffer rb(Disk(2, dir).sampler(PrioritizedSampler().alpha(1).eps(0)));
  rb.extend(Rows(0, 2));
  rb.update_priority(torch::tensor({0}), torch::tensor({0.0}));
  EXPECT_EQ(ReadDoubles(dir + "/sampler/sumtree.memmap"),
            (std::vector<double>{0, 1}));
  EXPECT_EQ(ReadDoubles(dir + "/sampler/mintree.memmap"),
            (std::vector<double>{FLT_MAX, 1}));
}

TEST(ReplayBufferTorchRL, SamplerWithoutReplacementWritesAFreshEpoch) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  ReplayBuffer rb(
      Disk(4, dir).sampler(SamplerWithoutReplacement().drop_last(true)));
  rb.extend(Rows(0, 3));
  EXPECT_EQ(ReadJson(dir + "/sampler/sampler_metadata.json"),
            json::parse(R"({"len_storage": 0, "_sample_list": null,
                            "drop_last": true, "_ran_out": false})"));
  EXPECT_FALSE(Exists(dir + "/sampler/sumtree.memmap"));
}

TEST(ReplayBufferTorchRL, ReopeningRewritesTheFilesForTheNewSampler) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  {
    ReplayBuffer rb(Disk(4, dir).sampler(PrioritizedSampler().alpha(1).eps(0)));
    rb.extend(Rows(0, 2));
    rb.update_priority(torch::tensor({1}), torch::tensor({3.0}));
  }
  {
    ReplayBuffer rb(Disk(4, dir).sampler(PrioritizedSampler().alpha(1).eps(0)));
    EXPECT_EQ(ReadDoubles(dir + "/sampler/sumtree.memmap"),
              (std::vector<double>{1, 3, 0, 0}));
  }
  {
    ReplayBuffer rb(Disk(4, dir));  // RandomSampler: no sampler files
    EXPECT_FALSE(Exists(dir + "/sampler"));
    EXPECT_EQ(ReadJson(dir + "/writer/metadata.json")["cursor"], 2);
    rb.add(Rows(2, 1)[0]);
  }
  // Written without priorities: every row starts over at priority 1.
  ReplayBuffer rb(Disk(4, dir).sampler(PrioritizedSampler().alpha(1).eps(0)));
  EXPECT_EQ(ReadDoubles(dir + "/sampler/sumtree.memmap"),
            (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(ReadJson(dir + "/sampler/sampler_metadata.json")["_max_priority"],
            json::parse("[1.0, null]"));
  EXPECT_EQ(ReadJson(dir + "/storage/storage_metadata.json")["len"], 3);
}

// A reopened directory's tree files are corrected where they differ, in
// place (the same file); one of another size is replaced.
TEST(ReplayBufferTorchRL, ReopeningCorrectsTheTreeFiles) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  const std::string sum = dir + "/sampler/sumtree.memmap";
  const std::string min = dir + "/sampler/mintree.memmap";
  {
    ReplayBuffer rb(Disk(4, dir).sampler(PrioritizedSampler().alpha(1).eps(0)));
    rb.extend(Rows(0, 2));
    rb.update_priority(torch::tensor({1}), torch::tensor({3.0}));
  }
  const std::vector<double> garbage{7, NAN, -0.0, 2};
  WriteFile(sum, std::string(reinterpret_cast<const char*>(garbage.data()),
                             garbage.size() * sizeof(double)));
  WriteFile(min, "short");
  struct stat before {};
  ASSERT_EQ(::stat(sum.c_str(), &before), 0);
  // Another alpha: every mass changes.
  ReplayBuffer rb(Disk(4, dir).sampler(PrioritizedSampler().alpha(0.5).eps(0)));
  struct stat after {};
  ASSERT_EQ(::stat(sum.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  const std::vector<double> read = ReadDoubles(sum);
  EXPECT_EQ(read, (std::vector<double>{1, std::sqrt(3.0), 0, 0}));
  EXPECT_FALSE(std::signbit(read[2]));  // the bits, not only the value
  EXPECT_EQ(ReadDoubles(min),
            (std::vector<double>{1, std::sqrt(3.0), FLT_MAX, FLT_MAX}));
  rb.update_priority(torch::tensor({0}), torch::tensor({4.0}));
  EXPECT_EQ(ReadDoubles(sum), (std::vector<double>{2, std::sqrt(3.0), 0, 0}));
}

namespace {

// The indices and weights of `rb.sample(n)` after manual_seed(seed).
std::pair<std::vector<int64_t>, std::vector<float>> Draw(ReplayBuffer& rb,
                                                         int64_t n,
                                                         uint64_t seed) {
  rb.manual_seed(seed);
  auto [data, info] = rb.sample(n);
  const int64_t* i = info.index.data_ptr<int64_t>();
  const float* w = info.weight.data_ptr<float>();
  return {std::vector<int64_t>(i, i + n), std::vector<float>(w, w + n)};
}

}  // namespace

// A reopened PrioritizedSampler's trees hold what they held before closing:
// at capacity 16 its sum tree's leaves are the mapped sumtree.memmap
// (corrected on reopening, then written by updates and clear), at capacity
// 12 (not a multiple of 8) its own. It samples, updates and clears as a
// buffer in RAM that went through the same calls.
TEST(ReplayBufferTorchRL, AReopenedPrioritizedBufferSamplesAsOneInRam) {
  for (const int64_t capacity : {16, 12}) {
    SCOPED_TRACE(capacity);
    TempDir tmp;
    const std::string dir = tmp / "rb";
    const std::string sum = dir + "/sampler/sumtree.memmap";
    const auto sampler = PrioritizedSampler().alpha(1).beta(1).eps(0);
    ReplayBuffer ram(ReplayBufferOptions(capacity).sampler(sampler));
    const auto calls = [](ReplayBuffer& rb) {
      rb.extend(Rows(0, 20));  // wraps
      rb.update_priority(torch::tensor({0, 3, 5}),
                         torch::tensor({4.0, 0.0, 2.5}));
    };
    calls(ram);
    {
      ReplayBuffer rb(Disk(capacity, dir).sampler(sampler));
      calls(rb);
    }
    // Damaged entries, which reopening corrects.
    const std::vector<double> garbage{NAN, -1, 1e300};
    std::fstream(sum, std::ios::binary | std::ios::in | std::ios::out)
        .write(reinterpret_cast<const char*>(garbage.data()),
               static_cast<std::streamsize>(garbage.size() * sizeof(double)));
    ReplayBuffer rb(Disk(capacity, dir).sampler(sampler));
    EXPECT_EQ(Draw(rb, 64, 7), Draw(ram, 64, 7));
    for (ReplayBuffer* b : {&rb, &ram}) {
      b->update_priority(torch::tensor({1, 3}), torch::tensor({9.0, 0.5}));
      b->extend(Rows(20, 5));
    }
    EXPECT_EQ(Draw(rb, 64, 8), Draw(ram, 64, 8));
    for (ReplayBuffer* b : {&rb, &ram}) {
      b->clear();
      b->extend(Rows(0, 6));
      b->update_priority(torch::tensor({2}), torch::tensor({3.0}));
    }
    EXPECT_EQ(Draw(rb, 64, 9), Draw(ram, 64, 9));
    std::vector<double> expected(static_cast<size_t>(capacity), 0.0);
    std::fill(expected.begin(), expected.begin() + 6, 1.0);
    expected[2] = 3;
    EXPECT_EQ(ReadDoubles(sum), expected);
    std::replace(expected.begin(), expected.end(), 0.0, double{FLT_MAX});
    EXPECT_EQ(ReadDoubles(dir + "/sampler/mintree.memmap"), expected);
  }
}

// ---- Opening a directory TorchRL dumped ----------------------------------------

// The directory TorchRL 0.4's TensorDictReplayBuffer(LazyMemmapStorage(8),
// PrioritizedSampler(8, alpha=0.5, beta=0.4, eps=0)).dumps(dir) writes after
// 11 rows (obs [i, -i], "index" as TorchRL's writer stores it) whose
// priorities are set to (row + 1)^2.
void WriteTorchRLDump(const std::string& dir) {
  TensorDict st = Rows(0, 8);  // rows 8, 9, 10 overwrote rows 0, 1, 2
  at::Tensor obs = st.get("obs");
  obs.narrow(0, 0, 3).copy_(Rows(8, 3).get("obs"));
  st.set("index", torch::arange(8, torch::kInt64));
  st.memmap(dir + "/storage");
  WriteFile(dir + "/storage/storage_metadata.json",
            R"({"metadata": {}, "is_pytree": false, "len": 8})");
  WriteFile(dir + "/writer/metadata.json", R"({"cursor": 3})");
  WriteFile(dir + "/buffer_metadata.json", R"({"batch_size": null})");
  WriteFile(
      dir + "/sampler/sampler_metadata.json",
      R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": 64.0, "_max_capacity": 8})");
  std::vector<double> sum(8), min(8);
  for (int i = 0; i < 8; ++i) sum[i] = min[i] = i + 1.0;  // sqrt((i+1)^2)
  WriteFile(dir + "/sampler/sumtree.memmap",
            std::string(reinterpret_cast<const char*>(sum.data()), 64));
  WriteFile(dir + "/sampler/mintree.memmap",
            std::string(reinterpret_cast<const char*>(min.data()), 64));
}

TEST(ReplayBufferTorchRL, OpensADirectoryTorchRLDumped) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  WriteTorchRLDump(dir);
  ReplayBuffer rb(Disk(8, dir).sampler(PrioritizedSampler().alpha(0.5).eps(0)));
  EXPECT_EQ(rb.size(), 8);
  EXPECT_EQ(rb.cursor(), 3);
  EXPECT_EQ(Obs0(rb.storage()), (std::vector<float>{8, 9, 10, 3, 4, 5, 6, 7}));
  EXPECT_EQ(rb.storage().saved_path(),
            c10::optional<std::string>(dir + "/storage"));
  // The priorities, back from the tree: mass^(1 / alpha) - eps.
  TensorDict priority = TensorDict::load_memmap(dir + "/priority");
  EXPECT_TRUE(at::allclose(
      priority.get("priority"),
      torch::tensor({1., 4., 9., 16., 25., 36., 49., 64.}, torch::kFloat64)));
  // Sampling follows them: row 7 has mass 8 of 36.
  auto [data, info] = rb.sample(36000);
  const double share7 = info.index.eq(7).sum().item<double>() / 36000;
  EXPECT_NEAR(share7, 8.0 / 36, 0.01);

  // A write without "index" gets its rows' indices, as TorchRL's writer
  // stores them.
  rb.add(Rows(11, 1)[0]);
  rb.extend(Rows(12, 6));
  EXPECT_EQ(Obs0(rb.storage()),
            (std::vector<float>{16, 17, 10, 11, 12, 13, 14, 15}));
  at::Tensor index = rb.storage().get("index");
  EXPECT_TRUE(at::equal(index, torch::arange(8, torch::kInt64)));
  index.fill_(-1);
  rb.extend(Rows(18, 10));  // longer than the capacity
  EXPECT_TRUE(at::equal(index, torch::arange(8, torch::kInt64)));

  // Now it is a buffer of this library's, with TorchRL's files kept.
  EXPECT_TRUE(Exists(dir + "/state/meta.json"));
  EXPECT_EQ(ReadJson(dir + "/writer/metadata.json")["cursor"], 4);
  EXPECT_EQ(ReadJson(dir + "/sampler/sampler_metadata.json")["_max_priority"],
            json::parse("[64.0, null]"));
}

// TorchRL 0.14 writes "_max_priority" as [value, row] ([null, null] before
// any row had a priority, when the next row gets priority 1), and
// "_max_capacity" as a float.
TEST(ReplayBufferTorchRL, OpensTheMaxPriorityPairOfTorchRL014) {
  for (const auto& [text, max_p] : std::vector<std::pair<std::string, double>>{
           {"[64.0, 7.0]", 64.0}, {"[25, 4]", 25.0}, {"[null, null]", 1.0}}) {
    TempDir tmp;
    const std::string dir = tmp / "rb";
    WriteTorchRLDump(dir);
    WriteFile(
        dir + "/sampler/sampler_metadata.json",
        R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": )" +
            text + R"(, "_max_capacity": 8.0, "_schema_version": 1})");
    ReplayBuffer rb(
        Disk(8, dir).sampler(PrioritizedSampler().alpha(0.5).eps(0)));
    const TensorDict state = TensorDict::load_memmap(dir + "/state");
    EXPECT_EQ(state.get("max_priority").item<double>(), max_p) << text;
    TensorDict priority = TensorDict::load_memmap(dir + "/priority");
    EXPECT_TRUE(at::allclose(
        priority.get("priority"),
        torch::tensor({1., 4., 9., 16., 25., 36., 49., 64.}, torch::kFloat64)))
        << text;
  }
}

TEST(ReplayBufferTorchRL, ADumpThatIsNotFullIsOpenedWithItsRows) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  WriteTorchRLDump(dir);
  WriteFile(dir + "/storage/storage_metadata.json",
            R"({"metadata": {}, "is_pytree": false, "len": 3})");
  // A RandomSampler ignores the priorities.
  ReplayBuffer rb(Disk(8, dir));
  EXPECT_EQ(rb.size(), 3);
  EXPECT_EQ(rb.cursor(), 3);
  EXPECT_FALSE(Exists(dir + "/sampler"));
}

// Each damaged dump is rejected with its message, and nothing is written.
TEST(ReplayBufferTorchRL, ADamagedDumpIsRejectedAndLeftAsItWas) {
  struct Case {
    const char* file;  // relative to the dump; "" when removed
    const char* text;  // nullptr: remove the file
    std::string message;
    bool value_error;
  };
  TempDir tmp;
  const std::string dir = tmp / "rb";
  const std::string smeta = dir + "/storage/storage_metadata.json";
  const std::string writer = dir + "/writer/metadata.json";
  const std::string pmeta = dir + "/sampler/sampler_metadata.json";
  const std::vector<Case> cases = {
      {"storage/storage_metadata.json",
       R"({"metadata": {}, "is_pytree": true, "len": 8})",
       "ReplayBuffer: '" + smeta +
           "' describes a pytree storage (\"is_pytree\": true); only "
           "TensorDict storages can be opened",
       false},
      {"storage/storage_metadata.json",
       R"({"metadata": {}, "is_pytree": false, "len": 9})",
       "ReplayBuffer: '" + smeta + "': \"len\" is 9, outside [0, 8]", false},
      {"storage/storage_metadata.json", R"({"is_pytree": false, "len": 2.5})",
       "ReplayBuffer: '" + smeta + "': \"len\" must be an integer, got 2.5",
       false},
      {"storage/storage_metadata.json",
       R"({"metadata": {}, "is_pytree": false, "len": 5})",
       "ReplayBuffer: '" + writer +
           "': \"cursor\" is 3 but the storage holds 5 of 8 rows; a buffer "
           "that is not full writes next at its length",
       false},
      {"writer/metadata.json", nullptr,
       "ReplayBuffer: '" + writer +
           "' is missing; TorchRL's ReplayBuffer.dumps writes it",
       false},
      {"writer/metadata.json", R"({"cursor": 8})",
       "ReplayBuffer: '" + writer + "': \"cursor\" is 8, outside [0, 8)",
       false},
      {"writer/metadata.json", R"({"cursor": )",
       "ReplayBuffer: '" + writer +
           "' is not valid JSON (syntax error at byte 12)",
       false},
      {"writer/metadata.json", "[3]",
       "ReplayBuffer: '" + writer + "' must hold a JSON object, got array",
       false},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": 1.0, "_max_capacity": 9})",
       "ReplayBuffer: '" + pmeta +
           "': \"_max_capacity\" is 9, but the storage has capacity 8",
       true},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0, "_beta": 0.4, "_eps": 0.0, "_max_priority": 1.0, "_max_capacity": 8})",
       "ReplayBuffer: '" + pmeta +
           "': expected _alpha > 0, _eps >= 0 and _max_priority >= 0, got 0, "
           "0 and 1",
       false},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": [1.0], "_max_capacity": 8})",
       "ReplayBuffer: '" + pmeta +
           "': \"_max_priority\" must be a finite number or [value, index], "
           "got [1.0]",
       false},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": ["a", 1], "_max_capacity": 8})",
       "ReplayBuffer: '" + pmeta +
           "': \"_max_priority\" must be a finite number or [value, index], "
           "got [\"a\",1]",
       false},
      {"sampler/sampler_metadata.json",
       R"({"_alpha": 0.5, "_beta": 0.4, "_eps": 0.0, "_max_priority": 1.0, "_max_capacity": 8.5})",
       "ReplayBuffer: '" + pmeta +
           "': \"_max_capacity\" must be an integer, got 8.5",
       false},
      {"sampler/sumtree.memmap", nullptr,
       "ReplayBuffer: '" + dir +
           "/sampler/sumtree.memmap' is missing; TorchRL's "
           "PrioritizedSampler.dumps writes it next to '" +
           pmeta + "'",
       false},
      {"sampler/sumtree.memmap", "short",
       "ReplayBuffer: '" + dir +
           "/sampler/sumtree.memmap' holds 5 bytes, expected 64",
       false},
      {"storage/obs.memmap", nullptr,
       "ReplayBuffer: cannot reopen the buffer in '" + dir +
           "': load_memmap: key obs: leaf file '" + dir +
           "/storage/obs.memmap' is missing",
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    RemoveTree(dir);
    WriteTorchRLDump(dir);
    const std::string path = dir + "/" + c.file;
    if (c.text == nullptr) {
      ::unlink(path.c_str());
    } else {
      WriteFile(path, c.text);
    }
    const auto before = Files(dir);
    auto open = [&] {
      ReplayBuffer rb(Disk(8, dir).sampler(PrioritizedSampler().alpha(0.5)));
    };
    if (c.value_error) {
      ExpectThrowsMsg<c10::ValueError>(open, c.message);
    } else {
      ExpectThrowsMsg(open, c.message);
    }
    EXPECT_EQ(Files(dir), before);
  }
}

TEST(ReplayBufferTorchRL, ADumpOfAnotherCapacityIsAValueError) {
  TempDir tmp;
  const std::string dir = tmp / "rb";
  WriteTorchRLDump(dir);
  const auto before = Files(dir);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { ReplayBuffer rb(Disk(16, dir)); },
      "ReplayBuffer: the buffer in '" + dir +
          "' has capacity 8, but ReplayBufferOptions asks for capacity 16; "
          "open it with capacity 8");
  EXPECT_EQ(Files(dir), before);
}

}  // namespace
