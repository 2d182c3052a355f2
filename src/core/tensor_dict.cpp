#include "tensordict/tensor_dict.h"

#include <ATen/ATen.h>
#include <ATen/MapAllocator.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/internal.h"
#include "core/tree.h"
#include "core/write_plan.h"

namespace tensordict {

using at::indexing::TensorIndex;
using detail::Node;
using detail::TensorDictImpl;
using ImplPtr = std::shared_ptr<TensorDictImpl>;
using namespace detail;  // NOLINT(google-build-using-namespace)

// ===========================================================================
// Small helpers
// ===========================================================================

namespace detail {

std::string shape_str(c10::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  out += "]";
  return out;
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kHalf: return "torch.float16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kBool: return "torch.bool";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kQInt8: return "torch.qint8";
    case at::kQUInt8: return "torch.quint8";
    case at::kQInt32: return "torch.qint32";
    default: return std::string("torch.") + c10::toString(dtype);
  }
}

std::string device_name(const at::Device& device) {
  if (device.is_cuda() && !device.has_index()) return "cuda:0";
  return device.str();
}

bool tensor_is_shared(const at::Tensor& t) {
  if (t.is_cuda()) return true;
  if (!t.defined() || !t.has_storage()) return false;
  const auto& data_ptr = t.storage().data_ptr();
  if (auto* m = at::MapAllocator::fromDataPtr(data_ptr)) {
    // Shared-memory segments (not mapped files) are named "/torch_<...>".
    return std::strncmp(m->filename(), "/torch_", 7) == 0;
  }
  return at::RefcountedMapAllocator::fromDataPtr(data_ptr) != nullptr;
}

}  // namespace detail

namespace detail {

ImplPtr make_impl(std::vector<int64_t> batch_size,
                  c10::optional<at::Device> device) {
  auto impl = std::make_shared<TensorDictImpl>();
  impl->batch_size = std::move(batch_size);
  impl->device = device;
  return impl;
}

std::vector<int64_t> concat(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out;
  out.reserve(a.size() + b.size());
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool starts_with(c10::IntArrayRef shape, c10::IntArrayRef prefix) {
  return shape.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), shape.begin());
}

at::Device normalize_device(at::Device d) {
  if (d.is_cuda() && !d.has_index()) return at::Device(at::kCUDA, 0);
  return d;
}

NestedKey prefixed(const NestedKey* prefix, const std::string& key) {
  if (prefix == nullptr) return NestedKey(key);
  return prefix->join(NestedKey(key));
}

void collect_keys(const TensorDictImpl& impl, const NestedKey* prefix,
                  bool include_nested, bool leaves_only,
                  std::vector<NestedKey>& out) {
  for (const auto& n : impl.nodes) {
    NestedKey k = prefixed(prefix, n.key);
    if (!(n.is_dict() && leaves_only)) out.push_back(k);
    if (n.is_dict() && include_nested) {
      collect_keys(*n.dict, &k, include_nested, leaves_only, out);
    }
  }
}

std::string key_vec_str(const std::vector<NestedKey>& ks) {
  std::string out = "[";
  for (size_t i = 0; i < ks.size(); ++i) {
    if (i) out += ", ";
    out += ks[i].str();
  }
  return out + "]";
}

std::string key_list_str(const TensorDictImpl& impl) {
  std::vector<NestedKey> keys;
  collect_keys(impl, nullptr, /*include_nested=*/true, /*leaves_only=*/false,
               keys);
  return key_vec_str(keys);
}

// New dict structure (every level, with its saved path and consolidated
// buffer), same tensors.
ImplPtr shallow_copy(const TensorDictImpl& src) {
  return rebuild(
      src, src.batch_size,
      [](const KeyPath&, const at::Tensor& t) { return t; }, nullptr,
      [](const TensorDictImpl& from, TensorDictImpl& to) {
        to.saved_path = from.saved_path;
        to.consolidated = from.consolidated;
      });
}


// Walks `key` from `root`. Returns the node, or nullptr when some component
// is missing (or an intermediate component is a tensor).
const Node* lookup(const TensorDictImpl& root, const NestedKey& key) {
  const TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const Node* n = cur->find(parts[i]);
    if (n == nullptr || !n->is_dict()) return nullptr;
    cur = n->dict.get();
  }
  return cur->find(parts.back());
}

// The dict holding the last component of `key`, or nullptr.
TensorDictImpl* parent_of(TensorDictImpl& root, const NestedKey& key) {
  TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Node* n = cur->find(parts[i]);
    if (n == nullptr || !n->is_dict()) return nullptr;
    cur = n->dict.get();
  }
  return cur;
}

const Node& lookup_or_throw(const TensorDictImpl& root, const NestedKey& key) {
  const Node* n = lookup(root, key);
  TORCH_CHECK_INDEX(n != nullptr, "key ", key.str(),
                    " not found in TensorDict with keys ", key_list_str(root));
  return *n;
}

NestedKey leaf_key(const TensorDictImpl& root, size_t i) {
  std::vector<NestedKey> keys;
  collect_keys(root, nullptr, /*include_nested=*/true, /*leaves_only=*/true,
               keys);
  return keys.at(i);
}

void check_unlocked(const TensorDictImpl& dict, const char* op,
                    const NestedKey* key) {
  if (!dict.locked) return;
  if (key == nullptr) {
    TORCH_CHECK(false, op,
                ": the TensorDict is locked: its entries cannot be added, "
                "removed, renamed or replaced (unlock_() it first)");
  }
  TORCH_CHECK(false, op, ": key ", key->str(),
              ": the TensorDict is locked: its entries cannot be added, "
              "removed, renamed or replaced (write into existing tensors "
              "with set_() or td[i] = row, or unlock_() it first)");
}

bool reaches(const TensorDictImpl& from, const TensorDictImpl* target) {
  if (&from == target) return true;
  for (const auto& n : from.nodes) {
    if (n.is_dict() && reaches(*n.dict, target)) return true;
  }
  return false;
}

}  // namespace detail

namespace {

// ---------------------------------------------------------------------------
// Index normalization
// ---------------------------------------------------------------------------

struct NormalizedIndex {
  std::vector<TensorIndex> indices;  // Ellipsis expanded, ints non-negative
  std::vector<int64_t> ints;          // the ints, when all_int
  bool all_int = true;                // only integers
};

bool is_mask(const at::Tensor& t) {
  return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
}

// Appends a copy of `idx`, built from its parts. LibTorch's TensorIndex
// leaves its bool member uninitialized unless it holds a bool, so its
// implicit copy constructor reads an indeterminate value (UBSan reports it).
// Callers reserve capacity first, so the vector never moves its elements.
void append_index(std::vector<TensorIndex>& v, const TensorIndex& idx) {
  if (idx.is_none()) {
    v.emplace_back(at::indexing::None);
  } else if (idx.is_ellipsis()) {
    v.emplace_back(at::indexing::Ellipsis);
  } else if (idx.is_integer()) {
    v.emplace_back(as_int(idx.integer()));
  } else if (idx.is_boolean()) {
    v.emplace_back(idx.boolean());
  } else if (idx.is_slice()) {
    v.emplace_back(idx.slice());
  } else {
    v.emplace_back(idx.tensor());
  }
}

NormalizedIndex normalize_index(const TensorDictImpl& impl,
                                c10::ArrayRef<TensorIndex> indices) {
  const int64_t bd = impl.batch_dims();
  TORCH_CHECK_INDEX(bd > 0,
                    "cannot index a TensorDict with no batch dimensions "
                    "(batch_size [])");
  int64_t consumed = 0;
  int64_t ellipses = 0;
  for (const auto& idx : indices) {
    if (idx.is_integer() || idx.is_slice()) {
      ++consumed;
    } else if (idx.is_tensor()) {
      const auto& t = idx.tensor();
      consumed += is_mask(t) ? std::max<int64_t>(t.dim(), 1) : 1;
    } else if (idx.is_ellipsis()) {
      ++ellipses;
    }
  }
  TORCH_CHECK_INDEX(ellipses <= 1,
                    "an index can only have a single ellipsis ('...')");
  TORCH_CHECK_INDEX(consumed <= bd, "too many indices for TensorDict with batch_size ",
                    shape_str(impl.batch_size), ": ", consumed,
                    " batch dims were indexed");
  NormalizedIndex out;
  out.indices.reserve(indices.size() + static_cast<size_t>(bd));
  int64_t dim = 0;
  for (const auto& idx : indices) {
    if (idx.is_integer()) {
      const int64_t size = impl.batch_size[static_cast<size_t>(dim)];
      int64_t i = as_int(idx.integer());
      TORCH_CHECK_INDEX(i >= -size && i < size, "index ", i,
                        " is out of bounds for dim ", dim, " with size ", size,
                        " of TensorDict with batch_size ",
                        shape_str(impl.batch_size));
      if (i < 0) i += size;
      out.indices.emplace_back(i);
      out.ints.push_back(i);
      ++dim;
    } else if (idx.is_ellipsis()) {
      for (int64_t k = 0; k < bd - consumed; ++k) {
        out.indices.emplace_back(at::indexing::Slice());
      }
      dim += bd - consumed;
      out.all_int = false;
    } else {
      append_index(out.indices, idx);
      out.all_int = false;
      if (idx.is_slice()) {
        ++dim;
      } else if (idx.is_tensor()) {
        const auto& t = idx.tensor();
        dim += is_mask(t) ? std::max<int64_t>(t.dim(), 1) : 1;
      }
    }
  }
  if (out.indices.empty()) out.all_int = false;
  return out;
}

// The batch shape that `norm` selects from `batch_size`.
std::vector<int64_t> indexed_shape(const TensorDictImpl& impl,
                                   const NormalizedIndex& norm) {
  if (norm.all_int) {
    return std::vector<int64_t>(impl.batch_size.begin() +
                                    static_cast<int64_t>(norm.ints.size()),
                                impl.batch_size.end());
  }
  // Index a zero-strided stand-in of the batch shape: LibTorch then checks
  // masks, index tensors and bounds, and computes the shape for us.
  at::Device dev = at::kCPU;
  for (const auto& idx : norm.indices) {
    if (idx.is_tensor()) dev = idx.tensor().device();
  }
  at::Tensor dummy =
      at::empty({}, at::TensorOptions().dtype(at::kByte).device(dev))
          .expand(impl.batch_size);
  try {
    return dummy.index(norm.indices).sizes().vec();
  } catch (const c10::Error& e) {
    TORCH_CHECK_INDEX(false, "invalid index for TensorDict with batch_size ",
                      shape_str(impl.batch_size), ": ", e.msg());
  }
}

// `torch::autograd::as_view` lost its `view_func` std::function parameter
// in favour of a ViewFunc object plus a reverse function in LibTorch 2.x; call
// whichever form this LibTorch has.
template <typename Base>
auto as_view_compat(const Base& base, const at::Tensor& view,
                    torch::autograd::CreationMeta meta, int)
    -> decltype(torch::autograd::as_view(base, view, true, true, nullptr,
                                         meta)) {
  return torch::autograd::as_view(base, view, true, true, nullptr, meta);
}
template <typename Base>
auto as_view_compat(const Base& base, const at::Tensor& view,
                    torch::autograd::CreationMeta meta, long)
    -> decltype(torch::autograd::as_view(base, view, true, true, nullptr,
                                         nullptr, meta)) {
  return torch::autograd::as_view(base, view, true, true, nullptr, nullptr,
                                  meta);
}

// Row `i` of `t` along dim 0: what `t.select(0, i)` returns, built without
// the dispatcher for plain dense CPU/CUDA tensors (the dispatched op costs
// several times more than the view itself). The view is registered with
// autograd exactly as LibTorch's view ops register theirs (`as_view`), so it
// shares the version counter and in-place ops on it are tracked.
at::Tensor row_view(const at::Tensor& t, int64_t i) {
  c10::TensorImpl* bi = t.unsafeGetTensorImpl();
  if (t.dim() == 0 || t.layout() != at::kStrided ||
      !(t.is_cpu() || t.is_cuda()) || t.is_quantized() || t.has_names() ||
      !bi->has_storage()) {
    return t.select(0, i);
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(bi->storage()), bi->key_set(),
      bi->dtype());
  impl->set_sizes_and_strides(bi->sizes().slice(1), bi->strides().slice(1));
  impl->set_storage_offset(bi->storage_offset() + i * bi->strides()[0]);
  at::Tensor view(std::move(impl));
  if (t.is_inference()) return view;  // no version counter, no autograd
  using torch::autograd::CreationMeta;
  const CreationMeta meta = c10::InferenceMode::is_enabled()
                                ? CreationMeta::INFERENCE_MODE
                                : (c10::GradMode::is_enabled()
                                       ? CreationMeta::DEFAULT
                                       : CreationMeta::NO_GRAD_MODE);
  return as_view_compat(t, view, meta, 0);
}

ImplPtr index_impl(const TensorDictImpl& impl, const NormalizedIndex& norm,
                   std::vector<int64_t> new_batch) {
  const bool single_int = norm.all_int && norm.ints.size() == 1;
  return rebuild(impl, std::move(new_batch),
                 [&](const KeyPath&, const at::Tensor& t) {
                   return single_int ? row_view(t, norm.ints[0])
                                     : t.index(norm.indices);
                 });
}

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

// ===========================================================================
// Entry
// ===========================================================================

Entry::Entry(at::Tensor tensor) : tensor_(std::move(tensor)) {}
Entry::Entry(const TensorDict& dict) : dict_(dict.impl_) {}
Entry::Entry(std::shared_ptr<detail::TensorDictImpl> dict)
    : dict_(std::move(dict)) {}

const at::Tensor& Entry::tensor() const {
  TORCH_CHECK_TYPE(is_tensor(), "this entry holds a TensorDict, not a tensor");
  return tensor_;
}

TensorDict Entry::tensordict() const {
  TORCH_CHECK_TYPE(is_tensordict(),
                   "this entry holds a tensor, not a TensorDict");
  return TensorDict(dict_);
}

// ===========================================================================
// TensorDict: construction and accessors
// ===========================================================================

TensorDict::TensorDict() : impl_(make_impl({}, c10::nullopt)) {}

TensorDict::TensorDict(std::shared_ptr<detail::TensorDictImpl> impl)
    : impl_(std::move(impl)) {}

TensorDict::TensorDict(c10::IntArrayRef batch_size)
    : TensorDict(std::vector<Item>{}, batch_size, c10::nullopt) {}

TensorDict::TensorDict(c10::IntArrayRef batch_size, at::Device device)
    : TensorDict(std::vector<Item>{}, batch_size, device) {}

TensorDict::TensorDict(std::vector<Item> items, c10::IntArrayRef batch_size,
                       c10::optional<at::Device> device) {
  for (int64_t d : batch_size) {
    TORCH_CHECK_VALUE(d >= 0, "TensorDict: batch_size ", shape_str(batch_size),
                      " has a negative dimension");
  }
  if (device) device = normalize_device(*device);
  impl_ = make_impl(batch_size.vec(), device);
  for (auto& item : items) {
    if (item.second.is_tensor()) {
      set(item.first, item.second.tensor());
    } else {
      set(item.first, item.second.tensordict());
    }
  }
}

c10::IntArrayRef TensorDict::batch_size() const { return impl_->batch_size; }
int64_t TensorDict::batch_dims() const { return impl_->batch_dims(); }
int64_t TensorDict::numel() const {
  int64_t n = 1;
  for (int64_t d : impl_->batch_size) n *= d;
  return n;
}
c10::optional<at::Device> TensorDict::device() const { return impl_->device; }
size_t TensorDict::size() const { return impl_->nodes.size(); }
bool TensorDict::empty() const { return impl_->nodes.empty(); }

bool TensorDict::contains(const NestedKey& key) const {
  return lookup(*impl_, key) != nullptr;
}

std::vector<NestedKey> TensorDict::keys(bool include_nested,
                                        bool leaves_only) const {
  std::vector<NestedKey> out;
  out.reserve(impl_->nodes.size());
  collect_keys(*impl_, nullptr, include_nested, leaves_only, out);
  return out;
}

at::Tensor TensorDict::get(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  TORCH_CHECK_TYPE(!n.is_dict(), "key ", key.str(),
                   " holds a TensorDict, not a tensor; use get_tensordict()");
  return n.tensor;
}

TensorDict TensorDict::get_tensordict(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  TORCH_CHECK_TYPE(n.is_dict(), "key ", key.str(),
                   " holds a tensor, not a TensorDict; use get()");
  return TensorDict(n.dict);
}

Entry TensorDict::get_entry(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (n.is_dict()) return Entry(n.dict);
  return Entry(n.tensor);
}

// ---------------------------------------------------------------------------
// set / set_ / erase / pop / rename
// ---------------------------------------------------------------------------

namespace {

// Finds (without creating) where `key` will live. Returns the deepest
// existing dict on the path and the index of the first missing intermediate
// component (parts.size() - 1 when the parent exists).
std::pair<TensorDictImpl*, size_t> walk_for_set(TensorDictImpl& root,
                                                const NestedKey& key) {
  TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Node* n = cur->find(parts[i]);
    if (n == nullptr) return {cur, i};
    TORCH_CHECK_TYPE(n->is_dict(), "key ", key.str(), ": cannot create a sub-TensorDict at ",
                     NestedKey(std::vector<std::string>(parts.begin(),
                                                        parts.begin() + static_cast<int64_t>(i) + 1))
                         .str(),
                     ": a tensor lives there");
    cur = n->dict.get();
  }
  return {cur, parts.size() - 1};
}

// Creates the missing intermediates found by walk_for_set and returns the
// dict that holds the last component.
TensorDictImpl* create_path(TensorDictImpl* cur, size_t from,
                            const NestedKey& key) {
  const auto& parts = key.parts();
  for (size_t i = from; i + 1 < parts.size(); ++i) {
    auto sub = make_impl(cur->batch_size, cur->device);
    TensorDictImpl* next = sub.get();
    cur->nodes.push_back(Node{parts[i], at::Tensor(), std::move(sub)});
    cur = next;
  }
  return cur;
}

void check_leading_dims(const NestedKey& key, const at::Tensor& value,
                        c10::IntArrayRef batch) {
  TORCH_CHECK_VALUE(value.defined(), "key ", key.str(),
                    ": cannot set an undefined tensor");
  auto sizes = value.sizes();
  const bool ok = starts_with(sizes, batch);
  TORCH_CHECK(ok, "key ", key.str(), ": expected leading dims ",
              shape_str(batch), ", got ",
              shape_str(sizes.slice(0, std::min(sizes.size(), batch.size()))));
}

}  // namespace

const TensorDict& TensorDict::set(const NestedKey& key,
                                  const at::Tensor& value) const {
  auto [parent, missing_from] = walk_for_set(*impl_, key);
  const bool parent_exists = missing_from + 1 == key.parts().size();
  check_unlocked(*parent, "set", key);
  if (parent_exists) {
    const Node* existing = parent->find(key.back());
    TORCH_CHECK_TYPE(existing == nullptr || !existing->is_dict(), "key ",
                     key.str(),
                     ": cannot set a tensor where a TensorDict lives");
  }
  check_leading_dims(key, value, parent->batch_size);
  at::Tensor v = value;
  if (parent->device && v.device() != *parent->device) v = v.to(*parent->device);
  parent = create_path(parent, missing_from, key);
  if (Node* n = parent->find(key.back())) {
    n->tensor = std::move(v);
  } else {
    parent->nodes.push_back(Node{key.back(), std::move(v), nullptr});
  }
  return *this;
}

const TensorDict& TensorDict::set(const NestedKey& key,
                                  const TensorDict& value) const {
  auto [parent, missing_from] = walk_for_set(*impl_, key);
  const bool parent_exists = missing_from + 1 == key.parts().size();
  check_unlocked(*parent, "set", key);
  if (parent_exists) {
    const Node* existing = parent->find(key.back());
    TORCH_CHECK_TYPE(existing == nullptr || existing->is_dict(), "key ",
                     key.str(),
                     ": cannot set a TensorDict where a tensor lives");
  }
  TORCH_CHECK(starts_with(value.batch_size(), parent->batch_size), "key ",
              key.str(), ": the sub-TensorDict's batch_size ",
              shape_str(value.batch_size()), " must start with ",
              shape_str(parent->batch_size));
  // Any dict on the path, the root included, would end up inside `value`
  // if `value` reaches the deepest existing one.
  TORCH_CHECK(!reaches(*value.impl_, parent), "key ", key.str(),
              ": cannot set a TensorDict inside itself");
  ImplPtr v = value.impl_;
  if (parent->device && value.device() != parent->device) {
    v = value.to(*parent->device).impl_;
  }
  parent = create_path(parent, missing_from, key);
  if (Node* n = parent->find(key.back())) {
    n->dict = std::move(v);
  } else {
    parent->nodes.push_back(Node{key.back(), at::Tensor(), std::move(v)});
  }
  return *this;
}

const TensorDict& TensorDict::set_(const NestedKey& key,
                                   const at::Tensor& value) const {
  const Node& n = lookup_or_throw(*impl_, key);
  TORCH_CHECK_TYPE(!n.is_dict(), "key ", key.str(),
                   ": set_ cannot write a tensor where a TensorDict lives");
  const TensorDictImpl* parent = parent_of(*impl_, key);
  check_leading_dims(key, value, parent->batch_size);
  TORCH_CHECK(at::is_expandable_to(value.sizes(), n.tensor.sizes()), "key ",
              key.str(), ": set_ cannot write a value of shape ",
              shape_str(value.sizes()), " into the stored tensor of shape ",
              shape_str(n.tensor.sizes()));
  check_leaf_write("set_", key, n.tensor, value, WriteKind::kCopy);
  n.tensor.copy_(value);
  return *this;
}

void TensorDict::erase(const NestedKey& key) const { (void)pop(key); }

Entry TensorDict::pop(const NestedKey& key) const {
  (void)lookup_or_throw(*impl_, key);
  TensorDictImpl* parent = parent_of(*impl_, key);
  check_unlocked(*parent, "erase", key);
  auto it = std::find_if(parent->nodes.begin(), parent->nodes.end(),
                         [&](const Node& n) { return n.key == key.back(); });
  Entry out = it->is_dict() ? Entry(it->dict) : Entry(it->tensor);
  parent->nodes.erase(it);
  return out;
}

const TensorDict& TensorDict::rename_key_(const NestedKey& old_key,
                                          const NestedKey& new_key) const {
  Entry e = get_entry(old_key);
  if (old_key == new_key) return *this;
  const auto& op = old_key.parts();
  const auto& np = new_key.parts();
  TORCH_CHECK(!(np.size() > op.size() &&
                std::equal(op.begin(), op.end(), np.begin())),
              "cannot rename key ", old_key.str(), " to ", new_key.str(),
              ": the new key lies inside the old one");
  TORCH_CHECK(!(op.size() > np.size() &&
                std::equal(np.begin(), np.end(), op.begin())),
              "cannot rename key ", old_key.str(), " to ", new_key.str(),
              ": the old key lies inside the new one");
  check_unlocked(*parent_of(*impl_, old_key), "rename_key_", old_key);
  StructureSnapshot snapshot(*impl_);
  try {
    // As in Python, an entry already at `new_key` is replaced where it
    // stands (keys [c, a, b], rename a -> c: [c, b]); otherwise the entry
    // is appended.
    if (lookup(*impl_, new_key) != nullptr) {
      TensorDictImpl* parent = parent_of(*impl_, new_key);
      check_unlocked(*parent, "rename_key_", new_key);
      Node* n = parent->find(new_key.back());
      if (e.is_tensor()) {
        check_leading_dims(new_key, e.tensor(), parent->batch_size);
        n->tensor = e.tensor();
        n->dict.reset();
      } else {
        TensorDict sub = e.tensordict();
        TORCH_CHECK(starts_with(sub.batch_size(), parent->batch_size), "key ",
                    new_key.str(), ": the sub-TensorDict's batch_size ",
                    shape_str(sub.batch_size()), " must start with ",
                    shape_str(parent->batch_size));
        n->dict = sub.impl_;
        n->tensor = at::Tensor();
      }
    } else if (e.is_tensor()) {
      set(new_key, e.tensor());
    } else {
      set(new_key, e.tensordict());
    }
    erase(old_key);
  } catch (...) {
    snapshot.restore();
    throw;
  }
  return *this;
}

const TensorDict& TensorDict::lock_() const {
  for_each_level(*impl_, [](TensorDictImpl& d) { d.locked = true; });
  return *this;
}

const TensorDict& TensorDict::unlock_() const {
  for_each_level(*impl_, [](TensorDictImpl& d) { d.locked = false; });
  return *this;
}

bool TensorDict::is_locked() const { return impl_->locked; }

// ---------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------

TensorDict TensorDict::index(c10::ArrayRef<TensorIndex> indices) const {
  NormalizedIndex norm = normalize_index(*impl_, indices);
  auto shape = indexed_shape(*impl_, norm);
  return TensorDict(index_impl(*impl_, norm, std::move(shape)));
}

const TensorDict& TensorDict::index_put_(c10::ArrayRef<TensorIndex> indices,
                                         const TensorDict& value) const {
  NormalizedIndex norm = normalize_index(*impl_, indices);
  index_put_impl(*impl_, norm, *value.impl_);
  return *this;
}

IndexedTensorDict TensorDict::operator[](int64_t i) const {
  return IndexedTensorDict(*this, i);
}

struct IndexedTensorDict::IndexList {
  std::vector<TensorIndex> indices;
};

IndexedTensorDict TensorDict::operator[](const TensorIndex& index) const {
  if (index.is_integer()) return IndexedTensorDict(*this, as_int(index.integer()));
  auto list = std::make_shared<IndexedTensorDict::IndexList>();
  list->indices.reserve(1);
  append_index(list->indices, index);
  return IndexedTensorDict(*this, std::move(list));
}

// ---------------------------------------------------------------------------
// Copies and moves
// ---------------------------------------------------------------------------

TensorDict TensorDict::to(at::Device device, bool non_blocking) const {
  device = normalize_device(device);
  if (impl_->consolidated.defined() &&
      normalize_device(impl_->consolidated.device()) != device &&
      is_consolidated_impl(*impl_)) {
    return TensorDict(consolidated_to(*impl_, device, non_blocking));
  }
  return TensorDict(rebuild(
      *impl_, impl_->batch_size,
      [&](const KeyPath&, const at::Tensor& t) {
        return t.to(device, non_blocking);
      },
      nullptr,
      [&](const TensorDictImpl&, TensorDictImpl& out) { out.device = device; }));
}

TensorDict TensorDict::to(at::ScalarType dtype) const {
  return TensorDict(rebuild_leaves(*impl_, [&](const at::Tensor& t) { return t.to(dtype); }));
}

TensorDict TensorDict::cpu() const { return to(at::Device(at::kCPU)); }

TensorDict TensorDict::clone() const {
  return TensorDict(rebuild_leaves(*impl_, [](const at::Tensor& t) { return t.clone(); }));
}

TensorDict TensorDict::copy() const {
  return TensorDict(shallow_copy(*impl_));
}

TensorDict TensorDict::contiguous() const {
  return TensorDict(rebuild_leaves(*impl_, [](const at::Tensor& t) { return t.contiguous(); }));
}

TensorDict TensorDict::detach() const {
  return TensorDict(rebuild_leaves(*impl_, [](const at::Tensor& t) { return t.detach(); }));
}

const TensorDict& TensorDict::zero_() const {
  size_t i = 0;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    check_leaf_write("zero_", LeafName(*impl_, i++), t, at::Tensor(),
                     WriteKind::kOp);
  });
  for_each_leaf(*impl_, [](const at::Tensor& t) { t.zero_(); });
  return *this;
}

bool TensorDict::all() const {
  bool result = true;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    if (result && !t.all().item<bool>()) result = false;
  });
  return result;
}

bool TensorDict::any() const {
  bool result = false;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    if (!result && t.any().item<bool>()) result = true;
  });
  return result;
}

bool TensorDict::is_shared() const {
  if (impl_->device && impl_->device->is_cuda()) return true;
  bool any_leaf = false;
  bool all_shared = true;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    any_leaf = true;
    if (!detail::tensor_is_shared(t)) all_shared = false;
  });
  return any_leaf && all_shared;
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

namespace detail {

namespace {

// Whether `b` has exactly `a`'s keys, recursively, with leaves and sub-dicts
// in the same places. Allocation-free: the common case of check_same_keys.
bool same_structure(const TensorDictImpl& a, const TensorDictImpl& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node& n = a.nodes[i];
    // Same order is the common case; fall back to a search.
    const Node* m = b.nodes[i].key == n.key ? &b.nodes[i] : b.find(n.key);
    if (m == nullptr || m->is_dict() != n.is_dict()) return false;
    if (n.is_dict() && !same_structure(*n.dict, *m->dict)) return false;
  }
  return true;
}

}  // namespace

void check_same_keys(const TensorDictImpl& a, const TensorDictImpl& b,
                     const char* op) {
  if (same_structure(a, b)) return;
  // The leaves and the empty sub-dicts: an empty sub-dict on one side only
  // is a difference too (as in Python, where the key sets must match).
  auto terminal_keys = [](const TensorDictImpl& root) {
    std::vector<NestedKey> all, out;
    collect_keys(root, nullptr, /*include_nested=*/true,
                 /*leaves_only=*/false, all);
    for (auto& k : all) {
      const Node* n = lookup(root, k);
      if (!n->is_dict() || n->dict->nodes.empty()) out.push_back(std::move(k));
    }
    return out;
  };
  const std::vector<NestedKey> ka = terminal_keys(a), kb = terminal_keys(b);
  std::vector<NestedKey> missing_b, missing_a;
  for (const auto& k : ka) {
    if (std::find(kb.begin(), kb.end(), k) == kb.end()) missing_b.push_back(k);
  }
  for (const auto& k : kb) {
    if (std::find(ka.begin(), ka.end(), k) == ka.end()) missing_a.push_back(k);
  }
  TORCH_CHECK(missing_a.empty() && missing_b.empty(), op,
              ": TensorDicts have different keys: missing from the left-hand "
              "side: ",
              key_vec_str(missing_a), "; missing from the right-hand side: ",
              key_vec_str(missing_b));
  std::vector<NestedKey> all;
  collect_keys(a, nullptr, /*include_nested=*/true, /*leaves_only=*/false,
               all);
  for (const auto& k : all) {
    const Node* m = lookup(b, k);
    TORCH_CHECK_TYPE(m != nullptr && lookup(a, k)->is_dict() == m->is_dict(),
                     op,
                     ": key ", k.str(),
                     " is a tensor on one side and a TensorDict on the other");
  }
}


}  // namespace detail

namespace detail {
namespace {

// Copies rows `idx[0..n)` of a contiguous leaf whose rows are `row_bytes`
// long into `dst`, specialized for the tiny rows of scalar leaves.
template <typename T>
void gather_bytes_typed(char* dst, const char* src, const int64_t* idx,
                        int64_t n) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  for (int64_t q = 0; q < n; ++q) d[q] = s[idx[q]];
}

void gather_bytes(char* dst, const char* src, size_t row_bytes,
                  const int64_t* idx, int64_t n) {
  switch (row_bytes) {
    case 0:
      return;  // empty leaves: the pointers may be null
    case 1:
      return gather_bytes_typed<uint8_t>(dst, src, idx, n);
    case 2:
      return gather_bytes_typed<uint16_t>(dst, src, idx, n);
    case 4:
      return gather_bytes_typed<uint32_t>(dst, src, idx, n);
    case 8:
      return gather_bytes_typed<uint64_t>(dst, src, idx, n);
    default:
      for (int64_t q = 0; q < n; ++q) {
        if (q + 4 < n) {  // rows are scattered: fetch a few ahead
          const char* ahead = src + static_cast<size_t>(idx[q + 4]) * row_bytes;
          for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch(ahead + b);
        }
        std::memcpy(dst + static_cast<size_t>(q) * row_bytes,
                    src + static_cast<size_t>(idx[q]) * row_bytes, row_bytes);
      }
  }
}

// Rows `idx[0..n)` of `t` along dim 0.
at::Tensor gather_leaf(const at::Tensor& t, const int64_t* idx, int64_t n,
                       const at::Tensor& index, bool grad_mode) {
  if (!(t.device().is_cpu() && t.layout() == at::kStrided &&
        t.is_contiguous() && !t.is_conj() && !t.is_neg() &&
        !(grad_mode && t.requires_grad()))) {
    return t.index_select(0, index.to(t.device()));
  }
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = n;
  at::Tensor g = at::empty(shape, t.options());
  const int64_t rows = t.size(0);
  const size_t row_bytes =
      rows == 0 ? 0 : static_cast<size_t>(t.numel() / rows) * t.element_size();
  gather_bytes(static_cast<char*>(g.data_ptr()),
               static_cast<const char*>(t.data_ptr()), row_bytes, idx, n);
  return g;
}

}  // namespace

ImplPtr gather_rows(const TensorDictImpl& src, const at::Tensor& index) {
  TORCH_INTERNAL_ASSERT(index.device().is_cpu() &&
                        index.scalar_type() == at::kLong &&
                        index.dim() == 1 && index.is_contiguous());
  const int64_t* idx = index.data_ptr<int64_t>();
  const int64_t n = index.size(0);
  const bool grad_mode = c10::GradMode::is_enabled();
  std::vector<int64_t> batch = src.batch_size;
  batch[0] = n;
  return rebuild(src, std::move(batch),
                 [&](const KeyPath&, const at::Tensor& t) {
                   return gather_leaf(t, idx, n, index, grad_mode);
                 });
}

}  // namespace detail

namespace {

// `fn(a_leaf, b_leaf)` over the matching leaves of `a` and `b`, shaped like
// `a`.
template <typename Fn>
TensorDict zip(const TensorDict& a, const TensorDict& b, const char* op,
               const Fn& fn) {
  std::vector<at::Tensor> va, vb;
  pair_leaves(TensorDictImpl::of(a), TensorDictImpl::of(b), op, va, vb);
  for (size_t i = 0; i < va.size(); ++i) va[i] = fn(va[i], vb[i]);
  return TensorDictImpl::wrap(rebuild_from(TensorDictImpl::of(a), std::move(va)));
}

}  // namespace

TensorDict operator==(const TensorDict& a, const TensorDict& b) {
  return zip(a, b, "operator==",
             [](const at::Tensor& x, const at::Tensor& y) { return x.eq(y); });
}

TensorDict operator!=(const TensorDict& a, const TensorDict& b) {
  return zip(a, b, "operator!=",
             [](const at::Tensor& x, const at::Tensor& y) { return x.ne(y); });
}

TensorDict operator==(const TensorDict& a, const at::Scalar& b) {
  return TensorDictImpl::wrap(rebuild_leaves(
      TensorDictImpl::of(a), [&](const at::Tensor& x) { return x.eq(b); }));
}

TensorDict operator!=(const TensorDict& a, const at::Scalar& b) {
  return TensorDictImpl::wrap(rebuild_leaves(
      TensorDictImpl::of(a), [&](const at::Tensor& x) { return x.ne(b); }));
}

// ===========================================================================
// IndexedTensorDict
// ===========================================================================

IndexedTensorDict::IndexedTensorDict(TensorDict parent, int64_t i)
    : parent_(std::move(parent)), int_index_(i) {}

IndexedTensorDict::IndexedTensorDict(TensorDict parent,
                                     std::shared_ptr<const IndexList> list)
    : parent_(std::move(parent)), list_(std::move(list)) {}

IndexedTensorDict::~IndexedTensorDict() = default;

IndexedTensorDict& IndexedTensorDict::operator=(const TensorDict& value) {
  TORCH_CHECK(!chained_,
              "cannot write through td[a][b] when td[a] is a copy (an "
              "advanced index such as a mask or an index tensor, or an index "
              "that does not compose with the next one): the write would be "
              "lost; write with one index list instead, e.g. "
              "td.index_put_({a, b}, value)");
  if (list_) {
    parent_.index_put_(list_->indices, value);
  } else {
    parent_.index_put_({TensorIndex(int_index_)}, value);
  }
  return *this;
}

IndexedTensorDict& IndexedTensorDict::operator=(const IndexedTensorDict& value) {
  return *this = value.value();
}

IndexedTensorDict& IndexedTensorDict::operator=(IndexedTensorDict&& value) {
  return *this = value.value();
}

bool IndexedTensorDict::is_view() const {
  if (!list_) return true;
  for (const auto& idx : list_->indices) {
    if (!(idx.is_integer() || idx.is_slice() || idx.is_none() ||
          idx.is_ellipsis())) {
      return false;
    }
  }
  return true;
}

TensorDict IndexedTensorDict::value() const {
  if (list_) return parent_.index(list_->indices);
  return parent_.index({TensorIndex(int_index_)});
}

at::Tensor IndexedTensorDict::get(const NestedKey& key) const {
  return value().get(key);
}
TensorDict IndexedTensorDict::get_tensordict(const NestedKey& key) const {
  return value().get_tensordict(key);
}
std::vector<int64_t> IndexedTensorDict::batch_size() const {
  return value().batch_size().vec();
}
std::vector<NestedKey> IndexedTensorDict::keys(bool include_nested,
                                               bool leaves_only) const {
  return parent_.keys(include_nested, leaves_only);
}
bool IndexedTensorDict::all() const { return value().all(); }
bool IndexedTensorDict::any() const { return value().any(); }
TensorDict IndexedTensorDict::clone() const { return value().clone(); }
namespace {

// Python's slice arithmetic over a dim of `size`: the first index, the
// step and the number of elements.
struct SliceRange {
  int64_t start, step, len;
};
SliceRange slice_range(const at::indexing::Slice& s, int64_t size) {
  const int64_t step = as_int(s.step());
  auto clamp = [&](int64_t v) {
    if (v < 0) v += size;
    return std::min(std::max<int64_t>(v, 0), size);
  };
  const int64_t start = clamp(as_int(s.start()));
  const int64_t stop = clamp(as_int(s.stop()));
  const int64_t len = stop > start ? (stop - start + step - 1) / step : 0;
  return {start, step, len};
}

}  // namespace

IndexedTensorDict IndexedTensorDict::operator[](int64_t i) const {
  return (*this)[TensorIndex(i)];
}

IndexedTensorDict IndexedTensorDict::operator[](const TensorIndex& index) const {
  // td[a][b] == td[a + b] when `a` is all integers: they remove their dims,
  // and `b` indexes the dims that follow.
  const bool ints_only =
      !list_ || std::all_of(list_->indices.begin(), list_->indices.end(),
                            [](const TensorIndex& t) { return t.is_integer(); });
  if (!chained_ && ints_only) {
    auto list = std::make_shared<IndexList>();
    const size_t n = list_ ? list_->indices.size() : 1;
    list->indices.reserve(n + 1);
    if (list_) {
      for (const auto& t : list_->indices) append_index(list->indices, t);
    } else {
      list->indices.emplace_back(int_index_);
    }
    append_index(list->indices, index);
    return IndexedTensorDict(parent_, std::move(list));
  }
  // td[s][b] for one slice `s` over dim 0 and an integer or slice `b`: one
  // index of dim 0.
  if (!chained_ && list_ && list_->indices.size() == 1 &&
      list_->indices[0].is_slice() && parent_.batch_dims() > 0 &&
      (index.is_integer() || index.is_slice())) {
    const SliceRange a =
        slice_range(list_->indices[0].slice(), parent_.batch_size()[0]);
    auto list = std::make_shared<IndexList>();
    list->indices.reserve(1);
    if (index.is_integer()) {
      const int64_t i = as_int(index.integer());
      TORCH_CHECK_INDEX(i >= -a.len && i < a.len, "index ", i,
                        " is out of bounds for dim 0 with size ", a.len,
                        " of TensorDict with batch_size ",
                        shape_str(batch_size()));
      list->indices.emplace_back(a.start + (i < 0 ? i + a.len : i) * a.step);
    } else {
      const SliceRange b = slice_range(index.slice(), a.len);
      const int64_t start = a.start + b.start * a.step;
      list->indices.emplace_back(at::indexing::Slice(
          start, start + b.len * a.step * b.step, a.step * b.step));
    }
    return IndexedTensorDict(parent_, std::move(list));
  }
  IndexedTensorDict out = value()[index];
  out.chained_ = true;
  return out;
}

}  // namespace tensordict
