// Internal: the row-copy layer. Every copy of a leaf's bytes that bypasses
// LibTorch's copy kernels goes through this file: the indexed write
// (`index_put`), the replay storage's row writes (`RowWritePlan`),
// `stack`/`cat` and their `out=` forms (ops/join.cpp), and the row gather
// of `sample` (`gather_leaf_rows`). It owns:
//  - the eligibility rule: which tensors' elements are plain bytes
//    (`plain_bytes`, `dense_bytes`), on the CPU (`cpu_bytes`), untracked by
//    autograd (`untracked`), or copyable into CUDA memory (`device_bytes`);
//  - row geometry (`row_bytes`, `bytes_of`, `rows_disjoint`);
//  - the version bump a write owes (`version_of`, `bump`);
//  - the byte copy (`copy_bytes`), the row copies (`collect_rows`, `copy_strided_rows`,
//    `gather_leaf_rows`) and the hand-off of CUDA destinations to
//    cuda/device_copy.h (`ByteCopy`, `ByteCopies`);
//  - prefetching, behind `prefetch`, `prefetch_lines` and one look-ahead
//    helper (`Lookahead`).
// Callers check shapes, dtypes and which region is written; this layer
// decides how the bytes move.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/device_copy.h"

namespace tensordict {
namespace detail {

// ---------------------------------------------------------------------------
// Eligibility
// ---------------------------------------------------------------------------

/// Whether `t`'s elements are bytes of its storage at its strides: strided,
/// with storage, no conjugate or negative bit, not quantized.
[[nodiscard]] inline bool plain_bytes(const c10::TensorImpl* t) {
  return t->layout() == at::kStrided && t->has_storage() && !t->is_conj() &&
         !t->is_neg() &&
         !c10::isQIntType(c10::typeMetaToScalarType(t->dtype()));
}
/// `plain_bytes` and contiguous: its elements are `nbytes()` bytes in order.
[[nodiscard]] inline bool dense_bytes(const c10::TensorImpl* t) {
  return plain_bytes(t) && t->is_contiguous();
}
[[nodiscard]] inline bool dense_bytes(const at::Tensor& t) {
  return dense_bytes(t.unsafeGetTensorImpl());
}
/// `dense_bytes` on the CPU: what a CPU byte copy reads or writes.
[[nodiscard]] inline bool cpu_bytes(const c10::TensorImpl* t) {
  return t->device_type() == c10::DeviceType::CPU && dense_bytes(t);
}
[[nodiscard]] inline bool cpu_bytes(const at::Tensor& t) {
  return cpu_bytes(t.unsafeGetTensorImpl());
}
/// Whether a byte copy of `t` leaves autograd nothing to record: grad mode
/// is off (`grad_mode`) or `t` does not require grad.
[[nodiscard]] inline bool untracked(const c10::TensorImpl* t, bool grad_mode) {
  // requires_grad() is an out-of-line call; most leaves have no autograd
  // metadata at all.
  return !grad_mode || t->autograd_meta() == nullptr || !t->requires_grad();
}
/// Whether `src`'s bytes can go straight into CUDA memory at `dst` by the
/// fused device copy (CUDA builds only): both dense, of one dtype, `dst` on
/// a CUDA device and `src` on the CPU or on that device.
[[nodiscard]] inline bool device_bytes(const at::Tensor& dst,
                                       const at::Tensor& src) {
  return cuda::kEnabled && dst.is_cuda() && dense_bytes(dst) &&
         dense_bytes(src) && dst.scalar_type() == src.scalar_type() &&
         (src.is_cpu() || src.device() == dst.device());
}
/// Whether the rows of a destination take byte copies: on the CPU, or by
/// the fused device copy.
[[nodiscard]] inline bool rows_byte_copyable(const at::Tensor& t) {
  return cpu_bytes(t) || (cuda::kEnabled && t.is_cuda() && dense_bytes(t));
}

// ---------------------------------------------------------------------------
// Geometry
// ---------------------------------------------------------------------------

/// The bytes of one row (dim 0) of a dense tensor of at least one dim (0
/// when it has no rows).
[[nodiscard]] inline size_t row_bytes(const at::Tensor& t) {
  const int64_t rows = t.size(0);
  return rows == 0 ? 0
                   : static_cast<size_t>(t.numel() / rows) * t.element_size();
}
/// The first byte of a tensor with storage (its storage's data at its
/// offset), without the checks of `data_ptr()`.
[[nodiscard]] inline const char* bytes_of(const c10::TensorImpl* t) {
  return static_cast<const char*>(t->unsafe_storage().data()) +
         t->storage_offset() * static_cast<int64_t>(t->dtype().itemsize());
}
/// A tensor of `dtype` and `shape` (C-contiguous) at byte `byte_offset` (a
/// multiple of the item size) of `storage`; `base` gives the options of a
/// tensor on another device than the CPU.
[[nodiscard]] at::Tensor tensor_on(
    const c10::Storage& storage, int64_t byte_offset, at::ScalarType dtype,
    c10::IntArrayRef shape,
    const at::TensorOptions& base = at::TensorOptions());
/// Whether the rows of `t` (along dim 0) are each contiguous and disjoint,
/// so that row `i` is `row_bytes` bytes at `i * stride(0)` elements.
[[nodiscard]] bool rows_disjoint(const at::Tensor& t);

// ---------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------

/// The TensorImpl whose version a write into `t` bumps, as `copy_` does;
/// null for an inference tensor, which has no version counter.
[[nodiscard]] inline c10::TensorImpl* version_of(const at::Tensor& t) {
  return t.is_inference() ? nullptr : t.unsafeGetTensorImpl();
}
inline void bump(c10::TensorImpl* version) {
  if (version != nullptr) version->bump_version();
}

// ---------------------------------------------------------------------------
// Prefetching
// ---------------------------------------------------------------------------

/// A hint that `p` will be read soon.
inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
/// Prefetches every cache line of [p, p + bytes).
inline void prefetch_lines(const void* p, size_t bytes) {
  if (bytes == 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last =
      (reinterpret_cast<uintptr_t>(p) + bytes - 1) & ~uintptr_t{63};
  for (uintptr_t a = first; a <= last; a += 64) {
    prefetch(reinterpret_cast<const void*>(a));
  }
}

/// The one way a loop over items [0, n) prefetches: at item `i`, `ahead(i,
/// d, f)` calls `f(i + d)` when that item exists, so that what item `i + d`
/// will read is on its way `d` iterations early. A walk that chases
/// pointers through several levels prefetches each level at a shorter
/// distance than the one it comes from (`stage`).
class Lookahead {
 public:
  explicit Lookahead(int64_t n) : n_(n) {}
  template <typename F>
  void operator()(int64_t i, int64_t distance, F&& f) const {
    if (i + distance < n_) f(i + distance);
  }
  /// The distance of stage `s` (0: the first level read) of a walk whose
  /// stages are `gap` items apart, the last one `last` items ahead.
  static constexpr int64_t stage(int64_t s, int64_t stages, int64_t gap,
                                 int64_t last) {
    return last + (stages - 1 - s) * gap;
  }

 private:
  int64_t n_;
};

// ---------------------------------------------------------------------------
// Copies
// ---------------------------------------------------------------------------

/// Copies `n` bytes from `src` to `dst`, which do not overlap partially
/// (they may be the same bytes): small sizes compile to plain moves; copies
/// of 16 KiB or more use non-temporal stores where the CPU has them
/// (x86-64's SSE2), so that the destination lines, usually out of cache in
/// a large buffer, are written without first being read. Those stores are
/// fenced before it returns, so they are ordered before every later store
/// (a row counter that commits a write, say).
inline void copy_bytes(char* dst, const char* src, size_t n);

/// Copies `rows` rows of `row_bytes` bytes, row `i` from `src[i * stride]`
/// to `dst + i * step`, the sources prefetched a few rows ahead: the byte
/// copy of one key of a stack, whose rows come from many inputs.
void collect_rows(char* dst, size_t step, const char* const* src, size_t stride,
                  int64_t rows, size_t row_bytes);

/// Copies `rows` rows of `row_bytes` bytes, row `i` from `src + i *
/// src_step` to `dst + i * dst_step` (a column of a `[n, T]` buffer written
/// from `n` contiguous rows, as a rollout writes one step of n envs):
/// common row sizes compile to plain moves.
void copy_strided_rows(char* dst, size_t dst_step, const char* src,
                       size_t src_step, int64_t rows, size_t row_bytes);

/// What `gather_leaf_rows` gives: the index drawn, and each leaf's rows.
struct GatheredRows {
  at::Tensor index;
  std::vector<at::Tensor> rows;
};

/// The rows of each of `leaves` at `n` indices that `draw` writes (every
/// entry a valid row), gathered by bytes into new tensors where the leaf
/// allows it: every leaf in one kernel launch when all are dense CUDA
/// leaves on one device (CUDA builds); otherwise each `cpu_bytes` leaf of at
/// least one dim, untracked under the current grad mode. The index (CPU
/// int64 [n]) and the CPU rows share one allocation, which the next gather
/// on the same thread reuses once nothing holds it (a small one, at most
/// 1 MiB). `rows` has an undefined tensor for each leaf gathered neither
/// way.
GatheredRows gather_leaf_rows(const std::vector<const at::Tensor*>& leaves,
                              int64_t n,
                              c10::function_ref<void(int64_t*)> draw);

/// `gather_leaf_rows` into given tensors: the rows of `*leaves[k]` at the
/// `n` indices of `index` (CPU int64 [n], every entry a valid row) written
/// into rows `[offset, offset + n)` of `dsts[k]`, which the caller checked:
/// rows of the leaf's row shape and dtype, on its device, sharing no memory
/// with it. By bytes where both are `cpu_bytes` and untracked; otherwise by
/// `index_select` and `copy_`. Each destination's version is bumped, as
/// `copy_` does.
void gather_leaf_rows_into(const std::vector<const at::Tensor*>& leaves,
                           const at::Tensor& index,
                           const std::vector<at::Tensor>& dsts, int64_t offset);

/// One byte copy of `nbytes` from `src` to `dst`: into the CUDA memory of
/// `device` when it is a device index (from host memory when `src_on_host`,
/// else from that device), else on the CPU. `version`: the destination's
/// `version_of`, bumped once the copy is written.
struct ByteCopy {
  c10::TensorImpl* version = nullptr;
  char* dst = nullptr;
  const char* src = nullptr;
  size_t nbytes = 0;
  c10::DeviceIndex device = -1;
  bool src_on_host = false;
};

/// The byte copies of one write, in order: a CPU copy runs at once, a copy
/// into CUDA memory is queued, and `finish` runs every queued one in one
/// fused launch (cuda/device_copy.h).
class ByteCopies {
 public:
  void add(const ByteCopy& c) {
    if (c.device < 0) {
      copy_bytes(c.dst, c.src, c.nbytes);
      bump(c.version);
      return;
    }
    device_.push_back(cuda::DeviceCopy{c.version, c.dst, c.src, c.nbytes,
                                       c.device, c.src_on_host});
  }
  void finish() {
    if (!device_.empty()) cuda::run_copies(device_);
    device_.clear();
  }

 private:
  c10::SmallVector<cuda::DeviceCopy, 16> device_;
};

// ---------------------------------------------------------------------------

void copy_bytes_streaming(char* dst, const char* src, size_t n);

inline void copy_bytes(char* dst, const char* src, size_t n) {
  switch (n) {
    case 0:
      return;
    case 1:
      std::memcpy(dst, src, 1);
      return;
    case 2:
      std::memcpy(dst, src, 2);
      return;
    case 4:
      std::memcpy(dst, src, 4);
      return;
    case 8:
      std::memcpy(dst, src, 8);
      return;
    case 16:
      std::memcpy(dst, src, 16);
      return;
    default:
      break;
  }
  constexpr size_t kStreamFrom = size_t{1} << 14;
  if (n >= kStreamFrom) {
    copy_bytes_streaming(dst, src, n);
  } else {
    std::memmove(dst, src, n);
  }
}

}  // namespace detail
}  // namespace tensordict
