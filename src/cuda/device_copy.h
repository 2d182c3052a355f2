// The fused CUDA paths of row writes and row gathers: many leaves in one
// kernel launch, host rows staged through reusable pinned memory.
//
// Compiled in CUDA builds only (CMake's TENSORDICT_CUDA, which defines
// TENSORDICT_WITH_CUDA for the library). Elsewhere `kEnabled` is false and
// the functions below are inline stand-ins that decline every request, so
// callers are written once, without conditional compilation, and CPU builds
// keep their paths unchanged.
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

/// Whether the bytes of `src` can be copied straight into `dst`'s memory:
/// both dense (strided, contiguous, no conjugate or negative bit) and of one
/// dtype, `dst` on a CUDA device and `src` on the CPU or on that device. The
/// caller checks shapes and which region of `dst` is written.
bool device_copyable(const at::Tensor& dst, const at::Tensor& src);

/// Runs `copies` on the current stream of each destination device: the host
/// sources are packed into reusable pinned staging memory and sent with one
/// asynchronous copy, then one kernel launch copies every region. Host
/// sources may be reused as soon as this returns; the copies complete in
/// stream order, as `copy_(src, /*non_blocking=*/true)` from pinned memory
/// does. Bumps each `bump` tensor's version.
void run_copies(c10::ArrayRef<DeviceCopy> copies);

/// Rows `index` (CPU int64 [n], contiguous, every entry a valid row) of each
/// of `leaves`, gathered on the device by one kernel launch into new
/// tensors, when every leaf is a dense CUDA tensor (see device_copyable) of
/// at least one dim on one device that does not require grad under grad
/// mode; otherwise empty (the caller gathers another way).
std::vector<at::Tensor> gather_leaves(
    const std::vector<const at::Tensor*>& leaves, const at::Tensor& index);

#else

constexpr bool kEnabled = false;

inline bool device_copyable(const at::Tensor&, const at::Tensor&) {
  return false;
}
inline void run_copies(c10::ArrayRef<DeviceCopy> copies) {
  TORCH_CHECK(copies.empty(),
              "tensordict was built without its CUDA paths (TENSORDICT_CUDA)");
}
inline std::vector<at::Tensor> gather_leaves(
    const std::vector<const at::Tensor*>&, const at::Tensor&) {
  return {};
}

#endif

}  // namespace cuda
}  // namespace detail
}  // namespace tensordict
