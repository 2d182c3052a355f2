// ReplayBuffer's writers (see rl/writer.h).
#include "rl/writer.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "core/internal.h"

namespace tensordict {
namespace detail {

namespace {

// After the storage wrote `count` rows from row `first`: the sampler's
// state, then the persisted row count (the write's commit point).
void commit_write(ReplayStorage& storage, Sampler& sampler, int64_t first,
                  int64_t count) {
  sampler.on_write(storage, first, count);
  storage.commit();
}

}  // namespace

// ---- RoundRobinWriter -------------------------------------------------------

Writer::RowWritten RoundRobinWriterImpl::add(ReplayStorage& storage,
                                             Sampler& sampler,
                                             const Sources& sources,
                                             const Ranks& /*ranks*/) {
  const int64_t i = storage.write_row(sources);
  commit_write(storage, sampler, i, 1);
  return {i, 1};
}

Writer::RowsWritten RoundRobinWriterImpl::extend(ReplayStorage& storage,
                                                 Sampler& sampler,
                                                 const Sources& sources,
                                                 int64_t n,
                                                 const Ranks& /*ranks*/) {
  const int64_t kept = std::min(n, storage.capacity());
  at::Tensor index = at::detail::empty_cpu({kept}, at::kLong);
  const int64_t start =
      storage.write_rows(sources, n, index.data_ptr<int64_t>());
  commit_write(storage, sampler, start, kept);
  return {std::move(index), n};
}

// ---- MaxValueWriter ---------------------------------------------------------

Writer::Ranks MaxValueWriterImpl::ranks(const char* op, const char* what,
                                        const TensorDict& value,
                                        int64_t value_bd) const {
  const TensorDictImpl& v = TensorDictImpl::of(value);
  const std::string key = config_.rank_key().str();
  const Node* node = lookup(v, config_.rank_key());
  TORCH_CHECK(node != nullptr && !node->is_dict(), op,
              ": the MaxValueWriter's rank_key ", key,
              " is not a tensor of the ", what, " (keys: ", key_list_str(v),
              ")");
  at::Tensor t = node->tensor.detach();
  TORCH_CHECK_TYPE(!at::isComplexType(t.scalar_type()), op,
                   ": the MaxValueWriter's rank_key ", key,
                   " has the complex dtype ", dtype_name(t.scalar_type()));
  const int64_t n = value_bd == 0 ? 1 : value.batch_size()[0];
  TORCH_CHECK_VALUE(t.numel() > 0, op, ": the MaxValueWriter's rank_key ", key,
                    " has no elements (shape ", shape_str(t.sizes()), ")");
  t = t.reshape({n, -1});
  if (t.size(1) > 1) {
    using R = MaxValueWriter::Reduction;
    switch (config_.reduction()) {
      case R::kSum:
        t = t.sum(1);
        break;
      case R::kMean:
        t = t.to(at::kDouble).mean(1);
        break;
      case R::kMax:
        t = std::get<0>(t.max(1));
        break;
      case R::kMin:
        t = std::get<0>(t.min(1));
        break;
      case R::kMedian:
        t = std::get<0>(t.median(1));
        break;
    }
  }
  t = t.reshape({n}).to(at::kCPU, at::kDouble).contiguous();
  const double* r = t.data_ptr<double>();
  for (int64_t k = 0; k < n; ++k) {
    TORCH_CHECK_VALUE(!std::isnan(r[k]), op, ": the MaxValueWriter's rank (",
                      key, ") of row ", k, " of the ", what, " is NaN");
  }
  return Ranks(r, r + n);
}

// Writes the rows of `sources` (batch dims `value_bd`) whose `rank` earns
// them a place, in order (TorchRL's TensorDictMaxValueWriter): while the
// buffer fills, at the cursor; then over the row of lowest rank (ties: the
// lowest row), when the new rank is higher. A row that a later row of the
// same call took the place of is not stored (-1).
std::pair<std::vector<int64_t>, int64_t> MaxValueWriterImpl::write_ranked(
    ReplayStorage& storage, Sampler& sampler, const Sources& sources,
    int64_t value_bd, const Ranks& rank) {
  const auto n = static_cast<int64_t>(rank.size());
  std::vector<int64_t> dest(rank.size(), -1);
  for (int64_t k = 0; k < n; ++k) {
    const double r = rank[static_cast<size_t>(k)];
    int64_t row = -1;
    const bool append = static_cast<int64_t>(top_.size()) < capacity_;
    if (append) {
      row = static_cast<int64_t>(top_.size());
    } else if (r > top_.front().first) {
      std::pop_heap(top_.begin(), top_.end(), LowestFirst());
      row = top_.back().second;
      top_.pop_back();
    } else {
      continue;
    }
    top_.emplace_back(r, row);
    std::push_heap(top_.begin(), top_.end(), LowestFirst());
    storage.write_row_at(sources, value_bd, k, row, append);
    commit_write(storage, sampler, row, 1);
    dest[static_cast<size_t>(k)] = row;
  }
  std::unordered_set<int64_t> stored;
  for (auto it = dest.rbegin(); it != dest.rend(); ++it) {
    if (*it >= 0 && !stored.insert(*it).second) *it = -1;
  }
  return {std::move(dest), static_cast<int64_t>(stored.size())};
}

Writer::RowWritten MaxValueWriterImpl::add(ReplayStorage& storage,
                                           Sampler& sampler,
                                           const Sources& sources,
                                           const Ranks& ranks) {
  const auto [dest, inserted] =
      write_ranked(storage, sampler, sources, 0, ranks);
  return {dest[0], inserted};
}

Writer::RowsWritten MaxValueWriterImpl::extend(ReplayStorage& storage,
                                               Sampler& sampler,
                                               const Sources& sources,
                                               int64_t n, const Ranks& ranks) {
  const auto [dest, inserted] =
      write_ranked(storage, sampler, sources, 1, ranks);
  at::Tensor index = at::detail::empty_cpu({n}, at::kLong);
  std::copy(dest.begin(), dest.end(), index.data_ptr<int64_t>());
  return {std::move(index), inserted};
}

// The heap of the rows a reopened or loaded storage holds.
void MaxValueWriterImpl::restore(const ReplayStorage& storage) {
  top_.clear();
  if (storage.size() == 0) return;
  const TensorDict rows =
      storage.dict()[at::indexing::Slice(0, storage.size())];
  const Ranks rank = ranks("ReplayBuffer", "storage", rows, 1);
  for (size_t i = 0; i < rank.size(); ++i) {
    top_.emplace_back(rank[i], static_cast<int64_t>(i));
  }
  std::make_heap(top_.begin(), top_.end(), LowestFirst());
}

}  // namespace detail
}  // namespace tensordict
