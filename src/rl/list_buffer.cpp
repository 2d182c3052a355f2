// What the list buffers share (rl/list_buffer.h): the index buffer, the rate
// limiter, the row dims and the device, and their part of a checkpoint.
#include "rl/list_buffer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <utility>
#include <variant>

#include "core/names.h"
#include "core/row_copy.h"
#include "io/files.h"
#include "rl/sampler_config.h"
#include "rl/samplers.h"

namespace tensordict {
namespace detail {

namespace {

// The limiter's settings, once the options the list buffers refuse are
// refused.
c10::optional<RateLimiter> list_limiter(const ReplayBufferOptions& o,
                                        const char* cls) {
  const char* what = !o.storage_dir().has_value()
                         ? nullptr
                         : "storage_dir (the rows live in memory)";
  if (what == nullptr && o.shared()) what = "shared";
  TORCH_CHECK_VALUE(what == nullptr, cls, ": ", what, " is not supported");
  return checked_limiter(o);
}

ReplayBufferOptions index_options(ReplayBufferOptions o) {
  return o.device(c10::nullopt).rate_limiter(c10::nullopt);
}

constexpr int64_t kCheckpointVersion = 1;

}  // namespace

ListState::ListState(ReplayBufferOptions options, const char* name)
    : cls(name),
      device(options.device()),
      limiter(list_limiter(options, name)),
      index(index_options(options)) {}

TensorDict ListState::index_row(const char* op, const TensorDict& row) const {
  TensorDict out({{"_row", at::ones({}, at::kBool)}}, {});
  auto take = [&](const NestedKey& key, const char* reader) {
    TORCH_CHECK(row.contains(key) && row.get_entry(key).is_tensor(), op,
                ": the ", reader, " reads key ", key.str(),
                ", which the row does not hold as a tensor");
    out.set(key, row.get(key).to(at::kCPU));  // the index stays on the CPU
  };
  const auto spec = slice_spec(index.options().sampler());
  if (spec.has_value()) {
    take(spec->traj_key ? *spec->traj_key : spec->end_key, spec->name);
  }
  if (const auto* w = std::get_if<MaxValueWriter>(&index.options().writer())) {
    take(w->rank_key(), "MaxValueWriter");
  }
  return out;
}

std::vector<TensorDict> ListState::index_rows(
    const char* op, const std::vector<TensorDict>& rows) const {
  std::vector<TensorDict> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(index_row(op, r));
  return out;
}

int64_t ListState::check_dims(const char* op,
                              const std::vector<TensorDict>& rows,
                              bool one) const {
  if (rows.empty()) return row_dims;
  const int64_t dims = row_dims >= 0 ? row_dims : rows[0].batch_dims();
  for (size_t k = 0; k < rows.size(); ++k) {
    TORCH_CHECK(
        rows[k].batch_dims() == dims, op, ": the rows ", one ? "stored " : "",
        "have ", dims, " batch dims, and ",
        one ? std::string("this row") : "rows[" + std::to_string(k) + "]",
        " has batch_size ", shape_str(rows[k].batch_size()));
  }
  return dims;
}

std::vector<int64_t> ListState::next_slots(int64_t n) const {
  std::vector<int64_t> out;
  const int64_t capacity = index.capacity();
  if (n > capacity ||
      std::holds_alternative<MaxValueWriter>(index.options().writer())) {
    return out;
  }
  const int64_t cursor = index.cursor();
  out.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.push_back((cursor + k) % capacity);
  return out;
}

SampleInfo ListState::draw(ListLock& lock, const char* op, int64_t n) {
  TORCH_CHECK_VALUE(n > 0, op, ": batch_size must be positive, got ", n);
  limiter.wait_to_sample(lock, index, n, op);
  SampleInfo info = index.sample(n).second;
  limiter.count_sampled(n);
  return info;
}

void ListState::clear() {
  index.clear();
  limiter.reset(0, 0);
  row_dims = -1;
}

void ListState::save(const std::string& dir) const {
  TensorDict(
      {{"format_version", at::scalar_tensor(kCheckpointVersion, at::kLong)},
       {"row_dims", at::scalar_tensor(row_dims, at::kLong)},
       {"inserted", at::scalar_tensor(limiter.inserted(), at::kLong)},
       {"sampled", at::scalar_tensor(limiter.sampled(), at::kLong)}},
      {})
      .memmap_(dir);
}

ListState::Saved ListState::read(const std::string& dir, const char* fn) {
  const TensorDict state = TensorDict::load_memmap(dir, true);
  const int64_t version =
      checkpoint_entry(state, "format_version", at::kLong, 0, fn)
          .item<int64_t>();
  TORCH_CHECK(version == kCheckpointVersion, fn, ": '", dir,
              "': checkpoint format_version ", version,
              ", this library reads version ", kCheckpointVersion);
  Saved saved;
  saved.row_dims =
      checkpoint_entry(state, "row_dims", at::kLong, 0, fn).item<int64_t>();
  // The limiter's counts (absent from checkpoints written before it).
  if (state.contains("inserted") || state.contains("sampled")) {
    saved.inserted =
        checkpoint_entry(state, "inserted", at::kLong, 0, fn).item<int64_t>();
    saved.sampled =
        checkpoint_entry(state, "sampled", at::kLong, 0, fn).item<int64_t>();
  }
  return saved;
}

void ListState::restore(const Saved& saved, int64_t rows) {
  row_dims = rows > 0 ? saved.row_dims : -1;
  limiter.reset(saved.inserted, saved.sampled);
}

std::vector<TensorDict> copy_rows(const std::vector<TensorDict>& rows) {
  const bool grad_mode = c10::GradMode::is_enabled();
  auto bytes_copied = [&](const at::Tensor& t) {
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    return cpu_bytes(impl) && untracked(impl, grad_mode);
  };
  // Each leaf at a 64-byte boundary, as LibTorch's allocator aligns.
  auto aligned = [](int64_t n) { return (n + 63) / 64 * 64; };
  int64_t total = 0;
  for (const TensorDict& r : rows) {
    for (const Entry& e : r.values(true, true)) {
      if (bytes_copied(e.tensor())) {
        total += aligned(static_cast<int64_t>(e.tensor().nbytes()));
      }
    }
  }
  const at::Tensor buffer = at::empty({total}, at::kByte);
  const c10::Storage& storage = buffer.storage();
  char* base = static_cast<char*>(buffer.data_ptr());
  int64_t offset = 0;
  std::vector<TensorDict> out;
  out.reserve(rows.size());
  for (const TensorDict& r : rows) {
    out.push_back(r.apply([&](const at::Tensor& t) {
      if (!bytes_copied(t)) return t.clone();
      const auto n = static_cast<int64_t>(t.nbytes());
      if (n > 0)
        std::memcpy(base + offset, bytes_of(t.unsafeGetTensorImpl()),
                    static_cast<size_t>(n));
      at::Tensor copy = tensor_on(storage, offset, t.scalar_type(), t.sizes());
      offset += aligned(n);
      return copy;
    }));
  }
  return out;
}

}  // namespace detail
}  // namespace tensordict
