// What the HERReplayBuffer tests share (her_test.cpp, python_her_test.cpp):
// transitions of goal-conditioned episodes whose goals tell where they came
// from, and a reward of them.
#pragma once

#include <tensordict/tensor_dict.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tensordict_test {

// The transitions of episodes of `lengths` (episode ids from `first_ep`):
// the achieved goal of step t of episode e is (e, t), the next one (e,
// t + 1), the desired goal (100 + e, 0); the last step of each episode but
// the last (left running when `open_last`) is done.
inline tensordict::TensorDict Episodes(const std::vector<int64_t>& lengths,
                                       int64_t first_ep = 0,
                                       bool open_last = false) {
  std::vector<float> ach;
  std::vector<float> next_ach;
  std::vector<float> desired;
  std::vector<int64_t> ep;
  std::vector<int64_t> t;
  std::vector<uint8_t> done;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t e = first_ep + static_cast<int64_t>(i);
    for (int64_t s = 0; s < lengths[i]; ++s) {
      ach.insert(ach.end(), {static_cast<float>(e), static_cast<float>(s)});
      next_ach.insert(next_ach.end(),
                      {static_cast<float>(e), static_cast<float>(s + 1)});
      desired.insert(desired.end(), {100.0F + static_cast<float>(e), 0.0F});
      ep.push_back(e);
      t.push_back(s);
      done.push_back(s == lengths[i] - 1 &&
                     !(open_last && i + 1 == lengths.size()));
    }
  }
  const auto n = static_cast<int64_t>(ep.size());
  return tensordict::TensorDict(
      {{"achieved_goal", torch::tensor(ach).view({n, 2})},
       {"desired_goal", torch::tensor(desired).view({n, 2})},
       {"episode", torch::tensor(ep)},
       {"t", torch::tensor(t)},
       {{"next", "achieved_goal"}, torch::tensor(next_ach).view({n, 2})},
       {{"next", "desired_goal"}, torch::tensor(desired).view({n, 2})},
       {{"next", "reward"}, torch::full({n, 1}, 7.0F)},
       {{"next", "done"},
        torch::tensor(std::vector<int64_t>(done.begin(), done.end()))
            .to(torch::kBool)
            .unsqueeze(1)}},
      {n});
}

// Minus the L1 distance from the next achieved goal to the desired one.
inline at::Tensor Reward(const tensordict::TensorDict& td) {
  return -(td.get({"next", "achieved_goal"}) - td.get("desired_goal"))
              .abs()
              .sum(-1, true);
}

}  // namespace tensordict_test
