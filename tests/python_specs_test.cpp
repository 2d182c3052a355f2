// The specs' reprs (tensordict/specs.h) against the reference Python
// TorchRL (python_reference.h): the same specs built on both sides print the
// same text. TorchRL 0.4 has other class names (CompositeSpec, ...), so the
// test runs against 0.14 only and skips for 0.4.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/specs.h>

#include <string>
#include <vector>

#include "python_reference.h"

using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;

namespace {

constexpr const char* kSeparator = "\n<<spec>>\n";

// Builds the specs of SpecsInCpp, in the same order, and prints their
// reprs between separators (or "no Composite" for TorchRL 0.4).
constexpr const char* kPrintSpecs = R"py(
import sys
import torch
import torchrl.data as d
if not hasattr(d, "Composite"):
    print("no Composite")
    sys.exit(0)
specs = [
    d.Unbounded(shape=()),
    d.Unbounded(shape=(3,)),
    d.Unbounded(shape=(3,), dtype=torch.int64),
    d.Unbounded(shape=(2,), dtype=torch.bool),
    d.Bounded(-1.0, 1.0, shape=()),
    d.Bounded(-1.0, 1.0, shape=(3,), dtype=torch.float64),
    d.Bounded(0, 5, shape=(3,), dtype=torch.int32),
    d.Categorical(4),
    d.Categorical(4, shape=(3,)),
    d.Categorical(2, shape=(1,), dtype=torch.bool),
    d.OneHot(5),
    d.OneHot(5, shape=(2, 5), dtype=torch.int64),
    d.Binary(4),
    d.Binary(3, shape=(2, 3), dtype=torch.bool),
    d.MultiCategorical([2, 3, 4]),
    d.MultiCategorical([2, 3], shape=(4, 2, 2)),
    d.Composite(),
    d.Composite(shape=(2,)),
    d.Composite({"a": d.Categorical(3)}, device="cpu"),
    d.Composite({"obs": d.Unbounded(shape=(2, 3)),
                 ("next", "done"): d.Categorical(2, shape=(2, 1), dtype=torch.bool),
                 ("next", "empty"): d.Composite(shape=(2,)),
                 "act": d.Bounded(-1.0, 1.0, shape=(2,))}, shape=(2,)),
]
# The separator is kSeparator.
sys.stdout.write("\n<<spec>>\n".join(repr(s) for s in specs))
)py";

std::vector<std::string> SpecsInCpp() {
  using namespace tensordict;  // NOLINT(google-build-using-namespace)
  const Composite nested({{"obs", Unbounded({2, 3})},
                          {{"next", "done"}, Categorical(2, {2, 1}, at::kBool)},
                          {{"next", "empty"}, Composite({2})},
                          {"act", Bounded(-1.0, 1.0, {2})}},
                         {2});
  return {Unbounded().repr(),
          Unbounded({3}).repr(),
          Unbounded({3}, at::kLong).repr(),
          Unbounded({2}, at::kBool).repr(),
          Bounded(-1.0, 1.0).repr(),
          Bounded(-1.0, 1.0, {3}, at::kDouble).repr(),
          Bounded(0, 5, {3}, at::kInt).repr(),
          Categorical(4).repr(),
          Categorical(4, {3}).repr(),
          Categorical(2, {1}, at::kBool).repr(),
          OneHot(5).repr(),
          OneHot(5, {2, 5}, at::kLong).repr(),
          Binary(4).repr(),
          Binary(3, {2, 3}, at::kBool).repr(),
          MultiCategorical({2, 3, 4}).repr(),
          MultiCategorical({2, 3}, {4, 2, 2}).repr(),
          Composite().repr(),
          Composite({2}).repr(),
          Composite({{"a", Categorical(3)}}, {}, at::Device("cpu")).repr(),
          nested.repr()};
}

std::vector<std::string> Split(const std::string& text) {
  std::vector<std::string> out;
  const std::string sep = kSeparator;
  size_t start = 0;
  for (size_t at = text.find(sep); at != std::string::npos;
       at = text.find(sep, start)) {
    out.push_back(text.substr(start, at - start));
    start = at + sep.size();
  }
  out.push_back(text.substr(start));
  return out;
}

}  // namespace

TEST(PythonReference, SpecReprsMatchTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  std::string out;
  ASSERT_TRUE(RunPython(kPrintSpecs, {}, &out));
  if (out.rfind("no Composite", 0) == 0) {
    GTEST_SKIP() << "the reference TorchRL has no torchrl.data.Composite "
                    "(TorchRL 0.4): the specs are TorchRL 0.14's";
  }
  const std::vector<std::string> py = Split(out);
  const std::vector<std::string> cpp = SpecsInCpp();
  ASSERT_EQ(py.size(), cpp.size()) << out;
  for (size_t i = 0; i < cpp.size(); ++i) {
    EXPECT_EQ(cpp[i], py[i]) << "spec " << i;
  }
}
