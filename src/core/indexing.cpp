// Indexing over the batch dims: `index`, `td[i]`, chained `td[a][b]`, and
// the row gather of the replay and rollout buffers.
#include "core/indexing.h"

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <algorithm>

#include "core/compat.h"
#include "core/internal.h"
#include "core/row_copy.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using at::indexing::TensorIndex;
using namespace detail;  // NOLINT(google-build-using-namespace)

namespace detail {

// ---------------------------------------------------------------------------
// Index normalization
// ---------------------------------------------------------------------------

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

namespace {

void check_has_batch_dims(const TensorDictImpl& impl) {
  TORCH_CHECK_INDEX(impl.batch_dims() > 0,
                    "cannot index a TensorDict with no batch dimensions "
                    "(batch_size [])");
}

// Integer `i` over batch dim `dim` of `impl`, made non-negative.
int64_t checked_int_index(const TensorDictImpl& impl, int64_t dim, int64_t i) {
  const int64_t size = impl.batch_size[static_cast<size_t>(dim)];
  TORCH_CHECK_INDEX(i >= -size && i < size, "index ", i,
                    " is out of bounds for dim ", dim, " with size ", size,
                    " of TensorDict with batch_size ",
                    shape_str(impl.batch_size));
  return i < 0 ? i + size : i;
}

}  // namespace

NormalizedIndex normalize_index(const TensorDictImpl& impl,
                                c10::ArrayRef<TensorIndex> indices) {
  check_has_batch_dims(impl);
  const int64_t bd = impl.batch_dims();
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
  TORCH_CHECK_INDEX(
      consumed <= bd, "too many indices for TensorDict with batch_size ",
      shape_str(impl.batch_size), ": ", consumed, " batch dims were indexed");
  NormalizedIndex out;
  out.indices.reserve(indices.size() + static_cast<size_t>(bd));
  int64_t dim = 0;
  for (const auto& idx : indices) {
    if (idx.is_integer()) {
      const int64_t i = checked_int_index(impl, dim, as_int(idx.integer()));
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

SliceRange slice_range(const at::indexing::Slice& s, int64_t size) {
  const int64_t step = as_int(s.step());
  auto clamp = [&](int64_t v) {
    if (v < 0) v += size;
    return std::min(std::max<int64_t>(v, 0), size);
  };
  const int64_t start = clamp(as_int(s.start()));
  const int64_t stop = clamp(as_int(s.stop()));
  const int64_t len =
      stop > start && step > 0 ? (stop - start + step - 1) / step : 0;
  return {start, step, len};
}

// The batch shape that `norm` selects from `batch_size`.
std::vector<int64_t> indexed_shape(const TensorDictImpl& impl,
                                   const NormalizedIndex& norm) {
  if (norm.all_int) {
    return std::vector<int64_t>(
        impl.batch_size.begin() + static_cast<int64_t>(norm.ints.size()),
        impl.batch_size.end());
  }
  // Integers and positive-step slices: the shape by Python's slice rules.
  if (std::all_of(norm.indices.begin(), norm.indices.end(),
                  [](const TensorIndex& t) {
                    return t.is_integer() ||
                           (t.is_slice() && as_int(t.slice().step()) > 0);
                  })) {
    std::vector<int64_t> out;
    size_t d = 0;
    for (const auto& t : norm.indices) {
      if (t.is_slice()) {
        out.push_back(slice_range(t.slice(), impl.batch_size[d]).len);
      }
      ++d;
    }
    out.insert(out.end(), impl.batch_size.begin() + static_cast<int64_t>(d),
               impl.batch_size.end());
    return out;
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

// Row `i` of `t` along dim 0: what `t.select(0, i)` returns, built without
// the dispatcher for plain dense CPU/CUDA tensors that do not require grad
// (the dispatched op costs several times more than the view itself). The
// view is registered with autograd exactly as LibTorch's view ops register
// theirs (`as_view`), so it shares the version counter and in-place ops on it
// are tracked. A tensor that requires grad takes `select`, whose autograd
// kernel also gives the view its backward node (SelectBackward): without it,
// the row would be a leaf of its own and gradients would not reach `t`.
at::Tensor row_view(const at::Tensor& t, int64_t i) {
  c10::TensorImpl* bi = t.unsafeGetTensorImpl();
  if (t.dim() == 0 || t.layout() != at::kStrided ||
      !(t.is_cpu() || t.is_cuda()) || t.is_quantized() ||
      detail::has_names(t) || !bi->has_storage() ||
      (bi->autograd_meta() != nullptr && bi->requires_grad())) {
    return t.select(0, i);
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW,
                                                   c10::Storage(bi->storage()),
                                                   bi->key_set(), bi->dtype());
  impl->set_sizes_and_strides(bi->sizes().slice(1), bi->strides().slice(1));
  impl->set_storage_offset(bi->storage_offset() + i * bi->strides()[0]);
  at::Tensor view(std::move(impl));
  if (t.is_inference()) return view;  // no version counter, no autograd
  return detail::as_view(t, view);
}

namespace {

// Where each dim of an index's result comes from (for the stack dims of
// non-tensor stacks): an integer, or a 0-d integer tensor, removes its dim;
// a slice keeps it; None adds one. With any other tensor (advanced
// indexing) no map is made: every dim of a stack stays a stack dim.
c10::optional<DimMap> index_dim_map(const TensorDictImpl& impl,
                                    const NormalizedIndex& norm) {
  DimMap m;
  m.in_dims = impl.batch_dims();
  int64_t d = 0;
  for (const TensorIndex& idx : norm.indices) {
    if (idx.is_integer() || (idx.is_tensor() && idx.tensor().dim() == 0 &&
                             !is_mask(idx.tensor()))) {
      ++d;
    } else if (idx.is_slice()) {
      m.from.push_back(d++);
    } else if (idx.is_none() || idx.is_boolean()) {
      m.from.push_back(DimMap::kNew);
    } else {
      return c10::nullopt;
    }
  }
  for (; d < m.in_dims; ++d) m.from.push_back(d);
  return m;
}

}  // namespace

ImplPtr index_impl(const TensorDictImpl& impl, const NormalizedIndex& norm,
                   std::vector<int64_t> new_batch) {
  const c10::optional<DimMap> dims = index_dim_map(impl, norm);
  return rebuild(
      impl, std::move(new_batch),
      [&](const KeyPath&, const at::Tensor& t) {
        return t.index(norm.indices);
      },
      nullptr, NoLevelHook(), NonTensors::kIndex, dims ? &*dims : nullptr);
}

int64_t row_index(const TensorDictImpl& impl, int64_t i) {
  check_has_batch_dims(impl);
  return checked_int_index(impl, 0, i);
}

// `index({i})` for one integer, without an index list (what every `td[i]`
// read pays for).
ImplPtr row_impl(const TensorDictImpl& impl, int64_t i) {
  i = row_index(impl, i);
  DimMap dims;  // dim 0 goes; the others stay, in order
  dims.in_dims = impl.batch_dims();
  for (int64_t d = 1; d < dims.in_dims; ++d) dims.from.push_back(d);
  return rebuild(
      impl,
      std::vector<int64_t>(impl.batch_size.begin() + 1, impl.batch_size.end()),
      [&](const KeyPath&, const at::Tensor& t) { return row_view(t, i); },
      nullptr, NoLevelHook(), NonTensors::kIndex, &dims);
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------

TensorDict TensorDict::index(c10::ArrayRef<TensorIndex> indices) const {
  if (indices.size() == 1 && indices[0].is_integer()) {
    return TensorDict(row_impl(*impl_, as_int(indices[0].integer())));
  }
  NormalizedIndex norm = normalize_index(*impl_, indices);
  auto shape = indexed_shape(*impl_, norm);
  return TensorDict(index_impl(*impl_, norm, std::move(shape)));
}

const TensorDict& TensorDict::index_put_(c10::ArrayRef<TensorIndex> indices,
                                         const TensorDict& value) const {
  NormalizedIndex norm = normalize_index(*impl_, indices);
  detail::index_put(*impl_, norm, *value.impl_);
  return *this;
}

IndexedTensorDict TensorDict::operator[](int64_t i) const {
  return IndexedTensorDict(*this, i);
}

struct IndexedTensorDict::IndexList {
  std::vector<TensorIndex> indices;
};

IndexedTensorDict TensorDict::operator[](const TensorIndex& index) const {
  if (index.is_integer())
    return IndexedTensorDict(*this, as_int(index.integer()));
  auto list = std::make_shared<IndexedTensorDict::IndexList>();
  list->indices.reserve(1);
  append_index(list->indices, index);
  return IndexedTensorDict(*this, std::move(list));
}

namespace detail {

ImplPtr gather_rows(const TensorDictImpl& src, int64_t n,
                    c10::function_ref<void(int64_t*)> draw, at::Tensor& index) {
  std::vector<int64_t> batch = src.batch_size;
  batch[0] = n;
  // `gathered.rows[k]` is leaf k's rows where the row-copy layer gathers
  // them as bytes (core/row_copy.h); the other leaves (autograd, strided,
  // other devices) are gathered by index_select.
  std::vector<const at::Tensor*> leaves;
  leaves.reserve(16);
  leaf_ptrs(src, leaves);
  GatheredRows gathered = gather_leaf_rows(leaves, n, draw);
  index = gathered.index;
  size_t k = 0;
  return rebuild(
      src, std::move(batch),
      [&](const KeyPath&, const at::Tensor& t) {
        if (k < leaves.size() && t.is_same(*leaves[k])) {
          const at::Tensor& g = gathered.rows[k++];
          if (g.defined()) return g;
        }
        return t.index_select(0, index.to(t.device()));
      },
      nullptr, NoLevelHook(), NonTensors::kIndex);
}

ImplPtr gather_rows(const TensorDictImpl& src, const at::Tensor& index) {
  TORCH_INTERNAL_ASSERT(index.device().is_cpu() &&
                        index.scalar_type() == at::kLong && index.dim() == 1 &&
                        index.is_contiguous());
  const int64_t n = index.size(0);
  const int64_t* from = index.data_ptr<int64_t>();
  at::Tensor copy;
  return gather_rows(
      src, n, [&](int64_t* to) { std::copy(from, from + n, to); }, copy);
}

}  // namespace detail
// ===========================================================================
// IndexedTensorDict
// ===========================================================================

IndexedTensorDict::IndexedTensorDict(TensorDict parent, int64_t i)
    : parent_(std::move(parent)), int_index_(i) {}

IndexedTensorDict::IndexedTensorDict(TensorDict parent,
                                     std::shared_ptr<const IndexList> list)
    : parent_(std::move(parent)), list_(std::move(list)) {}

IndexedTensorDict::~IndexedTensorDict() = default;

IndexedTensorDict& IndexedTensorDict::operator=(const TensorDict& value) && {
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

// A write through the proxy: `td[i] = td[i]` writes the rows onto
// themselves.
// NOLINTNEXTLINE(bugprone-unhandled-self-assignment)
IndexedTensorDict& IndexedTensorDict::operator=(
    const IndexedTensorDict& value) && {
  return std::move(*this) = value.value();
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
  return TensorDictImpl::wrap(
      row_impl(TensorDictImpl::of(parent_), int_index_));
}

// `td[i].get(key)` builds the one view it returns, not the whole row (the
// same checks, in the same order, as `value().get(key)`).
at::Tensor IndexedTensorDict::get(const NestedKey& key) const {
  if (list_) return value().get(key);
  const int64_t i = row_index(TensorDictImpl::of(parent_), int_index_);
  return row_view(parent_.get(key), i);
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
IndexedTensorDict IndexedTensorDict::operator[](int64_t i) const {
  return (*this)[TensorIndex(i)];
}

IndexedTensorDict IndexedTensorDict::operator[](
    const TensorIndex& index) const {
  // td[a][b] == td[a + b] when `a` is all integers: they remove their dims,
  // and `b` indexes the dims that follow.
  const bool ints_only =
      !list_ ||
      std::all_of(list_->indices.begin(), list_->indices.end(),
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
