// ReplayBuffer's samplers (see rl/samplers.h).
#include "rl/samplers.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "core/internal.h"
#include "rl/random.h"

namespace tensordict {
namespace detail {

// ---- RandomSampler ----------------------------------------------------------

at::Tensor RandomSamplerImpl::sample(const ReplayStorage& storage,
                                     Generator& rng, int64_t n, int64_t* out) {
  const auto size = static_cast<uint64_t>(storage.size());
  for (int64_t q = 0; q < n; ++q) out[q] = uniform_int(rng, size);
  return at::Tensor();
}

// ---- Epoch ------------------------------------------------------------------

void Epoch::renew(int64_t size, uint64_t version, Generator& rng) {
  perm_.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) perm_[static_cast<size_t>(i)] = i;
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = uniform_int(rng, static_cast<uint64_t>(i + 1));
    std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
  }
  pos_ = 0;
  size_ = size;
  version_ = version;
}

void Epoch::draw(int64_t size, uint64_t version, Generator& rng, int64_t n,
                 int64_t* out) {
  if (size_ != size || version_ != version || pos_ >= perm_.size() ||
      (drop_last_ && perm_.size() - pos_ < static_cast<size_t>(n))) {
    renew(size, version, rng);
  }
  for (int64_t q = 0; q < n; ++q) {
    if (pos_ == perm_.size()) renew(size, version, rng);
    out[q] = perm_[pos_++];
  }
}

void Epoch::clear() {
  perm_.clear();
  pos_ = 0;
  size_ = -1;
}

void Epoch::save(bool current, std::vector<Item>& state) const {
  const bool keep = current && size_ >= 0;
  at::Tensor perm =
      at::empty({keep ? static_cast<int64_t>(perm_.size()) : 0}, at::kLong);
  if (keep) std::copy(perm_.begin(), perm_.end(), perm.data_ptr<int64_t>());
  state.emplace_back("epoch_perm", perm);
  state.emplace_back(
      "epoch_pos",
      at::scalar_tensor(keep ? static_cast<int64_t>(pos_) : 0, at::kLong));
  state.emplace_back("epoch_size",
                     at::scalar_tensor(keep ? size_ : -1, at::kLong));
}

Epoch Epoch::load(const TensorDict& state) const {
  const at::Tensor perm = checkpoint_entry(state, "epoch_perm", at::kLong, -1);
  const auto pos =
      checkpoint_entry(state, "epoch_pos", at::kLong, 0).item<int64_t>();
  const auto size =
      checkpoint_entry(state, "epoch_size", at::kLong, 0).item<int64_t>();
  const int64_t n = perm.numel();
  const int64_t* p = perm.data_ptr<int64_t>();
  bool valid =
      size == -1 ? n == 0 && pos == 0 : size == n && pos >= 0 && pos <= n;
  // A permutation of [0, size).
  std::vector<uint8_t> seen(static_cast<size_t>(valid ? n : 0), 0);
  for (int64_t k = 0; valid && k < n; ++k) {
    valid = p[k] >= 0 && p[k] < n && seen[static_cast<size_t>(p[k])]++ == 0;
  }
  TORCH_CHECK(valid,
              "ReplayBuffer::loads: the checkpoint's epoch is not a "
              "permutation of its size (epoch_size ",
              size, ", epoch_pos ", pos, ", ", n, " entries in epoch_perm)");
  Epoch e(drop_last_);
  e.perm_.assign(p, p + n);
  e.pos_ = static_cast<size_t>(pos);
  e.size_ = size;
  return e;
}

at::Tensor checkpoint_entry(const TensorDict& state, const char* key,
                            at::ScalarType dtype, int64_t numel,
                            const char* fn) {
  const Node* node = lookup(TensorDictImpl::of(state), NestedKey(key));
  const bool ok = node != nullptr && !node->is_dict() &&
                  node->tensor.scalar_type() == dtype &&
                  node->tensor.dim() == (numel == 0 ? 0 : 1) &&
                  (numel <= 0 || node->tensor.numel() == numel);
  TORCH_CHECK(ok, fn, ": the checkpoint's entry ", key, " must be a ",
              dtype_name(dtype), " ",
              numel == 0    ? std::string("scalar")
              : numel == -1 ? std::string("1-D tensor")
                            : "tensor of shape [" + std::to_string(numel) + "]",
              ", got ",
              node == nullptr   ? std::string("nothing")
              : node->is_dict() ? std::string("a dict")
                                : dtype_name(node->tensor.scalar_type()) + " " +
                                      shape_str(node->tensor.sizes()));
  return node->tensor.to(at::kCPU).contiguous();
}

at::Tensor generator_entry(const Generator& rng) {
  std::ostringstream out;
  out << rng;
  const std::string text = out.str();
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  return bytes;
}

bool read_generator(const at::Tensor& bytes, Generator& rng) {
  std::istringstream in(
      std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()),
                  static_cast<size_t>(bytes.numel())));
  Generator read;
  in >> read;
  if (in.fail()) return false;
  rng = read;
  return true;
}

// ---- SamplerWithoutReplacement ----------------------------------------------

at::Tensor WithoutReplacementSamplerImpl::sample(const ReplayStorage& storage,
                                                 Generator& rng, int64_t n,
                                                 int64_t* out) {
  const int64_t size = storage.size();
  if (epoch_.drop_last()) {
    TORCH_CHECK(n <= size, "ReplayBuffer::sample: batch_size ", n,
                " exceeds the buffer's size ", size,
                " (SamplerWithoutReplacement with drop_last)");
  }
  epoch_.draw(size, 0, rng, n, out);
  return at::Tensor();
}

void WithoutReplacementSamplerImpl::clear(ReplayStorage& /*storage*/) {
  epoch_.clear();
}

void WithoutReplacementSamplerImpl::save_state(const ReplayStorage& /*storage*/,
                                               ReplayStorage& /*out*/,
                                               std::vector<Item>& state) const {
  epoch_.save(/*current=*/true, state);  // renewed by size, as it would be
}

Sampler::Restore WithoutReplacementSamplerImpl::load_state(
    const TensorDict& state, int64_t /*size*/) {
  Epoch epoch = epoch_.load(state);  // version 0, as draw() gets
  return [this, epoch = std::move(epoch)](ReplayStorage& /*storage*/) {
    epoch_ = epoch;
  };
}

// ---- Sampler configurations -------------------------------------------------

c10::optional<SliceSpec> slice_spec(const SamplerConfig& config) {
  if (const auto* s = std::get_if<SliceSampler>(&config)) {
    return SliceSpec{s->slice_len(), s->end_key(), s->traj_key(),
                     "SliceSampler"};
  }
  if (const auto* s = std::get_if<SliceSamplerWithoutReplacement>(&config)) {
    return SliceSpec{s->slice_len(), s->end_key(), s->traj_key(),
                     "SliceSamplerWithoutReplacement"};
  }
  if (const auto* s = std::get_if<PrioritizedSliceSampler>(&config)) {
    return SliceSpec{s->slice_len(), s->end_key(), s->traj_key(),
                     "PrioritizedSliceSampler"};
  }
  return c10::nullopt;
}

c10::optional<PrioritizedSampler> priority_spec(const SamplerConfig& config) {
  if (const auto* p = std::get_if<PrioritizedSampler>(&config)) return *p;
  if (const auto* s = std::get_if<PrioritizedSliceSampler>(&config)) {
    return PrioritizedSampler().alpha(s->alpha()).beta(s->beta()).eps(s->eps());
  }
  return c10::nullopt;
}

// ---- Timeline ---------------------------------------------------------------

Timeline::Timeline(const ReplayStorage& storage, const SliceSpec& spec)
    : capacity_(storage.capacity()),
      size_(storage.size()),
      origin_(storage.size() == storage.capacity() ? storage.cursor() : 0),
      by_id_(spec.traj_key.has_value()) {
  const TensorDictImpl& st = TensorDictImpl::of(storage.dict());
  const NestedKey& key = by_id_ ? *spec.traj_key : spec.end_key;
  const Node* node = lookup(st, key);
  TORCH_CHECK(node != nullptr && !node->is_dict(), "ReplayBuffer::sample: the ",
              spec.name, "'s ", by_id_ ? "traj_key " : "end_key ", key.str(),
              " is not a tensor of the storage (keys: ", key_list_str(st), ")");
  TORCH_CHECK(!at::isComplexType(node->tensor.scalar_type()),
              "ReplayBuffer::sample: the ", spec.name, "'s ",
              by_id_ ? "traj_key " : "end_key ", key.str(),
              " has the complex dtype ",
              dtype_name(node->tensor.scalar_type()));
  leaf_ = node->tensor.reshape({capacity_, -1});
}

void Timeline::ends(int64_t from, int64_t to, uint8_t* out) const {
  // The rows read: positions [from, to], or the whole leaf in place when it
  // is a contiguous CPU tensor (no copy).
  at::Tensor rows = leaf_;
  int64_t first = 0;  // rows' row 0 is position `first`, else storage row 0
  const bool window = !leaf_.is_cpu() || !leaf_.is_contiguous();
  if (window) {
    const int64_t last = std::min(to + 1, size_);
    at::Tensor index = (at::arange(from, last, at::kLong) + origin_)
                           .remainder_(capacity_)
                           .to(leaf_.device());
    rows = leaf_.index_select(0, index).to(at::kCPU).contiguous();
    first = from;
  }
  auto at_position = [&](int64_t t) { return window ? t - first : row(t); };
  const int64_t m = rows.size(1);
  AT_DISPATCH_ALL_TYPES_AND3(at::kBool, at::kHalf, at::kBFloat16,
                             rows.scalar_type(), "Timeline::ends", [&] {
                               const scalar_t* d = rows.data_ptr<scalar_t>();
                               const auto zero = static_cast<scalar_t>(0);
                               for (int64_t t = from; t < to; ++t) {
                                 bool end = t == size_ - 1;
                                 const scalar_t* a = d + at_position(t) * m;
                                 if (by_id_ && !end) {
                                   const scalar_t* b =
                                       d + at_position(t + 1) * m;
                                   for (int64_t k = 0; k < m && !end; ++k)
                                     end = a[k] != b[k];
                                 } else {
                                   for (int64_t k = 0; k < m && !end; ++k)
                                     end = a[k] != zero;
                                 }
                                 out[t - from] = end ? 1 : 0;
                               }
                             });
}

// ---- PrioritizedSampler -----------------------------------------------------

PrioritizedSamplerImpl::PrioritizedSamplerImpl(int64_t capacity,
                                               const PrioritizedSampler& spec,
                                               bool per_row_drawable)
    : alpha_(spec.alpha()),
      beta_(spec.beta()),
      eps_(spec.eps()),
      sum_tree_(capacity),
      // Every row drawable: the sum tree's leaves are the masses, which the
      // min tree shares (8 B a row less).
      min_tree_(capacity, per_row_drawable ? nullptr : sum_tree_.leaves()) {}

// Row `i`'s probability mass `p` = (priority + eps)^alpha. The min tree
// is over the positive masses only: a row of mass 0 is never sampled, and
// the importance weights (p_i / p_min)^-beta of the rows that are sampled
// stay in (0, 1] (a p_min of 0 would make them all 0).
void PrioritizedSamplerImpl::set_priority(int64_t i, double p) {
  const bool drawable =
      drawable_.empty() || drawable_[static_cast<size_t>(i)] != 0;
  sum_tree_.set(i, drawable ? p : 0.0);
  min_tree_.set(i, p);
}

// set_priority's leaves, without their ancestors (the caller rebuilds).
void PrioritizedSamplerImpl::set_leaves(int64_t i, double p) {
  const bool drawable =
      drawable_.empty() || drawable_[static_cast<size_t>(i)] != 0;
  sum_tree_.set_leaf(i, drawable ? p : 0.0);
  min_tree_.set_leaf(i, p);
}

// The sum-tree leaf is always `drawable_[i] ? mass : 0` (set_priority keeps
// it so), so an unchanged flag needs no tree update.
void PrioritizedSamplerImpl::set_drawable(int64_t i, bool drawable) {
  uint8_t& flag = drawable_[static_cast<size_t>(i)];
  if (flag == (drawable ? 1 : 0)) return;
  flag = drawable ? 1 : 0;
  sum_tree_.set(i, drawable ? min_tree_.get(i) : 0.0);
}

void PrioritizedSamplerImpl::draw(int64_t size, Generator& rng, int64_t n,
                                  int64_t* out, float* w) {
  const double total = sum_tree_.root();
  TORCH_CHECK(total > 0 && std::isfinite(total),
              "ReplayBuffer::sample: the priorities sum to ", total,
              "; at least one stored row needs a positive priority");
  mass_.resize(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    mass_[static_cast<size_t>(q)] = uniform01(rng) * total;
  }
  sum_tree_.find_prefix(mass_.data(), n, out);
  const double p_min = min_tree_.root();
  for (int64_t q = 0; q < n; ++q) {
    if (out[q] >= size) {
      // Rounding at the very end: the last row with mass (total > 0).
      out[q] = size - 1;
      while (out[q] > 0 && !(sum_tree_.get(out[q]) > 0)) --out[q];
    }
    const double p = sum_tree_.get(out[q]);
    // (N P(i))^-beta / max_j (N P(j))^-beta == (p_i / p_min)^-beta
    w[q] = static_cast<float>(std::pow(p / p_min, -beta_));
  }
}

at::Tensor PrioritizedSamplerImpl::sample(const ReplayStorage& storage,
                                          Generator& rng, int64_t n,
                                          int64_t* out) {
  at::Tensor weight = at::detail::empty_cpu({n}, at::kFloat);
  draw(storage.size(), rng, n, out, weight.data_ptr<float>());
  return weight;
}

// New rows get the largest priority seen so far.
void PrioritizedSamplerImpl::on_write(ReplayStorage& storage, int64_t first,
                                      int64_t count) {
  const int64_t capacity = storage.capacity();
  const PersistedPriorities& persisted = storage.priorities();
  const double p = std::pow(max_priority_ + eps_, alpha_);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = (first + k) % capacity;
    set_priority(i, p);
    persisted.set(i, max_priority_, p);
  }
}

void PrioritizedSamplerImpl::update_priority(ReplayStorage& storage,
                                             const int64_t* index,
                                             const double* priority,
                                             int64_t n) {
  const PersistedPriorities& persisted = storage.priorities();
  for (int64_t k = 0; k < n; ++k) {
    max_priority_ = std::max(max_priority_, priority[k]);
    const double p = std::pow(priority[k] + eps_, alpha_);
    set_leaves(index[k], p);
    persisted.set(index[k], priority[k], p);
  }
  // The ancestors of all the rows together: at 10^8 rows nearly every node
  // is a cache miss, and a level at a time overlaps them.
  sum_tree_.refresh(index, n);
  min_tree_.refresh(index, n);
  persisted.set_max(max_priority_);
}

void PrioritizedSamplerImpl::clear(ReplayStorage& storage) {
  sum_tree_.reset();
  min_tree_.reset();
  std::fill(drawable_.begin(), drawable_.end(), uint8_t{0});
  max_priority_ = kInitialMaxPriority;
  storage.priorities().clear_masses();
  storage.priorities().set_max(kInitialMaxPriority);
}

void PrioritizedSamplerImpl::save_state(const ReplayStorage& storage,
                                        ReplayStorage& out,
                                        std::vector<Item>& state) const {
  const int64_t size = storage.size();
  at::Tensor mass = at::empty({size}, at::kDouble);
  double* m = mass.data_ptr<double>();
  const PersistedPriorities& persisted = out.priorities();
  for (int64_t i = 0; i < size; ++i) {
    const double v = min_tree_.get(i);
    m[i] = std::isfinite(v) ? v : 0.0;
    // The raw priority the mass comes from, for reopening the directory.
    persisted.set(i, raw_priority(m[i], alpha_, eps_), m[i]);
  }
  persisted.set_max(max_priority_);
  state.emplace_back("mass", mass);
  state.emplace_back("max_priority",
                     at::scalar_tensor(max_priority_, at::kDouble));
}

Sampler::Restore PrioritizedSamplerImpl::load_state(const TensorDict& state,
                                                    int64_t size) {
  at::Tensor mass = checkpoint_entry(state, "mass", at::kDouble, size);
  const double max_p =
      checkpoint_entry(state, "max_priority", at::kDouble, 0).item<double>();
  const double* m = mass.data_ptr<double>();
  bool valid = std::isfinite(max_p) && max_p >= 0;
  for (int64_t i = 0; valid && i < size; ++i) {
    valid = std::isfinite(m[i]) && m[i] >= 0;
  }
  TORCH_CHECK(valid,
              "ReplayBuffer::loads: the checkpoint's mass and max_priority "
              "must be finite and >= 0");
  return [this, mass, max_p](ReplayStorage& storage) {
    const double* masses = mass.data_ptr<double>();
    const PersistedPriorities& persisted = storage.priorities();
    for (int64_t i = 0; i < mass.numel(); ++i) {
      set_leaves(i, masses[i]);
      persisted.set(i, raw_priority(masses[i], alpha_, eps_), masses[i]);
    }
    sum_tree_.rebuild();
    min_tree_.rebuild();
    max_priority_ = max_p;
    persisted.set_max(max_p);
  };
}

// The priorities of a reopened storage's rows (the storage gave rows last
// written without a PrioritizedSampler the initial priority again).
void PrioritizedSamplerImpl::restore(ReplayStorage& storage) {
  const PersistedPriorities& persisted = storage.priorities();
  if (persisted.raw == nullptr) return;  // nothing was reopened
  max_priority_ = *persisted.max;
  const at::Tensor masses = persisted.torchrl != nullptr
                                ? persisted.torchrl->sum_file()
                                : at::Tensor();
  if (drawable_.empty() && sum_tree_.can_adopt(masses)) {
    // TorchRL's mapped sumtree.memmap, which reopening the storage has just
    // made every row's mass as below, becomes the sum tree's leaves (and so
    // the min tree's): no leaf is written, and the trees keep only their
    // inner nodes in memory (2.3 instead of 10.3 bytes a row).
    sum_tree_.adopt_leaves(masses);
    min_tree_.share_leaves(sum_tree_.leaves());
  } else {
    // Every leaf set, then the trees rebuilt once: O(N) instead of an
    // O(log N) walk per row (20 s at 10^8 rows). Runs of one priority (rows
    // never updated) reuse the power.
    const int64_t size = storage.size();
    at::parallel_for(
        0, size, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
          double last_raw = std::numeric_limits<double>::quiet_NaN();
          double last_p = 0;
          for (int64_t i = begin; i < end; ++i) {
            const double raw = persisted.raw[i];
            if (!(raw == last_raw)) {
              last_raw = raw;
              last_p = row_mass(raw, max_priority_, eps_, alpha_);
            }
            set_leaves(i, last_p);
          }
        });
  }
  sum_tree_.rebuild();
  min_tree_.rebuild();
}

// ---- SliceSampler, SliceSamplerWithoutReplacement ---------------------------

namespace {

void check_slice_batch(const SliceSpec& spec, int64_t n) {
  TORCH_CHECK_VALUE(
      n % spec.slice_len == 0, "ReplayBuffer::sample: batch_size ", n,
      " is not a multiple of the ", spec.name, "'s slice_len ", spec.slice_len);
}

// Slice `j` of `len` rows from row `start` into out[j * len, (j + 1) * len).
inline void lay_slice(int64_t* out, int64_t j, int64_t len, int64_t start,
                      int64_t capacity) {
  for (int64_t t = 0; t < len; ++t) out[j * len + t] = (start + t) % capacity;
}

}  // namespace

// Rebuilds the list of trajectories long enough for a slice.
void SliceSamplerImpl::find_trajectories(const ReplayStorage& storage) {
  if (trajs_writes_ == storage.writes()) return;
  const Timeline timeline(storage, spec_);
  const int64_t size = timeline.size();
  origin_ = timeline.row(0);
  std::vector<uint8_t> ends(static_cast<size_t>(size));
  timeline.ends(0, size, ends.data());
  long_.clear();
  trajectories_ = 0;
  int64_t start = 0;
  for (int64_t t = 0; t < size; ++t) {
    if (ends[static_cast<size_t>(t)] == 0) continue;
    ++trajectories_;
    if (t - start + 1 >= spec_.slice_len) {
      long_.emplace_back(start, t - start + 1);
    }
    start = t + 1;
  }
  trajs_writes_ = storage.writes();
}

// As in TorchRL: a trajectory uniformly among the long enough ones (or the
// epoch's next one), then a start uniformly within it.
at::Tensor SliceSamplerImpl::sample(const ReplayStorage& storage,
                                    Generator& rng, int64_t n, int64_t* out) {
  const int64_t len = spec_.slice_len;
  check_slice_batch(spec_, n);
  find_trajectories(storage);
  TORCH_CHECK(!long_.empty(),
              "ReplayBuffer::sample: no stored "
              "trajectory has slice_len ",
              len, " rows (", trajectories_, " trajectories in ",
              storage.size(), " rows)");
  const int64_t slices = n / len;
  const auto count = static_cast<int64_t>(long_.size());
  if (without_replacement_) {
    TORCH_CHECK(!epoch_.drop_last() || slices <= count,
                "ReplayBuffer::sample: ", slices, " slices of ", len,
                " rows (batch_size ", n, ") exceed the ", count,
                " stored trajectories of at least ", len, " rows (", spec_.name,
                " with drop_last)");
    epoch_.draw(count, trajs_writes_, rng, slices, out);
  } else {
    for (int64_t j = 0; j < slices; ++j) {
      out[j] = uniform_int(rng, static_cast<uint64_t>(count));
    }
  }
  // out[0, slices) holds trajectories; slice j overwrites out[j * len, ...)
  // only after slice j read its own, so go from the last slice down.
  const int64_t capacity = storage.capacity();
  for (int64_t j = slices - 1; j >= 0; --j) {
    const auto& tr = long_[static_cast<size_t>(out[j])];
    const int64_t offset =
        uniform_int(rng, static_cast<uint64_t>(tr.second - len + 1));
    lay_slice(out, j, len, (origin_ + tr.first + offset) % capacity, capacity);
  }
  return at::Tensor();
}

void SliceSamplerImpl::clear(ReplayStorage& /*storage*/) {
  epoch_.clear();
  trajs_writes_ = ~uint64_t{0};
}

// The epoch is current when no write came after it.
void SliceSamplerImpl::save_state(const ReplayStorage& storage,
                                  ReplayStorage& /*out*/,
                                  std::vector<Item>& state) const {
  epoch_.save(epoch_.version() == storage.writes(), state);
}

Sampler::Restore SliceSamplerImpl::load_state(const TensorDict& state,
                                              int64_t /*size*/) {
  Epoch epoch = epoch_.load(state);
  // Current: it belongs to the storage as loaded.
  return [this, epoch = std::move(epoch)](ReplayStorage& storage) {
    epoch_ = epoch;
    epoch_.set_version(storage.writes());
  };
}

// ---- PrioritizedSliceSampler ------------------------------------------------

PrioritizedSliceSamplerImpl::PrioritizedSliceSamplerImpl(
    int64_t capacity, const PrioritizedSliceSampler& config)
    : PrioritizedSamplerImpl(capacity, *priority_spec(config),
                             /*per_row_drawable=*/true),
      spec_(*slice_spec(config)) {
  drawable_.assign(static_cast<size_t>(capacity), 0);
}

// Position t starts a slice when the first trajectory end at or after it
// is at least slice_len - 1 positions further (the newest row is an end).
void PrioritizedSliceSamplerImpl::refresh(const ReplayStorage& storage,
                                          int64_t from, int64_t to) {
  const Timeline timeline(storage, spec_);
  const int64_t len = spec_.slice_len;
  from = std::max<int64_t>(from, 0);
  to = std::min(to, timeline.size());
  if (from >= to) return;
  // Ends past `stop` cannot decide positions before `to`.
  const int64_t stop = std::min(timeline.size(), to + len - 1);
  ends_.resize(static_cast<size_t>(stop - from));
  timeline.ends(from, stop, ends_.data());
  int64_t next_end = std::numeric_limits<int64_t>::max();
  for (int64_t t = stop - 1; t >= from; --t) {
    if (ends_[static_cast<size_t>(t - from)] != 0) next_end = t;
    if (t < to) set_drawable(timeline.row(t), next_end >= t + len - 1);
  }
}

// A write of `count` rows from row `first` changes which rows start a
// slice among them and the slice_len - 1 positions before them.
void PrioritizedSliceSamplerImpl::on_write(ReplayStorage& storage,
                                           int64_t first, int64_t count) {
  PrioritizedSamplerImpl::on_write(storage, first, count);
  const int64_t capacity = storage.capacity();
  const int64_t origin = storage.size() == capacity ? storage.cursor() : 0;
  const int64_t t0 = (first - origin + capacity) % capacity;
  refresh(storage, t0 - (spec_.slice_len - 1), t0 + count);
}

void PrioritizedSliceSamplerImpl::restore(ReplayStorage& storage) {
  PrioritizedSamplerImpl::restore(storage);
  if (storage.allocated()) refresh(storage, 0, storage.size());
}

Sampler::Restore PrioritizedSliceSamplerImpl::load_state(
    const TensorDict& state, int64_t size) {
  Restore masses = PrioritizedSamplerImpl::load_state(state, size);
  return [this, masses = std::move(masses)](ReplayStorage& storage) {
    masses(storage);
    if (storage.allocated()) refresh(storage, 0, storage.size());
  };
}

at::Tensor PrioritizedSliceSamplerImpl::sample(const ReplayStorage& storage,
                                               Generator& rng, int64_t n,
                                               int64_t* out) {
  const int64_t len = spec_.slice_len;
  check_slice_batch(spec_, n);
  TORCH_CHECK(total_mass() > 0,
              "ReplayBuffer::sample: no stored row starts a slice of "
              "slice_len ",
              len, " rows within its trajectory with a positive priority (",
              storage.size(), " rows stored)");
  at::Tensor weight = at::detail::empty_cpu({n}, at::kFloat);
  float* w = weight.data_ptr<float>();
  const int64_t slices = n / len;
  draw(storage.size(), rng, slices, out, w);
  for (int64_t j = slices - 1; j >= 0; --j) {  // as in SliceSamplerImpl
    const float wj = w[j];
    lay_slice(out, j, len, out[j], storage.capacity());
    std::fill(w + j * len, w + (j + 1) * len, wj);
  }
  return weight;
}

}  // namespace detail
}  // namespace tensordict
