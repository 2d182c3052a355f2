#include "core/write_plan.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include "core/internal.h"

namespace tensordict {
namespace detail {

std::string LeafName::str() const {
  if (root_ == nullptr) return key_->str();
  NestedKey leaf = leaf_key(*root_, leaf_);
  return key_ ? key_->join(leaf).str() : leaf.str();
}

namespace {

bool copyable_device(const at::Device& d) { return d.is_cpu() || d.is_cuda(); }

[[noreturn]] void fail(const char* op, const LeafName& name,
                       const std::string& reason) {
  if (op != nullptr) {
    TORCH_CHECK(false, op, ": key ", name.str(), ": ", reason);
  }
  TORCH_CHECK(false, "key ", name.str(), ": ", reason);
}

// Autograd's rules for an in-place write (LibTorch's `check_inplace`), with
// `requires_grad` true when the destination or the source requires grad.
void check_autograd(const char* op, const LeafName& name,
                    const at::Tensor& dest, bool requires_grad) {
  if (!(requires_grad && at::GradMode::is_enabled())) return;
  using torch::autograd::CreationMeta;
  auto* view_meta = torch::autograd::impl::get_view_autograd_meta(dest);
  if (view_meta != nullptr && view_meta->has_bw_view()) {
    if (view_meta->get_creation_meta() != CreationMeta::DEFAULT) {
      fail(op, name,
           "the destination is a view created in no-grad or inference mode "
           "(or by an op with several outputs) and cannot be modified in "
           "place by a write that requires grad (clone it first)");
    }
    if (dest.requires_grad() && dest._base().is_leaf()) {
      fail(op, name,
           "a view of a leaf tensor that requires grad cannot be modified in "
           "place (use torch::NoGradGuard, or detach it first)");
    }
  }
  if (dest.requires_grad() && dest.is_leaf()) {
    fail(op, name,
         "a leaf tensor that requires grad cannot be modified in place (use "
         "torch::NoGradGuard, or detach it first)");
  }
}

}  // namespace

void check_leaf_write(const char* op, const LeafName& name,
                      const at::Tensor& dest, const at::Tensor& src,
                      WriteKind kind) {
  const bool has_src = src.defined();
  if (dest.is_inference() && !c10::InferenceMode::is_enabled()) {
    fail(op, name,
         "cannot modify an inference tensor in place outside InferenceMode");
  }
  check_autograd(op, name, dest,
                 dest.requires_grad() || (has_src && src.requires_grad()));
  if (dest.layout() == at::kStrided && dest.numel() > 1 &&
      at::has_internal_overlap(dest) == at::MemOverlap::Yes) {
    fail(op, name,
         "the destination has overlapping memory (for example an expanded "
         "tensor) and cannot be written in place; clone() it first");
  }
  if (!has_src) return;
  if (kind == WriteKind::kOp) {
    if (src.device() != dest.device() && !(src.dim() == 0 && src.is_cpu())) {
      fail(op, name,
           "the operand is on device " + device_name(src.device()) +
               " but the leaf is on device " + device_name(dest.device()));
    }
  } else {
    if (!copyable_devices(src.device(), dest.device())) {
      fail(op, name,
           "cannot write a value on device " + device_name(src.device()) +
               " into a buffer on device " + device_name(dest.device()));
    }
  }
  if (!copyable_device(dest.device()) || !copyable_device(src.device()) ||
      dest.layout() != at::kStrided || src.layout() != at::kStrided ||
      dest.numel() == 0 || src.numel() == 0 || !dest.has_storage() ||
      !src.has_storage()) {
    return;
  }
  const at::MemOverlapStatus overlap = at::get_overlap_status(dest, src);
  if (overlap == at::MemOverlapStatus::Partial ||
      (kind == WriteKind::kOut && overlap == at::MemOverlapStatus::Full)) {
    fail(op, name,
         "the value shares memory with the destination (it is a view of the "
         "data being written), so the write would read what it has already "
         "written; clone() the value first");
  }
}

}  // namespace detail
}  // namespace tensordict
