// stack / cat / stack_out / cat_out: joining dicts into fresh or
// preallocated storage, through one write routine:
//   1. validate the inputs (non-empty, dim, batch sizes, keys, leaf shapes)
//      in one pass that gathers every input's leaves into a flat table in
//      the first input's depth-first leaf order, noting each source's bytes
//      (the pass is memory-latency bound: it prefetches the dicts, nodes,
//      TensorImpls and storages of the inputs a few steps ahead). A dim-0
//      stack first tries a leaner pass (fast_pass) that covers the inputs
//      shaped node for node like the first one with plain contiguous CPU
//      leaves: the structure of every input first, then each key's leaves
//      down the inputs (a short loop whose loads overlap); for stack() it
//      also copies the covered rows into fresh buffers (dropped on a later
//      failure). The general pass resumes at the first input it does not
//      cover;
//   2. validate `out` (batch size, key conflicts, shapes, castable dtypes);
//   3. create `out`'s missing keys;
//   4. write each key: a fused byte copy for contiguous CPU leaves of the
//      destination's dtype with no autograd involved, otherwise one
//      `at::stack` / `at::cat` (or its `_out` form) per key.
// Nothing the caller can see is written before every check has passed.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "ops/common.h"
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using detail::check_leaf_write;
using detail::copy_bytes;
using detail::copyable_device;
using detail::copyable_devices;
using detail::device_name;
using detail::ImplPtr;
using detail::KeyPath;
using detail::leaf_key;
using detail::LeafName;
using detail::make_impl;
using detail::Match;
using detail::Next;
using detail::Node;
using detail::pair_walk;
using detail::Pairing;
using detail::shape_str;
using detail::TensorDictImpl;
using detail::wrap_dim;
using detail::WriteKind;

namespace {

// ===========================================================================
// stack / cat
// ===========================================================================

// Shape equality without a library call (shapes are short).
inline bool same_shape(c10::IntArrayRef a, c10::IntArrayRef b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  for (size_t j = 0; j < n; ++j) {
    if (a[j] != b[j]) return false;
  }
  return true;
}

struct JoinSpec {
  const char* op;  // "stack", "cat", "stack_out", "cat_out"
  bool is_cat;
  int64_t dim;  // normalized
  int64_t n;    // number of inputs
  // The result batch size of a (sub-)dict whose inputs' batch size is `b`
  // (for cat: `total` is the summed size along `dim`).
  int64_t total = 0;

  std::vector<int64_t> joined(c10::IntArrayRef b) const {
    std::vector<int64_t> out = b.vec();
    if (is_cat) {
      out[static_cast<size_t>(dim)] = total;
    } else {
      out.insert(out.begin() + dim, n);
    }
    return out;
  }
  // Whether `a` and `b` (input shapes) are compatible: equal for stack,
  // equal outside `dim` for cat.
  bool compatible(c10::IntArrayRef a, c10::IntArrayRef b) const {
    if (a.size() != b.size()) return false;
    if (!is_cat) return same_shape(a, b);
    for (size_t j = 0; j < a.size(); ++j) {
      if (static_cast<int64_t>(j) != dim && a[j] != b[j]) return false;
    }
    return true;
  }
};

bool fusable_src(const c10::TensorImpl* t) {
  return t->device_type() == c10::DeviceType::CPU &&
         t->layout() == at::kStrided && t->unsafe_storage() &&
         t->is_contiguous() && !t->is_conj() && !t->is_neg() &&
         !c10::isQIntType(c10::typeMetaToScalarType(t->dtype()));
}

// A fixed-size array of pointers, left uninitialized.
template <typename T>
class SlotArray {
 public:
  void resize(size_t n) { p_.reset(new T[n]); }
  T* data() const noexcept { return p_.get(); }
  T& operator[](size_t i) const noexcept { return p_[i]; }

 private:
  std::unique_ptr<T[]> p_;
};

// What the pass over the inputs learns, per key (the first input's
// depth-first leaf order) and per (input, key).
struct Gathered {
  size_t num_leaves = 0;
  // Per key.
  std::vector<const at::Tensor*> ref_leaves;
  std::vector<c10::IntArrayRef> ref_sizes;
  std::vector<caffe2::TypeMeta> ref_dtype;
  std::vector<c10::DispatchKeySet> ref_keys;  // when ref's leaf is fusable
  std::vector<char> src_fusable;  // every input is a fusable CPU source
  std::vector<char> needs_grad;   // some input requires grad (grad mode on)
  std::vector<char> same_dtype;   // every input has the first input's dtype
  // Per (input, key), at [i * num_leaves + k]; written before being read
  // (so left uninitialized).
  SlotArray<const at::Tensor*> leaves;
  SlotArray<const c10::TensorImpl*> impls;
  SlotArray<const char*> data;  // source bytes, while the key is fusable
};

[[noreturn]] void throw_shape_error(const JoinSpec& spec,
                                    const TensorDictImpl& ref, size_t k,
                                    int64_t i, c10::IntArrayRef sizes,
                                    c10::IntArrayRef ref_sizes) {
  std::vector<NestedKey> keys;
  detail::collect_keys(ref, nullptr, true, true, keys);
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

// Gathers input `i`'s leaves (`in`, matched against `ref`, the first input)
// into slots `base + k`. Returns false on any structural difference (keys,
// leaf-vs-dict, sub-dict batch sizes), which the caller then diagnoses.
bool gather(const TensorDictImpl& ref, const TensorDictImpl& in,
            const JoinSpec& spec, size_t base, size_t& k, Gathered& g) {
  return pair_walk<Pairing::kSameKeys>(
      ref, &in, [&](const Match<const TensorDictImpl>& m) {
        if (m.a.is_dict()) {
          return spec.compatible(m.a.dict->batch_size, m.b->dict->batch_size) &&
                         m.a.is_non_tensor() == m.b->is_non_tensor()
                     ? Next::kDescend
                     : Next::kStop;
        }
        g.leaves[base + k] = &m.b->tensor;
        g.impls[base + k] = m.b->tensor.unsafeGetTensorImpl();
        ++k;
        return Next::kSkip;
      });
}

// Prefetch hints for the pointer-chasing walks over many small inputs.
inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
// Prefetches every cache line of [p, p + bytes).
inline void prefetch_lines(const void* p, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last =
      (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{63};
  for (uintptr_t a = first; a <= last; a += 64) {
    prefetch(reinterpret_cast<const void*>(a));
  }
}
inline void prefetch_nodes(const TensorDictImpl& impl) {
  prefetch_lines(impl.nodes.data(), impl.nodes.size() * sizeof(Node));
}

// The structure half of the fast pass of a dim-0 stack: matches `in`
// against `ref` (the same keys in any order, sub-dicts of the same batch
// size), recording each leaf in slot `k` without reading it. Returns false
// on any other input, which the general pass then handles (and diagnoses).
bool fast_gather(const TensorDictImpl& ref, const TensorDictImpl& in, size_t& k,
                 const at::Tensor** leaves, const c10::TensorImpl** impls) {
  return pair_walk<Pairing::kSameKeys>(
      ref, &in, [&](const Match<const TensorDictImpl>& m) {
        if (m.a.is_dict()) {
          return same_shape(m.a.dict->batch_size, m.b->dict->batch_size) &&
                         m.a.is_non_tensor() == m.b->is_non_tensor()
                     ? Next::kDescend
                     : Next::kStop;
        }
        leaves[k] = &m.b->tensor;
        impls[k++] = m.b->tensor.unsafeGetTensorImpl();
        return Next::kSkip;
      });
}

// The first byte of a leaf with storage (its storage's data at its offset).
inline const char* source_bytes(const c10::TensorImpl* t) {
  return static_cast<const char*>(t->unsafe_storage().data()) +
         t->storage_offset() * static_cast<int64_t>(t->dtype().itemsize());
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
  for (int64_t i = 0; i < kImplAhead && i < rows; ++i) {
    prefetch_lines(impls[static_cast<size_t>(i) * stride + k],
                   sizeof(c10::TensorImpl));
  }
  for (int64_t i = 0; i < rows; ++i) {
    const size_t slot = static_cast<size_t>(i) * stride + k;
    if (i + kImplAhead < rows) {
      prefetch_lines(impls[slot + kImplAhead * stride],
                     sizeof(c10::TensorImpl));
    }
    if (i + kStorageAhead < rows) {
      const c10::TensorImpl* a = impls[slot + kStorageAhead * stride];
      if (const auto* st = a->unsafe_storage().unsafeGetStorageImpl()) {
        prefetch(&st->data_ptr());  // the one field read of it
      }
    }
    const c10::TensorImpl* t = impls[slot];
    // The same dispatch keys as a fusable first leaf imply a dense, CPU,
    // non-conj, non-neg, non-quantized tensor.
    if (t->key_set() != keys || t->dtype() != dtype || !t->is_contiguous() ||
        !same_shape(sizes, t->sizes()) || !t->unsafe_storage()) {
      return i;
    }
    // requires_grad() is an out-of-line call; most leaves have no autograd
    // metadata at all.
    if (grad_mode && t->autograd_meta() != nullptr && t->requires_grad()) {
      return i;
    }
    data[slot] = source_bytes(t);
  }
  return rows;
}

// Copies `rows` rows of `row_bytes` bytes each, row `i` from `src[i *
// stride]` to `dst + i * step`: the byte copy of one key of stack / cat.
void copy_rows(char* dst, size_t step, const char* const* src, size_t stride,
               int64_t rows, size_t row_bytes) {
  constexpr int64_t kAhead = 8;
  const size_t ahead_bytes = std::min<size_t>(row_bytes, 512);
  for (int64_t i = 0; i < rows; ++i) {
    if (i + kAhead < rows) {
      prefetch_lines(src[static_cast<size_t>(i + kAhead) * stride],
                     ahead_bytes);
    }
    copy_bytes(dst, src[static_cast<size_t>(i) * stride], row_bytes);
    dst += step;
  }
}

// Throws the precise error for a structural difference between `ref`
// (input 0) and `in` (input `i`) found by `gather`.
[[noreturn]] void diagnose_structure(const TensorDictImpl& ref,
                                     const TensorDictImpl& in,
                                     const JoinSpec& spec, int64_t i) {
  const std::string name = "input " + std::to_string(i);
  if (!detail::same_keys(ref, in)) {
    detail::throw_key_difference(spec.op, ref, in, "input 0", name.c_str());
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

// What a destination leaf of `out` must be (or will be created as).
struct OutLeaf {
  std::vector<int64_t> shape;         // the joined shape
  at::ScalarType dtype = at::kFloat;  // destination dtype
  at::Device device = at::kCPU;       // destination device
};

// Whether the rows of `d` (along dim 0) are each contiguous and disjoint:
// the byte-copy destination of a dim-0 stack.
bool rows_contiguous(const at::Tensor& d) {
  if (d.dim() == 0) return false;
  int64_t expected = 1;
  for (int64_t j = d.dim() - 1; j >= 1; --j) {
    if (d.size(j) != 1 && d.stride(j) != expected) return false;
    expected *= d.size(j);
  }
  return d.size(0) <= 1 || d.stride(0) >= expected;
}

// Whether an existing destination can take the fused byte copy.
bool fusable_dest(const at::Tensor& d, bool is_cat, bool grad_mode) {
  const c10::TensorImpl* t = d.unsafeGetTensorImpl();
  if (t->device_type() != c10::DeviceType::CPU || t->layout() != at::kStrided ||
      !t->unsafe_storage() || t->is_conj() || t->is_neg() ||
      c10::isQIntType(c10::typeMetaToScalarType(t->dtype())) ||
      (grad_mode && t->requires_grad())) {
    return false;
  }
  return is_cat ? t->is_contiguous() : rows_contiguous(d);
}

// The fast pass over the inputs of a dim-0 stack whose first input's leaves
// are all fusable sources: first the structure of every input (fast_gather),
// then each key's leaves down the inputs (fast_leaf_rows). Returns how many
// inputs it covered: for those, `g.leaves` and `g.data` are filled and every
// per-key flag keeps its initial value. With `prefill` (stack(): one fresh
// contiguous buffer per key), the covered rows are also copied into it.
int64_t fast_pass(const std::vector<TensorDict>& tds, const TensorDictImpl& ref,
                  Gathered& g, bool grad_mode,
                  c10::optional<at::Device>& common_device,
                  const std::vector<at::Tensor>& prefill) {
  const size_t num_leaves = g.num_leaves;
  const int64_t n = static_cast<int64_t>(tds.size());
  const at::Tensor** leaves = g.leaves.data();
  // Lines of a node list like the first input's (plus one for alignment).
  const int nodes_lines =
      static_cast<int>(ref.nodes.size() * sizeof(Node) / 64) + 1;
  int64_t covered = n;
  for (int64_t i = 0; i < n; ++i) {
    // The walk chases pointers through small allocations: prefetch the
    // next inputs' dicts and node lists a few rows ahead.
    if (i + 8 < n)
      prefetch(&TensorDictImpl::of(tds[static_cast<size_t>(i + 8)]));
    if (i + 4 < n) {
      const char* p = reinterpret_cast<const char*>(
          TensorDictImpl::of(tds[static_cast<size_t>(i + 4)]).nodes.data());
      for (int j = 0; j < nodes_lines; ++j) prefetch(p + 64 * j);
    }
    const TensorDictImpl& in = TensorDictImpl::of(tds[static_cast<size_t>(i)]);
    size_t k = 0;
    if (!same_shape(in.batch_size, ref.batch_size) ||
        !fast_gather(ref, in, k, leaves + static_cast<size_t>(i) * num_leaves,
                     g.impls.data() + static_cast<size_t>(i) * num_leaves)) {
      covered = i;
      break;
    }
    if (in.device != common_device) common_device = c10::nullopt;
  }
  // Each key down the covered inputs; a leaf unlike the first input's ends
  // the covered run there.
  for (size_t k = 0; k < num_leaves; ++k) {
    covered =
        fast_leaf_rows(g.ref_leaves[k]->unsafeGetTensorImpl(), k, num_leaves,
                       covered, grad_mode, g.impls.data(), g.data.data());
  }
  for (size_t k = 0; k < prefill.size(); ++k) {
    const size_t nb = prefill[k].nbytes() / static_cast<size_t>(n);
    copy_rows(static_cast<char*>(prefill[k].data_ptr()), nb, g.data.data() + k,
              num_leaves, covered, nb);
  }
  return covered;
}

// The core of stack / cat / stack_out / cat_out, in phases. With `out` null
// (stack() and cat()), the result dict is created here and returned: its fused
// buffers are allocated with at::empty (every element is written) and its
// general-path leaves are LibTorch's stack/cat results, stored directly.
// Nothing is written before every phase that can reject the inputs has run;
// from `create_missing` on, a failure drops the keys created so far.
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
        n(static_cast<int64_t>(tds_arg.size())) {
    const int64_t bd = ref.batch_dims();
    spec = JoinSpec{op, is_cat, 0, n};
    if (is_cat) {
      TORCH_CHECK_INDEX(bd > 0, op,
                        ": cannot concatenate TensorDicts with no batch "
                        "dimensions (batch_size [])");
      spec.dim = wrap_dim(op, dim, bd, ref.batch_size, "TensorDicts");
    } else {
      spec.dim = wrap_dim(op, dim, bd + 1, ref.batch_size, "TensorDicts");
    }
    d = static_cast<size_t>(spec.dim);
  }

  ImplPtr run() {
    gather_inputs();
    // stack_out / cat_out write tensors into out's leaves only.
    if (!fresh) detail::check_no_non_tensor(op, "out", ref);
    plan_out_leaves();
    check_inputs_against_out();
    try {
      create_missing();
      copy_fused();
      copy_general();
    } catch (...) {
      targets->undo();
      throw;
    }
    if (fresh) join_non_tensors();
    return created;
  }

 private:
  static const TensorDictImpl& first_input(const std::vector<TensorDict>& tds,
                                           const char* op) {
    TORCH_CHECK_VALUE(!tds.empty(), op,
                      ": expected a non-empty list of TensorDicts");
    return TensorDictImpl::of(tds[0]);
  }

  // One pass over the inputs: batch sizes, keys, leaf shapes.
  void gather_inputs() {
    detail::leaf_ptrs(ref, g.ref_leaves);
    num_leaves = g.ref_leaves.size();
    g.num_leaves = num_leaves;
    g.ref_sizes.resize(num_leaves);
    g.ref_dtype.resize(num_leaves);
    g.ref_keys.resize(num_leaves);
    for (size_t k = 0; k < num_leaves; ++k) {
      const c10::TensorImpl* t = g.ref_leaves[k]->unsafeGetTensorImpl();
      g.ref_sizes[k] = t->sizes();
      g.ref_dtype[k] = t->dtype();
      g.ref_keys[k] = t->key_set();
    }
    g.src_fusable.resize(num_leaves);
    for (size_t k = 0; k < num_leaves; ++k) {
      g.src_fusable[k] =
          spec.dim == 0 && fusable_src(g.ref_leaves[k]->unsafeGetTensorImpl());
    }
    g.needs_grad.assign(num_leaves, 0);
    g.same_dtype.assign(num_leaves, 1);
    const size_t table_size = num_leaves * static_cast<size_t>(n);
    g.leaves.resize(table_size);
    g.impls.resize(table_size);
    g.data.resize(table_size);
    lens.assign(is_cat ? static_cast<size_t>(n) : 0, 0);
    grad_mode = c10::GradMode::is_enabled();
    common_device = ref.device;
    // The fast pass: a dim-0 stack of inputs shaped exactly like the first,
    // with fusable leaves, covers inputs [0, i0); the general pass below
    // takes over from the first input it does not cover.
    if (!is_cat && spec.dim == 0 && num_leaves > 0 &&
        std::all_of(g.src_fusable.begin(), g.src_fusable.end(),
                    [](char c) { return c != 0; })) {
      // stack(): the rows are copied into fresh buffers as they are
      // validated (a later failure just drops the buffers); the result's
      // leaves live on the CPU unless the inputs are on another device.
      if (fresh && (!ref.device || ref.device->is_cpu())) {
        prefill.resize(num_leaves);
        for (size_t k = 0; k < num_leaves; ++k) {
          prefill[k] = at::empty(
              spec.joined(g.ref_sizes[k]),
              at::TensorOptions().dtype(g.ref_dtype[k]).device(at::kCPU));
        }
      }
      i0 = fast_pass(tds, ref, g, grad_mode, common_device, prefill);
    }
    int64_t gathered = i0;  // inputs [0, gathered) are gathered
    int64_t failed = -1;    // the first input whose gather failed
    for (int64_t i = i0; i < n; ++i) {
      const TensorDictImpl& in =
          TensorDictImpl::of(tds[static_cast<size_t>(i)]);
      const auto& b = in.batch_size;
      if (is_cat) {
        TORCH_CHECK(spec.compatible(ref.batch_size, b), op, ": input ", i,
                    " has batch_size ", shape_str(b),
                    ", which does not match input 0's batch_size ",
                    shape_str(ref.batch_size), " outside dim ", spec.dim);
        lens[static_cast<size_t>(i)] = b[d];
        total += b[d];
      } else {
        TORCH_CHECK(same_shape(b, ref.batch_size), op, ": input ", i,
                    " has batch_size ", shape_str(b), ", expected ",
                    shape_str(ref.batch_size), " (the batch_size of input 0)");
      }
      if (in.device != common_device) common_device = c10::nullopt;
      // The walk chases pointers through many small allocations; prefetch
      // each level of the next inputs a few steps before it is needed.
      auto ahead = [&](int64_t j) -> const TensorDictImpl* {
        return i + j < n ? &TensorDictImpl::of(tds[static_cast<size_t>(i + j)])
                         : nullptr;
      };
      if (const auto* a = ahead(16)) prefetch(a);
      if (const auto* a = ahead(13)) prefetch_nodes(*a);
      if (const auto* a = ahead(10)) {
        for (const auto& nd : a->nodes) {
          if (nd.dict) prefetch(nd.dict.get());
        }
      }
      if (const auto* a = ahead(7)) {
        for (const auto& nd : a->nodes) {
          if (nd.dict) prefetch_nodes(*nd.dict);
        }
      }
      // Gather four inputs ahead, so that their leaves can be prefetched; a
      // structural error is reported when its input's turn comes.
      while (gathered < n && gathered <= i + 4 && failed < 0) {
        size_t k = 0;
        if (gather(ref, TensorDictImpl::of(tds[static_cast<size_t>(gathered)]),
                   spec, static_cast<size_t>(gathered) * num_leaves, k, g) &&
            k == num_leaves) {
          ++gathered;
        } else {
          failed = gathered;
        }
      }
      if (failed == i) diagnose_structure(ref, in, spec, i);
      if (i + 4 < gathered) {
        const c10::TensorImpl* const* row =
            g.impls.data() + static_cast<size_t>(i + 4) * num_leaves;
        for (size_t k = 0; k < num_leaves; ++k) {
          prefetch_lines(row[k], sizeof(c10::TensorImpl));
        }
      }
      if (i + 2 < gathered) {
        const c10::TensorImpl* const* row =
            g.impls.data() + static_cast<size_t>(i + 2) * num_leaves;
        for (size_t k = 0; k < num_leaves; ++k) {
          if (const auto* st =
                  row[k]->unsafe_storage().unsafeGetStorageImpl()) {
            prefetch(st);
          }
        }
      }
      const size_t base = static_cast<size_t>(i) * num_leaves;
      // Leaf shapes and per-key properties.
      for (size_t k = 0; k < num_leaves; ++k) {
        const size_t slot = base + k;
        const c10::TensorImpl* t = g.impls[slot];
        const auto sizes = t->sizes();
        if (!spec.compatible(g.ref_sizes[k], sizes)) {
          throw_shape_error(spec, ref, k, i, sizes, g.ref_sizes[k]);
        }
        if (t->dtype() != g.ref_dtype[k]) g.same_dtype[k] = 0;
        // requires_grad() is an out-of-line call; most leaves have no
        // autograd metadata at all.
        if (grad_mode && t->autograd_meta() != nullptr && t->requires_grad()) {
          g.needs_grad[k] = 1;
        }
        if (g.src_fusable[k]) {
          // The same dispatch keys as a fusable first leaf imply a dense,
          // CPU, non-conj, non-neg, non-quantized tensor.
          if (t->key_set() == g.ref_keys[k]
                  ? (t->is_contiguous() && t->unsafe_storage())
                  : fusable_src(t)) {
            g.data[slot] = source_bytes(t);
          } else {
            g.src_fusable[k] = 0;
          }
        }
      }
    }
  }

  // The result's batch size; out's keys, shapes and dtypes; which keys take
  // the fused byte copy.
  void plan_out_leaves() {
    spec.total = total;
    const std::vector<int64_t> result_batch = spec.joined(ref.batch_size);
    if (fresh) {
      created = make_impl(result_batch, common_device);
      out = created.get();
    }
    TORCH_CHECK(out->batch_size == result_batch, op, ": out has batch_size ",
                shape_str(out->batch_size), ", expected ",
                shape_str(result_batch),
                is_cat ? " (the concatenated batch_size)"
                       : " (the stacked batch_size)");

    // ---- out: keys, shapes, dtypes -------------------------------------------
    slots.resize(num_leaves);
    targets.emplace(
        op, *out, ref,
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
          OutLeaf& s = slots[k];
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
    TORCH_INTERNAL_ASSERT(targets->leaves().size() == num_leaves);
    fused.assign(num_leaves, 0);
    for (size_t k = 0; k < num_leaves; ++k) {
      const OutLeaf& s = slots[k];
      const at::ScalarType ref_st = c10::typeMetaToScalarType(g.ref_dtype[k]);
      if (!g.same_dtype[k] || s.dtype != ref_st) {
        for (int64_t i = 0; i < n; ++i) {
          const at::ScalarType st =
              g.leaves[static_cast<size_t>(i) * num_leaves + k]->scalar_type();
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
      fused[k] = g.src_fusable[k] && g.same_dtype[k] && !g.needs_grad[k] &&
                 s.dtype == ref_st && s.device.is_cpu();
    }
  }

  // out's existing leaves against the inputs.
  void check_inputs_against_out() {
    // As LibTorch's out= ops: no input may share memory with out (the fused
    // copy would read rows it has already written), and autograd's in-place
    // rules hold when an input requires grad. Only inputs on out's storage
    // need the overlap test.
    for (size_t k = 0; k < num_leaves; ++k) {
      const OutLeaf& s = slots[k];
      // Fusable sources are dense CPU tensors: no need to look at each.
      const bool all_cpu = g.src_fusable[k] != 0;
      if (!(all_cpu && copyable_device(s.device))) {
        for (int64_t i = 0; i < n; ++i) {
          const at::Tensor& t =
              *g.leaves[static_cast<size_t>(i) * num_leaves + k];
          TORCH_CHECK(copyable_devices(t.device(), s.device), op, ": key ",
                      leaf_key(ref, k).str(), ": cannot write input ", i,
                      "'s value on device ", device_name(t.device()),
                      " into a buffer on device ", device_name(s.device));
        }
      }
      if (!targets->leaves()[k].exists) continue;
      const at::Tensor& dest = targets->dest(k);
      const c10::TensorImpl* di = dest.unsafeGetTensorImpl();
      if (!di->has_storage()) continue;
      const c10::StorageImpl* dest_storage =
          di->unsafe_storage().unsafeGetStorageImpl();
      const char* lo = static_cast<const char*>(di->unsafe_storage().data());
      const char* hi = lo + di->unsafe_storage().nbytes();
      const at::Tensor* needs_grad = nullptr;
      for (int64_t i = 0; i < n; ++i) {
        const size_t slot = static_cast<size_t>(i) * num_leaves + k;
        const at::Tensor& t = *g.leaves[slot];
        // Fusable sources: their bytes are known, no need to visit them.
        const bool shares =
            all_cpu ? (g.data[slot] >= lo && g.data[slot] < hi && lo != hi)
                    : (t.unsafeGetTensorImpl()->has_storage() &&
                       t.unsafeGetTensorImpl()
                               ->unsafe_storage()
                               .unsafeGetStorageImpl() == dest_storage);
        if (shares) {
          check_leaf_write(op, LeafName(ref, k), dest, t, WriteKind::kOut);
        }
        if (g.needs_grad[k] && needs_grad == nullptr && t.requires_grad()) {
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
  void create_missing() {
    dests.resize(num_leaves);
    for (size_t k = 0; k < num_leaves; ++k) {
      if (!targets->leaves()[k].exists) continue;
      dests[k] = targets->dest(k);
      if (fused[k] &&
          !fusable_dest(dests[k], is_cat, c10::GradMode::is_enabled())) {
        fused[k] = 0;
      }
    }
    targets->create([&](size_t k, const TensorDictImpl&) {
      const OutLeaf& s = slots[k];
      at::Tensor buf;
      const auto opts = at::TensorOptions().dtype(s.dtype).device(s.device);
      if (!fresh) {
        buf = at::zeros(s.shape, opts);
      } else if (fused[k]) {
        // Rows [0, i0) of a prefilled buffer are written already.
        buf = prefill.empty() ? at::empty(s.shape, opts) : prefill[k];
      }  // else: LibTorch's stack/cat result is stored by copy_general
      dests[k] = buf;
      return buf;
    });
  }

  // The fused byte copy.
  void copy_fused() {
    std::vector<size_t> fk;  // the fused keys
    for (size_t k = 0; k < num_leaves; ++k) {
      if (fused[k]) fk.push_back(k);
    }
    if (!fk.empty()) {
      const size_t nf = fk.size();
      std::vector<char*> cursor(nf);      // next destination byte
      std::vector<size_t> step(nf);       // stack: dest row stride in bytes
      std::vector<size_t> row_bytes(nf);  // bytes of one dim-0 row
      for (size_t f = 0; f < nf; ++f) {
        const at::Tensor& dest = dests[fk[f]];
        const size_t itemsize = dest.element_size();
        cursor[f] = static_cast<char*>(dest.data_ptr());
        int64_t row_numel = 1;
        for (int64_t j = 1; j < dest.dim(); ++j) row_numel *= dest.size(j);
        row_bytes[f] = static_cast<size_t>(row_numel) * itemsize;
        step[f] = is_cat ? 0 : static_cast<size_t>(dest.stride(0)) * itemsize;
      }
      // Rows [0, i0) of stack()'s prefilled buffers are written already
      // (every fused key of stack() has one).
      const int64_t first = prefill.empty() ? 0 : i0;
      if (is_cat) {
        for (int64_t i = first; i < n; ++i) {
          const char* const* src =
              g.data.data() + static_cast<size_t>(i) * num_leaves;
          const size_t rows = static_cast<size_t>(lens[static_cast<size_t>(i)]);
          for (size_t f = 0; f < nf; ++f) {
            const size_t nbytes = rows * row_bytes[f];
            copy_bytes(cursor[f], src[fk[f]], nbytes);
            cursor[f] += nbytes;
          }
        }
      } else {
        for (size_t f = 0; f < nf; ++f) {
          copy_rows(
              cursor[f] + static_cast<size_t>(first) * step[f], step[f],
              g.data.data() + static_cast<size_t>(first) * num_leaves + fk[f],
              num_leaves, n - first, row_bytes[f]);
        }
      }
      if (!fresh) {
        for (size_t f = 0; f < nf; ++f) {
          dests[fk[f]].unsafeGetTensorImpl()->bump_version();
        }
      }
    }
  }

  // The general path, one LibTorch op per key.
  void copy_general() {
    for (size_t k = 0; k < num_leaves; ++k) {
      if (fused[k]) continue;
      const OutLeaf& s = slots[k];
      std::vector<at::Tensor> srcs;
      srcs.reserve(static_cast<size_t>(n));
      bool aliases = false;
      for (int64_t i = 0; i < n; ++i) {
        at::Tensor t = *g.leaves[static_cast<size_t>(i) * num_leaves + k];
        if (t.scalar_type() != s.dtype || t.device() != s.device) {
          t = t.to(s.device, s.dtype);
        }
        if (dests[k].defined() && t.is_alias_of(dests[k])) aliases = true;
        srcs.push_back(std::move(t));
      }
      auto joined = [&]() {
        return is_cat ? at::cat(srcs, spec.dim) : at::stack(srcs, spec.dim);
      };
      if (!dests[k].defined()) {  // stack()/cat(): store the result
        targets->dest(k) = joined();
        continue;
      }
      at::Tensor dest = dests[k];
      if (g.needs_grad[k] || aliases || !dest.is_contiguous()) {
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
  void join_non_tensors() {
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
          Node* node = const_cast<Node*>(detail::lookup(*created, key));
          node->dict = detail::join_non_tensor(items, spec.dim, !is_cat,
                                               node->dict->batch_size,
                                               node->dict->device);
        },
        detail::Ignore(), detail::Ignore());
  }

  const std::vector<TensorDict>& tds;
  const char* op;
  const bool is_cat;
  TensorDictImpl* out;
  const bool fresh;
  const TensorDictImpl& ref;
  const int64_t n;
  JoinSpec spec{};
  size_t d = 0;
  // gather_inputs
  Gathered g;
  size_t num_leaves = 0;
  std::vector<int64_t> lens;
  bool grad_mode = false;
  int64_t total = 0;
  c10::optional<at::Device> common_device;
  // The fast pass: a dim-0 stack of inputs shaped exactly like the first,
  // with fusable leaves, covers inputs [0, i0).
  int64_t i0 = 0;
  std::vector<at::Tensor> prefill;  // stack(): rows [0, i0) written
  // plan_out_leaves
  ImplPtr created;
  c10::optional<detail::WriteTargets> targets;  // out's side
  std::vector<OutLeaf> slots;                   // per key
  std::vector<char> fused;
  // create_missing and after
  std::vector<at::Tensor> dests;
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
