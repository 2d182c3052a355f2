// Interop with the reference Python tensordict (python_reference.h): tensor
// classes. A directory that Python's @tensorclass `memmap_` writes loads into
// the matching C++ class (a field set to None included), and one that the
// C++ class writes loads in Python as the Python class, nested class
// included.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensorclass.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "python_reference.h"
#include "tensorclass_test_util.h"
#include "test_util.h"

namespace {

using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::Next;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;
using tensordict_test::Transition;

// The same classes in Python. "write DIR": the full transition under
// DIR/full and one whose `next` is None under DIR/none. "read DIR": loads
// DIR as a Transition and prints its types and sums. Other modes only
// define the classes.
constexpr const char* kScript = R"py(
import sys, torch
from tensordict import tensorclass

@tensorclass
class Next:
    obs: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor

@tensorclass
class Transition:
    obs: torch.Tensor
    action: torch.Tensor
    next: Next

n = 3
def make(with_next):
    nxt = Next(obs=torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) + 1,
               reward=torch.ones(n, 1), done=torch.zeros(n, 1, dtype=torch.bool),
               batch_size=[n]) if with_next else None
    return Transition(obs=torch.arange(n * 4, dtype=torch.float32).reshape(n, 4),
                      action=torch.arange(n), next=nxt, batch_size=[n])

if sys.argv[1] == "write":
    make(True).memmap_(sys.argv[2] + "/full")
    make(False).memmap_(sys.argv[2] + "/none")
elif sys.argv[1] == "read":
    t = Transition.load_memmap(sys.argv[2])
    print(type(t).__name__, type(t.next).__name__, list(t.batch_size),
          float(t.obs.sum()), int(t.action.sum()), float(t.next.obs.sum()),
          float(t.next.reward.sum()), bool(t.next.done.any()))
)py";

TensorDict Expected(bool with_next) {
  const int64_t n = 3;
  TensorDict td({{"obs", at::arange(n * 4, at::kFloat).reshape({n, 4})},
                 {"action", at::arange(n, at::kLong)}},
                {n});
  if (with_next) {
    td.set({"next", "obs"}, at::arange(n * 4, at::kFloat).reshape({n, 4}) + 1);
    td.set({"next", "reward"}, at::ones({n, 1}));
    td.set({"next", "done"}, at::zeros({n, 1}, at::kBool));
  }
  return td;
}

TEST(PythonReference, APythonTensorclassDirectoryLoadsIntoTheCppClass) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_tensorclass");
  ASSERT_TRUE(RunPython(kScript, {"write", dir.str()}));
  Transition t = Transition::load_memmap(dir / "full");
  const TensorDict expected = Expected(true);
  EXPECT_EQ(t.tensordict().keys(true, true), expected.keys(true, true));
  EXPECT_TRUE((t.tensordict() == expected).all());
  EXPECT_TRUE(at::equal(t.next().obs(), expected.get({"next", "obs"})));
  // Python's None field is a missing one.
  Transition none = Transition::load_memmap(dir / "none");
  EXPECT_EQ(none.tensordict().keys(true, true), Expected(false).keys(true));
}

TEST(PythonReference, ACppTensorclassDirectoryLoadsAsThePythonClass) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  TempDir dir("td_pyref_tensorclass_cpp");
  Transition(Expected(true)).memmap_(dir / "t");
  std::string out;
  ASSERT_TRUE(RunPython(kScript, {"read", dir / "t"}, &out));
  EXPECT_EQ(out, "Transition Next [3] 66.0 3 78.0 3.0 False\n");
}

TEST(PythonReference, ATensorclassPrintsAsPythonsTensorclass) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  std::string out;
  ASSERT_TRUE(RunPython(std::string(kScript) + R"py(
t = make(True)
t.next.done = None
print(t)
print(Transition(obs=None, action=torch.arange(3), next=None, batch_size=[3]))
)py",
                        {"print", "-"}, &out));
  TensorDict full = Expected(true);
  full.erase({"next", "done"});
  EXPECT_EQ(out, tensordict::repr(Transition(full)) + "\n" +
                     tensordict::repr(Transition(
                         TensorDict({{"action", at::arange(3)}}, {3}))) +
                     "\n");
}

}  // namespace
