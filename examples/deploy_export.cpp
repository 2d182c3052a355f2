// examples/deploy_export.cpp — a policy exported in Python with
// torch.export and compiled by AOTInductor runs in C++ as a
// TensorDictModule, collects CartPole episodes, and takes a learner's new
// weights: the code of docs/tutorials/export.md.
//
// examples/python/export_cartpole_policy.py compiled the weights of the
// TorchScript policy (examples/data/cartpole_policy.pt) into
// examples/data/cartpole_policy.pt2 (checked in; torch 2.6, so that every
// LibTorch >= 2.6 loads it). Its forward takes the keyword "observation"
// and returns {"logits", "action"}.
//
// Usage (from the repository root): deploy_export [policy.pt2]
// Exits 1 unless the policy balances the pole (mean return >= 475 over the
// first 32 episodes) and runs the learner's weights once it has them.
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/export.h>
#include <tensordict/nn.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using tensordict::TensorDict;

// The learner's copy of the policy: the exported module's layout
// ("net.0.weight", ...), so that from_module gives what update_weights
// takes.
struct PolicyNet : torch::nn::Module {
  PolicyNet()
      : net(register_module(
            "net",
            torch::nn::Sequential(torch::nn::Linear(4, 32), torch::nn::Tanh(),
                                  torch::nn::Linear(32, 2)))) {}
  torch::nn::Sequential net;
};

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 ? argv[1] : "examples/data/cartpole_policy.pt2";
  try {
    tensordict::AOTIModule policy(path, {"observation"}, {"logits", "action"});

    // A collector runs it on 16 CartPoles (RewardSum keeps each episode's
    // return in "episode_reward"), 16 x 64 steps a batch.
    const int64_t E = 16;
    tensordict::Collector collector(
        std::make_unique<tensordict::TransformedEnv>(
            std::make_unique<tensordict::CartPoleEnv>(
                std::vector<int64_t>{E}, /*categorical_action_encoding=*/true),
            std::make_shared<tensordict::RewardSum>()),
        policy, tensordict::CollectorOptions(E * 64));
    std::vector<double> returns;
    int64_t frames = 0;
    while (returns.size() < 32) {
      const TensorDict batch = collector.next();
      const at::Tensor ended = at::masked_select(
          batch.get({"next", "episode_reward"}), batch.get({"next", "done"}));
      for (int64_t i = 0; i < ended.numel(); ++i) {
        returns.push_back(ended[i].item<double>());
      }
      frames += batch.numel();
    }
    const double mean =
        std::accumulate(returns.begin(), returns.begin() + 32, 0.0) / 32;
    std::printf(
        "AOTInductor policy from %s: mean return %.1f over 32 episodes "
        "(%lld frames)\n",
        path.c_str(), mean, static_cast<long long>(frames));
    if (mean < 475) {
      std::printf("the policy does not balance the pole\n");
      return 1;
    }

    // The learner's weights, pushed into the package: the collector's
    // policy (a copy sharing the package) runs them from its next batch.
    auto learner = std::make_shared<PolicyNet>();
    policy.update_weights(tensordict::from_module(*learner));
    TensorDict obs({E});
    obs.set("observation", at::randn({E, 4}));
    policy(obs);
    const at::Tensor expected = learner->net->forward(obs.get("observation"));
    TORCH_CHECK(at::allclose(obs.get("logits"), expected, 1e-5, 1e-5));
    TORCH_CHECK(at::equal(obs.get("action"), expected.argmax(-1)));
    std::printf("updated weights: %s\n",
                c10::Join(", ", policy.constant_names()).c_str());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s\n", e.what_without_backtrace());
    return 1;
  }
  return 0;
}
