// Helpers for the multi-process tests (distributed_test.cpp) and their peer
// program (dist_peer.cpp): the dicts both sides build, and starting and
// reaping processes with a bounded wait.
#pragma once

#include <ATen/ATen.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loopback.h"  // examples/ (tests/CMakeLists.txt)

extern char** environ;

namespace tensordict_test {

// A dict of every dtype the wire moves, nested, whose keys sort in another
// order than they were inserted (so the wire order is exercised), batch
// size [2]. Its values follow from `seed`: two processes that build it
// with the same seed hold the same values.
inline tensordict::TensorDict WireDict(int64_t seed) {
  using tensordict::TensorDict;
  auto v = [&](int64_t k, at::IntArrayRef shape, at::ScalarType dtype) {
    const int64_t n = c10::multiply_integers(shape);
    return (at::arange(n, at::kDouble) + 10 * (seed + k))
        .reshape(shape)
        .remainder(100)
        .to(dtype);
  };
  TensorDict td({}, {2});
  td.set("zeta", v(0, {2, 3}, at::kFloat));
  td.set("alpha", v(1, {2}, at::kDouble));
  td.set({"next", "obs"}, v(2, {2, 4}, at::kHalf));
  td.set({"next", "done"}, v(3, {2, 1}, at::kBool));
  td.set({"next", "Reward"}, v(4, {2}, at::kBFloat16));
  td.set("i8", v(5, {2, 2}, at::kChar));
  td.set("i16", v(6, {2}, at::kShort));
  td.set("i32", v(7, {2, 5}, at::kInt));
  td.set("i64", v(8, {2}, at::kLong));
  td.set("u8", v(9, {2, 3}, at::kByte));
  td.set("c64", v(10, {2}, at::kComplexFloat));
  td.set("c128", v(11, {2, 2}, at::kComplexDouble));
  td.set("empty", at::zeros({2, 0}));
  return td;
}

// Same keys, shapes and dtypes as WireDict, every value zero.
inline tensordict::TensorDict ZeroWireDict() {
  return WireDict(0).apply(
      [](const at::Tensor& t) { return at::zeros_like(t); });
}

// A TCP port nobody listens on now (the kernel's pick).
inline int FreePort() { return loopback::free_port(); }

// Starts `argv` (argv[0] a path) as a child process; -1 on failure.
inline pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) !=
      0) {
    return -1;
  }
  return pid;
}

// Waits for `pid` at most `timeout`, then kills it. The exit status, or -1
// when it had to be killed or died of a signal.
inline int Reap(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tensordict_test

namespace tensordict_test {

// A dict of every dtype all_reduce takes, nested, holding small integers
// that depend on `rank` (so sums stay exact in float16). With `reversed`,
// the keys are inserted in the opposite order (collectives match leaves by
// key, not by insertion order).
inline tensordict::TensorDict ReduceDict(int64_t rank, bool reversed = false) {
  using tensordict::NestedKey;
  struct Leaf {
    NestedKey key;
    std::vector<int64_t> shape;
    at::ScalarType dtype;
    int64_t k;
  };
  std::vector<Leaf> leaves = {
      {"f32", {3, 2}, at::kFloat, 1},
      {"f64", {3}, at::kDouble, 2},
      {{"sub", "f16"}, {3, 4}, at::kHalf, 3},
      {{"sub", "bf16"}, {3}, at::kBFloat16, 4},
      {"i8", {3, 2}, at::kChar, 5},
      {"u8", {3}, at::kByte, 6},
      {"i16", {3}, at::kShort, 9},
      {{"sub", "i32"}, {3, 1}, at::kInt, 7},
      {"i64", {3, 5}, at::kLong, 8},
  };
  if (reversed) std::reverse(leaves.begin(), leaves.end());
  tensordict::TensorDict td({}, {3});
  for (const auto& leaf : leaves) {
    const int64_t n = c10::multiply_integers(leaf.shape);
    td.set(leaf.key, (at::arange(n, at::kLong) * leaf.k + 3 * rank)
                         .remainder(7)
                         .reshape(leaf.shape)
                         .to(leaf.dtype));
  }
  return td;
}

// ReduceDict(0), ..., ReduceDict(size - 1) combined leaf by leaf with `fn`.
template <typename Fn>
tensordict::TensorDict ReducedDict(int64_t size, const Fn& fn) {
  tensordict::TensorDict out = ReduceDict(0).clone();
  for (int64_t r = 1; r < size; ++r) {
    const tensordict::TensorDict other = ReduceDict(r);
    for (const auto& key : out.keys(true, true)) {
      out.set(key, fn(out.get(key), other.get(key)));
    }
  }
  return out;
}

}  // namespace tensordict_test

namespace tensordict_test {

// The error of the "mismatch" scenario, on every rank.
constexpr const char* kMismatchMessage =
    "all_reduce: the dicts differ between ranks: rank 0 has leaf ('sub', "
    "'f16') torch.float16 [3, 4] where rank 2 has leaf ('sub', 'f16') "
    "torch.float32 [3, 4]";
// The error of the "grad_leaf" scenario on rank 1, whose leaf requires grad.
constexpr const char* kGradLeafMessage =
    "broadcast: key f32: a leaf tensor that requires grad cannot be modified "
    "in place (use torch::NoGradGuard, or detach it first)";

inline bool SameDict(const tensordict::TensorDict& a,
                     const tensordict::TensorDict& b) {
  auto ka = a.keys(true, true);
  auto kb = b.keys(true, true);
  std::sort(ka.begin(), ka.end(),
            [](const auto& x, const auto& y) { return x.parts() < y.parts(); });
  std::sort(kb.begin(), kb.end(),
            [](const auto& x, const auto& y) { return x.parts() < y.parts(); });
  if (ka != kb || a.batch_size() != b.batch_size()) return false;
  for (const auto& k : ka) {
    if (!at::equal(a.get(k), b.get(k))) return false;
  }
  return true;
}

// What every rank of a group of `pg.size()` runs in the collectives test:
// all_reduce (each op), broadcast from rank 1, all_gather, each checked
// against the values computed locally. "" when all went well, else what
// differed.
inline std::string CollectiveRound(const tensordict::Group& pg) {
  using tensordict::ReduceOp;
  using tensordict::TensorDict;
  const int rank = pg.rank();
  const int size = pg.size();
  auto fresh = [&] { return ReduceDict(rank, /*reversed=*/rank % 2 == 1); };
  struct Case {
    ReduceOp op;
    const char* name;
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> fn;
  };
  const std::vector<Case> cases = {
      {ReduceOp::kSum, "sum",
       [](const at::Tensor& a, const at::Tensor& b) { return a + b; }},
      {ReduceOp::kMax, "max",
       [](const at::Tensor& a, const at::Tensor& b) {
         return at::maximum(a, b);
       }},
      {ReduceOp::kMin, "min",
       [](const at::Tensor& a, const at::Tensor& b) {
         return at::minimum(a, b);
       }},
  };
  for (const auto& c : cases) {
    TensorDict td = fresh();
    const at::Tensor stored = td.get("f32");
    tensordict::all_reduce(td, c.op, pg);
    if (!SameDict(td, ReducedDict(size, c.fn)))
      return std::string("all_reduce ") + c.name;
    if (!td.get("f32").is_same(stored)) return "all_reduce replaced a leaf";
  }
  {
    TensorDict td({}, {3});
    td.set("x", fresh().get("f32"));
    td.set({"sub", "y"}, fresh().get("f64"));
    tensordict::all_reduce(td, ReduceOp::kMean, pg);
    TensorDict sum = ReducedDict(
        size, [](const at::Tensor& a, const at::Tensor& b) { return a + b; });
    if (!at::allclose(td.get("x"), sum.get("f32") / size) ||
        !at::allclose(td.get({"sub", "y"}), sum.get("f64") / size)) {
      return "all_reduce mean";
    }
  }
  {
    TensorDict td = fresh();
    tensordict::broadcast(td, 1, pg);
    if (!SameDict(td, ReduceDict(1))) return "broadcast";
  }
  {
    TensorDict gathered = tensordict::all_gather(fresh(), pg);
    std::vector<TensorDict> each;
    for (int r = 0; r < size; ++r) each.push_back(ReduceDict(r));
    if (!SameDict(gathered, tensordict::stack(each))) return "all_gather";
    if (gathered.get_tensordict("sub").batch_size().vec() !=
        std::vector<int64_t>{size, 3}) {
      return "all_gather's sub-dict batch size";
    }
  }
  return "";
}

}  // namespace tensordict_test
