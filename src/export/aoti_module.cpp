// AOTIModule (tensordict/export.h): an AOTInductor package loaded with
// LibTorch's AOTIModelPackageLoader, its call spec (torch.utils._pytree's
// JSON) read into a mapping from in-keys to the package's inputs and from
// its outputs to out-keys, its inputs checked before each run, and its
// weights replaced through the runner's inactive constant buffer (written,
// constant-folded, then swapped in).
#include <ATen/ATen.h>
#include <ATen/DynamicLibrary.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "tensordict/export.h"

namespace tensordict {

namespace {

using Json = nlohmann::json;

using Loader = torch::inductor::AOTIModelPackageLoader;
using Runner = torch::inductor::AOTIModelContainerRunner;

// What the runner keeps protected, named from a derived class: the model's
// library, and (LibTorch >= 2.10) its entry points, which the runner leaves
// null where the model lacks them (calling one of those crashes).
struct RunnerEntries : Runner {
  // Whether the model exports `symbol`.
  static bool model_has(const Runner& runner, const char* symbol) {
    try {
      return (runner.*(&RunnerEntries::model_so_))->sym(symbol) != nullptr;
    } catch (const c10::Error&) {
      return false;
    }
  }
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  static bool can_extract_constants(const Runner& runner) {
    return runner.*(&RunnerEntries::extract_constants_map_func_) != nullptr;
  }
#endif
};

// A nested key's name as a keyword argument: its names joined by "_"
// (tensordict's TensorDictModule.forward(**kwargs)).
std::string keyword(const NestedKey& key) {
  return c10::Join("_", key.parts());
}

// A weight's fully qualified name: from_module's keys joined by ".".
std::string dotted(const NestedKey& key) { return c10::Join(".", key.parts()); }

// An error's message without LibTorch's backtrace or a trailing newline.
std::string message(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  std::string out =
      error != nullptr ? error->what_without_backtrace() : e.what();
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) {
    out.pop_back();
  }
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  return c10::Join(", ", names);
}

bool is_leaf(const Json& node) {
  return node.is_object() && node.value("type", Json()).is_null() &&
         node.value("children_spec", Json::array()).empty();
}

// A dict node's keys (its context: a JSON list of strings, as a string).
std::vector<std::string> dict_keys(const Json& node) {
  const Json context = Json::parse(node.at("context").get<std::string>());
  std::vector<std::string> out;
  for (const Json& name : context) out.push_back(name.get<std::string>());
  return out;
}

at::ScalarType dtype_of(const std::string& name, const std::string& where) {
  static const std::map<std::string, at::ScalarType> kNames = {
      {"float32", at::kFloat}, {"float64", at::kDouble},
      {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},    {"int32", at::kInt},
      {"int16", at::kShort},   {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool}};
  const auto it = kNames.find(name);
  TORCH_CHECK_VALUE(it != kNames.end(), where, ": unknown dtype \"", name,
                    "\"");
  return it->second;
}

}  // namespace

struct AOTIModule::Package {
  // One input of the package, in its call order.
  struct Input {
    size_t key = 0;          // the in-key it reads
    std::string name;        // the keyword, or "" for a positional one
    bool described = false;  // dtype and shape known (metadata)
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;                      // -1: dynamic
    std::vector<std::pair<int64_t, int64_t>> range;  // of each dim
  };
  // One weight: its name in the runner, its dtype and shape.
  struct Weight {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    bool shaped = false;
  };

  std::string path;
  AOTIOptions options;
  // The loaded package; an update of a package that owning_model replaces
  // it (under loader_mu; a call running meanwhile keeps the one it took).
  std::shared_ptr<Loader> loader;
  mutable std::mutex loader_mu;
  // The model was compiled by a torch before 2.7 (it lacks
  // AOTInductorModelContainerExtractConstantsMap): a constant buffer update
  // takes ownership of the given tensor handles (CPU) and writes only the
  // constants its buffer does not have yet, so new weights go into a
  // freshly loaded package's empty inactive buffer. Later models copy the
  // given tensors into the buffer they update.
  bool owning_model = false;
  bool folds = false;  // the package has constants folded from weights
  at::Device device = at::kCPU;  // where its weights live
  std::vector<NestedKey> in_keys, out_keys;
  std::vector<Input> inputs;
  std::vector<size_t>
      out_of;  // the package's output i goes to out-key out_of[i]
  std::map<std::string, Weight> weights;  // by fully qualified name
  // The map update_weights hands the runner, its names made once (written
  // under update_mu); in the order of weights, each one's key in
  // from_module's layout and its slot in the map.
  torch::inductor::TensorConstantMap constant_map;
  std::vector<NestedKey> weight_keys;
  std::vector<at::Tensor**> weight_slots;

  // Throws naming a leaf the package has no weight for, or a weight
  // without a leaf.
  [[noreturn]] void refuse_names(const std::vector<NestedKey>& keys) const {
    const std::string fn = where() + ".update_weights";
    std::vector<std::string> names;
    for (const auto& [fqn, w] : weights) names.push_back(fqn);
    std::set<std::string> given;
    for (const NestedKey& key : keys) given.insert(dotted(key));
    for (const std::string& fqn : given) {
      TORCH_CHECK_VALUE(weights.count(fqn) == 1, fn,
                        ": the package has no weight ", fqn,
                        " (it has: ", joined(names), ")");
    }
    for (const std::string& fqn : names) {
      TORCH_CHECK_VALUE(given.count(fqn) == 1, fn, ": weight ", fqn,
                        " is missing (the package has: ", joined(names), ")");
    }
    TORCH_CHECK(false, fn, ": the weights do not match");
  }
  std::mutex update_mu;

  [[nodiscard]] std::shared_ptr<Loader> current() const {
    const std::lock_guard<std::mutex> lock(loader_mu);
    return loader;
  }

  [[nodiscard]] std::string where() const { return "AOTIModule(" + path + ")"; }

  void read_inputs(const Json& spec) {
    const std::string what = where() + ": the package's input spec";
    const Json& root = spec.at(1);
    TORCH_CHECK_VALUE(
        root.value("type", Json()) == "builtins.tuple" &&
            root.at("children_spec").size() == 2,
        what,
        " is not an (args, kwargs) pair, which this code reads: ", spec.dump());
    const Json& args = root.at("children_spec")[0];
    const Json& kwargs = root.at("children_spec")[1];
    std::vector<std::string> names;
    if (kwargs.value("type", Json()) == "builtins.dict") {
      names = dict_keys(kwargs);
    } else {
      TORCH_CHECK_VALUE(kwargs.value("type", Json()).is_null() ||
                            kwargs.at("children_spec").empty(),
                        what,
                        "'s keyword arguments are not a dict: ", spec.dump());
    }
    for (const Json* part : {&args, &kwargs}) {
      for (const Json& child : part->value("children_spec", Json::array())) {
        TORCH_CHECK_VALUE(is_leaf(child), what,
                          " has an argument that is not a tensor (a ",
                          child.value("type", Json()).dump(),
                          "), which this code does not read: ", spec.dump());
      }
    }
    const size_t positional = args.value("children_spec", Json::array()).size();
    TORCH_CHECK_VALUE(positional + names.size() == in_keys.size(), where(),
                      ": the package takes ", positional + names.size(),
                      " inputs (", positional, " positional",
                      names.empty() ? "" : "; keywords ", joined(names),
                      ") but in_keys has ", in_keys.size(), ": ",
                      detail::key_vec_str(in_keys));
    // The keywords take the in-keys of their names, the positional
    // arguments the others, in order.
    std::vector<bool> taken(in_keys.size(), false);
    std::vector<Input> by_keyword;
    for (const std::string& name : names) {
      size_t found = in_keys.size();
      for (size_t k = 0; k < in_keys.size() && found == in_keys.size(); ++k) {
        if (keyword(in_keys[k]) == name) found = k;
      }
      TORCH_CHECK_VALUE(
          found < in_keys.size(), where(),
          ": the package's keyword argument \"", name,
          "\" is no in-key's name (in_keys: ", detail::key_vec_str(in_keys),
          "; a nested key's names joined by \"_\")");
      taken[found] = true;
      Input input;
      input.key = found;
      input.name = name;
      by_keyword.push_back(input);
    }
    for (size_t k = 0; k < in_keys.size(); ++k) {
      if (taken[k]) continue;
      Input input;
      input.key = k;
      inputs.push_back(input);
    }
    inputs.insert(inputs.end(), by_keyword.begin(), by_keyword.end());
  }

  void read_outputs(const Json& spec) {
    const std::string what = where() + ": the package's output spec";
    const Json& root = spec.at(1);
    std::vector<std::string> names;
    size_t n = 1;
    const Json type = root.value("type", Json());
    if (!is_leaf(root)) {
      TORCH_CHECK_VALUE(type == "builtins.tuple" || type == "builtins.list" ||
                            type == "builtins.dict",
                        what,
                        " is not a tensor, a tuple or a dict, which this "
                        "code reads: ",
                        spec.dump());
      for (const Json& child : root.at("children_spec")) {
        TORCH_CHECK_VALUE(is_leaf(child), what,
                          " has an output that is not a tensor: ", spec.dump());
      }
      n = root.at("children_spec").size();
      if (type == "builtins.dict") names = dict_keys(root);
    }
    TORCH_CHECK_VALUE(n == out_keys.size(), where(), ": the package returns ",
                      n, " tensors", names.empty() ? "" : " (", joined(names),
                      names.empty() ? "" : ")", " but out_keys has ",
                      out_keys.size(), ": ", detail::key_vec_str(out_keys));
    for (size_t i = 0; i < n; ++i) {
      if (names.empty()) {
        out_of.push_back(i);
        continue;
      }
      size_t found = out_keys.size();
      for (size_t k = 0; k < out_keys.size() && found == out_keys.size(); ++k) {
        if (keyword(out_keys[k]) == names[i]) found = k;
      }
      TORCH_CHECK_VALUE(found < out_keys.size(), where(),
                        ": the package's output \"", names[i],
                        "\" is no out-key's name (out_keys: ",
                        detail::key_vec_str(out_keys), ")");
      out_of.push_back(found);
    }
  }

  // The inputs' dtypes and shapes, from the "tensordict.inputs" metadata.
  void read_input_metadata(const std::string& text) {
    const std::string what = where() + ": the metadata tensordict.inputs";
    const Json described = Json::parse(text);
    for (size_t i = 0; i < described.size(); ++i) {
      const Json& d = described[i];
      const std::string name = d.value("name", "");
      Input* input = nullptr;
      for (Input& in : inputs) {
        if (!in.name.empty() && in.name == name) input = &in;
      }
      if (input == nullptr && name.empty() && i < inputs.size()) {
        input = &inputs[i];
      }
      TORCH_CHECK_VALUE(input != nullptr, what, " describes \"", name,
                        "\", which the package does not take");
      input->dtype = dtype_of(d.at("dtype").get<std::string>(), what);
      const Json& shape = d.at("shape");
      const Json dynamic = d.value("dynamic", Json::object());
      for (size_t dim = 0; dim < shape.size(); ++dim) {
        if (shape[dim].is_null()) {
          const Json r = dynamic.at(std::to_string(dim));
          input->shape.push_back(-1);
          input->range.emplace_back(r.at(0).get<int64_t>(),
                                    r.at(1).get<int64_t>());
        } else {
          const auto size = shape[dim].get<int64_t>();
          input->shape.push_back(size);
          input->range.emplace_back(size, size);
        }
      }
      input->described = true;
    }
  }

  [[nodiscard]] std::string shape_spec(const Input& in) const {
    std::string out = "[";
    for (size_t d = 0; d < in.shape.size(); ++d) {
      if (d > 0) out += ", ";
      out += in.shape[d] >= 0 ? std::to_string(in.shape[d])
                              : std::to_string(in.range[d].first) + " to " +
                                    std::to_string(in.range[d].second);
    }
    return out + "]";
  }

  void check_input(const Input& in, const at::Tensor& t) const {
    const NestedKey& key = in_keys[in.key];
    bool fits = t.scalar_type() == in.dtype &&
                t.dim() == static_cast<int64_t>(in.shape.size());
    for (int64_t d = 0; fits && d < t.dim(); ++d) {
      fits = t.size(d) >= in.range[d].first && t.size(d) <= in.range[d].second;
    }
    TORCH_CHECK_VALUE(
        fits, where(), ": in-key ", key.str(), ": the package takes ",
        detail::dtype_name(in.dtype), " ", shape_spec(in), ", got ",
        detail::dtype_name(t.scalar_type()), " ", detail::shape_str(t.sizes()));
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& in) const {
    std::vector<at::Tensor> args;
    args.reserve(inputs.size());
    for (const Input& input : inputs) {
      const at::Tensor& t = in[input.key];
      if (input.described) check_input(input, t);
      args.push_back(t.contiguous());
    }
    std::vector<at::Tensor> out;
    // An owning model's package may be replaced by an update meanwhile:
    // the call keeps the one it took.
    const std::shared_ptr<Loader> kept =
        owning_model ? current() : std::shared_ptr<Loader>();
    Loader* running = owning_model ? kept.get() : loader.get();
    try {
      out = running->run(args);
    } catch (const std::exception& e) {
      std::string order;
      for (size_t i = 0; i < inputs.size(); ++i) {
        order += (i > 0 ? ", " : "") + std::to_string(i) + ": " +
                 in_keys[inputs[i].key].str();
      }
      TORCH_CHECK(false, where(), " failed (its inputs: ", order,
                  "): ", message(e));
    }
    TORCH_CHECK(out.size() == out_of.size(), where(), ": the package returned ",
                out.size(), " tensors, its spec says ", out_of.size());
    std::vector<at::Tensor> results(out.size());
    for (size_t i = 0; i < out.size(); ++i) results[out_of[i]] = out[i];
    return results;
  }

  void read_weights(const std::unordered_map<std::string, std::string>& meta) {
    Runner* runner = loader->get_runner();
    const auto fqns = runner->getConstantNamesToOriginalFQNs();
    const auto dtypes = runner->getConstantNamesToDtypes();
    for (const auto& [name, fqn] : fqns) {
      // Constants folded at compile or load time are the package's own.
      if (name.rfind("_FOLDED_CONST_", 0) == 0) folds = true;
      if (fqn.empty() || name.rfind("_FOLDED_CONST_", 0) == 0) continue;
      weights[fqn] = {
          name, static_cast<at::ScalarType>(dtypes.at(name)), {}, false};
    }
    for (const auto& [fqn, w] : weights) {
      weight_keys.emplace_back(detail::split_key(fqn, "."));
      weight_slots.push_back(&constant_map[w.name]);
    }
    owning_model = !RunnerEntries::model_has(
        *runner, "AOTInductorModelContainerExtractConstantsMap");
    const auto device_key = meta.find("AOTI_DEVICE_KEY");
    if (device_key != meta.end()) device = at::Device(device_key->second);
    const auto it = meta.find("tensordict.constants");
    if (it != meta.end()) {
      const Json described = Json::parse(it->second);
      for (const auto& [fqn, d] : described.items()) {
        auto w = weights.find(fqn);
        if (w == weights.end()) continue;
        w->second.shape = d.at("shape").get<std::vector<int64_t>>();
        w->second.shaped = true;
      }
    }
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
    if (!RunnerEntries::can_extract_constants(*runner)) return;
    for (const auto& [name, tensor] : runner->extract_constants_map(false)) {
      for (auto& [fqn, w] : weights) {
        if (w.name == name) {
          w.shape = tensor.sizes().vec();
          w.shaped = true;
        }
      }
    }
#endif
  }
};

namespace {

std::shared_ptr<AOTIModule::Package> load_package(
    const std::string& path, const std::vector<NestedKey>& in_keys,
    const std::vector<NestedKey>& out_keys, const AOTIOptions& options) {
  auto p = std::make_shared<AOTIModule::Package>();
  p->path = path;
  p->options = options;
  p->in_keys = in_keys;
  p->out_keys = out_keys;
  TORCH_CHECK_VALUE(std::ifstream(path).good(), p->where(), ": no such file");
  // The model checks its inputs itself (dtype, shape, device) where no
  // metadata says what they are.
  setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
  try {
    p->loader = std::make_shared<Loader>(path, options.model_name());
  } catch (const std::exception& e) {
    TORCH_CHECK_VALUE(false, p->where(),
                      ": not a package LibTorch can load: ", message(e));
  }
  const std::vector<std::string> spec = p->loader->get_call_spec();
  TORCH_CHECK_VALUE(spec.size() == 2, p->where(), ": the call spec has ",
                    spec.size(), " parts, not 2 (inputs, outputs)");
  try {
    p->read_inputs(Json::parse(spec[0]));
    p->read_outputs(Json::parse(spec[1]));
    const auto meta = p->loader->get_metadata();
    const auto it = meta.find("tensordict.inputs");
    if (it != meta.end()) p->read_input_metadata(it->second);
    p->read_weights(meta);
  } catch (const Json::exception& e) {
    TORCH_CHECK_VALUE(
        false, p->where(),
        ": a call spec or metadata this code does not read: ", e.what());
  }
  return p;
}

}  // namespace

AOTIModule::AOTIModule(const std::string& path, std::vector<NestedKey> in_keys,
                       std::vector<NestedKey> out_keys,
                       const AOTIOptions& options)
    : AOTIModule(load_package(path, in_keys, out_keys, options), in_keys,
                 out_keys) {}

AOTIModule::AOTIModule(std::shared_ptr<Package> package,
                       std::vector<NestedKey> in_keys,
                       std::vector<NestedKey> out_keys)
    : TensorDictModule(
          [p = package](const std::vector<at::Tensor>& in) {
            return p->run(in);
          },
          std::move(in_keys), std::move(out_keys)),
      package_(std::move(package)) {}

std::vector<std::string> AOTIModule::constant_names() const {
  std::vector<std::string> out;
  for (const auto& [fqn, w] : package_->weights) out.push_back(fqn);
  return out;
}

void AOTIModule::update_weights(const TensorDict& params) {
  Package& p = *package_;
  // The leaves by name, each checked against the package's weight; a name
  // the package lacks, or one it has that is missing, fails naming them.
  const std::vector<NestedKey> keys = params.keys(true, true);
  std::vector<const at::Tensor*> given(p.weights.size(), nullptr);
  std::vector<at::Tensor> leaves;
  leaves.reserve(keys.size());
  bool all = keys.size() == p.weights.size();
  for (size_t w = 0; all && w < p.weights.size(); ++w) {
    all = params.contains(p.weight_keys[w]);
    if (all) {
      leaves.push_back(params.get(p.weight_keys[w]));
      given[w] = &leaves.back();
    }
  }
  if (!all) p.refuse_names(keys);
  size_t w = 0;
  for (const auto& [fqn, weight] : p.weights) {
    const at::Tensor& t = *given[w++];
    TORCH_CHECK_VALUE(weight.shaped, p.where(),
                      ".update_weights: the package does not say the shape "
                      "of ",
                      fqn,
                      " (no tensordict.constants metadata, and this "
                      "LibTorch cannot read it)");
    TORCH_CHECK_VALUE(t.scalar_type() == weight.dtype &&
                          t.sizes() == at::IntArrayRef(weight.shape),
                      p.where(), ".update_weights: weight ", fqn,
                      ": the package has ", detail::dtype_name(weight.dtype),
                      " ", detail::shape_str(weight.shape), ", got ",
                      detail::dtype_name(t.scalar_type()), " ",
                      detail::shape_str(t.sizes()));
  }
  // Written into the runner's inactive buffer, folded, then swapped in: a
  // call running meanwhile sees the old weights or the new ones.
  const std::lock_guard<std::mutex> lock(p.update_mu);
  const at::NoGradGuard no_grad;
  std::vector<at::Tensor> tensors;
  tensors.reserve(p.weights.size());
  for (size_t k = 0; k < given.size(); ++k) {
    at::Tensor t = *given[k];
    if (t.device() != p.device) t = t.to(p.device);
    if (!t.is_contiguous()) t = t.contiguous();
    // An owning model keeps the tensor it is given: its own copy.
    if (p.owning_model && t.is_same(*given[k])) t = t.clone();
    tensors.push_back(std::move(t));
    *p.weight_slots[k] = &tensors.back();
  }
  torch::inductor::TensorConstantMap& map = p.constant_map;
  std::shared_ptr<Loader> target = p.loader;
  if (p.owning_model) {
    try {
      target = std::make_shared<Loader>(p.path, p.options.model_name());
    } catch (const std::exception& e) {
      TORCH_CHECK(
          false, p.where(),
          ".update_weights: could not load the package again to update it "
          "(a package compiled by torch < 2.7 is updated in a fresh "
          "copy): ",
          message(e));
    }
    // Handles the model takes ownership of.
    for (auto& [name, tensor] : map) tensor = new at::Tensor(*tensor);
  }
  Runner* runner = target->get_runner();
  // Every weight is in the map (checked above).
  runner->update_constant_buffer(map, /*use_inactive=*/true,
                                 /*validate_full_updates=*/false);
  if (p.folds) runner->run_const_fold(/*use_inactive=*/true);
  runner->swap_constant_buffer();
  for (auto& [name, tensor] : map) tensor = nullptr;
  if (p.owning_model) {
    const std::lock_guard<std::mutex> swap(p.loader_mu);
    p.loader = std::move(target);
  }
}

}  // namespace tensordict
