// ReplayBufferEnsemble and OfflineToOnlineReplayBuffer
// (tensordict/replay_ensemble.h): the buffers sample with their own
// samplers; the ensemble picks how many rows each gives, checks that the
// rows fit one dict before any buffer samples, and joins the samples.
#include "tensordict/replay_ensemble.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <variant>

#include "core/internal.h"
#include "core/names.h"
#include "io/files.h"
#include "rl/random.h"
#include "rl/samplers.h"
#include "tensordict/functional.h"

namespace tensordict {

namespace {

constexpr const char* kName = "ReplayBufferEnsemble";

// `weights` (one per buffer) checked and normalized to sum 1.
std::vector<double> normalized(const char* what,
                               const std::vector<double>& weights,
                               size_t buffers) {
  TORCH_CHECK_VALUE(weights.size() == buffers, kName, ": ", what, " has ",
                    weights.size(), " entries for ", buffers, " buffers");
  double total = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    TORCH_CHECK_VALUE(std::isfinite(weights[i]) && weights[i] >= 0.0, kName,
                      ": ", what, "[", i, "] must be finite and >= 0, got ",
                      weights[i]);
    total += weights[i];
  }
  TORCH_CHECK_VALUE(total > 0.0, kName, ": ", what, " must not all be 0");
  std::vector<double> out(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) out[i] = weights[i] / total;
  return out;
}

// The leaves of a buffer's rows: key -> (row shape, dtype).
using RowLeaves =
    std::unordered_map<std::string,
                       std::pair<std::vector<int64_t>, at::ScalarType>>;

RowLeaves row_leaves(const TensorDict& storage) {
  RowLeaves out;
  for (const auto& [key, entry] : storage.items(true, true)) {
    if (!entry.is_tensor()) continue;  // cat checks the others
    const at::Tensor& tensor = entry.tensor();
    out.emplace(key.str(), std::make_pair(tensor.sizes().slice(1).vec(),
                                          tensor.scalar_type()));
  }
  return out;
}

std::string leaf_str(const std::pair<std::vector<int64_t>, at::ScalarType>& l) {
  return detail::dtype_name(l.second) + " " + detail::shape_str(l.first);
}

// Whether two storages' leaves are the same keys, in the same order, with
// the same row shapes and dtypes (the common case, checked without a map).
bool same_rows(const std::vector<std::pair<NestedKey, Entry>>& a,
               const std::vector<std::pair<NestedKey, Entry>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!(a[k].first == b[k].first) ||
        a[k].second.is_tensor() != b[k].second.is_tensor()) {
      return false;
    }
    if (!a[k].second.is_tensor()) continue;
    const at::Tensor& x = a[k].second.tensor();
    const at::Tensor& y = b[k].second.tensor();
    if (x.scalar_type() != y.scalar_type() ||
        x.sizes().slice(1) != y.sizes().slice(1)) {
      return false;
    }
  }
  return true;
}

// Throws, naming the first difference, unless the leaves of buffer `ia`
// (`a`) and of buffer `ib` (`b`) are the same set (in any order).
void explain_mismatch(const RowLeaves& a, int64_t ia, const RowLeaves& b,
                      int64_t ib) {
  for (const auto& [key, leaf] : a) {
    const auto it = b.find(key);
    TORCH_CHECK(it != b.end(), kName, "::sample: key ", key, " is in buffer ",
                ia, "'s rows but not in buffer ", ib, "'s");
    TORCH_CHECK(it->second == leaf, kName, "::sample: key ", key, ": ",
                leaf_str(leaf), " rows in buffer ", ia, ", ",
                leaf_str(it->second), " in buffer ", ib);
  }
  for (const auto& [key, leaf] : b) {
    TORCH_CHECK(a.count(key) != 0, kName, "::sample: key ", key,
                " is in buffer ", ib, "'s rows but not in buffer ", ia, "'s");
  }
}

}  // namespace

struct ReplayBufferEnsemble::Impl {
  std::vector<std::shared_ptr<ReplayBuffer>> buffers;
  ReplayBufferEnsembleOptions options;
  std::vector<double> ratios;  // normalized; empty: TorchRL's sampling
  std::vector<double> p;       // normalized; empty: uniform
  mutable std::mutex mutex;    // guards rng and ratios
  detail::Generator rng;

  using Items = std::vector<std::pair<NestedKey, Entry>>;

  // Throws unless every buffer in `ids` (distinct) holds rows, all of one
  // structure. `rows[i]` is what buffer ids[i] would give, for the message.
  // Returns the first buffer's storage leaves (null for one buffer). A
  // storage's structure never changes once it holds rows, so the structures
  // of the last `ids` checked are not compared again.
  std::shared_ptr<const Items> check_sources(
      const std::vector<int64_t>& ids, const std::vector<int64_t>& rows) const {
    for (size_t k = 0; k < ids.size(); ++k) {
      TORCH_CHECK(!buffers[static_cast<size_t>(ids[k])]->empty(), kName,
                  "::sample: buffer ", ids[k], " is empty (it would give ",
                  rows[k], " rows)");
    }
    if (ids.size() < 2) return nullptr;
    {
      std::lock_guard<std::mutex> lock(checked_mutex);
      if (ids == checked_ids) return checked_rows;
    }
    const TensorDict first_rows =
        buffers[static_cast<size_t>(ids[0])]->storage();
    auto first = std::make_shared<const Items>(first_rows.items(true, true));
    for (size_t k = 1; k < ids.size(); ++k) {
      const std::vector<std::pair<NestedKey, Entry>> other =
          buffers[static_cast<size_t>(ids[k])]->storage().items(true, true);
      if (!same_rows(*first, other)) {
        explain_mismatch(
            row_leaves(first_rows), ids[0],
            row_leaves(buffers[static_cast<size_t>(ids[k])]->storage()),
            ids[k]);
      }
    }
    std::lock_guard<std::mutex> lock(checked_mutex);
    checked_ids = ids;
    checked_rows = first;
    return first;
  }
  mutable std::mutex checked_mutex;  // guards the two below
  mutable std::vector<int64_t> checked_ids;
  mutable std::shared_ptr<const Items> checked_rows;

  // `counts[i]` rows from buffer i, concatenated in buffer order.
  std::pair<TensorDict, EnsembleSampleInfo> sample_counts(
      const std::vector<int64_t>& counts) const {
    std::vector<int64_t> ids;
    std::vector<int64_t> rows;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] > 0) {
        ids.push_back(static_cast<int64_t>(i));
        rows.push_back(counts[i]);
      }
    }
    const std::shared_ptr<const Items> first = check_sources(ids, rows);
    if (c10::optional<TensorDict> out = batch_of(first.get(), rows)) {
      // Each buffer samples straight into its rows of the batch.
      std::vector<SampleInfo> infos;
      int64_t at = 0;
      for (size_t k = 0; k < ids.size(); ++k) {
        infos.push_back(buffers[static_cast<size_t>(ids[k])]->sample_into(
            *out, at, rows[k]));
        at += rows[k];
      }
      return {std::move(*out), join_info(ids, infos, /*stacked=*/false)};
    }
    std::vector<TensorDict> parts;
    std::vector<SampleInfo> infos;
    for (size_t k = 0; k < ids.size(); ++k) {
      auto [data, info] = buffers[static_cast<size_t>(ids[k])]->sample(rows[k]);
      parts.push_back(std::move(data));
      infos.push_back(std::move(info));
    }
    return join(ids, std::move(parts), infos, /*stacked=*/false);
  }

  // A batch of `rows` rows (summed) of CPU leaves shaped as `items`
  // (check_sources' leaves of two or more buffers), from `pool` (an earlier
  // batch's, once nothing else holds any of them: a loop that drops each
  // batch before the next reuses two sets, and the samples touch no fresh
  // pages); nothing when a leaf is not a CPU tensor (`join` then
  // concatenates the samples).
  c10::optional<TensorDict> batch_of(const Items* first,
                                     const std::vector<int64_t>& rows) const {
    if (first == nullptr) return c10::nullopt;
    const Items& items = *first;
    int64_t total = 0;
    for (const int64_t r : rows) total += r;
    size_t bytes = 0;
    for (const auto& [key, entry] : items) {
      if (!entry.is_tensor() || !entry.tensor().is_cpu()) return c10::nullopt;
      const at::Tensor& t = entry.tensor();
      bytes += static_cast<size_t>(total) * t.dtype().itemsize() *
               static_cast<size_t>(t.numel() / std::max<int64_t>(t.size(0), 1));
    }
    const std::vector<at::Tensor> leaves = pooled(items, total, bytes);
    TensorDict out({}, {total});
    for (size_t k = 0; k < items.size(); ++k) {
      out.set(items[k].first, leaves[k]);
    }
    return out;
  }

  // The samples' infos concatenated into `info` by a plain loop (what
  // `join_info` does with `cat`, without a dispatch per tensor), when every
  // index is a contiguous CPU int64 tensor and every weight, if any, a
  // contiguous CPU float32 one; false, changing nothing, otherwise.
  static bool concat_into(const std::vector<int64_t>& ids,
                          const std::vector<SampleInfo>& infos,
                          EnsembleSampleInfo& info) {
    int64_t total = 0;
    bool weighted = false;
    for (const SampleInfo& s : infos) {
      if (!s.index.is_cpu() || s.index.scalar_type() != at::kLong ||
          !s.index.is_contiguous() || s.index.dim() != 1) {
        return false;
      }
      if (s.weight.defined()) {
        if (!s.weight.is_cpu() || s.weight.scalar_type() != at::kFloat ||
            !s.weight.is_contiguous() || s.weight.sizes() != s.index.sizes()) {
          return false;
        }
        weighted = true;
      }
      total += s.index.numel();
    }
    at::Tensor buffer_ids = at::empty({total}, at::kLong);
    at::Tensor index = at::empty({total}, at::kLong);
    at::Tensor weight =
        weighted ? at::empty({total}, at::kFloat) : at::Tensor();
    int64_t* bp = buffer_ids.data_ptr<int64_t>();
    int64_t* ip = index.data_ptr<int64_t>();
    float* wp = weighted ? weight.data_ptr<float>() : nullptr;
    for (size_t k = 0; k < infos.size(); ++k) {
      const int64_t n = infos[k].index.numel();
      std::fill(bp, bp + n, ids[k]);
      const int64_t* from = infos[k].index.data_ptr<int64_t>();
      std::copy(from, from + n, ip);
      if (wp != nullptr) {
        if (infos[k].weight.defined()) {
          const float* w = infos[k].weight.data_ptr<float>();
          std::copy(w, w + n, wp);
        } else {
          std::fill(wp, wp + n, 1.0F);
        }
        wp += n;
      }
      bp += n;
      ip += n;
    }
    info.buffer_ids = std::move(buffer_ids);
    info.index = std::move(index);
    info.weight = std::move(weight);
    return true;
  }

  // The samples' infos joined: concatenated, or stacked with the buffer ids
  // broadcast over each sample's rows.
  EnsembleSampleInfo join_info(const std::vector<int64_t>& ids,
                               const std::vector<SampleInfo>& infos,
                               bool stacked) const {
    EnsembleSampleInfo info;
    if (!stacked && infos.size() > 1 && concat_into(ids, infos, info)) {
      return info;
    }
    std::vector<at::Tensor> buffer_ids;
    std::vector<at::Tensor> index;
    std::vector<at::Tensor> weight;
    bool weighted = false;
    for (const SampleInfo& s : infos) weighted |= s.weight.defined();
    for (size_t k = 0; k < infos.size(); ++k) {
      const at::Tensor& idx = infos[k].index;
      buffer_ids.push_back(at::full_like(idx, ids[k]));
      index.push_back(idx);
      if (weighted) {
        weight.push_back(
            infos[k].weight.defined()
                ? infos[k].weight
                : at::ones(idx.sizes(), idx.options().dtype(at::kFloat)));
      }
    }
    if (stacked) {
      info.buffer_ids = at::stack(buffer_ids);
      info.index = at::stack(index);
      if (weighted) info.weight = at::stack(weight);
    } else if (infos.size() == 1) {
      info.buffer_ids = std::move(buffer_ids[0]);
      info.index = index[0];
      if (weighted) info.weight = weight[0];
    } else {
      info.buffer_ids = at::cat(buffer_ids);
      info.index = at::cat(index);
      if (weighted) info.weight = at::cat(weight);
    }
    return info;
  }

  // The samples of `ids` (in order) joined: concatenated, or stacked with
  // the buffer ids broadcast over each sample's rows.
  std::pair<TensorDict, EnsembleSampleInfo> join(
      const std::vector<int64_t>& ids, std::vector<TensorDict> parts,
      const std::vector<SampleInfo>& infos, bool stacked) const {
    EnsembleSampleInfo info = join_info(ids, infos, stacked);
    if (stacked) return {stack(parts, 0), std::move(info)};
    if (parts.size() == 1) return {std::move(parts[0]), std::move(info)};
    return {cat(parts, 0), std::move(info)};
  }

  // Leaves of `rows` rows shaped as `items`' ones: a pooled set nothing
  // else holds, or new ones (pooled when the batch is at most 4 MiB).
  std::vector<at::Tensor> pooled(
      const std::vector<std::pair<NestedKey, Entry>>& items, int64_t rows,
      size_t bytes) const {
    auto fits = [&](const std::vector<at::Tensor>& set) {
      if (set.size() != items.size()) return false;
      for (size_t k = 0; k < set.size(); ++k) {
        const at::Tensor& want = items[k].second.tensor();
        const at::Tensor& have = set[k];
        // The pool's own reference only: no dict, view or copy of the
        // handle holds the tensor or its memory.
        if (have.use_count() != 1 || have.storage().use_count() != 1 ||
            have.scalar_type() != want.scalar_type() || have.size(0) != rows ||
            have.sizes().slice(1) != want.sizes().slice(1)) {
          return false;
        }
      }
      return true;
    };
    constexpr size_t kPooled = size_t{4} << 20;
    constexpr size_t kSets = 2;
    std::lock_guard<std::mutex> lock(mutex);
    for (const std::vector<at::Tensor>& set : pool) {
      if (fits(set)) {
        // As gather_storage (core/row_copy.cpp): another thread's last read
        // of a batch it dropped comes before these writes.
        std::atomic_thread_fence(std::memory_order_acquire);
        return set;
      }
    }
    std::vector<at::Tensor> fresh;
    for (const auto& [key, entry] : items) {
      std::vector<int64_t> shape = entry.tensor().sizes().vec();
      shape[0] = rows;
      fresh.push_back(at::empty(shape, entry.tensor().options()));
    }
    if (bytes <= kPooled) {
      if (pool.size() == kSets) pool.erase(pool.begin());
      pool.push_back(fresh);
    }
    return fresh;
  }

  mutable std::vector<std::vector<at::Tensor>> pool;  // under `mutex`

  // ---- Checkpoints ----------------------------------------------------------

  // The ensemble's state read from `dir/ensemble` and checked against this
  // ensemble: its generator, its ratios (normalized, and as given), and
  // the state itself, for OfflineToOnlineReplayBuffer's entry.
  struct Checkpoint {
    detail::Generator rng;
    std::vector<double> ratios;
    std::vector<double> given_ratios;
    TensorDict state;
  };

  // Every buffer's dumps into dir/<i>, then the ensemble's state (with
  // `extra`) into dir/ensemble.
  void dumps(
      const std::string& dir, const char* fn,
      const std::vector<std::pair<std::string, at::Tensor>>& extra) const {
    detail::make_dir(dir);
    TORCH_CHECK(detail::dir_is_empty(dir, fn), fn, ": '", dir,
                "' is not empty; dumps writes a checkpoint into a new or "
                "empty directory only");
    std::vector<Item> state;
    {
      std::lock_guard<std::mutex> lock(mutex);
      state.emplace_back("format_version",
                         at::scalar_tensor(kCheckpointVersion, at::kLong));
      state.emplace_back(
          "num_buffers",
          at::scalar_tensor(static_cast<int64_t>(buffers.size()), at::kLong));
      state.emplace_back("rng", detail::generator_entry(rng));
      const std::vector<double>& given = options.ratios();
      state.emplace_back(
          "ratios",
          at::tensor(c10::ArrayRef<double>(given), at::kDouble).reshape({-1}));
    }
    for (const auto& [key, value] : extra) state.emplace_back(key, value);
    for (size_t i = 0; i < buffers.size(); ++i) {
      buffers[i]->dumps(dir + "/" + std::to_string(i));
    }
    (void)TensorDict(state, {}).memmap(dir + "/ensemble");
  }

  Checkpoint read_checkpoint(const std::string& dir, const char* fn) const {
    const std::string path = dir + "/ensemble";
    TORCH_CHECK(detail::path_exists(path + "/meta.json"), fn, ": '", dir,
                "' holds no ensemble checkpoint (no ensemble/meta.json; "
                "dumps writes one)");
    Checkpoint cp;
    cp.state = TensorDict::load_memmap(path, /*read_only=*/true);
    auto scalar = [&](const char* key) {
      return detail::checkpoint_entry(cp.state, key, at::kLong, 0, fn)
          .item<int64_t>();
    };
    const int64_t version = scalar("format_version");
    TORCH_CHECK(version == kCheckpointVersion, fn, ": '", dir,
                "': checkpoint format_version ", version,
                ", this library reads version ", kCheckpointVersion);
    const int64_t n = scalar("num_buffers");
    TORCH_CHECK_VALUE(n == static_cast<int64_t>(buffers.size()), fn, ": '", dir,
                      "' holds an ensemble of ", n, " buffers, this one has ",
                      buffers.size());
    TORCH_CHECK(detail::read_generator(detail::checkpoint_entry(
                                           cp.state, "rng", at::kByte, -1, fn),
                                       cp.rng),
                fn, ": '", dir,
                "': the checkpoint's rng is not a generator "
                "state");
    const at::Tensor given =
        detail::checkpoint_entry(cp.state, "ratios", at::kDouble, -1, fn);
    cp.given_ratios.assign(given.data_ptr<double>(),
                           given.data_ptr<double>() + given.numel());
    std::lock_guard<std::mutex> lock(mutex);
    TORCH_CHECK_VALUE(
        cp.given_ratios.empty() == ratios.empty(), fn, ": '", dir,
        "' holds an ensemble ", cp.given_ratios.empty() ? "without" : "with",
        " fixed ratios, this one has ", ratios.empty() ? "none" : "them");
    if (!cp.given_ratios.empty()) {
      cp.ratios = normalized("the checkpoint's ratios", cp.given_ratios,
                             buffers.size());
    }
    return cp;
  }

  // Every buffer loads dir/<i>, all or nothing: each checkpoint is first
  // loaded into a scratch buffer with the buffer's options (on the CPU,
  // without shared memory, storage_dir or rate limiter) and, when the
  // buffer has rows, one zero row of their structure, so that every check
  // the buffer's own loads makes runs before any buffer changes.
  void load_buffers(const std::string& dir, const char* fn) const {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::string path = dir + "/" + std::to_string(i);
      try {
        (void)detail::check_loads(*buffers[i], path);
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, fn, ": buffer ", i, ": ", e.msg());
      }
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
      buffers[i]->loads(dir + "/" + std::to_string(i));
    }
  }

  void commit(Checkpoint& cp) {
    std::lock_guard<std::mutex> lock(mutex);
    rng = cp.rng;
    if (!cp.ratios.empty()) {
      ratios = std::move(cp.ratios);
      options.ratios(std::move(cp.given_ratios));
    }
  }

  static constexpr int64_t kCheckpointVersion = 1;
};

ReplayBufferEnsemble::ReplayBufferEnsemble(
    std::vector<std::shared_ptr<ReplayBuffer>> buffers,
    ReplayBufferEnsembleOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  TORCH_CHECK_VALUE(!buffers.empty(), kName, ": no buffers");
  for (size_t i = 0; i < buffers.size(); ++i) {
    TORCH_CHECK_VALUE(buffers[i] != nullptr, kName, ": buffer ", i, " is null");
    for (size_t j = 0; j < i; ++j) {
      TORCH_CHECK_VALUE(buffers[j] != buffers[i], kName, ": buffers ", j,
                        " and ", i, " are the same buffer");
    }
  }
  const size_t n = buffers.size();
  if (!options.ratios().empty()) {
    TORCH_CHECK_VALUE(options.p().empty() && !options.sample_from_all() &&
                          options.num_buffer_sampled() == 0,
                      kName,
                      ": ratios fix every batch's split: p, sample_from_all "
                      "and num_buffer_sampled do not apply");
    m.ratios = normalized("ratios", options.ratios(), n);
  }
  TORCH_CHECK_VALUE(!(options.sample_from_all() && !options.p().empty()), kName,
                    ": p and sample_from_all=true cannot be combined");
  if (!options.p().empty()) m.p = normalized("p", options.p(), n);
  TORCH_CHECK_VALUE(options.num_buffer_sampled() >= 0, kName,
                    ": num_buffer_sampled must be >= 0, got ",
                    options.num_buffer_sampled());
  TORCH_CHECK_VALUE(
      !options.sample_from_all() || options.num_buffer_sampled() == 0 ||
          options.num_buffer_sampled() == static_cast<int64_t>(n),
      kName, ": with sample_from_all, num_buffer_sampled must be ", n,
      " (the number of buffers), got ", options.num_buffer_sampled());
  m.buffers = std::move(buffers);
  m.options = std::move(options);
  m.rng.seed(m.options.seed());
}

ReplayBufferEnsemble::~ReplayBufferEnsemble() = default;
ReplayBufferEnsemble::ReplayBufferEnsemble(ReplayBufferEnsemble&&) noexcept =
    default;
ReplayBufferEnsemble& ReplayBufferEnsemble::operator=(
    ReplayBufferEnsemble&&) noexcept = default;

std::vector<int64_t> ReplayBufferEnsemble::split(int64_t batch_size) const {
  const Impl& m = *impl_;
  std::vector<double> ratios;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    ratios = m.ratios;
  }
  TORCH_CHECK(!ratios.empty(), kName,
              "::split: the ensemble has no fixed ratios");
  TORCH_CHECK_VALUE(batch_size > 0, kName,
                    "::split: batch_size must be > 0, got ", batch_size);
  std::vector<int64_t> counts(ratios.size());
  double cumulative = 0.0;
  int64_t before = 0;
  for (size_t i = 0; i < ratios.size(); ++i) {
    cumulative += ratios[i];
    const int64_t upto =
        i + 1 == ratios.size()
            ? batch_size
            : std::min(batch_size,
                       static_cast<int64_t>(std::nearbyint(
                           cumulative * static_cast<double>(batch_size))));
    counts[i] = std::max<int64_t>(upto - before, 0);
    before = std::max(before, upto);
  }
  return counts;
}

std::pair<TensorDict, EnsembleSampleInfo> ReplayBufferEnsemble::sample(
    int64_t batch_size) {
  Impl& m = *impl_;
  TORCH_CHECK_VALUE(batch_size > 0, kName,
                    "::sample: batch_size must be > 0, got ", batch_size);
  bool fixed = false;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    fixed = !m.ratios.empty();
  }
  if (fixed) return m.sample_counts(split(batch_size));

  // TorchRL's SamplerEnsemble: k buffers, n / k rows each, stacked.
  const auto n = static_cast<int64_t>(m.buffers.size());
  const int64_t k =
      m.options.num_buffer_sampled() > 0 ? m.options.num_buffer_sampled() : n;
  TORCH_CHECK_VALUE(batch_size % k == 0, kName, "::sample: batch_size ",
                    batch_size, " is not a multiple of the ", k,
                    " buffers sampled per batch");
  const int64_t rows = batch_size / k;
  std::vector<int64_t> ids(static_cast<size_t>(k));
  std::lock_guard<std::mutex> lock(m.mutex);
  detail::Generator rng = m.rng;  // committed once the call succeeds
  for (int64_t j = 0; j < k; ++j) {
    if (m.options.sample_from_all()) {
      ids[static_cast<size_t>(j)] = j;
    } else if (m.p.empty()) {
      ids[static_cast<size_t>(j)] =
          detail::uniform_int(rng, static_cast<uint64_t>(n));
    } else {
      const double u = detail::uniform01(rng);
      double c = 0.0;
      int64_t pick = n - 1;
      for (int64_t i = 0; i < n; ++i) {
        c += m.p[static_cast<size_t>(i)];
        if (u < c && m.p[static_cast<size_t>(i)] > 0.0) {
          pick = i;
          break;
        }
      }
      while (m.p[static_cast<size_t>(pick)] == 0.0) --pick;
      ids[static_cast<size_t>(j)] = pick;
    }
  }
  std::vector<int64_t> distinct;
  std::vector<int64_t> distinct_rows;
  for (const int64_t id : ids) {
    if (std::find(distinct.begin(), distinct.end(), id) == distinct.end()) {
      distinct.push_back(id);
      distinct_rows.push_back(rows);
    }
  }
  m.check_sources(distinct, distinct_rows);
  std::vector<TensorDict> parts;
  std::vector<SampleInfo> infos;
  for (const int64_t id : ids) {
    auto [data, info] = m.buffers[static_cast<size_t>(id)]->sample(rows);
    parts.push_back(std::move(data));
    infos.push_back(std::move(info));
  }
  m.rng = rng;
  return m.join(ids, std::move(parts), infos, /*stacked=*/true);
}

void ReplayBufferEnsemble::update_priority(const EnsembleSampleInfo& info,
                                           const at::Tensor& priority) {
  const Impl& m = *impl_;
  constexpr const char* kWhat = "ReplayBufferEnsemble::update_priority";
  TORCH_CHECK_VALUE(
      info.buffer_ids.defined() && info.index.defined() && priority.defined(),
      kWhat,
      ": info.buffer_ids, info.index and priority must "
      "be defined");
  TORCH_CHECK_VALUE(info.buffer_ids.sizes() == info.index.sizes(), kWhat,
                    ": info.buffer_ids has shape ",
                    detail::shape_str(info.buffer_ids.sizes()),
                    " but info.index has shape ",
                    detail::shape_str(info.index.sizes()));
  TORCH_CHECK_VALUE(priority.numel() == info.index.numel(), kWhat,
                    ": priority has ", priority.numel(), " elements for the ",
                    info.index.numel(), " rows of info");
  const at::Tensor ids = info.buffer_ids.detach()
                             .reshape({-1})
                             .to(at::kCPU, at::kLong)
                             .contiguous();
  const at::Tensor idx =
      info.index.detach().reshape({-1}).to(at::kCPU, at::kLong).contiguous();
  const at::Tensor pri =
      priority.detach().reshape({-1}).to(at::kCPU, at::kDouble).contiguous();
  const auto n = static_cast<int64_t>(m.buffers.size());
  const int64_t* bp = ids.data_ptr<int64_t>();
  const int64_t* ip = idx.data_ptr<int64_t>();
  const double* pp = pri.data_ptr<double>();
  std::vector<int64_t> sizes(static_cast<size_t>(n), -1);
  for (int64_t r = 0; r < ids.numel(); ++r) {
    TORCH_CHECK_INDEX(bp[r] >= 0 && bp[r] < n, kWhat, ": buffer id ", bp[r],
                      " is out of range for ", n, " buffers");
    const ReplayBuffer& rb = *m.buffers[static_cast<size_t>(bp[r])];
    int64_t& size = sizes[static_cast<size_t>(bp[r])];
    if (size < 0) {
      const SamplerConfig& s = rb.options().sampler();
      TORCH_CHECK(std::holds_alternative<PrioritizedSampler>(s) ||
                      std::holds_alternative<PrioritizedSliceSampler>(s),
                  kWhat, ": buffer ", bp[r],
                  "'s sampler is not PrioritizedSampler or "
                  "PrioritizedSliceSampler");
      size = rb.size();
    }
    TORCH_CHECK_INDEX(ip[r] >= 0 && ip[r] < size, kWhat, ": index ", ip[r],
                      " is out of range for buffer ", bp[r], " of size ", size);
    TORCH_CHECK_VALUE(std::isfinite(pp[r]) && pp[r] >= 0, kWhat,
                      ": priorities must be finite and >= 0, got ", pp[r],
                      " for index ", ip[r], " of buffer ", bp[r]);
  }
  for (int64_t b = 0; b < n; ++b) {
    if (sizes[static_cast<size_t>(b)] < 0) continue;
    const at::Tensor mine = ids.eq(b);
    m.buffers[static_cast<size_t>(b)]->update_priority(idx.masked_select(mine),
                                                       pri.masked_select(mine));
  }
}

void ReplayBufferEnsemble::dumps(const std::string& dir) const {
  impl_->dumps(dir, "ReplayBufferEnsemble::dumps", {});
}

void ReplayBufferEnsemble::loads(const std::string& dir) {
  constexpr const char* kFn = "ReplayBufferEnsemble::loads";
  Impl::Checkpoint cp = impl_->read_checkpoint(dir, kFn);
  impl_->load_buffers(dir, kFn);
  impl_->commit(cp);
}

void ReplayBufferEnsemble::set_ratios(std::vector<double> ratios) {
  Impl& m = *impl_;
  TORCH_CHECK_VALUE(!m.ratios.empty() || ratios.empty() ||
                        (m.p.empty() && !m.options.sample_from_all() &&
                         m.options.num_buffer_sampled() == 0),
                    kName,
                    ": ratios fix every batch's split: p, sample_from_all "
                    "and num_buffer_sampled do not apply");
  TORCH_CHECK_VALUE(!ratios.empty(), kName,
                    "::set_ratios: ratios must have one entry per buffer");
  std::vector<double> norm = normalized("ratios", ratios, m.buffers.size());
  std::lock_guard<std::mutex> lock(m.mutex);
  m.ratios = std::move(norm);
  m.options.ratios(std::move(ratios));
}

ReplayBuffer& ReplayBufferEnsemble::operator[](int64_t i) const {
  const auto n = static_cast<int64_t>(impl_->buffers.size());
  TORCH_CHECK_INDEX(i >= -n && i < n, kName, ": index ", i,
                    " is out of range for ", n, " buffers");
  return *impl_->buffers[static_cast<size_t>(i < 0 ? i + n : i)];
}

int64_t ReplayBufferEnsemble::num_buffers() const {
  return static_cast<int64_t>(impl_->buffers.size());
}

int64_t ReplayBufferEnsemble::size() const {
  int64_t total = 0;
  for (const auto& rb : impl_->buffers) total += rb->size();
  return total;
}

void ReplayBufferEnsemble::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->rng.seed(seed);
}

ReplayBufferEnsembleOptions ReplayBufferEnsemble::options() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->options;
}

// ---- OfflineToOnlineReplayBuffer -----------------------------------------------

namespace {

std::shared_ptr<ReplayBuffer> checked_offline(std::shared_ptr<ReplayBuffer> rb,
                                              double fraction) {
  TORCH_CHECK_VALUE(rb != nullptr,
                    "OfflineToOnlineReplayBuffer: the offline buffer is null");
  TORCH_CHECK_VALUE(fraction > 0.0 && fraction < 1.0,
                    "OfflineToOnlineReplayBuffer: offline_fraction must be in "
                    "(0, 1), got ",
                    fraction);
  return rb;
}

}  // namespace

OfflineToOnlineReplayBuffer::OfflineToOnlineReplayBuffer(
    std::shared_ptr<ReplayBuffer> offline, const ReplayBufferOptions& online,
    double offline_fraction)
    : offline_(checked_offline(std::move(offline), offline_fraction)),
      online_(std::make_shared<ReplayBuffer>(online)),
      initial_fraction_(offline_fraction),
      fraction_(offline_fraction),
      ensemble_({offline_, online_}) {}

at::Tensor OfflineToOnlineReplayBuffer::extend(const TensorDict& batch) {
  return online_->extend(batch);
}

std::pair<TensorDict, EnsembleSampleInfo> OfflineToOnlineReplayBuffer::sample(
    int64_t batch_size) {
  TORCH_CHECK_VALUE(batch_size > 0,
                    "OfflineToOnlineReplayBuffer::sample: batch_size must be "
                    "> 0, got ",
                    batch_size);
  // TorchRL's split: round(offline_fraction * n) offline (half to even, as
  // Python's round), the rest online; all offline while the online buffer
  // is empty.
  const auto offline = std::min(
      batch_size, static_cast<int64_t>(std::nearbyint(
                      fraction_.load() * static_cast<double>(batch_size))));
  const std::vector<int64_t> counts =
      online_->empty() ? std::vector<int64_t>{batch_size, 0}
                       : std::vector<int64_t>{offline, batch_size - offline};
  return ensemble_.impl_->sample_counts(counts);
}

void OfflineToOnlineReplayBuffer::update_priority(
    const EnsembleSampleInfo& info, const at::Tensor& priority) {
  ensemble_.update_priority(info, priority);
}

void OfflineToOnlineReplayBuffer::anneal(int64_t step, int64_t total_steps) {
  TORCH_CHECK_VALUE(total_steps > 0,
                    "OfflineToOnlineReplayBuffer::anneal: total_steps must be "
                    "> 0, got ",
                    total_steps);
  fraction_.store(initial_fraction_ *
                  std::max(0.0, 1.0 - static_cast<double>(step) /
                                          static_cast<double>(total_steps)));
}

double OfflineToOnlineReplayBuffer::offline_fraction() const {
  return fraction_.load();
}

void OfflineToOnlineReplayBuffer::dumps(const std::string& dir) const {
  ensemble_.impl_->dumps(
      dir, "OfflineToOnlineReplayBuffer::dumps",
      {{"offline_fraction", at::scalar_tensor(fraction_.load(), at::kDouble)}});
}

void OfflineToOnlineReplayBuffer::loads(const std::string& dir) {
  constexpr const char* kFn = "OfflineToOnlineReplayBuffer::loads";
  ReplayBufferEnsemble::Impl& m = *ensemble_.impl_;
  ReplayBufferEnsemble::Impl::Checkpoint cp = m.read_checkpoint(dir, kFn);
  const double fraction = detail::checkpoint_entry(cp.state, "offline_fraction",
                                                   at::kDouble, 0, kFn)
                              .item<double>();
  TORCH_CHECK_VALUE(fraction >= 0.0 && fraction < 1.0, kFn, ": '", dir,
                    "': the checkpoint's offline_fraction must be in [0, 1), "
                    "got ",
                    fraction);
  m.load_buffers(dir, kFn);
  m.commit(cp);
  fraction_.store(fraction);
}

ReplayBuffer& OfflineToOnlineReplayBuffer::offline_buffer() const {
  return *offline_;
}

ReplayBuffer& OfflineToOnlineReplayBuffer::online_buffer() const {
  return *online_;
}

int64_t OfflineToOnlineReplayBuffer::size() const {
  return offline_->size() + online_->size();
}

}  // namespace tensordict
