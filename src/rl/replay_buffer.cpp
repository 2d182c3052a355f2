// ReplayBuffer: a ReplayStorage (rl/storage.h: the rows, in RAM or on disk,
// and the cursor), one of the samplers of rl/samplers.h, one of the writers
// of rl/writer.h and the rate limiter (rl/rate_limiter.h), as TorchRL splits
// its replay buffers into Storage, Sampler and Writer. This file checks the
// options and the arguments, and wires the parts.
//
// A write validates the incoming dict against the storage (allocating it on
// the first write), waits for the rate limiter, then lets the writer copy
// the rows, update the sampler (the prioritized sampler gives the new rows
// their priorities) and commit the storage's row count. Sampling draws
// storage indices with the sampler, then gathers them into freshly
// allocated leaves (one allocation per leaf, one memcpy per row and leaf;
// index_select when the leaf cannot be byte-copied).
//
// Synchronization. One mutex guards the storage, the cursor, the size, the
// generator and the sampler's, the writer's and the rate limiter's state;
// writes and gathers both run under it, so a sampled row is never
// half-written. A shared buffer's mutex is a robust process-shared one
// (rl/process_mutex.h), and each call first syncs the storage with the
// other processes' writes (ReplayStorage::sync).
#include "tensordict/replay_buffer.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <utility>
#include <variant>
#include <vector>

#include "core/internal.h"
#include "core/row_copy.h"
#include "core/tree.h"
#include "io/files.h"
#include "rl/process_mutex.h"
#include "rl/rate_limiter.h"
#include "rl/samplers.h"
#include "rl/storage.h"
#include "rl/writer.h"

namespace tensordict {

using detail::Sources;
using detail::TensorDictImpl;

namespace {

// The name of SamplerConfig alternative `index`.
const char* sampler_name_at(size_t index) {
  static constexpr const char* kNames[] = {"RandomSampler",
                                           "SamplerWithoutReplacement",
                                           "PrioritizedSampler",
                                           "SliceSampler",
                                           "SliceSamplerWithoutReplacement",
                                           "PrioritizedSliceSampler"};
  static_assert(std::size(kNames) == std::variant_size_v<SamplerConfig>);
  return kNames[index];
}

const char* sampler_name(const SamplerConfig& s) {
  return sampler_name_at(s.index());
}

// The sampler `options` asks for, its parameters checked.
std::unique_ptr<detail::Sampler> make_sampler(
    const ReplayBufferOptions& options) {
  const SamplerConfig& config = options.sampler();
  if (const auto p = detail::priority_spec(config)) {
    TORCH_CHECK_VALUE(!options.shared(),
                      "ReplayBufferOptions: a shared buffer "
                      "cannot use ",
                      sampler_name(config),
                      " (its trees live in one process's memory); use "
                      "RandomSampler, SamplerWithoutReplacement or "
                      "SliceSampler");
    TORCH_CHECK_VALUE(p->alpha() >= 0 && p->beta() >= 0 && p->eps() >= 0,
                      sampler_name(config),
                      ": alpha, beta and eps must be >= 0, got alpha=",
                      p->alpha(), ", beta=", p->beta(), ", eps=", p->eps());
  }
  if (const auto s = detail::slice_spec(config)) {
    TORCH_CHECK_VALUE(s->slice_len > 0, s->name,
                      ": slice_len must be positive, got ", s->slice_len);
  }
  if (const auto* w = std::get_if<SamplerWithoutReplacement>(&config)) {
    return std::make_unique<detail::WithoutReplacementSamplerImpl>(
        w->drop_last());
  }
  if (const auto* p = std::get_if<PrioritizedSampler>(&config)) {
    return std::make_unique<detail::PrioritizedSamplerImpl>(options.capacity(),
                                                            *p);
  }
  if (const auto* s = std::get_if<SliceSampler>(&config)) {
    return std::make_unique<detail::SliceSamplerImpl>(*detail::slice_spec(*s),
                                                      c10::nullopt);
  }
  if (const auto* s = std::get_if<SliceSamplerWithoutReplacement>(&config)) {
    return std::make_unique<detail::SliceSamplerImpl>(*detail::slice_spec(*s),
                                                      s->drop_last());
  }
  if (const auto* s = std::get_if<PrioritizedSliceSampler>(&config)) {
    return std::make_unique<detail::PrioritizedSliceSamplerImpl>(
        options.capacity(), *s);
  }
  return std::make_unique<detail::RandomSamplerImpl>();
}

// The writer `options` asks for.
std::unique_ptr<detail::Writer> make_writer(
    const ReplayBufferOptions& options) {
  const auto* w = std::get_if<MaxValueWriter>(&options.writer());
  if (w == nullptr) return std::make_unique<detail::RoundRobinWriterImpl>();
  TORCH_CHECK_VALUE(!options.shared(),
                    "ReplayBufferOptions: a shared buffer cannot use "
                    "MaxValueWriter (its ranking lives in one process's "
                    "memory)");
  return std::make_unique<detail::MaxValueWriterImpl>(options.capacity(), *w);
}

int64_t checked_capacity(const ReplayBufferOptions& options) {
  TORCH_CHECK_VALUE(options.capacity() > 0,
                    "ReplayBufferOptions: capacity must be positive, got ",
                    options.capacity());
  return options.capacity();
}

}  // namespace

// ===========================================================================
// Impl
// ===========================================================================

struct ReplayBuffer::Impl {
  explicit Impl(ReplayBufferOptions opts)
      : options(std::move(opts)),
        capacity(checked_capacity(options)),
        limiter(detail::checked_limiter(options)),
        writer(make_writer(options)),
        shared(options.shared() ? std::make_unique<detail::ProcessMutex>()
                                : nullptr),
        sampler(make_sampler(options)),
        prioritized(
            dynamic_cast<detail::PrioritizedSamplerImpl*>(sampler.get())),
        storage(options) {
    sampler->restore(storage);
    writer->restore(storage);
    if (options.seed()) {
      rng.seed(*options.seed());
    } else {
      std::random_device rd;
      rng.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }

  // The buffer's lock (BasicLockable): `mu`, or for a shared buffer the
  // cross-process mutex, after which the storage catches up with the other
  // processes. A write cut off by the death of its process was never
  // committed (the row count is stored last), so taking the mutex over from
  // a dead owner needs no repair.
  void lock() {
    if (!shared) {
      mu.lock();
      return;
    }
    (void)shared->lock();
    try {
      storage.sync();
    } catch (...) {
      shared->unlock();
      throw;
    }
  }
  void unlock() {
    if (shared) {
      shared->unlock();
    } else {
      mu.unlock();
    }
  }

  ReplayBufferOptions options;
  int64_t capacity;
  detail::RateLimiterImpl limiter;
  std::unique_ptr<detail::Writer> writer;
  std::unique_ptr<detail::ProcessMutex> shared;  // options.shared() only
  std::unique_ptr<detail::Sampler> sampler;
  detail::PrioritizedSamplerImpl* prioritized;  // `sampler`, when prioritized
  detail::ReplayStorage storage;
  detail::Generator rng;
  mutable std::mutex mu;
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
  // What the writer reads from the row (MaxValueWriter's rank), checked
  // before anything changes.
  const detail::Writer::Ranks ranks =
      m.writer->ranks("ReplayBuffer::add", "row", row, 0);
  std::unique_lock<Impl> lock(m);
  Sources sources;
  // `staged`: a copy of `row` that `sources` point into when `row` views
  // the storage (see ReplayStorage::prepare); kept alive through the write.
  const c10::optional<TensorDict> staged =
      m.storage.prepare("ReplayBuffer::add", "row", row, 0, sources);
  m.limiter.wait_to_insert(lock, "ReplayBuffer::add", m.storage, 1);
  const auto written = m.writer->add(m.storage, *m.sampler, sources, ranks);
  m.limiter.count_inserted(written.inserted);
  return written.row;
}

at::Tensor ReplayBuffer::extend(const TensorDict& batch) {
  TORCH_CHECK(batch.batch_dims() == 1,
              "ReplayBuffer::extend: expected a batch with one batch dim, got "
              "batch_size ",
              detail::shape_str(batch.batch_size()));
  const int64_t n = batch.batch_size()[0];
  Impl& m = *impl_;
  const detail::Writer::Ranks ranks =  // as in add()
      n > 0 ? m.writer->ranks("ReplayBuffer::extend", "batch", batch, 1)
            : detail::Writer::Ranks();
  std::unique_lock<Impl> lock(m);
  Sources sources;
  if (n == 0) {
    if (m.storage.allocated()) {
      m.storage.validate("ReplayBuffer::extend", "batch", batch, 1, sources);
    }
    return at::empty({0}, at::kLong);
  }
  const c10::optional<TensorDict> staged =  // as in add()
      m.storage.prepare("ReplayBuffer::extend", "batch", batch, 1, sources);
  m.limiter.wait_to_insert(lock, "ReplayBuffer::extend", m.storage, n);
  auto written = m.writer->extend(m.storage, *m.sampler, sources, n, ranks);
  m.limiter.count_inserted(written.inserted);
  return std::move(written.index);
}

std::pair<TensorDict, SampleInfo> ReplayBuffer::sample(int64_t batch_size) {
  TORCH_CHECK_VALUE(batch_size > 0,
                    "ReplayBuffer::sample: batch_size must be positive, got ",
                    batch_size);
  Impl& m = *impl_;
  std::unique_lock<Impl> lock(m);
  m.limiter.wait_to_sample(lock, m.storage, batch_size);
  TORCH_CHECK(m.storage.size() > 0,
              "ReplayBuffer::sample: the buffer is empty");
  m.storage.enter_stream();  // after writes from other streams
  SampleInfo info;
  TensorDict data = TensorDictImpl::wrap(detail::gather_rows(
      TensorDictImpl::of(m.storage.dict()), batch_size,
      [&](int64_t* index) {
        info.weight = m.sampler->sample(m.storage, m.rng, batch_size, index);
      },
      info.index));
  m.limiter.count_sampled(batch_size);
  return {std::move(data), std::move(info)};
}

SampleInfo ReplayBuffer::sample_into(const TensorDict& out) {
  TORCH_CHECK_VALUE(out.batch_dims() >= 1 && out.batch_size()[0] > 0,
                    "ReplayBuffer::sample_into: out must have at least one "
                    "row, got batch size ",
                    detail::shape_str(out.batch_size()));
  return sample_into(out, 0, out.batch_size()[0]);
}

SampleInfo ReplayBuffer::sample_into(const TensorDict& out, int64_t offset,
                                     int64_t batch_size) {
  constexpr const char* kFn = "ReplayBuffer::sample_into";
  TORCH_CHECK_VALUE(out.batch_dims() >= 1, kFn,
                    ": out must have a batch dim, got batch size []");
  const int64_t rows_out = out.batch_size()[0];
  TORCH_CHECK_VALUE(
      batch_size > 0 && offset >= 0 && offset <= rows_out - batch_size, kFn,
      ": rows [", offset, ", ", offset, " + ", batch_size,
      ") must be a non-empty range within out's ", rows_out, " rows");
  const int64_t n = batch_size;
  Impl& m = *impl_;
  std::unique_lock<Impl> lock(m);
  m.limiter.wait_to_sample(lock, m.storage, n);
  TORCH_CHECK(m.storage.size() > 0, kFn, ": the buffer is empty");
  const TensorDictImpl& rows = TensorDictImpl::of(m.storage.dict());
  const TensorDictImpl& into = TensorDictImpl::of(out);
  if (!detail::same_keys(rows, into)) {
    detail::throw_key_difference(kFn, rows, into, "the buffer's rows", "out");
  }
  std::vector<at::Tensor> src;
  std::vector<at::Tensor> dst;
  detail::pair_leaves(rows, into, kFn, src, dst);
  for (size_t k = 0; k < src.size(); ++k) {
    const at::Tensor& s = src[k];
    const at::Tensor& d = dst[k];
    if (d.scalar_type() == s.scalar_type() && d.device() == s.device() &&
        d.dim() == s.dim() && d.size(0) == rows_out &&
        d.sizes().slice(1) == s.sizes().slice(1) && !d.requires_grad() &&
        !d.is_alias_of(s)) {
      continue;
    }
    const NestedKey key = m.storage.dict().keys(true, true)[k];
    std::vector<int64_t> want = s.sizes().vec();
    want[0] = rows_out;
    TORCH_CHECK(!d.requires_grad(), kFn, ": key ", key,
                ": out's leaf requires grad");
    TORCH_CHECK(!d.is_alias_of(s), kFn, ": key ", key,
                ": out's leaf shares memory with the buffer's storage");
    TORCH_CHECK(false, kFn, ": key ", key, ": out's leaf is ",
                detail::dtype_name(d.scalar_type()), " ",
                detail::shape_str(d.sizes()), " on ", d.device(),
                ", expected the buffer's ", detail::dtype_name(s.scalar_type()),
                " ", detail::shape_str(want), " on ", s.device());
  }
  m.storage.enter_stream();  // after writes from other streams
  SampleInfo info;
  info.index = at::empty({n}, at::kLong);
  info.weight =
      m.sampler->sample(m.storage, m.rng, n, info.index.data_ptr<int64_t>());
  std::vector<const at::Tensor*> leaves;
  leaves.reserve(src.size());
  for (const at::Tensor& s : src) leaves.push_back(&s);
  detail::gather_leaf_rows_into(leaves, info.index, dst, offset);
  m.limiter.count_sampled(n);
  return info;
}

void ReplayBuffer::update_priority(const at::Tensor& index,
                                   const at::Tensor& priority) {
  Impl& m = *impl_;
  TORCH_CHECK(m.prioritized != nullptr,
              "ReplayBuffer::update_priority: the buffer's sampler is ",
              sampler_name(m.options.sampler()),
              ", not PrioritizedSampler or PrioritizedSliceSampler");
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
  std::lock_guard<Impl> lock(m);
  for (int64_t k = 0; k < n; ++k) {
    TORCH_CHECK_INDEX(ip[k] >= 0 && ip[k] < m.storage.size(),
                      "ReplayBuffer::update_priority: index ", ip[k],
                      " is out of range for a buffer of size ",
                      m.storage.size());
    TORCH_CHECK_VALUE(std::isfinite(pp[k]) && pp[k] >= 0,
                      "ReplayBuffer::update_priority: priorities must be "
                      "finite and >= 0, got ",
                      pp[k], " for index ", ip[k]);
  }
  m.prioritized->update_priority(m.storage, ip, pp, n);
}

// ---- Checkpoints --------------------------------------------------------------

namespace {

constexpr int64_t kCheckpointVersion = 1;

// `options` for a ReplayStorage of the checkpoint in `dir` (on the CPU,
// neither shared nor sparse).
ReplayBufferOptions checkpoint_options(const ReplayBufferOptions& options,
                                       const std::string& dir) {
  ReplayBufferOptions o = options;
  o.storage_dir(dir)
      .device(c10::nullopt)
      .shared(false)
      .sparse_storage(false)
      .rate_limiter(c10::nullopt);
  return o;
}

}  // namespace

void ReplayBuffer::dumps(const std::string& dir) const {
  Impl& m = *impl_;
  std::lock_guard<Impl> lock(m);
  detail::make_dir(dir);
  TORCH_CHECK(detail::dir_is_empty(dir, "ReplayBuffer::dumps"),
              "ReplayBuffer::dumps: '", dir,
              "' is not empty; dumps writes a checkpoint into a new or empty "
              "directory only");
  detail::ReplayStorage out(checkpoint_options(m.options, dir));
  if (m.storage.allocated()) {
    m.storage.enter_stream();
    Sources sources;
    (void)out.prepare("ReplayBuffer::dumps", "storage", m.storage.dict(), 1,
                      sources);
    std::vector<int64_t> rows(static_cast<size_t>(m.capacity));
    out.write_rows(sources, m.capacity, rows.data());
    out.restore_rows_written(m.storage.rows_written());
  }
  std::vector<Item> state;
  auto scalar = [&](const char* key, int64_t v) {
    state.emplace_back(key, at::scalar_tensor(v, at::kLong));
  };
  scalar("format_version", kCheckpointVersion);
  scalar("capacity", m.capacity);
  scalar("sampler", static_cast<int64_t>(m.options.sampler().index()));
  state.emplace_back("rng", detail::generator_entry(m.rng));
  scalar("inserted", m.limiter.inserted());
  scalar("sampled", m.limiter.sampled());
  m.sampler->save_state(m.storage, out, state);
  (void)TensorDict(state, {}).memmap(dir + "/checkpoint");
}

namespace detail {

int64_t check_loads(const ReplayBuffer& rb, const std::string& path) {
  ReplayBufferOptions o = rb.options();
  o.device(c10::nullopt)
      .shared(false)
      .storage_dir(c10::nullopt)
      .sparse_storage(false)
      .rate_limiter(c10::nullopt);
  ReplayBuffer scratch(o);
  const TensorDict rows = rb.storage();
  if (!rows.empty()) {
    scratch.add(rows.apply(
        [](const at::Tensor& t) {
          return at::zeros(t.sizes().slice(1), t.options().device(at::kCPU));
        },
        std::vector<int64_t>{}));
  }
  scratch.loads(path);
  return scratch.size();
}

}  // namespace detail

void ReplayBuffer::loads(const std::string& dir) {
  Impl& m = *impl_;
  std::lock_guard<Impl> lock(m);
  const std::string cp = dir + "/checkpoint";
  TORCH_CHECK(detail::path_exists(cp + "/meta.json"), "ReplayBuffer::loads: '",
              dir,
              "' holds no checkpoint (no checkpoint/meta.json; "
              "ReplayBuffer::dumps writes one)");
  const TensorDict state = TensorDict::load_memmap(cp, /*read_only=*/true);
  auto scalar = [&](const char* key) {
    return detail::checkpoint_entry(state, key, at::kLong, 0).item<int64_t>();
  };
  const int64_t version = scalar("format_version");
  TORCH_CHECK(version == kCheckpointVersion, "ReplayBuffer::loads: '", dir,
              "': checkpoint format_version ", version,
              ", this library reads version ", kCheckpointVersion);
  const int64_t capacity = scalar("capacity");
  TORCH_CHECK_VALUE(capacity == m.capacity, "ReplayBuffer::loads: '", dir,
                    "' holds a buffer of capacity ", capacity,
                    ", this buffer has capacity ", m.capacity);
  const int64_t sampler = scalar("sampler");
  const auto ours = static_cast<int64_t>(m.options.sampler().index());
  TORCH_CHECK_VALUE(
      sampler == ours, "ReplayBuffer::loads: '", dir,
      "' holds a buffer with sampler ",
      sampler >= 0 &&
              sampler < static_cast<int64_t>(std::variant_size_v<SamplerConfig>)
          ? sampler_name_at(static_cast<size_t>(sampler))
          : "(unknown)",
      ", this buffer's is ", sampler_name(m.options.sampler()));
  const at::Tensor rng_bytes =
      detail::checkpoint_entry(state, "rng", at::kByte, -1);
  detail::Generator rng;
  if (!detail::read_generator(rng_bytes, rng)) {
    // Checkpoints of 0.1.0 hold a std::mt19937_64 state: the generator is
    // seeded from its next draw, so such a checkpoint loads and samples
    // deterministically, though not the rows 0.1.0 would have drawn.
    std::istringstream old(std::string(
        reinterpret_cast<const char*>(rng_bytes.data_ptr<uint8_t>()),
        static_cast<size_t>(rng_bytes.numel())));
    std::mt19937_64 mt;
    old >> mt;
    TORCH_CHECK(!old.fail(), "ReplayBuffer::loads: '", dir,
                "': the checkpoint's rng is not a generator state");
    rng.seed(mt());
  }
  const int64_t inserted = scalar("inserted");
  const int64_t sampled = scalar("sampled");
  TORCH_CHECK(inserted >= 0 && sampled >= 0, "ReplayBuffer::loads: '", dir,
              "': the checkpoint's inserted and sampled counts must be >= 0, "
              "got ",
              inserted, " and ", sampled);
  // The checkpoint of a buffer that was never written holds no storage.
  std::unique_ptr<detail::ReplayStorage> source;
  if (detail::path_exists(dir + "/state/meta.json")) {
    source = std::make_unique<detail::ReplayStorage>(
        checkpoint_options(m.options, dir));
  }
  const bool rows = source != nullptr && source->allocated();
  detail::Sampler::Restore restore =
      m.sampler->load_state(state, rows ? source->size() : 0);
  Sources sources;
  if (rows) {
    (void)m.storage.prepare("ReplayBuffer::loads", "checkpoint's storage",
                            source->dict(), 1, sources);
  }
  // Everything was checked: from here on nothing throws. The rows are
  // copied from row 0 on (the cursor after clear()), as they lie.
  m.storage.clear();
  if (rows) {
    std::vector<int64_t> written(static_cast<size_t>(m.capacity));
    m.storage.write_rows(sources, m.capacity, written.data());
    m.storage.restore_rows_written(source->rows_written());
  }
  m.sampler->clear(m.storage);
  restore(m.storage);
  m.rng = rng;
  m.limiter.reset(inserted, sampled);
  m.writer->restore(m.storage);
}

int64_t ReplayBuffer::size() const {
  std::lock_guard<Impl> lock(*impl_);
  return impl_->storage.size();
}

int64_t ReplayBuffer::capacity() const { return impl_->capacity; }

int64_t ReplayBuffer::cursor() const {
  std::lock_guard<Impl> lock(*impl_);
  return impl_->storage.cursor();
}

void ReplayBuffer::clear() {
  Impl& m = *impl_;
  std::lock_guard<Impl> lock(m);
  m.storage.clear();
  m.sampler->clear(m.storage);
  m.writer->clear();
  m.limiter.reset(0, 0);
}

void ReplayBuffer::manual_seed(uint64_t seed) {
  std::lock_guard<Impl> lock(*impl_);
  impl_->rng.seed(seed);
}

TensorDict ReplayBuffer::storage() const {
  std::lock_guard<Impl> lock(*impl_);
  impl_->storage.enter_stream();
  return impl_->storage.dict();
}

RateLimiterInfo ReplayBuffer::rate_limiter_info() const {
  std::lock_guard<Impl> lock(*impl_);
  return impl_->limiter.info();
}

const ReplayBufferOptions& ReplayBuffer::options() const {
  return impl_->options;
}

}  // namespace tensordict
