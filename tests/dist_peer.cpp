// The other processes of the multi-process tests (distributed_test.cpp):
//
//   tensordict_dist_peer <scenario> <rank> <size> <port> [timeout_ms]
//
// joins a Gloo group of `size` at 127.0.0.1:<port> as `rank` and plays
// `scenario` against rank 0 (the test). Exits 0 when its side went as the
// test expects, 3 when received data differ, 1 on an error (printed).
#include <ATen/ATen.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "dist_util.h"

namespace {

using tensordict::Group;
using tensordict::TensorDict;
using tensordict_test::WireDict;
using tensordict_test::ZeroWireDict;

bool Same(const TensorDict& a, const TensorDict& b) {
  return a.keys(true, true) == b.keys(true, true) && (a == b).all();
}

// The first `n` leaves of `td` in the wire order (sorted keys).
TensorDict FirstOnWire(const TensorDict& td, size_t n) {
  auto keys = td.keys(true, true);
  std::sort(keys.begin(), keys.end(),
            [](const tensordict::NestedKey& a, const tensordict::NestedKey& b) {
              return a.parts() < b.parts();
            });
  TensorDict out(td.batch_size());
  for (size_t i = 0; i < n && i < keys.size(); ++i) out.set(keys[i], td.get(keys[i]));
  return out;
}

// Receives the test's "done" signal, so that the peer outlives the test's
// side of the scenario.
void WaitDone(const Group& pg) {
  TensorDict done({}, {1});
  done.set("done", at::zeros({1}, at::kBool));
  tensordict::recv(done, 0, pg, 1000);
}

int Run(const std::string& scenario, const Group& pg) {
  if (scenario == "send") {
    tensordict::send(WireDict(1), 0, pg);
  } else if (scenario == "send_tag7") {
    tensordict::send(WireDict(1), 0, pg, 7);
  } else if (scenario == "isend") {
    auto work = tensordict::isend(WireDict(1), 0, pg);
    work.wait();
  } else if (scenario == "recv" || scenario == "irecv") {
    TensorDict td = ZeroWireDict();
    if (scenario == "recv") {
      tensordict::recv(td, 0, pg);
    } else {
      auto work = tensordict::irecv(td, 0, pg);
      work.wait();
    }
    if (!Same(td, WireDict(2))) {
      std::cerr << "received:\n" << td << "\n";
      return 3;
    }
  } else if (scenario == "die_after_3") {
    tensordict::send(FirstOnWire(WireDict(1), 3), 0, pg);
    std::cout.flush();
    ::_exit(0);
  } else if (scenario == "silent") {
    WaitDone(pg);
  } else {
    std::cerr << "unknown scenario " << scenario << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: tensordict_dist_peer <scenario> <rank> <size> <port> "
                 "[timeout_ms]\n";
    return 1;
  }
  try {
    tensordict::GlooGroupOptions options;
    options.port = std::atoi(argv[4]);
    if (argc > 5) options.timeout = std::chrono::milliseconds(std::atoi(argv[5]));
    Group pg = tensordict::make_gloo_group(std::atoi(argv[2]),
                                           std::atoi(argv[3]), options);
    return Run(argv[1], pg);
  } catch (const c10::Error& e) {
    std::cerr << argv[1] << ": " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
