// ReplayBuffer's samplers (see rl/samplers.h).
#include "rl/samplers.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/internal.h"

namespace tensordict {
namespace detail {

namespace {

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

}  // namespace

// ---- RandomSampler ----------------------------------------------------------

at::Tensor RandomSamplerImpl::sample(const ReplayStorage& storage,
                                     std::mt19937_64& rng, int64_t n,
                                     int64_t* out) {
  const auto size = static_cast<uint64_t>(storage.size());
  for (int64_t q = 0; q < n; ++q) out[q] = uniform_int(rng, size);
  return at::Tensor();
}

// ---- SamplerWithoutReplacement ----------------------------------------------

void WithoutReplacementSamplerImpl::new_epoch(int64_t size,
                                              std::mt19937_64& rng) {
  perm_.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) perm_[static_cast<size_t>(i)] = i;
  for (int64_t i = size - 1; i > 0; --i) {
    const int64_t j = uniform_int(rng, static_cast<uint64_t>(i + 1));
    std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(j)]);
  }
  perm_pos_ = 0;
  perm_size_ = size;
}

at::Tensor WithoutReplacementSamplerImpl::sample(const ReplayStorage& storage,
                                                 std::mt19937_64& rng,
                                                 int64_t n, int64_t* out) {
  const int64_t size = storage.size();
  if (drop_last_) {
    TORCH_CHECK(n <= size, "ReplayBuffer::sample: batch_size ", n,
                " exceeds the buffer's size ", size,
                " (SamplerWithoutReplacement with drop_last)");
  }
  if (perm_size_ != size || perm_pos_ >= perm_.size() ||
      (drop_last_ && perm_.size() - perm_pos_ < static_cast<size_t>(n))) {
    new_epoch(size, rng);
  }
  for (int64_t q = 0; q < n; ++q) {
    if (perm_pos_ == perm_.size()) new_epoch(size, rng);
    out[q] = perm_[perm_pos_++];
  }
  return at::Tensor();
}

void WithoutReplacementSamplerImpl::clear(ReplayStorage& /*storage*/) {
  perm_.clear();
  perm_pos_ = 0;
  perm_size_ = -1;
}

// ---- PrioritizedSampler -----------------------------------------------------

PrioritizedSamplerImpl::PrioritizedSamplerImpl(int64_t capacity, double alpha,
                                               double beta, double eps)
    : alpha_(alpha),
      beta_(beta),
      eps_(eps),
      sum_tree_(capacity),
      min_tree_(capacity) {}

// Row `i`'s probability mass `p` = (priority + eps)^alpha. The min tree
// holds the positive masses only: a row of mass 0 is never sampled, and
// the importance weights (p_i / p_min)^-beta of the rows that are sampled
// stay in (0, 1] (a p_min of 0 would make them all 0).
void PrioritizedSamplerImpl::set_priority(int64_t i, double p) {
  sum_tree_.set(i, p);
  min_tree_.set(i, p > 0 ? p : std::numeric_limits<double>::infinity());
}

at::Tensor PrioritizedSamplerImpl::sample(const ReplayStorage& storage,
                                          std::mt19937_64& rng, int64_t n,
                                          int64_t* out) {
  const int64_t size = storage.size();
  const double total = sum_tree_.root();
  TORCH_CHECK(total > 0 && std::isfinite(total),
              "ReplayBuffer::sample: the priorities sum to ", total,
              "; at least one stored row needs a positive priority");
  mass_.resize(static_cast<size_t>(n));
  for (int64_t q = 0; q < n; ++q) {
    mass_[static_cast<size_t>(q)] = uniform01(rng) * total;
  }
  sum_tree_.find_prefix(mass_.data(), n, out);
  at::Tensor weight = at::detail::empty_cpu({n}, at::kFloat);
  float* w = weight.data_ptr<float>();
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
    set_priority(index[k], p);
    persisted.set(index[k], priority[k], p);
  }
  persisted.set_max(max_priority_);
}

void PrioritizedSamplerImpl::clear(ReplayStorage& storage) {
  sum_tree_.reset();
  min_tree_.reset();
  max_priority_ = kInitialMaxPriority;
  storage.priorities().set_max(kInitialMaxPriority);
}

// The priorities of a reopened storage's rows (the storage gave rows last
// written without a PrioritizedSampler the initial priority again).
void PrioritizedSamplerImpl::restore(ReplayStorage& storage) {
  const PersistedPriorities& persisted = storage.priorities();
  if (persisted.raw == nullptr) return;  // nothing was reopened
  max_priority_ = *persisted.max;
  for (int64_t i = 0; i < storage.size(); ++i) {
    double raw = persisted.raw[i];
    if (!(std::isfinite(raw) && raw >= 0)) raw = max_priority_;
    set_priority(i, std::pow(raw + eps_, alpha_));
  }
}

// ---- SliceSampler -----------------------------------------------------------

// Rebuilds the trajectory list (in timeline order, oldest row first).
void SliceSamplerImpl::find_trajectories(const ReplayStorage& storage) {
  if (trajs_writes_ == storage.writes()) return;
  const SliceSampler& s = config_;
  const int64_t capacity = storage.capacity();
  const int64_t size = storage.size();
  const TensorDictImpl& st = TensorDictImpl::of(storage.dict());
  const NestedKey& key = s.traj_key() ? *s.traj_key() : s.end_key();
  const Node* node = lookup(st, key);
  TORCH_CHECK(node != nullptr && !node->is_dict(),
              "ReplayBuffer::sample: the SliceSampler's ",
              s.traj_key() ? "traj_key " : "end_key ", key.str(),
              " is not a tensor of the storage (keys: ", key_list_str(st), ")");
  at::Tensor t = node->tensor.reshape({capacity, -1});
  // ends[r]: row r is the last row of its trajectory.
  at::Tensor ends =
      s.traj_key() ? at::ne(t, t.roll(-1, 0)).any(1) : t.ne(0).any(1);
  ends = ends.to(at::kCPU).contiguous();
  const bool* e = ends.data_ptr<bool>();
  const int64_t start = size == capacity ? storage.cursor() : 0;
  trajs_.clear();
  int64_t traj_start = 0;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t r = (start + i) % capacity;
    if (e[r] || i == size - 1) {
      trajs_.emplace_back(traj_start, i - traj_start + 1);
      traj_start = i + 1;
    }
  }
  trajs_writes_ = storage.writes();
}

at::Tensor SliceSamplerImpl::sample(const ReplayStorage& storage,
                                    std::mt19937_64& rng, int64_t n,
                                    int64_t* out) {
  const int64_t len = config_.slice_len();
  TORCH_CHECK_VALUE(n % len == 0, "ReplayBuffer::sample: batch_size ", n,
                    " is not a multiple of the SliceSampler's slice_len ", len);
  find_trajectories(storage);
  std::vector<const std::pair<int64_t, int64_t>*> eligible;
  for (const auto& tr : trajs_) {
    if (tr.second >= len) eligible.push_back(&tr);
  }
  const int64_t capacity = storage.capacity();
  const int64_t size = storage.size();
  TORCH_CHECK(!eligible.empty(),
              "ReplayBuffer::sample: no stored "
              "trajectory has slice_len ",
              len, " rows (", trajs_.size(), " trajectories in ", size,
              " rows)");
  const int64_t origin = size == capacity ? storage.cursor() : 0;
  for (int64_t k = 0; k < n / len; ++k) {
    const auto& tr =
        *eligible[static_cast<size_t>(uniform_int(rng, eligible.size()))];
    const int64_t offset =
        uniform_int(rng, static_cast<uint64_t>(tr.second - len + 1));
    for (int64_t j = 0; j < len; ++j) {
      out[k * len + j] = (origin + tr.first + offset + j) % capacity;
    }
  }
  return at::Tensor();
}

}  // namespace detail
}  // namespace tensordict
