// Helpers shared by the test files: exact error-message checks and a snapshot
// of everything observable about a dict, to check that a failed call changed
// nothing.
#pragma once

#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensordict_test {

// File-system helpers on POSIX calls. The tests use no std::filesystem:
// pytorch.org's and pip's libtorch.so (2.5 and later) export copies of
// libstdc++'s std::filesystem functions, which a program linked with it may
// call instead of libstdc++'s own, and their remove_all crashes (seen with
// pip's LibTorch 2.11; pytorch/pytorch#133437). The library uses none.

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
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/" + prefix + "_XXXXXX";
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


// Runs `fn`, expects it to throw a `c10::Error` of dynamic type `E` whose
// `msg()` is exactly `expected`. Failures are reported at the call site.
template <typename E = c10::Error, typename Fn>
void ExpectThrowsMsg(Fn&& fn, const std::string& expected,
                     const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  try {
    fn();
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), expected) << "  (checked at " << file << ":" << line
                                 << ")";
    if (dynamic_cast<const E*>(&e) == nullptr) {
      ADD_FAILURE_AT(file, line)
          << "the error has the wrong type; message: " << e.msg();
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE_AT(file, line) << "expected a c10::Error with message \""
                               << expected << "\", got std::exception: "
                               << e.what();
    return;
  }
  ADD_FAILURE_AT(file, line) << "expected a c10::Error with message \""
                             << expected << "\", but nothing was thrown";
}

// Like ExpectThrowsMsg, for messages that embed LibTorch's own text: checks
// only that the message starts with `prefix`.
template <typename E = c10::Error, typename Fn>
void ExpectThrowsMsgPrefix(Fn&& fn, const std::string& prefix,
                           const char* file = __builtin_FILE(),
                           int line = __builtin_LINE()) {
  try {
    fn();
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg().substr(0, prefix.size()), prefix)
        << "  full message: " << e.msg() << "  (checked at " << file << ":"
        << line << ")";
    if (dynamic_cast<const E*>(&e) == nullptr) {
      ADD_FAILURE_AT(file, line)
          << "the error has the wrong type; message: " << e.msg();
    }
    return;
  }
  ADD_FAILURE_AT(file, line) << "expected a c10::Error starting with \""
                             << prefix << "\", but nothing was thrown";
}

// Everything observable about a dict: its keys, each leaf's identity, value
// and version, and every (sub-)dict's batch size.
struct Snapshot {
  std::vector<tensordict::NestedKey> keys;
  std::vector<at::Tensor> leaves;  // the stored tensors (for is_same)
  std::vector<at::Tensor> values;  // clones of them
  std::vector<int64_t> versions;
  std::vector<std::vector<int64_t>> batch_sizes;  // root first, then sub-dicts
  std::vector<std::string> non_tensors;  // non-tensor values, as JSON text
};

inline Snapshot TakeSnapshot(const tensordict::TensorDict& td) {
  Snapshot s;
  s.keys = td.keys(/*include_nested=*/true);
  s.batch_sizes.push_back(td.batch_size().vec());
  for (const auto& k : s.keys) {
    tensordict::Entry e = td.get_entry(k);
    if (e.is_tensor()) {
      s.leaves.push_back(e.tensor());
      s.values.push_back(e.tensor().detach().clone());
      s.versions.push_back(e.tensor()._version());
    } else if (e.is_non_tensor()) {
      s.non_tensors.push_back(e.non_tensor().dump());
    } else {
      s.batch_sizes.push_back(e.tensordict().batch_size().vec());
    }
  }
  return s;
}

inline void ExpectUnchanged(const tensordict::TensorDict& td, const Snapshot& s,
                            const char* file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
  SCOPED_TRACE(testing::Message() << "dict checked at " << file << ":" << line);
  ASSERT_EQ(td.keys(true), s.keys);
  EXPECT_EQ(td.batch_size().vec(), s.batch_sizes[0]);
  size_t leaf = 0;
  size_t dict = 1;
  size_t non_tensor = 0;
  for (const auto& k : s.keys) {
    tensordict::Entry e = td.get_entry(k);
    if (e.is_non_tensor()) {
      EXPECT_EQ(e.non_tensor().dump(), s.non_tensors[non_tensor++]) << k;
    } else if (e.is_tensor()) {
      EXPECT_TRUE(e.tensor().is_same(s.leaves[leaf])) << k;
      EXPECT_TRUE(at::equal(e.tensor(), s.values[leaf])) << k;
      EXPECT_EQ(e.tensor()._version(), s.versions[leaf]) << k;
      ++leaf;
    } else {
      EXPECT_EQ(e.tensordict().batch_size().vec(), s.batch_sizes[dict]) << k;
      ++dict;
    }
  }
}

inline std::vector<tensordict::NestedKey> Keys(
    std::initializer_list<tensordict::NestedKey> ks) {
  return ks;
}

inline bool SharesStorage(const at::Tensor& a, const at::Tensor& b) {
  return a.storage().data_ptr().get() == b.storage().data_ptr().get();
}

}  // namespace tensordict_test
