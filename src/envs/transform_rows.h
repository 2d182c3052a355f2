// Internal: the row copies of the transforms (transformed_env.cpp,
// transforms*.cpp). A transform copies an entry of one dict into another
// (the keys both sides of it have), and on a reset only the rows of the
// "_reset" mask (bool `[*batch, 1]`, contiguous on the CPU, as EnvBase makes
// it). Contiguous CPU tensors of one dtype move by bytes (core/row_copy.h's
// `copy_bytes`, with the version bump `copy_` would make); anything else
// goes through ATen (which casts). A rollout step calls these a few times
// per key, so the byte path allocates nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/specs.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

/// The reset mask of `td` ("_reset"), undefined when it has none.
[[nodiscard]] at::Tensor reset_mask_of(const TensorDict& td);

/// The rows of `mask` (every row when undefined) of `dst` set to `src`'s:
/// `dst` and `src` have one numel, a multiple of the mask's (its rows).
void copy_rows(const at::Tensor& dst, const at::Tensor& src,
               const at::Tensor& mask);

/// The rows of `mask` (every row when undefined) of `dst` set to zero, or
/// to one with `one`.
void fill_rows(const at::Tensor& dst, const at::Tensor& mask, bool one);

/// For every leaf key of `dst` that `src` holds as a tensor ("_reset",
/// "_step" and the keys of `skip` aside): `copy_rows(dst[key], src[key],
/// mask)`. `what` names the caller in the error of two entries of different
/// numels.
void copy_shared(const TensorDict& dst, const TensorDict& src,
                 const at::Tensor& mask, const char* what,
                 const std::vector<NestedKey>& skip = {});

/// Whether `t` is a contiguous CPU tensor of `dtype` (whose elements a loop
/// may read and write).
[[nodiscard]] bool plain_cpu(const at::Tensor& t, at::ScalarType dtype);

/// Zeros of every leaf key of `specs`, in order (a key in several specs
/// once), a dict of batch size `batch`: the working dicts of transforms.
[[nodiscard]] TensorDict zeros_of_specs(
    c10::IntArrayRef batch, std::initializer_list<const Composite*> specs);

/// The keys as errors list them (check_env_specs too): "[a, ('b', 'c')]".
[[nodiscard]] std::string key_list(const std::vector<NestedKey>& keys);

}  // namespace detail
}  // namespace tensordict
