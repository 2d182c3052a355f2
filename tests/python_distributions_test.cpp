// Distributions and the probabilistic module against the reference Python
// (python_reference.h): torch.distributions' Categorical and Normal, TorchRL's
// TanhNormal and tensordict.nn's ProbabilisticTensorDictModule give the same
// values (to 1e-5) on the same inputs, the same gradients to the
// parameters, and, with a generator seeded as Python's global one, the same
// draws.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/distributions.h>
#include <tensordict/probabilistic.h>
#include <tensordict/tensordict.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "python_reference.h"
#include "test_paths.h"

using nlohmann::json;
using tensordict::InteractionType;
using tensordict::InteractionTypeGuard;
using tensordict::ProbabilisticOptions;
using tensordict::ProbabilisticTensorDictModule;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::RunPython;
using tensordict_test::TempDir;
using tensordict_test::TensordictAtLeast;
using tensordict_test::WriteFile;
namespace D = tensordict::distributions;

namespace {

// Python's side: reads the inputs (argv[1]: name -> {shape, values}),
// writes each result (argv[2]: name -> {shape, values}, or a string). A
// result whose name starts with "new/" exists from TorchRL 0.14 on (0.4's
// TanhNormal shifts its location by the bounds without tanh_loc, and has no
// safe_tanh argument).
constexpr const char* kScript = R"py(
import inspect, json, sys, torch
import torch.distributions as D
from torchrl.modules.distributions import TanhNormal
from tensordict import TensorDict
from tensordict.nn import ProbabilisticTensorDictModule, InteractionType, set_interaction_type

inp = json.load(open(sys.argv[1]))
def T(name, dtype=torch.float32):
    x = inp[name]
    return torch.tensor(x["values"], dtype=torch.float64).reshape(x["shape"]).to(dtype)
def J(t):
    t = t.detach().double()
    return {"shape": list(t.shape), "values": t.flatten().tolist()}
out = {}
sig = inspect.signature(TanhNormal.__init__).parameters
newest = "low" in sig
def tanh_normal(loc, scale, low=-1.0, high=1.0, **kw):
    kw.update(dict(low=low, high=high) if newest else dict(min=low, max=high))
    return TanhNormal(loc, scale, **kw)
def det(d):  # 0.4 called it mode
    return d.deterministic_sample if newest else d.mode

for name, d in [("cat_logits", D.Categorical(logits=T("cat_logits"))),
                ("cat_probs", D.Categorical(probs=T("cat_probs")))]:
    out[name + "/logits"] = J(d.logits)
    out[name + "/probs"] = J(d.probs)
    out[name + "/log_prob"] = J(d.log_prob(T(name + "_value", torch.int64)))
    out[name + "/entropy"] = J(d.entropy())
    out[name + "/mode"] = J(d.mode)
    torch.manual_seed(5)
    out[name + "/sample"] = J(d.sample((6,)))

d = D.Normal(T("normal_loc"), T("normal_scale"))
out["normal/log_prob"] = J(d.log_prob(T("normal_value")))
out["normal/entropy"] = J(d.entropy())
out["normal/mean"] = J(d.mean)
out["normal/mode"] = J(d.mode)
out["normal/stddev"] = J(d.stddev)
out["normal/variance"] = J(d.variance)
torch.manual_seed(7)
out["normal/sample"] = J(d.sample((3,)))
torch.manual_seed(8)
out["normal/rsample"] = J(d.rsample((3,)))

cases = {
    "tanh": lambda: tanh_normal(T("tanh_loc"), T("tanh_scale")),
    "tanh_loc_bounds": lambda: tanh_normal(T("tanh_loc"), T("tanh_scale"), low=-2.0, high=3.0,
                                           tanh_loc=True, upscale=2.0),
    "saturated": lambda: tanh_normal(T("saturated_loc"), T("tanh_scale")),
}
if newest:
    cases["new/bounds"] = lambda: tanh_normal(T("tanh_loc"), T("tanh_scale"), low=0.0, high=4.0)
    cases["new/unsafe_event0"] = lambda: tanh_normal(T("tanh_loc"), T("tanh_scale"), event_dims=0,
                                                     safe_tanh=False)
for name, make in cases.items():
    d = make()
    lo, hi = (-2.0, 3.0) if name == "tanh_loc_bounds" else (0.0, 4.0) if name == "new/bounds" else (-1.0, 1.0)
    out[name + "/det"] = J(det(d))
    out[name + "/log_prob"] = J(d.log_prob(lo + (hi - lo) * T("tanh_unit")))
    out[name + "/log_prob_det"] = J(d.log_prob(det(d)))
    torch.manual_seed(11)
    out[name + "/rsample"] = J(d.rsample((2,)))
    torch.manual_seed(12)
    out[name + "/sample"] = J(d.sample((2,)))

# Gradients to the parameters: of log_prob, and of a seeded rsample.
for name, make, lo, hi in [
        ("grad/normal", lambda l, s: D.Normal(l, s), -1.0, 1.0),
        ("grad/tanh", lambda l, s: tanh_normal(l, s), -1.0, 1.0),
        ("grad/tanh_loc_bounds", lambda l, s: tanh_normal(l, s, low=-2.0, high=3.0, tanh_loc=True,
                                                          upscale=2.0), -2.0, 3.0)]:
    loc = T("tanh_loc").requires_grad_()
    scale = T("tanh_scale").requires_grad_()
    d = make(loc, scale)
    g = torch.autograd.grad(d.log_prob(lo + (hi - lo) * T("tanh_unit")).sum(), [loc, scale],
                            retain_graph=True)  # tanh_loc's part of the graph is shared
    out[name + "/log_prob_loc"], out[name + "/log_prob_scale"] = J(g[0]), J(g[1])
    torch.manual_seed(15)
    g = torch.autograd.grad(d.rsample((2,)).sum(), [loc, scale])
    out[name + "/rsample_loc"], out[name + "/rsample_scale"] = J(g[0]), J(g[1])

for name, cls in [("module_tanh", TanhNormal), ("module_normal", D.Normal)]:
    m = ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"],
                                      distribution_class=cls, return_log_prob=True)
    out[name + "/log_prob_key"] = str(m.log_prob_key)
    td = m(TensorDict({"loc": T("tanh_loc"), "scale": T("tanh_scale")}, [2]))
    out[name + "/default"] = J(td["action"])
    out[name + "/default_log_prob"] = J(td[m.log_prob_key])
    torch.manual_seed(13)
    with set_interaction_type(InteractionType.RANDOM):
        td = m(TensorDict({"loc": T("tanh_loc"), "scale": T("tanh_scale")}, [2]))
    out[name + "/random"] = J(td["action"])
    out[name + "/random_log_prob"] = J(td[m.log_prob_key])
m = ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"],
                                  distribution_class=D.Categorical, return_log_prob=True)
torch.manual_seed(14)
with set_interaction_type(InteractionType.RANDOM):
    td = m(TensorDict({"logits": T("cat_logits")}, [2]))
out["module_cat/random"] = J(td["action"])
out["module_cat/random_log_prob"] = J(td[m.log_prob_key])
json.dump(out, open(sys.argv[2], "w"))
)py";

json ToJson(const at::Tensor& t) {
  const at::Tensor d = t.detach().to(at::kDouble).contiguous();
  return {{"shape", d.sizes().vec()},
          {"values", std::vector<double>(d.data_ptr<double>(),
                                         d.data_ptr<double>() + d.numel())}};
}

at::Generator Seeded(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

// C++'s results, by the names the script gives Python's.
std::map<std::string, at::Tensor> CppResults(
    const std::map<std::string, at::Tensor>& in) {
  std::map<std::string, at::Tensor> r;
  const auto& I = in;
  for (const char* name : {"cat_logits", "cat_probs"}) {
    const std::string n = name;
    const D::Categorical d = n == "cat_logits"
                                 ? D::Categorical::from_logits(I.at(n))
                                 : D::Categorical::from_probs(I.at(n));
    r[n + "/logits"] = d.logits();
    r[n + "/probs"] = d.probs();
    r[n + "/log_prob"] = d.log_prob(I.at(n + "_value").to(at::kLong));
    r[n + "/entropy"] = d.entropy();
    r[n + "/mode"] = d.mode();
    r[n + "/sample"] = d.sample({6}, Seeded(5));
  }
  const D::Normal normal(I.at("normal_loc"), I.at("normal_scale"));
  r["normal/log_prob"] = normal.log_prob(I.at("normal_value"));
  r["normal/entropy"] = normal.entropy();
  r["normal/mean"] = normal.mean();
  r["normal/mode"] = normal.mode();
  r["normal/stddev"] = normal.stddev();
  r["normal/variance"] = normal.variance();
  r["normal/sample"] = normal.sample({3}, Seeded(7));
  r["normal/rsample"] = normal.rsample({3}, Seeded(8));

  struct Case {
    std::string name;
    at::Tensor loc;
    D::TanhNormalOptions options;
  };
  const at::Tensor loc = I.at("tanh_loc");
  const at::Tensor scale = I.at("tanh_scale");
  const std::vector<Case> cases = {
      {"tanh", loc, {}},
      {"tanh_loc_bounds", loc,
       D::TanhNormalOptions().low(-2).high(3).tanh_loc(true).upscale(2)},
      {"saturated", I.at("saturated_loc"), {}},
      {"new/bounds", loc, D::TanhNormalOptions().low(0).high(4)},
      {"new/unsafe_event0", loc,
       D::TanhNormalOptions().event_dims(0).safe_tanh(false)},
  };
  for (const Case& c : cases) {
    const D::TanhNormal d(c.loc, scale, c.options);
    const double lo = d.options().low();
    const double hi = d.options().high();
    r[c.name + "/det"] = d.deterministic_sample();
    r[c.name + "/log_prob"] = d.log_prob(lo + (hi - lo) * I.at("tanh_unit"));
    r[c.name + "/log_prob_det"] = d.log_prob(d.deterministic_sample());
    r[c.name + "/rsample"] = d.rsample({2}, Seeded(11));
    r[c.name + "/sample"] = d.sample({2}, Seeded(12));
  }

  const D::TanhNormalOptions bounds =
      D::TanhNormalOptions().low(-2).high(3).tanh_loc(true).upscale(2);
  const std::vector<std::pair<std::string, D::DistributionFactory>> grads = {
      {"grad/normal", D::normal()},
      {"grad/tanh", D::tanh_normal()},
      {"grad/tanh_loc_bounds", D::tanh_normal(bounds)}};
  for (const auto& [name, factory] : grads) {
    const at::Tensor l = loc.clone().requires_grad_();
    const at::Tensor s = scale.clone().requires_grad_();
    D::DistributionParams params;
    params.add("loc", l);
    params.add("scale", s);
    const std::shared_ptr<D::Distribution> d = factory(params);
    const bool bounded = name == "grad/tanh_loc_bounds";
    const double lo = bounded ? -2 : -1;
    const double hi = bounded ? 3 : 1;
    at::Tensor lp = d->log_prob(lo + (hi - lo) * I.at("tanh_unit")).sum();
    std::vector<at::Tensor> g =
        torch::autograd::grad({lp}, {l, s}, {}, /*retain_graph=*/true);
    r[name + "/log_prob_loc"] = g[0];
    r[name + "/log_prob_scale"] = g[1];
    g = torch::autograd::grad({d->rsample({2}, Seeded(15)).sum()}, {l, s});
    r[name + "/rsample_loc"] = g[0];
    r[name + "/rsample_scale"] = g[1];
  }

  const std::vector<std::pair<std::string, D::DistributionFactory>> modules = {
      {"module_tanh", D::tanh_normal()}, {"module_normal", D::normal()}};
  for (const auto& [name, factory] : modules) {
    const TensorDict td({{"loc", loc}, {"scale", scale}}, {2});
    ProbabilisticTensorDictModule m(
        {"loc", "scale"}, {"action"}, factory,
        ProbabilisticOptions().return_log_prob(true).generator(Seeded(13)));
    m(td);
    r[name + "/default"] = td.get("action");
    r[name + "/default_log_prob"] = td.get("action_log_prob");
    const InteractionTypeGuard random(InteractionType::RANDOM);
    m(td);
    r[name + "/random"] = td.get("action");
    r[name + "/random_log_prob"] = td.get("action_log_prob");
  }
  const TensorDict td({{"logits", I.at("cat_logits")}}, {2});
  ProbabilisticTensorDictModule m(
      {"logits"}, {"action"}, D::categorical(),
      ProbabilisticOptions().return_log_prob(true).generator(Seeded(14)));
  const InteractionTypeGuard random(InteractionType::RANDOM);
  m(td);
  r["module_cat/random"] = td.get("action");
  r["module_cat/random_log_prob"] = td.get("action_log_prob");
  return r;
}

void ExpectClose(const std::string& name, const at::Tensor& cpp,
                 const json& py) {
  const at::Tensor c = cpp.detach().to(at::kDouble).contiguous();
  ASSERT_EQ(c.sizes().vec(), py["shape"].get<std::vector<int64_t>>()) << name;
  const auto values = py["values"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<size_t>(c.numel()), values.size()) << name;
  const double* v = c.data_ptr<double>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_NEAR(v[i], values[i], 1e-5 + 1e-5 * std::abs(values[i]))
        << name << " [" << i << "]";
  }
}

}  // namespace

TEST(PythonReference, DistributionsMatchTorchAndTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  // Fixed inputs, no draw: the same on both sides.
  const std::map<std::string, at::Tensor> in = {
      {"cat_logits",
       torch::tensor({0.1, -1.2, 2.0, 0.3, 1.0, 1.0, 1.0, 1.0}).view({2, 4})},
      {"cat_logits_value", torch::tensor({0, 3, 2, 1, 1, 1}).view({3, 2})},
      {"cat_probs",
       torch::tensor({0.1, 0.2, 0.7, 0.5, 0.25, 0.25}).view({2, 3})},
      {"cat_probs_value", torch::tensor({2, 0})},
      {"normal_loc",
       torch::tensor({0.0, 1.5, -2.0, 0.3, -0.7, 4.0}).view({2, 3})},
      {"normal_scale", torch::tensor({1.0, 0.5, 2.5})},
      {"normal_value", torch::linspace(-3, 3, 24).view({4, 2, 3})},
      {"tanh_loc",
       torch::tensor({0.2, -0.8, 1.5, 0.0, 2.5, -3.0}).view({2, 3})},
      {"tanh_scale",
       torch::tensor({0.3, 1.0, 0.7, 1.2, 0.05, 0.4}).view({2, 3})},
      {"saturated_loc",
       torch::tensor({20.0, -20.0, 9.0, 0.0, 15.0, -9.5}).view({2, 3})},
      {"tanh_unit",
       torch::tensor({0.1, 0.5, 0.9, 0.25, 0.75, 0.02}).view({2, 3})},
  };
  TempDir dir("td_pyref_dist");
  json inputs;
  for (const auto& [k, t] : in) inputs[k] = ToJson(t);
  WriteFile(dir / "in.json", inputs.dump());
  ASSERT_TRUE(RunPython(kScript, {dir / "in.json", dir / "out.json"}));
  const json py = json::parse(ReadFile(dir / "out.json"));

  const bool newest = TensordictAtLeast(0, 14);
  // tensordict 0.14 names the log-probability "<out_key>_log_prob"; 0.4
  // named it "sample_log_prob" (the C++ default is 0.14's).
  for (const char* m : {"module_tanh", "module_normal"}) {
    EXPECT_EQ(py.at(std::string(m) + "/log_prob_key").get<std::string>(),
              newest ? "action_log_prob" : "sample_log_prob");
  }
  size_t compared = 0;
  for (const auto& [name, t] : CppResults(in)) {
    if (name.rfind("new/", 0) == 0 && !newest) continue;
    ASSERT_TRUE(py.contains(name)) << name;
    ExpectClose(name, t, py.at(name));
    ++compared;
  }
  EXPECT_EQ(compared, newest ? 67U : 57U);
}
