// The per-env row dicts of a batched env (envs/row_views.h).
#include "envs/row_views.h"

#include <utility>

namespace tensordict {
namespace detail {

RowViews::RowViews(int64_t begin, int64_t end,
                   const std::vector<int64_t>& row_batch)
    : begin_(begin) {
  for (int64_t i = begin; i < end; ++i) rows_.emplace_back(row_batch);
}

const std::vector<TensorDict>& RowViews::of(const TensorDict& parent) {
  for (Source& source : sources_) source.seen = false;
  for (const NestedKey& key : parent.keys(true, true)) {
    if (key.front() == "next") continue;
    at::Tensor tensor = parent.get(key);
    Source* found = nullptr;
    for (Source& source : sources_) {
      if (source.key == key) {
        found = &source;
        break;
      }
    }
    if (found == nullptr) {
      sources_.push_back({key, at::Tensor(), false});
      found = &sources_.back();
    }
    found->seen = true;
    if (found->tensor.defined() && found->tensor.is_same(tensor)) continue;
    for (size_t r = 0; r < rows_.size(); ++r) {
      rows_[r].set(key, tensor.select(0, begin_ + static_cast<int64_t>(r)));
    }
    found->tensor = std::move(tensor);
  }
  for (size_t s = 0; s < sources_.size();) {
    if (sources_[s].seen) {
      ++s;
      continue;
    }
    for (const TensorDict& row : rows_) row.erase(sources_[s].key);
    sources_.erase(sources_.begin() + static_cast<std::ptrdiff_t>(s));
  }
  return rows_;
}

}  // namespace detail
}  // namespace tensordict
