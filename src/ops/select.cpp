// Selection, repetition and padding, with Python tensordict's semantics:
// masked_select, repeat, gather, sort, pad and pad_sequence.
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

using detail::KeyPath;
using detail::leaf_key;
using detail::shape_str;
using detail::TensorDictImpl;
using detail::with_batch;
using detail::with_trailing;
using detail::wrap_dim;

// ===========================================================================
// Selection, repetition and padding (Python's semantics)
// ===========================================================================

namespace {

// "<dtype> <shape>" of an argument tensor, for errors.
std::string tensor_desc(const at::Tensor& t) {
  return t.defined()
             ? detail::dtype_name(t.scalar_type()) + " " + shape_str(t.sizes())
             : std::string("an undefined tensor");
}

}  // namespace

TensorDict TensorDict::masked_select(const at::Tensor& mask) const {
  const auto& b = impl_->batch_size;
  TORCH_CHECK_VALUE(mask.defined() && mask.scalar_type() == at::kBool &&
                        mask.sizes() == c10::IntArrayRef(b),
                    "masked_select: the mask must be a bool tensor of the "
                    "batch shape ",
                    shape_str(b), ", got ", tensor_desc(mask));
  const std::vector<int64_t> nb = {mask.sum().item<int64_t>()};
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    return t.index({mask.to(t.device())});  // no copy on the same device
  }));
}

TensorDict TensorDict::repeat(c10::IntArrayRef repeats) const {
  const auto& b = impl_->batch_size;
  bool ok = repeats.size() == b.size();
  for (size_t d = 0; ok && d < repeats.size(); ++d) ok = repeats[d] >= 0;
  TORCH_CHECK_VALUE(ok,
                    "repeat: expected one non-negative count per batch "
                    "dim of batch_size ",
                    shape_str(b), ", got ", shape_str(repeats));
  std::vector<int64_t> nb = b;
  for (size_t d = 0; d < nb.size(); ++d) nb[d] *= repeats[d];
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    std::vector<int64_t> reps = repeats.vec();
    reps.resize(static_cast<size_t>(t.dim()), 1);
    return t.repeat(reps);
  }));
}

TensorDict TensorDict::gather(int64_t dim, const at::Tensor& index) const {
  const auto& b = impl_->batch_size;
  const int64_t bd = impl_->batch_dims();
  const int64_t d = wrap_dim("gather", dim, bd, b);
  TORCH_CHECK_VALUE(
      index.defined() && index.scalar_type() == at::kLong && index.dim() == bd,
      "gather: index must be an int64 tensor with one dim per "
      "batch dim of batch_size ",
      shape_str(b), ", got ", tensor_desc(index));
  bool fits = true;
  for (int64_t k = 0; k < bd; ++k) {
    fits = fits && (k == d || index.size(k) <= b[static_cast<size_t>(k)]);
  }
  TORCH_CHECK_INDEX(fits, "gather: index of shape ", shape_str(index.sizes()),
                    " is larger than batch_size ", shape_str(b),
                    " outside dim ", d);
  if (index.numel() > 0) {
    const int64_t lo = index.min().item<int64_t>();
    const int64_t hi = index.max().item<int64_t>();
    TORCH_CHECK_INDEX(lo >= 0 && hi < b[static_cast<size_t>(d)],
                      "gather: index values must be in [0, ",
                      b[static_cast<size_t>(d)], ") along batch dim ", d,
                      ", got values in [", lo, ", ", hi, "]");
  }
  const std::vector<int64_t> nb = index.sizes().vec();
  return TensorDictImpl::wrap(with_batch(*impl_, nb, [&](const at::Tensor& t) {
    std::vector<int64_t> view = nb;
    view.resize(static_cast<size_t>(t.dim()), 1);
    const at::Tensor idx =
        index.to(t.device())
            .view(view)
            .expand(with_trailing(nb, t, static_cast<size_t>(bd)));
    return t.gather(d, idx);
  }));
}

TensorDict TensorDict::sort(const NestedKey& key, int64_t dim,
                            bool descending) const {
  const auto& b = impl_->batch_size;
  const int64_t d = wrap_dim("sort", dim, impl_->batch_dims(), b);
  const at::Tensor v = get(key);
  bool ok = v.dim() >= static_cast<int64_t>(b.size()) &&
            v.sizes().slice(0, b.size()) == c10::IntArrayRef(b);
  for (int64_t k = static_cast<int64_t>(b.size()); ok && k < v.dim(); ++k) {
    ok = v.size(k) == 1;
  }
  TORCH_CHECK_VALUE(ok, "sort: key ", key.str(), " has shape ",
                    shape_str(v.sizes()),
                    "; sorting by it needs the batch shape ", shape_str(b),
                    " (trailing dims of size 1 allowed)");
  const at::Tensor order =
      std::get<1>(at::sort(v.reshape(b), /*stable=*/true, d, descending));
  return gather(d, order.to(at::kCPU));
}

TensorDict pad(const TensorDict& td, c10::IntArrayRef pad_size, double value) {
  const auto& impl = TensorDictImpl::of(td);
  const auto& b = impl.batch_size;
  TORCH_CHECK_VALUE(pad_size.size() % 2 == 0 && pad_size.size() <= 2 * b.size(),
                    "pad: pad_size must hold a (before, after) pair per padded "
                    "batch dim, at most ",
                    b.size(), " pairs for batch_size ", shape_str(b), ", got ",
                    shape_str(pad_size));
  std::vector<int64_t> nb = b;
  for (size_t i = 0; i < pad_size.size(); ++i) nb[i / 2] += pad_size[i];
  for (size_t d = 0; d < nb.size(); ++d) {
    TORCH_CHECK_VALUE(nb[d] >= 0, "pad: pad_size ", shape_str(pad_size),
                      " crops batch dim ", d, " of batch_size ", shape_str(b),
                      " below 0");
  }
  return TensorDictImpl::wrap(detail::rebuild(
      impl, nb,
      [&](const KeyPath&, const at::Tensor& t) {
        // constant_pad_nd takes (before, after) pairs from the last dim on.
        std::vector<int64_t> p(2 * static_cast<size_t>(t.dim()), 0);
        for (size_t j = 0; j < pad_size.size() / 2; ++j) {
          const size_t slot = static_cast<size_t>(t.dim()) - 1 - j;
          p[2 * slot] = pad_size[2 * j];
          p[2 * slot + 1] = pad_size[2 * j + 1];
        }
        return at::constant_pad_nd(t, p, value);
      },
      "pad"));
}

TensorDict pad_sequence(const std::vector<TensorDict>& tds, int64_t pad_dim,
                        double padding_value, bool return_mask,
                        const NestedKey& masks_key) {
  TORCH_CHECK_VALUE(!tds.empty(),
                    "pad_sequence: the list of TensorDicts is empty");
  // Python 0.4's tensordict.pad_sequence, step for step. First the longest
  // length along pad_dim, and the masks (one per leaf, of the input's batch
  // shape, plus the padded dim when it is past the batch dims).
  const auto& first = TensorDictImpl::of(tds[0]);
  bool update_batch = true;
  int64_t longest = -1;
  std::vector<TensorDict> in;
  in.reserve(tds.size());
  for (const TensorDict& given : tds) {
    std::vector<at::Tensor> va, vb;
    detail::pair_leaves(first, TensorDictImpl::of(given), "pad_sequence", va,
                        vb);
    const TensorDict td = return_mask ? given.copy() : given;
    const auto& b = TensorDictImpl::of(given).batch_size;
    for (size_t j = 0; j < vb.size(); ++j) {
      const at::Tensor& t = vb[j];
      const NestedKey key = leaf_key(first, j);
      TORCH_CHECK_VALUE(t.dim() > 0, "pad_sequence: key ", key.str(),
                        " is a scalar; scalars cannot be padded");
      const int64_t pos = pad_dim >= 0 ? pad_dim : t.dim() + pad_dim;
      TORCH_CHECK_INDEX(pos >= 0 && pos < t.dim(), "pad_sequence: pad_dim ",
                        pad_dim, " is out of range for key ", key.str(),
                        " of shape ", shape_str(t.sizes()));
      longest = std::max(longest, t.size(pos));
      std::vector<int64_t> mask_shape = b;
      if (pos >= static_cast<int64_t>(b.size())) {
        mask_shape.push_back(t.size(pos));
        update_batch = false;
      }
      if (return_mask) {
        td.set(masks_key.join(key),
               at::ones(mask_shape, at::TensorOptions(at::kBool)));
      }
    }
    in.push_back(td);
  }
  std::vector<int64_t> shape = first.batch_size;
  if (update_batch && !shape.empty()) {
    const int64_t d =
        pad_dim >= 0 ? pad_dim : static_cast<int64_t>(shape.size()) + pad_dim;
    TORCH_CHECK_INDEX(d >= 0 && d < static_cast<int64_t>(shape.size()),
                      "pad_sequence: pad_dim ", pad_dim,
                      " is out of range for batch_size ", shape_str(shape));
    shape[static_cast<size_t>(d)] = longest;
  }
  shape.insert(shape.begin(), static_cast<int64_t>(in.size()));
  // Then each leaf: the inputs' leaves padded along pad_dim and stacked.
  const auto& lead = TensorDictImpl::of(in[0]);
  std::vector<std::vector<at::Tensor>> columns;
  for (const TensorDict& td : in) {
    std::vector<at::Tensor> va, vb;
    detail::pair_leaves(lead, TensorDictImpl::of(td), "pad_sequence", va, vb);
    columns.resize(vb.size());
    for (size_t j = 0; j < vb.size(); ++j) columns[j].push_back(vb[j]);
  }
  size_t j = 0;
  return TensorDictImpl::wrap(detail::rebuild(
      lead, shape,
      [&](const KeyPath& path, const at::Tensor& t) {
        const int64_t pos =
            t.dim() > 1 ? (pad_dim >= 0 ? pad_dim : t.dim() + pad_dim) : 0;
        std::vector<at::Tensor>& column = columns[j++];
        try {
          for (at::Tensor& c : column) c = c.transpose(0, pos);
          return at::pad_sequence(column, /*batch_first=*/true, padding_value)
              .transpose(1, pos + 1);
        } catch (const c10::Error& e) {
          TORCH_CHECK(false, "pad_sequence: key ", path.key().str(), ": ",
                      e.msg());
        }
      },
      "pad_sequence"));
}

}  // namespace tensordict
