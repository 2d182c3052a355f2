// A test env shared by the env layer's tests (envs_test.cpp,
// transforms_test.cpp).
#pragma once

#include <ATen/ATen.h>
#include <tensordict/envs.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tensordict_test {

// Three counters: each step adds 1 to "obs" (float [3, 1]); env i is
// terminated when its count reaches term_at[i] and truncated at
// trunc_at[i] (0: never). The reward is the action (Categorical(3)).
class CountEnv final : public tensordict::EnvBase {
 public:
  CountEnv(std::vector<int64_t> term_at, std::vector<int64_t> trunc_at)
      : tensordict::EnvBase({3}),
        term_at_(std::move(term_at)),
        trunc_at_(std::move(trunc_at)) {
    set_observation_spec(
        tensordict::Composite({{"obs", tensordict::Unbounded({3, 1})}}, {3}));
    set_action_spec(tensordict::Categorical(3, {3}));
    const tensordict::Categorical flag(2, {3, 1}, at::kBool);
    set_done_spec(tensordict::Composite(
        {{"done", flag}, {"terminated", flag}, {"truncated", flag}}, {3}));
  }
  [[nodiscard]] std::string name() const override { return "CountEnv"; }
  int64_t resets = 0;  // rows reset so far
  bool done_after_reset = false;

 protected:
  void reset_impl(const tensordict::TensorDict& td) override {
    at::Tensor obs = td.get("obs");
    at::Tensor mask =
        td.contains("_reset") ? td.get("_reset") : at::ones({3, 1}, at::kBool);
    obs.masked_fill_(mask, 0.0);
    resets += mask.sum().item<int64_t>();
    if (done_after_reset) td.get("done").fill_(true);
  }
  void step_impl(const tensordict::TensorDict& td,
                 const tensordict::TensorDict& next) override {
    const at::Tensor count = td.get("obs") + 1;
    next.get("obs").copy_(count);
    next.get("reward").copy_(td.get("action").to(at::kFloat).unsqueeze(-1));
    for (int64_t i = 0; i < 3; ++i) {
      const auto c = static_cast<int64_t>(count[i][0].item<float>());
      next.get("terminated")[i][0] = term_at_[i] != 0 && c >= term_at_[i];
      next.get("truncated")[i][0] = trunc_at_[i] != 0 && c >= trunc_at_[i];
    }
  }
  void set_seed_impl(uint64_t /*seed*/) override {}

 private:
  std::vector<int64_t> term_at_, trunc_at_;
};

}  // namespace tensordict_test
