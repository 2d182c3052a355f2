// examples/deploy_torchscript.cpp — a policy trained and scripted in Python
// runs in C++ on TensorDicts: the code of docs/tutorials/torchscript.md.
//
// examples/python/train_cartpole_policy.py trained the policy and saved it
// with torch.jit.save as examples/data/cartpole_policy.pt (checked in). Its
// forward takes and returns Dict[str, Tensor]: it reads "observation" and
// writes "logits" and "action". Here it drives 16 of the library's
// CartPoles (tensordict/envs.h), called once per step on the TensorDict of
// their observations.
//
// Usage (from the repository root): deploy_torchscript [policy.pt]
// Exits 1 unless the policy balances the pole: mean return >= 475 over the
// first 32 episodes.
#include <tensordict/envs.h>
#include <tensordict/jit.h>
#include <tensordict/tensordict.h>
#include <torch/script.h>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using tensordict::TensorDict;

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : "examples/data/cartpole_policy.pt";
  try {
    torch::jit::Module policy = torch::jit::load(path);
    policy.eval();
    torch::NoGradGuard no_grad;

    // One call on a dict of observations: the result is a dict of the same
    // batch size.
    const int64_t E = 16;
    // RewardSum keeps each episode's return in "episode_reward".
    tensordict::TransformedEnv env(
        std::make_unique<tensordict::CartPoleEnv>(
            std::vector<int64_t>{E}, /*categorical_action_encoding=*/true),
        std::make_shared<tensordict::RewardSum>());
    env.set_seed(0);
    TensorDict td = env.reset();
    TensorDict obs({{"observation", td.get("observation")}}, {E});
    TensorDict out = tensordict::forward(policy, obs);
    TORCH_CHECK(out.batch_size() == c10::IntArrayRef({E}));
    TORCH_CHECK(out.get("logits").sizes() == c10::IntArrayRef({E, 2}));
    TORCH_CHECK(out.get("action").scalar_type() == at::kLong);
    // forward() is to_ivalue, module.forward, from_ivalue:
    const c10::IValue raw = policy.forward({tensordict::to_ivalue(obs)});
    TORCH_CHECK(at::equal(
        tensordict::from_ivalue(raw, std::vector<int64_t>{E}).get("action"),
        out.get("action")));

    // The control loop: the step's results, and the next step's input with
    // the finished episodes reset.
    int64_t steps = 0;
    std::vector<double> returns;
    while (returns.size() < 32) {
      obs.set("observation", td.get("observation"));
      out = tensordict::forward(policy, obs);
      td.set("action", out.get("action"));
      auto [step, next] = env.step_and_maybe_reset(td);
      const at::Tensor ended = at::masked_select(
          step.get({"next", "episode_reward"}), step.get({"next", "done"}));
      for (int64_t i = 0; i < ended.numel(); ++i) {
        returns.push_back(ended[i].item<double>());
      }
      td = next;
      steps += E;
    }
    const double mean =
        std::accumulate(returns.begin(), returns.begin() + 32, 0.0) / 32;
    std::printf(
        "TorchScript policy from %s: mean return %.1f over 32 episodes "
        "(%lld env steps, one forward per step of %lld envs)\n",
        path.c_str(), mean, static_cast<long long>(steps),
        static_cast<long long>(E));
    if (mean < 475) {
      std::printf("the policy does not balance the pole\n");
      return 1;
    }
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s\n", e.what_without_backtrace());
    return 1;
  }
  return 0;
}
