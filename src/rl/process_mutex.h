// Internal: the lock of a shared ReplayBuffer (ReplayBufferOptions::shared):
// a robust, process-shared pthread mutex in an anonymous shared mapping, so
// the processes forked after its construction lock the same mutex.
//
// Robust: when a process dies holding it (killed mid-write), the next
// `lock()` in any process succeeds instead of waiting forever, and reports
// that the previous owner died, so the caller can repair what it guarded.
#pragma once

#include <pthread.h>

namespace tensordict {
namespace detail {

class ProcessMutex {
 public:
  // Maps and initializes the mutex; throws a c10::Error when the system
  // refuses (naming the failing call).
  ProcessMutex();
  // Unmaps this process's view (other processes keep theirs).
  ~ProcessMutex();
  ProcessMutex(const ProcessMutex&) = delete;
  ProcessMutex& operator=(const ProcessMutex&) = delete;

  // Blocks until this thread holds the mutex. Returns true when a process
  // or thread died holding it: the mutex is then made consistent again and
  // held, and the state it guards may be half-updated.
  bool lock();
  void unlock();

 private:
  pthread_mutex_t* mu_ = nullptr;
};

}  // namespace detail
}  // namespace tensordict
