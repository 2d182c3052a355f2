// The input half of stack / cat / stack_out / cat_out (ops/join.h).
#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/internal.h"
#include "core/row_copy.h"
#include "core/tree.h"
#include "ops/common.h"
#include "ops/join.h"

namespace tensordict {
namespace detail {
namespace {

[[noreturn]] void throw_shape_error(const JoinSpec& spec,
                                    const TensorDictImpl& ref, size_t k,
                                    int64_t i, c10::IntArrayRef sizes,
                                    c10::IntArrayRef ref_sizes) {
  std::vector<NestedKey> keys;
  collect_keys(ref, nullptr, true, true, keys);
  const std::string key = keys[k].str();
  if (spec.is_cat) {
    TORCH_CHECK(false, spec.op, ": key ", key, ": input ", i, " has shape ",
                shape_str(sizes), ", which does not match input 0's shape ",
                shape_str(ref_sizes), " outside dim ", spec.dim);
  }
  TORCH_CHECK(false, spec.op, ": key ", key, ": input ", i, " has shape ",
              shape_str(sizes), ", expected ", shape_str(ref_sizes),
              " (the shape of input 0)");
  throw;  // unreachable
}

// Gathers the leaves of `in` (an input matched against `ref`, the first
// input: the same keys in any order, sub-dicts of compatible batch sizes)
// into `leaves[k]` and `impls[k]`, in `ref`'s leaf order, without reading
// them. Returns false on any structural difference (keys, leaf-vs-dict,
// sub-dict batch sizes), which the caller then diagnoses.
bool gather(const TensorDictImpl& ref, const TensorDictImpl& in,
            const JoinSpec& spec, size_t& k, const at::Tensor** leaves,
            const c10::TensorImpl** impls) {
  return pair_walk<Pairing::kSameKeys>(
      ref, &in, [&](const Match<const TensorDictImpl>& m) {
        if (m.a.is_dict()) {
          return spec.compatible(m.a.dict->batch_size, m.b->dict->batch_size) &&
                         m.a.is_non_tensor() == m.b->is_non_tensor()
                     ? Next::kDescend
                     : Next::kStop;
        }
        leaves[k] = &m.b->tensor;
        impls[k++] = m.b->tensor.unsafeGetTensorImpl();
        return Next::kSkip;
      });
}

inline void prefetch_nodes(const TensorDictImpl& impl) {
  prefetch_lines(impl.nodes.data(), impl.nodes.size() * sizeof(Node));
}

// The levels of an input's structure, in the order a walk reads them: its
// dict, its node list, its sub-dicts, their node lists. `prefetch_level`
// prefetches level `s` (which needs level `s - 1` in cache to find it).
constexpr int64_t kStructureLevels = 4;
void prefetch_level(const TensorDictImpl& in, int64_t s) {
  if (s == 0) return prefetch(&in);
  if (s == 1) return prefetch_nodes(in);
  for (const auto& nd : in.nodes) {
    if (!nd.dict) continue;
    if (s == 2) {
      prefetch(nd.dict.get());
    } else {
      prefetch_nodes(*nd.dict);
    }
  }
}

// The leaf half of the fast pass: how many of `rows` inputs have, at key `k`
// of the first input's leaf `first`, a leaf like it (the same shape, dtype
// and dispatch keys, contiguous, with storage, not requiring grad). Records
// each such leaf's source bytes. Slots are `[i * stride + k]`.
int64_t fast_leaf_rows(const c10::TensorImpl* first, size_t k, size_t stride,
                       int64_t rows, bool grad_mode,
                       const c10::TensorImpl* const* impls, const char** data) {
  const c10::IntArrayRef sizes = first->sizes();
  const caffe2::TypeMeta dtype = first->dtype();
  const c10::DispatchKeySet keys = first->key_set();
  // The leaves are small allocations, one per input: prefetch each
  // TensorImpl, then its storage, some rows ahead.
  constexpr int64_t kImplAhead = 16;
  constexpr int64_t kStorageAhead = 8;
  const auto impl_at = [&](int64_t i) {
    return impls[static_cast<size_t>(i) * stride + k];
  };
  const auto prefetch_impl = [&](int64_t i) {
    prefetch_lines(impl_at(i), sizeof(c10::TensorImpl));
  };
  const Lookahead ahead(rows);
  for (int64_t i = 0; i < kImplAhead && i < rows; ++i) prefetch_impl(i);
  for (int64_t i = 0; i < rows; ++i) {
    const size_t slot = static_cast<size_t>(i) * stride + k;
    ahead(i, kImplAhead, prefetch_impl);
    ahead(i, kStorageAhead, [&](int64_t j) {
      if (const auto* st =
              impl_at(j)->unsafe_storage().unsafeGetStorageImpl()) {
        prefetch(&st->data_ptr());  // the one field read of it
      }
    });
    const c10::TensorImpl* t = impls[slot];
    // The same dispatch keys as a fusable first leaf imply a dense, CPU,
    // non-conj, non-neg, non-quantized tensor.
    if (t->key_set() != keys || t->dtype() != dtype || !t->is_contiguous() ||
        !same_shape(sizes, t->sizes()) || !t->unsafe_storage() ||
        !untracked(t, grad_mode)) {
      return i;
    }
    data[slot] = bytes_of(t);
  }
  return rows;
}

// Throws the precise error for a structural difference between `ref`
// (input 0) and `in` (input `i`) found by `gather`.
[[noreturn]] void diagnose_structure(const TensorDictImpl& ref,
                                     const TensorDictImpl& in,
                                     const JoinSpec& spec, int64_t i) {
  const std::string name = "input " + std::to_string(i);
  if (!same_keys(ref, in)) {
    throw_key_difference(spec.op, ref, in, "input 0", name.c_str());
  }
  // The same keys: a sub-dict's batch size.
  pair_walk<Pairing::kSameKeys>(
      ref, &in, [&](const KeyPath& path, const Match<const TensorDictImpl>& m) {
        if (!m.a.is_dict()) return Next::kSkip;
        TORCH_CHECK_TYPE(
            m.a.is_non_tensor() == m.b->is_non_tensor(), spec.op, ": key ",
            path.key().str(), " is ",
            m.a.is_non_tensor() ? "non-tensor data" : "a TensorDict",
            " in input 0 but ",
            m.b->is_non_tensor() ? "non-tensor data" : "a TensorDict", " in ",
            name);
        const auto& a = m.a.dict->batch_size;
        const auto& b = m.b->dict->batch_size;
        if (spec.compatible(a, b)) return Next::kDescend;
        if (spec.is_cat) {
          TORCH_CHECK(false, spec.op, ": key ", path.key().str(), ": ", name,
                      " has batch_size ", shape_str(b),
                      ", which does not match input 0's batch_size ",
                      shape_str(a), " outside dim ", spec.dim);
        }
        TORCH_CHECK(false, spec.op, ": key ", path.key().str(), ": ", name,
                    " has batch_size ", shape_str(b), ", expected ",
                    shape_str(a), " (the batch_size of input 0)");
      });
  TORCH_INTERNAL_ASSERT(false, spec.op, ": structural difference not found");
}

// The fast pass over the inputs of a dim-0 stack whose first input's leaves
// are all fusable sources: first the structure of every input (gather),
// then each key's leaves down the inputs (fast_leaf_rows). Sets how many
// inputs it covered (`fast_covered`): for those, `leaves` and `data` are
// filled, `common_device` is updated and every per-key flag keeps its
// initial value. With `prefill` (stack(): one fresh contiguous buffer per
// key), the covered rows are also copied into it.
void fast_pass(const std::vector<TensorDict>& tds, const TensorDictImpl& ref,
               const JoinSpec& spec, Inputs& inputs, bool grad_mode) {
  const size_t num_leaves = inputs.num_leaves;
  const int64_t n = static_cast<int64_t>(tds.size());
  const at::Tensor** leaves = inputs.leaves.data();
  const auto input = [&](int64_t j) -> const TensorDictImpl& {
    return TensorDictImpl::of(tds[static_cast<size_t>(j)]);
  };
  const Lookahead ahead(n);
  int64_t covered = n;
  for (int64_t i = 0; i < n; ++i) {
    // The walk chases pointers through small allocations: prefetch the
    // next inputs' dicts, then their node lists, a few inputs ahead.
    ahead(i, 8, [&](int64_t j) { prefetch(&input(j)); });
    ahead(i, 4, [&](int64_t j) { prefetch_nodes(input(j)); });
    const TensorDictImpl& in = input(i);
    size_t k = 0;
    if (!same_shape(in.batch_size, ref.batch_size) ||
        !gather(ref, in, spec, k, leaves + static_cast<size_t>(i) * num_leaves,
                inputs.impls.data() + static_cast<size_t>(i) * num_leaves)) {
      covered = i;
      break;
    }
    if (in.device != inputs.common_device) inputs.common_device = c10::nullopt;
  }
  // Each key down the covered inputs; a leaf unlike the first input's ends
  // the covered run there.
  for (size_t k = 0; k < num_leaves; ++k) {
    covered = fast_leaf_rows(inputs.ref_leaves[k]->unsafeGetTensorImpl(), k,
                             num_leaves, covered, grad_mode,
                             inputs.impls.data(), inputs.data.data());
  }
  for (size_t k = 0; k < inputs.prefill.size(); ++k) {
    const at::Tensor& buf = inputs.prefill[k];
    const size_t nb = buf.nbytes() / static_cast<size_t>(n);
    collect_rows(static_cast<char*>(buf.data_ptr()), nb, inputs.data.data() + k,
                 num_leaves, covered, nb);
  }
  inputs.fast_covered = covered;
}

}  // namespace

Inputs gather_inputs(const JoinSpec& spec, const std::vector<TensorDict>& tds,
                     bool fresh, bool grad_mode) {
  const TensorDictImpl& ref = TensorDictImpl::of(tds[0]);
  const char* op = spec.op;
  const bool is_cat = spec.is_cat;
  const int64_t num_inputs = spec.n;
  Inputs inputs;
  leaf_ptrs(ref, inputs.ref_leaves);
  const size_t num_leaves = inputs.ref_leaves.size();
  inputs.num_leaves = num_leaves;
  inputs.ref_sizes.resize(num_leaves);
  inputs.ref_dtype.resize(num_leaves);
  inputs.ref_keys.resize(num_leaves);
  for (size_t k = 0; k < num_leaves; ++k) {
    const c10::TensorImpl* t = inputs.ref_leaves[k]->unsafeGetTensorImpl();
    inputs.ref_sizes[k] = t->sizes();
    inputs.ref_dtype[k] = t->dtype();
    inputs.ref_keys[k] = t->key_set();
  }
  inputs.src_fusable.resize(num_leaves);
  for (size_t k = 0; k < num_leaves; ++k) {
    inputs.src_fusable[k] =
        spec.dim == 0 && cpu_bytes(inputs.ref_leaves[k]->unsafeGetTensorImpl());
  }
  inputs.needs_grad.assign(num_leaves, 0);
  inputs.same_dtype.assign(num_leaves, 1);
  const size_t table_size = num_leaves * static_cast<size_t>(num_inputs);
  inputs.leaves.resize(table_size);
  inputs.impls.resize(table_size);
  inputs.data.resize(table_size);
  inputs.lens.assign(is_cat ? static_cast<size_t>(num_inputs) : 0, 0);
  inputs.common_device = ref.device;
  // The fast pass: a dim-0 stack of inputs shaped exactly like the first,
  // with fusable leaves, covers inputs [0, fast_covered); the general pass
  // below takes over from the first input it does not cover.
  if (!is_cat && spec.dim == 0 && num_leaves > 0 &&
      std::all_of(inputs.src_fusable.begin(), inputs.src_fusable.end(),
                  [](char c) { return c != 0; })) {
    // stack(): the rows are copied into fresh buffers as they are
    // validated (a later failure just drops the buffers); the result's
    // leaves live on the CPU unless the inputs are on another device.
    if (fresh && (!ref.device || ref.device->is_cpu())) {
      inputs.prefill.resize(num_leaves);
      for (size_t k = 0; k < num_leaves; ++k) {
        inputs.prefill[k] = at::empty(
            spec.joined(inputs.ref_sizes[k]),
            at::TensorOptions().dtype(inputs.ref_dtype[k]).device(at::kCPU));
      }
    }
    fast_pass(tds, ref, spec, inputs, grad_mode);
  }
  int64_t gathered = inputs.fast_covered;  // [0, gathered) are gathered
  int64_t failed = -1;  // the first input whose gather failed
  const auto input = [&](int64_t j) -> const TensorDictImpl& {
    return TensorDictImpl::of(tds[static_cast<size_t>(j)]);
  };
  const int64_t n = num_inputs;
  const Lookahead ahead(n);
  for (int64_t i = inputs.fast_covered; i < n; ++i) {
    const TensorDictImpl& in = input(i);
    const auto& b = in.batch_size;
    if (is_cat) {
      TORCH_CHECK(spec.compatible(ref.batch_size, b), op, ": input ", i,
                  " has batch_size ", shape_str(b),
                  ", which does not match input 0's batch_size ",
                  shape_str(ref.batch_size), " outside dim ", spec.dim);
      inputs.lens[static_cast<size_t>(i)] = b[static_cast<size_t>(spec.dim)];
      inputs.total += b[static_cast<size_t>(spec.dim)];
    } else {
      TORCH_CHECK(same_shape(b, ref.batch_size), op, ": input ", i,
                  " has batch_size ", shape_str(b), ", expected ",
                  shape_str(ref.batch_size), " (the batch_size of input 0)");
    }
    if (in.device != inputs.common_device) inputs.common_device = c10::nullopt;
    // The walk chases pointers through many small allocations: each level
    // of an input's structure is prefetched 3 inputs before the next one,
    // the last 7 inputs ahead; once an input is gathered (4 ahead), its
    // leaves' TensorImpls, then (2 ahead) their storages.
    for (int64_t s = 0; s < kStructureLevels; ++s) {
      ahead(i, Lookahead::stage(s, kStructureLevels, 3, 7),
            [&](int64_t j) { prefetch_level(input(j), s); });
    }
    // Gather four inputs ahead, so that their leaves can be prefetched; a
    // structural error is reported when its input's turn comes.
    while (gathered < n && gathered <= i + 4 && failed < 0) {
      size_t k = 0;
      const size_t at = static_cast<size_t>(gathered) * num_leaves;
      if (gather(ref, input(gathered), spec, k, inputs.leaves.data() + at,
                 inputs.impls.data() + at) &&
          k == num_leaves) {
        ++gathered;
      } else {
        failed = gathered;
      }
    }
    if (failed == i) diagnose_structure(ref, in, spec, i);
    const auto leaf_impls = [&](int64_t j) {
      return inputs.impls.data() + static_cast<size_t>(j) * num_leaves;
    };
    const Lookahead gathered_ahead(gathered);
    gathered_ahead(i, 4, [&](int64_t j) {
      for (size_t k = 0; k < num_leaves; ++k) {
        prefetch_lines(leaf_impls(j)[k], sizeof(c10::TensorImpl));
      }
    });
    gathered_ahead(i, 2, [&](int64_t j) {
      for (size_t k = 0; k < num_leaves; ++k) {
        const c10::TensorImpl* t = leaf_impls(j)[k];
        if (const auto* st = t->unsafe_storage().unsafeGetStorageImpl()) {
          prefetch(st);
        }
      }
    });
    const size_t base = static_cast<size_t>(i) * num_leaves;
    // Leaf shapes and per-key properties.
    for (size_t k = 0; k < num_leaves; ++k) {
      const size_t slot = base + k;
      const c10::TensorImpl* t = inputs.impls[slot];
      const auto sizes = t->sizes();
      if (!spec.compatible(inputs.ref_sizes[k], sizes)) {
        throw_shape_error(spec, ref, k, i, sizes, inputs.ref_sizes[k]);
      }
      if (t->dtype() != inputs.ref_dtype[k]) inputs.same_dtype[k] = 0;
      if (!untracked(t, grad_mode)) inputs.needs_grad[k] = 1;
      if (inputs.src_fusable[k]) {
        // The same dispatch keys as a fusable first leaf imply a dense,
        // CPU, non-conj, non-neg, non-quantized tensor.
        if (t->key_set() == inputs.ref_keys[k]
                ? (t->is_contiguous() && t->unsafe_storage())
                : cpu_bytes(t)) {
          inputs.data[slot] = bytes_of(t);
        } else {
          inputs.src_fusable[k] = 0;
        }
      }
    }
  }
  return inputs;
}

}  // namespace detail
}  // namespace tensordict
