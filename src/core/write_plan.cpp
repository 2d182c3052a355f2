#include "core/write_plan.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>

#include "core/indexing.h"
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

namespace {

// ---------------------------------------------------------------------------
// Indexed writes
// ---------------------------------------------------------------------------

// Whether `norm` holds only basic indices (integers, slices, None), which
// select a view of each leaf.
bool is_basic(const NormalizedIndex& norm) {
  for (const auto& idx : norm.indices) {
    if (idx.is_tensor()) return false;
  }
  return true;
}

// Pass 1 of index_put_: checks every leaf of `value` against `dst` without
// changing anything. `dst` may be null (the whole sub-tree will be created).
void validate_put(const TensorDictImpl* dst, const TensorDictImpl& value,
                  const NormalizedIndex& norm, bool basic, int64_t dst_bd,
                  int64_t value_bd, const NestedKey* prefix) {
  for (const auto& vn : value.nodes) {
    const Node* dn = dst ? dst->find(vn.key) : nullptr;
    if (dn == nullptr) {
      // Allocated lazily: nothing can conflict, unless keys are locked.
      if (dst != nullptr) {
        check_unlocked(*dst, "index_put_", prefixed(prefix, vn.key));
      }
      continue;
    }
    NestedKey key = prefixed(prefix, vn.key);
    if (vn.is_dict()) {
      TORCH_CHECK_TYPE(dn->is_dict(), "key ", key.str(),
                       ": cannot write a TensorDict where a tensor lives");
      validate_put(dn->dict.get(), *vn.dict, norm, basic, dst_bd, value_bd,
                   &key);
      continue;
    }
    TORCH_CHECK_TYPE(!dn->is_dict(), "key ", key.str(),
                     ": cannot write a tensor where a TensorDict lives");
    const at::Tensor& src = vn.tensor;
    const at::Tensor& dest = dn->tensor;
    auto src_trailing = src.sizes().slice(static_cast<size_t>(value_bd));
    auto dst_trailing = dest.sizes().slice(static_cast<size_t>(dst_bd));
    TORCH_CHECK(src_trailing == dst_trailing, "key ", key.str(),
                ": the value's trailing shape ", shape_str(src_trailing),
                " (value shape ", shape_str(src.sizes()),
                ") does not match the existing buffer's trailing shape ",
                shape_str(dst_trailing), " (buffer shape ",
                shape_str(dest.sizes()), ")");
    TORCH_CHECK_TYPE(c10::canCast(src.scalar_type(), dest.scalar_type()),
                     "key ", key.str(), ": cannot cast the value's dtype ",
                     detail::dtype_name(src.scalar_type()),
                     " to the buffer's dtype ",
                     detail::dtype_name(dest.scalar_type()));
    // Basic indices write through a view of the leaf (`copy_`); advanced
    // ones through `index_put_`, which rejects any overlap with the value.
    // A stored leaf that requires grad is reported as itself.
    if (dest.requires_grad() && dest.is_leaf()) {
      check_leaf_write(nullptr, key, dest, src, WriteKind::kCopy);
    }
    if (basic) {
      check_leaf_write(nullptr, key, dest.index(norm.indices), src,
                       WriteKind::kCopy);
    } else {
      check_leaf_write(nullptr, key, dest, src, WriteKind::kOut);
    }
  }
}

struct ByteCopy {
  char* dst;
  const char* src;
  size_t nbytes;
  c10::TensorImpl* dst_impl;
};

// Plans the byte-copy fast path of an all-integer index write. Returns false
// when any leaf is missing or not eligible (then the general path runs).
bool plan_fast_put(const TensorDictImpl& dst, const TensorDictImpl& value,
                   c10::ArrayRef<int64_t> ints,
                   c10::SmallVectorImpl<ByteCopy>& ops) {
  const size_t k = ints.size();
  for (const auto& vn : value.nodes) {
    const Node* dn = dst.find(vn.key);
    if (dn == nullptr || dn->is_dict() != vn.is_dict()) return false;
    if (vn.is_dict()) {
      if (!plan_fast_put(*dn->dict, *vn.dict, ints, ops)) return false;
      continue;
    }
    const at::Tensor& src = vn.tensor;
    const at::Tensor& dest = dn->tensor;
    if (!dest.device().is_cpu() || !src.device().is_cpu() ||
        dest.scalar_type() != src.scalar_type() ||
        dest.layout() != at::kStrided || src.layout() != at::kStrided ||
        !dest.is_contiguous() || !src.is_contiguous() ||
        dest.requires_grad() || src.requires_grad() || dest.is_conj() ||
        src.is_conj() || dest.is_neg() || src.is_neg() ||
        (dest.is_inference() && !c10::InferenceMode::is_enabled())) {
      return false;
    }
    if (!(src.sizes() == dest.sizes().slice(k))) return false;
    const size_t itemsize = dest.element_size();
    int64_t offset = 0;
    for (size_t j = 0; j < k; ++j) offset += ints[j] * dest.stride(static_cast<int64_t>(j));
    const size_t nbytes = static_cast<size_t>(src.numel()) * itemsize;
    ops.push_back(ByteCopy{static_cast<char*>(dest.data_ptr()) +
                               static_cast<size_t>(offset) * itemsize,
                           static_cast<const char*>(src.data_ptr()), nbytes,
                           dest.unsafeGetTensorImpl()});
  }
  return true;
}

// Remembers the node count of every dict that gets new keys, so that a
// failure mid-way can drop them again.
using AppendLog = std::vector<std::pair<TensorDictImpl*, size_t>>;

void write_leaf(const at::Tensor& dest, const at::Tensor& src,
                const NormalizedIndex& norm) {
  if (norm.all_int && norm.ints.size() == 1) {
    dest.select(0, norm.ints[0]).copy_(src);
    return;
  }
  at::Tensor s = src;
  if (s.scalar_type() != dest.scalar_type() || s.device() != dest.device()) {
    s = s.to(dest.device(), dest.scalar_type());
  }
  at::Tensor d = dest;
  d.index_put_(norm.indices, s);
}

// Pass 2 of index_put_: writes (allocating missing keys).
void execute_put(TensorDictImpl& dst, const TensorDictImpl& value,
                 const NormalizedIndex& norm, int64_t dst_bd,
                 int64_t value_bd, AppendLog& log) {
  for (const auto& vn : value.nodes) {
    Node* dn = dst.find(vn.key);
    if (dn != nullptr) {
      if (vn.is_dict()) {
        execute_put(*dn->dict, *vn.dict, norm, dst_bd, value_bd, log);
      } else {
        write_leaf(dn->tensor, vn.tensor, norm);
      }
      continue;
    }
    const auto top_batch =
        c10::IntArrayRef(dst.batch_size).slice(0, static_cast<size_t>(dst_bd));
    if (vn.is_dict()) {
      auto extra = c10::IntArrayRef(vn.dict->batch_size)
                       .slice(static_cast<size_t>(value_bd));
      auto sub = make_impl(concat(top_batch, extra), dst.device);
      execute_put(*sub, *vn.dict, norm, dst_bd, value_bd, log);
      log.emplace_back(&dst, dst.nodes.size());
      dst.nodes.push_back(Node{vn.key, at::Tensor(), std::move(sub)});
    } else {
      const at::Tensor& src = vn.tensor;
      auto shape =
          concat(top_batch, src.sizes().slice(static_cast<size_t>(value_bd)));
      at::Tensor buf = at::zeros(
          shape, src.options().device(dst.device ? *dst.device : src.device()));
      write_leaf(buf, src, norm);
      log.emplace_back(&dst, dst.nodes.size());
      dst.nodes.push_back(Node{vn.key, std::move(buf), nullptr});
    }
  }
}

// Whether `vb` fits the indexed shape `s`: equal, or a suffix (broadcast from
// the left).
bool batch_fits(c10::IntArrayRef vb, c10::IntArrayRef s) {
  if (vb.size() > s.size()) return false;
  return std::equal(vb.begin(), vb.end(), s.end() - static_cast<int64_t>(vb.size()));
}

void index_put_impl(TensorDictImpl& dst, const NormalizedIndex& norm,
                    const TensorDictImpl& value) {
  const auto s = indexed_shape(dst, norm);
  const c10::IntArrayRef vb(value.batch_size);
  TORCH_CHECK(batch_fits(vb, s), "cannot write a TensorDict with batch_size ",
              shape_str(vb), " into an indexed region of batch shape ",
              shape_str(s), " (TensorDict batch_size ",
              shape_str(dst.batch_size), ")");

  if (norm.all_int && vb.size() == s.size()) {
    c10::SmallVector<ByteCopy, 16> ops;
    if (plan_fast_put(dst, value, norm.ints, ops)) {
      for (const auto& op : ops) {
        if (op.nbytes != 0) std::memmove(op.dst, op.src, op.nbytes);
      }
      for (const auto& op : ops) op.dst_impl->bump_version();
      return;
    }
  }

  validate_put(&dst, value, norm, is_basic(norm), dst.batch_dims(),
               value.batch_dims(), nullptr);
  AppendLog log;
  try {
    execute_put(dst, value, norm, dst.batch_dims(), value.batch_dims(), log);
  } catch (...) {
    for (auto it = log.rbegin(); it != log.rend(); ++it) {
      it->first->nodes.resize(std::min(it->first->nodes.size(), it->second));
    }
    throw;
  }
}

}  // namespace

void index_put(TensorDictImpl& dst, const NormalizedIndex& norm,
               const TensorDictImpl& value) {
  index_put_impl(dst, norm, value);
}

}  // namespace detail
}  // namespace tensordict
