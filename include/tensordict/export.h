// tensordict/export.h — policies exported with torch.export and compiled by
// AOTInductor (`.pt2` packages) as TensorDictModules, with live weight
// updates: PyTorch's way to train in Python and deploy in C++ since
// TorchScript's deprecation (docs/tutorials/export.md).
//
//   tensordict::AOTIModule policy("policy.pt2", {"observation"}, {"action"});
//   policy(td);                        // td["action"] = the package's output
//   policy.update_weights(params);     // from_module's layout
//
// Built where LibTorch has AOTInductor's package loader (2.6 and later):
// the macro TENSORDICT_HAS_AOTI (<tensordict/config.h>; the CMake variable
// of the same name) is 1 there and 0 elsewhere, where including this header
// is an error.
#pragma once

#include "tensordict/config.h"

#if !TENSORDICT_HAS_AOTI
#error \
    "<tensordict/export.h> needs LibTorch 2.6 or later (AOTInductor's package loader); this tensordict was built without it (TENSORDICT_HAS_AOTI is 0)"
#endif

#include <torch/arg.h>

#include <memory>
#include <string>
#include <vector>

#include "tensordict/nn.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// How an AOTInductor package is loaded.
struct AOTIOptions {
  /// The model's name in the package (`aoti_compile_and_package`'s
  /// default: "model").
  TORCH_ARG(std::string, model_name) = "model";
};

/// A `.pt2` package (`torch._inductor.aoti_compile_and_package` of a
/// `torch.export`ed module) run on TensorDicts: a `TensorDictModule` (it
/// composes in `TensorDictSequential` and serves as a collector's policy;
/// copies share the package).
///
/// Inputs follow the package's call spec (`get_call_spec()`): a keyword
/// argument (tensordict's convention for a `TensorDictModule`: its in-keys,
/// a nested key's names joined by "_") takes the in-key of its name, the
/// positional arguments take the other in-keys in order. Outputs (one
/// tensor, a tuple, or a dict matched by name) go to `out_keys`. Each input
/// is made contiguous and checked before the package runs: its dtype, its
/// number of dims and each dim against the exported shape, a dynamic dim
/// against its range (from the package's "tensordict.inputs" metadata,
/// which examples/python/export_policy.py writes; the model's own checks,
/// AOTI_RUNTIME_CHECK_INPUTS, otherwise). Errors name the key and both
/// sides.
class AOTIModule : public TensorDictModule {
 public:
  /// Loads the package at `path`; checks the call spec against `in_keys`
  /// and `out_keys` (a count or a name that differs is a c10::Error naming
  /// both sides, as is a spec this code does not read).
  AOTIModule(const std::string& path, std::vector<NestedKey> in_keys,
             std::vector<NestedKey> out_keys, const AOTIOptions& options = {});

  /// Writes `params` (the layout of Python's `TensorDict.from_module` of
  /// the exported module, or of `from_module`: "module", "0", "weight" is
  /// the constant "module.0.weight") into the package's weights. Every
  /// name, dtype and shape is checked first (a missing or an extra one
  /// names what the package has); then all are written at once: a call
  /// running meanwhile sees the old weights or the new ones. The tensors
  /// are copied. A package compiled by torch before 2.7 is loaded again
  /// from `path` for each update (its model takes new weights only into
  /// an empty buffer): milliseconds, not microseconds.
  void update_weights(const TensorDict& params);

  /// The package's weights that `update_weights` writes, by their fully
  /// qualified names ("module.0.weight"), sorted.
  [[nodiscard]] std::vector<std::string> constant_names() const;

  /// @cond
  struct Package;  // the loaded package (export/aoti_module.cpp)
                   /// @endcond

 private:
  AOTIModule(std::shared_ptr<Package> package, std::vector<NestedKey> in_keys,
             std::vector<NestedKey> out_keys);
  std::shared_ptr<Package> package_;
};

}  // namespace tensordict
