// Internal: calling a `Group`'s process group, whichever c10d class it is.
//
// LibTorch 1.x's ProcessGroupGloo derives from `c10d::ProcessGroup`; 2.x's
// derives from `c10d::Backend`, with `c10d::ProcessGroup` a dispatching
// wrapper. Both classes have the same communication methods, so the code of
// src/dist/ is written once, as a generic lambda, and `with_group` calls it
// with the right one.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <utility>

#include "tensordict/distributed.h"

namespace tensordict {
namespace detail {

/// `fn(group)` with `group` a `c10d::ProcessGroup&` or a `c10d::Backend&`.
template <typename Fn>
decltype(auto) with_group(const Group& pg, Fn&& fn) {
  if (c10d::Backend* b = pg.backend()) return std::forward<Fn>(fn)(*b);
  return std::forward<Fn>(fn)(*pg.process_group());
}

}  // namespace detail
}  // namespace tensordict

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace detail {

/// A leaf as the wire sees it.
struct WireLeaf {
  NestedKey key;
  at::Tensor tensor;            // the stored leaf
  const TensorDictImpl* level;  // the dict holding it
  size_t index;                 // its place in `leaf_tensors` order
};

/// The leaves of `root` in Python tensordict's wire order: each level's keys
/// sorted (`sorted_keys`, by code point, which is UTF-8 byte order), a
/// sub-dict's leaves in place of its key. Non-tensor entries hold no leaf.
std::vector<WireLeaf> wire_leaves(const TensorDictImpl& root);

/// Throws unless `rank` names another process of `pg`: "<op>: <what> rank
/// R is out of range for a group of size N" or "... is this process".
void check_peer(const char* op, const char* what, int rank, const Group& pg);

/// Throws unless the leaf can travel over `pg`: a dense tensor on a device
/// the backend moves (Gloo: CPU or CUDA; NCCL: CUDA).
void check_wire_leaf(const char* op, const WireLeaf& leaf,
                     const std::string& backend);

/// Runs `fn`, turning any exception (Gloo's included) into a c10::Error
/// "<op>: <context>: <message>".
template <typename Fn>
decltype(auto) on_wire(const char* op, const std::string& context, Fn&& fn);

[[noreturn]] void rethrow_on_wire(const char* op, const std::string& context);

template <typename Fn>
decltype(auto) on_wire(const char* op, const std::string& context, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (...) {
    rethrow_on_wire(op, context);
  }
}

}  // namespace detail
}  // namespace tensordict
