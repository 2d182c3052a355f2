// Orders accesses to accelerator memory that calls make from different
// streams in the order the calls were made on the host.
//
// A write queued on stream A and a read queued later on stream B of the
// same device may otherwise run in either order, or overlap: the read then
// sees a partial row (TorchRL's rl#3463, a CUDA replay buffer written by an
// actor's stream and sampled on a learner's). Before each access,
// `StreamOrder::enter` makes the current stream of each device wait, by an
// event (no host synchronization), for the work that the previous access
// queued on another stream. Device-generic (c10::Stream and c10::Event),
// so it compiles and is a no-op in CPU builds.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/ArrayRef.h>

#include <vector>

namespace tensordict {
namespace detail {

/// The stream order of one piece of memory (for example a replay buffer's
/// storage). Not synchronized: its owner's lock guards it.
class StreamOrder {
 public:
  /// The devices the memory lives on; CPU devices, which have no streams,
  /// are left out. Forgets the previous accesses.
  void set_devices(c10::ArrayRef<c10::Device> devices);

  /// Before an access: each device's current stream waits for the stream
  /// of the previous access when that was another stream. Free of events
  /// while every access comes from one stream.
  void enter();

 private:
  std::vector<c10::Device> devices_;
  // Per device, the stream of the last access (nothing yet: the device's
  // current stream at set_devices, which needs no wait).
  std::vector<c10::Stream> last_;
};

}  // namespace detail
}  // namespace tensordict
