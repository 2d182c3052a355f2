// Internal: the io layer's file primitives, under the memmap directories,
// the single-file format and the `.tdz` archives (io/memmap*.cpp,
// io/consolidate.cpp, io/archive.cpp), and for small files that sit next
// to memmap directories (the replay buffer's TorchRL metadata,
// rl/torchrl_files.h); plus the single-file format's metadata for other
// carriers (dist/remote.cpp). They give every file the same guarantees:
//   - a write replaces a file atomically (a locked temporary file, then
//     rename; no fsync), and removes the temporaries of dead writers;
//   - a read opens regular files only, without blocking (a FIFO cannot hang
//     it), and every failure, JSON included, is a c10::Error naming the file.
// The primitives are in io/files.cpp; the metadata in io/consolidate.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/Optional.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/row_copy.h"

namespace tensordict {
namespace detail {

// ---- primitives (io/files.cpp) ----------------------------------------------

/// strerror(err).
std::string errno_str(int err);

/// `dir`/`name` (`name` alone for an empty `dir`).
std::string join_path(const std::string& dir, const std::string& name);

/// `path`'s directory ("." when it has none, "/" for the root) and its last
/// component: where `save` and the archive writer put their temporary files.
std::pair<std::string, std::string> split_path(const std::string& path);

/// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

/// Opens `path` to read (and write, when `writable`) and checks that it is
/// a regular file, whose status goes to `st`. The open does not block
/// (O_NONBLOCK), so a FIFO or a device cannot hang a loader. Returns an
/// invalid Fd when `path` does not exist; other failures throw, with
/// messages that start with `context` (such as "load_memmap: key x: ").
Fd open_regular_file(const std::string& path, bool writable,
                     const std::string& context, struct stat& st);

/// A byte storage over `length` bytes of `fd` from offset 0 (`mmap`, shared
/// or private copy-on-write), of which the first `nbytes` are visible to
/// tensors; unmapped when the last tensor on it dies. Its tensors are
/// `is_mapped_tensor`, or `is_archive_tensor` for an `archive`'s mapping.
/// `what` names the file in errors.
c10::Storage map_storage(int fd, size_t length, size_t nbytes, bool writable,
                         bool shared, const std::string& what,
                         bool archive = false);

/// True when `t`'s storage is a file mapping made by `map_storage` (a memmap
/// leaf's file, or a file of `TensorDict::save`), not a `.tdz` archive's.
/// Core asks it through `IoHooks::is_mapped_tensor` (core/internal.h).
bool is_mapped_tensor(const at::Tensor& t);
/// True when `t`'s storage is the mapping of a `.tdz` archive: a plain
/// tensor, shared, as Python's leaves over an archive are.
bool is_archive_tensor(const at::Tensor& t);

/// Writes the `n` bytes at `data` to `fd`; throws naming `path`.
void write_all(int fd, const void* data, size_t n, const std::string& path);

/// How `memmap_like` (and the replay buffer's storage files) get their zeros.
enum class Space {
  kReserve,  // allocated up front (posix_fallocate): a full disk fails here
  kSparse,   // holes, allocated when written: a full disk is a SIGBUS later
};

/// The temporary files of one write, each locked until the write ends.
class TmpFiles {
 public:
  TmpFiles() = default;
  TmpFiles(const TmpFiles&) = delete;
  TmpFiles& operator=(const TmpFiles&) = delete;
  ~TmpFiles() {
    for (int fd : fds_) ::close(fd);
  }
  // A new, locked temporary file next to `final_name` in `dir`, holding
  // `size` bytes of `data`, or `size` zero bytes laid out as `space` says
  // when `data` is null. Sets `path`; returns its descriptor (owned here).
  int create(const std::string& dir, const std::string& final_name,
             const void* data, size_t size, Space space, std::string& path);
  // Removes every file created (after a failed write).
  void remove_all() {
    for (const auto& p : paths_) ::unlink(p.c_str());
  }

 private:
  std::vector<std::string> paths_;
  std::vector<int> fds_;
};

/// Removes the temporary files in `dir` that no live writer holds: those of
/// `final_name` (`save` writes into a directory of the user's), or with an
/// empty `final_name` all of them (a memmap directory is ours). A temporary
/// name is "<final>%tmp.<pid>.<nonce>.<n>"; every one contains "%tmp", which
/// no entry's file name contains.
void remove_stale_tmps(const std::string& dir,
                       const std::string& final_name = std::string());

/// rename(2), or a c10::Error naming both paths.
void rename_or_throw(const std::string& from, const std::string& to);

/// The contents of the regular file `path` (at most 64 MiB), or nullopt
/// when it does not exist. Messages start with `fn`.
c10::optional<std::string> read_small_file(const std::string& path,
                                           const char* fn);

/// How deeply the loaders let JSON nest. A dict nested 64 levels deep (the
/// loaders' limit) needs about 130 in a saved file's metadata and 3 in a
/// meta.json.
constexpr int kMaxJsonDepth = 512;

/// Throws the c10::Error for `e`, raised while parsing or reading the JSON
/// that `subject` names (see read_json).
[[noreturn]] void throw_json_error(const nlohmann::json::exception& e,
                                   const char* fn, const std::string& subject);

/// Parses the JSON text [begin, end) and returns `read(json)`. Every JSON
/// failure is a c10::Error naming `subject` ("'<path>'" for a meta.json,
/// "'<path>': the metadata" for a saved file's metadata): a syntax error,
/// nesting deeper than kMaxJsonDepth, and any other nlohmann exception, in
/// parsing (a number out of range, such as 1e400) or in `read` (a field read
/// as the wrong type). `read`'s own errors pass through.
///
/// Deep nesting is rejected while parsing, before any deep value is built:
/// ordered_json copies values recursively (an object that grows copies its
/// entries), so a deep one overflows the stack.
template <typename Read>
auto read_json(const char* begin, const char* end, const char* fn,
               const std::string& subject, const Read& read) {
  try {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
        begin, end,
        [&](int depth, nlohmann::ordered_json::parse_event_t event,
            nlohmann::ordered_json&) {
          // `depth` counts the containers around the one that starts.
          TORCH_CHECK(
              depth < kMaxJsonDepth ||
                  (event !=
                       nlohmann::ordered_json::parse_event_t::object_start &&
                   event != nlohmann::ordered_json::parse_event_t::array_start),
              fn, ": ", subject, " nests JSON values more than ", kMaxJsonDepth,
              " levels deep");
          return true;
        });
    return read(j);
  } catch (const nlohmann::json::exception& e) {
    throw_json_error(e, fn, subject);
  }
}

// ---- small files next to memmap directories ---------------------------------

/// Creates the directory `dir` and its missing parents; throws naming the
/// first one that cannot be made, or `dir` when it exists and is not a
/// directory.
void make_dir(const std::string& dir);

/// Whether something exists at `path` (stat succeeds).
bool path_exists(const std::string& path);

/// Whether the directory `dir` has no entries; throws naming it when it
/// cannot be listed. Messages start with `fn`.
bool dir_is_empty(const std::string& dir, const char* fn);

/// Replaces the file `dir`/`name` by one holding the `size` bytes at `data`.
/// When `map`, returns the new file mapped shared and writable (uint8
/// `[size]`; stores into it reach the file), else an undefined tensor. On
/// error nothing is replaced; messages start with `fn`.
at::Tensor write_file(const std::string& dir, const std::string& name,
                      const void* data, size_t size, bool map, const char* fn);

/// The regular file `path` mapped shared and writable as uint8 `[nbytes]`,
/// or an undefined tensor when it does not exist. Throws when it is not a
/// regular file or holds fewer than `nbytes` bytes; messages start with `fn`.
at::Tensor map_file(const std::string& path, int64_t nbytes, const char* fn);

/// The JSON value in the file `path` (at most 64 MiB, nesting bounded as
/// in load_memmap), or nullopt when the file does not exist. Any other
/// failure is a c10::Error that starts with `fn` and names the file.
c10::optional<nlohmann::ordered_json> read_json_file(const std::string& path,
                                                     const char* fn);

/// The dtype Python names `name` ("torch.float32"), among those the
/// formats store; nullopt for any other name.
c10::optional<at::ScalarType> dtype_from_name(const std::string& name);

/// The metadata of a consolidated dict in the single-file format
/// (tensordict/persistence.h: {"type": "TensorDict", "batch_size",
/// "device", "entries": {key: {"dtype", "shape", "offset"} or a sub-dict}}),
/// offsets in bytes from the start of `buffer`, its uint8 storage.
nlohmann::ordered_json consolidated_meta(const TensorDictImpl& root,
                                         const at::Tensor& buffer);
/// The dict that `meta` (consolidated_meta's format) describes over the
/// CPU uint8 `buffer` (offset 0 of its storage), consolidated over it, with
/// the loader's checks: any metadata that does not fit the buffer is a
/// c10::Error "<fn>: '<source>': ...".
ImplPtr dict_from_consolidated_meta(const nlohmann::ordered_json& meta,
                                    const at::Tensor& buffer, const char* fn,
                                    const std::string& source);
/// `to(device)` of a consolidated dict (`is_consolidated_impl`): one copy
/// of the buffer, then the leaves rebuilt as views into the copy. Core asks
/// it through `IoHooks::consolidated_to` (core/internal.h).
ImplPtr consolidated_to(const TensorDictImpl& impl, at::Device device,
                        bool non_blocking);

}  // namespace detail
}  // namespace tensordict
