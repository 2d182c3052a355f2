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
// Synchronization. One mutex guards the storage, the cursor, the size, the
// generator and the sampler state; writes and gathers both run under it, so
// a sampled row is never half-written.
#include "tensordict/replay_buffer.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "internal.h"
#include "segment_tree.h"

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

// Copies rows `idx[0..n)` of a contiguous leaf whose rows are `row_bytes`
// long into `dst`, specialized for the tiny rows of scalar leaves.
template <typename T>
void gather_rows_typed(char* dst, const char* src, const int64_t* idx,
                       int64_t n) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  for (int64_t q = 0; q < n; ++q) d[q] = s[idx[q]];
}

void gather_rows(char* dst, const char* src, size_t row_bytes,
                 const int64_t* idx, int64_t n) {
  switch (row_bytes) {
    case 0:
      return;  // empty leaves: the pointers may be null
    case 1:
      return gather_rows_typed<uint8_t>(dst, src, idx, n);
    case 2:
      return gather_rows_typed<uint16_t>(dst, src, idx, n);
    case 4:
      return gather_rows_typed<uint32_t>(dst, src, idx, n);
    case 8:
      return gather_rows_typed<uint64_t>(dst, src, idx, n);
    default:
      for (int64_t q = 0; q < n; ++q) {
        if (q + 4 < n) {  // rows are scattered: fetch a few ahead
          const char* ahead = src + static_cast<size_t>(idx[q + 4]) * row_bytes;
          for (size_t b = 0; b < row_bytes; b += 64)
            __builtin_prefetch(ahead + b);
        }
        std::memcpy(dst + static_cast<size_t>(q) * row_bytes,
                    src + static_cast<size_t>(idx[q]) * row_bytes, row_bytes);
      }
  }
}

// The rows `idx` of every leaf of `st` (batch size [capacity, ...]) as a new
// dict of batch size [n, ...].
ImplPtr gather(const TensorDictImpl& st, const int64_t* idx, int64_t n,
               const at::Tensor& index) {
  std::vector<int64_t> batch = st.batch_size;
  batch[0] = n;
  ImplPtr out = detail::make_impl(std::move(batch), st.device);
  out->nodes.reserve(st.nodes.size());
  for (const auto& node : st.nodes) {
    if (node.is_dict()) {
      out->nodes.push_back(
          Node{node.key, at::Tensor(), gather(*node.dict, idx, n, index)});
      continue;
    }
    const at::Tensor& t = node.tensor;
    at::Tensor g;
    if (byte_copyable(t)) {
      std::vector<int64_t> shape = t.sizes().vec();
      shape[0] = n;
      g = at::empty(shape, t.options());
      const int64_t rows = t.size(0);
      const size_t row_bytes =
          rows == 0 ? 0
                    : static_cast<size_t>(t.numel() / rows) * t.element_size();
      gather_rows(static_cast<char*>(g.data_ptr()),
                  static_cast<const char*>(t.data_ptr()), row_bytes, idx, n);
    } else {
      g = t.index_select(0, index.to(t.device()));
    }
    out->nodes.push_back(Node{node.key, std::move(g), nullptr});
  }
  return out;
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
    TORCH_CHECK(!options.storage_dir().has_value(),
                "ReplayBufferOptions::storage_dir is not supported yet "
                "(disk-backed storage is planned); leave it unset");
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

  // Allocates a zero-filled storage of `capacity` rows with `value`'s
  // structure (`value_bd` batch dims are replaced by [capacity]).
  ImplPtr allocate_storage(const TensorDictImpl& value, int64_t value_bd,
                           std::vector<int64_t> batch) const {
    ImplPtr out = detail::make_impl(std::move(batch), device);
    for (const auto& n : value.nodes) {
      if (n.is_dict()) {
        auto sub_batch = detail::concat(
            {capacity}, c10::IntArrayRef(n.dict->batch_size)
                            .slice(static_cast<size_t>(value_bd)));
        out->nodes.push_back(
            Node{n.key, at::Tensor(),
                 allocate_storage(*n.dict, value_bd, std::move(sub_batch))});
      } else {
        auto shape = detail::concat(
            {capacity}, n.tensor.sizes().slice(static_cast<size_t>(value_bd)));
        at::Tensor t = at::empty(
            shape,
            n.tensor.options().device(device ? *device : n.tensor.device()));
        advise_huge_pages(t);
        t.zero_();
        out->nodes.push_back(Node{n.key, std::move(t), nullptr});
      }
    }
    return out;
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
      auto want = all_keys(storage.impl());
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
    }
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
    ImplPtr st = allocate_storage(value, value_bd, {capacity});
    std::vector<SchemaNode> new_schema;
    std::vector<Slot> new_slots;
    build_schema(*st, nullptr, new_schema, new_slots);
    TensorDict old = storage;
    storage = TensorDictImpl::wrap(st);
    try {
      validate(fn, what, value, value_bd, new_schema, new_slots, pending);
    } catch (...) {
      storage = old;
      throw;
    }
    schema = std::move(new_schema);
    slots = std::move(new_slots);
    allocated = true;
    // `pending` points into the old vector: rebuild it.
    pending.clear();
    match_keys(schema, value, slots, pending);
  }

  void on_write(int64_t first, int64_t count) {
    ++writes;
    if (kind != Kind::kPrioritized) return;
    const double p = std::pow(max_priority + eps, alpha);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = (first + k) % capacity;
      sum_tree->set(i, p);
      min_tree->set(i, p);
    }
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
    const Node* node = detail::lookup(storage.impl(), key);
    TORCH_CHECK(node != nullptr && !node->is_dict(),
                "ReplayBuffer::sample: the SliceSampler's ",
                s.traj_key() ? "traj_key " : "end_key ", key.str(),
                " is not a tensor of the storage (keys: ",
                detail::key_list_str(storage.impl()), ")");
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
  m.prepare("add", "row", row.impl(), 0, pending);
  const int64_t i = m.cursor;
  for (const auto& p : pending) Impl::write_rows(p, i, 0, 1, 0);
  m.cursor = (i + 1) % m.capacity;
  m.size = std::min(m.size + 1, m.capacity);
  m.on_write(i, 1);
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
      m.validate("extend", "batch", batch.impl(), 1, m.schema, m.slots,
                 pending);
    return at::empty({0}, at::kLong);
  }
  m.prepare("extend", "batch", batch.impl(), 1, pending);
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
  m.on_write(start, kept);
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
  TensorDict data = TensorDictImpl::wrap(
      gather(m.storage.impl(), ip, batch_size, info.index));
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
    m.sum_tree->set(ip[k], p);
    m.min_tree->set(ip[k], p);
  }
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
  ++m.writes;
  m.perm.clear();
  m.perm_pos = 0;
  m.perm_size = -1;
  if (m.kind == Impl::Kind::kPrioritized) {
    m.sum_tree->reset();
    m.min_tree->reset();
    m.max_priority = 1.0;
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
