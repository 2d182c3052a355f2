// stack / cat / stack_out / cat_out: joining dicts into fresh or
// preallocated storage, through one write routine (Join):
//   1. check the inputs and gather their leaves (ops/join.h);
//   2. validate `out` (batch size, key conflicts, shapes, castable dtypes);
//   3. create `out`'s missing keys;
//   4. write each key: a fused byte copy (core/row_copy.h) for contiguous
//      CPU leaves of the destination's dtype with no autograd involved,
//      otherwise one `at::stack` / `at::cat` (or its `_out` form) per key.
// Nothing the caller can see is written before every check has passed.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/row_copy.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "ops/common.h"
#include "ops/join.h"
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using detail::bump;
using detail::check_leaf_write;
using detail::collect_rows;
using detail::copy_bytes;
using detail::copyable_device;
using detail::copyable_devices;
using detail::device_name;
using detail::ImplPtr;
using detail::Inputs;
using detail::JoinSpec;
using detail::KeyPath;
using detail::leaf_key;
using detail::LeafName;
using detail::make_impl;
using detail::Node;
using detail::plain_bytes;
using detail::rows_disjoint;
using detail::shape_str;
using detail::TensorDictImpl;
using detail::untracked;
using detail::version_of;
using detail::wrap_dim;
using detail::WriteKind;

namespace {

// ===========================================================================
// stack / cat
// ===========================================================================

// What a destination leaf of `out` must be (or will be created as).
struct OutLeaf {
  std::vector<int64_t> shape;         // the joined shape
  at::ScalarType dtype = at::kFloat;  // destination dtype
  at::Device device = at::kCPU;       // destination device
};

// Whether an existing destination can take the fused byte copy: its
// elements are plain CPU bytes, untracked, in rows that a cat writes as
// one block (contiguous) or a stack row by row (`rows_disjoint`).
bool fusable_dest(const at::Tensor& d, bool is_cat, bool grad_mode) {
  const c10::TensorImpl* t = d.unsafeGetTensorImpl();
  if (t->device_type() != c10::DeviceType::CPU || !plain_bytes(t) ||
      !untracked(t, grad_mode)) {
    return false;
  }
  return is_cat ? t->is_contiguous() : rows_disjoint(d);
}

// What Join::plan_out decides about the dict written, and (`dests`, from
// create_missing on) its leaves.
struct OutPlan {
  ImplPtr created;                              // stack()/cat(): the result
  TensorDictImpl* out;                          // the dict written
  c10::optional<detail::WriteTargets> targets;  // its side of the write
  std::vector<OutLeaf> leaves;                  // per key
  std::vector<char> fused;        // per key: takes the fused byte copy
  std::vector<at::Tensor> dests;  // per key: the leaf written
};

// The core of stack / cat / stack_out / cat_out, in phases, each returning
// (or completing) a named result: gather_inputs (Inputs), plan_out
// (OutPlan), check_against_out, create_missing, copy_fused, copy_general.
// With `out` null (stack() and cat()), the result dict is created here and
// returned: its fused buffers are allocated with at::empty (every element is
// written) and its general-path leaves are LibTorch's stack/cat results,
// stored directly. Nothing is written before every phase that can reject
// the inputs has run; from `create_missing` on, a failure drops the keys
// created so far.
class Join {
 public:
  Join(TensorDictImpl* out_arg, const std::vector<TensorDict>& tds_arg,
       int64_t dim, bool is_cat_arg, const char* op_arg)
      : tds(tds_arg),
        op(op_arg),
        is_cat(is_cat_arg),
        out(out_arg),
        fresh(out_arg == nullptr),
        ref(first_input(tds_arg, op_arg)),
        num_inputs(static_cast<int64_t>(tds_arg.size())),
        grad_mode(c10::GradMode::is_enabled()) {
    const int64_t bd = ref.batch_dims();
    spec = JoinSpec{op, is_cat, 0, num_inputs};
    if (is_cat) {
      TORCH_CHECK_INDEX(bd > 0, op,
                        ": cannot concatenate TensorDicts with no batch "
                        "dimensions (batch_size [])");
      spec.dim = wrap_dim(op, dim, bd, ref.batch_size, "TensorDicts");
    } else {
      spec.dim = wrap_dim(op, dim, bd + 1, ref.batch_size, "TensorDicts");
    }
  }

  ImplPtr run() {
    Inputs inputs = detail::gather_inputs(spec, tds, fresh, grad_mode);
    // stack_out / cat_out write tensors into out's leaves only.
    if (!fresh) detail::check_no_non_tensor(op, "out", ref);
    spec.total = inputs.total;
    OutPlan plan = plan_out(inputs);
    check_against_out(inputs, plan);
    try {
      create_missing(inputs, plan);
      copy_fused(inputs, plan);
      copy_general(inputs, plan);
    } catch (...) {
      plan.targets->undo();
      throw;
    }
    if (fresh) join_non_tensors(*plan.created);
    return plan.created;
  }

 private:
  static const TensorDictImpl& first_input(const std::vector<TensorDict>& tds,
                                           const char* op) {
    TORCH_CHECK_VALUE(!tds.empty(), op,
                      ": expected a non-empty list of TensorDicts");
    return TensorDictImpl::of(tds[0]);
  }

  // The result's batch size; out's keys, shapes and dtypes; which keys take
  // the fused byte copy.
  OutPlan plan_out(const Inputs& inputs) const {
    const size_t num_leaves = inputs.num_leaves;
    const int64_t n = num_inputs;
    OutPlan plan;
    const std::vector<int64_t> result_batch = spec.joined(ref.batch_size);
    plan.out = out;
    if (fresh) {
      plan.created = make_impl(result_batch, inputs.common_device);
      plan.out = plan.created.get();
    }
    TORCH_CHECK(plan.out->batch_size == result_batch, op,
                ": out has batch_size ", shape_str(plan.out->batch_size),
                ", expected ", shape_str(result_batch),
                is_cat ? " (the concatenated batch_size)"
                       : " (the stacked batch_size)");

    // ---- out: keys, shapes, dtypes -------------------------------------------
    plan.leaves.resize(num_leaves);
    plan.targets.emplace(
        op, *plan.out, ref,
        [&](c10::IntArrayRef, const TensorDictImpl& sub) {
          return spec.joined(sub.batch_size);
        },
        [&](const detail::KeyPath& path, const TensorDictImpl& o,
            const TensorDictImpl& r) {
          const std::vector<int64_t> batch = spec.joined(r.batch_size);
          TORCH_CHECK(o.batch_size == batch, op, ": key ", path.key().str(),
                      ": out's sub-TensorDict has batch_size ",
                      shape_str(o.batch_size), ", expected ", shape_str(batch));
        },
        [&](const detail::KeyPath& path, size_t k, const at::Tensor& r,
            const at::Tensor* dst, const TensorDictImpl*,
            const c10::optional<at::Device>& level_device) {
          TORCH_INTERNAL_ASSERT(k < num_leaves);
          OutLeaf& s = plan.leaves[k];
          s.shape = spec.joined(r.sizes());
          if (dst == nullptr) {
            s.dtype = r.scalar_type();
            s.device = level_device ? *level_device : r.device();
            return;
          }
          TORCH_CHECK(
              dst->sizes().equals(s.shape), op, ": key ", path.key().str(),
              ": out's leaf has shape ", shape_str(dst->sizes()), ", expected ",
              shape_str(s.shape),
              is_cat ? " (the concatenated shape)" : " (the stacked shape)");
          check_leaf_write(op, path.key(), *dst, at::Tensor(), WriteKind::kOut);
          s.dtype = dst->scalar_type();
          s.device = dst->device();
        },
        /*may_create=*/true, /*joins=*/fresh);
    TORCH_INTERNAL_ASSERT(plan.targets->leaves().size() == num_leaves);
    plan.fused.assign(num_leaves, 0);
    for (size_t k = 0; k < num_leaves; ++k) {
      const OutLeaf& s = plan.leaves[k];
      const at::ScalarType ref_st =
          c10::typeMetaToScalarType(inputs.ref_dtype[k]);
      if (!inputs.same_dtype[k] || s.dtype != ref_st) {
        for (int64_t i = 0; i < n; ++i) {
          const at::ScalarType st =
              inputs.leaves[static_cast<size_t>(i) * num_leaves + k]
                  ->scalar_type();
          if (c10::canCast(st, s.dtype)) continue;
          std::vector<NestedKey> keys;
          detail::collect_keys(ref, nullptr, true, true, keys);
          TORCH_CHECK_TYPE(false, op, ": key ", keys[k].str(),
                           ": cannot cast input ", i, "'s dtype ",
                           detail::dtype_name(st), " to the destination dtype ",
                           detail::dtype_name(s.dtype));
        }
      }
      // The fused byte copy: dim 0, contiguous CPU sources of the
      // destination's dtype, no autograd (the destination is checked below).
      plan.fused[k] = inputs.src_fusable[k] && inputs.same_dtype[k] &&
                      !inputs.needs_grad[k] && s.dtype == ref_st &&
                      s.device.is_cpu();
    }
    return plan;
  }

  // out's existing leaves against the inputs.
  void check_against_out(const Inputs& inputs, const OutPlan& plan) const {
    const size_t num_leaves = inputs.num_leaves;
    const int64_t n = num_inputs;
    // As LibTorch's out= ops: no input may share memory with out (the fused
    // copy would read rows it has already written), and autograd's in-place
    // rules hold when an input requires grad. Only inputs on out's storage
    // need the overlap test.
    for (size_t k = 0; k < num_leaves; ++k) {
      const OutLeaf& s = plan.leaves[k];
      // Fusable sources are dense CPU tensors: no need to look at each.
      const bool all_cpu = inputs.src_fusable[k] != 0;
      if (!(all_cpu && copyable_device(s.device))) {
        for (int64_t i = 0; i < n; ++i) {
          const at::Tensor& t =
              *inputs.leaves[static_cast<size_t>(i) * num_leaves + k];
          TORCH_CHECK(copyable_devices(t.device(), s.device), op, ": key ",
                      leaf_key(ref, k).str(), ": cannot write input ", i,
                      "'s value on device ", device_name(t.device()),
                      " into a buffer on device ", device_name(s.device));
        }
      }
      if (!plan.targets->leaves()[k].exists) continue;
      const at::Tensor& dest = plan.targets->dest(k);
      const c10::TensorImpl* di = dest.unsafeGetTensorImpl();
      if (!di->has_storage()) continue;
      const c10::StorageImpl* dest_storage =
          di->unsafe_storage().unsafeGetStorageImpl();
      const char* lo = static_cast<const char*>(di->unsafe_storage().data());
      const char* hi = lo + di->unsafe_storage().nbytes();
      const at::Tensor* needs_grad = nullptr;
      for (int64_t i = 0; i < n; ++i) {
        const size_t slot = static_cast<size_t>(i) * num_leaves + k;
        const at::Tensor& t = *inputs.leaves[slot];
        // Fusable sources: their bytes are known, no need to visit them.
        const bool shares =
            all_cpu ? (inputs.data[slot] >= lo && inputs.data[slot] < hi &&
                       lo != hi)
                    : (t.unsafeGetTensorImpl()->has_storage() &&
                       t.unsafeGetTensorImpl()
                               ->unsafe_storage()
                               .unsafeGetStorageImpl() == dest_storage);
        if (shares) {
          check_leaf_write(op, LeafName(ref, k), dest, t, WriteKind::kOut);
        }
        if (inputs.needs_grad[k] && needs_grad == nullptr &&
            t.requires_grad()) {
          needs_grad = &t;
        }
      }
      if (needs_grad != nullptr) {
        check_leaf_write(op, LeafName(ref, k), dest, *needs_grad,
                         WriteKind::kOut);
      }
    }
  }

  // Creates what out lacks.
  void create_missing(const Inputs& inputs, OutPlan& plan) const {
    const size_t num_leaves = inputs.num_leaves;
    plan.dests.resize(num_leaves);
    for (size_t k = 0; k < num_leaves; ++k) {
      if (!plan.targets->leaves()[k].exists) continue;
      plan.dests[k] = plan.targets->dest(k);
      if (plan.fused[k] && !fusable_dest(plan.dests[k], is_cat, grad_mode)) {
        plan.fused[k] = 0;
      }
    }
    plan.targets->create([&](size_t k, const TensorDictImpl&) {
      const OutLeaf& s = plan.leaves[k];
      at::Tensor buf;
      const auto opts = at::TensorOptions().dtype(s.dtype).device(s.device);
      if (!fresh) {
        buf = at::zeros(s.shape, opts);
      } else if (plan.fused[k]) {
        // Rows [0, fast_covered) of a prefilled buffer are written already.
        buf = inputs.prefill.empty() ? at::empty(s.shape, opts)
                                     : inputs.prefill[k];
      }  // else: LibTorch's stack/cat result is stored by copy_general
      plan.dests[k] = buf;
      return buf;
    });
  }

  // The fused byte copy.
  void copy_fused(const Inputs& inputs, const OutPlan& plan) const {
    const size_t num_leaves = inputs.num_leaves;
    const int64_t n = num_inputs;
    std::vector<size_t> fk;  // the fused keys
    for (size_t k = 0; k < num_leaves; ++k) {
      if (plan.fused[k]) fk.push_back(k);
    }
    if (!fk.empty()) {
      const size_t nf = fk.size();
      std::vector<char*> cursor(nf);  // next destination byte
      std::vector<size_t> step(nf);   // stack: dest row stride in bytes
      std::vector<size_t> rb(nf);     // bytes of one dim-0 row
      for (size_t f = 0; f < nf; ++f) {
        const at::Tensor& dest = plan.dests[fk[f]];
        cursor[f] = static_cast<char*>(dest.data_ptr());
        rb[f] = detail::row_bytes(dest);
        step[f] = is_cat ? 0
                         : static_cast<size_t>(dest.stride(0)) *
                               static_cast<size_t>(dest.element_size());
      }
      // Rows [0, fast_covered) of stack()'s prefilled buffers are written
      // (every fused key of stack() has one).
      const int64_t first = inputs.prefill.empty() ? 0 : inputs.fast_covered;
      if (is_cat) {
        for (int64_t i = first; i < n; ++i) {
          const char* const* src =
              inputs.data.data() + static_cast<size_t>(i) * num_leaves;
          const size_t rows =
              static_cast<size_t>(inputs.lens[static_cast<size_t>(i)]);
          for (size_t f = 0; f < nf; ++f) {
            const size_t nbytes = rows * rb[f];
            copy_bytes(cursor[f], src[fk[f]], nbytes);
            cursor[f] += nbytes;
          }
        }
      } else {
        for (size_t f = 0; f < nf; ++f) {
          collect_rows(cursor[f] + static_cast<size_t>(first) * step[f],
                       step[f],
                       inputs.data.data() +
                           static_cast<size_t>(first) * num_leaves + fk[f],
                       num_leaves, n - first, rb[f]);
        }
      }
      if (!fresh) {
        for (size_t f = 0; f < nf; ++f) {
          bump(version_of(plan.dests[fk[f]]));
        }
      }
    }
  }

  // The general path, one LibTorch op per key.
  void copy_general(const Inputs& inputs, OutPlan& plan) const {
    const size_t num_leaves = inputs.num_leaves;
    const int64_t n = num_inputs;
    for (size_t k = 0; k < num_leaves; ++k) {
      if (plan.fused[k]) continue;
      const OutLeaf& s = plan.leaves[k];
      std::vector<at::Tensor> srcs;
      srcs.reserve(static_cast<size_t>(n));
      bool aliases = false;
      for (int64_t i = 0; i < n; ++i) {
        at::Tensor t = *inputs.leaves[static_cast<size_t>(i) * num_leaves + k];
        if (t.scalar_type() != s.dtype || t.device() != s.device) {
          t = t.to(s.device, s.dtype);
        }
        if (plan.dests[k].defined() && t.is_alias_of(plan.dests[k]))
          aliases = true;
        srcs.push_back(std::move(t));
      }
      auto joined = [&]() {
        return is_cat ? at::cat(srcs, spec.dim) : at::stack(srcs, spec.dim);
      };
      if (!plan.dests[k].defined()) {  // stack()/cat(): store the result
        plan.targets->dest(k) = joined();
        continue;
      }
      at::Tensor dest = plan.dests[k];
      if (inputs.needs_grad[k] || aliases || !dest.is_contiguous()) {
        dest.copy_(joined());
      } else if (is_cat) {
        at::cat_out(dest, srcs, spec.dim);
      } else {
        at::stack_out(dest, srcs, spec.dim);
      }
    }
  }

  // stack()/cat(): each non-tensor entry of the result joins the inputs'
  // (core/non_tensor.h: equal NonTensorData stays one, else a stack).
  void join_non_tensors(const TensorDictImpl& created) const {
    detail::visit(
        ref,
        [&](const KeyPath& path, const TensorDictImpl& level) {
          if (level.non_tensor == nullptr) return;
          const NestedKey key = path.key();
          std::vector<const TensorDictImpl*> items;
          items.reserve(tds.size());
          for (const TensorDict& td : tds) {
            items.push_back(
                detail::lookup(TensorDictImpl::of(td), key)->dict.get());
          }
          Node* node = const_cast<Node*>(detail::lookup(created, key));
          node->dict = detail::join_non_tensor(items, spec.dim, !is_cat,
                                               node->dict->batch_size,
                                               node->dict->device);
        },
        detail::Ignore(), detail::Ignore());
  }

  const std::vector<TensorDict>& tds;
  const char* op;
  const bool is_cat;
  TensorDictImpl* const out;  // null: stack() / cat()
  const bool fresh;
  const TensorDictImpl& ref;  // the first input
  const int64_t num_inputs;
  const bool grad_mode;
  JoinSpec spec{};  // `total` set once the inputs are gathered
};

ImplPtr join_into(TensorDictImpl* out, const std::vector<TensorDict>& tds,
                  int64_t dim, bool is_cat, const char* op) {
  return Join(out, tds, dim, is_cat, op).run();
}

// stack_out / cat_out into `parent[index]`.
IndexedTensorDict join_into_indexed(const IndexedTensorDict& out,
                                    const std::vector<TensorDict>& tds,
                                    int64_t dim, bool is_cat, const char* op) {
  TORCH_CHECK_VALUE(!tds.empty(), op,
                    ": expected a non-empty list of TensorDicts");
  // Which keys out's parent lacks (they are added to it, so it must not be
  // locked; a tensor where a dict lives, or the converse, is an error).
  const detail::WriteTargets targets(
      op, TensorDictImpl::of(out.parent()), TensorDictImpl::of(tds[0]),
      [](c10::IntArrayRef, const TensorDictImpl& sub) {
        return sub.batch_size;
      },
      [](const detail::KeyPath&, const TensorDictImpl&, const TensorDictImpl&) {
      },
      [](const detail::KeyPath&, size_t, const at::Tensor&, const at::Tensor*,
         const TensorDictImpl*, const c10::optional<at::Device>&) {});
  TORCH_CHECK(!TensorDictImpl::is_chained_copy(out), op,
              ": out is td[a][b] where td[a] is a copy (an advanced index, "
              "or indices that do not compose): the result would be lost; "
              "index td once instead");
  if (out.is_view() && !targets.creates()) {
    TensorDict view = out.value();
    join_into(&TensorDictImpl::of(view), tds, dim, is_cat, op);
  } else {
    // Missing keys (or an advanced index): stack, then an indexed write,
    // which allocates what the parent lacks.
    IndexedTensorDict target = out;
    std::move(target) =
        TensorDictImpl::wrap(join_into(nullptr, tds, dim, is_cat, op));
  }
  return out;
}

}  // namespace

// ===========================================================================
// Free functions
// ===========================================================================

TensorDict stack(const std::vector<TensorDict>& tds, int64_t dim) {
  return TensorDictImpl::wrap(
      join_into(nullptr, tds, dim, /*is_cat=*/false, "stack"));
}

TensorDict cat(const std::vector<TensorDict>& tds, int64_t dim) {
  return TensorDictImpl::wrap(
      join_into(nullptr, tds, dim, /*is_cat=*/true, "cat"));
}

const TensorDict& stack_out(const TensorDict& out,
                            const std::vector<TensorDict>& tds, int64_t dim) {
  join_into(&TensorDictImpl::of(out), tds, dim, /*is_cat=*/false, "stack_out");
  return out;
}

IndexedTensorDict stack_out(const IndexedTensorDict& out,
                            const std::vector<TensorDict>& tds, int64_t dim) {
  return join_into_indexed(out, tds, dim, /*is_cat=*/false, "stack_out");
}

IndexedTensorDict cat_out(const IndexedTensorDict& out,
                          const std::vector<TensorDict>& tds, int64_t dim) {
  return join_into_indexed(out, tds, dim, /*is_cat=*/true, "cat_out");
}

const TensorDict& cat_out(const TensorDict& out,
                          const std::vector<TensorDict>& tds, int64_t dim) {
  join_into(&TensorDictImpl::of(out), tds, dim, /*is_cat=*/true, "cat_out");
  return out;
}

}  // namespace tensordict
