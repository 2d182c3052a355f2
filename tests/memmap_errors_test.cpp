// What goes wrong around memory-mapped directories: malformed, hostile or
// corrupt directories and their error messages (MemmapErrors), and writers
// interrupted, killed or out of disk space (MemmapCrash).
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "memmap_test_util.h"
#include "test_util.h"

namespace {

using tensordict::TensorDict;
using tensordict_test::Exists;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectThrowsMsgPrefix;
using tensordict_test::ExpectUnchanged;
using tensordict_test::ListDir;
using tensordict_test::MakeDirs;
using tensordict_test::TakeSnapshot;
using tensordict_test::TempDir;
using tensordict_test::memmap_test::DataDir;
using tensordict_test::memmap_test::ExpectSameDict;
using tensordict_test::memmap_test::kTail;
using tensordict_test::memmap_test::MakeDir;
using tensordict_test::memmap_test::MakeNested;
using tensordict_test::memmap_test::WriteFile;

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
          "': key x holds a lazy stack, which a C++ TensorDict cannot hold "
          "(LazyStackedTensorDict::load_memmap opens its directory)");
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
