// Tests for printing: NestedKey via operator<< and fmt, and TensorDict's repr
// against golden fixtures produced by Python tensordict (tests/data/repr).
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <ATen/MapAllocator.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.h"

namespace {

using tensordict::NestedKey;
using tensordict::TensorDict;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

template <typename T>
std::string Streamed(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

struct Fixture {
  std::string header;  // the first line, without its newline
  std::string repr;    // the rest, minus exactly one trailing newline
};

// Reads tests/data/repr/<name>.txt.
Fixture ReadFixture(const std::string& name) {
  const std::string path =
      tensordict_test::TestDataDir() + "/repr/" + name + ".txt";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  Fixture f;
  const size_t nl = bytes.find('\n');
  EXPECT_NE(nl, std::string::npos) << path;
  if (nl == std::string::npos) return f;
  f.header = bytes.substr(0, nl);
  f.repr = bytes.substr(nl + 1);
  if (!f.repr.empty() && f.repr.back() == '\n') f.repr.pop_back();
  return f;
}

// Checks the fixture's header and that `td` prints exactly its bytes, through
// operator<<, repr() and fmt.
void ExpectReprMatchesFixture(const TensorDict& td, const std::string& name) {
  SCOPED_TRACE("fixture " + name);
  Fixture f = ReadFixture(name);
  EXPECT_EQ(f.header.rfind("# built in Python tensordict by: ", 0), 0u)
      << f.header;
  EXPECT_EQ(Streamed(td), f.repr);
  EXPECT_EQ(tensordict::repr(td), f.repr);
  EXPECT_EQ(fmt::format("{}", td), f.repr);
}

// A float32 CPU tensor whose storage is a POSIX shared-memory segment named
// "/torch_<...>", as `share_memory_()` makes in Python.
at::Tensor SharedZeros(std::vector<int64_t> sizes) {
  static std::atomic<int> counter{0};
  const std::string name = "/torch_tensordict_test_" +
                           std::to_string(::getpid()) + "_" +
                           std::to_string(counter++);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t nbytes = static_cast<size_t>(numel) * sizeof(float);
  at::DataPtr data = at::MapAllocator::makeDataPtr(
      name,
      at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_EXCLUSIVE |
          at::ALLOCATOR_MAPPED_UNLINK,
      nbytes, nullptr);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor t = at::empty({0}, at::kFloat);
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i > 1; --i)
    strides[i - 2] = strides[i - 1] * sizes[i - 1];
  t.set_(storage, 0, sizes, strides);
  t.zero_();
  return t;
}

// ---------------------------------------------------------------------------
// NestedKey printing
// ---------------------------------------------------------------------------

TEST(NestedKeyFormat, PlainKeyPrintsBare) {
  NestedKey k = "obs";
  EXPECT_EQ(Streamed(k), "obs");
  EXPECT_EQ(fmt::format("{}", k), "obs");
  EXPECT_EQ(k.str(), "obs");
  EXPECT_EQ(fmt::format("{}", NestedKey{"obs"}), "obs");
}

TEST(NestedKeyFormat, NestedKeyPrintsAsAPythonTuple) {
  NestedKey k = {"next", "obs"};
  EXPECT_EQ(Streamed(k), "('next', 'obs')");
  EXPECT_EQ(fmt::format("{}", k), "('next', 'obs')");
  EXPECT_EQ(fmt::format("key {}!", NestedKey{"a", "b", "c"}),
            "key ('a', 'b', 'c')!");
}

TEST(NestedKeyFormat, ComponentsAreQuotedLikePythonRepr) {
  EXPECT_EQ((NestedKey{"it's", "x"}).str(), "(\"it's\", 'x')");
  EXPECT_EQ((NestedKey{"say \"hi\"", "x"}).str(), "('say \"hi\"', 'x')");
  EXPECT_EQ((NestedKey{"a'b\"c", "x"}).str(), "('a\\'b\"c', 'x')");
  EXPECT_EQ((NestedKey{"back\\slash", "x"}).str(), "('back\\\\slash', 'x')");
  EXPECT_EQ((NestedKey{"new\nline", "tab\t"}).str(),
            "('new\\nline', 'tab\\t')");
}

TEST(NestedKeyFormat, BytesThatAreNotUtf8AreCopiedAsTheyAre) {
  // A key is any byte string; bytes that start no UTF-8 sequence print as
  // they are, and do not swallow the bytes after them.
  EXPECT_EQ((NestedKey{"n", "\xff"}).str(), "('n', '\xff')");
  EXPECT_EQ((NestedKey{"n", "\xe9\n"}).str(), "('n', '\xe9\\n')");
  const std::string stray = std::string("\x80") + "caf\xc3\xa9";
  EXPECT_EQ((NestedKey{"n", stray}).str(), "('n', '" + stray + "')");
}

TEST(NestedKeyFormat, NonEmptyFormatSpecIsRejected) {
  NestedKey k = "obs";
  EXPECT_THROW((void)fmt::format(fmt::runtime("{:>10}"), k), fmt::format_error);
  TensorDict td;
  EXPECT_THROW((void)fmt::format(fmt::runtime("{:x}"), td), fmt::format_error);
}

// ---------------------------------------------------------------------------
// Golden fixtures from Python tensordict
// ---------------------------------------------------------------------------

TEST(ReprGolden, EmptyDictWithNoBatchDims) {
  ExpectReprMatchesFixture(TensorDict({}, {}), "empty");
  ExpectReprMatchesFixture(TensorDict(), "empty");
}

TEST(ReprGolden, EmptyDictWithABatchDim) {
  ExpectReprMatchesFixture(TensorDict({}, {3}), "empty_batch");
}

TEST(ReprGolden, TutorialDictBuiltDirectly) {
  ExpectReprMatchesFixture(TensorDict({{"a", torch::zeros({10, 3})},
                                       {"b", torch::zeros({10, 3, 4})}},
                                      {10, 3}),
                           "tutorial");
}

TEST(ReprGolden, TutorialDictBuiltByLazyPreallocation) {
  TensorDict td({}, {10, 3});
  for (int64_t i = 0; i < 10; ++i) {
    td[i] =
        TensorDict({{"a", torch::rand({3})}, {"b", torch::rand({3, 4})}}, {3});
  }
  ExpectReprMatchesFixture(td, "tutorial");
}

TEST(ReprGolden, EveryDtypeName) {
  TensorDict td({{"f16", torch::zeros({2}, torch::kHalf)},
                 {"bf16", torch::zeros({2}, torch::kBFloat16)},
                 {"u8", torch::zeros({2}, torch::kByte)},
                 {"i8", torch::zeros({2}, torch::kChar)},
                 {"i16", torch::zeros({2}, torch::kShort)},
                 {"i32", torch::zeros({2}, torch::kInt)},
                 {"f64", torch::zeros({2}, torch::kDouble)},
                 {"c64", torch::zeros({2}, torch::kComplexFloat)}},
                {2});
  ExpectReprMatchesFixture(td, "dtypes");
}

TEST(ReprGolden, IndexedRowOfANestedDict) {
  TensorDict td({{"obs", torch::zeros({1000, 64})},
                 {{"next", "obs"}, torch::zeros({1000, 64})}},
                {1000});
  ExpectReprMatchesFixture(td[5], "indexed_row");
  Fixture f = ReadFixture("indexed_row");
  EXPECT_EQ(fmt::format("{}", td[5]), f.repr)
      << "fmt of the IndexedTensorDict itself";
  EXPECT_EQ(Streamed(td[5]), f.repr);
}

TEST(ReprGolden, DeeplyNestedDictsIndentByEightPerLevel) {
  TensorDict deeper({{"c", torch::zeros({3, 4, 5, 6}, torch::kDouble)}},
                    {3, 4, 5});
  TensorDict nested(
      {{"b", torch::zeros({3, 4, 5}, torch::kLong)}, {"deeper", deeper}},
      {3, 4});
  TensorDict td({{"a", torch::zeros({3, 4})}, {"nested", nested}}, {3});
  ExpectReprMatchesFixture(td, "nested_deep");
}

TEST(ReprGolden, RolloutBufferSortsFieldsAndNestsNext) {
  TensorDict td({{"obs", torch::zeros({1000, 64})},
                 {"action", torch::zeros({1000, 4})},
                 {"reward", torch::zeros({1000, 1})},
                 {"done", torch::zeros({1000, 1}, torch::kBool)},
                 {{"next", "obs"}, torch::zeros({1000, 64})}},
                {1000});
  ExpectReprMatchesFixture(td, "rollout");
}

TEST(ReprGolden, ScalarLeafWithDevice) {
  ExpectReprMatchesFixture(
      TensorDict({{"x", torch::zeros({})}}, {}, at::Device(at::kCPU)),
      "scalar_device");
  // A dict moved to the CPU prints the same.
  ExpectReprMatchesFixture(
      TensorDict({{"x", torch::zeros({})}}, {}).to(at::Device(at::kCPU)),
      "scalar_device");
}

TEST(ReprGolden, FieldsAreSortedByTheWholeRenderedLine) {
  TensorDict td({{"obs", torch::zeros({4, 3})},
                 {"a1", torch::zeros({4})},
                 {"a", torch::zeros({4}, torch::kLong)},
                 {"a-b", torch::zeros({4}, torch::kBool)},
                 {{"next", "reward"}, torch::zeros({4, 1})}},
                {4});
  ExpectReprMatchesFixture(td, "sorting");
}

TEST(ReprGolden, SharedMemoryLeavesPrintIsSharedTrue) {
  at::Tensor obs;
  try {
    obs = SharedZeros({4, 3});
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "cannot create POSIX shared memory here: "
                 << e.what_without_backtrace();
  }
  TensorDict td({{"obs", obs}, {{"next", "reward"}, SharedZeros({4, 1})}}, {4});
  EXPECT_TRUE(td.is_shared());
  EXPECT_TRUE(td.get_tensordict("next").is_shared());
  ExpectReprMatchesFixture(td, "shared");
}

// ---------------------------------------------------------------------------
// Repr details not covered by a fixture
// ---------------------------------------------------------------------------

TEST(ReprDetails, MixedSharedAndPrivateLeavesAreNotShared) {
  at::Tensor shm;
  try {
    shm = SharedZeros({2});
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "cannot create POSIX shared memory here: "
                 << e.what_without_backtrace();
  }
  TensorDict td({{"s", shm}, {"p", torch::zeros({2})}}, {2});
  EXPECT_FALSE(td.is_shared());
  const std::string expected =
      "TensorDict(\n"
      "    fields={\n"
      "        p: Tensor(shape=torch.Size([2]), device=cpu, "
      "dtype=torch.float32, is_shared=False),\n"
      "        s: Tensor(shape=torch.Size([2]), device=cpu, "
      "dtype=torch.float32, is_shared=True)},\n"
      "    batch_size=torch.Size([2]),\n"
      "    device=None,\n"
      "    is_shared=False)";
  EXPECT_EQ(Streamed(td), expected);
  EXPECT_FALSE(TensorDict({{"p", torch::zeros({2})}}, {2}).is_shared());
  EXPECT_FALSE(TensorDict({}, {2}).is_shared());
}

TEST(ReprDetails, EmptySubDictIndentsItsEmptyFieldsBlock) {
  TensorDict td({{"sub", TensorDict({}, {2, 5})},
                 {"x", torch::zeros({2}, torch::kComplexDouble)}},
                {2});
  const std::string expected =
      "TensorDict(\n"
      "    fields={\n"
      "        sub: TensorDict(\n"
      "            fields={\n"
      "            },\n"
      "            batch_size=torch.Size([2, 5]),\n"
      "            device=None,\n"
      "            is_shared=False),\n"
      "        x: Tensor(shape=torch.Size([2]), device=cpu, "
      "dtype=torch.complex128, is_shared=False)},\n"
      "    batch_size=torch.Size([2]),\n"
      "    device=None,\n"
      "    is_shared=False)";
  EXPECT_EQ(Streamed(td), expected);
  EXPECT_EQ(fmt::format("{}", td), expected);
}

TEST(ReprDetails, DeviceIsPrintedOnEveryLevelAfterAMove) {
  TensorDict td =
      TensorDict({{{"n", "x"}, torch::zeros({1}, torch::kBool)}}, {1}).cpu();
  const std::string expected =
      "TensorDict(\n"
      "    fields={\n"
      "        n: TensorDict(\n"
      "            fields={\n"
      "                x: Tensor(shape=torch.Size([1]), device=cpu, "
      "dtype=torch.bool, is_shared=False)},\n"
      "            batch_size=torch.Size([1]),\n"
      "            device=cpu,\n"
      "            is_shared=False)},\n"
      "    batch_size=torch.Size([1]),\n"
      "    device=cpu,\n"
      "    is_shared=False)";
  EXPECT_EQ(Streamed(td), expected);
}

TEST(ReprDetails, FmtFormatEqualsOperatorStreamInsideLargerStrings) {
  TensorDict td({{"a", torch::zeros({2, 3})}, {{"n", "b"}, torch::zeros({2})}},
                {2});
  EXPECT_EQ(fmt::format("<{}>", td), "<" + Streamed(td) + ">");
  EXPECT_EQ(fmt::format("{} {}", td[0], NestedKey{"n", "b"}),
            Streamed(TensorDict(td[0])) + " ('n', 'b')");
}

}  // namespace
