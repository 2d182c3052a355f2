// The done flags, row masks and leaf copies of envs (envs/flags.h).
#include "envs/flags.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "core/names.h"
#include "core/row_copy.h"

namespace tensordict {

using detail::dtype_name;
using detail::shape_str;
namespace detail {

const FlagKeys& flag_keys() {
  static const FlagKeys keys;
  return keys;
}

bool byte_copyable(const at::Tensor& dst, const at::Tensor& src) {
  return cpu_bytes(dst) && cpu_bytes(src) &&
         dst.scalar_type() == src.scalar_type() && dst.numel() == src.numel() &&
         untracked(dst.unsafeGetTensorImpl(), at::GradMode::is_enabled());
}

void copy_all(const at::Tensor& dst, const at::Tensor& src) {
  if (byte_copyable(dst, src)) {
    copy_bytes(static_cast<char*>(dst.data_ptr()),
               static_cast<const char*>(src.data_ptr()),
               static_cast<size_t>(src.nbytes()));
    bump(version_of(dst));
    return;
  }
  dst.copy_(src.reshape(dst.sizes()));
}

bool* flag_bytes(const at::Tensor& t) {
  if (!t.defined() || t.scalar_type() != at::kBool || !t.device().is_cpu() ||
      !t.is_contiguous()) {
    return nullptr;
  }
  return t.data_ptr<bool>();
}

void or_flags(const at::Tensor& dst, const at::Tensor& src) {
  bool* d = flag_bytes(dst);
  const bool* s = flag_bytes(src);
  if (d != nullptr && s != nullptr && dst.numel() == src.numel()) {
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] = d[i] || s[i];
    return;
  }
  dst.logical_or_(src.reshape(dst.sizes()).to(dst.device()));
}

void clear_flags(const at::Tensor& flags, const at::Tensor& mask) {
  bool* f = flag_bytes(flags);
  if (!mask.defined()) {
    if (f != nullptr) {
      std::fill(f, f + flags.numel(), false);
    } else {
      flags.zero_();
    }
    return;
  }
  const bool* m = flag_bytes(mask);
  if (f != nullptr && m != nullptr && flags.numel() == mask.numel()) {
    for (int64_t i = 0, n = flags.numel(); i < n; ++i) f[i] = f[i] && !m[i];
    return;
  }
  flags.masked_fill_(mask.reshape(flags.sizes()).to(flags.device()), false);
}

bool any_flag(const at::Tensor& flags, const at::Tensor& mask) {
  const bool* f = flag_bytes(flags);
  const bool* m = mask.defined() ? flag_bytes(mask) : nullptr;
  if (f != nullptr &&
      (!mask.defined() || (m != nullptr && flags.numel() == mask.numel()))) {
    for (int64_t i = 0, n = flags.numel(); i < n; ++i) {
      if (f[i] && (m == nullptr || m[i])) return true;
    }
    return false;
  }
  at::Tensor set = flags.to(at::kBool);
  if (mask.defined()) {
    set = set.logical_and(mask.reshape(flags.sizes()).to(flags.device()));
  }
  return set.any().item<bool>();
}

at::Tensor checked_mask(const at::Tensor& value, c10::IntArrayRef batch,
                        const std::string& what) {
  std::vector<int64_t> rows(batch.begin(), batch.end());
  std::vector<int64_t> with_one = rows;
  with_one.push_back(1);
  TORCH_CHECK_TYPE(value.scalar_type() == at::kBool, what,
                   " must be a bool tensor, got ",
                   dtype_name(value.scalar_type()));
  TORCH_CHECK_VALUE(value.sizes() == c10::IntArrayRef(with_one) ||
                        value.sizes() == c10::IntArrayRef(rows),
                    what, " must have shape ", shape_str(with_one), " or ",
                    shape_str(rows), ", got ", shape_str(value.sizes()));
  return value.to(at::kCPU).reshape(with_one).clone(
      at::MemoryFormat::Contiguous);
}

}  // namespace detail
}  // namespace tensordict
