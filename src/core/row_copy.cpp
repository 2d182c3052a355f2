// The out-of-line half of the row-copy layer (core/row_copy.h): the
// streaming byte copy, the rows of a stack, and the row gather.
#include "core/row_copy.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GradMode.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <limits>

namespace tensordict {
namespace detail {

bool rows_disjoint(const at::Tensor& t) {
  if (t.dim() == 0) return false;
  int64_t expected = 1;
  for (int64_t j = t.dim() - 1; j >= 1; --j) {
    if (t.size(j) != 1 && t.stride(j) != expected) return false;
    expected *= t.size(j);
  }
  return t.size(0) <= 1 || t.stride(0) >= expected;
}

at::Tensor tensor_on(const c10::Storage& storage, int64_t byte_offset,
                     at::ScalarType dtype, c10::IntArrayRef shape,
                     const at::TensorOptions& base) {
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  if (storage.device().is_cpu()) {
    // Direct construction: no dispatcher round trips (this runs once per
    // leaf in load_memmap and consolidate).
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
        caffe2::TypeMeta::fromScalarType(dtype));
    t.unsafeGetTensorImpl()->set_storage_offset(byte_offset / item);
    t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
    return t;
  }
  at::Tensor t = at::empty({0}, base.dtype(dtype));
  t.set_(storage, byte_offset / item, shape, c10::contiguous_strides(shape));
  return t;
}

void copy_bytes_streaming(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  const bool disjoint = dst + n <= src || src + n <= dst;
  if (disjoint) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    const size_t blocks = n / 64;
    for (size_t b = 0; b < blocks; ++b, dst += 64, src += 64) {
      const auto* s = reinterpret_cast<const __m128i*>(src);
      auto* d = reinterpret_cast<__m128i*>(dst);
      const __m128i x0 = _mm_loadu_si128(s);
      const __m128i x1 = _mm_loadu_si128(s + 1);
      const __m128i x2 = _mm_loadu_si128(s + 2);
      const __m128i x3 = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, x0);
      _mm_stream_si128(d + 1, x1);
      _mm_stream_si128(d + 2, x2);
      _mm_stream_si128(d + 3, x3);
    }
    _mm_sfence();
    n -= blocks * 64;
  }
#endif
  std::memmove(dst, src, n);
}

void collect_rows(char* dst, size_t step, const char* const* src, size_t stride,
                  int64_t rows, size_t row_bytes) {
  constexpr int64_t kAhead = 8;
  const size_t ahead_bytes = std::min<size_t>(row_bytes, 512);
  const Lookahead ahead(rows);
  for (int64_t i = 0; i < rows; ++i) {
    ahead(i, kAhead, [&](int64_t j) {
      prefetch_lines(src[static_cast<size_t>(j) * stride], ahead_bytes);
    });
    copy_bytes(dst, src[static_cast<size_t>(i) * stride], row_bytes);
    dst += step;
  }
}

namespace {

// Copies rows `idx[begin..end)` of a contiguous leaf whose rows are
// `row_bytes` long (the template's N when it is not 0) into `dst`, at the
// same positions: fixed sizes compile to plain loads and stores instead of
// one memcpy call per row.
template <size_t N>
void copy_indexed_rows(char* dst, const char* src, size_t row_bytes,
                       const int64_t* idx, int64_t begin, int64_t end) {
  for (int64_t q = begin; q < end; ++q) {
    char* d = dst + static_cast<size_t>(q) * (N ? N : row_bytes);
    const char* s = src + static_cast<size_t>(idx[q]) * (N ? N : row_bytes);
    std::memcpy(d, s, N ? N : row_bytes);
  }
}

using CopyIndexedRows = void (*)(char*, const char*, size_t, const int64_t*,
                                 int64_t, int64_t);

CopyIndexedRows copy_indexed_rows_for(size_t row_bytes) {
  switch (row_bytes) {
    case 1:
      return copy_indexed_rows<1>;
    case 2:
      return copy_indexed_rows<2>;
    case 4:
      return copy_indexed_rows<4>;
    case 8:
      return copy_indexed_rows<8>;
    case 12:
      return copy_indexed_rows<12>;
    case 16:
      return copy_indexed_rows<16>;
    case 24:
      return copy_indexed_rows<24>;
    case 32:
      return copy_indexed_rows<32>;
    case 48:
      return copy_indexed_rows<48>;
    case 64:
      return copy_indexed_rows<64>;
    default:
      return copy_indexed_rows<0>;
  }
}

// Copies rows `[0, rows)` from `src + i * src_step` to `dst + i *
// dst_step`, `row_bytes` long (the template's N when it is not 0).
template <size_t N>
void copy_strided(char* dst, size_t dst_step, const char* src, size_t src_step,
                  int64_t rows, size_t row_bytes) {
  for (int64_t i = 0; i < rows; ++i) {
    std::memcpy(dst, src, N ? N : row_bytes);
    dst += dst_step;
    src += src_step;
  }
}

// Whether every leaf takes the fused device gather: dense CUDA leaves of at
// least one dim on one device, untracked.
bool device_gatherable(const std::vector<const at::Tensor*>& leaves,
                       bool grad_mode) {
  if (!cuda::kEnabled || leaves.empty() || !leaves[0]->is_cuda()) return false;
  const at::Device device = leaves[0]->device();
  return std::all_of(leaves.begin(), leaves.end(), [&](const at::Tensor* t) {
    return t->device() == device && t->dim() > 0 && dense_bytes(*t) &&
           untracked(t->unsafeGetTensorImpl(), grad_mode);
  });
}

// Whether a CPU leaf's rows are gathered by bytes.
bool cpu_gatherable(const at::Tensor& t, bool grad_mode) {
  return t.dim() > 0 && cpu_bytes(t) &&
         untracked(t.unsafeGetTensorImpl(), grad_mode);
}

// The memory of a gather's index and rows, `total` bytes: the previous
// gather's on this thread when nothing holds it any more and it is large
// enough, otherwise a new allocation, kept for the next gather when it is
// at most 1 MiB. A training loop drops each sample before it draws the
// next, so a small sample costs no allocation: a sixth of `sample(32)` in
// benchmarks/rlox.cpp.
c10::Storage gather_storage(size_t total) {
  constexpr size_t kKept = size_t{1} << 20;
  static thread_local c10::Storage last;
  if (last && last.use_count() == 1 && last.nbytes() >= total) {
    // use_count() is a relaxed load: the fence orders another thread's last
    // read of a sample it dropped (its release of the reference) before
    // this thread writes over the memory.
    std::atomic_thread_fence(std::memory_order_acquire);
    return last;
  }
  c10::Storage fresh =
      at::detail::empty_cpu({static_cast<int64_t>(total)}, at::kByte).storage();
  if (total <= kKept) last = fresh;
  return fresh;
}

}  // namespace

void copy_strided_rows(char* dst, size_t dst_step, const char* src,
                       size_t src_step, int64_t rows, size_t row_bytes) {
  switch (row_bytes) {
    case 1:
      return copy_strided<1>(dst, dst_step, src, src_step, rows, row_bytes);
    case 2:
      return copy_strided<2>(dst, dst_step, src, src_step, rows, row_bytes);
    case 4:
      return copy_strided<4>(dst, dst_step, src, src_step, rows, row_bytes);
    case 8:
      return copy_strided<8>(dst, dst_step, src, src_step, rows, row_bytes);
    case 16:
      return copy_strided<16>(dst, dst_step, src, src_step, rows, row_bytes);
    default:
      for (int64_t i = 0; i < rows; ++i) {
        copy_bytes(dst, src, row_bytes);
        dst += dst_step;
        src += src_step;
      }
  }
}

GatheredRows gather_leaf_rows(const std::vector<const at::Tensor*>& leaves,
                              int64_t n,
                              c10::function_ref<void(int64_t*)> draw) {
  const bool grad_mode = c10::GradMode::is_enabled();
  const bool device = device_gatherable(leaves, grad_mode);
  // One allocation: the index, then each CPU leaf's rows at a 64-byte
  // aligned offset (kNone for a leaf gathered another way).
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  c10::SmallVector<size_t, 16> offset(leaves.size(), kNone);
  size_t total = static_cast<size_t>(n) * sizeof(int64_t);
  for (size_t k = 0; k < leaves.size() && !device; ++k) {
    if (!cpu_gatherable(*leaves[k], grad_mode)) continue;
    offset[k] = (total + 63) & ~size_t{63};
    total = offset[k] + static_cast<size_t>(n) * row_bytes(*leaves[k]);
  }
  const c10::Storage storage = gather_storage(total);
  GatheredRows out;
  out.index = tensor_on(storage, 0, at::kLong, {n});
  auto* const idx = static_cast<int64_t*>(out.index.data_ptr());
  draw(idx);
  if (device) {
    c10::SmallVector<size_t, 16> rb;
    for (const at::Tensor* t : leaves) rb.push_back(row_bytes(*t));
    out.rows = cuda::gather_leaves(leaves, rb, out.index);
    return out;
  }
  // The rows are scattered over the buffer: the copy is bound by memory
  // latency, and goes one leaf at a time, which here beats prefetching a
  // few indices ahead over every leaf (benchmarks/rlox.cpp,
  // benchmarks/replay_buffer.cpp).
  out.rows.resize(leaves.size());
  for (size_t k = 0; k < leaves.size(); ++k) {
    if (offset[k] == kNone) continue;
    const at::Tensor& t = *leaves[k];
    c10::SmallVector<int64_t, 8> shape(t.sizes().begin(), t.sizes().end());
    shape[0] = n;
    out.rows[k] = tensor_on(storage, static_cast<int64_t>(offset[k]),
                            t.scalar_type(), shape);
    const size_t rb = row_bytes(t);
    if (rb == 0) continue;  // empty rows: the pointers may be null
    copy_indexed_rows_for(rb)(static_cast<char*>(out.rows[k].data_ptr()),
                              static_cast<const char*>(t.data_ptr()), rb, idx,
                              0, n);
  }
  return out;
}

void gather_leaf_rows_into(const std::vector<const at::Tensor*>& leaves,
                           const at::Tensor& index,
                           const std::vector<at::Tensor>& dsts,
                           int64_t offset) {
  const bool grad_mode = c10::GradMode::is_enabled();
  const int64_t n = index.size(0);
  const auto* const idx = index.data_ptr<int64_t>();
  for (size_t k = 0; k < leaves.size(); ++k) {
    const at::Tensor& t = *leaves[k];
    const at::Tensor& dst = dsts[k];
    if (cpu_gatherable(t, grad_mode) && cpu_bytes(dst) &&
        untracked(dst.unsafeGetTensorImpl(), grad_mode)) {
      const size_t rb = row_bytes(t);
      if (rb != 0) {  // empty rows: the pointers may be null
        copy_indexed_rows_for(rb)(static_cast<char*>(dst.data_ptr()) +
                                      static_cast<size_t>(offset) * rb,
                                  static_cast<const char*>(t.data_ptr()), rb,
                                  idx, 0, n);
      }
      bump(version_of(dst));
      continue;
    }
    dst.narrow(0, offset, n).copy_(t.index_select(0, index.to(t.device())));
  }
}

}  // namespace detail
}  // namespace tensordict
