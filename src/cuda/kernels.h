// The CUDA kernels of the fused device paths (kernels.cu), declared without
// CUDA's or LibTorch's headers: nvcc compiles kernels.cu alone, and the C++
// side (device_copy.cpp) calls the launchers.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace tensordict {
namespace detail {
namespace cuda {

/// One contiguous copy between two device addresses.
struct Region {
  char* dst;
  const char* src;
  size_t nbytes;
};

/// The rows of one leaf to gather: row `idx[q]` of `src` (rows of
/// `row_bytes`, contiguous) to row `q` of `dst`.
struct GatherLeaf {
  const char* src;
  char* dst;
  size_t row_bytes;
};

/// How many regions or leaves one launch takes (the kernel's parameter
/// block holds them); longer lists take several launches.
constexpr int kMaxPerLaunch = 64;

/// Copies every region on `stream`: one launch per `kMaxPerLaunch` regions.
/// Returns the launch's cudaError_t (0 on success).
int launch_copy_regions(const Region* regions, int count, CUstream_st* stream);

/// For every leaf and q in [0, n): row idx[q] of the leaf's source to row q
/// of its destination; `idx` is device memory holding valid row numbers.
/// One launch per `kMaxPerLaunch` leaves. Returns the cudaError_t.
int launch_gather_rows(const GatherLeaf* leaves, int count, const int64_t* idx,
                       int64_t n, CUstream_st* stream);

}  // namespace cuda
}  // namespace detail
}  // namespace tensordict
