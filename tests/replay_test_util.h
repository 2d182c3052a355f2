// Helpers shared by the ReplayBuffer tests (replay_buffer_test.cpp,
// replay_sampler_test.cpp, replay_persistence_test.cpp): batches of rows and
// of trajectories, reading back what was stored or sampled, and a snapshot of
// a buffer, to check that a failed call changed nothing.
#pragma once

#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <set>
#include <vector>

#include "test_util.h"

namespace tensordict_test {
namespace replay_test {

using tensordict::ReplayBuffer;
using tensordict::TensorDict;

// A batch of `n` rows whose every element of row k is `first + k`.
inline TensorDict Rows(int64_t n, float first) {
  at::Tensor v = torch::arange(n, torch::kFloat) + first;
  return TensorDict(
      {{"obs", v.unsqueeze(1).expand({n, 3}).contiguous()},
       {"done", torch::zeros({n, 1}, torch::kBool)},
       {{"next", "obs"}, v.unsqueeze(1).expand({n, 3}).contiguous()}},
      {n});
}

inline TensorDict Row(float value) { return Rows(1, value)[0]; }

// Column 0 of "obs", as a vector (one value per row).
inline std::vector<float> ObsValues(const TensorDict& td) {
  at::Tensor c = td.get("obs").select(1, 0).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

inline std::vector<int64_t> Vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Trajectories of the given lengths, with "traj" ids from `first_id` and
// ("next", "done") set on each trajectory's last row; "t" counts rows.
inline TensorDict Trajectories(const std::vector<int64_t>& lengths,
                               int64_t first_id, int64_t first_t) {
  std::vector<int64_t> ids;
  std::vector<uint8_t> done;
  for (size_t j = 0; j < lengths.size(); ++j) {
    for (int64_t k = 0; k < lengths[j]; ++k) {
      ids.push_back(first_id + static_cast<int64_t>(j));
      done.push_back(k == lengths[j] - 1);
    }
  }
  const auto n = static_cast<int64_t>(ids.size());
  return TensorDict(
      {{"traj", torch::tensor(ids)},
       {"t", torch::arange(first_t, first_t + n)},
       {{"next", "done"},
        torch::tensor(std::vector<int64_t>(done.begin(), done.end()))
            .to(torch::kBool)
            .unsqueeze(1)}},
      {n});
}

struct State {
  int64_t size;
  int64_t cursor;
  tensordict_test::Snapshot storage;
};

inline State Capture(const ReplayBuffer& rb) {
  return {rb.size(), rb.cursor(), TakeSnapshot(rb.storage())};
}

inline void ExpectSame(const ReplayBuffer& rb, const State& s,
                       const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  EXPECT_EQ(rb.size(), s.size) << "checked at " << file << ":" << line;
  EXPECT_EQ(rb.cursor(), s.cursor) << "checked at " << file << ":" << line;
  ExpectUnchanged(rb.storage(), s.storage, file, line);
}

inline TensorDict Ranked(const std::vector<float>& key) {
  const auto n = static_cast<int64_t>(key.size());
  return TensorDict({{"key", torch::tensor(key)},
                     {"obs", torch::arange(n, torch::kLong) + 100}},
                    {n});
}

inline std::multiset<float> StoredKeys(const ReplayBuffer& rb) {
  auto k = rb.storage().get("key").narrow(0, 0, rb.size()).contiguous();
  return std::multiset<float>(k.data_ptr<float>(),
                              k.data_ptr<float>() + k.numel());
}

}  // namespace replay_test
}  // namespace tensordict_test
