// Typed transitions: tensor classes (tensordict/tensorclass.h), Python's
// @tensorclass, over a replay buffer.
//
// A Transition with obs, action and a nested Next (obs, reward, done) is
// declared once; a rollout of 4 environments writes its steps into a
// ReplayBuffer, typed batches come back from `sample_as`, and a batch is
// saved in Python's tensorclass layout and loaded back. A misspelt field
// (`batch.nxt()`) does not compile.
//
// Usage: typed_transitions (no arguments; it checks what it prints).
#include <stdlib.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

struct Next : tensordict::TensorClass<Next> {
  TENSORDICT_TENSORCLASS(Next)
  TENSORDICT_FIELDS(obs, reward, done)
};

struct Transition : tensordict::TensorClass<Transition> {
  TENSORDICT_TENSORCLASS(Transition)
  TENSORDICT_FIELDS(obs, action)
  TENSORDICT_CLASS_FIELDS(Next, next)
};

namespace {

constexpr int64_t kEnvs = 4;
constexpr int64_t kSteps = 16;
constexpr int64_t kObsDim = 3;

// One step of every environment: a random walk whose reward is the distance
// travelled.
Transition step(const at::Tensor& obs) {
  const at::Tensor action = torch::randint(0, 2, {kEnvs}, torch::kLong);
  const at::Tensor next_obs =
      obs + (action.to(torch::kFloat) * 2 - 1).unsqueeze(-1);
  Transition t(TensorDict({{"obs", obs}, {"action", action}}, {kEnvs}));
  t.set_next(Next(
      TensorDict({{"obs", next_obs},
                  {"reward", (next_obs - obs).abs().sum(-1, /*keepdim=*/true)},
                  {"done", next_obs.abs().amax(-1, /*keepdim=*/true) > 3}},
                 {kEnvs})));
  return t;
}

}  // namespace

int main() {
  torch::manual_seed(0);
  ReplayBuffer rb(ReplayBufferOptions(1000).seed(0));
  at::Tensor obs = torch::zeros({kEnvs, kObsDim});
  for (int64_t s = 0; s < kSteps; ++s) {
    Transition t = step(obs);
    rb.extend(t.tensordict());
    obs = t.next().obs();
  }
  std::printf("stored %lld transitions\n", static_cast<long long>(rb.size()));

  auto [batch, info] = tensordict::sample_as<Transition>(rb, 32);
  TORCH_CHECK(batch.batch_size() == at::IntArrayRef({32}));
  TORCH_CHECK(batch.next().reward().sizes() == at::IntArrayRef({32, 1}));
  // Every reward is the distance between obs and next.obs, one step apart.
  TORCH_CHECK(
      torch::allclose(batch.next().reward().squeeze(-1),
                      (batch.next().obs() - batch.obs()).abs().sum(-1)));
  std::printf("sampled a batch of %lld, mean reward %.1f\n",
              static_cast<long long>(batch.batch_size()[0]),
              batch.next().reward().mean().item<double>());

  // Typed rows and writes.
  Transition first = batch[0];
  batch[1] = first;
  TORCH_CHECK(torch::equal(batch.obs()[1], first.obs()));

  // Python's tensorclass layout on disk.
  char tmpl[] = "/tmp/typed_transitions_XXXXXX";
  TORCH_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a directory");
  const std::string dir = std::string(tmpl) + "/batch";
  batch.memmap_(dir);
  Transition back = Transition::load_memmap(dir);
  TORCH_CHECK(torch::equal(back.next().obs(), batch.next().obs()));
  std::printf("saved and loaded back %lld typed rows\n",
              static_cast<long long>(back.batch_size()[0]));
  std::system(("rm -rf '" + std::string(tmpl) + "'").c_str());  // NOLINT
  return 0;
}
