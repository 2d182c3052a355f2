// The row copies of the transforms (envs/transform_rows.h).
#include "envs/transform_rows.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/names.h"
#include "core/row_copy.h"
#include "envs/flags.h"

namespace tensordict {
namespace detail {

namespace {

// `mask` reshaped to broadcast over the rows of `t` (`[rows, 1, ...]` of
// t's dims), on t's device.
at::Tensor row_mask(const at::Tensor& mask, const at::Tensor& t) {
  const int64_t rows = mask.numel();
  std::vector<int64_t> shape = {rows};
  shape.push_back(t.numel() / rows);
  return mask.reshape({rows, 1}).to(t.device()).expand(shape);
}

void check_rows(const at::Tensor& t, const at::Tensor& mask) {
  const int64_t rows = mask.numel();
  TORCH_CHECK(rows > 0 ? t.numel() % rows == 0 : t.numel() == 0,
              "transform: an entry of shape ", shape_str(t.sizes()),
              " has no rows of the mask's ", rows);
}

}  // namespace

at::Tensor reset_mask_of(const TensorDict& td) {
  return td.contains("_reset") ? td.get("_reset") : at::Tensor();
}

bool plain_cpu(const at::Tensor& t, at::ScalarType dtype) {
  return t.defined() && t.scalar_type() == dtype && cpu_bytes(t) &&
         untracked(t.unsafeGetTensorImpl(), at::GradMode::is_enabled());
}

void copy_rows(const at::Tensor& dst, const at::Tensor& src,
               const at::Tensor& mask) {
  if (!mask.defined()) {
    copy_all(dst, src);
    return;
  }
  check_rows(dst, mask);
  const bool* m = flag_bytes(mask);
  if (m != nullptr && byte_copyable(dst, src)) {
    const int64_t rows = mask.numel();
    const size_t row = static_cast<size_t>(dst.nbytes()) / rows;
    auto* d = static_cast<char*>(dst.data_ptr());
    const auto* s = static_cast<const char*>(src.data_ptr());
    for (int64_t r = 0; r < rows; ++r) {
      if (m[r]) copy_bytes(d + r * row, s + r * row, row);
    }
    bump(version_of(dst));
    return;
  }
  // A dict of the env layer's is contiguous; any other `dst` is written
  // through a contiguous copy.
  const at::Tensor work = dst.contiguous();
  const at::Tensor flat = work.view({mask.numel(), -1});
  const at::Tensor value = src.reshape(flat.sizes()).to(dst.scalar_type());
  flat.copy_(at::where(row_mask(mask, dst), value, flat));
  if (!work.is_same(dst)) dst.copy_(work);
}

void fill_rows(const at::Tensor& dst, const at::Tensor& mask, bool one) {
  // Zero is all-zero bytes in every dtype; one is the byte 1 in a bool.
  const bool bytes =
      cpu_bytes(dst) && (!one || dst.scalar_type() == at::kBool) &&
      untracked(dst.unsafeGetTensorImpl(), at::GradMode::is_enabled());
  if (!mask.defined()) {
    if (bytes) {
      std::memset(dst.data_ptr(), one ? 1 : 0,
                  static_cast<size_t>(dst.nbytes()));
      bump(version_of(dst));
    } else {
      dst.fill_(one ? 1 : 0);
    }
    return;
  }
  check_rows(dst, mask);
  const bool* m = flag_bytes(mask);
  if (m != nullptr && bytes) {
    const int64_t rows = mask.numel();
    const size_t row = static_cast<size_t>(dst.nbytes()) / rows;
    auto* d = static_cast<char*>(dst.data_ptr());
    for (int64_t r = 0; r < rows; ++r) {
      if (m[r]) std::memset(d + r * row, one ? 1 : 0, row);
    }
    bump(version_of(dst));
    return;
  }
  const at::Tensor work = dst.contiguous();
  work.view({mask.numel(), -1}).masked_fill_(row_mask(mask, dst), one ? 1 : 0);
  if (!work.is_same(dst)) dst.copy_(work);
}

void copy_shared(const TensorDict& dst, const TensorDict& src,
                 const at::Tensor& mask, const char* what,
                 const std::vector<NestedKey>& skip) {
  for (const NestedKey& key : dst.keys(true, true)) {
    if (!key.is_nested() &&
        (key.front() == "_reset" || key.front() == "_step")) {
      continue;
    }
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    if (!src.contains(key) || !src.get_entry(key).is_tensor()) continue;
    const at::Tensor to = dst.get(key);
    const at::Tensor from = src.get(key);
    TORCH_CHECK_VALUE(to.numel() == from.numel(), what, ": key ", key.str(),
                      ": the entry of shape ", shape_str(from.sizes()),
                      " cannot be copied into one of shape ",
                      shape_str(to.sizes()));
    copy_rows(to, from, mask);
  }
}

TensorDict zeros_of_specs(c10::IntArrayRef batch,
                          std::initializer_list<const Composite*> specs) {
  TensorDict out(batch, (*specs.begin())->device().value_or(at::kCPU));
  for (const Composite* spec : specs) {
    for (const NestedKey& key : spec->keys(true, true)) {
      if (!out.contains(key)) out.set(key, spec->leaf(key).zero());
    }
  }
  return out;
}

std::string key_list(const std::vector<NestedKey>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ", ";
    out += keys[i].str();
  }
  return out + "]";
}

}  // namespace detail
}  // namespace tensordict
