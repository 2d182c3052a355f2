// Benchmarks for transfers between processes (tensordict/distributed.h), on
// loopback over Gloo, as ratios in the same run. The program forks a second
// process before anything else (rank 1), which plays the other side of
// every benchmark: rank 0 tells it which one and for how many iterations
// before each timed loop.
//
// - send/recv of a 100 MB dict (5 leaves of 20 MB; rank 1 sends, rank 0
//   receives into its dict) vs a raw ProcessGroupGloo send of the same bytes
//   as one tensor;
// - a 1 KB dict of 20 leaves, consolidated (one message) vs the per-leaf
//   protocol;
// - all_reduce of a dict of 100 leaves vs one allreduce call per leaf.
//
// Times are wall-clock (UseRealTime): a transfer mostly waits.
#include <benchmark/benchmark.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ratio_main.h"

namespace {

using tensordict::Group;
using tensordict::TensorDict;

enum Op : int64_t {
  kQuit,
  kRaw100MB,
  kDict100MB,
  kPerLeaf1KB,
  kConsolidated1KB,
  kAllreducePerLeaf,
  kAllReduceDict,
};

std::unique_ptr<Group>& TheGroup() {
  static std::unique_ptr<Group> pg;
  return pg;
}

// Raw c10d calls on either class of group (see tensordict::Group).
template <typename Fn>
void Raw(const Group& pg, Fn&& fn) {
  if (c10d::Backend* b = pg.backend()) {
    fn(*b)->wait();
  } else {
    fn(*pg.process_group())->wait();
  }
}

TensorDict Dict100MB() {
  TensorDict td({}, {5});
  for (int i = 0; i < 5; ++i) {
    td.set("leaf" + std::to_string(i), at::ones({5, 1024 * 1024}));  // 20 MB
  }
  return td;
}

TensorDict Dict1KB() {
  TensorDict td({}, {4});
  for (int i = 0; i < 20; ++i) {
    td.set({i < 10 ? "a" : "b", "leaf" + std::to_string(i)}, at::ones({4, 3}));
  }
  return td;  // 20 leaves of 48 bytes
}

TensorDict Dict100Leaves() {
  TensorDict td({}, {16});
  for (int i = 0; i < 100; ++i)
    td.set("leaf" + std::to_string(i), at::ones({16, 4}));
  return td;
}

// One side of `op`, once. Rank 1 sends where there is a sender.
struct Side {
  at::Tensor raw = at::ones({25 * 1024 * 1024});  // 100 MB
  TensorDict big = Dict100MB();
  TensorDict small = Dict1KB();
  TensorDict small_c = Dict1KB().consolidate();
  TensorDict many = Dict100Leaves();

  void run(Op op, const Group& pg) {
    const bool sender = pg.rank() == 1;
    const int peer = 1 - pg.rank();
    switch (op) {
      case kRaw100MB: {
        std::vector<at::Tensor> v{raw};
        Raw(pg, [&](auto& g) {
          return sender ? g.send(v, peer, 0) : g.recv(v, peer, 0);
        });
        break;
      }
      case kDict100MB:
        sender ? tensordict::send(big, peer, pg)
               : tensordict::recv(big, peer, pg);
        break;
      case kPerLeaf1KB:
        sender ? tensordict::send(small, peer, pg)
               : tensordict::recv(small, peer, pg);
        break;
      case kConsolidated1KB:
        sender ? tensordict::send(small_c, peer, pg, 0, true)
               : tensordict::recv(small_c, peer, pg, 0, true);
        break;
      case kAllreducePerLeaf:
        for (const auto& key : many.keys()) {
          std::vector<at::Tensor> v{many.get(key)};
          Raw(pg, [&](auto& g) { return g.allreduce(v); });
        }
        break;
      case kAllReduceDict:
        tensordict::all_reduce(many, tensordict::ReduceOp::kSum, pg);
        break;
      case kQuit:
        break;
    }
  }
};

Side& TheSide() {
  static Side side;
  return side;
}

// Rank 0: tell rank 1 to play `op` `n` times.
void Command(Op op, int64_t n) {
  at::Tensor cmd = at::tensor({static_cast<int64_t>(op), n}, at::kLong);
  std::vector<at::Tensor> v{cmd};
  Raw(*TheGroup(), [&](auto& g) { return g.send(v, 1, 1 << 20); });
}

void Bench(benchmark::State& state, Op op) {
  Command(op, static_cast<int64_t>(state.max_iterations));
  Side& side = TheSide();
  for (auto _ : state) side.run(op, *TheGroup());
}

void BM_RawSend100MB(benchmark::State& s) { Bench(s, kRaw100MB); }
void BM_SendRecv100MB(benchmark::State& s) { Bench(s, kDict100MB); }
void BM_PerLeaf1KB(benchmark::State& s) { Bench(s, kPerLeaf1KB); }
void BM_Consolidated1KB(benchmark::State& s) { Bench(s, kConsolidated1KB); }
void BM_AllreducePerLeaf100(benchmark::State& s) {
  Bench(s, kAllreducePerLeaf);
}
void BM_AllReduce100(benchmark::State& s) { Bench(s, kAllReduceDict); }

BENCHMARK(BM_RawSend100MB)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SendRecv100MB)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PerLeaf1KB)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Consolidated1KB)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AllreducePerLeaf100)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AllReduce100)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Rank 1: play each command until told to quit.
int Peer(int port) {
  tensordict::GlooGroupOptions options;
  options.port = port;
  Group pg = tensordict::make_gloo_group(1, 2, options);
  Side side;
  while (true) {
    at::Tensor cmd = at::empty({2}, at::kLong);
    std::vector<at::Tensor> v{cmd};
    Raw(pg, [&](auto& g) { return g.recv(v, 0, 1 << 20); });
    const auto op = static_cast<Op>(cmd[0].item<int64_t>());
    if (op == kQuit) return 0;
    for (int64_t i = cmd[1].item<int64_t>(); i > 0; --i) side.run(op, pg);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists: fork the peer.
  const int port = 29000 + static_cast<int>(::getpid() % 1000);
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      ::_exit(Peer(port));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_distributed peer: %s\n", e.what());
      ::_exit(1);
    }
  }
  tensordict::GlooGroupOptions options;
  options.port = port;
  TheGroup() =
      std::make_unique<Group>(tensordict::make_gloo_group(0, 2, options));
  const int rc = tensordict_bench::run(
      argc, argv,
      {
          {"send/recv 100 MB dict (5 leaves) vs raw send",
           "BM_SendRecv100MB/real_time", "BM_RawSend100MB/real_time", 1.1},
          {"1 KB dict of 20 leaves: consolidated vs per-leaf",
           "BM_Consolidated1KB/real_time", "BM_PerLeaf1KB/real_time", 0.3},
          {"all_reduce 100 leaves vs per-leaf allreduce",
           "BM_AllReduce100/real_time", "BM_AllreducePerLeaf100/real_time",
           0.5},
      });
  Command(kQuit, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return rc != 0 ? rc : (WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
