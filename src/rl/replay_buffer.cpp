// ReplayBuffer: lazy circular TensorDict storage plus the four samplers.
//
// Layout. The storage is one TensorDict of batch size [capacity] (the member
// `Impl::storage`). Next to it, `slots` lists its leaves flattened (key,
// stored tensor, row shape, dtype, bytes per row, and the base pointer when
// rows can be byte-copied), and `schema` mirrors its key tree with each leaf
// pointing at its slot. Writes validate the incoming dict against `schema`
// (keys, row shapes, dtypes) before touching anything, then copy each leaf's
// rows with one memcpy per leaf (copy_ when a side is not a contiguous CPU
// tensor). Sampling draws storage indices, then gathers them into freshly
// allocated leaves (one allocation per leaf, one memcpy per row and leaf;
// index_select when the leaf cannot be byte-copied).
//
// Disk-backed storage (`ReplayBufferOptions::storage_dir`). The directory
// holds three memmap directories (Python tensordict's format):
//   storage/   the storage dict, batch size [capacity], created on the first
//              write by `memmap_like` of a template whose leaves are expanded
//              views of that write's first row (sparse files, no data read);
//   priority/  `priority` float64 [capacity]: raw priorities (before eps and
//              alpha), sparse;
//   state/     int64/float64 scalars: format_version, capacity, rows_written
//              (rows written since creation or clear(): cursor =
//              rows_written % capacity, size = min(rows_written, capacity)),
//              max_priority, priorities_valid. Written last (its meta.json is
//              the buffer's commit point).
// Every write stores into these MAP_SHARED pages with plain stores: the rows
// first, then their priorities, then `rows_written` (one aligned 8-byte
// store), so a process killed at any point leaves a consistent buffer (a row
// being written when killed is not counted).
//
// Synchronization. One mutex guards the storage, the cursor, the size, the
// generator and the sampler state; writes and gathers both run under it, so
// a sampled row is never half-written.
#include "tensordict/replay_buffer.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/types.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/internal.h"
#include "core/write_plan.h"
#include "rl/segment_tree.h"

namespace tensordict {

using detail::ImplPtr;
using detail::Node;
using detail::TensorDictImpl;

namespace {

// One leaf of the storage.
struct Slot {
  explicit Slot(NestedKey k) : key(std::move(k)) {}
  NestedKey key;
  at::Tensor tensor;               // [capacity, row_shape...]
  std::vector<int64_t> row_shape;  // the leaf's shape after the batch dim
  at::ScalarType dtype = at::kFloat;
  size_t row_bytes = 0;
  char* base = nullptr;  // set when rows can be byte-copied (CPU, contiguous)
};

// The storage's key tree; a leaf names its slot.
struct SchemaNode {
  std::string key;
  int slot = -1;                     // leaf: index into slots
  std::vector<SchemaNode> children;  // sub-dict
  [[nodiscard]] bool is_dict() const { return slot < 0; }
};

// One leaf of an incoming dict, matched to its slot.
struct Pending {
  const Slot* slot;
  const at::Tensor* src;
};
using PendingList = c10::SmallVector<Pending, 16>;

bool byte_copyable(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided &&
         t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

// Matches `value`'s key tree against `schema`; false when the keys differ.
bool match_keys(const std::vector<SchemaNode>& schema,
                const TensorDictImpl& value, const std::vector<Slot>& slots,
                PendingList& out) {
  if (value.nodes.size() != schema.size()) return false;
  for (size_t i = 0; i < value.nodes.size(); ++i) {
    const Node& vn = value.nodes[i];
    const SchemaNode* sn = nullptr;
    if (schema[i].key == vn.key) {
      sn = &schema[i];  // same insertion order: the common case
    } else {
      for (const auto& c : schema) {
        if (c.key == vn.key) sn = &c;
      }
    }
    if (sn == nullptr || sn->is_dict() != vn.is_dict()) return false;
    if (vn.is_dict()) {
      if (!match_keys(sn->children, *vn.dict, slots, out)) return false;
    } else {
      out.push_back(Pending{&slots[static_cast<size_t>(sn->slot)], &vn.tensor});
    }
  }
  return true;
}

std::vector<NestedKey> all_keys(const TensorDictImpl& impl) {
  std::vector<NestedKey> keys;
  detail::collect_keys(impl, nullptr, /*include_nested=*/true,
                       /*leaves_only=*/false, keys);
  return keys;
}

std::vector<NestedKey> minus(const std::vector<NestedKey>& a,
                             const std::vector<NestedKey>& b) {
  std::vector<NestedKey> out;
  for (const auto& k : a) {
    if (std::find(b.begin(), b.end(), k) == b.end()) out.push_back(k);
  }
  return out;
}

// Unbiased uniform integer in [0, n) (Lemire's multiply-shift).
inline int64_t uniform_int(std::mt19937_64& rng, uint64_t n) {
  uint64_t x = rng();
  __uint128_t m = static_cast<__uint128_t>(x) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      x = rng();
      m = static_cast<__uint128_t>(x) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(m >> 64);
}

// Uniform double in [0, 1).
inline double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Asks Linux to back a large CPU leaf with transparent huge pages (before
// its pages are first touched): sampling reads rows at random, and with 4 KiB
// pages nearly every row read of a large storage is a TLB miss. A hint only;
// failures are ignored.
void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr size_t kHuge = size_t{2} << 20;
  if (!t.device().is_cpu() || t.nbytes() < 2 * kHuge) return;
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + t.nbytes()) & ~(kHuge - 1);
  if (last > first) {
    (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)t;
#endif
}

const char* sampler_name(const SamplerConfig& s) {
  switch (s.index()) {
    case 0:
      return "RandomSampler";
    case 1:
      return "SamplerWithoutReplacement";
    case 2:
      return "PrioritizedSampler";
    default:
      return "SliceSampler";
  }
}

}  // namespace

// ===========================================================================
// Impl
// ===========================================================================

struct ReplayBuffer::Impl {
  enum class Kind { kRandom, kWithoutReplacement, kPrioritized, kSlice };

  explicit Impl(ReplayBufferOptions opts) : options(std::move(opts)) {
    capacity = options.capacity();
    TORCH_CHECK_VALUE(capacity > 0,
                      "ReplayBufferOptions: capacity must be positive, got ",
                      capacity);
    kind = static_cast<Kind>(options.sampler().index());
    if (kind == Kind::kPrioritized) {
      const auto& p = std::get<PrioritizedSampler>(options.sampler());
      TORCH_CHECK_VALUE(p.alpha() >= 0 && p.beta() >= 0 && p.eps() >= 0,
                        "PrioritizedSampler: alpha, beta and eps must be >= 0, "
                        "got alpha=",
                        p.alpha(), ", beta=", p.beta(), ", eps=", p.eps());
      alpha = p.alpha();
      beta = p.beta();
      eps = p.eps();
      sum_tree = std::make_unique<detail::SumSegmentTree>(capacity);
      min_tree = std::make_unique<detail::MinSegmentTree>(capacity);
    } else if (kind == Kind::kSlice) {
      const auto& s = std::get<SliceSampler>(options.sampler());
      TORCH_CHECK_VALUE(s.slice_len() > 0,
                        "SliceSampler: slice_len must be positive, got ",
                        s.slice_len());
    }
    if (options.device()) device = detail::normalize_device(*options.device());
    storage = TensorDict(std::vector<Item>{}, {capacity}, device);
    storage.lock_();  // storage() hands it out: its leaves are cached
    if (options.storage_dir()) open_dir();
    if (options.seed()) {
      rng.seed(*options.seed());
    } else {
      std::random_device rd;
      rng.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }

  ReplayBufferOptions options;
  int64_t capacity = 0;
  Kind kind = Kind::kRandom;
  c10::optional<at::Device> device;
  mutable std::mutex mu;

  // ---- Storage ------------------------------------------------------------
  // The storage is a plain TensorDict: `allocate_storage` is the one place
  // that creates its tensors (the hook for a memory-mapped storage), and
  // everything else goes through `storage`, `slots` and `schema`.
  TensorDict storage;
  bool allocated = false;
  std::vector<Slot> slots;
  std::vector<SchemaNode> schema;
  int64_t size = 0;
  int64_t cursor = 0;
  uint64_t writes = 0;  // bumped by every write and clear()
  int64_t rows_written = 0;  // rows written since construction or clear()

  // ---- Disk-backed storage (see the top of this file) ----------------------
  std::string dir;             // empty: the storage is in RAM
  TensorDict disk_state;       // state/ (keeps the mappings alive)
  TensorDict disk_priority;    // priority/
  int64_t* rows_ptr = nullptr;             // state/rows_written
  int64_t* priorities_valid_ptr = nullptr; // state/priorities_valid
  double* max_priority_ptr = nullptr;      // state/max_priority
  double* priority_ptr = nullptr;          // priority/priority, [capacity]

  std::mt19937_64 rng;

  // ---- SamplerWithoutReplacement --------------------------------------------
  std::vector<int64_t> perm;
  size_t perm_pos = 0;
  int64_t perm_size = -1;

  // ---- PrioritizedSampler
  // -----------------------------------------------------
  double alpha = 0.6, beta = 0.4, eps = 1e-8;
  double max_priority = 1.0;  // largest raw priority seen (before eps, alpha)
  std::unique_ptr<detail::SumSegmentTree> sum_tree;
  std::unique_ptr<detail::MinSegmentTree> min_tree;
  std::vector<double> mass;

  // ---- SliceSampler
  // -------------------------------------------------------------
  std::vector<std::pair<int64_t, int64_t>> trajs;  // (timeline start, length)
  uint64_t trajs_writes = ~uint64_t{0};

  // ---- Writes
  // -----------------------------------------------------------------

  // `value`'s structure with batch size `[capacity]` (`value_bd` batch dims
  // are replaced by [capacity]); each leaf is `leaf(tensor, shape)`, where
  // `shape` is the storage leaf's shape.
  template <typename LeafFn>
  ImplPtr storage_tree(const TensorDictImpl& value, int64_t value_bd,
                       std::vector<int64_t> batch, const LeafFn& leaf) const {
    ImplPtr out = detail::make_impl(std::move(batch), device);
    for (const auto& n : value.nodes) {
      if (n.is_dict()) {
        auto sub_batch = detail::concat(
            {capacity}, c10::IntArrayRef(n.dict->batch_size)
                            .slice(static_cast<size_t>(value_bd)));
        out->nodes.push_back(
            Node{n.key, at::Tensor(),
                 storage_tree(*n.dict, value_bd, std::move(sub_batch), leaf)});
      } else {
        auto shape = detail::concat(
            {capacity}, n.tensor.sizes().slice(static_cast<size_t>(value_bd)));
        out->nodes.push_back(Node{n.key, leaf(n.tensor, shape), nullptr});
      }
    }
    return out;
  }

  // Allocates a zero-filled storage of `capacity` rows with `value`'s
  // structure.
  ImplPtr allocate_storage(const TensorDictImpl& value, int64_t value_bd,
                           std::vector<int64_t> batch) const {
    return storage_tree(
        value, value_bd, std::move(batch),
        [&](const at::Tensor& src, const std::vector<int64_t>& shape) {
          at::Tensor t = at::empty(
              shape, src.options().device(device ? *device : src.device()));
          advise_huge_pages(t);
          t.zero_();
          return t;
        });
  }

  // ---- Disk-backed storage -------------------------------------------------

  static constexpr int64_t kFormatVersion = 1;

  [[nodiscard]] std::string sub(const char* name) const {
    return dir + "/" + name;
  }

  static bool file_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }

  // A template of the storage for `memmap_like`: `value`'s structure with
  // every leaf an expanded view of its first row (nothing is allocated).
  ImplPtr expanded_template(const TensorDictImpl& value, int64_t value_bd,
                            std::vector<int64_t> batch) const {
    return storage_tree(
        value, value_bd, std::move(batch),
        [&](const at::Tensor& t, const std::vector<int64_t>& shape) {
          at::Tensor row = value_bd == 0 ? t.unsqueeze(0) : t.narrow(0, 0, 1);
          return row.expand(shape);
        });
  }

  // The constructor's part for a storage_dir: reopens a buffer found there,
  // else checks that the directory can hold a new one (created lazily).
  void open_dir() {
    dir = *options.storage_dir();
    TORCH_CHECK_VALUE(!dir.empty(),
                      "ReplayBufferOptions::storage_dir is an empty string");
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    TORCH_CHECK_VALUE(!device || device->is_cpu(),
                      "ReplayBuffer: a disk-backed storage (storage_dir '", dir,
                      "') lives on the CPU, but ReplayBufferOptions::device is ",
                      detail::device_name(*device));
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      const int err = errno;
      TORCH_CHECK(err == ENOENT, "ReplayBuffer: cannot access storage_dir '",
                  dir, "': ", std::strerror(err));
      return;  // created by the first write
    }
    TORCH_CHECK(S_ISDIR(st.st_mode), "ReplayBuffer: storage_dir '", dir,
                "' exists and is not a directory");
    if (file_exists(sub("state/meta.json"))) {
      reopen();
      return;
    }
    // No buffer yet. Only the directories of an interrupted first write
    // (no state/meta.json: never committed) may be there; they are replaced.
    DIR* d = ::opendir(dir.c_str());
    const int err = errno;
    TORCH_CHECK(d != nullptr, "ReplayBuffer: cannot list storage_dir '", dir,
                "': ", std::strerror(err));
    std::string stranger;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || name == "storage" ||
          name == "priority" || name == "state") {
        continue;
      }
      stranger = name;
      break;
    }
    ::closedir(d);
    TORCH_CHECK(stranger.empty(), "ReplayBuffer: storage_dir '", dir,
                "' is not empty and holds no replay buffer (no "
                "state/meta.json; found '",
                stranger, "'); use a new or empty directory");
  }

  // Opens `dir/<name>` as a memmap directory; errors name the buffer.
  [[nodiscard]] TensorDict load_part(const char* name) const {
    std::string error;
    try {
      return TensorDict::load_memmap(sub(name));
    } catch (const c10::Error& e) {
      error = e.msg();
    }
    TORCH_CHECK(false, "ReplayBuffer: cannot reopen the buffer in '", dir,
                "': ", error);
    return TensorDict();
  }

  // The mapped scalar or vector `key` of `td` (part `part`), checked.
  [[nodiscard]] at::Tensor state_leaf(const TensorDict& td, const char* part,
                                      const char* key, at::ScalarType dtype,
                                      c10::IntArrayRef shape) const {
    const Node* n = TensorDictImpl::of(td).find(key);
    const bool ok = n != nullptr && !n->is_dict() &&
                    n->tensor.scalar_type() == dtype &&
                    n->tensor.sizes() == shape &&
                    (n->tensor.numel() == 0 ||
                     detail::is_mapped_tensor(n->tensor));
    TORCH_CHECK(ok, "ReplayBuffer: cannot reopen the buffer in '", dir, "': ",
                part, "/", key, " is missing or is not a ",
                detail::dtype_name(dtype), " tensor of shape ",
                detail::shape_str(shape));
    return n->tensor;
  }

  // Binds the hot-path pointers to state/ and priority/.
  void bind_state(TensorDict state, TensorDict priority) {
    rows_ptr = state_leaf(state, "state", "rows_written", at::kLong, {})
                   .data_ptr<int64_t>();
    priorities_valid_ptr =
        state_leaf(state, "state", "priorities_valid", at::kLong, {})
            .data_ptr<int64_t>();
    max_priority_ptr =
        state_leaf(state, "state", "max_priority", at::kDouble, {})
            .data_ptr<double>();
    priority_ptr = state_leaf(priority, "priority", "priority", at::kDouble,
                              {capacity})
                       .data_ptr<double>();
    disk_state = std::move(state);
    disk_priority = std::move(priority);
  }

  void reopen() {
    TensorDict state = load_part("state");
    const int64_t version =
        state_leaf(state, "state", "format_version", at::kLong, {})
            .item<int64_t>();
    TORCH_CHECK(version == kFormatVersion, "ReplayBuffer: cannot reopen the "
                "buffer in '", dir, "': state/format_version is ", version,
                ", this library reads version ", kFormatVersion);
    const int64_t stored_capacity =
        state_leaf(state, "state", "capacity", at::kLong, {}).item<int64_t>();
    TORCH_CHECK_VALUE(stored_capacity == capacity, "ReplayBuffer: the buffer "
                      "in '", dir, "' has capacity ", stored_capacity,
                      ", but ReplayBufferOptions asks for capacity ", capacity,
                      "; reopen it with capacity ", stored_capacity,
                      " or use another storage_dir");
    const int64_t rows =
        state_leaf(state, "state", "rows_written", at::kLong, {})
            .item<int64_t>();
    TORCH_CHECK(rows >= 0, "ReplayBuffer: cannot reopen the buffer in '", dir,
                "': state/rows_written is negative (", rows, ")");
    const double max_p =
        state_leaf(state, "state", "max_priority", at::kDouble, {})
            .item<double>();
    TORCH_CHECK(std::isfinite(max_p) && max_p >= 0,
                "ReplayBuffer: cannot reopen the buffer in '", dir,
                "': state/max_priority is ", max_p);
    TensorDict priority = load_part("priority");
    // Checks every leaf before anything changes.
    bind_state(state, priority);
    TensorDict st;
    const bool has_storage = file_exists(sub("storage/meta.json"));
    TORCH_CHECK(has_storage || rows == 0, "ReplayBuffer: cannot reopen the "
                "buffer in '", dir, "': state/rows_written is ", rows,
                " but storage/meta.json is missing");
    if (has_storage) {
      st = load_part("storage");
      TORCH_CHECK(st.batch_size() == c10::IntArrayRef({capacity}) &&
                      TensorDictImpl::of(st).device.value_or(at::kCPU).is_cpu(),
                  "ReplayBuffer: cannot reopen the buffer in '", dir,
                  "': storage/ has batch size ", detail::shape_str(st.batch_size()),
                  ", expected [", capacity, "] on the CPU");
      std::vector<NestedKey> leaves;
      detail::collect_keys(TensorDictImpl::of(st), nullptr, true, true, leaves);
      TORCH_CHECK(!leaves.empty(), "ReplayBuffer: cannot reopen the buffer in '",
                  dir, "': storage/ has no leaves");
    }
    size = std::min(rows, capacity);
    cursor = rows % capacity;
    rows_written = rows;
    if (has_storage) {
      storage = st;
      storage.lock_();
      build_schema(TensorDictImpl::of(storage), nullptr, schema, slots);
      allocated = true;
    }
    if (kind == Kind::kPrioritized) {
      if (*priorities_valid_ptr != 0) {
        max_priority = max_p;
      } else {  // written without a PrioritizedSampler: start over
        max_priority = 1.0;
        for (int64_t i = 0; i < size; ++i) priority_ptr[i] = max_priority;
        *max_priority_ptr = max_priority;
        *priorities_valid_ptr = 1;
      }
      for (int64_t i = 0; i < size; ++i) {
        double raw = priority_ptr[i];
        if (!(std::isfinite(raw) && raw >= 0)) raw = max_priority;
        const double p = std::pow(raw + eps, alpha);
        set_priority(i, p);
      }
    }
  }

  // The storage of the first write, in `dir/storage` (plus state/ and
  // priority/ when they do not exist yet).
  [[nodiscard]] TensorDict allocate_disk(const TensorDictImpl& value,
                                         int64_t value_bd) {
    TensorDict tmpl =
        TensorDictImpl::wrap(expanded_template(value, value_bd, {capacity}));
    TensorDict st = tmpl.memmap_like(sub("storage"));
    if (rows_ptr == nullptr) create_state();
    return st;
  }

  void create_state() {
    ImplPtr p = detail::make_impl({capacity}, c10::nullopt);
    p->nodes.push_back(Node{
        "priority", at::zeros({1}, at::kDouble).expand({capacity}), nullptr});
    TensorDict priority = TensorDictImpl::wrap(p).memmap_like(sub("priority"));
    ImplPtr s = detail::make_impl({}, c10::nullopt);
    auto scalar = [&](const char* key, at::Tensor v) {
      s->nodes.push_back(Node{key, std::move(v), nullptr});
    };
    const bool prioritized = kind == Kind::kPrioritized;
    scalar("format_version", at::scalar_tensor(kFormatVersion, at::kLong));
    scalar("capacity", at::scalar_tensor(capacity, at::kLong));
    scalar("rows_written", at::scalar_tensor(rows_written, at::kLong));
    scalar("max_priority", at::scalar_tensor(max_priority, at::kDouble));
    scalar("priorities_valid",
           at::scalar_tensor(prioritized ? 1 : 0, at::kLong));
    // state/meta.json is renamed in last: the commit point.
    TensorDict state = TensorDictImpl::wrap(s).memmap(sub("state"));
    bind_state(std::move(state), std::move(priority));
  }

  // Persists the counter after a write or clear(): one aligned 8-byte store.
  void persist_rows() const {
    if (rows_ptr != nullptr) {
      __atomic_store_n(rows_ptr, rows_written, __ATOMIC_RELEASE);
    }
  }

  static void build_schema(const TensorDictImpl& st, const NestedKey* prefix,
                           std::vector<SchemaNode>& schema,
                           std::vector<Slot>& slots) {
    for (const auto& n : st.nodes) {
      SchemaNode s;
      s.key = n.key;
      NestedKey key = detail::prefixed(prefix, n.key);
      if (n.is_dict()) {
        build_schema(*n.dict, &key, s.children, slots);
      } else {
        Slot slot{key};
        slot.tensor = n.tensor;
        slot.row_shape = n.tensor.sizes().slice(1).vec();
        slot.dtype = n.tensor.scalar_type();
        slot.row_bytes =
            static_cast<size_t>(n.tensor.numel() / n.tensor.size(0)) *
            n.tensor.element_size();
        slot.base = byte_copyable(n.tensor)
                        ? static_cast<char*>(n.tensor.data_ptr())
                        : nullptr;
        s.slot = static_cast<int>(slots.size());
        slots.push_back(std::move(slot));
      }
      schema.push_back(std::move(s));
    }
  }

  // Validates `value` (batch dims `value_bd`) against the storage; fills
  // `out` with one entry per leaf. Throws naming the first difference.
  void validate(const char* fn, const char* what, const TensorDictImpl& value,
                int64_t value_bd, const std::vector<SchemaNode>& sch,
                const std::vector<Slot>& sl, PendingList& out) const {
    if (!match_keys(sch, value, sl, out)) {
      auto want = all_keys(TensorDictImpl::of(storage));
      auto got = all_keys(value);
      TORCH_CHECK(false, "ReplayBuffer::", fn, ": the ", what,
                  "'s keys differ from the storage's: missing ",
                  detail::key_vec_str(minus(want, got)), ", unexpected ",
                  detail::key_vec_str(minus(got, want)));
    }
    for (const auto& p : out) {
      const at::Tensor& src = *p.src;
      auto row_shape = src.sizes().slice(static_cast<size_t>(value_bd));
      TORCH_CHECK(row_shape == c10::IntArrayRef(p.slot->row_shape),
                  "ReplayBuffer::", fn, ": key ", p.slot->key.str(),
                  ": expected the row shape ",
                  detail::shape_str(p.slot->row_shape), ", got ",
                  detail::shape_str(row_shape), " (leaf shape ",
                  detail::shape_str(src.sizes()), ")");
      TORCH_CHECK_TYPE(src.scalar_type() == p.slot->dtype, "ReplayBuffer::", fn,
                       ": key ", p.slot->key.str(), ": expected dtype ",
                       detail::dtype_name(p.slot->dtype), ", got ",
                       detail::dtype_name(src.scalar_type()));
      TORCH_CHECK(detail::copyable_devices(src.device(), p.slot->tensor.device()),
                  "ReplayBuffer::", fn, ": key ", p.slot->key.str(),
                  ": cannot write a value on device ",
                  detail::device_name(src.device()), " into a buffer on device ",
                  detail::device_name(p.slot->tensor.device()));
    }
  }

  // Whether a source leaf shares memory with the storage (a view of it, as
  // in `extend(rb.storage()[...])`): the write then reads a copy, since
  // writing in place could read rows it has already written.
  bool reads_storage(const PendingList& pending) const {
    for (const auto& p : pending) {
      if (!p.src->unsafeGetTensorImpl()->has_storage()) continue;
      for (const auto& s : slots) {
        if (s.tensor.unsafeGetTensorImpl()->has_storage() &&
            s.tensor.storage().is_alias_of(p.src->storage())) {
          return true;
        }
      }
    }
    return false;
  }

  // Copies `count` rows of `src` from `src_row` (a single row when
  // `src_bd` is 0) into the slot's rows from `dst_row`.
  static void write_rows(const Pending& p, int64_t dst_row, int64_t src_row,
                         int64_t count, int64_t src_bd) {
    const Slot& slot = *p.slot;
    const at::Tensor& src = *p.src;
    if (slot.row_bytes == 0) return;  // empty leaves: nothing to copy
    if (slot.base != nullptr && byte_copyable(src)) {
      std::memcpy(slot.base + static_cast<size_t>(dst_row) * slot.row_bytes,
                  static_cast<const char*>(src.data_ptr()) +
                      static_cast<size_t>(src_row) * slot.row_bytes,
                  static_cast<size_t>(count) * slot.row_bytes);
      if (!slot.tensor.is_inference()) {
        slot.tensor.unsafeGetTensorImpl()->bump_version();
      }
      return;
    }
    at::NoGradGuard no_grad;
    if (src_bd == 0) {
      slot.tensor.select(0, dst_row).copy_(src);
    } else {
      slot.tensor.narrow(0, dst_row, count)
          .copy_(src.narrow(0, src_row, count));
    }
  }

  // Allocates the storage from `value` when this is the first write, and
  // validates `value` against it. Nothing changes when it throws.
  void prepare(const char* fn, const char* what, const TensorDictImpl& value,
               int64_t value_bd, PendingList& pending) {
    if (allocated) {
      validate(fn, what, value, value_bd, schema, slots, pending);
      return;
    }
    std::vector<NestedKey> leaves;
    detail::collect_keys(value, nullptr, true, true, leaves);
    TORCH_CHECK(!leaves.empty(), "ReplayBuffer::", fn, ": the ", what,
                " has no leaves");
    TensorDict st = dir.empty() ? TensorDictImpl::wrap(allocate_storage(
                                      value, value_bd, {capacity}))
                                : allocate_disk(value, value_bd);
    std::vector<SchemaNode> new_schema;
    std::vector<Slot> new_slots;
    build_schema(TensorDictImpl::of(st), nullptr, new_schema, new_slots);
    TensorDict old = storage;
    storage = st;
    storage.lock_();
    try {
      validate(fn, what, value, value_bd, new_schema, new_slots, pending);
    } catch (...) {
      storage = old;
      throw;
    }
    schema = std::move(new_schema);
    // Moving the vector keeps its elements where they are, so `pending`
    // (filled against `new_slots`) still points at the right slots.
    slots = std::move(new_slots);
    allocated = true;
  }

  // After `count` rows were written from row `first` (`n` rows given,
  // counting those a long batch skipped): the sampler's state, then the
  // persisted counter.
  void on_write(int64_t first, int64_t count, int64_t n) {
    ++writes;
    rows_written += n;
    if (kind != Kind::kPrioritized) {
      if (priorities_valid_ptr != nullptr && *priorities_valid_ptr != 0) {
        *priorities_valid_ptr = 0;  // the rows written now get no priority
      }
      persist_rows();
      return;
    }
    const double p = std::pow(max_priority + eps, alpha);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = (first + k) % capacity;
      set_priority(i, p);
      if (priority_ptr != nullptr) priority_ptr[i] = max_priority;
    }
    persist_rows();
  }

  // ---- Samplers -------------------------------------------------------------

  void new_epoch() {
    perm.resize(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) perm[static_cast<size_t>(i)] = i;
    for (int64_t i = size - 1; i > 0; --i) {
      const int64_t j = uniform_int(rng, static_cast<uint64_t>(i + 1));
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    }
    perm_pos = 0;
    perm_size = size;
  }

  void sample_without_replacement(int64_t n, int64_t* out) {
    const bool drop_last =
        std::get<SamplerWithoutReplacement>(options.sampler()).drop_last();
    if (drop_last) {
      TORCH_CHECK(n <= size, "ReplayBuffer::sample: batch_size ", n,
                  " exceeds the buffer's size ", size,
                  " (SamplerWithoutReplacement with drop_last)");
    }
    if (perm_size != size || perm_pos >= perm.size() ||
        (drop_last && perm.size() - perm_pos < static_cast<size_t>(n))) {
      new_epoch();
    }
    for (int64_t q = 0; q < n; ++q) {
      if (perm_pos == perm.size()) new_epoch();
      out[q] = perm[perm_pos++];
    }
  }

  // Row `i`'s probability mass `p` = (priority + eps)^alpha. The min tree
  // holds the positive masses only: a row of mass 0 is never sampled, and
  // the importance weights (p_i / p_min)^-beta of the rows that are sampled
  // stay in (0, 1] (a p_min of 0 would make them all 0).
  void set_priority(int64_t i, double p) {
    sum_tree->set(i, p);
    min_tree->set(i, p > 0 ? p : std::numeric_limits<double>::infinity());
  }

  at::Tensor sample_prioritized(int64_t n, int64_t* out) {
    const double total = sum_tree->root();
    TORCH_CHECK(total > 0 && std::isfinite(total),
                "ReplayBuffer::sample: the priorities sum to ", total,
                "; at least one stored row needs a positive priority");
    mass.resize(static_cast<size_t>(n));
    for (int64_t q = 0; q < n; ++q) {
      mass[static_cast<size_t>(q)] = uniform01(rng) * total;
    }
    sum_tree->find_prefix(mass.data(), n, out);
    at::Tensor weight = at::empty({n}, at::kFloat);
    float* w = weight.data_ptr<float>();
    const double p_min = min_tree->root();
    for (int64_t q = 0; q < n; ++q) {
      if (out[q] >= size) out[q] = size - 1;  // rounding at the very end
      const double p = sum_tree->get(out[q]);
      // (N P(i))^-beta / max_j (N P(j))^-beta == (p_i / p_min)^-beta
      w[q] = static_cast<float>(std::pow(p / p_min, -beta));
    }
    return weight;
  }

  // Rebuilds the trajectory list (in timeline order, oldest row first).
  void find_trajectories(const SliceSampler& s) {
    if (trajs_writes == writes) return;
    const NestedKey& key = s.traj_key() ? *s.traj_key() : s.end_key();
    const Node* node = detail::lookup(TensorDictImpl::of(storage), key);
    TORCH_CHECK(node != nullptr && !node->is_dict(),
                "ReplayBuffer::sample: the SliceSampler's ",
                s.traj_key() ? "traj_key " : "end_key ", key.str(),
                " is not a tensor of the storage (keys: ",
                detail::key_list_str(TensorDictImpl::of(storage)), ")");
    at::Tensor t = node->tensor.reshape({capacity, -1});
    // ends[r]: row r is the last row of its trajectory.
    at::Tensor ends =
        s.traj_key() ? at::ne(t, t.roll(-1, 0)).any(1) : t.ne(0).any(1);
    ends = ends.to(at::kCPU).contiguous();
    const bool* e = ends.data_ptr<bool>();
    const int64_t start = size == capacity ? cursor : 0;
    trajs.clear();
    int64_t traj_start = 0;
    for (int64_t i = 0; i < size; ++i) {
      const int64_t r = (start + i) % capacity;
      if (e[r] || i == size - 1) {
        trajs.emplace_back(traj_start, i - traj_start + 1);
        traj_start = i + 1;
      }
    }
    trajs_writes = writes;
  }

  void sample_slices(int64_t n, int64_t* out) {
    const auto& s = std::get<SliceSampler>(options.sampler());
    const int64_t len = s.slice_len();
    TORCH_CHECK_VALUE(n % len == 0, "ReplayBuffer::sample: batch_size ", n,
                      " is not a multiple of the SliceSampler's slice_len ",
                      len);
    find_trajectories(s);
    std::vector<const std::pair<int64_t, int64_t>*> eligible;
    for (const auto& tr : trajs) {
      if (tr.second >= len) eligible.push_back(&tr);
    }
    TORCH_CHECK(!eligible.empty(),
                "ReplayBuffer::sample: no stored "
                "trajectory has slice_len ",
                len, " rows (", trajs.size(), " trajectories in ", size,
                " rows)");
    const int64_t origin = size == capacity ? cursor : 0;
    for (int64_t k = 0; k < n / len; ++k) {
      const auto& tr =
          *eligible[static_cast<size_t>(uniform_int(rng, eligible.size()))];
      const int64_t offset =
          uniform_int(rng, static_cast<uint64_t>(tr.second - len + 1));
      for (int64_t j = 0; j < len; ++j) {
        out[k * len + j] = (origin + tr.first + offset + j) % capacity;
      }
    }
  }
};

// ===========================================================================
// ReplayBuffer
// ===========================================================================

ReplayBuffer::ReplayBuffer(ReplayBufferOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ReplayBuffer::~ReplayBuffer() = default;
ReplayBuffer::ReplayBuffer(ReplayBuffer&&) noexcept = default;
ReplayBuffer& ReplayBuffer::operator=(ReplayBuffer&&) noexcept = default;

int64_t ReplayBuffer::add(const TensorDict& row) {
  TORCH_CHECK(row.batch_dims() == 0,
              "ReplayBuffer::add: expected a row with batch_size [], got "
              "batch_size ",
              detail::shape_str(row.batch_size()),
              " (use extend() for batches)");
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  PendingList pending;
  m.prepare("add", "row", TensorDictImpl::of(row), 0, pending);
  TensorDict staged;
  if (m.reads_storage(pending)) {
    staged = row.clone();
    pending.clear();
    m.validate("add", "row", TensorDictImpl::of(staged), 0, m.schema, m.slots,
               pending);
  }
  const int64_t i = m.cursor;
  for (const auto& p : pending) Impl::write_rows(p, i, 0, 1, 0);
  m.cursor = (i + 1) % m.capacity;
  m.size = std::min(m.size + 1, m.capacity);
  m.on_write(i, 1, 1);
  return i;
}

at::Tensor ReplayBuffer::extend(const TensorDict& batch) {
  TORCH_CHECK(batch.batch_dims() == 1,
              "ReplayBuffer::extend: expected a batch with one batch dim, got "
              "batch_size ",
              detail::shape_str(batch.batch_size()));
  const int64_t n = batch.batch_size()[0];
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  PendingList pending;
  if (n == 0) {
    if (m.allocated)
      m.validate("extend", "batch", TensorDictImpl::of(batch), 1, m.schema, m.slots,
                 pending);
    return at::empty({0}, at::kLong);
  }
  m.prepare("extend", "batch", TensorDictImpl::of(batch), 1, pending);
  TensorDict staged;
  if (m.reads_storage(pending)) {
    staged = batch.clone();
    pending.clear();
    m.validate("extend", "batch", TensorDictImpl::of(staged), 1, m.schema,
               m.slots, pending);
  }
  const int64_t kept = std::min(n, m.capacity);
  const int64_t skip = n - kept;
  const int64_t start = (m.cursor + skip) % m.capacity;
  const int64_t first = std::min(kept, m.capacity - start);
  for (const auto& p : pending) {
    Impl::write_rows(p, start, skip, first, 1);
    if (kept > first) Impl::write_rows(p, 0, skip + first, kept - first, 1);
  }
  at::Tensor index = at::empty({kept}, at::kLong);
  int64_t* ip = index.data_ptr<int64_t>();
  for (int64_t k = 0; k < kept; ++k) ip[k] = (start + k) % m.capacity;
  m.cursor = (start + kept) % m.capacity;
  m.size = std::min(m.size + n, m.capacity);
  m.on_write(start, kept, n);
  return index;
}

std::pair<TensorDict, SampleInfo> ReplayBuffer::sample(int64_t batch_size) {
  TORCH_CHECK_VALUE(batch_size > 0,
                    "ReplayBuffer::sample: batch_size must be positive, got ",
                    batch_size);
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  TORCH_CHECK(m.size > 0, "ReplayBuffer::sample: the buffer is empty");
  SampleInfo info;
  info.index = at::empty({batch_size}, at::kLong);
  int64_t* ip = info.index.data_ptr<int64_t>();
  switch (m.kind) {
    case Impl::Kind::kRandom:
      for (int64_t q = 0; q < batch_size; ++q) {
        ip[q] = uniform_int(m.rng, static_cast<uint64_t>(m.size));
      }
      break;
    case Impl::Kind::kWithoutReplacement:
      m.sample_without_replacement(batch_size, ip);
      break;
    case Impl::Kind::kPrioritized:
      info.weight = m.sample_prioritized(batch_size, ip);
      break;
    case Impl::Kind::kSlice:
      m.sample_slices(batch_size, ip);
      break;
  }
  TensorDict data =
      TensorDictImpl::wrap(detail::gather_rows(TensorDictImpl::of(m.storage), info.index));
  return {std::move(data), std::move(info)};
}

void ReplayBuffer::update_priority(const at::Tensor& index,
                                   const at::Tensor& priority) {
  Impl& m = *impl_;
  TORCH_CHECK(m.kind == Impl::Kind::kPrioritized,
              "ReplayBuffer::update_priority: the buffer's sampler is ",
              sampler_name(m.options.sampler()), ", not PrioritizedSampler");
  TORCH_CHECK_VALUE(
      index.defined() && priority.defined() && index.dim() == 1 &&
          priority.dim() == 1,
      "ReplayBuffer::update_priority: index and priority must "
      "be 1-D tensors, got shapes ",
      index.defined() ? detail::shape_str(index.sizes()) : "None", " and ",
      priority.defined() ? detail::shape_str(priority.sizes()) : "None");
  TORCH_CHECK_VALUE(index.size(0) == priority.size(0),
                    "ReplayBuffer::update_priority: index has ", index.size(0),
                    " elements but priority has ", priority.size(0));
  TORCH_CHECK_TYPE(!at::isFloatingType(index.scalar_type()) &&
                       !at::isComplexType(index.scalar_type()) &&
                       index.scalar_type() != at::kBool,
                   "ReplayBuffer::update_priority: index must be an integer "
                   "tensor, got dtype ",
                   detail::dtype_name(index.scalar_type()));
  at::Tensor idx = index.detach().to(at::kCPU, at::kLong).contiguous();
  at::Tensor pri = priority.detach().to(at::kCPU, at::kDouble).contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  const double* pp = pri.data_ptr<double>();
  const int64_t n = idx.size(0);
  std::lock_guard<std::mutex> lock(m.mu);
  for (int64_t k = 0; k < n; ++k) {
    TORCH_CHECK_INDEX(ip[k] >= 0 && ip[k] < m.size,
                      "ReplayBuffer::update_priority: index ", ip[k],
                      " is out of range for a buffer of size ", m.size);
    TORCH_CHECK_VALUE(std::isfinite(pp[k]) && pp[k] >= 0,
                      "ReplayBuffer::update_priority: priorities must be "
                      "finite and >= 0, got ",
                      pp[k], " for index ", ip[k]);
  }
  for (int64_t k = 0; k < n; ++k) {
    m.max_priority = std::max(m.max_priority, pp[k]);
    const double p = std::pow(pp[k] + m.eps, m.alpha);
    m.set_priority(ip[k], p);
    if (m.priority_ptr != nullptr) m.priority_ptr[ip[k]] = pp[k];
  }
  if (m.max_priority_ptr != nullptr) *m.max_priority_ptr = m.max_priority;
}

int64_t ReplayBuffer::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->size;
}

int64_t ReplayBuffer::capacity() const { return impl_->capacity; }

int64_t ReplayBuffer::cursor() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cursor;
}

void ReplayBuffer::clear() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.size = 0;
  m.cursor = 0;
  m.rows_written = 0;
  m.persist_rows();
  ++m.writes;
  m.perm.clear();
  m.perm_pos = 0;
  m.perm_size = -1;
  if (m.kind == Impl::Kind::kPrioritized) {
    m.sum_tree->reset();
    m.min_tree->reset();
    m.max_priority = 1.0;
    if (m.max_priority_ptr != nullptr) *m.max_priority_ptr = 1.0;
  }
}

void ReplayBuffer::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->rng.seed(seed);
}

TensorDict ReplayBuffer::storage() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->storage;
}

const ReplayBufferOptions& ReplayBuffer::options() const {
  return impl_->options;
}

}  // namespace tensordict
