// The fused CUDA paths of row writes and row gathers: many leaves in one
// kernel launch, host rows staged through reusable pinned memory.
//
// Compiled in CUDA builds only (CMake's TENSORDICT_CUDA, which defines
// TENSORDICT_WITH_CUDA for the library). Elsewhere `kEnabled` is false and
// the functions below are inline stand-ins that callers never reach (the
// row-copy layer, core/row_copy.h, tests `kEnabled` before it hands a copy
// over), so callers are written once, without conditional compilation, and
// CPU builds keep their paths unchanged. Which tensors may take these paths
// is decided there too.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <vector>

namespace tensordict {
namespace detail {
namespace cuda {

/// One contiguous copy of `nbytes` into CUDA memory, from the host or from
/// the same device.
struct DeviceCopy {
  c10::TensorImpl* bump;  ///< version bumped after the copy (null: none)
  char* dst;
  const char* src;
  size_t nbytes;
  c10::DeviceIndex device;  ///< the destination's CUDA device
  bool src_on_host;
};

#ifdef TENSORDICT_WITH_CUDA

constexpr bool kEnabled = true;

/// Runs `copies` on the current stream of each destination device: the host
/// sources are packed into reusable pinned staging memory and sent with one
/// asynchronous copy, then one kernel launch copies every region. Host
/// sources may be reused as soon as this returns; the copies complete in
/// stream order, as `copy_(src, /*non_blocking=*/true)` from pinned memory
/// does. Bumps each `bump` tensor's version.
void run_copies(c10::ArrayRef<DeviceCopy> copies);

/// Rows `index` (CPU int64 [n], contiguous, every entry a valid row) of each
/// of `leaves`, whose rows are `row_bytes[k]` bytes, gathered on the device
/// by one kernel launch into new tensors. The caller (core/row_copy.h)
/// decides which leaves may: dense CUDA leaves of at least one dim, all on
/// one device, that autograd does not track.
std::vector<at::Tensor> gather_leaves(
    const std::vector<const at::Tensor*>& leaves,
    c10::ArrayRef<size_t> row_bytes, const at::Tensor& index);

#else

constexpr bool kEnabled = false;

inline void run_copies(c10::ArrayRef<DeviceCopy> copies) {
  TORCH_CHECK(copies.empty(),
              "tensordict was built without its CUDA paths (TENSORDICT_CUDA)");
}
inline std::vector<at::Tensor> gather_leaves(
    const std::vector<const at::Tensor*>&, c10::ArrayRef<size_t>,
    const at::Tensor&) {
  TORCH_CHECK(false,
              "tensordict was built without its CUDA paths (TENSORDICT_CUDA)");
}

#endif

}  // namespace cuda
}  // namespace detail
}  // namespace tensordict
