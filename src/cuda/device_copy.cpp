// The CUDA side of device_copy.h: pinned staging and the kernel launches
// (kernels.cu). Compiled only in CUDA builds (CMake's TENSORDICT_CUDA).
#include "cuda/device_copy.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "cuda/kernels.h"

namespace tensordict {
namespace detail {
namespace cuda {
namespace {

constexpr size_t kAlign = 16;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void check_launch(int err) { C10_CUDA_CHECK(static_cast<cudaError_t>(err)); }

// Pinned host buffers that host data is packed into before one
// asynchronous copy to the device: a ring of a few per thread and device,
// each reused once the copy that last read it has completed (its event).
class PinnedRing {
 public:
  explicit PinnedRing(c10::DeviceIndex device) : device_(device) {}
  PinnedRing(const PinnedRing&) = delete;
  PinnedRing& operator=(const PinnedRing&) = delete;
  ~PinnedRing() {
    // At process exit the driver may be gone already: errors are ignored.
    for (auto& s : slots_) {
      if (s.host != nullptr) (void)cudaFreeHost(s.host);
      if (s.done != nullptr) (void)cudaEventDestroy(s.done);
    }
  }

  // A buffer of at least `bytes` that no pending copy reads. `record` must
  // follow the copy that reads it.
  char* acquire(size_t bytes) {
    Slot& s = slots_[next_];
    if (s.pending) C10_CUDA_CHECK(cudaEventSynchronize(s.done));
    s.pending = false;
    if (s.capacity < bytes) {
      if (s.host != nullptr) C10_CUDA_CHECK(cudaFreeHost(s.host));
      s.host = nullptr;
      s.capacity = 0;
      const size_t cap = std::max<size_t>(bytes, size_t{1} << 16);
      C10_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s.host), cap,
                                   cudaHostAllocPortable));
      s.capacity = cap;
    }
    if (s.done == nullptr) {
      c10::cuda::CUDAGuard guard(device_);
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    }
    return s.host;
  }

  // The buffer last acquired is being read by work queued on `stream`.
  void record(cudaStream_t stream) {
    Slot& s = slots_[next_];
    C10_CUDA_CHECK(cudaEventRecord(s.done, stream));
    s.pending = true;
    next_ = (next_ + 1) % kSlots;
  }

 private:
  static constexpr size_t kSlots = 4;
  struct Slot {
    char* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  c10::DeviceIndex device_;
  Slot slots_[kSlots];
  size_t next_ = 0;
};

PinnedRing& pinned_ring(c10::DeviceIndex device) {
  thread_local std::unordered_map<c10::DeviceIndex, std::unique_ptr<PinnedRing>>
      rings;
  auto& r = rings[device];
  if (!r) r = std::make_unique<PinnedRing>(device);
  return *r;
}

// Sends `bytes` bytes, written by `fill(host)` into pinned memory, to a new
// device buffer on `stream`; returns the buffer (stream-ordered: the caching
// allocator reuses it only after the work queued on `stream`).
template <typename Fill>
at::Tensor stage_to_device(c10::DeviceIndex device, cudaStream_t stream,
                           size_t bytes, const Fill& fill) {
  PinnedRing& ring = pinned_ring(device);
  char* host = ring.acquire(bytes);
  fill(host);
  at::Tensor dev = at::empty({static_cast<int64_t>(bytes)},
                             at::TensorOptions().dtype(at::kByte).device(
                                 at::Device(at::kCUDA, device)));
  C10_CUDA_CHECK(cudaMemcpyAsync(dev.data_ptr(), host, bytes,
                                 cudaMemcpyHostToDevice, stream));
  ring.record(stream);
  return dev;
}

// The copies of one device.
void run_on_device(c10::DeviceIndex device,
                   const std::vector<const DeviceCopy*>& copies) {
  c10::cuda::CUDAGuard guard(device);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  size_t host_bytes = 0;
  for (const DeviceCopy* c : copies) {
    if (c->src_on_host) host_bytes += aligned(c->nbytes);
  }
  at::Tensor staged;
  if (host_bytes > 0) {
    staged = stage_to_device(device, stream, host_bytes, [&](char* host) {
      size_t off = 0;
      for (const DeviceCopy* c : copies) {
        if (!c->src_on_host) continue;
        if (c->nbytes > 0) std::memcpy(host + off, c->src, c->nbytes);
        off += aligned(c->nbytes);
      }
    });
  }
  std::vector<Region> regions;
  regions.reserve(copies.size());
  const char* base =
      staged.defined() ? static_cast<const char*>(staged.data_ptr()) : nullptr;
  size_t off = 0;
  for (const DeviceCopy* c : copies) {
    const char* src = c->src;
    if (c->src_on_host) {
      src = base + off;
      off += aligned(c->nbytes);
    }
    regions.push_back(Region{c->dst, src, c->nbytes});
  }
  check_launch(launch_copy_regions(regions.data(),
                                   static_cast<int>(regions.size()), stream));
  for (const DeviceCopy* c : copies) {
    if (c->bump != nullptr) c->bump->bump_version();
  }
}

}  // namespace

void run_copies(c10::ArrayRef<DeviceCopy> copies) {
  // Grouped by device, in order of first appearance.
  std::vector<c10::DeviceIndex> devices;
  for (const DeviceCopy& c : copies) {
    if (std::find(devices.begin(), devices.end(), c.device) == devices.end()) {
      devices.push_back(c.device);
    }
  }
  std::vector<const DeviceCopy*> group;
  for (c10::DeviceIndex d : devices) {
    group.clear();
    for (const DeviceCopy& c : copies) {
      if (c.device == d) group.push_back(&c);
    }
    run_on_device(d, group);
  }
}

std::vector<at::Tensor> gather_leaves(
    const std::vector<const at::Tensor*>& leaves,
    c10::ArrayRef<size_t> row_bytes, const at::Tensor& index) {
  const at::Device device = leaves[0]->device();
  const int64_t n = index.size(0);
  const c10::DeviceIndex dev = device.index();
  c10::cuda::CUDAGuard guard(device);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
  const size_t index_bytes = static_cast<size_t>(n) * sizeof(int64_t);
  at::Tensor idx;
  if (n > 0) {
    idx = stage_to_device(dev, stream, index_bytes, [&](char* host) {
      std::memcpy(host, index.data_ptr<int64_t>(), index_bytes);
    });
  }
  std::vector<at::Tensor> out;
  std::vector<GatherLeaf> work;
  out.reserve(leaves.size());
  work.reserve(leaves.size());
  for (size_t k = 0; k < leaves.size(); ++k) {
    const at::Tensor* t = leaves[k];
    std::vector<int64_t> shape = t->sizes().vec();
    shape[0] = n;
    out.push_back(at::empty(shape, t->options()));
    if (n > 0 && row_bytes[k] > 0) {
      work.push_back(GatherLeaf{static_cast<const char*>(t->data_ptr()),
                                static_cast<char*>(out.back().data_ptr()),
                                row_bytes[k]});
    }
  }
  if (!work.empty()) {
    check_launch(launch_gather_rows(work.data(), static_cast<int>(work.size()),
                                    static_cast<const int64_t*>(idx.data_ptr()),
                                    n, stream));
  }
  return out;
}

}  // namespace cuda
}  // namespace detail
}  // namespace tensordict
