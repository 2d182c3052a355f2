// The code of docs/tutorials/distributed.md, up to the PPO showcase (which
// is examples/ppo_distributed.cpp). Two processes on loopback: the program
// forks, the parent is rank 0 and the child rank 1. Every claim the
// tutorial makes is checked with TORCH_CHECK, so CI fails if one stops
// being true.
#include <tensordict/tensordict.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "loopback.h"

using tensordict::ReduceOp;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using torch::indexing::Slice;

namespace {

TensorDict make_rows(int64_t n, float value) {
  return TensorDict({{"obs", torch::full({n, 3}, value)},
                     {{"next", "reward"}, torch::full({n, 1}, value)}},
                    {n});
}

// Both ranks run this; `rank` 0 is the receiver.
void run(int rank, int port) {
  // ---- A process group
  tensordict::GlooGroupOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.timeout = std::chrono::seconds(30);  // nothing waits longer
  const tensordict::Group pg = tensordict::make_gloo_group(rank, 2, options);
  TORCH_CHECK(pg.rank() == rank && pg.size() == 2 &&
              pg.backend_name() == "gloo");

  // ---- Point to point: send into rows 0..3 of a larger buffer
  TensorDict buffer({{"obs", torch::zeros({100, 3})},
                     {{"next", "reward"}, torch::zeros({100, 1})}},
                    {100});
  const at::Tensor obs_storage = buffer.get("obs");
  if (rank == 1) {
    tensordict::send(make_rows(4, 1.f), /*dst=*/0, pg);
    tensordict::send(make_rows(4, 2.f), /*dst=*/0, pg);
  } else {
    tensordict::recv(buffer[Slice(0, 4)], /*src=*/1, pg);
    // isend/irecv: the write happens in wait().
    tensordict::Work w = tensordict::irecv(buffer[Slice(4, 8)], 1, pg);
    w.wait();
    TORCH_CHECK(buffer.get("obs").is_same(obs_storage));  // in place
    TORCH_CHECK(
        at::equal(buffer.get("obs").narrow(0, 0, 4), torch::ones({4, 3})));
    TORCH_CHECK(at::equal(buffer.get({"next", "reward"}).narrow(0, 4, 4),
                          torch::full({4, 1}, 2.f)));
    TORCH_CHECK(buffer.get("obs").narrow(0, 8, 92).eq(0).all().item<bool>());
    std::cout << "recv: rows 0..7 of the buffer received in place\n";
  }

  // ---- A receiver without a dict, then consolidated rounds
  if (rank == 1) {
    TensorDict wire = make_rows(4, 3.f).consolidate();
    tensordict::init_remote(wire, /*dst=*/0, pg);
    wire.update_(make_rows(4, 4.f));  // into the storage
    tensordict::send(wire, 0, pg, 0, /*consolidated=*/true);
  } else {
    TensorDict got = tensordict::from_remote_init(/*src=*/1, pg);
    TORCH_CHECK(got.is_consolidated() &&
                got.batch_size() == c10::IntArrayRef({4}));
    TORCH_CHECK(at::equal(got.get("obs"), torch::full({4, 3}, 3.f)));
    tensordict::recv(got, 1, pg, 0, /*consolidated=*/true);
    TORCH_CHECK(
        at::equal(got.get({"next", "reward"}), torch::full({4, 1}, 4.f)));
    std::cout << "from_remote_init: " << got.keys(true, true).size()
              << " leaves, then one consolidated message per round\n";
  }

  // ---- Collectives
  TensorDict weights({{"w", torch::full({2, 2}, static_cast<float>(rank + 5))}},
                     {});
  tensordict::broadcast(weights, /*root=*/0, pg);  // in place on every rank
  TORCH_CHECK(at::equal(weights.get("w"), torch::full({2, 2}, 5.f)));
  TensorDict grads(
      {{"g", torch::full({3}, static_cast<float>(rank))},
       {{"critic", "g"}, torch::full({2}, 2.f * static_cast<float>(rank))}},
      {});
  tensordict::all_reduce(grads, ReduceOp::kMean, pg);
  TORCH_CHECK(at::equal(grads.get("g"), torch::full({3}, 0.5f)));
  TensorDict stats({{"ret", torch::full({2}, static_cast<float>(rank))}}, {2});
  TensorDict all = tensordict::all_gather(stats, pg);  // batch [world, ...]
  TORCH_CHECK(all.batch_size() == c10::IntArrayRef({2, 2}));
  TORCH_CHECK(at::equal(all.get("ret")[1], torch::ones({2})));
  // A structure mismatch fails on every rank, before any data moves.
  TensorDict odd = rank == 0 ? TensorDict({{"a", torch::zeros({2})}}, {})
                             : TensorDict({{"b", torch::zeros({2})}}, {});
  bool threw = false;
  try {
    tensordict::all_reduce(odd, ReduceOp::kSum, pg);
  } catch (const c10::Error&) {
    threw = true;
  }
  TORCH_CHECK(threw, "rank ", rank, ": a mismatched all_reduce did not throw");
  if (rank == 0)
    std::cout << "collectives: broadcast, all_reduce, all_gather\n";
}

// ---- On one machine: a ReplayBuffer shared by forked actors
void shared_replay_buffer() {
  ReplayBuffer rb(ReplayBufferOptions(1000).shared(true).seed(0));
  std::vector<pid_t> actors;
  for (int a = 0; a < 2; ++a) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // an actor
      for (int k = 0; k < 50; ++k) {
        rb.extend(make_rows(8, static_cast<float>(a)));
      }
      ::_exit(0);
    }
    actors.push_back(pid);
  }
  for (pid_t pid : actors) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    TORCH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "an actor failed");
  }
  // The learner sees every actor's rows.
  TORCH_CHECK(rb.size() == 800, "size ", rb.size());
  auto [batch, info] = rb.sample(256);
  TORCH_CHECK(
      batch.get("obs").eq(batch.get({"next", "reward"})).all().item<bool>());
  std::cout << "shared ReplayBuffer: 2 forked actors wrote " << rb.size()
            << " rows, the learner sampled 256\n";

  // share_memory_: forked processes see each other's writes.
  TensorDict td({{"x", torch::zeros({4})}}, {4});
  td.share_memory_();
  TORCH_CHECK(td.is_shared() && td.is_locked());
  const pid_t child = ::fork();
  if (child == 0) {
    td.get("x").fill_(7.f);
    ::_exit(0);
  }
  ::waitpid(child, nullptr, 0);
  TORCH_CHECK(td.get("x").eq(7.f).all().item<bool>());
  std::cout << "share_memory_: the parent sees the child's write\n";
}

}  // namespace

int main() {
  try {
    const int port = loopback::free_port();
    const pid_t peer = ::fork();
    if (peer == 0) {
      try {
        run(1, port);
      } catch (const c10::Error& e) {
        std::cerr << "rank 1: " << e.what_without_backtrace() << "\n";
        ::_exit(1);
      }
      ::_exit(0);
    }
    run(0, port);
    int status = 0;
    ::waitpid(peer, &status, 0);
    TORCH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1 failed");
    shared_replay_buffer();
  } catch (const c10::Error& e) {
    std::cerr << e.what_without_backtrace() << "\n";
    return 1;
  }
  return 0;
}
