// examples/loopback.h — for the examples that start their own process group
// on loopback (ppo_distributed, distributed), and the multi-process tests
// (tests/dist_util.h, which include it through an include directory).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace loopback {

/// A TCP port nobody listens on now on 127.0.0.1 (the kernel's pick), for
/// the group's TCPStore.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace loopback
