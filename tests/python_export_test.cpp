// AOTIModule (tensordict/export.h) against the real Python: packages that
// examples/python/export_policy.py exports with torch.export and compiles
// with AOTInductor (tensordict 0.14 on torch 2.14, the sid root), run here
// on TensorDicts with Python's outputs for the same inputs, at batch 1 and
// 64; new weights written by Python (from_module's layout) loaded with
// update_weights give Python's new outputs. Skipped without the reference
// (TENSORDICT_PYREF) or on a LibTorch without AOTInductor's loader.
#include <gtest/gtest.h>
#include <tensordict/config.h>
#include <tensordict/tensordict.h>

#if TENSORDICT_HAS_AOTI
#include <ATen/ATen.h>
#include <tensordict/export.h>
#include <tensordict/persistence.h>

#include <string>
#include <vector>

#include "core/names.h"  // src/ (tests/CMakeLists.txt)
#include "export_test_util.h"
#include "fs_util.h"
#include "python_reference.h"
#include "test_paths.h"
#include "test_util.h"

using tensordict::AOTIModule;
using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

// The packages and Python's results, made once for the suite.
struct Exported {
  TempDir dir{"td_export"};
  bool ok = false;
  std::string package(const std::string& name) const {
    return dir / ("pkg/" + name + ".pt2");
  }
  TensorDict check(const std::string& name) const {
    return TensorDict::load_memmap(dir / ("check/" + name));
  }
};

const Exported& exported() {
  static Exported* made = [] {
    auto* e = new Exported();
    const std::string script = tensordict_test::TestDataDir() +
                               "/../../examples/python/export_policy.py";
    e->ok = RunPython(
        "import runpy, sys\n"
        "sys.argv = [sys.argv[1], sys.argv[2], '--check', sys.argv[3]]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n",
        {script, e->dir / "pkg", e->dir / "check"});
    return e;
  }();
  return *made;
}

void ExpectClose(const at::Tensor& got, const at::Tensor& expected) {
  ASSERT_EQ(got.sizes(), expected.sizes());
  EXPECT_TRUE(at::allclose(got, expected, 1e-5, 1e-5))
      << (got - expected).abs().max().item<double>();
}

}  // namespace

TEST(PythonReference, ExportedPoliciesGivePythonsOutputs) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Exported& e = exported();
  ASSERT_TRUE(e.ok);
  const AOTIModule mlp(e.package("mlp"), {"observation"}, {"logits"});
  const AOTIModule actor(e.package("tanh_normal"), {"observation"},
                         {"loc", "scale", "action"});
  for (const char* batch : {"batch1", "batch64"}) {
    SCOPED_TRACE(batch);
    const TensorDict expected = e.check(batch);
    TensorDict td(expected.batch_size().vec());
    td.set("observation", expected.get("observation").clone());
    mlp(td);
    ExpectClose(td.get("logits"), expected.get({"mlp", "logits"}));
    actor(td);
    for (const char* key : {"loc", "scale", "action"}) {
      ExpectClose(td.get(key), expected.get({"tanh_normal", key}));
    }
  }
}

TEST(PythonReference, ExportedPolicyTakesPythonsNewWeights) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Exported& e = exported();
  ASSERT_TRUE(e.ok);
  AOTIModule mlp(e.package("mlp"), {"observation"}, {"logits"});
  EXPECT_EQ(mlp.constant_names(),
            std::vector<std::string>({"module.0.bias", "module.0.weight",
                                      "module.2.bias", "module.2.weight",
                                      "module.4.bias", "module.4.weight"}));
  const TensorDict expected = e.check("mlp_new_weights");
  TensorDict td(expected.batch_size().vec());
  td.set("observation", expected.get("observation").clone());
  mlp(td);
  EXPECT_FALSE(at::allclose(td.get("logits"), expected.get({"mlp", "logits"}),
                            1e-5, 1e-5));
  mlp.update_weights(e.check("mlp_params"));
  mlp(td);
  ExpectClose(td.get("logits"), expected.get({"mlp", "logits"}));
}

// A package that does not fit the keys is refused at load, an input that
// does not fit the exported shape at the call (the dict unchanged), a
// weight that does not fit at update_weights (the weights unchanged), each
// naming the key and both sides.
TEST(PythonReference, ExportedPolicyRefusesWhatDoesNotFit) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Exported& e = exported();
  ASSERT_TRUE(e.ok);
  const std::string path = e.package("mlp");
  const std::string at = "AOTIModule(" + path + ")";
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        AOTIModule m(path, {"observation", "x"}, {"logits"});
      },
      at + ": the package takes 1 inputs (0 positional; keywords "
           "observation) but in_keys has 2: [observation, x]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { AOTIModule m(path, {"obs"}, {"logits"}); },
      at + ": the package's keyword argument \"observation\" is no in-key's "
           "name (in_keys: [obs]; a nested key's names joined by \"_\")");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        AOTIModule m(path, {"observation"}, {"a", "b"});
      },
      at + ": the package returns 1 tensors but out_keys has 2: [a, b]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { AOTIModule m(e.dir / "none.pt2", {"observation"}, {"a"}); },
      "AOTIModule(" + (e.dir / "none.pt2") + "): no such file");
  const std::string text = e.dir / "text.pt2";
  tensordict_test::WriteFile(text, "not a zip");
  tensordict_test::ExpectThrowsMsgPrefix<c10::ValueError>(
      [&] { AOTIModule m(text, {"observation"}, {"a"}); },
      "AOTIModule(" + text + "): not a package LibTorch can load: ");

  AOTIModule mlp(path, {"observation"}, {"logits"});
  tensordict_test::ExpectRefusesObservations(
      mlp, path,
      {at::zeros({3, 4}, at::kDouble), at::zeros({3, 5}), at::zeros({2000, 4}),
       at::zeros({3, 4, 1})});

  // The weights: an extra one, a missing one, a shape; nothing changes.
  TensorDict td({5});
  td.set("observation", at::randn({5, 4}));
  const at::Tensor logits = mlp(td).get("logits").clone();
  const TensorDict params = e.check("mlp_params");
  const std::string names =
      "module.0.bias, module.0.weight, module.2.bias, module.2.weight, "
      "module.4.bias, module.4.weight";
  TensorDict extra = params.clone();
  extra.set({"module", "9", "weight"}, at::zeros({2}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { mlp.update_weights(extra); },
      at +
          ".update_weights: the package has no weight module.9.weight (it "
          "has: " +
          names + ")");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        mlp.update_weights(
            params.exclude({NestedKey({"module", "4", "weight"})}));
      },
      at +
          ".update_weights: weight module.4.weight is missing (the package "
          "has: " +
          names + ")");
  TensorDict wrong = params.clone();
  wrong.set({"module", "0", "weight"}, at::zeros({4, 64}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { mlp.update_weights(wrong); },
      at + ".update_weights: weight module.0.weight: the package has "
           "torch.float32 [64, 4], got torch.float32 [4, 64]");
  EXPECT_TRUE(at::equal(mlp(td).get("logits"), logits));
}

namespace {

// Packages of other shapes of call spec, exported by the same Python
// (torch.export of plain modules): "mixed" takes a positional tensor and a
// keyword one ("agent_goal": the nested key (agent, goal)) and returns a
// tuple, with a static batch of 3 and the input metadata; "plain" is the
// same module compiled without metadata (the model checks its inputs
// itself); "pair" takes a tuple of tensors, which this code does not read.
struct Variants {
  TempDir dir{"td_export_variants"};
  bool ok = false;
  std::string package(const std::string& name) const {
    return dir / (name + ".pt2");
  }
};

const Variants& variants() {
  static Variants* made = [] {
    auto* v = new Variants();
    v->ok = RunPython(
        "import sys, torch\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from aoti_package import compile_package\n"
        "from tensordict import TensorDict\n"
        "out = sys.argv[1]\n"
        "class Mixed(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "    def forward(self, obs, agent_goal):\n"
        "        return self.lin(obs) + agent_goal, obs.sum(-1)\n"
        "class Pair(torch.nn.Module):\n"
        "    def forward(self, pair):\n"
        "        return pair[0] + pair[1]\n"
        "torch.manual_seed(0)\n"
        "m = Mixed()\n"
        "obs, goal = torch.randn(3, 4), torch.randn(3, 4)\n"
        "with torch.no_grad():\n"
        "    p = torch.export.export(m, (obs,), {'agent_goal': goal})\n"
        "    compile_package(p, out + '/mixed.pt2', [\n"
        "        {'name': '', 'dtype': 'float32', 'shape': [3, 4]},\n"
        "        {'name': 'agent_goal', 'dtype': 'float32', 'shape': [3, "
        "4]}])\n"
        "    torch._inductor.aoti_compile_and_package(\n"
        "        p, package_path=out + '/plain.pt2')\n"
        "    p = torch.export.export(Pair(), ((obs, goal),))\n"
        "    torch._inductor.aoti_compile_and_package(\n"
        "        p, package_path=out + '/pair.pt2')\n"
        "    a, b = m(obs, goal)\n"
        "TensorDict({'observation': obs, 'agent': {'goal': goal}, 'a': a,\n"
        "            'b': b}, batch_size=[3]).memmap(out + '/check')\n",
        {v->dir.str(),
         tensordict_test::TestDataDir() + "/../../examples/python"});
    return v;
  }();
  return *made;
}

}  // namespace

// A positional argument takes the in-key the keywords leave, whatever
// in_keys' order; a keyword the in-key of its name (a nested key's names
// joined by "_"); a tuple's outputs go to out_keys in order.
TEST(PythonReference, ExportedPositionalAndKeywordArguments) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Variants& v = variants();
  ASSERT_TRUE(v.ok);
  const TensorDict check = TensorDict::load_memmap(v.dir / "check");
  const NestedKey goal({"agent", "goal"});
  for (const std::vector<NestedKey>& in_keys :
       {std::vector<NestedKey>{"observation", goal},
        std::vector<NestedKey>{goal, "observation"}}) {
    const AOTIModule mixed(v.package("mixed"), in_keys, {"a", "b"});
    TensorDict td({3});
    td.set("observation", check.get("observation"));
    td.set(goal, check.get(goal));
    mixed(td);
    ExpectClose(td.get("a"), check.get("a"));
    ExpectClose(td.get("b"), check.get("b"));
  }
  const std::string at = "AOTIModule(" + v.package("mixed") + ")";
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        AOTIModule m(v.package("mixed"), {"observation", "goal"}, {"a", "b"});
      },
      at + ": the package's keyword argument \"agent_goal\" is no in-key's "
           "name (in_keys: [observation, goal]; a nested key's names joined "
           "by \"_\")");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        AOTIModule m(v.package("mixed"), {"observation", goal}, {"a"});
      },
      at + ": the package returns 2 tensors but out_keys has 1: [a]");
}

// A static batch: another batch is refused naming the exported shape, by
// this code where the package describes its inputs, by the model's own
// checks otherwise (a c10::Error, never a crash); the dict unchanged.
TEST(PythonReference, ExportedStaticBatchRefusesAnother) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Variants& v = variants();
  ASSERT_TRUE(v.ok);
  const NestedKey goal({"agent", "goal"});
  TensorDict td({5});
  td.set("observation", at::zeros({5, 4}));
  td.set(goal, at::zeros({5, 4}));
  const tensordict_test::Snapshot before = tensordict_test::TakeSnapshot(td);
  const AOTIModule mixed(v.package("mixed"), {"observation", goal}, {"a", "b"});
  ExpectThrowsMsg<c10::ValueError>(
      [&] { mixed(td); },
      "AOTIModule(" + v.package("mixed") +
          "): in-key observation: the package takes torch.float32 [3, 4], "
          "got torch.float32 [5, 4]");
  tensordict_test::ExpectUnchanged(td, before);
  const AOTIModule plain(v.package("plain"), {"observation", goal}, {"a", "b"});
  ExpectThrowsMsg<c10::Error>(
      [&] { plain(td); },
      "AOTIModule(" + v.package("plain") +
          ") failed (its inputs: 0: observation, 1: ('agent', 'goal')): "
          "input_handles[0]: unmatched dim value at 0, expected: 3, but got: "
          "5");
  tensordict_test::ExpectUnchanged(td, before);
  // The right batch runs.
  TensorDict three({3});
  three.set("observation", at::zeros({3, 4}));
  three.set(goal, at::zeros({3, 4}));
  plain(three);
  EXPECT_EQ(three.get("b").sizes(), at::IntArrayRef({3}));
}

TEST(PythonReference, ExportedSpecThisCodeDoesNotReadIsRefusedAtLoad) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const Variants& v = variants();
  ASSERT_TRUE(v.ok);
  tensordict_test::ExpectThrowsMsgPrefix<c10::ValueError>(
      [&] {
        AOTIModule m(v.package("pair"), {"a", "b"}, {"c"});
      },
      "AOTIModule(" + v.package("pair") +
          "): the package's input spec has an argument that is not a tensor "
          "(a \"builtins.tuple\"), which this code does not read: ");
}

#endif  // TENSORDICT_HAS_AOTI
