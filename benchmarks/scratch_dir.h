// A scratch directory for the benchmarks that write files, on POSIX calls.
// No std::filesystem here: pytorch.org's and pip's libtorch.so (2.5 and
// later) export copies of libstdc++'s std::filesystem functions, which a
// program linked with it may call instead of libstdc++'s own, and their
// remove_all and directory iterators crash (pytorch/pytorch#133437).
#pragma once

#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdlib>
#include <string>

namespace bench {

/// Removes `path` and everything under it, as `rm -rf`.
inline void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

/// The apparent and allocated bytes of the regular files under `path`.
struct DiskUse {
  size_t apparent = 0;
  size_t on_disk = 0;
};
inline DiskUse disk_use(const std::string& path) {
  static DiskUse use;
  use = DiskUse();
  ::nftw(
      path.c_str(),
      [](const char*, const struct stat* st, int type, struct FTW*) {
        if (type == FTW_F && S_ISREG(st->st_mode)) {
          use.apparent += static_cast<size_t>(st->st_size);
          use.on_disk += static_cast<size_t>(st->st_blocks) * 512;
        }
        return 0;
      },
      16, FTW_PHYS);
  return use;
}

/// A fresh directory under $TMPDIR (or /tmp) named `<prefix>_XXXXXX`,
/// removed with everything in it on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                    "/" + prefix + "_XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) std::abort();
    path = t;
  }
  ~ScratchDir() { remove_tree(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path;
};

}  // namespace bench
