// Internal: the done flags and row masks of envs (bool `[*batch, 1]`), and
// whole-leaf copies, read and written by bytes when they are contiguous CPU
// tensors (every dict the env layer makes), through ATen otherwise. A rollout step calls these a
// few times, on a few bytes each: a dispatcher round trip would cost more
// than the env's physics.
#pragma once

#include <ATen/core/Tensor.h>

#include "tensordict/nested_key.h"

#include <string>

namespace tensordict {
namespace detail {

/// The keys of TorchRL's flags and masks, made once (a `NestedKey` made
/// from a string allocates).
struct FlagKeys {
  NestedKey done{"done"};
  NestedKey terminated{"terminated"};
  NestedKey truncated{"truncated"};
  NestedKey reset{"_reset"};
  NestedKey step{"_step"};
};
[[nodiscard]] const FlagKeys& flag_keys();

/// `dst |= src`, element-wise (bool tensors of one numel).
void or_flags(const at::Tensor& dst, const at::Tensor& src);
/// Sets the flags of the rows of `mask` (every row when `mask` is
/// undefined) to false.
void clear_flags(const at::Tensor& flags, const at::Tensor& mask);
/// Whether any flag of a row of `mask` (of any row when undefined) is set.
[[nodiscard]] bool any_flag(const at::Tensor& flags, const at::Tensor& mask);
/// `value` checked as a row mask of `batch` (bool, of shape `[*batch, 1]`
/// or `[*batch]`), as a new contiguous CPU `[*batch, 1]` tensor. `what`
/// starts the error message.
[[nodiscard]] at::Tensor checked_mask(const at::Tensor& value,
                                      c10::IntArrayRef batch,
                                      const std::string& what);
/// Whether `dst` and `src` take a byte copy: contiguous CPU tensors of one
/// dtype and numel, the destination untracked by autograd.
[[nodiscard]] bool byte_copyable(const at::Tensor& dst, const at::Tensor& src);
/// `dst = src`, two tensors of one numel (`src` cast to `dst`'s dtype): a
/// byte copy when `byte_copyable`.
void copy_all(const at::Tensor& dst, const at::Tensor& src);
/// The bytes of a contiguous CPU bool tensor; null for any other tensor.
[[nodiscard]] bool* flag_bytes(const at::Tensor& t);

}  // namespace detail
}  // namespace tensordict
