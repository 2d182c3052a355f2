// Helpers shared by the memmap and save/load tests (memmap_test.cpp,
// memmap_errors_test.cpp, save_load_test.cpp): files read and written byte
// for byte, a small nested dict and an exact comparison of two dicts, and
// hand-written memmap directories.
#pragma once

#include <tensordict/tensordict.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fs_util.h"
#include "test_paths.h"

namespace tensordict_test {
namespace memmap_test {

using nlohmann::ordered_json;
using tensordict::TensorDict;

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.numel()) * c.element_size());
}

inline std::vector<std::string> JsonKeys(const ordered_json& j) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
  return out;
}

inline std::string DataDir() {
  return tensordict_test::TestDataDir() + "/memmap";
}

inline TensorDict MakeNested() {
  return TensorDict(
      {{"obs", torch::arange(6, torch::kFloat32).reshape({2, 3})},
       {{"next", "reward"}, torch::tensor({1.5, 2.5}, torch::kFloat64)},
       {{"next", "done"}, torch::tensor({true, false})},
       {"count", torch::tensor({7, 8}, torch::kInt64)}},
      {2});
}

inline void ExpectSameDict(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(true), b.keys(true));
  EXPECT_EQ(a.batch_size().vec(), b.batch_size().vec());
  for (const auto& k : a.keys(true, true)) {
    EXPECT_EQ(a.get(k).scalar_type(), b.get(k).scalar_type()) << k;
    EXPECT_EQ(a.get(k).sizes(), b.get(k).sizes()) << k;
    EXPECT_EQ(TensorBytes(a.get(k)), TensorBytes(b.get(k))) << k;
  }
}

// Writes a one-level memmap directory with `meta` and the given leaf files.
inline void MakeDir(
    const std::string& dir, const std::string& meta,
    const std::vector<std::pair<std::string, std::string>>& files = {}) {
  MakeDirs(dir);
  WriteFile(dir + "/meta.json", meta);
  for (const auto& f : files) WriteFile(dir + "/" + f.first, f.second);
}

inline constexpr const char* kTail =
    R"("shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})";

}  // namespace memmap_test
}  // namespace tensordict_test
