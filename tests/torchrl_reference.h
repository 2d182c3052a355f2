// The helpers of the tests that check the env layer against the reference
// Python TorchRL 0.14 (python_envs_test.cpp, python_transforms_test.cpp):
// a script runner that tells TorchRL 0.4 (which has neither
// torchrl.data.Composite nor torchrl.envs.PendulumEnv) apart, and a
// comparison of two dicts.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <set>
#include <string>
#include <vector>

#include "python_reference.h"

namespace tensordict_test {

/// What a script prints, and stops at, when the reference TorchRL is 0.4.
inline constexpr const char* kNo014 = "<<no TorchRL 0.14>>";

/// How a script run ended.
enum class PyRun { kDone, kTorchRL04, kFailed };

/// Runs `script` after a check that prints kNo014 and stops for TorchRL
/// 0.4 (it imports json, sys, torch, torchrl.data and torchrl.envs); a test
/// failure when Python fails.
inline PyRun RunTorchRL(const std::string& script,
                        const std::vector<std::string>& args) {
  static const char* const kCheck = R"py(
import json, sys
import torch
import torchrl.data, torchrl.envs
if not hasattr(torchrl.data, "Composite") or not hasattr(torchrl.envs, "PendulumEnv"):
    print("<<no TorchRL 0.14>>")
    sys.exit(0)
)py";
  std::string out;
  if (!RunPython(std::string(kCheck) + script, args, &out)) {
    return PyRun::kFailed;
  }
  return out.find(kNo014) != std::string::npos ? PyRun::kTorchRL04
                                               : PyRun::kDone;
}

/// The leaf keys of `td`, as Python prints them.
inline std::set<std::string> LeafKeys(const tensordict::TensorDict& td) {
  std::set<std::string> out;
  for (const tensordict::NestedKey& key : td.keys(true, true)) {
    out.insert(key.str());
  }
  return out;
}

/// max |a - b| (0 for empty tensors).
inline double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0) return 0.0;
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// `ours` and TorchRL's `theirs` have one batch size and one set of leaf
/// keys, each leaf of one shape and dtype, with equal flags and integers
/// and floats within `atol`.
inline void ExpectSameDict(const tensordict::TensorDict& ours,
                           const tensordict::TensorDict& theirs, double atol) {
  EXPECT_EQ(ours.batch_size().vec(), theirs.batch_size().vec());
  EXPECT_EQ(LeafKeys(ours), LeafKeys(theirs));
  for (const tensordict::NestedKey& key : ours.keys(true, true)) {
    if (!theirs.contains(key)) continue;
    SCOPED_TRACE("key " + key.str());
    const at::Tensor a = ours.get(key);
    const at::Tensor b = theirs.get(key);
    EXPECT_EQ(a.scalar_type(), b.scalar_type());
    ASSERT_EQ(a.sizes().vec(), b.sizes().vec());
    if (a.is_floating_point()) {
      EXPECT_LE(MaxAbsDiff(a, b), atol);
    } else {
      EXPECT_TRUE(at::equal(a, b.to(a.scalar_type())));
    }
  }
}

}  // namespace tensordict_test
