// Internal: ReplayBuffer's storage (TorchRL's LazyTensorStorage and
// LazyMemmapStorage): the rows, the write cursor and the disk layout.
//
// Layout. The storage is one locked TensorDict of batch size [capacity]
// (`dict()`). Writes go through a write plan cached for it
// (core/write_plan.h's RowWritePlan): it pairs the incoming dict with the
// storage's leaves and checks keys, row shapes, dtypes and devices before
// touching anything, then writes a row, or a block of rows as one slice
// write per leaf (a byte copy for contiguous CPU leaves, copy_ otherwise).
//
// Disk-backed storage (`ReplayBufferOptions::storage_dir`). The directory
// holds three memmap directories (Python tensordict's format):
//   storage/   the storage dict, batch size [capacity], created on the first
//              write by `memmap_like` of a template whose leaves are expanded
//              views of that write's first row (no data read);
//   priority/  `priority` float64 [capacity]: raw priorities (before eps and
//              alpha);
//   state/     int64/float64 scalars: format_version, capacity, rows_written
//              (rows written since creation or clear(): cursor =
//              rows_written % capacity, size = min(rows_written, capacity)),
//              max_priority, priorities_valid. Written last (its meta.json is
//              the buffer's commit point).
// plus TorchRL's files (rl/torchrl_files.h: storage/storage_metadata.json,
// writer/, sampler/, buffer_metadata.json), so that TorchRL's
// `ReplayBuffer.loads(dir)` loads the buffer. They are derived from state/
// and priority/, and rewritten whole whenever a storage opens the directory.
// Every write stores into these MAP_SHARED pages with plain stores: the rows
// first, then their priorities, then `rows_written` (one aligned 8-byte
// store), then TorchRL's len and cursor, so a process killed at any point
// leaves a consistent buffer (a row being written when killed is not
// counted). The storage owns priority/, state/ and TorchRL's files; the
// prioritized sampler stores into them through `priorities()`.
//
// A directory that TorchRL's `dumps` wrote (no state/, a
// storage/storage_metadata.json) is imported on opening: its storage/ is
// mapped in place, its len and cursor become rows_written, and a
// PrioritizedSampler's tree becomes raw priorities; then state/ and
// priority/ are created, and from there on it is a storage like any other.
//
// Shared storage (ReplayBufferOptions::shared): a disk-backed storage,
// in /dev/shm unless storage_dir is set, which every process forked from
// the constructing one maps; `sync()` (under ReplayBuffer's cross-process
// lock) maps it when another process allocated it and reads the committed
// row count, the only state the processes share besides the files.
//
// Not synchronized: ReplayBuffer's mutex guards every call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/internal.h"
#include "core/stream_order.h"
#include "core/write_plan.h"
#include "rl/torchrl_files.h"
#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

// The sources of one write, in the storage's leaf order.
using Sources = RowWritePlan::Sources;

// A zero-filled CPU tensor of `shape` and `dtype`. A large one (4 MB or
// more, on Linux) is fresh anonymous memory advised to use huge pages: the
// kernel's pages read as zero until first written, so its first writes are
// its first touch (at::zeros writes every byte up front: seconds for the
// 4.5 GB of 10^8 rlox rows). It is page-aligned, as LibTorch's allocator
// aligns to 64 bytes. `what` names it in errors ("a storage leaf").
at::Tensor zeros_cpu(c10::IntArrayRef shape, at::ScalarType dtype,
                     const char* what);

// The priorities a disk-backed storage persists: priority/ and two scalars
// of state/, mapped, plus their mirror in TorchRL's sampler files. All null
// while the storage is in RAM or before the first write created them.
struct PersistedPriorities {
  double* raw = nullptr;     // priority/priority, [capacity]
  double* max = nullptr;     // state/max_priority
  int64_t* valid = nullptr;  // state/priorities_valid
  const TorchRLFiles* torchrl = nullptr;

  // Row `i`'s raw priority and its mass (priority + eps)^alpha.
  void set(int64_t i, double priority, double mass) const {
    if (raw == nullptr) return;
    raw[i] = priority;
    if (torchrl != nullptr) torchrl->set_mass(i, mass);
  }
  // Every row's mass 0 in TorchRL's files (clear()).
  void clear_masses() const {
    if (torchrl != nullptr) torchrl->clear_masses();
  }
  void set_max(double priority) const {
    if (max == nullptr) return;
    *max = priority;
    if (torchrl != nullptr) torchrl->set_max_priority(priority);
  }
};

// The largest raw priority before any `update_priority` (1, as in TorchRL):
// the priority of new rows, and state/max_priority when state/ is created.
constexpr double kInitialMaxPriority = 1.0;

class ReplayStorage {
 public:
  // The storage `options` describe (capacity and device checked), in RAM,
  // or in `options.storage_dir()` when set: reopening the buffer found
  // there, or the dump TorchRL wrote there. A PrioritizedSampler maintains
  // the persisted priorities; other samplers mark them stale on every
  // write.
  explicit ReplayStorage(const ReplayBufferOptions& options);
  // Removes the /dev/shm directory of a shared storage (in the process
  // that made it).
  ~ReplayStorage();
  // priorities() points into it.
  ReplayStorage(const ReplayStorage&) = delete;
  ReplayStorage& operator=(const ReplayStorage&) = delete;

  [[nodiscard]] int64_t capacity() const { return capacity_; }
  [[nodiscard]] int64_t size() const { return size_; }
  [[nodiscard]] int64_t cursor() const { return cursor_; }
  // Bumped by every write and clear().
  [[nodiscard]] uint64_t writes() const { return writes_; }
  [[nodiscard]] bool allocated() const { return allocated_; }
  // The storage dict (locked); empty before the first write. A caller that
  // reads its rows calls `enter_stream()` first; the writes below do.
  [[nodiscard]] const TensorDict& dict() const { return storage_; }
  // Before an access to the rows from the current stream: orders it after
  // the accesses made from other streams (core/stream_order.h; a no-op for
  // CPU storage).
  void enter_stream() { streams_.enter(); }
  [[nodiscard]] const PersistedPriorities& priorities() const {
    return priorities_;
  }

  // Checks `value` (batch dims `value_bd`) for a write by `op` (errors call
  // it the `what`), allocating the storage from it when this is the first
  // write, and binds its leaves to `sources`. When a leaf shares memory with
  // the storage (a view of it, as in `extend(rb.storage()[...])`), writing
  // in place could read rows it has already written: `sources` then point
  // into a copy of `value`, which is returned and must outlive the write
  // (nullopt otherwise: no dict is made). Throws naming the first
  // difference; nothing changes when it throws.
  c10::optional<TensorDict> prepare(const char* op, const char* what,
                                    const TensorDict& value, int64_t value_bd,
                                    Sources& sources);
  // Checks `value` against the allocated storage (sources: its leaves).
  void validate(const char* op, const char* what, const TensorDict& value,
                int64_t value_bd, Sources& sources) const;

  // Writes the row `sources` (batch size []) at the cursor and advances it;
  // returns the row written. `commit()` persists the new row count.
  int64_t write_row(const Sources& sources);
  // Writes row `src_row` of `sources` (batch dims `value_bd`) to row `row`:
  // with `append`, the cursor's row, which the cursor then passes (as
  // write_row does); else a stored row (< size()), the cursor and size
  // staying (MaxValueWriter's replacements). `commit()` persists.
  void write_row_at(const Sources& sources, int64_t value_bd, int64_t src_row,
                    int64_t row, bool append);
  // Writes the `n` rows of `sources` (batch size [n]) from the cursor on,
  // wrapping (only the last `capacity` when n > capacity, each where a
  // row-by-row write would put it), and advances the cursor; fills
  // `index[0, min(n, capacity))` with the rows written and returns the
  // first. `commit()` persists the new row count.
  int64_t write_rows(const Sources& sources, int64_t n, int64_t* index);
  // Rows written since creation or clear() (cursor = rows % capacity, size
  // = min(rows, capacity)).
  [[nodiscard]] int64_t rows_written() const { return rows_written_; }
  // After rows were copied in from a checkpoint (ReplayBuffer::loads): the
  // counter, cursor and size that `rows` gives, persisted.
  void restore_rows_written(int64_t rows);
  // Persists the counter after a write or clear(): one aligned 8-byte store.
  void commit() const;
  // Forgets every row (cursor, size and the persisted row count); keeps the
  // allocated storage.
  void clear();
  // A shared storage (ReplayBufferOptions::shared), under the cross-process
  // lock: catches up with the other processes' writes, mapping the storage
  // when another process allocated it, and reading the committed row count.
  void sync();

 private:
  static constexpr int64_t kFormatVersion = 1;

  // After `n` rows were written (counting those a long batch skipped).
  void count_rows(int64_t n);
  // The cursor and size of `rows` rows written in all (reopening, or
  // another process's writes).
  void set_rows_written(int64_t rows);
  void allocate(const char* op, const char* what, const TensorDictImpl& value,
                int64_t value_bd);
  // Makes `st` (locked; `plan` its write plan) the storage.
  void adopt(TensorDict st, RowWritePlan plan);

  template <typename LeafFn>
  ImplPtr storage_tree(const TensorDictImpl& value, int64_t value_bd,
                       std::vector<int64_t> batch, const LeafFn& leaf) const;
  ImplPtr allocate_storage(const TensorDictImpl& value, int64_t value_bd,
                           std::vector<int64_t> batch) const;
  ImplPtr expanded_template(const TensorDictImpl& value, int64_t value_bd,
                            std::vector<int64_t> batch) const;

  // ---- Disk-backed storage -------------------------------------------------
  [[nodiscard]] std::string sub(const char* name) const;
  void open_dir(const std::string& storage_dir);
  void check_empty_dir() const;
  [[nodiscard]] TensorDict load_part(const char* name) const;
  [[nodiscard]] at::Tensor state_leaf(const TensorDict& td, const char* part,
                                      const char* key, at::ScalarType dtype,
                                      c10::IntArrayRef shape) const;
  void bind_state(TensorDict state, TensorDict priority);
  void reopen();
  void import_torchrl();
  [[nodiscard]] TensorDict allocate_disk(const TensorDictImpl& value,
                                         int64_t value_bd);
  void create_state(double max_priority, const std::vector<double>* raw);
  void write_torchrl_files();
  // A PrioritizedSampler maintains the persisted priorities; other samplers
  // mark them stale on every write.
  [[nodiscard]] bool keeps_priorities() const;
  // `value` plus the "index" entry TorchRL's writer would give it, when the
  // storage fills one (see fills_index_) and `value` lacks it.
  [[nodiscard]] c10::optional<TensorDict> with_index(const TensorDict& value,
                                                     int64_t value_bd) const;

  int64_t capacity_ = 0;
  c10::optional<at::Device> device_;
  SamplerConfig sampler_;

  // The storage is a plain TensorDict: `allocate_storage` (RAM) and
  // `allocate_disk` are the places that create its tensors, and every write
  // goes through `plan_`.
  TensorDict storage_;
  bool allocated_ = false;
  RowWritePlan plan_;
  StreamOrder streams_;  // of the storage's leaves (set by adopt)
  int64_t size_ = 0;
  int64_t cursor_ = 0;
  uint64_t writes_ = 0;       // bumped by every write and clear()
  int64_t rows_written_ = 0;  // rows written since construction or clear()

  // ---- Disk-backed storage (see the top of this file) ----------------------
  std::string dir_;            // empty: the storage is in RAM
  bool shared_ = false;        // ReplayBufferOptions::shared
  int owner_pid_ = 0;          // made dir_ in /dev/shm (0: none did)
  bool sparse_files_ = false;  // memmap_like's `sparse` for dir_
  TorchRLVersion torchrl_version_ = TorchRLVersion::v0_14;  // of dir_'s files
  TensorDict disk_state_;        // state/ (keeps the mappings alive)
  TensorDict disk_priority_;     // priority/
  int64_t* rows_ptr_ = nullptr;  // state/rows_written
  PersistedPriorities priorities_;
  TorchRLFiles torchrl_;  // TorchRL's files (rl/torchrl_files.h)
  // The storage holds TorchRL's "index" entry (int64 [capacity], which
  // TorchRL's TensorDictReplayBuffer stores with every row): writes that
  // lack it get their rows' indices there, as TorchRL's writer does.
  bool fills_index_ = false;
};

}  // namespace detail
}  // namespace tensordict
