// See stream_order.h.
#include "core/stream_order.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

namespace tensordict {
namespace detail {

void StreamOrder::set_devices(c10::ArrayRef<c10::Device> devices) {
  devices_.clear();
  last_.clear();
  for (const c10::Device& d : devices) {
    if (d.is_cpu() ||
        std::find(devices_.begin(), devices_.end(), d) != devices_.end()) {
      continue;
    }
    devices_.push_back(d);
    last_.push_back(c10::impl::VirtualGuardImpl(d.type()).getStream(d));
  }
}

void StreamOrder::enter() {
  for (size_t i = 0; i < devices_.size(); ++i) {
    const c10::Device& d = devices_[i];
    const c10::Stream current =
        c10::impl::VirtualGuardImpl(d.type()).getStream(d);
    if (current == last_[i]) continue;
    // Everything queued on the previous stream so far, the previous access
    // included, happens before what is queued on `current` from now on.
    c10::Event done(d.type());
    done.record(last_[i]);
    done.block(current);
    last_[i] = current;
  }
}

}  // namespace detail
}  // namespace tensordict
