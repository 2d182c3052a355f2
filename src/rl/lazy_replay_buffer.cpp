// LazyStackReplayBuffer (tensordict/lazy_stack.h): rows of different shapes,
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
#include "rl/sampler_config.h"
#include "tensordict/functional.h"
#include "tensordict/lazy_stack.h"

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

TensorDict LazyStackReplayBuffer::row(int64_t i) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK_INDEX(i >= 0 && i < index_.size(),
                    "LazyStackReplayBuffer::row: ", "index ", i,
                    " is out of range for the ", index_.size(), " rows stored");
  return rows_[static_cast<size_t>(i)];
}

}  // namespace tensordict
