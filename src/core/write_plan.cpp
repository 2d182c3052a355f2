#include "core/write_plan.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>

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

// ---------------------------------------------------------------------------
// The write plan of an indexed write
// ---------------------------------------------------------------------------

namespace {

// The rows an index selects when they form one contiguous block of every
// contiguous leaf: `k` leading integers, then at most one step-1 slice
// `[start, start + len)` of dim k, then only full dims.
struct Block {
  bool ok = false;
  size_t k = 0;
  bool slice = false;
  int64_t start = 0, len = 0;
};

Block block_of(const TensorDictImpl& dst, const NormalizedIndex& norm) {
  Block b;
  if (norm.all_int) {
    b.ok = true;
    b.k = norm.ints.size();
    return b;
  }
  const auto& idx = norm.indices;
  size_t j = 0;
  while (j < idx.size() && idx[j].is_integer()) ++j;
  b.k = j;
  if (j < idx.size()) {
    if (!idx[j].is_slice()) return b;
    const SliceRange r = slice_range(idx[j].slice(), dst.batch_size[j]);
    if (r.step != 1) return b;
    b.slice = true;
    b.start = r.start;
    b.len = r.len;
    for (++j; j < idx.size(); ++j) {
      if (!idx[j].is_slice()) return b;
      const SliceRange f = slice_range(idx[j].slice(), dst.batch_size[j]);
      if (f.start != 0 || f.step != 1 || f.len != dst.batch_size[j]) return b;
    }
  }
  b.ok = true;
  return b;
}

// One leaf of `value` and where it goes.
struct LeafStep {
  const at::Tensor* src;
  bool exists;             // false: allocate
  TensorDictImpl* parent;  // the dict holding the leaf (null: a new dict's)
  size_t index;            // the existing leaf's place in parent->nodes
  int new_parent;          // index into WritePlan::dicts when parent is null
  const Node* value;       // the leaf of `value`
  // The byte copy, when eligible.
  c10::TensorImpl* dst_impl;
  char* dst_bytes;
  const char* src_bytes;
  size_t nbytes;
};

// A sub-dict of `value` that `dst` lacks: created by the write.
struct DictStep {
  TensorDictImpl* parent;  // null: a new dict's (new_parent)
  int new_parent;
  const Node* value;  // the sub-dict of `value`
  std::vector<int64_t> batch;
  c10::optional<at::Device> device;
  ImplPtr impl;  // made when the write runs
};

// `dst[norm] = value`: pairs the two trees once, decides per leaf between a
// byte copy (contiguous CPU leaves of one dtype, a contiguous region), a
// LibTorch copy and an allocation, validates every leaf, then writes.
class WritePlan {
 public:
  WritePlan(TensorDictImpl& dst, const NormalizedIndex& norm,
            const TensorDictImpl& value, c10::IntArrayRef shape)
      : dst_(dst),
        norm_(norm),
        value_(value),
        dst_bd_(dst.batch_dims()),
        value_bd_(value.batch_dims()),
        block_(value.batch_size.size() == shape.size() ? block_of(dst, norm)
                                                       : Block{}) {
    pair(&dst, -1, value);
  }

  void run() {
    if (all_bytes_) {
      for (const auto& l : leaves_) copy_bytes(l);
      return;
    }
    validate();
    execute();
  }

 private:
  void pair(TensorDictImpl* dst, int new_parent, const TensorDictImpl& value) {
    for (const auto& vn : value.nodes) {
      Node* dn = dst ? dst->find(vn.key) : nullptr;
      if (vn.is_dict()) {
        if (dn != nullptr) {
          TORCH_CHECK_TYPE(dn->is_dict(), "key ", key_of(vn).str(),
                           ": cannot write a TensorDict where a tensor lives");
          pair(dn->dict.get(), -1, *vn.dict);
          continue;
        }
        all_bytes_ = false;
        DictStep d{dst, new_parent, &vn, {}, {}, nullptr};
        const std::vector<int64_t>& parent_batch =
            dst ? dst->batch_size
                : dicts_[static_cast<size_t>(new_parent)].batch;
        d.batch = concat(c10::IntArrayRef(parent_batch)
                             .slice(0, static_cast<size_t>(dst_bd_)),
                         c10::IntArrayRef(vn.dict->batch_size)
                             .slice(static_cast<size_t>(value_bd_)));
        d.device =
            dst ? dst->device : dicts_[static_cast<size_t>(new_parent)].device;
        dicts_.push_back(std::move(d));
        creations_.emplace_back(true, dicts_.size() - 1);
        pair(nullptr, static_cast<int>(dicts_.size() - 1), *vn.dict);
        continue;
      }
      if (dn != nullptr) {
        TORCH_CHECK_TYPE(!dn->is_dict(), "key ", key_of(vn).str(),
                         ": cannot write a tensor where a TensorDict lives");
      }
      const size_t index = dn ? static_cast<size_t>(dn - dst->nodes.data()) : 0;
      LeafStep l{&vn.tensor, dn != nullptr, dst,     index,   new_parent,
                 &vn,        nullptr,       nullptr, nullptr, 0};
      if (dn == nullptr) creations_.emplace_back(false, leaves_.size());
      if (dn == nullptr || !plan_bytes(l)) all_bytes_ = false;
      leaves_.push_back(l);
    }
  }

  // The byte copy of an eligible leaf, with the version bump `copy_` does.
  static void copy_bytes(const LeafStep& l) {
    if (l.nbytes != 0) std::memmove(l.dst_bytes, l.src_bytes, l.nbytes);
    l.dst_impl->bump_version();
  }

  // The stored leaf that `l` writes into. Nodes are addressed by index:
  // appending new keys may move a dict's node list.
  static const at::Tensor& dest_of(const LeafStep& l) {
    return l.parent->nodes[l.index].tensor;
  }

  // Fills in the byte copy of `l` when its leaves allow one.
  bool plan_bytes(LeafStep& l) const {
    if (!block_.ok) return false;
    const at::Tensor& src = *l.src;
    const at::Tensor& dest = dest_of(l);
    if (!dest.device().is_cpu() || !src.device().is_cpu() ||
        dest.scalar_type() != src.scalar_type() ||
        dest.layout() != at::kStrided || src.layout() != at::kStrided ||
        !dest.is_contiguous() || !src.is_contiguous() || dest.requires_grad() ||
        src.requires_grad() || dest.is_conj() || src.is_conj() ||
        dest.is_neg() || src.is_neg() ||
        (dest.is_inference() && !c10::InferenceMode::is_enabled())) {
      return false;
    }
    const size_t k = block_.k;
    auto rest = dest.sizes().slice(k + (block_.slice ? 1 : 0));
    if (block_.slice) {
      if (src.dim() != static_cast<int64_t>(rest.size()) + 1 ||
          src.size(0) != block_.len || !(src.sizes().slice(1) == rest)) {
        return false;
      }
    } else if (!(src.sizes() == rest)) {
      return false;
    }
    const size_t itemsize = dest.element_size();
    int64_t offset = 0;
    for (size_t j = 0; j < k; ++j) {
      offset += norm_.ints[j] * dest.stride(static_cast<int64_t>(j));
    }
    if (block_.slice)
      offset += block_.start * dest.stride(static_cast<int64_t>(k));
    char* to = static_cast<char*>(dest.data_ptr()) +
               static_cast<size_t>(offset) * itemsize;
    const char* from = static_cast<const char*>(src.data_ptr());
    const size_t nbytes = static_cast<size_t>(src.numel()) * itemsize;
    // A source that partly overlaps the region is rejected, as LibTorch's
    // copy_ does (validation names the key).
    if (from != to && from < to + nbytes && to < from + nbytes) return false;
    l.dst_impl = dest.unsafeGetTensorImpl();
    l.dst_bytes = to;
    l.src_bytes = from;
    l.nbytes = nbytes;
    return true;
  }

  // Every check LibTorch would make, before anything is written.
  void validate() const {
    if (!creations_.empty()) {
      check_can_add_keys(dst_, value_, "index_put_", /*replaces=*/false);
    }
    const bool basic = std::none_of(
        norm_.indices.begin(), norm_.indices.end(),
        [](const at::indexing::TensorIndex& t) { return t.is_tensor(); });
    for (const LeafStep& l : leaves_) {
      // New leaves: nothing to conflict with. Byte-copy leaves: nothing
      // LibTorch would reject.
      if (!l.exists || l.dst_bytes != nullptr) continue;
      const NestedKey key = key_of(*l.value);
      const at::Tensor& src = *l.src;
      const at::Tensor& dest = dest_of(l);
      auto src_trailing = src.sizes().slice(static_cast<size_t>(value_bd_));
      auto dst_trailing = dest.sizes().slice(static_cast<size_t>(dst_bd_));
      TORCH_CHECK(src_trailing == dst_trailing, "key ", key.str(),
                  ": the value's trailing shape ", shape_str(src_trailing),
                  " (value shape ", shape_str(src.sizes()),
                  ") does not match the existing buffer's trailing shape ",
                  shape_str(dst_trailing), " (buffer shape ",
                  shape_str(dest.sizes()), ")");
      TORCH_CHECK_TYPE(c10::canCast(src.scalar_type(), dest.scalar_type()),
                       "key ", key.str(), ": cannot cast the value's dtype ",
                       dtype_name(src.scalar_type()), " to the buffer's dtype ",
                       dtype_name(dest.scalar_type()));
      // Basic indices write through a view of the leaf (`copy_`); advanced
      // ones through `index_put_`, which rejects any overlap with the
      // value. A stored leaf that requires grad is reported as itself.
      if (dest.requires_grad() && dest.is_leaf()) {
        check_leaf_write(nullptr, key, dest, src, WriteKind::kCopy);
      }
      if (basic) {
        check_leaf_write(nullptr, key, dest.index(norm_.indices), src,
                         WriteKind::kCopy);
      } else {
        check_leaf_write(nullptr, key, dest, src, WriteKind::kOut);
      }
    }
  }

  // Allocates what is missing, then writes; a failure drops every key the
  // write created.
  void execute() {
    std::vector<std::pair<TensorDictImpl*, size_t>> log;
    try {
      // New keys, in `value`'s order.
      for (const auto& c : creations_) {
        if (c.first) {
          DictStep& d = dicts_[c.second];
          TensorDictImpl* parent =
              d.parent ? d.parent
                       : dicts_[static_cast<size_t>(d.new_parent)].impl.get();
          d.impl = make_impl(d.batch, d.device);
          if (d.parent) log.emplace_back(parent, parent->nodes.size());
          parent->nodes.push_back(Node{d.value->key, at::Tensor(), d.impl});
          continue;
        }
        const LeafStep& l = leaves_[c.second];
        TensorDictImpl* parent =
            l.parent ? l.parent
                     : dicts_[static_cast<size_t>(l.new_parent)].impl.get();
        const at::Tensor& src = *l.src;
        auto shape = concat(c10::IntArrayRef(parent->batch_size)
                                .slice(0, static_cast<size_t>(dst_bd_)),
                            src.sizes().slice(static_cast<size_t>(value_bd_)));
        at::Tensor buf = at::zeros(
            shape, src.options().device(parent->device ? *parent->device
                                                       : src.device()));
        write_leaf(buf, src);
        if (l.parent) log.emplace_back(parent, parent->nodes.size());
        parent->nodes.push_back(Node{l.value->key, std::move(buf), nullptr});
      }
      for (const auto& l : leaves_) {
        if (!l.exists) continue;
        if (l.dst_bytes != nullptr) {
          copy_bytes(l);
        } else {
          write_leaf(dest_of(l), *l.src);
        }
      }
    } catch (...) {
      for (auto it = log.rbegin(); it != log.rend(); ++it) {
        it->first->nodes.resize(std::min(it->first->nodes.size(), it->second));
      }
      throw;
    }
  }

  void write_leaf(const at::Tensor& dest, const at::Tensor& src) const {
    if (norm_.all_int && norm_.ints.size() == 1) {
      dest.select(0, norm_.ints[0]).copy_(src);
      return;
    }
    at::Tensor s = src;
    if (s.scalar_type() != dest.scalar_type() || s.device() != dest.device()) {
      s = s.to(dest.device(), dest.scalar_type());
    }
    at::Tensor d = dest;
    d.index_put_(norm_.indices, s);
  }

  // The full key of a node of `value` (for errors only).
  NestedKey key_of(const Node& vn) const {
    std::vector<NestedKey> keys;
    collect_keys(value_, nullptr, true, false, keys);
    for (auto& k : keys) {
      if (lookup(value_, k) == &vn) return k;
    }
    return NestedKey(vn.key);
  }

  const TensorDictImpl& dst_;
  const NormalizedIndex& norm_;
  const TensorDictImpl& value_;
  const int64_t dst_bd_, value_bd_;
  const Block block_;
  bool all_bytes_ = true;
  c10::SmallVector<LeafStep, 16> leaves_;
  std::vector<DictStep> dicts_;
  // What the write creates, in `value`'s order: {is_dict, index into
  // dicts_ or leaves_}.
  std::vector<std::pair<bool, size_t>> creations_;
};

// Whether `vb` fits the indexed shape `s`: equal, or a suffix (broadcast from
// the left).
bool batch_fits(c10::IntArrayRef vb, c10::IntArrayRef s) {
  if (vb.size() > s.size()) return false;
  return std::equal(vb.begin(), vb.end(),
                    s.end() - static_cast<int64_t>(vb.size()));
}

}  // namespace

void index_put(TensorDictImpl& dst, const NormalizedIndex& norm,
               const TensorDictImpl& value) {
  const auto s = indexed_shape(dst, norm);
  const c10::IntArrayRef vb(value.batch_size);
  TORCH_CHECK(batch_fits(vb, s), "cannot write a TensorDict with batch_size ",
              shape_str(vb), " into an indexed region of batch shape ",
              shape_str(s), " (TensorDict batch_size ",
              shape_str(dst.batch_size), ")");
  WritePlan(dst, norm, value, s).run();
}

}  // namespace detail
}  // namespace tensordict
