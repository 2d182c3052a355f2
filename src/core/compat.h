// The differences between LibTorch 1.13 and 2.x that this library meets,
// each behind one small guard, so that the rest of the code is written once.
// Each guard is tested in tests/compat_test.cpp.
//
//  - `as_int`: integers that LibTorch 2.x hands out as `c10::SymInt`
//    (`TensorIndex::integer()`, `Slice::start()/stop()/step()`) and 1.13 as
//    `int64_t`;
//  - `as_view`: `torch::autograd::as_view`, whose `view_func` parameter
//    became a `ViewFunc` plus a reverse function in 2.x (compat.cpp);
//  - `foreach_copy_`: `at::_foreach_copy_` (one kernel launch for a list of
//    copies) where this LibTorch has it (2.x), else one `copy_` per pair;
//  - `has_names`: `Tensor::has_names()`, gone with named tensors in 2.14
//    (no tensor has names there);
//  - `disable_libuv`: c10d's `TCPStoreOptions::useLibUV`, true by default
//    from 2.4, which fails where LibTorch was built without libuv (Debian);
//  - `python_world`: the store keys of Python's `init_process_group`, whose
//    default group sits under one store prefix in 1.13 and two (the group,
//    then the device) in 2.x, with a barrier that only 1.13 waits at;
//  - `Optional`: `c10::optional`, which 2.x made an alias of
//    `std::optional`;
//  - the language standard: LibTorch 2.13's headers need C++20
//    (CMakeLists.txt raises the standard; `kCxx20Required` states it).
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/version.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if __has_include(<ATen/ops/_foreach_copy.h>)
#include <ATen/ops/_foreach_copy.h>
#define TENSORDICT_HAS_FOREACH_COPY 1
#else
#define TENSORDICT_HAS_FOREACH_COPY 0
#endif

namespace tensordict {
namespace detail {

/// LibTorch's version as one number: 1.13 gives 113, 2.11 gives 211.
constexpr int kTorchVersion = TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR;

/// Whether this LibTorch's headers need C++20 (2.13 and later).
constexpr bool kCxx20Required = kTorchVersion >= 213;
static_assert(!kCxx20Required || __cplusplus >= 202002L,
              "LibTorch 2.13 and later need C++20: configure with "
              "-DCMAKE_CXX_STANDARD=20 (CMakeLists.txt does this itself)");

/// An integer that LibTorch hands out as `int64_t` (1.13) or `c10::SymInt`
/// (2.x). A symbolic SymInt throws LibTorch's error.
inline int64_t as_int(int64_t v) { return v; }
template <typename T, typename = std::enable_if_t<!std::is_integral<T>::value>>
inline int64_t as_int(const T& v) {
  return v.expect_int();
}

/// Whether `t` has dimension names: `Tensor::has_names()` where this
/// LibTorch still has named tensors, else false.
template <typename T>
inline auto has_names(const T& t) -> decltype(t.has_names()) {
  return t.has_names();
}
template <typename T, typename... Ignored>
inline bool has_names(const T&, Ignored...) {
  return false;
}

/// Clears `o.useLibUV` where c10d's store options have it (2.4 and later),
/// so that a TCPStore takes the backend every LibTorch build has. The wire
/// protocol is the same for both backends.
template <typename Options>
inline auto disable_libuv(Options& o) -> decltype(void(o.useLibUV = false)) {
  o.useLibUV = false;
}
template <typename Options, typename... Ignored>
inline void disable_libuv(Options&, Ignored...) {}

/// Where Python's `init_process_group("gloo", ...)` puts the default group in
/// the TCPStore, for a LibTorch of version `torch_version` (kTorchVersion's
/// numbering): under PrefixStore("default_pg"), the Gloo backend's store is
/// PrefixStore("0") in 1.13 and PrefixStore("0/") then PrefixStore("cpu/")
/// in 2.x. Every rank then adds 1 to `barrier_key` in the "default_pg"
/// store. 1.13 waits there until all ranks came; 2.x waits only when
/// TORCH_DIST_INIT_BARRIER=1, and then for `barrier_key + ":last_worker"`,
/// which the last rank to arrive sets.
struct PythonWorld {
  std::vector<std::string> group_prefixes;
  std::string barrier_key;
  bool wait_at_barrier;
};
inline PythonWorld python_world(int torch_version = kTorchVersion) {
  if (torch_version < 200) return {{"0"}, "store_based_barrier_key:1", true};
  return {{"0/", "cpu/"}, "store_based_barrier_key:0", false};
}

/// `c10::optional` in 1.13, where it is its own class; `std::optional` where
/// LibTorch made `c10::optional` an alias of it (the same type either way).
template <typename T>
using Optional = c10::optional<T>;

/// Registers `view` (sharing `base`'s storage) with autograd as a
/// differentiable view of `base`, as LibTorch's own view kernels do, with the
/// creation mode of the current grad / no-grad / inference mode; returns the
/// registered view (compat.cpp: the only user of LibTorch's autograd
/// internals).
at::Tensor as_view(const at::Tensor& base, const at::Tensor& view);

/// `dst[j].copy_(src[j], non_blocking)` for every j: `at::_foreach_copy_`
/// where this LibTorch has it, else a loop. Same-length lists; each pair
/// must be a valid `copy_`. Empty lists copy nothing (LibTorch 2.14's
/// `_foreach_copy_` refuses them).
inline void foreach_copy_(at::TensorList dst, at::TensorList src,
                          bool non_blocking) {
  TORCH_CHECK(dst.size() == src.size(), "foreach_copy_: ", dst.size(),
              " destinations but ", src.size(), " sources");
  if (dst.empty()) return;
#if TENSORDICT_HAS_FOREACH_COPY
  at::_foreach_copy_(dst, src, non_blocking);
#else
  for (size_t j = 0; j < dst.size(); ++j) {
    // A TensorList holds const tensors; copy_ writes through the handle.
    dst[j].copy_(src[j], non_blocking);
  }
#endif
}

}  // namespace detail
}  // namespace tensordict
