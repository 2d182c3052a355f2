// Internal: TorchRL's replay-buffer directory (what TorchRL 0.4's
// `ReplayBuffer.dumps(dir)` writes for a `LazyMemmapStorage` buffer and
// `ReplayBuffer.loads(dir)` reads), kept by a disk-backed ReplayStorage next
// to its own parts, so that TorchRL loads the buffer, and read when the
// storage opens a directory that TorchRL wrote.
//
// Layout (TorchRL's; `storage/` is the storage's memmap directory itself):
//   buffer_metadata.json           {"batch_size": null}
//   storage/storage_metadata.json  {"metadata": {}, "is_pytree": false,
//                                   "len": <size>}
//   writer/metadata.json           {"cursor": <cursor>}
//   sampler/                       what the sampler's `dumps` writes:
//     PrioritizedSampler and       sampler_metadata.json {"_alpha", "_beta",
//     PrioritizedSliceSampler:     "_eps", "_max_priority", "_max_capacity"},
//                                  sumtree.memmap and mintree.memmap (raw
//                                  float64 [capacity]: each stored row's mass
//                                  (priority + eps)^alpha; the other rows
//                                  hold 0 and FLT_MAX, the initial values of
//                                  TorchRL's float32 trees, as do rows of
//                                  mass 0 in the min tree)
//     SamplerWithoutReplacement:   sampler_metadata.json, a fresh epoch
//     the other samplers:          nothing (TorchRL's dumps writes nothing)
//
// The files are written whole when the storage is created or opened. After
// that the numbers that change (len, cursor, _max_priority, the trees) are
// rewritten in place in the mapped files: each number has a fixed-width
// field, padded with spaces (JSON allows them before the closing brace), so
// a write costs a few stores and no system call. A process killed in the
// middle of such a store may leave a field torn; the next ReplayStorage that
// opens the directory rewrites every file from its own state/.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tensordict/replay_buffer.h"

namespace tensordict {
namespace detail {

// The raw priority whose mass (priority + eps)^alpha is `mass` (finite, >=
// 0), clamped at 0 (rounding).
inline double raw_priority(double mass, double alpha, double eps) {
  return std::max(std::pow(mass, 1.0 / alpha) - eps, 0.0);
}

// A number in a mapped JSON file, rewritten in place (see above).
class JsonNumberField {
 public:
  JsonNumberField() = default;
  // The `width` bytes at `offset` of the mapped `file` (uint8).
  JsonNumberField(at::Tensor file, size_t offset, size_t width);
  [[nodiscard]] bool bound() const { return field_ != nullptr; }
  void set(int64_t v) const;
  // As Python's json.dumps writes a float (a finite one): always with a '.'
  // or an exponent, so that Python reads a float back.
  void set(double v) const;

  // Widths that hold any int64 and any finite double.
  static constexpr size_t kIntWidth = 20;
  static constexpr size_t kFloatWidth = 24;

 private:
  void put(const char* text, size_t n) const;

  at::Tensor file_;  // keeps the mapping alive
  char* field_ = nullptr;
  size_t width_ = 0;
};

// TorchRL's files of a disk-backed storage in `dir`, kept up to date.
// The mass (priority + eps)^alpha of a stored row of raw priority `raw`,
// as a reopened buffer has it: a raw priority that is not finite and >= 0
// (a damaged priority/ file) counts as `max_priority`.
inline double row_mass(double raw, double max_priority, double eps,
                       double alpha) {
  if (!(std::isfinite(raw) && raw >= 0)) raw = max_priority;
  return std::pow(raw + eps, alpha);
}

class TorchRLFiles {
 public:
  // Writes every file for a storage of `capacity` rows, of which `size` are
  // stored, with the write cursor at `cursor`, replacing what is there (a
  // PrioritizedSampler's tree files of the right size are corrected in
  // place instead, where they differ). For a PrioritizedSampler, `raw`
  // holds the raw priorities of the stored rows and `max_priority` the
  // largest one seen (both as the storage persists them). Removes the files
  // of other samplers. Throws a c10::Error naming the file that cannot be
  // written.
  void write(const std::string& dir, const SamplerConfig& sampler,
             int64_t capacity, int64_t size, int64_t cursor, const double* raw,
             double max_priority, TorchRLVersion version);
  [[nodiscard]] bool bound() const { return len_.bound(); }
  // After a write or clear().
  void set_counts(int64_t size, int64_t cursor) const {
    len_.set(size);
    cursor_.set(cursor);
  }
  // The mass (priority + eps)^alpha of row `i` (PrioritizedSampler).
  void set_mass(int64_t i, double mass) const;
  // Every row's mass 0, as TorchRL's emptied sampler has them (after
  // clear()); entries that hold it already are not written.
  void clear_masses() const;
  void set_max_priority(double p) const { max_priority_.set(p); }
  // The mapped `sampler/sumtree.memmap` as float64 [capacity], which
  // `write` left holding every row's mass as a PrioritizedSampler's restore
  // computes it (row_mass); undefined for other samplers.
  [[nodiscard]] at::Tensor sum_file() const {
    return sum_file_.defined() ? sum_file_.view(at::kDouble) : at::Tensor();
  }

 private:
  JsonNumberField len_, cursor_, max_priority_;
  at::Tensor sum_file_, min_file_;  // keep the mappings alive
  double* sum_ = nullptr;
  double* min_ = nullptr;
};

// Whether `dir` holds a buffer that TorchRL dumped
// (storage/storage_metadata.json exists).
bool is_torchrl_dump(const std::string& dir);

// What a TorchRL dump says besides its storage.
struct TorchRLDump {
  // Rows written, in ReplayStorage's terms: cursor == rows % capacity and
  // size == min(rows, capacity).
  int64_t rows_written = 0;
  // From a PrioritizedSampler's files, when asked for and present:
  bool has_priorities = false;
  double max_priority = 0;
  // The raw priorities of rows [0, size): mass^(1 / alpha) - eps (clamped
  // to >= 0), from sumtree.memmap and the dump's alpha and eps.
  std::vector<double> priorities;
};

// Reads and checks the metadata of the TorchRL dump in `dir` for a storage
// of `capacity` rows (the priorities only when `want_priorities`). Throws a
// c10::Error (ValueError for a capacity that differs) naming the file and
// the value at fault; never changes the directory.
TorchRLDump read_torchrl_dump(const std::string& dir, int64_t capacity,
                              bool want_priorities);

}  // namespace detail
}  // namespace tensordict
