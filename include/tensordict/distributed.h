// tensordict/distributed.h — TensorDicts between processes, over c10d.
//
// Everything here runs on a c10d process group (`torch::distributed`'s
// engine): Gloo, which LibTorch has built in, or NCCL on GPU builds. The
// library brings no transport of its own. A `Group` stands for the process
// group; `make_gloo_group` makes one from a rendezvous address.
//
// Point to point, wire-compatible with Python tensordict:
//
//  - `send` / `recv` (and `isend` / `irecv`) speak exactly Python's
//    `td.send(dst, init_tag=...)` / `td.recv(src, init_tag=...)` protocol:
//    one message per leaf, the leaves in `sorted_keys` order with each
//    sub-dict's leaves sent in place of its key, tags `init_tag`,
//    `init_tag + 1`, ... A C++ process and a Python process exchange dicts
//    this way in both directions. The protocol carries no metadata: both
//    sides hold dicts with the same keys, shapes and dtypes. Non-tensor
//    entries carry no tensor and are not sent, as in Python;
//  - `init_remote` / `from_remote_init` first send the structure (keys,
//    batch sizes, shapes, dtypes), so the receiver needs no dict of its own;
//    the data then moves as one message. The layout, Python tensordict
//    >= 0.5's, is documented below.
//
// Collectives (`broadcast`, `all_reduce`, `all_gather`) move one fused flat
// buffer (one per dtype for `all_reduce`) instead of one call per leaf,
// after a handshake that checks every rank holds the same structure.
// They are not Python tensordict's per-leaf collectives on the wire.
//
// Errors. Every failure is a `c10::Error` naming the operation and, where
// one is to blame, the key: a local dict the protocol cannot move, a
// structure mismatch, a peer that died or timed out (within the group's
// timeout; nothing waits forever). A failed receive leaves the receiving
// dict unchanged: data is received into a temporary and written (with the
// write plan's checks, which run before anything moves) only once every
// message arrived.
//
// One limit of the metadata-free protocol: Gloo (LibTorch 1.13) does not
// report how many bytes a message carried. A message shorter than the leaf
// it is received into is accepted, and one longer aborts the receiving
// process inside Gloo, as in Python. Peers that might disagree on shapes
// use `init_remote` / `from_remote_init`, which carry the structure.
//
// NCCL. The transfers and collectives take CUDA leaves over a
// `ProcessGroupNCCL` (the collectives' handshake then runs on the leaves'
// GPU), but this path is untested: the project's CI has no GPU. The
// `init_remote` / `from_remote_init` messages are CPU tensors, so they need
// a backend that moves those (Gloo).
//
// docs/tutorials/distributed.md walks through all of this.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tensordict/tensor_dict.h"

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace tensordict {

/// A c10d process group, as the functions of this header take it: a
/// `c10d::ProcessGroup` (LibTorch 1.x's `ProcessGroupGloo` and
/// `ProcessGroupNCCL`, 2.x's dispatching group) or a `c10d::Backend`
/// (LibTorch 2.x's `ProcessGroupGloo` and `ProcessGroupNCCL`). It shares
/// ownership of the group. Ranks are ranks within this group.
///
/// Example:
/// ```
///   auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size);
///   tensordict::send(td, 1, pg);
/// ```
class Group {
 public:
  /// Any c10d group: a `ProcessGroup` (LibTorch 1.x's groups, and 2.x's
  /// wrapper) or a `Backend` (2.x's `ProcessGroupGloo`, `ProcessGroupNCCL`).
  template <typename T, typename = std::enable_if_t<
                            std::is_base_of<c10d::ProcessGroup, T>::value ||
                            std::is_base_of<c10d::Backend, T>::value>>
  Group(c10::intrusive_ptr<T> group)  // NOLINT: implicit on purpose
      : group_(std::move(group)),
        is_backend_(std::is_base_of<c10d::Backend, T>::value) {}
  /// A group held elsewhere (made with `c10::make_intrusive`, as every
  /// c10d group is): shares its ownership.
  ///@{
  Group(c10d::ProcessGroup& group);  // NOLINT
  Group(c10d::Backend& group);       // NOLINT
  ///@}

  /// This process's rank in the group.
  [[nodiscard]] int rank() const;
  /// The number of processes in the group.
  [[nodiscard]] int size() const;
  /// "gloo", "nccl", ...
  [[nodiscard]] std::string backend_name() const;

  /// The group as a `c10d::ProcessGroup` (null when it is a `Backend`).
  [[nodiscard]] c10d::ProcessGroup* process_group() const;
  /// The group as a `c10d::Backend` (null when it is a `ProcessGroup`).
  [[nodiscard]] c10d::Backend* backend() const;

 private:
  c10::intrusive_ptr<c10::intrusive_ptr_target> group_;
  bool is_backend_;
};

/// Options of `make_gloo_group`.
struct GlooGroupOptions {
  /// The rendezvous: rank 0 serves a `c10d::TCPStore` at host:port and the
  /// other ranks connect to it.
  ///@{
  std::string host = "127.0.0.1";
  int port = 29500;
  ///@}
  /// The group's timeout: a collective or a receive that waits longer
  /// throws. Also bounds the rendezvous.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  /// Prefix of the store keys (several groups may share one store).
  std::string prefix = "tensordict";
  /// Join Python processes instead: the group is the default group that
  /// `torch.distributed.init_process_group("gloo",
  /// init_method="tcp://<host>:<port>", rank=r, world_size=n)` makes in
  /// Python, and this process one of its ranks (`prefix` is unused). Follows
  /// torch 1.13's layout of that group in the store (the key prefixes
  /// "default_pg" and "0", the store-based barrier, the sequence number),
  /// tested against Debian's Python torch 1.13; other torch versions may
  /// lay it out differently.
  bool python_world = false;
};

/// A Gloo process group of `size` processes, this one `rank`, meeting at a
/// `c10d::TCPStore` (`options`): Python's
/// `torch.distributed.init_process_group("gloo", ...)` without the global
/// state. Blocks until every rank joined (or the timeout passed: throws).
/// Throws when LibTorch was built without Gloo.
[[nodiscard]] Group make_gloo_group(int rank, int size,
                                    const GlooGroupOptions& options = {});

/// A transfer in flight (`isend`, `irecv`). `wait()` blocks until it
/// completed, and for a receive writes the received data into the dict.
/// A handle that is never waited on still completes its sends; a receive
/// that is not waited on writes nothing.
class Work {
 public:
  /// A handle with no transfer: `wait()` returns at once. Moved-from
  /// handles are such handles too.
  ///@{
  Work();
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ///@}

  /// Blocks until every message of the transfer completed (or the group's
  /// timeout passed), then, for a receive, writes the data. Throws the
  /// transfer's error, leaving the receiving dict unchanged. Waiting again
  /// returns at once (or throws the same error).
  void wait();
  /// True once `wait()` would return without blocking: every message has
  /// arrived (or the transfer failed). The first call starts a thread that
  /// waits for the messages (Gloo's works report completion only once
  /// waited on), so a loop polling it ends; destroying a handle whose
  /// messages are still in flight then waits for them (or the timeout).
  [[nodiscard]] bool is_completed() const;

  struct State;

 private:
  friend Work isend(const TensorDict&, int, const Group&, int, bool);
  friend Work irecv(const TensorDict&, int, const Group&, int, bool);
  explicit Work(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

/// Sends every leaf of `td` to rank `dst`: Python's
/// `td.send(dst, group=pg, init_tag=init_tag)` (see the top of this file).
/// Leaves go as their contiguous bytes; they must be dense tensors on a
/// device the group moves (the CPU for Gloo). Blocks until every message
/// was handed to the transport.
///
/// With `consolidated` (Python's `send(..., consolidated=True)`), the dict
/// must be consolidated (`consolidate()`), and its storage goes as one
/// message under `init_tag`; the receiver calls `recv` with `consolidated`
/// on a dict of the same layout (a `consolidate()`d dict of the same keys,
/// shapes and dtypes, inserted in the same order).
void send(const TensorDict& td, int dst, const Group& pg, int init_tag = 0,
          bool consolidated = false);
/// Receives the leaves sent by `send` (or Python's `td.send`) from rank
/// `src` into the existing leaves of `td`, in place: the leaves keep their
/// storage, which may be a slice of a larger buffer (`buffer[Slice(0, 4)]`
/// converts to such a dict of views). Before anything moves, every leaf
/// passes the write plan's checks (as `update_`); the data then lands in a
/// temporary and is copied into the leaves once every message arrived, so
/// a failed receive changes nothing.
void recv(const TensorDict& td, int src, const Group& pg, int init_tag = 0,
          bool consolidated = false);
/// `send` without blocking: the returned handle's `wait()` blocks until
/// every message was handed over. The leaves must not change until then.
[[nodiscard]] Work isend(const TensorDict& td, int dst, const Group& pg,
                         int init_tag = 0, bool consolidated = false);
/// `recv` without blocking: the checks run now, the write happens in the
/// handle's `wait()`.
[[nodiscard]] Work irecv(const TensorDict& td, int src, const Group& pg,
                         int init_tag = 0, bool consolidated = false);

// ---- A dict for a receiver that has none ---------------------------------------
//
// Python tensordict (>= 0.5)'s `td.init_remote(dst)` and
// `TensorDict.from_remote_init(src)`, message for message: under `init_tag`
// (Python: 0), an int64 `[1]` holding the length of the metadata, the
// metadata as a Python pickle (`torch.distributed.send_object_list`'s two
// messages), then the dict's consolidated storage (uint8) as one message.
// The metadata is Python's `consolidate()` metadata plus "_total_bytes":
// per level {"cls": "TensorDict", "non_tensors": {}, "leaves": {key:
// [dtype, shape, start, stop, pad]}, "cls_metadata": {"device", "names",
// "batch_size", "is_locked"}, <sub-dict key>: {...}}, byte offsets into
// the storage. As in Python, a level's leaves come before its sub-dicts on
// arrival, whatever their order in the sent dict.

/// Sends `td` and its structure to rank `dst` (consolidating a copy on the
/// CPU unless it is consolidated there). Non-tensor data is not sent yet
/// (throws, as `consolidate` does). Keys named like the metadata's fields
/// ("cls", "leaves", ...) cannot be sub-dicts.
void init_remote(const TensorDict& td, int dst, const Group& pg,
                 int init_tag = 0);
/// Receives a dict sent by `init_remote` (or Python's `init_remote`): a new
/// CPU dict, consolidated over the received storage, so that later rounds
/// can `recv(td, src, pg, tag, /*consolidated=*/true)` into it. The
/// metadata is checked against the storage before the storage moves; bad
/// metadata is a c10::Error.
[[nodiscard]] TensorDict from_remote_init(int src, const Group& pg,
                                          int init_tag = 0);

// ---- Collectives -------------------------------------------------------------
//
// Every rank calls them with a dict of the same structure (keys, shapes,
// dtypes; insertion order may differ). A handshake (one small `allreduce`)
// checks that first: on a mismatch every rank throws, naming the first key
// that differs, and no data moves. The leaves then travel as one fused
// buffer. The dict of a rank whose call fails is unchanged.

/// How `all_reduce` combines the ranks' values.
enum class ReduceOp {
  kSum,
  /// The sum divided by the number of ranks (floating-point leaves only).
  kMean,
  kMax,
  kMin,
};

/// Every rank's dict takes the values of rank `root`'s, in place (as
/// `recv`: the write plan's checks first, the data through a temporary).
void broadcast(const TensorDict& td, int root, const Group& pg);
/// Every rank's dict takes the element-wise reduction of all ranks' values,
/// in place. The leaves are reduced as one flat buffer per dtype. Every
/// dtype but bool and the complex ones is supported (float16 and bfloat16
/// are reduced in float32 and int16 in int32, which not every Gloo takes);
/// kMean needs floating-point leaves.
void all_reduce(const TensorDict& td, ReduceOp op, const Group& pg);
/// Every rank's dict, stacked along a new leading batch dim in rank order:
/// a new dict of batch size `[pg.size(), td.batch_size()...]` whose leaves
/// view one gathered buffer.
[[nodiscard]] TensorDict all_gather(const TensorDict& td, const Group& pg);

}  // namespace tensordict
