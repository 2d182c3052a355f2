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
  for (const at::Tensor& obs :
       {at::zeros({3, 4}, at::kDouble), at::zeros({3, 5}), at::zeros({2000, 4}),
        at::zeros({3, 4, 1})}) {
    TensorDict td({obs.size(0)});
    td.set("observation", obs);
    const tensordict_test::Snapshot before = tensordict_test::TakeSnapshot(td);
    ExpectThrowsMsg<c10::ValueError>(
        [&] { mlp(td); },
        at +
            ": in-key observation: the package takes torch.float32 [1 to "
            "1024, 4], got " +
            tensordict::detail::dtype_name(obs.scalar_type()) + " " +
            tensordict::detail::shape_str(obs.sizes()));
    tensordict_test::ExpectUnchanged(td, before);
  }

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

#endif  // TENSORDICT_HAS_AOTI
