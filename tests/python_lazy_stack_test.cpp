// Interop with the reference Python tensordict (python_reference.h): lazy
// stacks. A lazy-stack directory written here loads in Python as the same
// LazyStackedTensorDict and prints the same, one that Python writes loads
// here, the reprs of stacks built the same way agree byte for byte, and
// padding matches Python's pad_sequence.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "python_reference.h"
#include "test_util.h"

namespace {

using tensordict::LazyStackedTensorDict;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

// The stacks both sides build: "agents" (observations of sizes 2 and 4, a
// nested dict, a key of agent 1's own, an integer leaf) along `dim`, and,
// for 0.14 only, "ragged" (batch sizes 2 and 3).
constexpr const char* kBuild = R"py(
import sys, torch
from tensordict import TensorDict, LazyStackedTensorDict
def lazy(tds, dim):
    if hasattr(LazyStackedTensorDict, "lazy_stack"):
        return LazyStackedTensorDict.lazy_stack(tds, dim)
    return LazyStackedTensorDict(*tds, stack_dim=dim)
def ar(*shape, start=0):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32) + start).reshape(shape)
def agents(dim):
    a = TensorDict({"obs": ar(3, 2), "reward": torch.ones(3),
                    "steps": torch.arange(3), "next": {"x": ar(3, 1)}}, [3])
    b = TensorDict({"obs": ar(3, 4, start=100), "reward": torch.full((3,), 2.0),
                    "steps": torch.arange(3) + 10, "next": {"x": ar(3, 1, start=10)},
                    "extra": torch.zeros(3, dtype=torch.bool)}, [3])
    return lazy([a, b], dim)
def ragged():
    return lazy([TensorDict({"r": torch.ones(2)}, [2]),
                 TensorDict({"r": torch.ones(3)}, [3])], 0)
)py";

at::Tensor Ar(std::vector<int64_t> shape, double start = 0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kFloat) + start).reshape(shape);
}

LazyStackedTensorDict Agents(int64_t dim) {
  TensorDict a({{"obs", Ar({3, 2})},
                {"reward", at::ones({3})},
                {"steps", at::arange(3)}},
               {3});
  a.set({"next", "x"}, Ar({3, 1}));
  TensorDict b({{"obs", Ar({3, 4}, 100)},
                {"reward", at::full({3}, 2.0)},
                {"steps", at::arange(3) + 10}},
               {3});
  b.set({"next", "x"}, Ar({3, 1}, 10));
  b.set("extra", at::zeros({3}, at::kBool));
  return tensordict::lazy_stack({a, b}, dim);
}

TEST(PythonReference, LazyStacksPrintAsPythonPrintsThem) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const bool ragged = tensordict_test::TensordictAtLeast(0, 5);
  std::string out;
  ASSERT_TRUE(RunPython(
      std::string(kBuild) +
          "print(agents(0)); print('|'); print(agents(1)); print('|')\n"
          "if sys.argv[1] == '1': print(ragged()); print('|')\n",
      {ragged ? "1" : "0"}, &out));
  std::string expected = tensordict::repr(Agents(0)) + "\n|\n" +
                         tensordict::repr(Agents(1)) + "\n|\n";
  if (ragged) {
    TensorDict x({{"r", at::ones({2})}}, {2});
    TensorDict y({{"r", at::ones({3})}}, {3});
    expected += tensordict::repr(tensordict::lazy_stack({x, y})) + "\n|\n";
  }
  EXPECT_EQ(out, expected);
}

TEST(PythonReference, ACppLazyStackDirectoryLoadsInPython) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_lazy_cpp");
  const auto s = Agents(1).memmap(dir / "s");
  std::string out;
  ASSERT_TRUE(RunPython(std::string(kBuild) + R"py(
from tensordict import TensorDict
s = TensorDict.load_memmap(sys.argv[1])
ref = agents(1)
print(type(s).__name__, s.stack_dim, list(s.batch_size))
for i in range(2):
    assert (s.tensordicts[i] == ref.tensordicts[i]).all()
    assert set(s.tensordicts[i].keys(True, True)) == set(ref.tensordicts[i].keys(True, True))
print(s)
)py",
                        {dir / "s"}, &out));
  // Python prints the loaded stack as this library prints its own load.
  EXPECT_EQ(
      out, "LazyStackedTensorDict 1 [3, 2]\n" +
               tensordict::repr(LazyStackedTensorDict::load_memmap(dir / "s")) +
               "\n");
}

TEST(PythonReference, APythonLazyStackDirectoryLoadsHere) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_lazy_py");
  ASSERT_TRUE(RunPython(std::string(kBuild) + "agents(0).memmap(sys.argv[1])\n",
                        {dir / "s"}));
  const auto s = LazyStackedTensorDict::load_memmap(dir / "s");
  const auto ref = Agents(0);
  EXPECT_EQ(s.stack_dim(), 0);
  EXPECT_EQ(s.batch_size(), ref.batch_size());
  ASSERT_EQ(s.tensordicts().size(), 2U);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(s.tensordicts()[i].keys(true, true),
              ref.tensordicts()[i].keys(true, true));
    EXPECT_TRUE((s.tensordicts()[i] == ref.tensordicts()[i]).all());
  }
  EXPECT_TRUE(at::equal(s.get("reward"), ref.get("reward")));
}

TEST(PythonReference, PaddingMatchesPythonsPadSequence) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  // Token sequences of lengths 2 and 4 (of 3 features each): padded values
  // as Python's pad_sequence pads them, and the mask (0.14; 0.4's is wrong:
  // all true) reduced over the features, where Python keeps one per token.
  TempDir dir("td_pyref_lazy_pad");
  ASSERT_TRUE(RunPython(R"py(
import sys, torch, tensordict
from tensordict import TensorDict
x = TensorDict({"tokens": torch.arange(6.).reshape(2, 3)}, [])
y = TensorDict({"tokens": torch.arange(12.).reshape(4, 3) + 10}, [])
p = tensordict.pad_sequence([x, y], padding_value=-1, return_mask=True)
TensorDict({"tokens": p["tokens"], "mask": p["masks", "tokens"]}, []).memmap(sys.argv[1])
)py",
                        {dir / "p"}));
  const TensorDict py = TensorDict::load_memmap(dir / "p");
  TensorDict x({{"tokens", at::arange(6, at::kFloat).reshape({2, 3})}}, {});
  TensorDict y({{"tokens", at::arange(12, at::kFloat).reshape({4, 3}) + 10}},
               {});
  const TensorDict p =
      tensordict::lazy_stack({x, y}).to_padded_tensor(-1, true);
  EXPECT_TRUE(at::equal(p.get("tokens"), py.get("tokens")));
  if (tensordict_test::TensordictAtLeast(0, 5)) {
    EXPECT_TRUE(at::equal(p.get({"masks", "tokens"}).all(-1), py.get("mask")));
  }
  EXPECT_TRUE(at::equal(tensordict::lazy_stack({x, y}).get_padded("tokens", -1),
                        py.get("tokens")));
}

TEST(PythonReference,
     TheLazyBufferStoresRowsWhereTorchRLsLazyStackStorageDoes) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 7)) {
    // TorchRL 0.4 has no LazyStackStorage (0.7 and later): nothing to
    // compare with, which this checks rather than skips.
    std::string has;
    ASSERT_TRUE(RunPython(
        "import torchrl.data as d; print(hasattr(d, 'LazyStackStorage'))", {},
        &has));
    EXPECT_EQ(has, "False\n");
    return;
  }
  // Seven rows of observation sizes 1, 2, 3, ... into a capacity of 5, then
  // an extend: the storage index of each write, the rows' places, and the
  // type of a sample.
  std::string out;
  ASSERT_TRUE(RunPython(R"py(
import torch
from tensordict import TensorDict
from torchrl.data import ReplayBuffer, LazyStackStorage
def row(i):
    return TensorDict({"obs": torch.full((1 + i % 3,), float(i)),
                       "step": torch.tensor(i)}, [])
rb = ReplayBuffer(storage=LazyStackStorage(5))
print(*[rb.add(row(i)) for i in range(7)])
print(*rb.extend([row(10), row(11)]).tolist())
print(*[int(rb.storage[j]["step"]) for j in range(len(rb))])
print(type(rb.sample(4)).__name__)
)py",
                        {}, &out));
  tensordict::LazyStackReplayBuffer rb(tensordict::ReplayBufferOptions(5));
  auto row = [](int64_t i) {
    return TensorDict({{"obs", at::full({1 + i % 3}, static_cast<double>(i))},
                       {"step", at::scalar_tensor(i, at::kLong)}},
                      {});
  };
  std::string mine;
  for (int64_t i = 0; i < 7; ++i) {
    mine += (i ? " " : "") + std::to_string(rb.add(row(i)));
  }
  const at::Tensor idx = rb.extend(std::vector<TensorDict>{row(10), row(11)});
  mine += "\n" + std::to_string(idx[0].item<int64_t>()) + " " +
          std::to_string(idx[1].item<int64_t>()) + "\n";
  for (int64_t j = 0; j < rb.size(); ++j) {
    mine +=
        (j ? " " : "") + std::to_string(rb.row(j).get("step").item<int64_t>());
  }
  (void)rb.sample(4);  // a LazyStackedTensorDict, by its type
  mine += "\nLazyStackedTensorDict\n";
  EXPECT_EQ(out, mine);
}

}  // namespace
