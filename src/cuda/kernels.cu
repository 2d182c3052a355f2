// The fused device copies: many leaves in one kernel launch. Each block row
// (blockIdx.y) serves one region or leaf; its threads copy it in the widest
// unit (16, 8, 4, 2 or 1 bytes) that divides its size and both addresses.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/kernels.h"

namespace tensordict {
namespace detail {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocksX = 1024;

struct RegionBatch {
  Region items[kMaxPerLaunch];
};
struct GatherBatch {
  GatherLeaf items[kMaxPerLaunch];
};

__host__ __device__ inline int unit_of(const void* a, const void* b, size_t n) {
  const uintptr_t m = reinterpret_cast<uintptr_t>(a) |
                      reinterpret_cast<uintptr_t>(b) |
                      static_cast<uintptr_t>(n);
  if (m % 16 == 0) return 16;
  if (m % 8 == 0) return 8;
  if (m % 4 == 0) return 4;
  if (m % 2 == 0) return 2;
  return 1;
}

template <typename U>
__device__ void copy_units(char* dst, const char* src, size_t units) {
  U* d = reinterpret_cast<U*>(dst);
  const U* s = reinterpret_cast<const U*>(src);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t u = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       u < units; u += stride) {
    d[u] = s[u];
  }
}

__global__ void copy_regions_kernel(RegionBatch batch) {
  const Region r = batch.items[blockIdx.y];
  switch (unit_of(r.dst, r.src, r.nbytes)) {
    case 16:
      copy_units<uint4>(r.dst, r.src, r.nbytes / 16);
      break;
    case 8:
      copy_units<uint2>(r.dst, r.src, r.nbytes / 8);
      break;
    case 4:
      copy_units<uint32_t>(r.dst, r.src, r.nbytes / 4);
      break;
    case 2:
      copy_units<uint16_t>(r.dst, r.src, r.nbytes / 2);
      break;
    default:
      copy_units<uint8_t>(r.dst, r.src, r.nbytes);
      break;
  }
}

template <typename U>
__device__ void gather_units(const GatherLeaf& l, const int64_t* idx,
                             int64_t n) {
  const size_t per_row = l.row_bytes / sizeof(U);
  const size_t total = static_cast<size_t>(n) * per_row;
  U* d = reinterpret_cast<U*>(l.dst);
  const U* s = reinterpret_cast<const U*>(l.src);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t u = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       u < total; u += stride) {
    const size_t q = u / per_row;
    const size_t k = u - q * per_row;
    d[u] = s[static_cast<size_t>(idx[q]) * per_row + k];
  }
}

__global__ void gather_rows_kernel(GatherBatch batch, const int64_t* idx,
                                   int64_t n) {
  const GatherLeaf l = batch.items[blockIdx.y];
  // Rows start at multiples of row_bytes from both bases.
  switch (unit_of(l.dst, l.src, l.row_bytes)) {
    case 16:
      gather_units<uint4>(l, idx, n);
      break;
    case 8:
      gather_units<uint2>(l, idx, n);
      break;
    case 4:
      gather_units<uint32_t>(l, idx, n);
      break;
    case 2:
      gather_units<uint16_t>(l, idx, n);
      break;
    default:
      gather_units<uint8_t>(l, idx, n);
      break;
  }
}

// Enough blocks along x for the largest item in 16-byte units, capped.
unsigned blocks_for(size_t max_bytes) {
  const size_t units = (max_bytes + 15) / 16;
  const size_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(
      std::max<size_t>(1, std::min<size_t>(blocks, kMaxBlocksX)));
}

// Launches `launch(batch, blocks)` once per `kMaxPerLaunch` items, each
// batch's items copied into the kernel's parameter block; `bytes(item)` is
// what an item copies (batches of empty items are skipped).
template <typename Batch, typename Item, typename Bytes, typename Launch>
int launch_batches(const Item* items, int count, const Bytes& bytes,
                   const Launch& launch) {
  for (int first = 0; first < count; first += kMaxPerLaunch) {
    const int m = std::min(kMaxPerLaunch, count - first);
    Batch batch;
    size_t max_bytes = 0;
    for (int j = 0; j < m; ++j) {
      batch.items[j] = items[first + j];
      max_bytes = std::max(max_bytes, bytes(batch.items[j]));
    }
    if (max_bytes == 0) continue;
    launch(batch, dim3(blocks_for(max_bytes), m));
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
  }
  return 0;
}

}  // namespace

int launch_copy_regions(const Region* regions, int count, CUstream_st* stream) {
  return launch_batches<RegionBatch>(
      regions, count, [](const Region& r) { return r.nbytes; },
      [&](const RegionBatch& batch, dim3 grid) {
        copy_regions_kernel<<<grid, kThreads, 0, stream>>>(batch);
      });
}

int launch_gather_rows(const GatherLeaf* leaves, int count, const int64_t* idx,
                       int64_t n, CUstream_st* stream) {
  if (n <= 0) return 0;
  return launch_batches<GatherBatch>(
      leaves, count,
      [n](const GatherLeaf& l) { return l.row_bytes * static_cast<size_t>(n); },
      [&](const GatherBatch& batch, dim3 grid) {
        gather_rows_kernel<<<grid, kThreads, 0, stream>>>(batch, idx, n);
      });
}

}  // namespace cuda
}  // namespace detail
}  // namespace tensordict
