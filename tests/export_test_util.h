// What the AOTIModule tests share (export_test.cpp on the checked-in
// package, python_export_test.cpp on Python's): that a policy reading
// "observation" as float32 [1 to 1024, 4] refuses each of `observations`
// naming the key and both sides, the dict unchanged.
#pragma once

#include <ATen/ATen.h>
#include <tensordict/export.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "core/names.h"  // src/ (tests/CMakeLists.txt)
#include "test_util.h"

namespace tensordict_test {

inline void ExpectRefusesObservations(
    const tensordict::AOTIModule& policy, const std::string& path,
    const std::vector<at::Tensor>& observations) {
  for (const at::Tensor& obs : observations) {
    tensordict::TensorDict td({obs.size(0)});
    td.set("observation", obs);
    const Snapshot before = TakeSnapshot(td);
    ExpectThrowsMsg<c10::ValueError>(
        [&] { policy(td); },
        "AOTIModule(" + path +
            "): in-key observation: the package takes torch.float32 [1 to "
            "1024, 4], got " +
            tensordict::detail::dtype_name(obs.scalar_type()) + " " +
            tensordict::detail::shape_str(obs.sizes()));
    ExpectUnchanged(td, before);
  }
}

}  // namespace tensordict_test
