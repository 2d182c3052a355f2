// The io layer's file primitives (io/files.h): descriptors, mappings,
// temporary files renamed into place, and bounded reads of small files.
#include "io/files.h"

#include <ATen/ATen.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tensordict {
namespace detail {

using ordered_json = nlohmann::ordered_json;

std::string errno_str(int err) { return std::strerror(err); }

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Opens `path` to read (and write, when `writable`) and checks that it is a
// regular file, whose status goes to `st`. The open does not block
// (O_NONBLOCK), so a FIFO or a device cannot hang a loader. Returns an invalid
// Fd when `path` does not exist; other failures throw, with messages that
// start with `context` (such as "load_memmap: key 'x': ").
Fd open_regular_file(const std::string& path, bool writable,
                     const std::string& context, struct stat& st) {
  Fd fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK |
                                 O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) return fd;
    TORCH_CHECK(false, context, "cannot open '", path, "': ", errno_str(err));
  }
  TORCH_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), context, "'",
              path, "' is not a regular file");
  return fd;
}

namespace {

// The DataPtr context of a mapped file: unmapped by `unmap_deleter`.
struct Mapping {
  void* addr;
  size_t length;
  bool archive;  // a whole .tdz archive, whose leaves are no memmap leaves
};

void unmap_deleter(void* ctx) {
  auto* m = static_cast<Mapping*>(ctx);
  ::munmap(m->addr, m->length);
  delete m;
}

const Mapping* mapping_of(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage()) return nullptr;
  const c10::DataPtr& ptr = t.storage().data_ptr();
  if (ptr.get_deleter() != &unmap_deleter) return nullptr;
  return static_cast<const Mapping*>(ptr.get_context());
}

}  // namespace

// A byte storage over `length` bytes of `fd` starting at offset 0, of which
// the first `nbytes` are visible to tensors. `what` names the file in errors.
c10::Storage map_storage(int fd, size_t length, size_t nbytes, bool writable,
                         bool shared, const std::string& what, bool archive) {
  const int prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ;
  void* addr =
      ::mmap(nullptr, length, prot, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
  const int err = errno;
  TORCH_CHECK(addr != MAP_FAILED, "cannot map '", what, "': ", errno_str(err));
  auto* ctx = new Mapping{addr, length, archive};
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                      c10::DataPtr(addr, ctx, &unmap_deleter,
                                   c10::Device(c10::DeviceType::CPU)),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

bool is_mapped_tensor(const at::Tensor& t) {
  const Mapping* m = mapping_of(t);
  return m != nullptr && !m->archive;
}

bool is_archive_tensor(const at::Tensor& t) {
  const Mapping* m = mapping_of(t);
  return m != nullptr && m->archive;
}

namespace {
// Core asks whether a tensor is one of these mappings (core/internal.h).
struct RegisterMappedHook {
  RegisterMappedHook() { io_hooks().is_mapped_tensor = &is_mapped_tensor; }
} register_mapped_hook;
}  // namespace

// Temporary files. A name is "<final>%tmp.<pid>.<nonce>.<n>": the nonce is
// random per process, so that names never repeat across processes or
// restarts (a restarted container's PID 1 included). Every temporary name
// contains "%tmp", which no entry's name contains (see raw_name_ok; in an
// escaped name '%' is always followed by two hex digits), so it never
// collides with a real entry. A writer holds an
// exclusive flock on each of its temporary files until the write ends, so
// that the next write into a directory (`remove_stale_tmps`) removes exactly
// the temporary files that nobody holds: those of writers that died.
namespace {

constexpr const char* kTmpMark = "%tmp.";

const std::string& process_nonce() {
  static const std::string nonce = [] {
    std::random_device rd;
    const uint64_t v =
        ((uint64_t{rd()} << 32) | rd()) ^
        static_cast<uint64_t>(
            std::chrono::steady_clock::now().time_since_epoch().count());
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx",
                  static_cast<unsigned long long>(v));
    return std::string(buf);
  }();
  return nonce;
}

std::atomic<uint64_t> g_tmp_counter{0};

std::string tmp_name(const std::string& dir, const std::string& final_name) {
  return join_path(dir, final_name + kTmpMark + std::to_string(::getpid()) +
                            "." + process_nonce() + "." +
                            std::to_string(g_tmp_counter++));
}

}  // namespace

// Removes the temporary files in `dir` that no live writer holds: those of
// `final_name` (`save` writes into a directory of the user's), or with an
// empty `final_name` all of them (a memmap directory is ours).
void remove_stale_tmps(const std::string& dir, const std::string& final_name) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string mine = final_name + kTmpMark;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const bool ours =
        final_name.empty()
            ? std::strstr(e->d_name, kTmpMark) != nullptr
            : std::strncmp(e->d_name, mine.c_str(), mine.size()) == 0;
    if (ours) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const auto& name : names) {
    const std::string path = join_path(dir, name);
    Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    // Held: a live writer's. Free: its writer died (or just finished and
    // renamed it, when unlink finds nothing).
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
  }
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      TORCH_CHECK(false, "cannot write '", path, "': ", errno_str(err));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

int TmpFiles::create(const std::string& dir, const std::string& final_name,
                     const void* data, size_t size, Space space,
                     std::string& path) {
  for (int attempt = 0;; ++attempt) {
    TORCH_CHECK(attempt < 8, "cannot create a temporary file in '", dir,
                "': each one was removed as it was created");
    path = tmp_name(dir, final_name);
    const int fd =
        ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int err = errno;
    TORCH_CHECK(fd >= 0, "cannot create '", path, "': ", errno_str(err));
    fds_.push_back(fd);
    paths_.push_back(path);
    // Another writer's remove_stale_tmps may have taken it between open and
    // flock: then it is gone, and a new name is tried.
    struct stat st {};
    if (::flock(fd, LOCK_EX) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) {
      break;
    }
  }
  const int fd = fds_.back();
  if (data != nullptr) {
    write_all(fd, data, size, path);
  } else if (size > 0 && space == Space::kReserve) {
    // posix_fallocate returns the error instead of setting errno.
    const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    TORCH_CHECK(e == 0, "cannot reserve ", size, " bytes for '", path,
                "': ", errno_str(e));
  } else if (size > 0) {
    const int r = ::ftruncate(fd, static_cast<off_t>(size));
    const int e = errno;
    TORCH_CHECK(r == 0, "cannot size '", path, "': ", errno_str(e));
  }
  return fd;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    TORCH_CHECK(false, "cannot rename '", from, "' to '", to,
                "': ", errno_str(err));
  }
}

// The contents of the small file `path`, or nullopt when it does not exist.
// Messages start with `fn`.
c10::optional<std::string> read_small_file(const std::string& path,
                                           const char* fn) {
  struct stat st {};
  Fd fd =
      open_regular_file(path, /*writable=*/false, std::string(fn) + ": ", st);
  if (!fd.valid()) return c10::nullopt;
  TORCH_CHECK(st.st_size <= (int64_t{64} << 20), fn, ": '", path,
              "' is too large (", st.st_size, " bytes)");
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd.get(), &out[got], out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    const int err = errno;
    TORCH_CHECK(r >= 0, fn, ": cannot read '", path, "': ", errno_str(err));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// Throws the c10::Error for `e`, raised while parsing or reading the JSON
// that `subject` names (see read_json).
[[noreturn]] void throw_json_error(const nlohmann::json::exception& e,
                                   const char* fn, const std::string& subject) {
  if (const auto* pe = dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
    TORCH_CHECK(false, fn, ": ", subject,
                " is not valid JSON (syntax error at byte ", pe->byte, ")");
  }
  // "[json.exception.<kind>.<id>] <what>", where <what> may quote a long
  // token of the file.
  std::string what = e.what();
  const size_t start = what.find("] ");
  if (start != std::string::npos) what.erase(0, start + 2);
  if (what.size() > 200) what = what.substr(0, 200) + "...";
  TORCH_CHECK(false, fn, ": ", subject, " is not usable JSON (", what, ")");
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool dir_is_empty(const std::string& dir, const char* fn) {
  DIR* d = ::opendir(dir.c_str());
  const int err = errno;
  TORCH_CHECK(d != nullptr, fn, ": cannot list '", dir,
              "': ", std::strerror(err));
  bool empty = true;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

void make_dir(const std::string& dir) {
  // mkdir -p, one component at a time.
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string cur = dir.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      TORCH_CHECK(false, "cannot create directory '", cur,
                  "': ", errno_str(err));
    }
  }
  struct stat st {};
  TORCH_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "'", dir,
              "' exists and is not a directory");
}

at::Tensor write_file(const std::string& dir, const std::string& name,
                      const void* data, size_t size, bool map, const char* fn) {
  const std::string path = join_path(dir, name);
  TmpFiles tmps;
  try {
    make_dir(dir);
    remove_stale_tmps(dir, name);
    std::string tmp;
    (void)tmps.create(dir, name, data, size, Space::kSparse, tmp);
    rename_or_throw(tmp, path);
  } catch (const c10::Error& e) {
    tmps.remove_all();
    TORCH_CHECK(false, fn, ": ", e.msg());
  }
  return map ? map_file(path, static_cast<int64_t>(size), fn) : at::Tensor();
}

at::Tensor map_file(const std::string& path, int64_t nbytes, const char* fn) {
  struct stat st {};
  Fd fd =
      open_regular_file(path, /*writable=*/true, std::string(fn) + ": ", st);
  if (!fd.valid()) return at::Tensor();
  TORCH_CHECK(st.st_size >= nbytes, fn, ": '", path, "' holds ", st.st_size,
              " bytes, expected ", nbytes);
  if (nbytes == 0) return at::empty({0}, at::kByte);
  c10::Storage storage =
      map_storage(fd.get(), static_cast<size_t>(nbytes),
                  static_cast<size_t>(nbytes), /*writable=*/true,
                  /*shared=*/true, path);
  return tensor_on(storage, 0, at::kByte, {nbytes});
}

c10::optional<ordered_json> read_json_file(const std::string& path,
                                           const char* fn) {
  const c10::optional<std::string> text = read_small_file(path, fn);
  c10::optional<ordered_json> out;
  if (text) {
    out.emplace(read_json(text->data(), text->data() + text->size(), fn,
                          "'" + path + "'",
                          [](const ordered_json& j) { return j; }));
  }
  return out;
}

}  // namespace detail
}  // namespace tensordict
