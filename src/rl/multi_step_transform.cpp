// MultiStepTransform (tensordict/multi_step.h): the kept steps joined in
// front of each batch, `multi_step` over both, the complete windows out and
// a copy of the last `n_steps` steps kept.
#include "tensordict/multi_step.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "tensordict/functional.h"

namespace tensordict {

MultiStepTransform::MultiStepTransform(int64_t n_steps, double gamma,
                                       MultiStepKeys keys)
    : n_steps_(n_steps), gamma_(gamma), keys_(std::move(keys)) {
  TORCH_CHECK_VALUE(n_steps >= 1,
                    "MultiStepTransform: n_steps must be at least 1, got ",
                    n_steps);
  TORCH_CHECK_VALUE(gamma > 0.0 && gamma <= 1.0,
                    "MultiStepTransform: gamma must be in (0, 1], got ", gamma);
}

TensorDict MultiStepTransform::operator()(const TensorDict& batch) {
  TORCH_CHECK(batch.batch_dims() >= 1,
              "MultiStepTransform: the batch needs a time dim (its last "
              "batch dim), got batch size []");
  const int64_t time_dim = batch.batch_dims() - 1;
  TensorDict joined = batch;
  if (!kept_.empty()) {
    try {
      joined = tensordict::cat({kept_, batch}, time_dim);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false,
                  "MultiStepTransform: the batch does not continue the kept "
                  "steps: ",
                  e.msg());
    }
  }
  const int64_t steps = joined.batch_size().back();
  const TensorDict out = multi_step(joined, n_steps_, gamma_, keys_);
  using at::indexing::Ellipsis;
  using at::indexing::Slice;
  TensorDict ready =
      out.index({Ellipsis, Slice(0, std::max<int64_t>(steps - n_steps_, 0))});
  // Kept only once everything above succeeded.
  kept_ = joined
              .index({Ellipsis,
                      Slice(std::max<int64_t>(steps - n_steps_, 0), steps)})
              .clone();
  return ready;
}

void MultiStepTransform::reset() { kept_ = TensorDict(); }

}  // namespace tensordict
