// Processes forked after LibTorch ran intra-op parallel work.
//
// With OpenMP (GNU libgomp: the intra-op backend of Debian's and
// pytorch.org's LibTorch), a thread that has run a parallel region keeps a
// pool of worker threads. fork() copies only the forking thread, but libgomp
// in the child still counts on the pool, so the child's first parallel
// region (any large enough tensor op) waits forever. Python's DataLoader
// workers avoid it by running single-threaded (torch.set_num_threads(1)).
// This library does the same for every process forked from one that uses
// it: a pthread_atfork child handler, registered once when the library is
// loaded, sets the child's OpenMP thread count to 1, so LibTorch's
// `parallel_for` runs inline there (at::get_num_threads() reports 1). A
// child that knows its parent never ran parallel work on the forking thread
// may raise it again with at::set_num_threads.
#pragma once

namespace tensordict {
namespace detail {

/// Registers the child handler (once; later calls do nothing). Returns
/// whether this LibTorch's intra-op backend needed it (OpenMP found).
bool register_fork_handler();

}  // namespace detail
}  // namespace tensordict
