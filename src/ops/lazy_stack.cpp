// Lazy stacks (tensordict/lazy_stack.h): dicts stacked along a dim without
// copying. Reads (`get`, indexing, `densify`) work dict by dict; writes go
// through the write plan (core/write_plan.h), all dicts checked before any
// is written. Memory-mapping is in io/memmap.cpp and io/memmap_load.cpp,
// the repr in print/format.cpp.
#include "tensordict/lazy_stack.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/compat.h"
#include "core/indexing.h"
#include "core/internal.h"
#include "core/row_copy.h"
#include "core/write_plan.h"
#include "ops/common.h"
#include "tensordict/functional.h"

namespace tensordict {

using at::indexing::TensorIndex;
using detail::Node;
using detail::shape_str;
using detail::TensorDictImpl;

namespace {

// What a dict holds at a key.
enum class Kind { kMissing, kLeaf, kDict, kNonTensor };

Kind kind_at(const TensorDict& td, const NestedKey& key) {
  const Node* n = detail::lookup(TensorDictImpl::of(td), key);
  if (n == nullptr) return Kind::kMissing;
  if (n->is_non_tensor()) return Kind::kNonTensor;
  return n->is_dict() ? Kind::kDict : Kind::kLeaf;
}

std::string member(size_t i) {
  return "tensordicts()[" + std::to_string(i) + "]";
}

// Each dict's entry at `key`, which must be of kind `want` (a leaf or a
// sub-dict) in every dict. Throws "<op>: key K ..." naming the first dict
// that lacks it or holds something else.
void check_kind(const LazyStackedTensorDict& s, const char* op,
                const NestedKey& key, Kind want) {
  const auto& tds = s.tensordicts();
  bool anywhere = false;
  for (const auto& td : tds) anywhere |= kind_at(td, key) != Kind::kMissing;
  TORCH_CHECK(anywhere, op, ": key ", key.str(),
              " is not in the lazy stack (the keys of every tensordict: ",
              detail::key_vec_str(s.keys(true)), ")");
  for (size_t i = 0; i < tds.size(); ++i) {
    const Kind k = kind_at(tds[i], key);
    TORCH_CHECK(k != Kind::kMissing, op, ": key ", key.str(),
                " is missing from ", member(i),
                " (a key of a lazy stack is in every tensordict; read the "
                "others from their tensordict)");
    if (k == want) continue;
    const char* what = k == Kind::kLeaf   ? "a tensor"
                       : k == Kind::kDict ? "a sub-dict"
                                          : "non-tensor data";
    TORCH_CHECK(false, op, ": key ", key.str(), " holds ", what, " in ",
                member(i),
                want == Kind::kLeaf ? ", not a tensor" : ", not a sub-dict");
  }
}

std::vector<at::Tensor> leaves_at(const LazyStackedTensorDict& s,
                                  const char* op, const NestedKey& key) {
  check_kind(s, op, key, Kind::kLeaf);
  std::vector<at::Tensor> out;
  out.reserve(s.tensordicts().size());
  for (const auto& td : s.tensordicts()) out.push_back(td.get(key));
  return out;
}

// The shapes merged dim by dim: a size where they all agree, -1 where they
// differ, `[-1]` when their numbers of dims differ; `stack` (the number of
// shapes) inserted at `stack_dim` unless the numbers of dims differ.
template <typename Shapes>
std::vector<int64_t> merged_shape(const Shapes& shapes, int64_t stack_dim) {
  std::vector<int64_t> out = shapes(0).vec();
  for (size_t i = 1; i < shapes.size(); ++i) {
    const c10::IntArrayRef s = shapes(i);
    if (s.size() != out.size()) return {-1};
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] != s[d]) out[d] = -1;
    }
  }
  out.insert(out.begin() + stack_dim, static_cast<int64_t>(shapes.size()));
  return out;
}

// `shapes(i)` for i < `n`, as `merged_shape` takes them.
template <typename Fn>
struct ShapesOf {
  size_t n;
  Fn fn;
  [[nodiscard]] size_t size() const { return n; }
  c10::IntArrayRef operator()(size_t i) const { return fn(i); }
};
template <typename Fn>
ShapesOf<Fn> shapes_of(size_t n, Fn fn) {
  return ShapesOf<Fn>{n, std::move(fn)};
}

// Throws "<op>: key K has shape A in tensordicts()[0] and B in
// tensordicts()[i]<tail>" unless every leaf has the first one's shape.
void check_same_shape(const char* op, const NestedKey& key,
                      const std::vector<at::Tensor>& leaves, const char* tail) {
  for (size_t i = 1; i < leaves.size(); ++i) {
    TORCH_CHECK(leaves[i].sizes() == leaves[0].sizes(), op, ": key ", key.str(),
                " has shape ", shape_str(leaves[0].sizes()), " in ", member(0),
                " and ", shape_str(leaves[i].sizes()), " in ", member(i), tail);
  }
}

// `t` padded at the end of each dim to `shape` with `value`.
at::Tensor pad_to(const at::Tensor& t, c10::IntArrayRef shape,
                  const at::Scalar& value) {
  std::vector<int64_t> pad;
  pad.reserve(2 * shape.size());
  bool any = false;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t extra = shape[static_cast<size_t>(d)] - t.size(d);
    pad.push_back(0);
    pad.push_back(extra);
    any |= extra != 0;
  }
  return any ? at::constant_pad_nd(t, pad, value) : t;
}

// Copies the dense `src` (of `shape`, `item`-byte elements) into the
// region of the same shape at the start of `dst`, a C-contiguous block of
// `outer` (the padded shape): one memcpy per innermost row.
void copy_into_padded(char* dst, const char* src, c10::IntArrayRef shape,
                      c10::IntArrayRef outer, size_t item) {
  if (shape.size() <= 1) {
    std::memcpy(dst, src,
                item * static_cast<size_t>(shape.empty() ? 1 : shape[0]));
    return;
  }
  size_t inner_dst = item;
  size_t inner_src = item;
  for (size_t d = 1; d < shape.size(); ++d) {
    inner_dst *= static_cast<size_t>(outer[d]);
    inner_src *= static_cast<size_t>(shape[d]);
  }
  for (int64_t i = 0; i < shape[0]; ++i) {
    copy_into_padded(dst + static_cast<size_t>(i) * inner_dst,
                     src + static_cast<size_t>(i) * inner_src, shape.slice(1),
                     outer.slice(1), item);
  }
}

// `get_padded` for stack dim 0 over CPU leaves of one dtype, contiguous and
// untracked by autograd: one tensor filled with `value`, then each leaf's
// bytes copied into its corner. Undefined for any other case (the general
// path pads and stacks).
at::Tensor padded_by_bytes(const std::vector<at::Tensor>& leaves,
                           const std::vector<int64_t>& shape, int64_t stack_dim,
                           const at::Scalar& value) {
  const bool grad_mode = c10::GradMode::is_enabled();
  if (stack_dim != 0) return {};
  // A padding value the dtype holds exactly (otherwise the general path's
  // conversion applies).
  const at::ScalarType dtype = leaves[0].scalar_type();
  const double v = value.toDouble();
  if (dtype == at::kBool ? v != 0.0 && v != 1.0
                         : !at::isFloatingType(dtype) && v != std::trunc(v)) {
    return {};
  }
  for (const auto& t : leaves) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (!detail::cpu_bytes(impl) || !detail::untracked(impl, grad_mode) ||
        t.scalar_type() != dtype) {
      return {};
    }
  }
  std::vector<int64_t> out_shape{static_cast<int64_t>(leaves.size())};
  out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  at::Tensor out = at::full(out_shape, value, leaves[0].options());
  int64_t per = 1;
  for (int64_t s : shape) per *= s;
  const size_t item = out.element_size();
  char* base = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].numel() == 0) continue;
    copy_into_padded(base + i * static_cast<size_t>(per) * item,
                     detail::bytes_of(leaves[i].unsafeGetTensorImpl()),
                     leaves[i].sizes(), shape, item);
  }
  return out;
}

// The largest size of each dim among `tensors` (of one number of dims).
std::vector<int64_t> max_shape(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> out = tensors[0].sizes().vec();
  for (const auto& t : tensors) {
    for (size_t d = 0; d < out.size(); ++d) {
      out[d] = std::max(out[d], t.size(static_cast<int64_t>(d)));
    }
  }
  return out;
}

// `get_padded`'s checks: one number of dims and one dtype.
void check_paddable(const char* op, const NestedKey& key,
                    const std::vector<at::Tensor>& leaves) {
  for (size_t i = 1; i < leaves.size(); ++i) {
    TORCH_CHECK(leaves[i].dim() == leaves[0].dim(), op, ": key ", key.str(),
                " has shape ", shape_str(leaves[0].sizes()), " in ", member(0),
                " and ", shape_str(leaves[i].sizes()), " in ", member(i),
                ": a padded tensor needs the same number of dims");
    TORCH_CHECK(leaves[i].scalar_type() == leaves[0].scalar_type(), op,
                ": key ", key.str(), " has dtype ",
                detail::dtype_name(leaves[0].scalar_type()), " in ", member(0),
                " and ", detail::dtype_name(leaves[i].scalar_type()), " in ",
                member(i));
  }
}

// An index of a lazy stack, split at the stack dim: `stack` is the entry
// that indexes it (a full slice when no entry does), `rest` the entries for
// the dicts' own dims, and `out_dim` where the stack dim lands in the
// result (when `keeps`, i.e. `stack` is no integer).
struct Split {
  TensorIndex stack{at::indexing::Slice()};
  std::vector<TensorIndex> rest;
  int64_t out_dim = 0;
  int64_t out_dims = 0;  // the batch dims of the result
  bool keeps = true;
};

bool is_bool_index(const at::Tensor& t) {
  return t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
}

Split split_index(const LazyStackedTensorDict& s,
                  c10::ArrayRef<TensorIndex> indices) {
  const int64_t bd = s.batch_dims();
  const int64_t sd = s.stack_dim();
  const std::string where =
      "a lazy stack with batch_size " + shape_str(s.batch_size());
  int64_t consumed = 0;
  int64_t ellipses = 0;
  int64_t tensors = 0;
  for (const auto& idx : indices) {
    if (idx.is_integer() || idx.is_slice()) {
      ++consumed;
    } else if (idx.is_tensor()) {
      const auto& t = idx.tensor();
      consumed += is_bool_index(t) ? std::max<int64_t>(t.dim(), 1) : 1;
      ++tensors;
    } else if (idx.is_ellipsis()) {
      ++ellipses;
    }
  }
  TORCH_CHECK_INDEX(ellipses <= 1,
                    "an index can only have a single ellipsis ('...')");
  TORCH_CHECK_INDEX(consumed <= bd, "too many indices for ", where, ": ",
                    consumed, " batch dims were indexed");
  TORCH_CHECK_INDEX(tensors <= 1, "an index of ", where,
                    " holds one index tensor or mask at most, got ", tensors);
  Split out;
  bool found = false;
  int64_t dim = 0;
  int64_t out_dims = 0;
  auto place = [&](const TensorIndex& idx, int64_t width, int64_t produced) {
    if (!found && dim <= sd && sd < dim + width) {
      found = true;
      TORCH_CHECK_INDEX(width == 1, "a mask over several dims of ", where,
                        " that include its stack dim (dim ", sd,
                        ") is not supported");
      if (idx.is_tensor()) {
        TORCH_CHECK_INDEX(
            is_bool_index(idx.tensor()) || idx.tensor().dim() == 1,
            "an index tensor at the stack dim (dim ", sd, ") of ", where,
            " must have one dim, got shape ", shape_str(idx.tensor().sizes()));
      }
      out.stack = idx;
      out.keeps = !idx.is_integer();
      out.out_dim = out_dims;
      out_dims += out.keeps ? 1 : 0;
    } else {
      detail::append_index(out.rest, idx);
      out_dims += produced;
    }
    dim += width;
  };
  for (const auto& idx : indices) {
    if (idx.is_none() || idx.is_boolean()) {
      detail::append_index(out.rest, idx);
      ++out_dims;
    } else if (idx.is_ellipsis()) {
      for (int64_t k = 0; k < bd - consumed; ++k) {
        place(TensorIndex(at::indexing::Slice()), 1, 1);
      }
    } else if (idx.is_integer()) {
      place(idx, 1, 0);
    } else if (idx.is_slice()) {
      place(idx, 1, 1);
    } else {
      const auto& t = idx.tensor();
      const bool mask = is_bool_index(t);
      place(idx, mask ? std::max<int64_t>(t.dim(), 1) : 1,
            mask ? 1 : std::max<int64_t>(t.dim(), 1));
    }
  }
  if (!found) out.out_dim = out_dims + (sd - dim);
  out.out_dims = out_dims + (bd - dim);
  return out;
}

// The dicts that the stack entry of `split` selects, by position.
std::vector<int64_t> selected(const LazyStackedTensorDict& s,
                              const Split& split) {
  const auto n = static_cast<int64_t>(s.tensordicts().size());
  const int64_t sd = s.stack_dim();
  const TensorIndex& idx = split.stack;
  std::vector<int64_t> ids;
  if (idx.is_integer()) {
    int64_t i = detail::as_int(idx.integer());
    TORCH_CHECK_INDEX(i >= -n && i < n, "index ", i,
                      " is out of bounds for the stack dim (dim ", sd,
                      ") with size ", n);
    ids.push_back(i < 0 ? i + n : i);
  } else if (idx.is_slice()) {
    const auto& sl = idx.slice();
    TORCH_CHECK_VALUE(detail::as_int(sl.step()) > 0,
                      "step must be greater than zero");
    const detail::SliceRange r = detail::slice_range(sl, n);
    for (int64_t k = 0; k < r.len; ++k) ids.push_back(r.start + k * r.step);
  } else {
    at::Tensor t = idx.tensor().to(at::kCPU);
    if (is_bool_index(t)) {
      TORCH_CHECK_INDEX(t.dim() == 1 && t.size(0) == n,
                        "the mask at the stack dim (dim ", sd, ") has shape ",
                        shape_str(t.sizes()), ", and the stack dim has size ",
                        n);
      t = t.to(at::kBool).nonzero().flatten();
    }
    TORCH_CHECK_INDEX(at::isIntegralType(t.scalar_type(), false),
                      "an index tensor must hold integers or bools, got ",
                      detail::dtype_name(t.scalar_type()));
    t = t.to(at::kLong).contiguous();
    const int64_t* p = t.data_ptr<int64_t>();
    for (int64_t k = 0; k < t.numel(); ++k) {
      TORCH_CHECK_INDEX(p[k] >= -n && p[k] < n, "index ", p[k],
                        " is out of bounds for the stack dim (dim ", sd,
                        ") with size ", n);
      ids.push_back(p[k] < 0 ? p[k] + n : p[k]);
    }
  }
  return ids;
}

TensorDict indexed_member(const TensorDict& td,
                          const std::vector<TensorIndex>& rest) {
  return rest.empty() ? td : td.index(rest);
}

std::vector<int64_t> without_ragged(const LazyStackedTensorDict& s,
                                    const char* op) {
  std::vector<int64_t> b = s.batch_size();
  if (std::find(b.begin(), b.end(), -1) == b.end()) return b;
  const auto& tds = s.tensordicts();
  for (size_t i = 1; i < tds.size(); ++i) {
    TORCH_CHECK(tds[i].batch_size() == tds[0].batch_size(), op,
                ": the tensordicts' batch sizes differ (",
                shape_str(tds[0].batch_size()), " in ", member(0), ", ",
                shape_str(tds[i].batch_size()), " in ", member(i),
                "): use to_padded_tensor");
  }
  return b;
}

}  // namespace

// ---------------------------------------------------------------------------
// Construction and shape
// ---------------------------------------------------------------------------

LazyStackedTensorDict::LazyStackedTensorDict(std::vector<TensorDict> tds,
                                             int64_t stack_dim)
    : tds_(std::move(tds)) {
  TORCH_CHECK_VALUE(!tds_.empty(),
                    "lazy_stack: the list of tensordicts is empty");
  const int64_t bd = tds_[0].batch_dims();
  for (size_t i = 1; i < tds_.size(); ++i) {
    TORCH_CHECK(tds_[i].batch_dims() == bd,
                "lazy_stack: the tensordicts must have the same number of "
                "batch dims: tensordicts[0] has batch_size ",
                shape_str(tds_[0].batch_size()), " and tensordicts[", i,
                "] has ", shape_str(tds_[i].batch_size()));
  }
  stack_dim_ = detail::wrap_dim("lazy_stack", stack_dim, bd + 1,
                                tds_[0].batch_size(), "TensorDicts");
}

LazyStackedTensorDict lazy_stack(std::vector<TensorDict> tds, int64_t dim) {
  return LazyStackedTensorDict(std::move(tds), dim);
}

std::vector<int64_t> LazyStackedTensorDict::batch_size() const {
  // The dicts have one number of batch dims (checked on construction).
  return merged_shape(
      shapes_of(tds_.size(), [&](size_t i) { return tds_[i].batch_size(); }),
      stack_dim_);
}

int64_t LazyStackedTensorDict::batch_dims() const {
  return tds_[0].batch_dims() + 1;
}

c10::optional<at::Device> LazyStackedTensorDict::device() const {
  const auto d = tds_[0].device();
  for (const auto& td : tds_) {
    if (td.device() != d) return c10::nullopt;
  }
  return d;
}

// ---------------------------------------------------------------------------
// Keys and reads
// ---------------------------------------------------------------------------

std::vector<NestedKey> LazyStackedTensorDict::keys(bool include_nested,
                                                   bool leaves_only) const {
  std::vector<NestedKey> out;
  for (auto& key : tds_[0].keys(include_nested, leaves_only)) {
    if (contains(key)) out.push_back(std::move(key));
  }
  return out;
}

bool LazyStackedTensorDict::contains(const NestedKey& key) const {
  const Kind k = kind_at(tds_[0], key);
  if (k == Kind::kMissing) return false;
  return std::all_of(tds_.begin(), tds_.end(), [&](const TensorDict& td) {
    return kind_at(td, key) == k;
  });
}

std::vector<int64_t> LazyStackedTensorDict::get_item_shape(
    const NestedKey& key) const {
  const auto leaves = leaves_at(*this, "get_item_shape", key);
  return merged_shape(
      shapes_of(leaves.size(), [&](size_t i) { return leaves[i].sizes(); }),
      stack_dim_);
}

at::Tensor LazyStackedTensorDict::get(const NestedKey& key) const {
  const auto leaves = leaves_at(*this, "get", key);
  check_same_shape("get", key, leaves,
                   ", so it cannot be stacked: read it with get_list or "
                   "get_padded");
  return at::stack(leaves, stack_dim_);
}

std::vector<at::Tensor> LazyStackedTensorDict::get_list(
    const NestedKey& key) const {
  return leaves_at(*this, "get_list", key);
}

at::Tensor LazyStackedTensorDict::get_padded(const NestedKey& key,
                                             double padding_value) const {
  auto leaves = leaves_at(*this, "get_padded", key);
  check_paddable("get_padded", key, leaves);
  const auto shape = max_shape(leaves);
  at::Tensor fast = padded_by_bytes(leaves, shape, stack_dim_, padding_value);
  if (fast.defined()) return fast;
  for (auto& t : leaves) t = pad_to(t, shape, padding_value);
  return at::stack(leaves, stack_dim_);
}

LazyStackedTensorDict LazyStackedTensorDict::get_tensordict(
    const NestedKey& key) const {
  check_kind(*this, "get_tensordict", key, Kind::kDict);
  std::vector<TensorDict> subs;
  subs.reserve(tds_.size());
  for (const auto& td : tds_) subs.push_back(td.get_tensordict(key));
  return LazyStackedTensorDict(std::move(subs), stack_dim_);
}

// ---------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------

IndexedLazyStackedTensorDict LazyStackedTensorDict::operator[](
    int64_t i) const {
  std::vector<TensorIndex> v;
  v.emplace_back(i);
  return IndexedLazyStackedTensorDict(*this, std::move(v));
}

IndexedLazyStackedTensorDict LazyStackedTensorDict::operator[](
    const TensorIndex& index) const {
  std::vector<TensorIndex> v;
  detail::append_index(v, index);
  return IndexedLazyStackedTensorDict(*this, std::move(v));
}

LazyStackedTensorDict LazyStackedTensorDict::index(
    c10::ArrayRef<TensorIndex> indices) const {
  const Split split = split_index(*this, indices);
  TORCH_CHECK_INDEX(
      split.keeps, "index: an integer at the stack dim (dim ", stack_dim_,
      ") selects one tensordict, which is a TensorDict: read "
      "it with s[i] (stack dim 0) or tensordicts()[i].index(...)");
  const auto ids = selected(*this, split);
  TORCH_CHECK_INDEX(
      !ids.empty(), "index: the index selects none of the lazy stack's ",
      tds_.size(), " tensordicts, and a lazy stack holds one at least");
  std::vector<TensorDict> out;
  out.reserve(ids.size());
  for (int64_t i : ids) {
    out.push_back(indexed_member(tds_[static_cast<size_t>(i)], split.rest));
  }
  return LazyStackedTensorDict(std::move(out), split.out_dim);
}

const LazyStackedTensorDict& LazyStackedTensorDict::index_put_(
    c10::ArrayRef<TensorIndex> indices, const TensorDict& value) const {
  const Split split = split_index(*this, indices);
  const auto ids = selected(*this, split);
  // The part of `value` for each selected dict.
  std::vector<TensorDict> parts;
  if (split.keeps) {
    const int64_t p = split.out_dim - (split.out_dims - value.batch_dims());
    if (p >= 0) {
      TORCH_CHECK(value.batch_size()[static_cast<size_t>(p)] ==
                      static_cast<int64_t>(ids.size()),
                  "index_put_: the value's batch_size ",
                  shape_str(value.batch_size()), " has ",
                  value.batch_size()[static_cast<size_t>(p)],
                  " elements at dim ", p,
                  ", which meets the stack dim, where the index selects ",
                  ids.size(), " tensordicts");
      parts = value.unbind(p);
    }
  }
  if (parts.empty()) parts.assign(ids.size(), value);
  // One write per dict: a dict selected twice takes the last part, as
  // LibTorch's index_put_ of repeated indices keeps one of them.
  std::map<int64_t, size_t> last;
  for (size_t k = 0; k < ids.size(); ++k) last[ids[k]] = k;
  std::vector<detail::IndexPut> writes;
  writes.reserve(last.size());
  for (const auto& [id, k] : last) {
    TensorDictImpl& dst = TensorDictImpl::of(tds_[static_cast<size_t>(id)]);
    detail::NormalizedIndex norm;
    if (!split.rest.empty()) {
      norm = detail::normalize_index(dst, split.rest);
    } else if (dst.batch_dims() > 0) {
      norm =
          detail::normalize_index(dst, {TensorIndex(at::indexing::Ellipsis)});
    } else {
      norm.all_int = false;
    }
    writes.push_back(
        detail::IndexPut{&dst, std::move(norm), &TensorDictImpl::of(parts[k])});
  }
  detail::index_put_all(writes);
  return *this;
}

IndexedLazyStackedTensorDict& IndexedLazyStackedTensorDict::operator=(
    const TensorDict& value) && {
  parent_.index_put_(index_, value);
  return *this;
}

TensorDict IndexedLazyStackedTensorDict::member() const {
  const Split split = split_index(parent_, index_);
  TORCH_CHECK_INDEX(!split.keeps, "the index keeps the stack dim (dim ",
                    parent_.stack_dim(),
                    ") of the lazy stack, so it selects a lazy stack, not one "
                    "tensordict: read it as a LazyStackedTensorDict");
  const auto ids = selected(parent_, split);
  return indexed_member(parent_.tensordicts()[static_cast<size_t>(ids[0])],
                        split.rest);
}

LazyStackedTensorDict IndexedLazyStackedTensorDict::value() const {
  return parent_.index(index_);
}

// ---------------------------------------------------------------------------
// Copies, functions, comparisons
// ---------------------------------------------------------------------------

namespace {

template <typename Fn>
LazyStackedTensorDict each(const LazyStackedTensorDict& s, Fn&& fn) {
  std::vector<TensorDict> out;
  out.reserve(s.tensordicts().size());
  for (const auto& td : s.tensordicts()) out.push_back(fn(td));
  return LazyStackedTensorDict(std::move(out), s.stack_dim());
}

void check_pairable(const char* op, const LazyStackedTensorDict& a,
                    const LazyStackedTensorDict& b) {
  TORCH_CHECK(a.tensordicts().size() == b.tensordicts().size(), op,
              ": the lazy stacks hold ", a.tensordicts().size(), " and ",
              b.tensordicts().size(), " tensordicts");
  TORCH_CHECK(a.stack_dim() == b.stack_dim(), op,
              ": the lazy stacks are stacked along dims ", a.stack_dim(),
              " and ", b.stack_dim());
}

// Dict `i` of the result is `fn` of dict `i` of every stack (which must
// all hold as many dicts along the same stack dim), stacked along
// `stack_dim`.
template <typename Fn>
LazyStackedTensorDict dict_by_dict(
    const char* op, const std::vector<LazyStackedTensorDict>& stacks,
    int64_t stack_dim, Fn&& fn) {
  for (const auto& s : stacks) check_pairable(op, stacks[0], s);
  const size_t n = stacks[0].tensordicts().size();
  std::vector<TensorDict> out;
  out.reserve(n);
  std::vector<TensorDict> parts(stacks.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < stacks.size(); ++k) {
      parts[k] = stacks[k].tensordicts()[i];
    }
    out.push_back(fn(parts));
  }
  return LazyStackedTensorDict(std::move(out), stack_dim);
}

}  // namespace

LazyStackedTensorDict LazyStackedTensorDict::to(at::Device device,
                                                bool non_blocking) const {
  return each(
      *this, [&](const TensorDict& td) { return td.to(device, non_blocking); });
}

LazyStackedTensorDict LazyStackedTensorDict::clone() const {
  return each(*this, [](const TensorDict& td) { return td.clone(); });
}

LazyStackedTensorDict LazyStackedTensorDict::apply(
    const TensorDict::LeafFn& fn) const {
  return each(*this, [&](const TensorDict& td) { return td.apply(fn); });
}

bool LazyStackedTensorDict::all() const {
  return std::all_of(tds_.begin(), tds_.end(),
                     [](const TensorDict& td) { return td.all(); });
}

bool LazyStackedTensorDict::any() const {
  return std::any_of(tds_.begin(), tds_.end(),
                     [](const TensorDict& td) { return td.any(); });
}

LazyStackedTensorDict operator==(const LazyStackedTensorDict& a,
                                 const LazyStackedTensorDict& b) {
  return dict_by_dict(
      "==", {a, b}, a.stack_dim(),
      [](const std::vector<TensorDict>& p) { return p[0] == p[1]; });
}

LazyStackedTensorDict operator!=(const LazyStackedTensorDict& a,
                                 const LazyStackedTensorDict& b) {
  return dict_by_dict(
      "!=", {a, b}, a.stack_dim(),
      [](const std::vector<TensorDict>& p) { return p[0] != p[1]; });
}

// ---------------------------------------------------------------------------
// Dense forms
// ---------------------------------------------------------------------------

TensorDict LazyStackedTensorDict::densify() const {
  without_ragged(*this, "densify");
  std::vector<NestedKey> shared;
  for (auto& key : keys(true)) {
    const Kind k = kind_at(tds_[0], key);
    if (k == Kind::kDict) continue;
    if (k == Kind::kLeaf) {
      check_same_shape("densify", key, leaves_at(*this, "densify", key),
                       ": use to_padded_tensor");
    }
    shared.push_back(std::move(key));
  }
  std::vector<TensorDict> parts;
  parts.reserve(tds_.size());
  for (const auto& td : tds_) parts.push_back(td.select(shared));
  return tensordict::stack(parts, stack_dim_);
}

TensorDict LazyStackedTensorDict::to_padded_tensor(double padding_value,
                                                   bool return_mask) const {
  auto padded_batch = [](const LazyStackedTensorDict& s) {
    std::vector<int64_t> b = s.batch_size();
    for (size_t d = 0, m = 0; d < b.size(); ++d) {
      if (static_cast<int64_t>(d) == s.stack_dim()) continue;
      for (const auto& td : s.tensordicts()) {
        b[d] = std::max(b[d], td.batch_size()[m]);
      }
      ++m;
    }
    return b;
  };
  const NestedKey masks("masks");
  TORCH_CHECK_VALUE(!return_mask || !contains(masks),
                    "to_padded_tensor: the tensordicts hold key masks, "
                    "where the masks would go");
  TensorDict out(padded_batch(*this));
  TensorDict mask_td(out.batch_size());
  for (const auto& key : keys(true)) {
    const Kind k = kind_at(tds_[0], key);
    if (k == Kind::kDict) {
      const auto b = padded_batch(get_tensordict(key));
      out.set(key, TensorDict(b));
      if (return_mask) mask_td.set(key, TensorDict(b));
      continue;
    }
    TORCH_CHECK_VALUE(k == Kind::kLeaf, "to_padded_tensor: key ", key.str(),
                      " holds non-tensor data, which cannot be padded");
    auto leaves = leaves_at(*this, "to_padded_tensor", key);
    check_paddable("to_padded_tensor", key, leaves);
    const auto shape = max_shape(leaves);
    std::vector<at::Tensor> valid;
    for (auto& t : leaves) {
      if (return_mask) {
        valid.push_back(pad_to(
            at::ones(t.sizes(), t.options().dtype(at::kBool)), shape, false));
      }
      t = pad_to(t, shape, padding_value);
    }
    out.set(key, at::stack(leaves, stack_dim_));
    if (return_mask) mask_td.set(key, at::stack(valid, stack_dim_));
  }
  if (return_mask) out.set(masks, mask_td);
  return out;
}

// ---------------------------------------------------------------------------
// Joins
// ---------------------------------------------------------------------------

LazyStackedTensorDict detail::cat_lazy(
    const std::vector<LazyStackedTensorDict>& stacks, int64_t dim) {
  TORCH_CHECK_VALUE(!stacks.empty(), "cat: the list of lazy stacks is empty");
  const auto& first = stacks[0];
  const int64_t d = detail::wrap_dim("cat", dim, first.batch_dims(),
                                     first.batch_size(), "a lazy stack");
  for (size_t k = 1; k < stacks.size(); ++k) {
    TORCH_CHECK(stacks[k].stack_dim() == first.stack_dim(),
                "cat: the lazy stacks are stacked along dims ",
                first.stack_dim(), " and ", stacks[k].stack_dim());
  }
  if (d == first.stack_dim()) {
    std::vector<TensorDict> all;
    for (const auto& s : stacks) {
      all.insert(all.end(), s.tensordicts().begin(), s.tensordicts().end());
    }
    return LazyStackedTensorDict(std::move(all), d);
  }
  const int64_t member_dim = d < first.stack_dim() ? d : d - 1;
  return dict_by_dict("cat", stacks, first.stack_dim(),
                      [&](const std::vector<TensorDict>& parts) {
                        return tensordict::cat(parts, member_dim);
                      });
}

LazyStackedTensorDict detail::stack_lazy(
    const std::vector<LazyStackedTensorDict>& stacks, int64_t dim) {
  TORCH_CHECK_VALUE(!stacks.empty(), "stack: the list of lazy stacks is empty");
  const auto& first = stacks[0];
  const int64_t d = detail::wrap_dim("stack", dim, first.batch_dims() + 1,
                                     first.batch_size(), "lazy stacks");
  const int64_t sd = first.stack_dim();
  const int64_t member_dim = d <= sd ? d : d - 1;
  return dict_by_dict("stack", stacks, d <= sd ? sd + 1 : sd,
                      [&](const std::vector<TensorDict>& parts) {
                        return tensordict::stack(parts, member_dim);
                      });
}

}  // namespace tensordict
