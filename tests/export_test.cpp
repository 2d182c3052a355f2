// AOTIModule (tensordict/export.h) on the package checked in under
// examples/data/ (cartpole_policy.pt2: examples/python/
// export_cartpole_policy.py compiled the weights of cartpole_policy.pt, the
// TorchScript policy, with torch 2.6), without Python: it gives the
// TorchScript policy's outputs, maps a dict output by name, takes new
// weights (also while a collector runs it), drives a rollout and a
// collector, and refuses what does not fit, the dict and the weights
// unchanged. Built where LibTorch has AOTInductor's loader (2.6 and later);
// tests/python_export_test.cpp runs packages Python 0.14 exports.
#include <gtest/gtest.h>
#include <tensordict/config.h>

#if TENSORDICT_HAS_AOTI
#include <ATen/ATen.h>
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/export.h>
#include <tensordict/jit.h>
#include <tensordict/tensordict.h>
#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "core/names.h"  // src/ (tests/CMakeLists.txt)
#include "export_test_util.h"
#include "test_paths.h"
#include "test_util.h"

using tensordict::AOTIModule;
using tensordict::NestedKey;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;

namespace {

std::string Example(const std::string& name) {
  return tensordict_test::TestDataDir() + "/../../examples/data/" + name;
}

const std::string& Package() {
  static const std::string path = Example("cartpole_policy.pt2");
  return path;
}

TensorDict Observations(int64_t batch) {
  at::manual_seed(batch);
  TensorDict td({batch});
  td.set("observation", at::randn({batch, 4}));
  return td;
}

// The TorchScript policy's weights, in from_module's layout ("net", "0",
// "weight"), scaled.
TensorDict ScriptedWeights(const torch::jit::Module& scripted, double scale) {
  TensorDict params;
  for (const auto& p : scripted.named_parameters()) {
    std::vector<std::string> parts;
    for (size_t at = 0, dot = 0; dot != std::string::npos; at = dot + 1) {
      dot = p.name.find('.', at);
      parts.push_back(p.name.substr(at, dot - at));
    }
    params.set(NestedKey(parts), p.value.detach() * scale);
  }
  return params;
}

// The policy's logits, computed here: net.2(tanh(net.0(obs))).
at::Tensor Logits(const TensorDict& w, const at::Tensor& obs) {
  const at::Tensor hidden = at::tanh(at::linear(
      obs, w.get({"net", "0", "weight"}), w.get({"net", "0", "bias"})));
  return at::linear(hidden, w.get({"net", "2", "weight"}),
                    w.get({"net", "2", "bias"}));
}

}  // namespace

TEST(AOTIModule, CheckedInPackageGivesTheTorchScriptPolicysOutputs) {
  torch::jit::Module scripted = torch::jit::load(Example("cartpole_policy.pt"));
  const AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  for (const int64_t batch : {1, 64, 1024}) {
    SCOPED_TRACE(batch);
    TensorDict td = Observations(batch);
    const TensorDict expected = tensordict::forward(scripted, td);
    policy(td);
    EXPECT_TRUE(
        at::allclose(td.get("logits"), expected.get("logits"), 1e-5, 1e-5));
    EXPECT_EQ(td.get("action").scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(td.get("action"), expected.get("action")));
  }
}

// The package returns a dict: its entries go to the out-keys of their
// names, in whatever order out_keys lists them.
TEST(AOTIModule, DictOutputsGoToTheOutKeysOfTheirNames) {
  const AOTIModule policy(Package(), {"observation"}, {"action", "logits"});
  TensorDict td = Observations(8);
  policy(td);
  EXPECT_EQ(td.get("action").scalar_type(), at::kLong);
  EXPECT_EQ(td.get("logits").sizes(), at::IntArrayRef({8, 2}));
  EXPECT_TRUE(at::equal(td.get("action"), td.get("logits").argmax(-1)));
  const std::string at = "AOTIModule(" + Package() + ")";
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        AOTIModule m(Package(), {"observation"},
                     {NestedKey({"out", "logits"}), "action"});
      },
      at + ": the package's output \"logits\" is no out-key's name "
           "(out_keys: [('out', 'logits'), action])");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { AOTIModule m(Package(), {"observation"}, {"logits"}); },
      at + ": the package returns 2 tensors (logits, action) but out_keys "
           "has 1: [logits]");
}

TEST(AOTIModule, RefusesInputsThatDoNotFitTheExportedShape) {
  const AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  tensordict_test::ExpectRefusesObservations(
      policy, Package(),
      {at::zeros({3, 4}, at::kDouble), at::zeros({3, 4}, at::kLong),
       at::zeros({1025, 4}), at::zeros({3, 2}), at::zeros({3})});
  // A view that is not contiguous runs as its contiguous copy.
  TensorDict td({6});
  const at::Tensor wide = at::randn({4, 6});
  td.set("observation", wide.t());
  policy(td);
  TensorDict dense({6});
  dense.set("observation", wide.t().contiguous());
  policy(dense);
  EXPECT_TRUE(at::equal(td.get("logits"), dense.get("logits")));
}

TEST(AOTIModule, UpdateWeightsReachesEveryCopy) {
  torch::jit::Module scripted = torch::jit::load(Example("cartpole_policy.pt"));
  AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  EXPECT_EQ(policy.constant_names(),
            std::vector<std::string>(
                {"net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight"}));
  const AOTIModule copy = policy;  // shares the package
  const tensordict::TensorDictModule as_module = policy;
  const TensorDict halved = ScriptedWeights(scripted, 0.5);
  policy.update_weights(halved);
  TensorDict td = Observations(16);
  const at::Tensor expected = Logits(halved, td.get("observation"));
  for (const tensordict::TensorDictModule* m :
       {static_cast<const tensordict::TensorDictModule*>(&policy),
        static_cast<const tensordict::TensorDictModule*>(&copy), &as_module}) {
    (*m)(td);
    EXPECT_TRUE(at::allclose(td.get("logits"), expected, 1e-5, 1e-5));
  }
  // Updated again (the runner's other buffer), then back.
  const TensorDict doubled = ScriptedWeights(scripted, 2.0);
  policy.update_weights(doubled);
  policy(td);
  EXPECT_TRUE(at::allclose(td.get("logits"),
                           Logits(doubled, td.get("observation")), 1e-5, 1e-5));
  policy.update_weights(ScriptedWeights(scripted, 1.0));
  policy(td);
  EXPECT_TRUE(at::allclose(td.get("logits"),
                           tensordict::forward(scripted, td).get("logits"),
                           1e-5, 1e-5));
}

// The update copies the weights: changing the given tensors afterwards
// changes nothing.
TEST(AOTIModule, UpdateWeightsCopiesTheGivenTensors) {
  torch::jit::Module scripted = torch::jit::load(Example("cartpole_policy.pt"));
  AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  TensorDict weights = ScriptedWeights(scripted, 0.5);
  const TensorDict kept = weights.clone();
  policy.update_weights(weights);
  for (const NestedKey& key : weights.keys(true, true))
    weights.get(key).zero_();
  TensorDict td = Observations(4);
  policy(td);
  EXPECT_TRUE(at::allclose(td.get("logits"),
                           Logits(kept, td.get("observation")), 1e-5, 1e-5));
}

TEST(AOTIModule, RefusesWeightsThatDoNotFitAndKeepsItsOwn) {
  torch::jit::Module scripted = torch::jit::load(Example("cartpole_policy.pt"));
  AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  TensorDict td = Observations(5);
  const at::Tensor logits = policy(td).get("logits").clone();
  const TensorDict params = ScriptedWeights(scripted, 0.5);
  const std::string fn = "AOTIModule(" + Package() + ").update_weights";
  TensorDict wrong_dtype = params.clone();
  wrong_dtype.set({"net", "2", "bias"}, at::zeros({2}, at::kDouble));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { policy.update_weights(wrong_dtype); },
      fn + ": weight net.2.bias: the package has torch.float32 [2], got "
           "torch.float64 [2]");
  TensorDict prefixed;
  prefixed.set("module", params);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { policy.update_weights(prefixed); },
      fn + ": the package has no weight module.net.0.bias (it has: "
           "net.0.bias, net.0.weight, net.2.bias, net.2.weight)");
  EXPECT_TRUE(at::equal(policy(td).get("logits"), logits));
}

// In a sequence: the package's outputs feed the next module; a failure in
// the package leaves the dict as it was.
TEST(AOTIModule, ComposesInASequence) {
  const AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  const tensordict::TensorDictModule probs(
      [](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::softmax(in[0], -1)};
      },
      {"logits"}, {"probs"});
  const tensordict::TensorDictSequential seq({policy, probs});
  TensorDict td = Observations(8);
  seq(td);
  EXPECT_TRUE(at::allclose(td.get("probs"), at::softmax(td.get("logits"), -1)));
  EXPECT_TRUE(at::equal(td.get("action"), td.get("logits").argmax(-1)));
  TensorDict wide({8});
  wide.set("observation", at::zeros({8, 5}));
  const tensordict_test::Snapshot before = tensordict_test::TakeSnapshot(wide);
  EXPECT_THROW(seq(wide), c10::ValueError);
  tensordict_test::ExpectUnchanged(wide, before);
}

// As a policy: env.rollout runs it on each step's dict, a collector on
// each batch's; the TorchScript policy takes the same actions.
TEST(AOTIModule, DrivesARolloutAsTheTorchScriptPolicyDoes) {
  // The TorchScript policy takes and returns a Dict[str, Tensor].
  auto jit = std::make_shared<torch::jit::Module>(
      torch::jit::load(Example("cartpole_policy.pt")));
  const tensordict::TensorDictModule scripted(
      [jit](const std::vector<at::Tensor>& in) {
        TensorDict obs({in[0].size(0)});
        obs.set("observation", in[0]);
        const TensorDict out = tensordict::forward(*jit, obs);
        return std::vector<at::Tensor>{out.get("logits"), out.get("action")};
      },
      {"observation"}, {"logits", "action"});
  const AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  std::vector<TensorDict> runs;
  for (const tensordict::TensorDictModule* m :
       {static_cast<const tensordict::TensorDictModule*>(&policy), &scripted}) {
    tensordict::CartPoleEnv env({8}, /*categorical_action_encoding=*/true);
    env.set_seed(3);
    runs.push_back(env.rollout(100, *m));
  }
  ASSERT_EQ(runs[0].batch_size(), at::IntArrayRef({8, 100}));
  EXPECT_TRUE(at::equal(runs[0].get("action"), runs[1].get("action")));
  EXPECT_TRUE(
      at::allclose(runs[0].get("logits"), runs[1].get("logits"), 1e-5, 1e-5));
}

TEST(AOTIModule, CollectorRunsItAndSeesItsNewWeights) {
  AOTIModule policy(Package(), {"observation"}, {"logits", "action"});
  tensordict::Collector collector(
      std::make_unique<tensordict::CartPoleEnv>(std::vector<int64_t>{4}, true),
      policy, tensordict::CollectorOptions(32).total_frames(64));
  const TensorDict first = collector.next();
  EXPECT_TRUE(at::equal(first.get("action"), first.get("logits").argmax(-1)));
  EXPECT_GT(first.get("logits").abs().sum().item<double>(), 0);
  // The learner's new weights, given to the policy: the collector's copy
  // shares the package.
  torch::jit::Module scripted = torch::jit::load(Example("cartpole_policy.pt"));
  policy.update_weights(ScriptedWeights(scripted, 0.0));
  const TensorDict second = collector.next();
  EXPECT_TRUE(at::equal(second.get("logits"), at::zeros({4, 8, 2})));
}

#endif  // TENSORDICT_HAS_AOTI
