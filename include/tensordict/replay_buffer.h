// tensordict/replay_buffer.h — a replay buffer of TensorDict rows.
//
// `ReplayBuffer` stores up to `capacity` rows (TensorDicts with batch size
// []) in one preallocated TensorDict of batch size `[capacity]`, and samples
// batches of them. It is the C++ counterpart of TorchRL's
// `TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=...)`.
//
// Storage and allocation. The storage is lazy: nothing is allocated until the
// first `add()` or `extend()`, which allocates `capacity` rows from that
// data's structure (keys, leaf shapes, dtypes) — no shapes are declared up
// front. The rows are zero-filled, and on Linux large CPU leaves are advised
// to use transparent huge pages (random row reads then miss the TLB less).
// With `ReplayBufferOptions::storage_dir`, the storage is instead a set of
// memory-mapped sparse files in that directory, which a later buffer (in
// this or another process) reopens with its rows, cursor and size.
// Every later write goes into that storage in place, round-robin: the write
// cursor wraps to row 0 after row `capacity - 1`, overwriting the oldest
// rows. `extend()` with a batch that crosses the end is written in two pieces;
// a batch larger than `capacity` keeps only its last `capacity` rows. Writes
// whose keys or shapes differ from the storage's, or whose dtypes cannot be
// cast to the storage's (tensor_dict.h: `c10::canCast`, as every write),
// throw and leave the buffer unchanged.
//
// Sampling. `sample(n)` returns a new dict (a gathered copy, never a view of
// the storage) plus a `SampleInfo` with the sampled storage indices and, for
// the prioritized sampler, the importance weights. The sampler is chosen by
// `ReplayBufferOptions::sampler`:
//   - `RandomSampler`: uniform with replacement (the default);
//   - `SamplerWithoutReplacement`: a random permutation per epoch, renewed when
//     exhausted or when the buffer's size changes;
//   - `PrioritizedSampler`: proportional prioritized replay (Schaul et al.)
//     on sum/min segment trees, O(log N) updates and searches;
//   - `SliceSampler`: contiguous trajectory segments of a fixed length that
//     never cross a trajectory boundary (found from a `done` key or a
//     trajectory-id key), including across the circular wrap;
//   - `SliceSamplerWithoutReplacement`: the same, one slice per trajectory
//     per epoch;
//   - `PrioritizedSliceSampler`: slices whose start rows are drawn by
//     priority.
// The writer (`ReplayBufferOptions::writer`) is round-robin, or a
// `MaxValueWriter` that keeps the rows of highest rank.
// Sampling is reproducible: the buffer owns its random generator
// (xoshiro256++, independent of LibTorch's global one), seeded from
// `ReplayBufferOptions::seed` or `manual_seed()`. The gather makes one
// allocation for a sample, which holds `SampleInfo::index` and every
// contiguous CPU leaf's rows (each leaf a tensor of its own over a part of
// it, as in a consolidated Python TensorDict), and copies the rows by bytes;
// other leaves go through `index_select`.
//
// Cost. `add` and `extend` copy one `memcpy` per leaf (two for a batch that
// wraps; `copy_` when a side is not a contiguous CPU tensor), after checking
// the keys, shapes and dtypes; `add` allocates nothing and `extend` only the
// returned index. The prioritized sampler adds O(log N) tree updates
// per written row and per drawn sample.
//
// Thread safety. Unlike `TensorDict`, a `ReplayBuffer` is synchronized: any
// number of threads may call its member functions concurrently, except
// moving and destroying it. `add`, `extend`, `sample`, `sample_into`,
// `update_priority`, `dumps`, `loads`, `clear`, `manual_seed`, `size` (and
// so `empty`), `cursor`, `rate_limiter_info` and `storage` each run under
// one internal lock, held through a whole write, gather or checkpoint (a
// rate-limited call waits with it released, before it writes or gathers);
// `capacity` and `options` read what never changes. A sampled row is never
// torn (half old, half new data).
//   - `storage()` returns the storage dict itself: reading it is not
//     synchronized with writers.
//   - `update_priority` takes storage indices, not rows. Under the lock it
//     checks every index against the current `size()`, then sets the
//     priorities of the rows stored there now: indices from an earlier
//     sample whose rows were overwritten since give the new rows those
//     priorities. If any index is at or past `size()` (after a `clear()`),
//     the whole call throws a `c10::IndexError` and no priority changes.
//   - A sample owns its memory (a copy, never a view of the storage), so the
//     thread it is handed to may hold, read and drop it without the lock.
//     The sampling thread reuses a small sample's memory for a later sample
//     only once nothing holds any of it. On CUDA the gather is queued on the
//     sampling thread's current stream: another stream must wait for it, as
//     for any tensor.
//   - `LazyStackReplayBuffer` (lazy_replay_buffer.h) is synchronized the same way,
//     but its `row(i)` only looks the row up under the lock: it returns the
//     stored dict itself, and reading or writing that is not synchronized
//     with other calls (a later write to row `i` stores a new dict, so the
//     one returned keeps the old data).
// With `ReplayBufferOptions::shared`, the same holds across the processes
// forked after the buffer's construction.
//
// CUDA storage (`ReplayBufferOptions::device`, or a first write of CUDA
// tensors). In builds with the CUDA paths (CMake's `TENSORDICT_CUDA`), `add`
// and `extend` copy every leaf of the rows with one kernel launch (CPU rows
// are first packed into reusable pinned memory and sent by one asynchronous
// copy), and `sample` gathers every leaf with one launch. The samplers draw
// on the host; the index reaches the device by an asynchronous copy from
// pinned memory, so no call waits for the GPU. As with LibTorch's own ops,
// the work runs on the calling thread's current stream, in stream order.
// Calls made from different streams take effect in the order the host made
// them: a call's stream first waits (by an event; the host does not block)
// for the stream of the buffer's previous call when that was another one.
// So a sample never reads a partly written row, and a write never overtakes
// an earlier sample's reads (TorchRL's rl#3463). `storage()` takes part too:
// what the caller queues on its stream before the buffer's next call from
// another stream happens before that call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Uniform sampling with replacement (TorchRL's `RandomSampler`).
struct RandomSampler {};

/// Sampling without replacement: each epoch draws a fresh random permutation
/// of `[0, size())` and hands it out in order. The epoch renews when it is
/// exhausted or when the buffer's size has changed since it started. A
/// request larger than `size()` spans several epochs (with `drop_last`, it
/// throws).
struct SamplerWithoutReplacement {
  /// Drop the incomplete last batch of an epoch instead of returning it short.
  /// When false, a request that straddles the epoch end is completed from the
  /// next epoch.
  TORCH_ARG(bool, drop_last) = false;
};

/// Proportional prioritized sampling (TorchRL's `PrioritizedSampler`): row
/// `i` is drawn with probability `p_i^alpha / sum_j p_j^alpha`, and its
/// importance weight is `(N * P(i))^-beta` normalized by the largest weight
/// (the one of the smallest priority, from a min segment tree), so weights
/// are in (0, 1]. New rows get the largest priority seen so far (1
/// initially). Backed by a sum tree (8-ary) and a min tree: O(log N) per
/// update and per draw.
///
/// Example:
/// ```
///   ReplayBuffer rb(ReplayBufferOptions(100000).sampler(
///       PrioritizedSampler().alpha(0.6).beta(0.4)));
/// ```
struct PrioritizedSampler {
  /// How much the priorities count: 0 samples uniformly, 1 in proportion.
  TORCH_ARG(double, alpha) = 0.6;
  /// The importance-weight exponent: 0 gives no correction, 1 the full one.
  TORCH_ARG(double, beta) = 0.4;
  /// Added to every priority given to `update_priority`.
  TORCH_ARG(double, eps) = 1e-8;
};

/// Contiguous segments of `slice_len` rows from single trajectories.
/// `sample(n)` returns `n / slice_len` segments (n must be a multiple of
/// `slice_len`), laid end to end in a dict of batch size `[n]`.
///
/// Trajectory boundaries come from `traj_key` when set (rows with different
/// ids belong to different trajectories), else from `end_key` (a true value
/// ends a trajectory at that row). The write cursor is always a boundary.
/// As in TorchRL, a slice is drawn by picking a trajectory uniformly among
/// those with at least `slice_len` rows, then a start uniformly within it.
/// Throws when no stored trajectory is long enough, or when the key is not
/// in the storage.
struct SliceSampler {
  /// Slices of `slice_len` rows.
  explicit SliceSampler(int64_t slice_len) : slice_len_(slice_len) {}
  /// The rows per slice (> 0).
  TORCH_ARG(int64_t, slice_len);
  /// A true value ends a trajectory at its row (used without `traj_key`).
  TORCH_ARG(NestedKey, end_key) = NestedKey({"next", "done"});
  /// Trajectory ids: a change of id is a boundary (overrides `end_key`).
  TORCH_ARG(c10::optional<NestedKey>, traj_key) = c10::nullopt;
};

/// `SliceSampler` without replacement (TorchRL's
/// `SliceSamplerWithoutReplacement`): each epoch visits the stored
/// trajectories of at least `slice_len` rows in a fresh random order, one
/// slice (a uniform start within the trajectory) per visit, so a trajectory
/// appears at most once per epoch. `sample(n)` takes the next
/// `n / slice_len` trajectories. As with `SamplerWithoutReplacement`, the
/// epoch renews when it is exhausted and after every write (the
/// trajectories may have changed; TorchRL resets it on `extend` too), and a
/// request that straddles the epoch end is completed from the next epoch
/// unless `drop_last`, which starts a new epoch instead and throws when
/// `n / slice_len` exceeds the number of such trajectories.
///
/// Differences from TorchRL 0.4: a request is always filled (TorchRL
/// returns a short batch at the end of an epoch), and trajectories shorter
/// than `slice_len` are skipped (TorchRL's `strict_length=True` drops them
/// from the batch, which comes out short).
struct SliceSamplerWithoutReplacement {
  /// Slices of `slice_len` rows.
  explicit SliceSamplerWithoutReplacement(int64_t slice_len)
      : slice_len_(slice_len) {}
  /// As `SliceSampler`'s.
  ///@{
  TORCH_ARG(int64_t, slice_len);
  TORCH_ARG(NestedKey, end_key) = NestedKey({"next", "done"});
  TORCH_ARG(c10::optional<NestedKey>, traj_key) = c10::nullopt;
  ///@}
  /// Start a new epoch instead of completing a request from the next one.
  TORCH_ARG(bool, drop_last) = false;
};

/// Prioritized slices (TorchRL's `PrioritizedSliceSampler`): every row has
/// a priority, as with `PrioritizedSampler`, and a slice of `slice_len`
/// rows starts at row `i` with probability proportional to
/// `(priority_i + eps)^alpha`, among the rows that start a whole slice
/// within their trajectory (at least `slice_len - 1` more rows of the same
/// trajectory follow; trajectories as for `SliceSampler`, so slices never
/// cross a boundary or the write cursor). The slice's importance weight is
/// its start row's (`(p_i / p_min)^-beta`, with `p_min` the smallest positive
/// mass of all stored rows), repeated over its rows in `SampleInfo::weight`.
/// Give `update_priority` the sampled rows (`SampleInfo::index`) and a
/// priority per row: only the start rows' priorities steer sampling. Which
/// rows may start a slice is maintained on every write, for the rows the
/// write touched (O(rows written + slice_len) plus O(log N) per row), so
/// a draw is O(log N) per slice whatever the capacity.
///
/// Difference from TorchRL 0.4: trajectories shorter than `slice_len` are
/// never sampled (TorchRL's `strict_length=True` raises when one is
/// stored), and the rows that cannot start a slice keep their priorities
/// (TorchRL zeroes them in its sum tree).
struct PrioritizedSliceSampler {
  /// Slices of `slice_len` rows.
  explicit PrioritizedSliceSampler(int64_t slice_len) : slice_len_(slice_len) {}
  /// As `SliceSampler`'s.
  ///@{
  TORCH_ARG(int64_t, slice_len);
  TORCH_ARG(NestedKey, end_key) = NestedKey({"next", "done"});
  TORCH_ARG(c10::optional<NestedKey>, traj_key) = c10::nullopt;
  ///@}
  /// As `PrioritizedSampler`'s.
  ///@{
  TORCH_ARG(double, alpha) = 0.6;
  TORCH_ARG(double, beta) = 0.4;
  TORCH_ARG(double, eps) = 1e-8;
  ///@}
};

/// One of the samplers above.
using SamplerConfig =
    std::variant<RandomSampler, SamplerWithoutReplacement, PrioritizedSampler,
                 SliceSampler, SliceSamplerWithoutReplacement,
                 PrioritizedSliceSampler>;

/// The default writer (TorchRL's `RoundRobinWriter`): rows go to the write
/// cursor, which wraps, so a full buffer overwrites its oldest rows.
struct RoundRobinWriter {};

/// Keeps the `capacity` rows of highest rank (TorchRL's
/// `TensorDictMaxValueWriter`). A row's rank is its `rank_key` entry, or,
/// when that has several elements, their `reduction`. Until the buffer is
/// full, rows are written at the cursor as usual; then a row replaces the
/// stored row of lowest rank (ties: the lowest storage index) if its rank
/// is strictly higher, and is dropped otherwise. `add` returns -1 for a
/// dropped row; `extend` returns an index per row of the batch, -1 for the
/// rows not stored when it returns (dropped, or replaced by a later row of
/// the same batch). The rank key must be a real (non-complex) tensor.
struct MaxValueWriter {
  /// How a rank entry of several elements becomes one rank.
  enum class Reduction { kSum, kMean, kMax, kMin, kMedian };
  /// The entry that ranks a row.
  TORCH_ARG(NestedKey, rank_key) = NestedKey({"next", "reward"});
  /// Applied to a rank entry of several elements.
  TORCH_ARG(Reduction, reduction) = Reduction::kSum;
};

/// One of the writers above.
using WriterConfig = std::variant<RoundRobinWriter, MaxValueWriter>;

/// Reverb's `SampleToInsertRatio` rate limiter, for actor and learner
/// threads sharing one buffer in a process: it keeps the number of rows
/// sampled per row inserted near `samples_per_insert`.
///
/// With I rows inserted and S rows sampled so far (since construction or
/// `clear()`), let `diff = I * samples_per_insert - S` and
/// `offset = samples_per_insert * min_size_to_sample`:
///   - `sample(n)` waits until the buffer holds at least
///     `min_size_to_sample` rows and `diff - n >= offset - error_buffer`
///     (so the learner never runs ahead of the actors);
///   - with `block_inserts`, `add`/`extend` of n rows wait while the buffer
///     holds `min_size_to_sample` rows or more and
///     `diff + n * samples_per_insert > offset + error_buffer` (so the
///     actors never run ahead of the learner). Without it, inserts never
///     wait, as when actors must not stall.
/// So, once the buffer is filled to `min_size_to_sample`, `diff` stays in
/// `[offset - error_buffer, offset + error_buffer]`. A call that is not
/// allowed within `timeout` throws a `c10::Error` naming the counts, and
/// changes nothing. `error_buffer` must be at least
/// `max(1, samples_per_insert)`, as in Reverb, or the two sides could block
/// each other forever.
///
/// Example: a learner that samples 256 rows for every 64 rows inserted,
/// once 1000 rows are in the buffer:
/// ```
///   ReplayBuffer rb(ReplayBufferOptions(100000).rate_limiter(
///       RateLimiter(/*samples_per_insert=*/4.0).min_size_to_sample(1000)
///           .error_buffer(1024).block_inserts(true)));
/// ```
struct RateLimiter {
  /// Keeps the rows sampled per row inserted near `samples_per_insert`.
  explicit RateLimiter(double samples_per_insert)
      : samples_per_insert_(samples_per_insert) {}
  /// The target ratio of rows sampled to rows inserted (> 0).
  TORCH_ARG(double, samples_per_insert);
  /// No sample before the buffer holds this many rows.
  TORCH_ARG(int64_t, min_size_to_sample) = 1;
  /// How far `diff` may stray from its target (see above).
  TORCH_ARG(double, error_buffer) = 100.0;
  /// Whether inserts wait too (see above).
  TORCH_ARG(bool, block_inserts) = false;
  /// How long a call waits before it throws.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(60);
};

/// The TorchRL version whose `ReplayBuffer.loads` reads a `storage_dir`
/// (`ReplayBufferOptions::torchrl_version`).
enum class TorchRLVersion { v0_4, v0_14 };

/// Options for `ReplayBuffer`, in LibTorch's fluent style.
///
/// Example:
/// ```
///   auto options = ReplayBufferOptions(100000)
///                      .sampler(PrioritizedSampler().alpha(0.7))
///                      .seed(0);
/// ```
struct ReplayBufferOptions {
  /// A buffer of `capacity` rows, all else as below.
  /* implicit */ ReplayBufferOptions(int64_t capacity)  // NOLINT
      : capacity_(capacity) {}
  /// Number of rows the storage holds (> 0).
  TORCH_ARG(int64_t, capacity);
  /// How rows are drawn (see the samplers above).
  TORCH_ARG(SamplerConfig, sampler) = RandomSampler();
  /// Where rows go (see `RoundRobinWriter`, `MaxValueWriter`).
  TORCH_ARG(WriterConfig, writer) = RoundRobinWriter();
  /// Seed of the buffer's generator; unseeded buffers draw a random seed.
  TORCH_ARG(c10::optional<uint64_t>, seed) = c10::nullopt;
  /// Device of the storage (the first write's device when unset).
  TORCH_ARG(c10::optional<at::Device>, device) = c10::nullopt;
  /// Disk-backed storage: when set, the storage lives in memory-mapped files
  /// in this directory and outlives the buffer and the process.
  ///
  /// Layout (each part a memmap directory in Python tensordict's format):
  /// `<dir>/storage/` the storage dict, batch size `[capacity]` (Python:
  /// `TensorDict.load_memmap(dir + "/storage")`); `<dir>/priority/` the raw
  /// priorities, float64 `[capacity]`; `<dir>/state/` int64/float64 scalars
  /// `format_version`, `capacity`, `rows_written` (rows written since
  /// creation or `clear()`: `cursor() == rows_written % capacity`, `size()
  /// == min(rows_written, capacity)`), `max_priority`, `priorities_valid`.
  ///
  /// TorchRL. The directory is also what TorchRL's (0.14's, or 0.4's: see
  /// `torchrl_version`) `ReplayBuffer.dumps(dir)` writes for a
  /// `LazyMemmapStorage(capacity)`
  /// buffer, so `TensorDictReplayBuffer(storage=LazyMemmapStorage(capacity),
  /// sampler=...).loads(dir)` in Python loads it: `storage/` plus TorchRL's
  /// `storage/storage_metadata.json` (the length), `writer/metadata.json`
  /// (the cursor), `buffer_metadata.json`, and in `sampler/` what the
  /// matching TorchRL sampler's `dumps` writes (for `PrioritizedSampler`:
  /// alpha, beta, eps, the largest priority and the sum and min trees of
  /// `(priority + eps)^alpha`). These files are always current: every write
  /// updates their numbers in place (fixed-width fields; no system call).
  /// Load them in Python with the same capacity and sampler. Conversely, a
  /// directory that TorchRL's `dumps` wrote for such a buffer (a
  /// `LazyMemmapStorage` of a `TensorDict`, one batch dim) is opened in
  /// place: its rows, length and cursor, and for a `PrioritizedSampler` its
  /// priorities (recovered from TorchRL's sum tree and its alpha and eps)
  /// carry over. TorchRL's `TensorDictReplayBuffer` stores each row's index
  /// under `"index"` (int64): when the storage has that entry, writes that
  /// lack it get their rows' indices there, as TorchRL's writer does.
  /// A damaged TorchRL dump (a pytree storage, a length or cursor out of
  /// range or inconsistent, another capacity, missing files, bad JSON) is
  /// rejected with a `c10::Error` (`c10::ValueError` for the capacity)
  /// naming the file, and left as it was.
  ///
  /// Construction: a directory that does not exist or is empty gets nothing
  /// until the first write, which creates the three parts with
  /// `memmap_like` (no capacity-sized allocation in RAM, so a storage larger
  /// than RAM works; pages reach the disk as rows are written). Their disk
  /// space is reserved then, so a disk too small for the capacity fails that
  /// first write with "No space left on device" (see `sparse_storage`). A directory holding a buffer (`state/meta.json`) is
  /// reopened: its storage, cursor and size are restored, and for a
  /// `PrioritizedSampler` its priorities (rows last written without one get
  /// the priority 1 again). Throws a `c10::ValueError` when the stored
  /// capacity differs from `capacity` (naming both), and a `c10::Error`
  /// when the directory is not a directory, holds other files but no
  /// buffer, or holds a damaged buffer (never crashes). `device` must be
  /// unset or the CPU.
  ///
  /// Writes and samples take the same code paths as the in-RAM storage
  /// (plain stores into `MAP_SHARED` pages). Each write stores the rows,
  /// then their priorities, then `rows_written` (one 8-byte store), then
  /// TorchRL's numbers, so a process that exits or is killed at any point
  /// leaves every completed write readable by the next process (a write
  /// cut off half-way is not counted, but in a full buffer the oldest rows
  /// it was overwriting may be left part old, part new, and TorchRL's
  /// numbers may be torn until the next buffer that opens the directory
  /// rewrites them). Nothing calls `fsync`: a power loss or OS crash may
  /// lose recent writes. The structure of the rows
  /// is fixed by the first write, also across reopening (and `clear()`).
  /// There is no locking between processes: open a directory in one
  /// buffer at a time. The sampler's in-memory state (the generator,
  /// `SamplerWithoutReplacement`'s epoch) is not persisted.
  TORCH_ARG(c10::optional<std::string>, storage_dir) = c10::nullopt;
  /// With `storage_dir`: create the storage files sparse (with holes)
  /// instead of reserving their space. Creating them is then instant and
  /// takes no disk space until rows are written, but if the disk fills up
  /// later, the row write that needs a new page dies with SIGBUS (the kernel
  /// cannot report the error through a memory store).
  TORCH_ARG(bool, sparse_storage) = false;
  /// With `storage_dir`: the TorchRL version whose `loads` reads the
  /// directory. The two differ in one field, a `PrioritizedSampler`'s
  /// largest priority in `sampler/sampler_metadata.json`: TorchRL 0.14
  /// writes `[value, row]` (with "_schema_version": 1) and cannot read 0.4's
  /// plain number, which 0.4 needs. This library writes `[value, null]` for
  /// 0.14 (the row matters to TorchRL only with
  /// `max_priority_within_buffer=True`, which has no counterpart here).
  /// Opening a directory reads both forms, whatever this option says.
  TORCH_ARG(TorchRLVersion, torchrl_version) = TorchRLVersion::v0_14;
  /// Shares the buffer with the processes forked after its construction
  /// (TorchRL's `ReplayBuffer(..., shared=True)`): actor processes `add` and
  /// `extend`, a learner process samples, each through its own copy of this
  /// `ReplayBuffer` object.
  ///
  /// The rows and the row count live in shared memory: in `storage_dir` when
  /// it is set (everything said there holds), else in a fresh directory in
  /// `/dev/shm` (`storage().saved_path()` names it), which the process that
  /// constructed the buffer removes when it destroys the buffer. Allocation
  /// stays lazy across processes: whichever process writes first allocates
  /// the storage, and the others map it on their next call. Every call of
  /// every process runs under one robust, process-shared mutex (created
  /// with the buffer and inherited by `fork`), so a sampled row is never
  /// torn. A process killed while it holds the mutex does not block the
  /// others: the next call in any process takes it over. The killed
  /// process's write is not counted, but in a full buffer the oldest rows
  /// it was overwriting may be left part old, part new.
  ///
  /// Limits: processes must be forked from the one that constructed the
  /// buffer (the mutex is inherited, not named); the storage is on the CPU;
  /// `PrioritizedSampler` is rejected (its trees live in one process's
  /// memory). With `SamplerWithoutReplacement`, each process draws its own
  /// epochs.
  ///
  /// Forked processes run LibTorch's intra-op work on one thread, as
  /// Python's DataLoader workers do: with OpenMP (Debian's and pip's
  /// LibTorch), a child forked after its parent ran parallel work would
  /// wait forever in its first parallel op, so this library sets the
  /// child's thread count to 1 when it forks (for every process, not only
  /// for shared buffers). A child whose parent never ran parallel work on
  /// the forking thread may raise it with `at::set_num_threads`.
  ///
  /// Example:
  /// ```
  ///   ReplayBuffer rb(ReplayBufferOptions(100000).shared(true));
  ///   if (fork() == 0) {  // an actor
  ///     rb.extend(collect());
  ///     _exit(0);
  ///   }
  ///   auto [batch, info] = rb.sample(256);  // the learner, once rows exist
  /// ```
  TORCH_ARG(bool, shared) = false;
  /// Makes `sample` (and optionally `add`/`extend`) wait to keep the
  /// sample-to-insert ratio (see `RateLimiter`). Not with `shared`.
  TORCH_ARG(c10::optional<RateLimiter>, rate_limiter) = c10::nullopt;
};

/// What a rate-limited buffer has counted (`ReplayBuffer::rate_limiter_info`).
struct RateLimiterInfo {
  /// Rows inserted and rows sampled since construction or `clear()`.
  ///@{
  int64_t inserted = 0;
  int64_t sampled = 0;
  ///@}
  /// `inserted * samples_per_insert - sampled`.
  double diff = 0;
  /// The range `diff` is kept in once the buffer reached
  /// `min_size_to_sample` rows.
  ///@{
  double min_diff = 0;
  double max_diff = 0;
  ///@}
};

/// What `ReplayBuffer::sample` returns besides the data.
struct SampleInfo {
  /// The sampled storage rows, int64 `[n]`.
  at::Tensor index;
  /// Importance weights, float32 `[n]` (prioritized sampler only; undefined
  /// otherwise).
  at::Tensor weight;
};

/// A replay buffer: lazy circular TensorDict storage plus a sampler.
///
/// Example:
/// ```
///   ReplayBuffer rb(ReplayBufferOptions(1000).seed(0));
///   rb.extend(batch);                       // batch: [64] rows
///   auto [data, info] = rb.sample(32);      // data: batch size [32]
/// ```
class ReplayBuffer {
 public:
  /// A buffer with `options`, which are checked here (a ValueError names a
  /// bad one); nothing is allocated until the first write, unless a
  /// `storage_dir` holds rows, which are opened.
  explicit ReplayBuffer(ReplayBufferOptions options);
  /// Movable, not copyable (a buffer owns its storage and its generator).
  ///@{
  ~ReplayBuffer();
  ReplayBuffer(ReplayBuffer&&) noexcept;
  ReplayBuffer& operator=(ReplayBuffer&&) noexcept;
  ///@}
  ReplayBuffer(const ReplayBuffer&) = delete;
  ReplayBuffer& operator=(const ReplayBuffer&) = delete;

  /// Writes one row (batch size []) at the cursor; returns its index (with
  /// a `MaxValueWriter`: where that writer puts it, -1 when dropped). The
  /// first write allocates the storage from the row's structure; later rows
  /// must have exactly the same keys and row shapes, and dtypes that cast to
  /// the storage's (`c10::canCast`: float64 into float32, not float into
  /// int), or the call throws and the buffer is unchanged.
  int64_t add(const TensorDict& row);
  /// Writes every row of `batch` (batch size `[n]`) from the cursor on,
  /// wrapping around; returns the indices written, int64 `[min(n, capacity)]`
  /// (for n > capacity, the last capacity rows, each where a row-by-row write
  /// would put it; with a `MaxValueWriter`: one per row of `batch`, see
  /// there). Same checks as `add`.
  at::Tensor extend(const TensorDict& batch);

  /// Samples `batch_size` (> 0) rows with the configured sampler. Throws on
  /// an empty buffer. With a `RateLimiter`, first waits until the limiter
  /// allows it (as `add`/`extend` do with `block_inserts`). The data is a new dict (a copy of the sampled rows)
  /// with batch size `[batch_size]`.
  [[nodiscard]] std::pair<TensorDict, SampleInfo> sample(int64_t batch_size);
  /// `sample`, written into `out` instead of a new dict: draws
  /// `out.batch_size()[0]` (> 0) rows and writes them into `out`'s leaves
  /// in place, bumping their versions. `out` must have the buffer's keys,
  /// and each leaf the stored dtype and device and shape `[N, *row]`, as a
  /// sample of the buffer has. Throws, drawing and writing nothing, when
  /// `out` does not match (naming the key and the shapes), when a leaf of
  /// `out` requires grad or shares memory with the buffer's storage, and
  /// on an empty buffer. Synchronized, and rate limited, as `sample` is.
  SampleInfo sample_into(const TensorDict& out);
  /// `sample_into` of `batch_size` (> 0) rows into rows `[offset, offset +
  /// batch_size)` of `out`, which must lie within its `N` rows: several
  /// buffers' samples gathered into one batch without a copy (as
  /// `ReplayBufferEnsemble` does).
  SampleInfo sample_into(const TensorDict& out, int64_t offset,
                         int64_t batch_size);

  /// Sets the priorities of storage rows `index` (`PrioritizedSampler` and
  /// `PrioritizedSliceSampler` only):
  /// `index` and `priority` are 1-D of the same length, indices in
  /// `[0, size())`, priorities finite and >= 0 (`eps` is added, then the
  /// power `alpha`). A row whose `(priority + eps)^alpha` is 0 is never
  /// sampled, and the importance weights are taken relative to the smallest
  /// positive probability, so they stay in (0, 1] (with `eps(0)` too). All-or-nothing: every entry is checked before any
  /// priority changes. With duplicate indices, the last one wins.
  void update_priority(const at::Tensor& index, const at::Tensor& priority);

  /// Writes a checkpoint of the whole buffer into `dir`, which must not
  /// exist or be empty (a checkpoint is never written over another, so a
  /// crash during `dumps` cannot destroy the previous one). `loads` of it
  /// resumes the buffer exactly: the same rows, cursor and size, and the
  /// same samples afterwards as from the uninterrupted buffer (the random
  /// generator, `SamplerWithoutReplacement`'s and the slice samplers'
  /// epochs, the priorities and the trees, the rate limiter's counts; a
  /// `MaxValueWriter` ranks the stored rows again).
  ///
  /// Layout: what `storage_dir` holds (a buffer that `ReplayBufferOptions::
  /// storage_dir(dir)` reopens, and TorchRL's files, so TorchRL's
  /// `ReplayBuffer.loads(dir)` loads its rows and priorities), plus
  /// `checkpoint/`, a memmap directory (Python tensordict's format) of the
  /// rest: `format_version`, `capacity`, `sampler` (the `SamplerConfig`
  /// index), `rng` (the generator's state as text, uint8), `inserted`,
  /// `sampled`, and the sampler's entries (`epoch_perm`, `epoch_pos`,
  /// `epoch_size`; `mass`, `max_priority`). The storage is copied to the CPU.
  void dumps(const std::string& dir) const;
  /// Replaces this buffer's state with the checkpoint `dumps` wrote in
  /// `dir`. The buffer must have the capacity and sampler the checkpoint
  /// was written with (else a `c10::ValueError` naming both), and, once it
  /// has rows, their structure. Everything is checked before anything
  /// changes: a damaged checkpoint or a mismatch throws a `c10::Error`
  /// naming the problem and leaves the buffer as it was.
  void loads(const std::string& dir);

  /// Rows currently stored (≤ capacity).
  [[nodiscard]] int64_t size() const;
  /// The rows the storage holds (`ReplayBufferOptions::capacity`).
  [[nodiscard]] int64_t capacity() const;
  /// `size() == 0`.
  [[nodiscard]] bool empty() const { return size() == 0; }
  /// The next row that will be written.
  [[nodiscard]] int64_t cursor() const;
  /// Forgets every row (and the sampler's state); keeps the storage.
  void clear();
  /// Reseeds the buffer's generator (the sampler's state, such as the
  /// current epoch of `SamplerWithoutReplacement`, is kept).
  void manual_seed(uint64_t seed);

  /// The storage dict itself (a handle, not a copy), batch size
  /// `[capacity]`; an empty dict before the first write. With a
  /// `storage_dir`, its leaves are memory-mapped (`is_memmap()`), with
  /// `saved_path() == storage_dir + "/storage"`. Rows at or past
  /// `size()` hold zeros or stale data. Reading it is not synchronized with
  /// concurrent writers (on CUDA, the current stream is ordered after the
  /// buffer's earlier calls; see the top of this file). The dict is locked (`is_locked()`): the buffer
  /// caches its leaves, so `set`, `erase`, `rename_key_` and the like throw,
  /// while in-place writes into the rows are allowed.
  [[nodiscard]] TensorDict storage() const;
  /// The rate limiter's counts (all zero without a rate limiter).
  [[nodiscard]] RateLimiterInfo rate_limiter_info() const;
  /// The options the buffer was made with.
  [[nodiscard]] const ReplayBufferOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensordict
