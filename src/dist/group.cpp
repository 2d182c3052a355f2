// Group: a c10d process group of either class, and making a Gloo one.
#include "dist/group.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef USE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/compat.h"

namespace tensordict {

Group::Group(c10d::ProcessGroup& group)
    : group_(
          c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(
              &group)),
      is_backend_(false) {}

Group::Group(c10d::Backend& group)
    : group_(c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(
          &group)),
      is_backend_(true) {}

c10d::ProcessGroup* Group::process_group() const {
  return is_backend_ ? nullptr : static_cast<c10d::ProcessGroup*>(group_.get());
}

c10d::Backend* Group::backend() const {
  return is_backend_ ? static_cast<c10d::Backend*>(group_.get()) : nullptr;
}

int Group::rank() const {
  return detail::with_group(*this, [](auto& g) { return g.getRank(); });
}

int Group::size() const {
  return detail::with_group(*this, [](auto& g) { return g.getSize(); });
}

std::string Group::backend_name() const {
  return detail::with_group(
      *this, [](auto& g) { return std::string(g.getBackendName()); });
}

Group make_gloo_group(int rank, int size, const GlooGroupOptions& options) {
  TORCH_CHECK_VALUE(size >= 1, "make_gloo_group: size must be at least 1, got ",
                    size);
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "make_gloo_group: rank ", rank,
                    " is out of range for a group of size ", size);
  TORCH_CHECK_VALUE(options.port > 0 && options.port < 65536,
                    "make_gloo_group: port ", options.port,
                    " is not a TCP port (1 to 65535)");
#ifdef USE_C10D_GLOO
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(options.port);
    store_options.isServer = rank == 0;
    store_options.numWorkers = size;
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    store_options.multiTenant = options.python_world;
    detail::disable_libuv(store_options);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(options.host, store_options);
    auto gloo_options =
        c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
    if (!options.python_world) {
      auto store = c10::make_intrusive<c10d::PrefixStore>(options.prefix, tcp);
      return Group(c10::make_intrusive<c10d::ProcessGroupGloo>(
          store, rank, size, gloo_options));
    }
    // Python's init_process_group: the default group's store is
    // PrefixStore("default_pg"), the Gloo backend's its prefixes under it
    // (compat.h's python_world); every rank checks in at a store-based
    // barrier, which only 1.13 waits at. On 2.x this rank joins it without
    // waiting, so that a Python rank with TORCH_DIST_INIT_BARRIER=1 goes on.
    const detail::PythonWorld layout = detail::python_world();
    auto world = c10::make_intrusive<c10d::PrefixStore>("default_pg", tcp);
    c10::intrusive_ptr<c10d::Store> store = world;
    for (const std::string& prefix : layout.group_prefixes) {
      store = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    }
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size,
                                                          gloo_options);
    if (world->add(layout.barrier_key, 1) == size && !layout.wait_at_barrier) {
      world->set(layout.barrier_key + ":last_worker",
                 std::vector<uint8_t>{'1'});
    }
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (layout.wait_at_barrier &&
           world->add(layout.barrier_key, 0) != size) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline,
                  "timed out after ", options.timeout.count(),
                  " ms waiting for every rank at the store-based barrier");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pg->setSequenceNumberForGroup();
    return Group(std::move(pg));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "make_gloo_group: rank ", rank, " of ", size, " at ",
                options.host, ":", options.port, ": ",
                e.what_without_backtrace());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "make_gloo_group: rank ", rank, " of ", size, " at ",
                options.host, ":", options.port, ": ", e.what());
  }
#else
  TORCH_CHECK(false,
              "make_gloo_group: this build of tensordict has no Gloo (its "
              "headers were not found when it was built)");
#endif
}

}  // namespace tensordict
