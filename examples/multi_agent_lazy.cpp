// A multi-agent rollout where the agents see observations of different
// sizes, kept in lazy stacks (tensordict/lazy_stack.h), as TorchRL keeps
// heterogeneous agents.
//
// Three agents (a scout with 2 sensors, a worker with 4, a carrier with 6)
// act for 64 steps. Each step is a lazy stack of the agents' dicts; the
// rollout stacks the steps, one dense time series per agent. Shared keys
// (reward, done) read as one tensor; the observations are read per agent or
// padded with a mask. The agent steps then go into a LazyStackReplayBuffer,
// whose samples are lazy stacks again, and the rollout is written to disk in
// Python's layout (TensorDict.load_memmap in Python reads it back).
#include <tensordict/lazy_replay_buffer.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

using tensordict::LazyStackedTensorDict;
using tensordict::TensorDict;

int main() {
  torch::manual_seed(0);
  const std::vector<int64_t> sensors = {2, 4, 6};
  const auto n_agents = static_cast<int64_t>(sensors.size());
  const int64_t steps = 64;

  // One policy per agent: a linear map of its own observation size.
  std::vector<torch::nn::Linear> policies;
  for (int64_t s : sensors) policies.emplace_back(s, 1);
  std::vector<torch::Tensor> state;
  for (int64_t s : sensors) state.push_back(torch::randn({s}));

  // The rollout: each step a lazy stack of the agents' rows.
  std::vector<LazyStackedTensorDict> rollout;
  torch::NoGradGuard no_grad;
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<TensorDict> agents;
    for (int64_t k = 0; k < n_agents; ++k) {
      const auto i = static_cast<size_t>(k);
      const torch::Tensor obs = state[i];
      const torch::Tensor action = torch::tanh(policies[i]->forward(obs));
      state[i] = 0.9 * obs + 0.1 * action + 0.05 * torch::randn_like(obs);
      TensorDict row({{"observation", obs}, {"action", action}}, {});
      row.set({"next", "observation"}, state[i]);
      row.set({"next", "reward"}, -state[i].pow(2).mean().reshape({1}));
      row.set({"next", "done"}, torch::full({1}, t == steps - 1, torch::kBool));
      agents.push_back(row);
    }
    rollout.push_back(tensordict::lazy_stack(agents));
  }
  // Stacking the steps gives one dense time series per agent: [steps, 3].
  const LazyStackedTensorDict data = tensordict::stack(rollout, 0);
  std::cout << "rollout batch_size " << c10::IntArrayRef(data.batch_size())
            << " stack_dim " << data.stack_dim() << "\n";

  // Shared shapes read as one tensor; the observations do not.
  const torch::Tensor reward = data.get({"next", "reward"});
  const torch::Tensor per_agent = reward.mean(std::vector<int64_t>{0, 2});
  std::cout << "reward " << reward.sizes() << ", mean per agent "
            << per_agent.sizes() << "\n";
  try {
    (void)data.get("observation");
  } catch (const c10::Error& e) {
    std::cout << "get(observation): " << e.msg() << "\n";
  }
  for (const auto& obs : data.get_list("observation")) {
    std::cout << "  agent observations " << obs.sizes() << "\n";
  }
  const TensorDict padded = data.to_padded_tensor(0.0, /*return_mask=*/true);
  const torch::Tensor mask = padded.get({"masks", "observation"});
  std::cout << "padded observation " << padded.get("observation").sizes()
            << ", valid entries per agent at step 0:";
  for (int64_t k = 0; k < n_agents; ++k) {
    std::cout << " " << mask[0][k].sum().item<int64_t>();
  }
  std::cout << "\n";

  // A replay buffer of agent steps of different sizes.
  tensordict::LazyStackReplayBuffer rb(
      tensordict::ReplayBufferOptions(1024).seed(0));
  for (const auto& agent : data.tensordicts()) {
    rb.extend(agent.unbind(0));
  }
  auto [batch, info] = rb.sample(8);
  const torch::Tensor obs = batch.get_padded("observation");
  std::cout << "buffer " << rb.size() << " rows; sample "
            << c10::IntArrayRef(batch.batch_size()) << ", padded observation "
            << obs.sizes() << "\n";

  // Python's layout on disk: 0/, 1/, 2/ under one meta.json.
  const std::string dir = "multi_agent_rollout";
  (void)data.memmap(dir);
  const auto back = LazyStackedTensorDict::load_memmap(dir);
  const bool same = (back == data).all();
  std::cout << "memmap round trip equal: " << std::boolalpha << same << "\n";
  std::filesystem::remove_all(dir);
  return same && rb.size() == steps * n_agents ? 0 : 1;
}
