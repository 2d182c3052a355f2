// The out-of-line half of the row-copy layer (core/row_copy.h): the
// streaming byte copy, the rows of a stack, and the row gather.
#include "core/row_copy.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/GradMode.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>

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

// One leaf of a fused CPU gather.
struct GatherLeaf {
  char* dst;
  const char* src;
  size_t row_bytes;
  CopyIndexedRows copy;
};

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

// The rows of the CPU leaves. The rows are scattered over the buffer, so
// the copy is bound by memory latency: it goes in chunks of a few indices,
// every leaf's rows of the next chunk prefetched while the current chunk is
// copied, so that their misses overlap.
std::vector<at::Tensor> gather_cpu_leaves(
    const std::vector<const at::Tensor*>& leaves, const int64_t* idx, int64_t n,
    bool grad_mode) {
  std::vector<at::Tensor> out(leaves.size());
  c10::SmallVector<GatherLeaf, 16> plan;
  size_t lines = 0;  // cache lines touched per index, over every leaf
  for (size_t k = 0; k < leaves.size(); ++k) {
    const at::Tensor& t = *leaves[k];
    if (t.dim() == 0 || !cpu_bytes(t) ||
        !untracked(t.unsafeGetTensorImpl(), grad_mode)) {
      continue;
    }
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = n;
    out[k] = at::detail::empty_cpu(shape, t.options());
    const size_t rb = row_bytes(t);
    if (rb == 0) continue;  // empty rows: the pointers may be null
    plan.push_back(GatherLeaf{static_cast<char*>(out[k].data_ptr()),
                              static_cast<const char*>(t.data_ptr()), rb,
                              copy_indexed_rows_for(rb)});
    lines += rb / 64 + 2;
  }
  if (plan.empty()) return out;
  // About 48 lines in flight: more would wait for fill buffers.
  const int64_t chunk = std::max<int64_t>(
      2, static_cast<int64_t>(48 / std::max<size_t>(lines, 1)));
  const auto prefetch_chunk = [&](int64_t begin) {
    const int64_t end = std::min(n, begin + chunk);
    for (const GatherLeaf& l : plan) {
      for (int64_t q = begin; q < end; ++q) {
        prefetch_lines(l.src + static_cast<size_t>(idx[q]) * l.row_bytes,
                       l.row_bytes);
      }
    }
  };
  const Lookahead ahead(n);
  prefetch_chunk(0);
  for (int64_t begin = 0; begin < n; begin += chunk) {
    ahead(begin, chunk, prefetch_chunk);
    const int64_t end = std::min(n, begin + chunk);
    for (const GatherLeaf& l : plan) {
      l.copy(l.dst, l.src, l.row_bytes, idx, begin, end);
    }
  }
  return out;
}

}  // namespace

std::vector<at::Tensor> gather_leaf_rows(
    const std::vector<const at::Tensor*>& leaves, const at::Tensor& index) {
  const bool grad_mode = c10::GradMode::is_enabled();
  if (device_gatherable(leaves, grad_mode)) {
    c10::SmallVector<size_t, 16> rb;
    for (const at::Tensor* t : leaves) rb.push_back(row_bytes(*t));
    return cuda::gather_leaves(leaves, rb, index);
  }
  return gather_cpu_leaves(leaves, index.data_ptr<int64_t>(), index.size(0),
                           grad_mode);
}

}  // namespace detail
}  // namespace tensordict
