// The shape ops over the batch dims (reshape, view, unsqueeze, squeeze,
// permute, transpose, flatten, unflatten, expand) and splitting (unbind,
// split, chunk): views where LibTorch gives views, feature dims following on
// the right.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/tree.h"
#include "ops/common.h"
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using detail::ImplPtr;
using detail::removing_dim;
using detail::shape_str;
using detail::TensorDictImpl;
using detail::with_batch;
using detail::with_trailing;
using detail::wrap_dim;

namespace {

// Resolves a -1 in `shape` against `numel` elements.
std::vector<int64_t> infer_shape(const char* op, c10::IntArrayRef shape,
                                 c10::IntArrayRef batch) {
  int64_t numel = 1;
  for (int64_t s : batch) numel *= s;
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t j = 0; j < shape.size(); ++j) {
    if (shape[j] == -1) {
      TORCH_CHECK(infer_at < 0, op, ": only one dimension can be inferred in ",
                  shape_str(shape));
      infer_at = static_cast<int64_t>(j);
    } else {
      TORCH_CHECK(shape[j] >= 0, op, ": invalid shape ", shape_str(shape),
                  " (negative dimension)");
      known *= shape[j];
    }
  }
  std::vector<int64_t> out = shape.vec();
  if (infer_at >= 0) {
    TORCH_CHECK(known != 0 && numel % known == 0, op, ": shape ",
                shape_str(shape),
                " is invalid for a TensorDict with batch_size ",
                shape_str(batch), " (", numel, " elements)");
    out[static_cast<size_t>(infer_at)] = numel / known;
  } else {
    TORCH_CHECK(known == numel, op, ": shape ", shape_str(shape),
                " is invalid for a TensorDict with batch_size ",
                shape_str(batch), " (", numel, " elements)");
  }
  return out;
}

// One output dict per piece: narrow (len >= 0) or select (len < 0) of dim
// `d` at `starts[j]`.
struct Pieces {
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;  // -1: select (the dim is removed)
};

std::vector<ImplPtr> split_impl(const TensorDictImpl& src, size_t d,
                                const Pieces& p) {
  const int64_t dim = static_cast<int64_t>(d);
  std::vector<ImplPtr> out;
  out.reserve(p.starts.size());
  for (size_t j = 0; j < p.starts.size(); ++j) {
    std::vector<int64_t> batch = src.batch_size;
    const detail::DimMap dims =
        p.lengths[j] < 0 ? removing_dim(src, dim)
                         : detail::DimMap::identity(src.batch_dims());
    if (p.lengths[j] < 0) {
      batch.erase(batch.begin() + dim);
    } else {
      batch[d] = p.lengths[j];
    }
    out.push_back(with_batch(
        src, batch,
        [&](const at::Tensor& t) {
          return p.lengths[j] < 0 ? t.select(dim, p.starts[j])
                                  : t.narrow(dim, p.starts[j], p.lengths[j]);
        },
        &dims));
  }
  return out;
}

std::vector<TensorDict> wrap_all(std::vector<ImplPtr> impls) {
  std::vector<TensorDict> out;
  out.reserve(impls.size());
  for (auto& i : impls) out.push_back(TensorDictImpl::wrap(std::move(i)));
  return out;
}

}  // namespace

// ===========================================================================
// Splitting
// ===========================================================================

std::vector<TensorDict> TensorDict::unbind(int64_t dim) const {
  const auto& b = impl_->batch_size;
  const size_t d =
      static_cast<size_t>(wrap_dim("unbind", dim, impl_->batch_dims(), b));
  Pieces p;
  for (int64_t i = 0; i < b[d]; ++i) {
    p.starts.push_back(i);
    p.lengths.push_back(-1);
  }
  return wrap_all(split_impl(*impl_, d, p));
}

std::vector<TensorDict> TensorDict::split(int64_t split_size,
                                          int64_t dim) const {
  const auto& b = impl_->batch_size;
  const size_t d =
      static_cast<size_t>(wrap_dim("split", dim, impl_->batch_dims(), b));
  const int64_t size = b[d];
  TORCH_CHECK_VALUE(split_size > 0 || (split_size == 0 && size == 0),
                    "split: split_size must be positive, got ", split_size,
                    " (TensorDict batch_size ", shape_str(b), ")");
  const int64_t count =
      split_size == 0
          ? 1
          : std::max<int64_t>((size + split_size - 1) / split_size, 1);
  Pieces p;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t start = j * split_size;
    p.starts.push_back(start);
    p.lengths.push_back(std::min(split_size, size - start));
  }
  return wrap_all(split_impl(*impl_, d, p));
}

std::vector<TensorDict> TensorDict::split(c10::IntArrayRef split_sizes,
                                          int64_t dim) const {
  const auto& b = impl_->batch_size;
  const size_t d =
      static_cast<size_t>(wrap_dim("split", dim, impl_->batch_dims(), b));
  int64_t sum = 0;
  Pieces p;
  for (int64_t s : split_sizes) {
    TORCH_CHECK_VALUE(s >= 0, "split: split_sizes ", shape_str(split_sizes),
                      " has a negative entry (TensorDict batch_size ",
                      shape_str(b), ")");
    p.starts.push_back(sum);
    p.lengths.push_back(s);
    sum += s;
  }
  TORCH_CHECK_VALUE(sum == b[d], "split: split_sizes ", shape_str(split_sizes),
                    " sum to ", sum, ", but batch dim ", d, " has size ", b[d],
                    " (TensorDict batch_size ", shape_str(b), ")");
  return wrap_all(split_impl(*impl_, d, p));
}

std::vector<TensorDict> TensorDict::chunk(int64_t chunks, int64_t dim) const {
  const auto& b = impl_->batch_size;
  const size_t d =
      static_cast<size_t>(wrap_dim("chunk", dim, impl_->batch_dims(), b));
  TORCH_CHECK_VALUE(chunks > 0, "chunk: chunks must be positive, got ", chunks,
                    " (TensorDict batch_size ", shape_str(b), ")");
  const int64_t size = b[d];
  const int64_t split_size = (size + chunks - 1) / chunks;
  if (split_size == 0 && size == 0) {
    // Like at::chunk: `chunks` empty pieces.
    std::vector<int64_t> sizes(static_cast<size_t>(chunks), 0);
    return split(sizes, static_cast<int64_t>(d));
  }
  return split(split_size, static_cast<int64_t>(d));
}

// ===========================================================================
// Shape ops
// ===========================================================================

TensorDict TensorDict::reshape(c10::IntArrayRef shape) const {
  const size_t bd = impl_->batch_size.size();
  auto nb = infer_shape("reshape", shape, impl_->batch_size);
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    return t.reshape(with_trailing(nb, t, bd));
  }));
}

TensorDict TensorDict::view(c10::IntArrayRef shape) const {
  const size_t bd = impl_->batch_size.size();
  auto nb = infer_shape("view", shape, impl_->batch_size);
  size_t k = 0;  // the leaf's index, in depth-first order
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    try {
      at::Tensor v = t.view(with_trailing(nb, t, bd));
      ++k;
      return v;
    } catch (const c10::Error&) {
      std::vector<NestedKey> keys;
      detail::collect_keys(*impl_, nullptr, true, true, keys);
      TORCH_CHECK(false, "view: key ", keys[k].str(),
                  ": cannot view batch_size ", shape_str(impl_->batch_size),
                  " as ", shape_str(nb), " (leaf shape ", shape_str(t.sizes()),
                  ", strides ", shape_str(t.strides()), "); use reshape()");
      throw;  // unreachable
    }
  }));
}

TensorDict TensorDict::unsqueeze(int64_t dim) const {
  const auto& b = impl_->batch_size;
  const int64_t d = wrap_dim("unsqueeze", dim, impl_->batch_dims() + 1, b);
  // (Built by push_back: g++ 16 misreads vector::insert here as writing out
  // of bounds, -Warray-bounds.)
  std::vector<int64_t> nb;
  nb.reserve(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    if (static_cast<int64_t>(j) == d) nb.push_back(1);
    if (j < b.size()) nb.push_back(b[j]);
  }
  detail::DimMap dims = detail::DimMap::identity(impl_->batch_dims());
  dims.from.insert(dims.from.begin() + d, detail::DimMap::kNew);
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb, [&](const at::Tensor& t) { return t.unsqueeze(d); }, &dims));
}

TensorDict TensorDict::squeeze() const {
  const auto& b = impl_->batch_size;
  std::vector<int64_t> nb;
  std::vector<int64_t> removed;  // descending
  for (size_t j = b.size(); j-- > 0;) {
    if (b[j] == 1) {
      removed.push_back(static_cast<int64_t>(j));
    }
  }
  for (int64_t s : b) {
    if (s != 1) nb.push_back(s);
  }
  detail::DimMap dims = detail::DimMap::identity(impl_->batch_dims());
  for (int64_t j : removed) dims.from.erase(dims.from.begin() + j);
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb,
      [&](const at::Tensor& t) {
        at::Tensor r = t;
        for (int64_t j : removed) r = r.squeeze(j);
        return r;
      },
      &dims));
}

TensorDict TensorDict::squeeze(int64_t dim) const {
  const auto& b = impl_->batch_size;
  const int64_t d = wrap_dim("squeeze", dim, impl_->batch_dims(), b);
  std::vector<int64_t> nb = b;
  const bool removed = nb[static_cast<size_t>(d)] == 1;
  if (removed) nb.erase(nb.begin() + d);
  const detail::DimMap dims =
      removed ? removing_dim(*impl_, d)
              : detail::DimMap::identity(impl_->batch_dims());
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb, [&](const at::Tensor& t) { return t.squeeze(d); }, &dims));
}

TensorDict TensorDict::permute(c10::IntArrayRef dims) const {
  const auto& b = impl_->batch_size;
  const int64_t bd = impl_->batch_dims();
  std::vector<int64_t> perm;
  std::vector<char> seen(b.size(), 0);
  bool ok = static_cast<int64_t>(dims.size()) == bd;
  for (int64_t x : dims) {
    if (!ok) break;
    if (x < -bd || x >= bd) {
      ok = false;
      break;
    }
    const int64_t w = x < 0 ? x + bd : x;
    if (seen[static_cast<size_t>(w)]) ok = false;
    seen[static_cast<size_t>(w)] = 1;
    perm.push_back(w);
  }
  TORCH_CHECK_INDEX(ok, "permute: dims ", shape_str(dims),
                    " are not a permutation of the batch dims of a TensorDict "
                    "with batch_size ",
                    shape_str(b));
  std::vector<int64_t> nb;
  nb.reserve(perm.size());
  for (int64_t p : perm) nb.push_back(b[static_cast<size_t>(p)]);
  detail::DimMap moved;
  moved.in_dims = bd;
  moved.from.assign(perm.begin(), perm.end());
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb,
      [&](const at::Tensor& t) {
        std::vector<int64_t> full = perm;
        for (int64_t j = bd; j < t.dim(); ++j) full.push_back(j);
        return t.permute(full);
      },
      &moved));
}

TensorDict TensorDict::transpose(int64_t dim0, int64_t dim1) const {
  const auto& b = impl_->batch_size;
  const int64_t d0 = wrap_dim("transpose", dim0, impl_->batch_dims(), b);
  const int64_t d1 = wrap_dim("transpose", dim1, impl_->batch_dims(), b);
  std::vector<int64_t> nb = b;
  std::swap(nb[static_cast<size_t>(d0)], nb[static_cast<size_t>(d1)]);
  detail::DimMap dims = detail::DimMap::identity(impl_->batch_dims());
  std::swap(dims.from[static_cast<size_t>(d0)],
            dims.from[static_cast<size_t>(d1)]);
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb, [&](const at::Tensor& t) { return t.transpose(d0, d1); },
      &dims));
}

TensorDict TensorDict::flatten(int64_t start_dim, int64_t end_dim) const {
  const auto& b = impl_->batch_size;
  const int64_t s = wrap_dim("flatten", start_dim, impl_->batch_dims(), b);
  const int64_t e = wrap_dim("flatten", end_dim, impl_->batch_dims(), b);
  TORCH_CHECK_VALUE(s <= e, "flatten: start_dim ", start_dim,
                    " must not come after end_dim ", end_dim,
                    " (TensorDict batch_size ", shape_str(b), ")");
  std::vector<int64_t> nb(b.begin(), b.begin() + s);
  int64_t prod = 1;
  for (int64_t j = s; j <= e; ++j) prod *= b[static_cast<size_t>(j)];
  nb.push_back(prod);
  nb.insert(nb.end(), b.begin() + e + 1, b.end());
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb, [&](const at::Tensor& t) { return t.flatten(s, e); }));
}

TensorDict TensorDict::unflatten(int64_t dim, c10::IntArrayRef sizes) const {
  const auto& b = impl_->batch_size;
  const int64_t d = wrap_dim("unflatten", dim, impl_->batch_dims(), b);
  TORCH_CHECK_VALUE(!sizes.empty(), "unflatten: sizes must be non-empty");
  const int64_t size = b[static_cast<size_t>(d)];
  // Resolve -1 as reshape does, with the dim's size as the element count.
  std::vector<int64_t> resolved;
  try {
    resolved = infer_shape("unflatten", sizes, {size});
  } catch (const c10::Error&) {
    TORCH_CHECK_VALUE(false, "unflatten: sizes ", shape_str(sizes),
                      " don't multiply up to the size of batch dim ", d, " (",
                      size, ") of a TensorDict with batch_size ", shape_str(b));
  }
  std::vector<int64_t> nb(b.begin(), b.begin() + d);
  nb.insert(nb.end(), resolved.begin(), resolved.end());
  nb.insert(nb.end(), b.begin() + d + 1, b.end());
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().begin() + d);
    shape.insert(shape.end(), resolved.begin(), resolved.end());
    shape.insert(shape.end(), t.sizes().begin() + d + 1, t.sizes().end());
    return t.view(shape);
  }));
}

TensorDict TensorDict::expand(c10::IntArrayRef shape) const {
  const auto& b = impl_->batch_size;
  const size_t bd = b.size();
  bool ok = shape.size() >= bd;
  std::vector<int64_t> nb;
  if (ok) {
    const size_t lead = shape.size() - bd;
    for (size_t j = 0; j < shape.size() && ok; ++j) {
      const int64_t t = shape[j];
      if (j < lead) {
        ok = t >= 0;
        nb.push_back(t);
        continue;
      }
      const int64_t cur = b[j - lead];
      if (t == -1) {
        nb.push_back(cur);
      } else {
        ok = t >= 0 && (cur == t || cur == 1);
        nb.push_back(t);
      }
    }
  }
  TORCH_CHECK(ok, "expand: cannot expand a TensorDict with batch_size ",
              shape_str(b), " to ", shape_str(shape));
  detail::DimMap dims = detail::DimMap::identity(static_cast<int64_t>(bd));
  dims.from.insert(dims.from.begin(), shape.size() - bd, detail::DimMap::kNew);
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb,
      [&](const at::Tensor& t) { return t.expand(with_trailing(nb, t, bd)); },
      &dims));
}

}  // namespace tensordict
