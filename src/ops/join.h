// Internal: the input half of stack / cat / stack_out / cat_out
// (ops/join.cpp). `gather_inputs` checks every input (non-empty, batch
// sizes, keys, leaf shapes) in one pass that gathers every input's leaves
// into a flat table in the first input's depth-first leaf order, noting
// each source's bytes. The pass is memory-latency bound: it prefetches the
// dicts, nodes, TensorImpls and storages of the inputs a few inputs ahead
// (core/row_copy.h's Lookahead). A dim-0 stack first tries a leaner pass
// (`fast_pass`) that covers the inputs shaped node for node like the first
// one with plain contiguous CPU leaves: the structure of every input first,
// then each key's leaves down the inputs (a short loop whose loads
// overlap); for stack() it also copies the covered rows into fresh buffers
// (dropped on a later failure). The general pass resumes at the first input
// it does not cover.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

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

// What the pass over the inputs learns (Join::gather_inputs), per key (the
// first input's depth-first leaf order), per input and per (input, key).
struct Inputs {
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
  // Per input (cat): its size along the joined dim; and their sum.
  std::vector<int64_t> lens;
  int64_t total = 0;
  c10::optional<at::Device> common_device;  // the inputs', when they agree
  // A dim-0 stack's fast pass covered inputs [0, fast_covered); stack()'s
  // fresh buffers (`prefill`, one per key) hold their rows already.
  int64_t fast_covered = 0;
  std::vector<at::Tensor> prefill;
};

/// Checks the inputs of a join and gathers their leaves (see above). Throws
/// the join's errors ("<op>: input i has batch_size ...", key differences,
/// "<op>: key K: input i has shape ...") before anything is written.
/// `fresh`: the result is a new dict (stack() and cat()), whose buffers a
/// dim-0 stack may fill as it goes.
Inputs gather_inputs(const JoinSpec& spec, const std::vector<TensorDict>& tds,
                     bool fresh, bool grad_mode);

}  // namespace detail
}  // namespace tensordict
