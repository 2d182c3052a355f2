// Helpers shared by the test files: exact error-message checks and a snapshot
// of everything observable about a dict, to check that a failed call changed
// nothing.
#pragma once

#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "fs_util.h"

namespace tensordict_test {

// Runs `fn`, expects it to throw a `c10::Error` of dynamic type `E` whose
// `msg()` is exactly `expected`. Failures are reported at the call site.
template <typename E = c10::Error, typename Fn>
void ExpectThrowsMsg(Fn&& fn, const std::string& expected,
                     const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  try {
    fn();
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), expected)
        << "  (checked at " << file << ":" << line << ")";
    if (dynamic_cast<const E*>(&e) == nullptr) {
      ADD_FAILURE_AT(file, line)
          << "the error has the wrong type; message: " << e.msg();
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE_AT(file, line)
        << "expected a c10::Error with message \"" << expected
        << "\", got std::exception: " << e.what();
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
