// examples/rollout_buffer.cpp — the code of docs/tutorials/rollout_buffer.md.
//
// Fills a RolloutBuffer from the vectorized CartPole with a random policy,
// adds state values in one batched pass, runs GAE, draws minibatches, and
// checks every claim the tutorial makes (exits nonzero when one fails).
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <set>
#include <string>
#include <vector>

using tensordict::RolloutBuffer;
using tensordict::TensorDict;

// A stand-in critic: any function of the observation, batched over [T, E].
at::Tensor critic(const at::Tensor& obs) {
  return obs.sum(-1, /*keepdim=*/true) * 0.1;
}

std::vector<float> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

int main() {
  torch::manual_seed(0);
  // ---- Filling the buffer
  const int64_t T = 64, E = 4;
  // E CartPoles, with actions 0 (push left) and 1 (push right).
  tensordict::CartPoleEnv env({E}, /*categorical_action_encoding=*/true);
  env.set_seed(0);
  RolloutBuffer buffer(T, E);
  TORCH_CHECK(buffer.data().empty());  // nothing allocated yet

  TensorDict td = env.reset();
  for (int64_t t = 0; t < T; ++t) {
    td.set("action", torch::randint(2, {E}));
    // The step (td with its ("next", ...) keys), and the next step's input,
    // the envs whose episode ended reset.
    auto [step, next] = env.step_and_maybe_reset(td);
    buffer.step(t, step);  // t == 0 allocates [T, E, ...]; then in place
    td = next;
  }
  std::cout << buffer.data() << "\n";
  const at::Tensor stored_obs = buffer.data().get("observation");
  TORCH_CHECK(stored_obs.sizes() == c10::IntArrayRef({T, E, 4}));

  // ---- Values and GAE
  TensorDict data = buffer.data();
  data.set("state_value", critic(data.get("observation")));
  data.set({"next", "state_value"}, critic(data.get({"next", "observation"})));
  buffer.compute_gae(/*gamma=*/0.99, /*lambda=*/0.95);

  const at::Tensor advantage = data.get("advantage");  // [T, E, 1]
  TORCH_CHECK(advantage.sizes() == c10::IntArrayRef({T, E, 1}));
  TORCH_CHECK(
      data.get("value_target").allclose(advantage + data.get("state_value")));
  // The same numbers from the free function (done already includes
  // truncated here, as CartPole sets both).
  auto [adv, target] = tensordict::gae(
      data.get({"next", "reward"}), data.get("state_value"),
      data.get({"next", "state_value"}), data.get({"next", "done"}),
      data.get({"next", "terminated"}), 0.99, 0.95);
  TORCH_CHECK(adv.equal(advantage) && target.equal(data.get("value_target")));
  TORCH_CHECK(data.get({"next", "done"}).any().item<bool>(),
              "a random policy ends episodes within 64 steps");

  // ---- Missing values are named
  RolloutBuffer no_values(T, E);
  const TensorDict first = buffer.data()[0];
  no_values.step(0, first.exclude({"state_value"}));
  try {
    no_values.compute_gae(0.99, 0.95);
    TORCH_CHECK(false, "compute_gae should have thrown");
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
    TORCH_CHECK(e.msg().find("missing key state_value") != std::string::npos);
  }

  // ---- Minibatches
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(/*seed=*/0);
  std::set<int64_t> seen;
  for (const TensorDict& mb : buffer.minibatches(4, gen)) {
    TORCH_CHECK(mb.batch_size() == c10::IntArrayRef({T * E / 4}));  // [64]
    const at::Tensor mb_adv = mb.get("advantage");                  // [64, 1]
    TORCH_CHECK(mb_adv.sizes() == c10::IntArrayRef({T * E / 4, 1}));
    // Rows are whole transitions: find each one in the buffer.
    const at::Tensor eq =
        (stored_obs.view({T * E, 1, 4}) == mb.get("observation").unsqueeze(0))
            .all(-1);  // [T * E, 64]
    const at::Tensor row = eq.to(at::kFloat).argmax(0);
    for (int64_t i = 0; i < row.size(0); ++i)
      seen.insert(row[i].item<int64_t>());
  }
  TORCH_CHECK(static_cast<int64_t>(seen.size()) == T * E,
              "the minibatches cover every row once");

  // ---- Truncation vs termination, by hand
  const at::Tensor reward = torch::tensor({1.0, 1.0, 1.0});
  const at::Tensor value = torch::tensor({2.0, 4.0, 8.0});
  const at::Tensor next_value = torch::tensor({4.0, 10.0, 16.0});
  const at::Tensor done = torch::tensor({false, true, false});
  const at::Tensor never = torch::tensor({false, false, false});
  const auto truncated =
      tensordict::gae(reward, value, next_value, done, never, 0.5, 0.5);
  const auto terminated =
      tensordict::gae(reward, value, next_value, done, done, 0.5, 0.5);
  fmt::print("truncated:  [{}]\n",
             fmt::join(values(truncated.advantage), ", "));
  fmt::print("terminated: [{}]\n",
             fmt::join(values(terminated.advantage), ", "));
  TORCH_CHECK(truncated.advantage.equal(torch::tensor({1.5, 2.0, 1.0})));
  TORCH_CHECK(terminated.advantage.equal(torch::tensor({0.25, -3.0, 1.0})));

  // ---- Other return estimators
  const at::Tensor td1 =
      tensordict::td1_return(0.5, next_value, reward, done, never, 0);
  const at::Tensor td_lambda = tensordict::td_lambda_return(
      0.5, 0.5, next_value, reward, done, never, 0);
  fmt::print("td1:       [{}]\n", fmt::join(values(td1), ", "));
  fmt::print("td_lambda: [{}]\n", fmt::join(values(td_lambda), ", "));
  TORCH_CHECK(td1.equal(torch::tensor({4.0, 6.0, 9.0})));
  TORCH_CHECK(td_lambda.equal(torch::tensor({3.5, 6.0, 9.0})));
  buffer.compute(tensordict::ValueEstimator::td_lambda(0.99, 0.95));
  TORCH_CHECK(
      data.get("advantage")
          .allclose(data.get("value_target") - data.get("state_value")));
  std::cout << "all checks passed\n";
}
