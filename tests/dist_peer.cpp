// The other processes of the multi-process tests (distributed_test.cpp):
//
//   tensordict_dist_peer <scenario> <rank> <size> <port> [timeout_ms]
//
// joins a Gloo group of `size` at 127.0.0.1:<port> as `rank` and plays
// `scenario` against rank 0 (the test). Exits 0 when its side went as the
// test expects, 3 when received data differ, 1 on an error (printed).
#include <ATen/ATen.h>
#include <tensordict/collectors.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "count_env.h"
#include "dist/group.h"
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
  for (size_t i = 0; i < n && i < keys.size(); ++i)
    out.set(keys[i], td.get(keys[i]));
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
  } else if (scenario == "send_short") {
    // One raw message of 4 floats, where the receiver's leaf holds more.
    std::vector<at::Tensor> v{at::full({4}, -1.0f)};
    tensordict::detail::with_group(pg,
                                   [&](auto& g) { g.send(v, 0, 0)->wait(); });
  } else if (scenario == "send_tag7") {
    tensordict::send(WireDict(1), 0, pg, 7);
  } else if (scenario == "send_consolidated") {
    tensordict::send(WireDict(1).consolidate(), 0, pg, 3,
                     /*consolidated=*/true);
  } else if (scenario == "init_remote") {
    // A dict and its structure, then a second round of values as one
    // consolidated message into the dict the receiver made.
    TensorDict c = WireDict(1).consolidate();
    tensordict::init_remote(c, 0, pg);
    c.update_(WireDict(2));
    tensordict::send(c, 0, pg, 0, /*consolidated=*/true);
  } else if (scenario == "bad_metadata") {
    // init_remote's first two messages, the pickle holding a class (GLOBAL).
    const std::string pickle =
        "\x80\x04"
        "cbuiltins\nobject\n.";
    at::Tensor length =
        at::full({1}, static_cast<int64_t>(pickle.size()), at::kLong);
    at::Tensor bytes =
        at::empty({static_cast<int64_t>(pickle.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), pickle.data(), pickle.size());
    std::vector<at::Tensor> a{length}, b{bytes};
    // Raw c10d sends, through either class of group (1.x's ProcessGroup,
    // 2.x's Backend).
    tensordict::detail::with_group(pg, [&](auto& g) {
      g.send(a, 0, 0)->wait();
      g.send(b, 0, 0)->wait();
    });
    WaitDone(pg);
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
  } else if (scenario == "collectives") {
    const std::string failed = tensordict_test::CollectiveRound(pg);
    if (!failed.empty()) {
      std::cerr << "collectives: " << failed << " gave other values\n";
      return 3;
    }
  } else if (scenario == "mismatch") {
    // Rank 2 holds ('sub', 'f16') as float32: every rank gets the same error
    // and keeps its values.
    TensorDict td = tensordict_test::ReduceDict(pg.rank());
    if (pg.rank() == 2)
      td.set({"sub", "f16"}, td.get({"sub", "f16"}).to(at::kFloat));
    const TensorDict before = td.clone();
    try {
      tensordict::all_reduce(td, tensordict::ReduceOp::kSum, pg);
      return 3;
    } catch (const c10::Error& e) {
      if (e.msg() != tensordict_test::kMismatchMessage) {
        std::cerr << "mismatch: " << e.msg() << "\n";
        return 3;
      }
    }
    if (!tensordict_test::SameDict(td, before)) return 3;
  } else if (scenario == "grad_leaf") {
    TensorDict td = tensordict_test::ReduceDict(pg.rank());
    td.set("f32", td.get("f32").requires_grad_());
    try {
      tensordict::broadcast(td, 0, pg);
      return 3;
    } catch (const c10::Error& e) {
      if (e.msg() != tensordict_test::kGradLeafMessage) {
        std::cerr << "grad_leaf: " << e.msg() << "\n";
        return 3;
      }
    }
  } else if (scenario == "partner_of_failing_rank0") {
    // Rank 0 fails its local checks in two all_reduce calls: this rank, whose
    // dict is fine, fails too instead of waiting.
    for (int i = 0; i < 2; ++i) {
      TensorDict td = tensordict_test::ReduceDict(pg.rank());
      try {
        tensordict::all_reduce(td, tensordict::ReduceOp::kSum, pg);
        return 3;
      } catch (const c10::Error& e) {
        if (e.msg() !=
            "all_reduce: rank 0 failed its local checks (its error "
            "names the key)") {
          std::cerr << e.msg() << "\n";
          return 3;
        }
      }
    }
  } else if (scenario == "serve_collector") {
    // remote_collectors_test.cpp's actor: CountEnv (env 0 terminates at
    // count 2, env 1 at 3, env 2 is truncated at 4), a Linear(1, 3)'s
    // argmax as the action, batches of 12 frames, for the learner's
    // weights.
    const tensordict::TensorDictModule logits(torch::nn::Linear(1, 3), {"obs"},
                                              {"logits"});
    const tensordict::TensorDictModule argmax(
        [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
          return {in[0].argmax(-1)};
        },
        {"logits"}, {"action"});
    tensordict::Collector collector(
        std::make_unique<tensordict_test::CountEnv>(
            std::vector<int64_t>{2, 3, 0}, std::vector<int64_t>{0, 0, 4}),
        tensordict::TensorDictSequential({logits, argmax}),
        tensordict::CollectorOptions(12));
    tensordict::serve_learner(collector, pg, 0);
  } else if (scenario == "silent") {
    // Outlive the test's receive timeout, so that the test sees it time
    // out rather than this process close the connection (under ASan both
    // sides' equal timeouts raced).
    std::this_thread::sleep_for(std::chrono::seconds(3));
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
    if (argc > 5)
      options.timeout = std::chrono::milliseconds(std::atoi(argv[5]));
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
