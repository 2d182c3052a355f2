// SoftUpdate and HardUpdate (tensordict/objectives.h): TorchRL's target
// network updaters over two modules' parameter dicts.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <tuple>

#include "objectives/loss_common.h"
#include "tensordict/objectives.h"

namespace tensordict {
namespace {

double soft_eps(const SoftUpdateOptions& options) {
  TORCH_CHECK_VALUE(options.eps().has_value() != options.tau().has_value(),
                    "SoftUpdate: give one of eps and tau = 1 - eps");
  const double eps = options.eps() ? *options.eps() : 1.0 - *options.tau();
  TORCH_CHECK_VALUE(eps >= 0.0 && eps <= 1.0, "SoftUpdate: eps = ", eps,
                    " must be within [0, 1]");
  if (eps < 0.5) {
    TORCH_WARN("SoftUpdate: eps = ", eps,
               " < 0.5 moves the target more than halfway each step; did you "
               "mean tau?");
  }
  return eps;
}

// The loss's value network, once it is known to have a target network.
const TensorDictModule& checked_source(const char* what, const DQNLoss& loss) {
  TORCH_CHECK_VALUE(loss.options().delay_value(), what,
                    ": the loss has no target network (delay_value is false)");
  return loss.value_network();
}

}  // namespace

SoftUpdate::SoftUpdate(const DQNLoss& loss, SoftUpdateOptions options)
    : SoftUpdate(checked_source("SoftUpdate", loss), loss.target_network(),
                 options) {}

SoftUpdate::SoftUpdate(const TensorDictModule& source,
                       const TensorDictModule& target,
                       SoftUpdateOptions options)
    : eps_(soft_eps(options)) {
  std::tie(source_, target_) =
      detail::pair_targets("SoftUpdate", source, target);
}

void SoftUpdate::step() const {
  const c10::NoGradGuard no_grad;
  target_.lerp_(source_, 1.0 - eps_);
}

HardUpdate::HardUpdate(const DQNLoss& loss,
                       int64_t value_network_update_interval)
    : HardUpdate(checked_source("HardUpdate", loss), loss.target_network(),
                 value_network_update_interval) {}

HardUpdate::HardUpdate(const TensorDictModule& source,
                       const TensorDictModule& target,
                       int64_t value_network_update_interval)
    : interval_(value_network_update_interval) {
  TORCH_CHECK_VALUE(interval_ >= 0,
                    "HardUpdate: value_network_update_interval must be >= 0, "
                    "got ",
                    interval_);
  std::tie(source_, target_) =
      detail::pair_targets("HardUpdate", source, target);
}

void HardUpdate::step() {
  if (counter_ == interval_) {
    const c10::NoGradGuard no_grad;
    target_.update_(source_);
    counter_ = 0;
  } else {
    ++counter_;
  }
}

}  // namespace tensordict
