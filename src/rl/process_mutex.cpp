// ProcessMutex: see rl/process_mutex.h.
#include "rl/process_mutex.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace tensordict {
namespace detail {

ProcessMutex::ProcessMutex() {
  void* p = ::mmap(nullptr, sizeof(pthread_mutex_t), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(p != MAP_FAILED,
              "ReplayBuffer: cannot map the shared lock (mmap): ",
              std::strerror(errno));
  pthread_mutexattr_t attr;
  int err = pthread_mutexattr_init(&attr);
  if (err == 0)
    err = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (err == 0) err = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (err == 0)
    err = pthread_mutex_init(static_cast<pthread_mutex_t*>(p), &attr);
  pthread_mutexattr_destroy(&attr);
  if (err != 0) {
    ::munmap(p, sizeof(pthread_mutex_t));
    TORCH_CHECK(false,
                "ReplayBuffer: cannot make a robust process-shared mutex: ",
                std::strerror(err));
  }
  mu_ = static_cast<pthread_mutex_t*>(p);
}

ProcessMutex::~ProcessMutex() {
  // Not pthread_mutex_destroy: forked processes may still use the mutex.
  ::munmap(mu_, sizeof(pthread_mutex_t));
}

bool ProcessMutex::lock() {
  const int err = pthread_mutex_lock(mu_);
  if (err == 0) return false;
  if (err == EOWNERDEAD) {
    pthread_mutex_consistent(mu_);
    return true;
  }
  TORCH_CHECK(
      false, "ReplayBuffer: cannot take the shared lock: ", std::strerror(err));
  return false;
}

void ProcessMutex::unlock() { pthread_mutex_unlock(mu_); }

}  // namespace detail
}  // namespace tensordict
