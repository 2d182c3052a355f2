// Interop with the reference Python tensordict (python_reference.h): module
// parameters as dicts. A network's weights go from Python's `from_module`
// through a memmap directory into a C++ network by `to_module` (and back),
// with the key layout checked against Python's, and `lerp_` gives Python's
// values.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/names.h"  // src/ (tests/CMakeLists.txt)
#include "python_reference.h"
#include "test_util.h"

namespace {

using tensordict::from_module;
using tensordict::TensorDict;
using tensordict::to_module;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::RunPython;
using tensordict_test::TempDir;
using tensordict_test::TensordictAtLeast;

// The network on both sides.
torch::nn::Sequential MakeNet() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(),
                               torch::nn::Linear(3, 2),
                               torch::nn::BatchNorm1d(2));
}

// Python's side: argv[1] "export" writes from_module(net) under argv[2] and
// net's output on the fixed input to argv[3]; "import" writes the dict
// under argv[2] into a new net by to_module and its output to argv[3].
// Both print the leaf keys and shapes of their from_module, one a line, to
// argv[4].
constexpr const char* kNetScript = R"py(
import sys, torch
from torch import nn
from tensordict import TensorDict
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2), nn.BatchNorm1d(2))
net.train()
net(torch.randn(8, 4))  # moves the batch-norm statistics
params = TensorDict.from_module(net)
if sys.argv[1] == "import":
    TensorDict.load_memmap(sys.argv[2]).to_module(net, inplace=True)
else:
    params.detach().clone().memmap_(prefix=sys.argv[2])
net.eval()
x = torch.arange(20, dtype=torch.float32).reshape(5, 4) / 10 - 1
with open(sys.argv[3], "w") as f:
    f.write(" ".join(repr(v) for v in net(x).detach().flatten().tolist()))
with open(sys.argv[4], "w") as f:
    for k, v in params.items(include_nested=True, leaves_only=True):
        f.write(f"{'.'.join(k)} {list(v.shape)} {v.dtype}\n")
)py";

std::string Layout(const TensorDict& td) {
  std::ostringstream out;
  for (const auto& k : td.keys(true, true)) {
    std::string name;
    for (const auto& p : k.parts()) name += (name.empty() ? "" : ".") + p;
    const at::Tensor t = td.get(k);
    out << name << " " << tensordict::detail::shape_str(t.sizes()) << " "
        << tensordict::detail::dtype_name(t.scalar_type()) << "\n";
  }
  return out.str();
}

at::Tensor NetOutput(torch::nn::Sequential& net) {
  net->eval();
  const at::Tensor x = at::arange(20, at::kFloat).reshape({5, 4}) / 10 - 1;
  return net->forward(x).detach().flatten();
}

at::Tensor ParseFloats(const std::string& text) {
  std::istringstream in(text);
  std::vector<double> v;
  double d = 0;
  while (in >> d) v.push_back(d);
  return at::tensor(v, at::kDouble).to(at::kFloat);
}

TEST(PythonReference, FromModuleOfPythonLoadsIntoACppNetByToModule) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_from_module");
  ASSERT_TRUE(RunPython(kNetScript, {"export", dir / "params", dir / "y.txt",
                                     dir / "layout.txt"}));
  torch::nn::Sequential net = MakeNet();
  // Python 0.4 keeps the ReLU's empty sub-dict; 0.14 leaves it out.
  const bool filter_empty = TensordictAtLeast(0, 5);
  EXPECT_EQ(Layout(from_module(*net, filter_empty)),
            ReadFile(dir / "layout.txt"));
  TensorDict loaded = TensorDict::load_memmap(dir / "params");
  EXPECT_EQ(loaded.keys(true), from_module(*net, filter_empty).keys(true));
  to_module(loaded, *net);
  EXPECT_TRUE(at::allclose(NetOutput(net), ParseFloats(ReadFile(dir / "y.txt")),
                           1e-5, 1e-6));
}

TEST(PythonReference, FromModuleOfCppLoadsIntoAPythonNetByToModule) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_to_module");
  torch::nn::Sequential net = MakeNet();
  {
    // Batch-norm statistics that are not the defaults.
    torch::NoGradGuard no_grad;
    net->forward(at::randn({8, 4}));
  }
  const bool filter_empty = TensordictAtLeast(0, 5);
  from_module(*net, filter_empty).detach().memmap(dir / "params");
  ASSERT_TRUE(RunPython(kNetScript, {"import", dir / "params", dir / "y.txt",
                                     dir / "layout.txt"}));
  EXPECT_TRUE(at::allclose(NetOutput(net), ParseFloats(ReadFile(dir / "y.txt")),
                           1e-5, 1e-6));
}

// Python's side: a.lerp_(b, w) for two weights, float and double leaves.
// tensordict's lerp_ calls torch._foreach_lerp_, which torch 1.13 (under
// tensordict 0.4) lacks: there, each leaf's torch.lerp gives the values.
constexpr const char* kLerpScript = R"py(
import sys, torch
from tensordict import TensorDict
torch.manual_seed(0)
def make():
    return TensorDict({"w": torch.randn(3, 5), "sub": {"b": torch.randn(7, dtype=torch.float64)}}, [])
def lerp(a, b, w):
    if hasattr(torch, "_foreach_lerp_"):
        return a.clone().lerp_(b, w)
    return a.apply(lambda x, y: torch.lerp(x, y, w), b)
a, b = make(), make()
out = TensorDict({"a": a, "b": b, "w03": lerp(a, b, 0.3), "w07": lerp(a, b, 0.7)}, [])
out.memmap_(prefix=sys.argv[1])
)py";

TEST(PythonReference, LerpGivesPythonsValues) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_lerp");
  ASSERT_TRUE(RunPython(kLerpScript, {dir / "td"}));
  TensorDict td = TensorDict::load_memmap(dir / "td");
  const TensorDict a = td.get_tensordict("a");
  const TensorDict b = td.get_tensordict("b");
  for (const auto& [w, key] : {std::pair<double, const char*>{0.3, "w03"},
                               std::pair<double, const char*>{0.7, "w07"}}) {
    TensorDict ours = a.clone();
    ours.lerp_(b, w);
    const TensorDict theirs = td.get_tensordict(key);
    for (const auto& k : ours.keys(true, true)) {
      EXPECT_TRUE(at::allclose(ours.get(k), theirs.get(k), 1e-6, 1e-7))
          << key << " " << k;
    }
  }
}

}  // namespace
