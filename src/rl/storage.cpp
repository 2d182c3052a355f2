// ReplayStorage: ReplayBuffer's rows, in RAM or on disk (see rl/storage.h
// for the layout and the disk format).
#include "rl/storage.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/non_tensor.h"
#include "core/tree.h"
#include "core/write_plan.h"
#include "io/files.h"
#include "rl/sampler_config.h"

namespace tensordict {
namespace detail {

namespace {

// Asks Linux to back a large CPU leaf with transparent huge pages (before
// its pages are first touched): sampling reads rows at random, and with 4 KiB
// pages nearly every row read of a large storage is a TLB miss. A hint only;
// failures are ignored.
void advise_huge_pages(const at::Tensor& t) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr size_t kHuge = size_t{2} << 20;
  if (!t.device().is_cpu() || t.nbytes() < 2 * kHuge) return;
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + t.nbytes()) & ~(kHuge - 1);
  if (last > first) {
    (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)t;
#endif
}

// TorchRL's TensorDictReplayBuffer stores each row's index in "index".
bool has_torchrl_index(const TensorDictImpl& st, int64_t capacity) {
  const Node* n = st.find("index");
  return n != nullptr && !n->is_dict() &&
         n->tensor.scalar_type() == at::kLong &&
         n->tensor.sizes() == c10::IntArrayRef({capacity});
}

// A new, empty directory in /dev/shm for a shared storage.
std::string make_shared_dir() {
  std::string path = "/dev/shm/tensordict-replay-XXXXXX";
  const char* made = ::mkdtemp(&path[0]);
  const int err = errno;
  TORCH_CHECK(made != nullptr,
              "ReplayBuffer: cannot create the shared storage directory "
              "'/dev/shm/tensordict-replay-XXXXXX': ",
              std::strerror(err),
              " (set ReplayBufferOptions::storage_dir to share it elsewhere)");
  return path;
}

// Removes `dir` and everything in it; errors are ignored.
void remove_tree(const std::string& dir) {
  ::nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) {
        ::remove(path);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace

// (storage.h)
at::Tensor zeros_cpu(c10::IntArrayRef shape, at::ScalarType dtype,
                     const char* what) {
  const at::TensorOptions options = at::TensorOptions().dtype(dtype);
#if defined(__linux__)
  auto nbytes = static_cast<int64_t>(c10::elementSize(dtype));
  for (const int64_t d : shape) {
    TORCH_CHECK(!__builtin_mul_overflow(nbytes, d, &nbytes),
                "ReplayBuffer: ", what, " of shape ", shape,
                " has too many elements");
  }
  constexpr int64_t kLarge = int64_t{4} << 20;
  if (nbytes >= kLarge) {
    const auto length = static_cast<size_t>(nbytes);
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int err = errno;
    TORCH_CHECK(p != MAP_FAILED, "ReplayBuffer: cannot allocate ", nbytes,
                " bytes for ", what, " of shape ", shape, ": ",
                std::strerror(err));
    at::Tensor t = at::from_blob(
        p, shape, [length](void* q) { ::munmap(q, length); }, options);
    advise_huge_pages(t);
    return t;
  }
#endif
  return at::zeros(shape, options);
}

ReplayStorage::ReplayStorage(const ReplayBufferOptions& options)
    : capacity_(options.capacity()),
      device_(options.device() ? c10::optional<at::Device>(usable_device(
                                     "ReplayBuffer", *options.device()))
                               : c10::nullopt),
      sampler_(options.sampler()),
      storage_(std::vector<Item>{}, {capacity_}, device_) {
  storage_.lock_();  // storage() hands it out: its leaves are cached
  sparse_files_ = options.sparse_storage();
  torchrl_version_ = options.torchrl_version();
  shared_ = options.shared();
  if (options.storage_dir()) {
    open_dir(*options.storage_dir());
  } else if (shared_) {
    TORCH_CHECK_VALUE(!device_ || device_->is_cpu(),
                      "ReplayBuffer: a shared storage lives on the CPU, but "
                      "ReplayBufferOptions::device is ",
                      device_name(*device_));
    open_dir(make_shared_dir());
    owner_pid_ = static_cast<int>(::getpid());
  }
}

ReplayStorage::~ReplayStorage() {
  if (owner_pid_ != 0 && owner_pid_ == static_cast<int>(::getpid())) {
    remove_tree(dir_);  // the mappings stay valid where they exist
  }
}

void ReplayStorage::sync() {
  if (!shared_) return;
  if (rows_ptr_ == nullptr) {
    if (!path_exists(sub("state/meta.json"))) return;  // nothing written yet
    reopen();  // another process allocated the storage
    write_torchrl_files();
    ++writes_;
    return;
  }
  const int64_t rows = __atomic_load_n(rows_ptr_, __ATOMIC_ACQUIRE);
  if (rows == rows_written_) return;
  set_rows_written(rows);
  ++writes_;
}

// ---- Writes -----------------------------------------------------------------

// `value`'s structure with batch size `batch` (`value_bd` batch dims are
// replaced by [capacity]) on the storage's device; each leaf is
// `leaf(tensor, shape)`, where `shape` is the storage leaf's shape.
template <typename LeafFn>
ImplPtr ReplayStorage::storage_tree(const TensorDictImpl& value,
                                    int64_t value_bd,
                                    std::vector<int64_t> batch,
                                    const LeafFn& leaf) const {
  return detail::rebuild(
      value, std::move(batch),
      [&](const detail::KeyPath&, const at::Tensor& t) {
        return leaf(t, concat({capacity_},
                              t.sizes().slice(static_cast<size_t>(value_bd))));
      },
      nullptr,
      [&](const TensorDictImpl&, TensorDictImpl& out) {
        out.device = device_;
      });
}

// Allocates a zero-filled storage of `capacity` rows with `value`'s
// structure.
ImplPtr ReplayStorage::allocate_storage(const TensorDictImpl& value,
                                        int64_t value_bd,
                                        std::vector<int64_t> batch) const {
  return storage_tree(
      value, value_bd, std::move(batch),
      [&](const at::Tensor& src, const std::vector<int64_t>& shape) {
        const c10::Device device = device_ ? *device_ : src.device();
        if (device.is_cpu()) {
          return zeros_cpu(shape, src.scalar_type(), "a storage leaf");
        }
        return at::zeros(shape, src.options().device(device));
      });
}

// Allocates the storage from `value` (the first write) and plans writes
// into it; checks `value` against it first. Nothing changes when it throws.
void ReplayStorage::allocate(const char* op, const char* what,
                             const TensorDictImpl& value, int64_t value_bd) {
  std::vector<NestedKey> leaves;
  collect_keys(value, nullptr, true, true, leaves);
  TORCH_CHECK(!leaves.empty(), op, ": the ", what, " has no leaves");
  check_no_non_tensor(op, "a ReplayBuffer", value);
  TensorDict st =
      dir_.empty()
          ? TensorDictImpl::wrap(allocate_storage(value, value_bd, {capacity_}))
          : allocate_disk(value, value_bd);
  st.lock_();  // dict() hands it out, and the plan caches its leaves
  RowWritePlan plan(st, "storage");
  Sources sources;
  plan.bind(op, what, value, value_bd, sources);
  adopt(std::move(st), std::move(plan));
}

void ReplayStorage::adopt(TensorDict st, RowWritePlan plan) {
  fills_index_ = has_torchrl_index(TensorDictImpl::of(st), capacity_);
  storage_ = std::move(st);
  plan_ = std::move(plan);
  allocated_ = true;
  std::vector<c10::Device> devices;
  for_each_leaf(TensorDictImpl::of(storage_),
                [&](const at::Tensor& t) { devices.push_back(t.device()); });
  streams_.set_devices(devices);
}

c10::optional<TensorDict> ReplayStorage::with_index(const TensorDict& value,
                                                    int64_t value_bd) const {
  if (!fills_index_ || TensorDictImpl::of(value).find("index") != nullptr) {
    return c10::nullopt;
  }
  const auto options = at::TensorOptions(at::kLong).device(
      TensorDictImpl::of(storage_).find("index")->tensor.device());
  at::Tensor index =
      value_bd == 0
          ? at::scalar_tensor(cursor_, options)
          : at::arange(cursor_, cursor_ + value.batch_size()[0], options)
                .remainder_(capacity_);
  TensorDict out = value.copy();
  out.set("index", index);
  return out;
}

void ReplayStorage::validate(const char* op, const char* what,
                             const TensorDict& value, int64_t value_bd,
                             Sources& sources) const {
  const c10::optional<TensorDict> filled = with_index(value, value_bd);
  plan_.bind(op, what, TensorDictImpl::of(filled ? *filled : value), value_bd,
             sources);
}

c10::optional<TensorDict> ReplayStorage::prepare(const char* op,
                                                 const char* what,
                                                 const TensorDict& value,
                                                 int64_t value_bd,
                                                 Sources& sources) {
  if (!allocated_) allocate(op, what, TensorDictImpl::of(value), value_bd);
  c10::optional<TensorDict> staged = with_index(value, value_bd);
  const TensorDict& src = staged ? *staged : value;
  plan_.bind(op, what, TensorDictImpl::of(src), value_bd, sources);
  if (!plan_.reads_destination(sources)) return staged;
  TensorDict copy = src.clone();
  plan_.bind(op, what, TensorDictImpl::of(copy), value_bd, sources);
  return copy;
}

int64_t ReplayStorage::write_row(const Sources& sources) {
  const int64_t i = cursor_;
  write_row_at(sources, 0, 0, i, /*append=*/true);
  return i;
}

void ReplayStorage::write_row_at(const Sources& sources, int64_t value_bd,
                                 int64_t src_row, int64_t row, bool append) {
  streams_.enter();
  plan_.write_rows(sources, value_bd, row, src_row, 1);
  if (append) {
    cursor_ = (row + 1) % capacity_;
    size_ = std::min(size_ + 1, capacity_);
  }
  count_rows(append ? 1 : 0);
}

int64_t ReplayStorage::write_rows(const Sources& sources, int64_t n,
                                  int64_t* index) {
  const int64_t kept = std::min(n, capacity_);
  const int64_t skip = n - kept;
  const int64_t start = (cursor_ + skip) % capacity_;
  const int64_t first = std::min(kept, capacity_ - start);
  streams_.enter();
  plan_.write_rows(sources, 1, start, skip, first);
  if (kept > first) plan_.write_rows(sources, 1, 0, skip + first, kept - first);
  for (int64_t k = 0; k < kept; ++k) index[k] = (start + k) % capacity_;
  cursor_ = (start + kept) % capacity_;
  size_ = std::min(size_ + n, capacity_);
  count_rows(n);
  return start;
}

void ReplayStorage::count_rows(int64_t n) {
  ++writes_;
  rows_written_ += n;
  if (!keeps_priorities() && priorities_.valid != nullptr &&
      *priorities_.valid != 0) {
    *priorities_.valid = 0;  // the rows written now get no priority
  }
}

bool ReplayStorage::keeps_priorities() const {
  return priority_spec(sampler_).has_value();
}

void ReplayStorage::set_rows_written(int64_t rows) {
  rows_written_ = rows;
  size_ = std::min(rows, capacity_);
  cursor_ = rows % capacity_;
}

void ReplayStorage::restore_rows_written(int64_t rows) {
  set_rows_written(rows);
  ++writes_;
  commit();
}

void ReplayStorage::commit() const {
  if (rows_ptr_ != nullptr) {
    __atomic_store_n(rows_ptr_, rows_written_, __ATOMIC_RELEASE);
    torchrl_.set_counts(size_, cursor_);
  }
}

void ReplayStorage::clear() {
  size_ = 0;
  cursor_ = 0;
  rows_written_ = 0;
  commit();
  ++writes_;
}

// ---- Disk-backed storage ----------------------------------------------------

std::string ReplayStorage::sub(const char* name) const {
  return dir_ + "/" + name;
}

// A template of the storage for `memmap_like`: `value`'s structure with
// every leaf an expanded view of its first row (nothing is allocated).
ImplPtr ReplayStorage::expanded_template(const TensorDictImpl& value,
                                         int64_t value_bd,
                                         std::vector<int64_t> batch) const {
  return storage_tree(
      value, value_bd, std::move(batch),
      [&](const at::Tensor& t, const std::vector<int64_t>& shape) {
        at::Tensor row = value_bd == 0 ? t.unsqueeze(0) : t.narrow(0, 0, 1);
        return row.expand(shape);
      });
}

// The constructor's part for a storage_dir: reopens a buffer found there,
// else checks that the directory can hold a new one (created lazily).
void ReplayStorage::open_dir(const std::string& storage_dir) {
  dir_ = storage_dir;
  TORCH_CHECK_VALUE(!dir_.empty(),
                    "ReplayBufferOptions::storage_dir is an empty string");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  TORCH_CHECK_VALUE(!device_ || device_->is_cpu(),
                    "ReplayBuffer: a disk-backed storage (storage_dir '", dir_,
                    "') lives on the CPU, but ReplayBufferOptions::device is ",
                    device_name(*device_));
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    const int err = errno;
    TORCH_CHECK(err == ENOENT, "ReplayBuffer: cannot access storage_dir '",
                dir_, "': ", std::strerror(err));
    return;  // created by the first write
  }
  TORCH_CHECK(S_ISDIR(st.st_mode), "ReplayBuffer: storage_dir '", dir_,
              "' exists and is not a directory");
  if (path_exists(sub("state/meta.json"))) {
    reopen();
  } else if (is_torchrl_dump(dir_)) {
    import_torchrl();
  } else {
    check_empty_dir();
    return;
  }
  if (allocated_) write_torchrl_files();
}

// No buffer in dir_ yet. Only the directories of an interrupted first write
// (no state/meta.json: never committed) may be there; they are replaced.
void ReplayStorage::check_empty_dir() const {
  DIR* d = ::opendir(dir_.c_str());
  const int err = errno;
  TORCH_CHECK(d != nullptr, "ReplayBuffer: cannot list storage_dir '", dir_,
              "': ", std::strerror(err));
  std::string stranger;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == "storage" ||
        name == "priority" || name == "state" || name == "writer" ||
        name == "sampler") {
      continue;
    }
    stranger = name;
    break;
  }
  ::closedir(d);
  TORCH_CHECK(stranger.empty(), "ReplayBuffer: storage_dir '", dir_,
              "' is not empty and holds no replay buffer (no "
              "state/meta.json; found '",
              stranger, "'); use a new or empty directory");
}

// Opens `dir/<name>` as a memmap directory; errors name the buffer.
TensorDict ReplayStorage::load_part(const char* name) const {
  std::string error;
  try {
    return TensorDict::load_memmap(sub(name));
  } catch (const c10::Error& e) {
    error = e.msg();
  }
  TORCH_CHECK(false, "ReplayBuffer: cannot reopen the buffer in '", dir_,
              "': ", error);
  return TensorDict();
}

// The mapped scalar or vector `key` of `td` (part `part`), checked.
at::Tensor ReplayStorage::state_leaf(const TensorDict& td, const char* part,
                                     const char* key, at::ScalarType dtype,
                                     c10::IntArrayRef shape) const {
  const Node* n = TensorDictImpl::of(td).find(key);
  const bool ok = n != nullptr && !n->is_dict() &&
                  n->tensor.scalar_type() == dtype &&
                  n->tensor.sizes() == shape &&
                  (n->tensor.numel() == 0 || is_mapped_tensor(n->tensor));
  TORCH_CHECK(ok, "ReplayBuffer: cannot reopen the buffer in '", dir_,
              "': ", part, "/", key, " is missing or is not a ",
              dtype_name(dtype), " tensor of shape ", shape_str(shape));
  return n->tensor;
}

// Binds the hot-path pointers to state/ and priority/.
void ReplayStorage::bind_state(TensorDict state, TensorDict priority) {
  rows_ptr_ = state_leaf(state, "state", "rows_written", at::kLong, {})
                  .data_ptr<int64_t>();
  priorities_.valid =
      state_leaf(state, "state", "priorities_valid", at::kLong, {})
          .data_ptr<int64_t>();
  priorities_.max = state_leaf(state, "state", "max_priority", at::kDouble, {})
                        .data_ptr<double>();
  priorities_.raw =
      state_leaf(priority, "priority", "priority", at::kDouble, {capacity_})
          .data_ptr<double>();
  disk_state_ = std::move(state);
  disk_priority_ = std::move(priority);
}

// Restores the rows, cursor and size (the sampler restores its priorities
// from `priorities()` afterwards).
void ReplayStorage::reopen() {
  TensorDict state = load_part("state");
  const int64_t version =
      state_leaf(state, "state", "format_version", at::kLong, {})
          .item<int64_t>();
  TORCH_CHECK(version == kFormatVersion,
              "ReplayBuffer: cannot reopen the "
              "buffer in '",
              dir_, "': state/format_version is ", version,
              ", this library reads version ", kFormatVersion);
  const int64_t stored_capacity =
      state_leaf(state, "state", "capacity", at::kLong, {}).item<int64_t>();
  TORCH_CHECK_VALUE(stored_capacity == capacity_,
                    "ReplayBuffer: the buffer "
                    "in '",
                    dir_, "' has capacity ", stored_capacity,
                    ", but ReplayBufferOptions asks for capacity ", capacity_,
                    "; reopen it with capacity ", stored_capacity,
                    " or use another storage_dir");
  const int64_t rows =
      state_leaf(state, "state", "rows_written", at::kLong, {}).item<int64_t>();
  TORCH_CHECK(rows >= 0, "ReplayBuffer: cannot reopen the buffer in '", dir_,
              "': state/rows_written is negative (", rows, ")");
  const double max_p =
      state_leaf(state, "state", "max_priority", at::kDouble, {})
          .item<double>();
  TORCH_CHECK(std::isfinite(max_p) && max_p >= 0,
              "ReplayBuffer: cannot reopen the buffer in '", dir_,
              "': state/max_priority is ", max_p);
  TensorDict priority = load_part("priority");
  // Checks every leaf before anything changes.
  bind_state(state, priority);
  TensorDict st;
  const bool has_storage = path_exists(sub("storage/meta.json"));
  TORCH_CHECK(has_storage || rows == 0,
              "ReplayBuffer: cannot reopen the "
              "buffer in '",
              dir_, "': state/rows_written is ", rows,
              " but storage/meta.json is missing");
  if (has_storage) {
    st = load_part("storage");
    TORCH_CHECK(st.batch_size() == c10::IntArrayRef({capacity_}) &&
                    TensorDictImpl::of(st).device.value_or(at::kCPU).is_cpu(),
                "ReplayBuffer: cannot reopen the buffer in '", dir_,
                "': storage/ has batch size ", shape_str(st.batch_size()),
                ", expected [", capacity_, "] on the CPU");
    std::vector<NestedKey> leaves;
    collect_keys(TensorDictImpl::of(st), nullptr, true, true, leaves);
    TORCH_CHECK(!leaves.empty(), "ReplayBuffer: cannot reopen the buffer in '",
                dir_, "': storage/ has no leaves");
  }
  set_rows_written(rows);
  if (keeps_priorities() && *priorities_.valid == 0) {
    // Written without a prioritized sampler: every row starts over with the
    // initial priority.
    std::fill(priorities_.raw, priorities_.raw + size_, kInitialMaxPriority);
    *priorities_.max = kInitialMaxPriority;
    *priorities_.valid = 1;
  }
  if (has_storage) {
    st.lock_();
    RowWritePlan plan(st, "storage");
    adopt(std::move(st), std::move(plan));
  }
}

// Makes a buffer of the dump TorchRL wrote in dir_: state/ and priority/
// from its metadata (committed by state/meta.json), then reopens it. Nothing
// is written when the dump is rejected.
void ReplayStorage::import_torchrl() {
  const TorchRLDump dump =
      read_torchrl_dump(dir_, capacity_, keeps_priorities());
  (void)load_part("storage");  // checks the storage before writing anything
  rows_written_ = dump.rows_written;
  create_state(dump.has_priorities ? dump.max_priority : kInitialMaxPriority,
               dump.has_priorities ? &dump.priorities : nullptr);
  reopen();
}

// The storage of the first write, in `dir/storage` (plus state/ and
// priority/ when they do not exist yet).
TensorDict ReplayStorage::allocate_disk(const TensorDictImpl& value,
                                        int64_t value_bd) {
  TensorDict tmpl =
      TensorDictImpl::wrap(expanded_template(value, value_bd, {capacity_}));
  // TorchRL 0.4 reads raw file names only.
  TensorDict st = tmpl.memmap_like(sub("storage"), sparse_files_,
                                   torchrl_version_ == TorchRLVersion::v0_4
                                       ? MemmapKeyNames::kRaw
                                       : MemmapKeyNames::kEscaped);
  if (rows_ptr_ == nullptr) create_state(kInitialMaxPriority, nullptr);
  write_torchrl_files();
  return st;
}

// state/ and priority/ for rows_written_ rows. `raw`: the priorities of the
// stored rows (they are valid), or null (they are not; before the first
// write no priority was set, so the sampler's largest is the initial one).
void ReplayStorage::create_state(double max_priority,
                                 const std::vector<double>* raw) {
  ImplPtr p = make_impl({capacity_}, c10::nullopt);
  p->nodes.push_back(Node{
      "priority", at::zeros({1}, at::kDouble).expand({capacity_}), nullptr});
  TensorDict priority =
      TensorDictImpl::wrap(p).memmap_like(sub("priority"), sparse_files_);
  if (raw != nullptr) {
    std::copy(raw->begin(), raw->end(),
              TensorDictImpl::of(priority)
                  .find("priority")
                  ->tensor.data_ptr<double>());
  }
  ImplPtr s = make_impl({}, c10::nullopt);
  auto scalar = [&](const char* key, at::Tensor v) {
    s->nodes.push_back(Node{key, std::move(v), nullptr});
  };
  scalar("format_version", at::scalar_tensor(kFormatVersion, at::kLong));
  scalar("capacity", at::scalar_tensor(capacity_, at::kLong));
  scalar("rows_written", at::scalar_tensor(rows_written_, at::kLong));
  scalar("max_priority", at::scalar_tensor(max_priority, at::kDouble));
  const bool valid =
      raw != nullptr || (keeps_priorities() && rows_written_ == 0);
  scalar("priorities_valid", at::scalar_tensor(valid ? 1 : 0, at::kLong));
  // state/meta.json is renamed in last: the commit point.
  TensorDict state = TensorDictImpl::wrap(s).memmap(sub("state"));
  bind_state(std::move(state), std::move(priority));
}

// TorchRL's files, from state/ and priority/ (rl/torchrl_files.h).
void ReplayStorage::write_torchrl_files() {
  priorities_.torchrl = nullptr;
  torchrl_.write(dir_, sampler_, capacity_, size_, cursor_, priorities_.raw,
                 *priorities_.max, torchrl_version_);
  priorities_.torchrl = &torchrl_;
}

}  // namespace detail
}  // namespace tensordict
