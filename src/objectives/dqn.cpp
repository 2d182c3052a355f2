// DQNLoss (tensordict/objectives.h): TorchRL 0.14's DQNLoss.forward, with
// the target network's values bootstrapped through a ValueEstimator.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "core/names.h"
#include "objectives/loss_common.h"
#include "rl/returns_keys.h"
#include "tensordict/objectives.h"

namespace tensordict {
namespace {

constexpr const char* kWhat = "DQNLoss";

// The estimator, reading the values where the loss puts them.
ValueEstimator make_estimator(const DQNLossOptions& options) {
  ValueEstimator e = options.value_estimator().has_value()
                         ? *options.value_estimator()
                         : ValueEstimator::td0(0.99);
  TORCH_CHECK_VALUE(e.kind() == ValueEstimator::Kind::kTD0 ||
                        e.kind() == ValueEstimator::Kind::kTD1 ||
                        e.kind() == ValueEstimator::Kind::kTDLambda,
                    "DQNLoss: the value estimator must be TD0Estimator, "
                    "TD1Estimator or TDLambdaEstimator, got ",
                    e.name());
  e.keys(EstimatorKeys(e.keys())
             .value("chosen_action_value")
             .next_value({"next", "chosen_action_value"}));
  return e;
}

void check_options(const DQNLossOptions& options) {
  TORCH_CHECK_VALUE(!options.double_dqn() || options.delay_value(),
                    "DQNLoss: double_dqn=True requires delay_value=True");
}

// Q(s, a) of the stored action `action`, `[*B]`, checked against `q`.
at::Tensor chosen(const at::Tensor& q, at::Tensor action, DQNActionSpace space,
                  const DQNKeys& keys) {
  if (space == DQNActionSpace::CATEGORICAL) {
    TORCH_CHECK(!at::isFloatingType(action.scalar_type()) &&
                    action.scalar_type() != at::kBool,
                kWhat, ": the categorical action (key ", keys.action(), ") is ",
                detail::dtype_name(action.scalar_type()),
                ", expected an integer index");
    if (action.dim() != q.dim()) action = action.unsqueeze(-1);
    std::vector<int64_t> want = q.sizes().vec();
    want.back() = 1;
    TORCH_CHECK(action.sizes() == at::IntArrayRef(want), kWhat,
                ": the categorical action (key ", keys.action(), ", shape ",
                detail::shape_str(action.sizes()),
                ") does not index the action values (key ", keys.action_value(),
                ", shape ", detail::shape_str(q.sizes()),
                "): expected the batch shape, or it + [1]");
    return q.gather(-1, action.to(at::kLong)).squeeze(-1);
  }
  TORCH_CHECK(action.sizes() == q.sizes(), kWhat, ": the one-hot action (key ",
              keys.action(), ", shape ", detail::shape_str(action.sizes()),
              ") differs in shape from the action values (key ",
              keys.action_value(), ", shape ", detail::shape_str(q.sizes()),
              "); an action index needs "
              "DQNLossOptions().action_space(DQNActionSpace::CATEGORICAL)");
  return (q * action.to(at::kFloat)).sum(-1);
}

}  // namespace

DQNLoss::DQNLoss(TensorDictModule value_network,
                 TensorDictModule target_network, DQNLossOptions options)
    : value_network_(std::move(value_network)),
      target_network_(std::move(target_network)),
      options_(std::move(options)),
      estimator_(make_estimator(options_)) {
  check_options(options_);
  TORCH_CHECK_VALUE(options_.delay_value(),
                    "DQNLoss: a target network is given but delay_value is "
                    "false; use DQNLoss(value_network, options)");
  (void)detail::pair_targets(kWhat, value_network_, *target_network_);
}

DQNLoss::DQNLoss(TensorDictModule value_network, DQNLossOptions options)
    : value_network_(std::move(value_network)),
      options_(std::move(options)),
      estimator_(make_estimator(options_)) {
  check_options(options_);
  TORCH_CHECK_VALUE(!options_.delay_value(),
                    "DQNLoss: delay_value needs a target network: "
                    "DQNLoss(value_network, target_network, options)");
}

TensorDict DQNLoss::operator()(const TensorDict& batch) const {
  const TensorDict td = batch.copy();
  value_network_(td);
  const at::Tensor q = detail::input_tensor(
      kWhat, "the value network's action values", td, keys_.action_value());
  const at::Tensor pred =
      chosen(q, detail::input_tensor(kWhat, "action", td, keys_.action()),
             options_.action_space(), keys_);

  TORCH_CHECK(td.contains("next"), kWhat, ": missing key ", NestedKey("next"),
              " (the next step's observations, rewards and flags)");
  const TensorDict next = td.get_tensordict("next");
  at::Tensor next_value;
  {
    const c10::NoGradGuard no_grad;
    const TensorDict target_next = next.copy();
    target_network()(target_next);
    const at::Tensor next_q =
        detail::input_tensor(kWhat, "the target network's action values",
                             target_next, keys_.action_value());
    if (options_.double_dqn()) {
      const TensorDict online_next = next.copy();
      value_network_(online_next);
      const at::Tensor pick =
          detail::input_tensor(kWhat, "the value network's action values",
                               online_next, keys_.action_value());
      next_value = next_q.gather(-1, pick.argmax(-1, /*keepdim=*/true));
    } else {
      next_value = std::get<0>(next_q.max(-1, /*keepdim=*/true));
    }
    td.set("chosen_action_value", pred.detach().unsqueeze(-1));
    next.set("chosen_action_value", next_value);
  }
  const at::Tensor target = estimator_.estimate(td).value_target.squeeze(-1);

  at::Tensor weights;
  if (options_.use_prioritized_weights() &&
      td.contains(keys_.priority_weight())) {
    weights = detail::input_tensor(kWhat, "priority weight", td,
                                   keys_.priority_weight());
  }
  const at::Tensor loss = detail::reduce_loss(
      kWhat, distance_loss(pred, target, options_.loss_function()), td,
      options_.reduction(), weights);
  // Written last: an error above leaves the batch unchanged.
  batch.set(keys_.priority(), (pred.detach() - target).pow(2).unsqueeze(-1));
  TensorDict out;
  out.set("loss", loss);
  return out;
}

}  // namespace tensordict
