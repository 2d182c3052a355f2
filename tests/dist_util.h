// Helpers for the multi-process tests (distributed_test.cpp) and their peer
// program (dist_peer.cpp): the dicts both sides build, and starting and
// reaping processes with a bounded wait.
#pragma once

#include <ATen/ATen.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

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
  return WireDict(0).apply([](const at::Tensor& t) { return at::zeros_like(t); });
}

// A TCP port nobody listens on now (the kernel's pick).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

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
