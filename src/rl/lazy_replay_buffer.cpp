// LazyStackReplayBuffer (tensordict/lazy_replay_buffer.h): rows of different shapes,
// each kept as its own dict, with a dense ReplayBuffer of index rows beside
// them that holds what the sampler reads. That buffer does the writing
// order, the sampling and the priorities; this one keeps the rows at the
// storage indices it reports.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/internal.h"
#include "io/files.h"
#include "rl/sampler_config.h"
#include "rl/samplers.h"
#include "tensordict/functional.h"
#include "tensordict/lazy_replay_buffer.h"

namespace tensordict {

namespace {

ReplayBufferOptions checked(ReplayBufferOptions o) {
  const char* what = !o.storage_dir().has_value()
                         ? nullptr
                         : "storage_dir (the rows live in memory)";
  if (what == nullptr && o.shared()) what = "shared";
  if (what == nullptr && o.device().has_value()) what = "device";
  if (what == nullptr && o.rate_limiter().has_value()) what = "rate_limiter";
  if (what == nullptr && std::holds_alternative<MaxValueWriter>(o.writer())) {
    what = "MaxValueWriter";
  }
  TORCH_CHECK_VALUE(what == nullptr, "LazyStackReplayBuffer: ", what,
                    " is not supported");
  return o;
}

}  // namespace

LazyStackReplayBuffer::LazyStackReplayBuffer(ReplayBufferOptions options)
    : index_(checked(std::move(options))) {}

// The row of the index buffer for `row`: a marker, and the key the slice
// samplers read.
TensorDict LazyStackReplayBuffer::index_row(const char* op,
                                            const TensorDict& row) const {
  TensorDict out({{"_row", at::ones({}, at::kBool)}}, {});
  const auto spec = detail::slice_spec(index_.options().sampler());
  if (spec.has_value()) {
    const NestedKey& key = spec->traj_key ? *spec->traj_key : spec->end_key;
    TORCH_CHECK(row.contains(key) && row.get_entry(key).is_tensor(), op,
                ": the ", spec->name, " reads key ", key.str(),
                ", which the row does not hold as a tensor");
    out.set(key, row.get(key));
  }
  return out;
}

int64_t LazyStackReplayBuffer::add(const TensorDict& row) {
  const char* op = "LazyStackReplayBuffer::add";
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(row_dims_ < 0 || row.batch_dims() == row_dims_, op,
              ": the rows stored have ", row_dims_,
              " batch dims, and this row has batch_size ",
              detail::shape_str(row.batch_size()));
  TensorDict copy = row.clone();
  if (rows_.empty()) rows_.resize(static_cast<size_t>(index_.capacity()));
  const int64_t pos = index_.add(index_row(op, row));
  rows_[static_cast<size_t>(pos)] = std::move(copy);
  row_dims_ = row.batch_dims();
  return pos;
}

at::Tensor LazyStackReplayBuffer::extend(const std::vector<TensorDict>& rows) {
  const char* op = "LazyStackReplayBuffer::extend";
  std::lock_guard<std::mutex> lock(mutex_);
  if (rows.empty()) return at::empty({0}, at::kLong);
  const int64_t dims = row_dims_ >= 0 ? row_dims_ : rows[0].batch_dims();
  std::vector<TensorDict> copies;
  std::vector<TensorDict> index_rows;
  copies.reserve(rows.size());
  index_rows.reserve(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    TORCH_CHECK(rows[k].batch_dims() == dims, op, ": the rows have ", dims,
                " batch dims, and rows[", k, "] has batch_size ",
                detail::shape_str(rows[k].batch_size()));
    index_rows.push_back(index_row(op, rows[k]));
  }
  for (const auto& r : rows) copies.push_back(r.clone());
  if (rows_.empty()) rows_.resize(static_cast<size_t>(index_.capacity()));
  at::Tensor index = index_.extend(tensordict::stack(index_rows, 0));
  // A batch larger than the capacity keeps its last rows.
  const int64_t m = index.numel();
  const auto skip = static_cast<int64_t>(copies.size()) - m;
  const int64_t* ip = index.data_ptr<int64_t>();
  for (int64_t k = 0; k < m; ++k) {
    rows_[static_cast<size_t>(ip[k])] =
        std::move(copies[static_cast<size_t>(skip + k)]);
  }
  row_dims_ = dims;
  return index;
}

at::Tensor LazyStackReplayBuffer::extend(const LazyStackedTensorDict& rows) {
  TORCH_CHECK(rows.stack_dim() == 0,
              "LazyStackReplayBuffer::extend: the rows must be stacked along "
              "dim 0, got stack_dim ",
              rows.stack_dim());
  return extend(rows.tensordicts());
}

std::pair<LazyStackedTensorDict, SampleInfo> LazyStackReplayBuffer::sample(
    int64_t batch_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto drawn = index_.sample(batch_size);
  const at::Tensor index = drawn.second.index.contiguous();
  const int64_t* ip = index.data_ptr<int64_t>();
  std::vector<TensorDict> out;
  out.reserve(static_cast<size_t>(index.numel()));
  for (int64_t k = 0; k < index.numel(); ++k) {
    out.push_back(rows_[static_cast<size_t>(ip[k])].clone());
  }
  return {LazyStackedTensorDict(std::move(out), 0), std::move(drawn.second)};
}

void LazyStackReplayBuffer::update_priority(const at::Tensor& index,
                                            const at::Tensor& priority) {
  index_.update_priority(index, priority);
}

int64_t LazyStackReplayBuffer::size() const { return index_.size(); }

int64_t LazyStackReplayBuffer::capacity() const { return index_.capacity(); }

int64_t LazyStackReplayBuffer::cursor() const { return index_.cursor(); }

void LazyStackReplayBuffer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  rows_.clear();
  row_dims_ = -1;
}

void LazyStackReplayBuffer::manual_seed(uint64_t seed) {
  index_.manual_seed(seed);
}

// ---- Checkpoints --------------------------------------------------------------

namespace {
constexpr int64_t kCheckpointVersion = 1;
}  // namespace

void LazyStackReplayBuffer::dumps(const std::string& dir) const {
  constexpr const char* kFn = "LazyStackReplayBuffer::dumps";
  std::lock_guard<std::mutex> lock(mutex_);
  detail::make_dir(dir);
  TORCH_CHECK(detail::dir_is_empty(dir, kFn), kFn, ": '", dir,
              "' is not empty; dumps writes a checkpoint into a new or empty "
              "directory only");
  index_.dumps(dir + "/index");
  const auto n = static_cast<size_t>(index_.size());
  if (n > 0) {
    // A memory-mapped copy: the rows themselves stay in memory.
    (void)LazyStackedTensorDict(
        std::vector<TensorDict>(rows_.begin(),
                                rows_.begin() + static_cast<std::ptrdiff_t>(n)),
        0)
        .memmap(dir + "/rows");
  }
  TensorDict(
      {{"format_version", at::scalar_tensor(kCheckpointVersion, at::kLong)},
       {"row_dims", at::scalar_tensor(row_dims_, at::kLong)}},
      {})
      .memmap_(dir + "/lazy");
}

void LazyStackReplayBuffer::loads(const std::string& dir) {
  constexpr const char* kFn = "LazyStackReplayBuffer::loads";
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(detail::path_exists(dir + "/lazy/meta.json"), kFn, ": '", dir,
              "' holds no LazyStackReplayBuffer checkpoint (no "
              "lazy/meta.json; dumps writes one)");
  const TensorDict state = TensorDict::load_memmap(dir + "/lazy", true);
  const int64_t version =
      detail::checkpoint_entry(state, "format_version", at::kLong, 0, kFn)
          .item<int64_t>();
  TORCH_CHECK(version == kCheckpointVersion, kFn, ": '", dir,
              "': checkpoint format_version ", version,
              ", this library reads version ", kCheckpointVersion);
  const int64_t dims =
      detail::checkpoint_entry(state, "row_dims", at::kLong, 0, kFn)
          .item<int64_t>();
  // The index buffer's checks, in a scratch buffer.
  int64_t n = 0;
  try {
    n = detail::check_loads(index_, dir + "/index");
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, kFn, ": the index: ", e.msg());
  }
  std::vector<TensorDict> rows;
  if (n > 0) {
    TORCH_CHECK(detail::path_exists(dir + "/rows/meta.json"), kFn, ": '", dir,
                "': the index holds ", n, " rows but there is no rows/");
    const LazyStackedTensorDict stored =
        LazyStackedTensorDict::load_memmap(dir + "/rows", true);
    TORCH_CHECK(stored.stack_dim() == 0 &&
                    static_cast<int64_t>(stored.tensordicts().size()) == n,
                kFn, ": '", dir, "': the index holds ", n,
                " rows but rows/ holds ", stored.tensordicts().size(),
                " dicts stacked along dim ", stored.stack_dim());
    rows.reserve(static_cast<size_t>(index_.capacity()));
    for (const TensorDict& row : stored.tensordicts()) {
      TORCH_CHECK(row.batch_dims() == dims, kFn, ": '", dir,
                  "': the checkpoint's rows have ", dims,
                  " batch dims, and row ", rows.size(), " has batch_size ",
                  detail::shape_str(row.batch_size()));
      rows.push_back(row.clone());  // into memory
    }
    rows.resize(static_cast<size_t>(index_.capacity()));
  }
  index_.loads(dir + "/index");
  rows_ = std::move(rows);
  row_dims_ = n > 0 ? dims : -1;
}

TensorDict LazyStackReplayBuffer::row(int64_t i) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK_INDEX(i >= 0 && i < index_.size(),
                    "LazyStackReplayBuffer::row: ", "index ", i,
                    " is out of range for the ", index_.size(), " rows stored");
  return rows_[static_cast<size_t>(i)];
}

}  // namespace tensordict
