// Structural operations: stack / cat (into fresh or preallocated storage),
// splitting (unbind / split / chunk) and shape ops over the batch dims.
//
// stack / cat / stack_out / cat_out share one write routine:
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
#include "tensordict/functional.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

using detail::ImplPtr;
using detail::Node;
using detail::TensorDictImpl;
using detail::key_vec_str;
using detail::make_impl;
using detail::shape_str;
using detail::LeafName;
using detail::WriteKind;
using detail::check_leaf_write;
using detail::copy_bytes;
using detail::copyable_device;
using detail::copyable_devices;
using detail::device_name;
using detail::leaf_key;
using detail::KeyPath;
using detail::Match;
using detail::Next;
using detail::Pairing;
using detail::pair_walk;

namespace {

// ===========================================================================
// Shared helpers
// ===========================================================================

// Wraps `dim` into [0, n) (n valid positions, negative counting from the
// end). `what` is "a TensorDict" or "TensorDicts".
int64_t wrap_dim(const char* op, int64_t dim, int64_t n,
                 c10::IntArrayRef batch, const char* what = "a TensorDict") {
  TORCH_CHECK_INDEX(n > 0, op, ": dim ", dim, " is out of range for ", what,
                    " with batch_size ", shape_str(batch),
                    " (no batch dimensions)");
  TORCH_CHECK_INDEX(dim >= -n && dim < n, op, ": dim ", dim,
                    " is out of range for ", what, " with batch_size ",
                    shape_str(batch), " (expected a dim in [", -n, ", ", n - 1,
                    "])");
  return dim < 0 ? dim + n : dim;
}

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
  const char* op;    // "stack", "cat", "stack_out", "cat_out"
  bool is_cat;
  int64_t dim;       // normalized
  int64_t n;         // number of inputs
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
          return spec.compatible(m.a.dict->batch_size,
                                 m.b->dict->batch_size) &&
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
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{63};
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
bool fast_gather(const TensorDictImpl& ref, const TensorDictImpl& in,
                 size_t& k, const at::Tensor** leaves,
                 const c10::TensorImpl** impls) {
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
      prefetch_lines(impls[slot + kImplAhead * stride], sizeof(c10::TensorImpl));
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
      prefetch_lines(src[static_cast<size_t>(i + kAhead) * stride], ahead_bytes);
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
      ref, &in,
      [&](const KeyPath& path, const Match<const TensorDictImpl>& m) {
        if (!m.a.is_dict()) return Next::kSkip;
        TORCH_CHECK_TYPE(m.a.is_non_tensor() == m.b->is_non_tensor(), spec.op,
                         ": key ", path.key().str(), " is ",
                         m.a.is_non_tensor() ? "non-tensor data" : "a TensorDict",
                         " in input 0 but ",
                         m.b->is_non_tensor() ? "non-tensor data" : "a TensorDict",
                         " in ", name);
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
  if (t->device_type() != c10::DeviceType::CPU ||
      t->layout() != at::kStrided || !t->unsafe_storage() || t->is_conj() ||
      t->is_neg() || c10::isQIntType(c10::typeMetaToScalarType(t->dtype())) ||
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
    if (i + 8 < n) prefetch(&TensorDictImpl::of(tds[static_cast<size_t>(i + 8)]));
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
    covered = fast_leaf_rows(g.ref_leaves[k]->unsafeGetTensorImpl(), k,
                             num_leaves, covered, grad_mode, g.impls.data(),
                             g.data.data());
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
      : tds(tds_arg), op(op_arg), is_cat(is_cat_arg), out(out_arg),
        fresh(out_arg == nullptr), ref(first_input(tds_arg, op_arg)),
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
    const size_t slots = num_leaves * static_cast<size_t>(n);
    g.leaves.resize(slots);
    g.impls.resize(slots);
    g.data.resize(slots);
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
          prefill[k] = at::empty(spec.joined(g.ref_sizes[k]),
                                 at::TensorOptions()
                                     .dtype(g.ref_dtype[k])
                                     .device(at::kCPU));
        }
      }
      i0 = fast_pass(tds, ref, g, grad_mode, common_device, prefill);
    }
    int64_t gathered = i0;  // inputs [0, gathered) are gathered
    int64_t failed = -1;    // the first input whose gather failed
    for (int64_t i = i0; i < n; ++i) {
      const TensorDictImpl& in = TensorDictImpl::of(tds[static_cast<size_t>(i)]);
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
                    " has batch_size ",
                    shape_str(b), ", expected ", shape_str(ref.batch_size),
                    " (the batch_size of input 0)");
      }
      if (in.device != common_device) common_device = c10::nullopt;
      // The walk chases pointers through many small allocations; prefetch
      // each level of the next inputs a few steps before it is needed.
      auto ahead = [&](int64_t j) -> const TensorDictImpl* {
        return i + j < n ? &TensorDictImpl::of(tds[static_cast<size_t>(i + j)]) : nullptr;
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
        if (gather(ref, TensorDictImpl::of(tds[static_cast<size_t>(gathered)]), spec,
                   static_cast<size_t>(gathered) * num_leaves, k, g) &&
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
          if (const auto* st = row[k]->unsafe_storage().unsafeGetStorageImpl()) {
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
                      shape_str(o.batch_size), ", expected ",
                      shape_str(batch));
        },
        [&](const detail::KeyPath& path, size_t k, const at::Tensor& r,
            const at::Tensor* d, const TensorDictImpl*,
            const c10::optional<at::Device>& level_device) {
          TORCH_INTERNAL_ASSERT(k < num_leaves);
          OutLeaf& s = slots[k];
          s.shape = spec.joined(r.sizes());
          if (d == nullptr) {
            s.dtype = r.scalar_type();
            s.device = level_device ? *level_device : r.device();
            return;
          }
          TORCH_CHECK(d->sizes().equals(s.shape), op, ": key ",
                      path.key().str(), ": out's leaf has shape ",
                      shape_str(d->sizes()), ", expected ", shape_str(s.shape),
                      is_cat ? " (the concatenated shape)"
                             : " (the stacked shape)");
          check_leaf_write(op, path.key(), *d, at::Tensor(), WriteKind::kOut);
          s.dtype = d->scalar_type();
          s.device = d->device();
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
      std::vector<char*> cursor(nf);     // next destination byte
      std::vector<size_t> step(nf);      // stack: dest row stride in bytes
      std::vector<size_t> row_bytes(nf); // bytes of one dim-0 row
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
          copy_rows(cursor[f] + static_cast<size_t>(first) * step[f], step[f],
                    g.data.data() + static_cast<size_t>(first) * num_leaves +
                        fk[f],
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
          node->dict = detail::join_non_tensor(
              items, spec.dim, !is_cat, node->dict->batch_size,
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
                                    int64_t dim, bool is_cat,
                                    const char* op) {
  TORCH_CHECK_VALUE(!tds.empty(), op,
                    ": expected a non-empty list of TensorDicts");
  // Which keys out's parent lacks (they are added to it, so it must not be
  // locked; a tensor where a dict lives, or the converse, is an error).
  const detail::WriteTargets targets(
      op, TensorDictImpl::of(out.parent()), TensorDictImpl::of(tds[0]),
      [](c10::IntArrayRef, const TensorDictImpl& sub) {
        return sub.batch_size;
      },
      [](const detail::KeyPath&, const TensorDictImpl&,
         const TensorDictImpl&) {},
      [](const detail::KeyPath&, size_t, const at::Tensor&,
         const at::Tensor*, const TensorDictImpl*,
         const c10::optional<at::Device>&) {});
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

// ===========================================================================
// Shape ops and splitting
// ===========================================================================

// A new tree with `fn(leaf)` on every leaf; the root's batch size becomes
// `batch` (each sub-dict's: `batch` followed by its own extra dims). `dims`
// says where the new batch dims come from, for non-tensor stacks (without
// it, every dim of a stack stays a stack dim).
template <typename Fn>
ImplPtr with_batch(const TensorDictImpl& src, c10::IntArrayRef batch,
                   const Fn& fn, const detail::DimMap* dims = nullptr) {
  return detail::rebuild(
      src, batch.vec(),
      [&](const detail::KeyPath&, const at::Tensor& t) { return fn(t); },
      nullptr, detail::NoLevelHook(), detail::NonTensors::kIndex, dims);
}

// The DimMap of an op that removes batch dim `d` (select, squeeze).
detail::DimMap removing_dim(const TensorDictImpl& src, int64_t d) {
  detail::DimMap m = detail::DimMap::identity(src.batch_dims());
  m.from.erase(m.from.begin() + d);
  return m;
}

// `shape` followed by `t`'s dims beyond `bd`.
std::vector<int64_t> with_trailing(c10::IntArrayRef shape, const at::Tensor& t,
                                   size_t bd) {
  return detail::concat(shape, t.sizes().slice(bd));
}

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
                shape_str(shape), " is invalid for a TensorDict with batch_size ",
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
    const detail::DimMap dims = p.lengths[j] < 0
                                    ? removing_dim(src, dim)
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
      split_size == 0 ? 1
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
  return TensorDictImpl::wrap(
      with_batch(*impl_, nb, [&](const at::Tensor& t) {
        return t.reshape(with_trailing(nb, t, bd));
      }));
}

TensorDict TensorDict::view(c10::IntArrayRef shape) const {
  const size_t bd = impl_->batch_size.size();
  auto nb = infer_shape("view", shape, impl_->batch_size);
  size_t k = 0;  // the leaf's index, in depth-first order
  return TensorDictImpl::wrap(
      with_batch(*impl_, nb, [&](const at::Tensor& t) {
        try {
          at::Tensor v = t.view(with_trailing(nb, t, bd));
          ++k;
          return v;
        } catch (const c10::Error&) {
          std::vector<NestedKey> keys;
          detail::collect_keys(*impl_, nullptr, true, true, keys);
          TORCH_CHECK(false, "view: key ", keys[k].str(),
                      ": cannot view batch_size ",
                      shape_str(impl_->batch_size), " as ", shape_str(nb),
                      " (leaf shape ", shape_str(t.sizes()), ", strides ",
                      shape_str(t.strides()), "); use reshape()");
          throw;  // unreachable
        }
      }));
}

TensorDict TensorDict::unsqueeze(int64_t dim) const {
  const auto& b = impl_->batch_size;
  const int64_t d = wrap_dim("unsqueeze", dim, impl_->batch_dims() + 1, b);
  std::vector<int64_t> nb = b;
  nb.insert(nb.begin() + d, 1);
  detail::DimMap dims = detail::DimMap::identity(impl_->batch_dims());
  dims.from.insert(dims.from.begin() + d, detail::DimMap::kNew);
  return TensorDictImpl::wrap(with_batch(
      *impl_, nb, [&](const at::Tensor& t) { return t.unsqueeze(d); },
      &dims));
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
  const detail::DimMap dims = removed
                                  ? removing_dim(*impl_, d)
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
  std::swap(dims.from[static_cast<size_t>(d0)], dims.from[static_cast<size_t>(d1)]);
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
  return TensorDictImpl::wrap(
      with_batch(*impl_, nb,
                [&](const at::Tensor& t) { return t.flatten(s, e); }));
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
  return TensorDictImpl::wrap(
      with_batch(*impl_, nb, [&](const at::Tensor& t) {
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

// ===========================================================================
// Selection, repetition and padding (Python's semantics)
// ===========================================================================

namespace {

// "<dtype> <shape>" of an argument tensor, for errors.
std::string tensor_desc(const at::Tensor& t) {
  return t.defined() ? detail::dtype_name(t.scalar_type()) + " " +
                           shape_str(t.sizes())
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
  TORCH_CHECK_VALUE(ok, "repeat: expected one non-negative count per batch "
                    "dim of batch_size ", shape_str(b), ", got ",
                    shape_str(repeats));
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
  TORCH_CHECK_VALUE(index.defined() && index.scalar_type() == at::kLong &&
                        index.dim() == bd,
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
  TORCH_CHECK_VALUE(!tds.empty(), "pad_sequence: the list of TensorDicts is empty");
  // Python 0.4's tensordict.pad_sequence, step for step. First the longest
  // length along pad_dim, and the masks (one per leaf, of the input's batch
  // shape, plus the padded dim when it is past the batch dims).
  const auto& first = TensorDictImpl::of(tds[0]);
  bool update_batch = true;
  int64_t longest = -1;
  std::vector<TensorDict> in;
  in.reserve(tds.size());
  for (size_t i = 0; i < tds.size(); ++i) {
    std::vector<at::Tensor> va, vb;
    detail::pair_leaves(first, TensorDictImpl::of(tds[i]), "pad_sequence", va, vb);
    const TensorDict td = return_mask ? tds[i].copy() : tds[i];
    const auto& b = TensorDictImpl::of(tds[i]).batch_size;
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
        td.set(masks_key.join(key), at::ones(mask_shape, at::TensorOptions(at::kBool)));
      }
    }
    in.push_back(td);
  }
  std::vector<int64_t> shape = first.batch_size;
  if (update_batch && !shape.empty()) {
    const int64_t d = pad_dim >= 0 ? pad_dim : static_cast<int64_t>(shape.size()) + pad_dim;
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
