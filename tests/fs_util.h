// File-system helpers for the tests and benchmarks, on POSIX calls, and a
// temporary directory. No std::filesystem: pytorch.org's and pip's
// libtorch.so (2.5 and later) export copies of libstdc++'s std::filesystem
// functions, which a program linked with it may call instead of libstdc++'s
// own, and their remove_all crashes (seen with pip's LibTorch 2.11;
// pytorch/pytorch#133437). The library uses none.
#pragma once

#include <dirent.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensordict_test {

inline bool StatOk(const std::string& path, struct stat* st) {
  return ::stat(path.c_str(), st) == 0;
}
/// Whether `path` names anything (following symlinks).
inline bool Exists(const std::string& path) {
  struct stat st {};
  return StatOk(path, &st);
}
inline bool IsRegularFile(const std::string& path) {
  struct stat st {};
  return StatOk(path, &st) && S_ISREG(st.st_mode);
}
inline bool IsDirectory(const std::string& path) {
  struct stat st {};
  return StatOk(path, &st) && S_ISDIR(st.st_mode);
}
inline uint64_t FileSize(const std::string& path) {
  struct stat st {};
  if (!StatOk(path, &st)) throw std::runtime_error("cannot stat " + path);
  return static_cast<uint64_t>(st.st_size);
}
/// `path` and its missing parents, as `mkdir -p`.
inline void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot make " + prefix);
      }
    }
  }
}
/// The names in directory `path` (without "." and ".."), sorted.
inline std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) throw std::runtime_error("cannot list " + path);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}
/// Every entry under directory `path`, files and directories, as paths
/// relative to it ("next", "next/obs.memmap"), sorted; symlinks are listed,
/// not followed.
inline std::vector<std::string> ListTree(const std::string& path) {
  std::vector<std::string> out;
  for (const std::string& name : ListDir(path)) {
    out.push_back(name);
    struct stat st {};
    if (::lstat((path + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      for (const std::string& sub : ListTree(path + "/" + name)) {
        out.push_back(name + "/" + sub);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}
/// Removes `path` and everything under it (symlinks themselves, not their
/// targets), as `rm -rf`; a missing path is not an error.
inline void RemoveTree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}
/// The directory part of `path` ("/a/b" for "/a/b/c").
inline std::string ParentPath(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "td_test") {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/" +
        prefix + "_XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { RemoveTree(path_); }
  [[nodiscard]] std::string str() const { return path_; }
  [[nodiscard]] std::string operator/(const std::string& rel) const {
    return path_ + "/" + rel;
  }

 private:
  std::string path_;
};

}  // namespace tensordict_test
