// The pthread_atfork child handler of fork_safety.h.
#include "core/fork_safety.h"

#include <dlfcn.h>
#include <pthread.h>

#include <mutex>

namespace tensordict {
namespace detail {
namespace {

// OpenMP's omp_set_num_threads, looked up in the process (libtorch_cpu
// loads libgomp) rather than linked, so that the library needs no OpenMP
// flags; null where LibTorch's intra-op backend is not OpenMP. Looked up at
// registration, never in the child (the loader's lock may be held there).
using SetNumThreads = void (*)(int);
SetNumThreads omp_set_num_threads_fn = nullptr;

void in_child() { omp_set_num_threads_fn(1); }

}  // namespace

bool register_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    omp_set_num_threads_fn = reinterpret_cast<SetNumThreads>(
        ::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    if (omp_set_num_threads_fn != nullptr) {
      ::pthread_atfork(nullptr, nullptr, &in_child);
    }
  });
  return omp_set_num_threads_fn != nullptr;
}

}  // namespace detail
}  // namespace tensordict
