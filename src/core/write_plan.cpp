#include "core/write_plan.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "core/indexing.h"
#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/row_copy.h"
#include "core/tree.h"

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

void check_cast(const char* op, const LeafName& name, at::ScalarType src,
                at::ScalarType dest) {
  if (c10::canCast(src, dest)) return;
  TORCH_CHECK_TYPE(false, op == nullptr ? "" : op, op == nullptr ? "" : ": ",
                   "key ", name.str(), ": cannot cast the value's dtype ",
                   dtype_name(src), " to the stored dtype ", dtype_name(dest),
                   " (a write never casts to a lower kind, such as floating "
                   "point to integer)");
}

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
  if (kind != WriteKind::kOp) {
    check_cast(op, name, src.scalar_type(), dest.scalar_type());
  }
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
// The destination side of a write
// ---------------------------------------------------------------------------

// Whether writing the non-tensor entry `vn` where `dn` lives changes
// anything. As in Python, a value equal to the NonTensorData already there
// changes nothing.
namespace {
bool non_tensor_write_changes(const char* op, const KeyPath& path,
                              const Node& dn, const Node& vn) {
  TORCH_CHECK_TYPE(dn.is_non_tensor(), op, ": key ", path.key().str(),
                   ": cannot write non-tensor data where ",
                   dn.is_dict() ? "a TensorDict" : "a tensor", " lives");
  return non_tensor_is_stack(*dn.dict) || non_tensor_is_stack(*vn.dict) ||
         !py_equal(dn.dict->non_tensor->data, vn.dict->non_tensor->data);
}
}  // namespace

NonTensorPtr WriteTargets::NonTensorWrite::indexed(
    const char* op, const NormalizedIndex* norm) const {
  const TensorDictImpl& dest = *level->nodes[index].dict;
  TORCH_CHECK(!dest.saved_path.has_value(), op, ": key ", key,
              ": the non-tensor data of a memory-mapped dict lives in its "
              "meta.json and cannot change in place (the value's ",
              short_py_repr(non_tensor_value(*value)),
              " differs from the stored ",
              short_py_repr(non_tensor_value(dest)), ")");
  if (norm == nullptr) {  // the whole entry
    TORCH_CHECK(value->batch_size == dest.batch_size, op, ": key ", key,
                ": the value's non-tensor data has batch size ",
                shape_str(value->batch_size), ", expected ",
                shape_str(dest.batch_size));
    return value->non_tensor;
  }
  // As Python: the entry becomes a stack whose indexed elements are the
  // value's.
  auto values = std::make_shared<std::vector<ordered_json>>();
  at::Tensor ids = append_elements(*values, dest);
  const at::Tensor vids = append_elements(*values, *value);
  if (norm->all_int && norm->ints.size() == 1) {
    ids.select(0, norm->ints[0]).copy_(vids);
  } else {
    ids.index_put_(norm->indices, vids);
  }
  return non_tensor_stack(std::move(values), std::move(ids));
}

// One entry of `value` met by the constructor's walk, and where it goes:
// `dn`, dst's entry with the same key (null when dst lacks it); `level`, the
// dict of dst that holds (or will hold) it, null inside a dict the write
// creates, whose index into dicts_ is then `new_parent`.
struct WriteTargets::Entry {
  const KeyPath& path;
  const Node& vn;
  Node* dn;
  TensorDictImpl* level;
  size_t new_parent;
  [[nodiscard]] size_t index() const {
    return static_cast<size_t>(dn - level->nodes.data());
  }
  [[nodiscard]] const c10::optional<at::Device>& device(
      const std::vector<Dict>& dicts) const {
    return level != nullptr ? level->device : dicts[new_parent].device;
  }
};

WriteTargets::WriteTargets(const char* op, TensorDictImpl& dst,
                           const TensorDictImpl& value, SubBatch sub_batch,
                           OnDict on_dict, OnLeaf on_leaf, bool may_create,
                           bool joins) {
  // The new dicts around the entry being walked, innermost last: the depth
  // of their key and their index into dicts_.
  c10::SmallVector<std::pair<size_t, size_t>, 4> open;
  pair_walk<Pairing::kInto>(
      value, &dst, [&](const KeyPath& path, const Match<TensorDictImpl>& m) {
        const size_t depth = path.parts.size();
        while (!open.empty() && open.back().first >= depth) open.pop_back();
        const Entry e{path, m.a, m.b, m.b_level,
                      m.b_level != nullptr ? kNone : open.back().second};
        if (e.dn == nullptr && e.level != nullptr) {
          if (!may_create) (void)lookup_or_throw(dst, path.key());
          if (e.level->locked) check_unlocked(*e.level, op, path.key());
        }
        if (e.vn.is_non_tensor() && e.dn != nullptr) {
          if (!joins) note_non_tensor_write(op, e);
          return Next::kSkip;
        }
        if (!e.vn.is_dict()) {
          const size_t i = plan_leaf(op, e);
          on_leaf(path, i, e.vn.tensor,
                  e.dn != nullptr ? &e.dn->tensor : nullptr, e.level,
                  e.device(dicts_));
          return Next::kSkip;
        }
        if (e.dn != nullptr) {
          TORCH_CHECK_TYPE(
              e.dn->is_dict() && !e.dn->is_non_tensor(), op, ": key ",
              path.key().str(), ": cannot write a TensorDict where ",
              e.dn->is_dict() ? "non-tensor data" : "a tensor", " lives");
          on_dict(path, *e.dn->dict, *e.vn.dict);
          return Next::kDescend;
        }
        plan_new_dict(op, e, sub_batch, joins);
        if (e.vn.is_non_tensor()) return Next::kSkip;
        open.emplace_back(depth, dicts_.size() - 1);
        return Next::kDescend;
      });
}

void WriteTargets::note_non_tensor_write(const char* op, const Entry& e) {
  if (non_tensor_write_changes(op, e.path, *e.dn, e.vn)) {
    non_tensor_writes_.push_back(NonTensorWrite{
        e.level, e.index(), e.vn.dict.get(), e.path.key().str()});
  }
}

void WriteTargets::plan_new_dict(const char* op, const Entry& e,
                                 SubBatch sub_batch, bool joins) {
  // For non-tensor data the new level carries the value's data (see
  // create()).
  TORCH_CHECK(
      joins || !e.vn.is_non_tensor() || !non_tensor_is_stack(*e.vn.dict), op,
      ": key ", e.path.key().str(),
      ": a NonTensorStack cannot be written into rows (only NonTensorData, "
      "one value for every row)");
  const Dict* np = e.level != nullptr ? nullptr : &dicts_[e.new_parent];
  std::vector<int64_t> batch =
      sub_batch(np != nullptr ? c10::IntArrayRef(np->batch)
                              : c10::IntArrayRef(e.level->batch_size),
                *e.vn.dict);
  dicts_.push_back(Dict{e.level, e.new_parent, &e.vn, std::move(batch),
                        e.device(dicts_), nullptr});
  creations_.emplace_back(true, dicts_.size() - 1);
}

size_t WriteTargets::plan_leaf(const char* op, const Entry& e) {
  if (e.dn != nullptr) {
    TORCH_CHECK_TYPE(!e.dn->is_dict(), op, ": key ", e.path.key().str(),
                     ": cannot write a tensor where ",
                     e.dn->is_non_tensor() ? "non-tensor data" : "a TensorDict",
                     " lives");
  }
  const size_t i = leaves_.size();
  leaves_.push_back(Leaf{e.level, e.dn != nullptr ? e.index() : 0, e.new_parent,
                         &e.vn, e.dn != nullptr});
  if (e.dn == nullptr) creations_.emplace_back(false, i);
  return i;
}

void WriteTargets::create(
    c10::function_ref<at::Tensor(size_t i, const TensorDictImpl& parent)>
        make) {
  for (const auto& c : creations_) {
    if (c.first) {
      Dict& d = dicts_[c.second];
      TensorDictImpl* parent =
          d.parent ? d.parent : dicts_[d.new_parent].impl.get();
      d.impl = make_impl(d.batch, d.device);
      // Non-tensor data: the value's, for every row (a join replaces it).
      d.impl->non_tensor = d.value->dict->non_tensor;
      if (d.parent) log_.emplace_back(parent, parent->nodes.size());
      parent->nodes.push_back(Node{d.value->key, at::Tensor(), d.impl});
      continue;
    }
    Leaf& l = leaves_[c.second];
    const bool existing_parent = l.parent != nullptr;
    if (!existing_parent) l.parent = dicts_[l.new_parent].impl.get();
    at::Tensor t = make(c.second, *l.parent);
    if (existing_parent) log_.emplace_back(l.parent, l.parent->nodes.size());
    l.index = l.parent->nodes.size();
    l.parent->nodes.push_back(Node{l.value->key, std::move(t), nullptr});
  }
}

void WriteTargets::undo() {
  for (auto it = log_.rbegin(); it != log_.rend(); ++it) {
    it->first->nodes.resize(std::min(it->first->nodes.size(), it->second));
  }
  log_.clear();
}

// ---------------------------------------------------------------------------
// Whole-leaf copies: set_ and update_
// ---------------------------------------------------------------------------

void check_leaf_copy(const char* op, const LeafName& name,
                     c10::IntArrayRef batch, const at::Tensor& dest,
                     const at::Tensor& src) {
  TORCH_CHECK_VALUE(src.defined(), op, ": key ", name.str(),
                    ": cannot write an undefined tensor");
  TORCH_CHECK(starts_with(src.sizes(), batch), op, ": key ", name.str(),
              ": expected leading dims ", shape_str(batch), ", got ",
              shape_str(src.sizes().slice(
                  0, std::min(src.sizes().size(), batch.size()))));
  TORCH_CHECK(at::is_expandable_to(src.sizes(), dest.sizes()), op, ": key ",
              name.str(), ": cannot write a value of shape ",
              shape_str(src.sizes()), " into the stored tensor of shape ",
              shape_str(dest.sizes()));
  if (!dest.is_same(src)) {
    check_leaf_write(op, name, dest, src, WriteKind::kCopy);
  }
}

void update_leaves(TensorDictImpl& dst, const TensorDictImpl& value) {
  LeafCopies copies;
  WriteTargets targets(
      "update_", dst, value,
      [](c10::IntArrayRef, const TensorDictImpl& sub) {
        return sub.batch_size;
      },
      [](const KeyPath&, const TensorDictImpl&, const TensorDictImpl&) {},
      [&](const KeyPath&, size_t i, const at::Tensor& src,
          const at::Tensor* dest, const TensorDictImpl* level,
          const c10::optional<at::Device>&) {
        copies.add("update_", LeafName(value, i), level->batch_size, *dest,
                   src);
      },
      /*may_create=*/false);
  // Non-tensor entries take the value's data (as Python's update_).
  std::vector<NonTensorPtr> non_tensors;
  for (const auto& w : targets.non_tensor_writes()) {
    non_tensors.push_back(w.indexed("update_", nullptr));
  }
  copies.write();
  const auto& writes = targets.non_tensor_writes();
  for (size_t k = 0; k < writes.size(); ++k) writes[k].commit(non_tensors[k]);
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

// `dst[norm] = value`: pairs the two trees once (WriteTargets), decides per
// leaf between a byte copy (contiguous CPU leaves of one dtype, a
// contiguous region), a LibTorch copy and an allocation, validates every
// leaf, then writes.
class WritePlan {
 public:
  WritePlan(TensorDictImpl& dst, const NormalizedIndex& norm,
            const TensorDictImpl& value, c10::IntArrayRef shape)
      : norm_(norm),
        value_(value),
        dst_bd_(dst.batch_dims()),
        value_bd_(value.batch_dims()),
        block_(value.batch_size.size() == shape.size() ? block_of(dst, norm)
                                                       : Block{}),
        targets_(
            "index_put_", dst, value,
            [&](c10::IntArrayRef parent_batch, const TensorDictImpl& sub) {
              return concat(parent_batch.slice(0, static_cast<size_t>(dst_bd_)),
                            c10::IntArrayRef(sub.batch_size)
                                .slice(static_cast<size_t>(value_bd_)));
            },
            [](const KeyPath&, const TensorDictImpl&, const TensorDictImpl&) {},
            [&](const KeyPath&, size_t, const at::Tensor& src,
                const at::Tensor* dest, const TensorDictImpl*,
                const c10::optional<at::Device>&) {
              bytes_.emplace_back();
              if (dest == nullptr || !plan_bytes(*dest, src, bytes_.back())) {
                all_bytes_ = false;
              }
            }) {
    if (!targets_.non_tensor_writes().empty()) all_bytes_ = false;
  }

  void run() {
    check();
    write();
  }
  // The two steps of `run`, for writes planned together (index_put_all).
  void check() {
    if (!all_bytes_) validate();
  }
  void write() {
    if (all_bytes_) {
      copy_planned_bytes();
    } else {
      execute();
    }
  }

 private:
  const at::Tensor& value_leaf(size_t i) const {
    return targets_.leaves()[i].value->tensor;
  }

  // The byte copies of the eligible leaves, with the version bump `copy_`
  // does: CPU leaves one by one, CUDA leaves in one fused device copy.
  void copy_planned_bytes() const {
    ByteCopies copies;
    for (const auto& b : bytes_) {
      if (b.dst != nullptr) copies.add(b);
    }
    copies.finish();
  }

  // Fills in the byte copy of `src` into `dest` when both allow one.
  bool plan_bytes(const at::Tensor& dest, const at::Tensor& src,
                  ByteCopy& b) const {
    if (!block_.ok) return false;
    // A CUDA leaf takes the fused device copy (CUDA builds only).
    const bool on_device = device_bytes(dest, src);
    if ((!on_device && !(cpu_bytes(dest) && cpu_bytes(src) &&
                         dest.scalar_type() == src.scalar_type())) ||
        dest.requires_grad() || src.requires_grad() ||
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
    // copy_ does (validation names the key). Host and device addresses
    // never overlap.
    const bool src_on_host = on_device && src.device().is_cpu();
    if (!src_on_host && from != to && from < to + nbytes &&
        to < from + nbytes) {
      return false;
    }
    b = ByteCopy{version_of(dest),
                 to,
                 from,
                 nbytes,
                 on_device ? dest.device().index() : c10::DeviceIndex{-1},
                 src_on_host};
    return true;
  }

  // Every check LibTorch would make, before anything is written; and the
  // new data of the non-tensor entries the write changes.
  void validate() {
    for (const auto& w : targets_.non_tensor_writes()) {
      non_tensors_.push_back(w.indexed("index_put_", &norm_));
    }
    const bool basic = std::none_of(
        norm_.indices.begin(), norm_.indices.end(),
        [](const at::indexing::TensorIndex& t) { return t.is_tensor(); });
    const auto& leaves = targets_.leaves();
    for (size_t i = 0; i < leaves.size(); ++i) {
      // New leaves: nothing to conflict with. Byte-copy leaves: nothing
      // LibTorch would reject.
      if (!leaves[i].exists || bytes_[i].dst != nullptr) continue;
      const LeafName key(value_, i);
      const at::Tensor& src = value_leaf(i);
      const at::Tensor& dest = targets_.dest(i);
      auto src_trailing = src.sizes().slice(static_cast<size_t>(value_bd_));
      auto dst_trailing = dest.sizes().slice(static_cast<size_t>(dst_bd_));
      TORCH_CHECK(src_trailing == dst_trailing, "key ", key.str(),
                  ": the value's trailing shape ", shape_str(src_trailing),
                  " (value shape ", shape_str(src.sizes()),
                  ") does not match the existing buffer's trailing shape ",
                  shape_str(dst_trailing), " (buffer shape ",
                  shape_str(dest.sizes()), ")");
      check_cast(nullptr, key, src.scalar_type(), dest.scalar_type());
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

  // Allocates what is missing (in `value`'s order), then writes; a failure
  // drops every key the write created.
  void execute() {
    try {
      targets_.create([&](size_t i, const TensorDictImpl& parent) {
        const at::Tensor& src = value_leaf(i);
        auto shape = concat(c10::IntArrayRef(parent.batch_size)
                                .slice(0, static_cast<size_t>(dst_bd_)),
                            src.sizes().slice(static_cast<size_t>(value_bd_)));
        at::Tensor buf = at::zeros(
            shape, src.options().device(parent.device ? *parent.device
                                                      : src.device()));
        write_leaf(buf, src);
        return buf;
      });
      const auto& leaves = targets_.leaves();
      for (size_t i = 0; i < leaves.size(); ++i) {
        if (!leaves[i].exists || bytes_[i].dst != nullptr) continue;
        write_leaf(targets_.dest(i), value_leaf(i));
      }
      copy_planned_bytes();
    } catch (...) {
      targets_.undo();
      throw;
    }
    const auto& writes = targets_.non_tensor_writes();
    for (size_t k = 0; k < writes.size(); ++k)
      writes[k].commit(non_tensors_[k]);
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

  const NormalizedIndex& norm_;
  const TensorDictImpl& value_;
  const int64_t dst_bd_, value_bd_;
  const Block block_;
  bool all_bytes_ = true;
  // Per leaf of `value`: its byte copy (`dst` null: the leaf takes none).
  c10::SmallVector<ByteCopy, 16> bytes_;
  WriteTargets targets_;
  std::vector<NonTensorPtr> non_tensors_;  // per targets_.non_tensor_writes()
};

// Whether `vb` fits the indexed shape `s`: equal, or a suffix (broadcast from
// the left).
bool batch_fits(c10::IntArrayRef vb, c10::IntArrayRef s) {
  if (vb.size() > s.size()) return false;
  return std::equal(vb.begin(), vb.end(),
                    s.end() - static_cast<int64_t>(vb.size()));
}

}  // namespace

// The batch shape `dst[norm]` selects, once `value` was checked to fit it.
std::vector<int64_t> checked_region(const TensorDictImpl& dst,
                                    const NormalizedIndex& norm,
                                    const TensorDictImpl& value) {
  auto s = indexed_shape(dst, norm);
  const c10::IntArrayRef vb(value.batch_size);
  TORCH_CHECK(batch_fits(vb, s), "cannot write a TensorDict with batch_size ",
              shape_str(vb), " into an indexed region of batch shape ",
              shape_str(s), " (TensorDict batch_size ",
              shape_str(dst.batch_size), ")");
  return s;
}

void index_put(TensorDictImpl& dst, const NormalizedIndex& norm,
               const TensorDictImpl& value) {
  WritePlan(dst, norm, value, checked_region(dst, norm, value)).run();
}

void index_put_all(const std::vector<IndexPut>& writes) {
  std::vector<std::unique_ptr<WritePlan>> plans;
  plans.reserve(writes.size());
  for (const IndexPut& w : writes) {
    plans.push_back(std::make_unique<WritePlan>(
        *w.dst, w.norm, *w.value, checked_region(*w.dst, w.norm, *w.value)));
  }
  for (auto& p : plans) p->check();
  for (auto& p : plans) p->write();
}

// ---------------------------------------------------------------------------
// The cached plan of row writes
// ---------------------------------------------------------------------------

namespace {

// The storage `t` lives in, by identity (no reference count is touched).
const c10::StorageImpl* storage_of(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  return impl->has_storage() ? impl->unsafe_storage().unsafeGetStorageImpl()
                             : nullptr;
}

}  // namespace

RowWritePlan::RowWritePlan(const TensorDict& dst, const char* dst_name)
    : dst_(dst), dst_name_(dst_name) {
  const TensorDictImpl& root = TensorDictImpl::of(dst_);
  TORCH_INTERNAL_ASSERT(root.batch_dims() == 1);
  check_no_non_tensor(dst_name, ("a " + std::string(dst_name)).c_str(), root);
  visit(
      root, Ignore(),
      [&](const KeyPath& path, const at::Tensor& t) {
        char* base =
            rows_byte_copyable(t) ? static_cast<char*>(t.data_ptr()) : nullptr;
        leaves_.push_back(Leaf{path.key(), t, &t, t.sizes().slice(1).vec(),
                               row_bytes(t), base, storage_of(t),
                               base != nullptr && t.is_cpu(),
                               base != nullptr && t.is_cuda(), version_of(t)});
      },
      Ignore());
}

size_t RowWritePlan::leaf_index(const at::Tensor* stored) const {
  for (size_t k = 0; k < leaves_.size(); ++k) {
    if (leaves_[k].stored == stored) return k;
  }
  return leaves_.size();
}

void RowWritePlan::bind(const char* op, const char* what,
                        const TensorDictImpl& value, int64_t value_bd,
                        Sources& out) const {
  const TensorDictImpl& root = TensorDictImpl::of(dst_);
  out.assign(leaves_.size(), nullptr);
  size_t k = 0;  // the leaf the next one is, when the key orders agree
  bool non_tensor = false;
  const bool same = pair_walk<Pairing::kSameKeys>(
      value, &root, [&](const Match<const TensorDictImpl>& m) {
        if (m.a.is_dict()) {
          non_tensor = non_tensor || m.a.is_non_tensor();
          return non_tensor ? Next::kStop : Next::kDescend;
        }
        const at::Tensor* stored = &m.b->tensor;
        const size_t at = k < leaves_.size() && leaves_[k].stored == stored
                              ? k
                              : leaf_index(stored);
        out[at] = &m.a.tensor;
        ++k;
        return Next::kSkip;
      });
  if (non_tensor) {
    check_no_non_tensor(op, ("the " + std::string(dst_name_)).c_str(), value);
  }
  if (!same) {
    throw_key_difference(op, root, value,
                         ("the " + std::string(dst_name_)).c_str(),
                         ("the " + std::string(what)).c_str());
  }
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const Leaf& l = leaves_[i];
    const at::Tensor& src = *out[i];
    auto row_shape = src.sizes().slice(static_cast<size_t>(value_bd));
    TORCH_CHECK(row_shape == c10::IntArrayRef(l.row_shape), op, ": key ",
                l.key.str(), ": expected the row shape ",
                shape_str(l.row_shape), ", got ", shape_str(row_shape),
                " (leaf shape ", shape_str(src.sizes()), ")");
    if (src.scalar_type() != l.tensor.scalar_type()) {
      check_cast(op, l.key, src.scalar_type(), l.tensor.scalar_type());
    }
    if (!(l.cpu_rows && src.is_cpu())) {
      TORCH_CHECK(copyable_devices(src.device(), l.tensor.device()), op,
                  ": key ", l.key.str(), ": cannot write a value on device ",
                  device_name(src.device()), " into a buffer on device ",
                  device_name(l.tensor.device()));
    }
  }
}

bool RowWritePlan::reads_destination(const Sources& sources) const {
  for (const at::Tensor* src : sources) {
    const c10::StorageImpl* st = storage_of(*src);
    if (st == nullptr) continue;
    for (const auto& l : leaves_) {
      if (l.storage == st) return true;
    }
  }
  return false;
}

void RowWritePlan::write_rows(const Sources& sources, int64_t value_bd,
                              int64_t row, int64_t src_row, int64_t count,
                              int64_t row_step) const {
  ByteCopies copies;
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const Leaf& l = leaves_[i];
    const at::Tensor& src = *sources[i];
    if (l.row_bytes == 0) continue;  // empty rows: nothing to copy
    // Where a byte copy goes and comes from (only for byte copies).
    const auto to = [&] {
      return l.base + static_cast<size_t>(row) * l.row_bytes;
    };
    const auto from = [&] {
      return static_cast<const char*>(src.data_ptr()) +
             static_cast<size_t>(src_row) * l.row_bytes;
    };
    const size_t nbytes = static_cast<size_t>(count) * l.row_bytes;
    const bool cpu_bytes_ok = l.cpu_rows &&
                              src.scalar_type() == l.tensor.scalar_type() &&
                              cpu_bytes(src);
    if (row_step != 1 && count > 1) {
      if (cpu_bytes_ok) {
        copy_strided_rows(to(), static_cast<size_t>(row_step) * l.row_bytes,
                          from(), l.row_bytes, count, l.row_bytes);
        bump(l.version);
        continue;
      }
      at::NoGradGuard no_grad;
      l.tensor.slice(0, row, row + (count - 1) * row_step + 1, row_step)
          .copy_(src.narrow(0, src_row, count));
      continue;
    }
    if (l.cuda_rows && device_bytes(l.tensor, src)) {
      copies.add(ByteCopy{l.version, to(), from(), nbytes,
                          l.tensor.device().index(), src.is_cpu()});
      continue;
    }
    if (cpu_bytes_ok) {
      copies.add(ByteCopy{l.version, to(), from(), nbytes});
      continue;
    }
    at::NoGradGuard no_grad;
    if (value_bd == 0) {
      l.tensor.select(0, row).copy_(src);
    } else {
      l.tensor.narrow(0, row, count).copy_(src.narrow(0, src_row, count));
    }
  }
  copies.finish();
}

}  // namespace detail
}  // namespace tensordict
