// LazyStackReplayBuffer (tensordict/lazy_replay_buffer.h): rows of different
// shapes, each kept as its own dict in the slot of the storage index that
// the list state's index buffer reports (rl/list_buffer.h), which does the
// writing order, the sampling, the priorities and the rate limiting.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "core/internal.h"
#include "io/files.h"
#include "rl/list_buffer.h"
#include "rl/sampler_config.h"
#include "rl/samplers.h"
#include "tensordict/functional.h"
#include "tensordict/lazy_replay_buffer.h"

namespace tensordict {

LazyStackReplayBuffer::LazyStackReplayBuffer(ReplayBufferOptions options)
    : state_(std::make_unique<detail::ListState>(std::move(options),
                                                 "LazyStackReplayBuffer")) {}

LazyStackReplayBuffer::~LazyStackReplayBuffer() = default;

namespace {

// The copy of `row` that a buffer stores: on `device` when it has one.
TensorDict stored_copy(const TensorDict& row,
                       const c10::optional<at::Device>& device) {
  if (!device.has_value()) return row.clone();
  return row.apply([&](const at::Tensor& t) {
    return t.to(*device, t.scalar_type(), /*non_blocking=*/false,
                /*copy=*/true);
  });
}

// The storages of `impl`'s leaves, added to `out`.
void add_storages(const detail::TensorDictImpl& impl,
                  std::unordered_set<const c10::StorageImpl*>& out) {
  for (const detail::Node& n : impl.nodes) {
    if (n.is_dict()) {
      add_storages(*n.dict, out);
    } else if (n.tensor.has_storage()) {
      out.insert(n.tensor.storage().unsafeGetStorageImpl());
    }
  }
}

// Whether `row` can be copied into the tensors of the stored row `slot`:
// the same keys in the same order and batch sizes, no non-tensor data, and
// leaves of the same shapes and dtypes, dense, on the device the buffer
// stores on; none that autograd tracks (a copy would join the graph), no
// stored leaf that is an inference tensor outside inference mode (it takes
// no in-place write there), and no leaf of `row` in a storage that this
// write overwrites (`overwritten`: it would read rows already written).
bool fits(const detail::TensorDictImpl& slot, const detail::TensorDictImpl& row,
          const c10::optional<at::Device>& device,
          const std::unordered_set<const c10::StorageImpl*>& overwritten) {
  if (slot.batch_size != row.batch_size ||
      slot.nodes.size() != row.nodes.size() || slot.non_tensor != nullptr ||
      row.non_tensor != nullptr) {
    return false;
  }
  const bool inference = c10::InferenceMode::is_enabled();
  for (size_t k = 0; k < slot.nodes.size(); ++k) {
    const detail::Node& to = slot.nodes[k];
    const detail::Node& from = row.nodes[k];
    if (to.key != from.key || to.is_dict() != from.is_dict()) return false;
    if (to.is_dict()) {
      if (!fits(*to.dict, *from.dict, device, overwritten)) return false;
      continue;
    }
    const at::Tensor& t = to.tensor;
    const at::Tensor& f = from.tensor;
    if (t.layout() != at::kStrided || f.layout() != at::kStrided ||
        !f.has_storage() || t.sizes() != f.sizes() ||
        t.scalar_type() != f.scalar_type() ||
        t.device() != device.value_or(f.device()) || t.requires_grad() ||
        f.requires_grad() || (t.is_inference() && !inference) ||
        overwritten.count(f.storage().unsafeGetStorageImpl()) != 0) {
      return false;
    }
  }
  return true;
}

// Copies the leaves of `row` into those of `slot` (`fits` holds).
void copy_leaves(const detail::TensorDictImpl& slot,
                 const detail::TensorDictImpl& row) {
  for (size_t k = 0; k < slot.nodes.size(); ++k) {
    const detail::Node& to = slot.nodes[k];
    if (to.is_dict()) {
      copy_leaves(*to.dict, *row.nodes[k].dict);
    } else {
      to.tensor.copy_(row.nodes[k].tensor);
    }
  }
}

}  // namespace

int64_t LazyStackReplayBuffer::add(const TensorDict& row) {
  return write("LazyStackReplayBuffer::add", {row}, true)
      .data_ptr<int64_t>()[0];
}

at::Tensor LazyStackReplayBuffer::extend(const std::vector<TensorDict>& rows) {
  return write("LazyStackReplayBuffer::extend", rows, false);
}

at::Tensor LazyStackReplayBuffer::write(const char* op,
                                        const std::vector<TensorDict>& rows,
                                        bool one) {
  detail::ListLock lock(mutex_);
  detail::ListState& st = *state_;
  (void)st.check_dims(op, rows, one);  // before any copy
  const std::vector<TensorDict> index_rows = st.index_rows(op, rows);
  // Each row is copied into the tensors of the row it overwrites when it
  // fits them (`in_place`), else into a copy made before anything changes.
  std::vector<TensorDict> copies(rows.size());
  std::vector<char> in_place(rows.size(), 0);
  auto prepare = [&](const std::vector<int64_t>& next) {
    const auto held = static_cast<size_t>(st.index.size());
    std::unordered_set<const c10::StorageImpl*> overwritten;
    for (int64_t i : next) {
      if (static_cast<size_t>(i) < held) {
        add_storages(detail::TensorDictImpl::of(rows_[static_cast<size_t>(i)]),
                     overwritten);
      }
    }
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = next.empty() ? held : static_cast<size_t>(next[k]);
      in_place[k] = i < held && fits(detail::TensorDictImpl::of(rows_[i]),
                                     detail::TensorDictImpl::of(rows[k]),
                                     st.device, overwritten);
      if (!in_place[k]) copies[k] = stored_copy(rows[k], st.device);
    }
  };
  auto store = [&](size_t k, TensorDict& slot) {
    if (in_place[k]) {
      copy_leaves(detail::TensorDictImpl::of(slot),
                  detail::TensorDictImpl::of(rows[k]));
    } else {
      slot = std::move(copies[k]);
    }
  };
  return st.write(lock, rows_, op, rows, one, index_rows, prepare, store);
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
  detail::ListLock lock(mutex_);
  SampleInfo info =
      state_->draw(lock, "LazyStackReplayBuffer::sample", batch_size);
  std::vector<TensorDict> out =
      detail::copy_rows(detail::list_gather(rows_, info.index));
  return {LazyStackedTensorDict(std::move(out), 0), std::move(info)};
}

void LazyStackReplayBuffer::update_priority(const at::Tensor& index,
                                            const at::Tensor& priority) {
  state_->index.update_priority(index, priority);
}

int64_t LazyStackReplayBuffer::size() const { return state_->index.size(); }

int64_t LazyStackReplayBuffer::capacity() const {
  return state_->index.capacity();
}

int64_t LazyStackReplayBuffer::cursor() const { return state_->index.cursor(); }

RateLimiterInfo LazyStackReplayBuffer::rate_limiter_info() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_->limiter.info();
}

void LazyStackReplayBuffer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_->clear();
  rows_.clear();
}

void LazyStackReplayBuffer::manual_seed(uint64_t seed) {
  state_->index.manual_seed(seed);
}

// ---- Checkpoints --------------------------------------------------------------

void LazyStackReplayBuffer::dumps(const std::string& dir) const {
  constexpr const char* kFn = "LazyStackReplayBuffer::dumps";
  std::lock_guard<std::mutex> lock(mutex_);
  detail::make_dir(dir);
  TORCH_CHECK(detail::dir_is_empty(dir, kFn), kFn, ": '", dir,
              "' is not empty; dumps writes a checkpoint into a new or empty "
              "directory only");
  state_->index.dumps(dir + "/index");
  const auto n = static_cast<size_t>(state_->index.size());
  if (n > 0) {
    // A memory-mapped copy: the rows themselves stay in memory.
    (void)LazyStackedTensorDict(
        std::vector<TensorDict>(rows_.begin(),
                                rows_.begin() + static_cast<std::ptrdiff_t>(n)),
        0)
        .memmap(dir + "/rows");
  }
  state_->save(dir + "/lazy");
}

void LazyStackReplayBuffer::loads(const std::string& dir) {
  constexpr const char* kFn = "LazyStackReplayBuffer::loads";
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(detail::path_exists(dir + "/lazy/meta.json"), kFn, ": '", dir,
              "' holds no LazyStackReplayBuffer checkpoint (no "
              "lazy/meta.json; dumps writes one)");
  detail::ListState& st = *state_;
  const auto saved = detail::ListState::read(dir + "/lazy", kFn);
  const int64_t dims = saved.row_dims;
  // The index buffer's checks, in a scratch buffer.
  int64_t n = 0;
  try {
    n = detail::check_loads(st.index, dir + "/index");
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
    rows.reserve(static_cast<size_t>(st.index.capacity()));
    for (const TensorDict& row : stored.tensordicts()) {
      TORCH_CHECK(row.batch_dims() == dims, kFn, ": '", dir,
                  "': the checkpoint's rows have ", dims,
                  " batch dims, and row ", rows.size(), " has batch_size ",
                  detail::shape_str(row.batch_size()));
      rows.push_back(stored_copy(row, st.device));  // into memory
    }
    rows.resize(static_cast<size_t>(st.index.capacity()));
  }
  st.index.loads(dir + "/index");
  st.restore(saved, n);
  rows_ = std::move(rows);
}

TensorDict LazyStackReplayBuffer::row(int64_t i) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t n = state_->index.size();
  TORCH_CHECK_INDEX(i >= 0 && i < n, "LazyStackReplayBuffer::row: ", "index ",
                    i, " is out of range for the ", n, " rows stored");
  return rows_[static_cast<size_t>(i)];
}

}  // namespace tensordict
