// The key side of the estimators' TensorDict forms (ValueEstimator,
// RolloutBuffer::compute and compute_gae): reading each input by key with
// an error that names the key, and checking, before anything is written,
// that the outputs can be stored.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "tensordict/nested_key.h"
#include "tensordict/returns.h"
#include "tensordict/tensor_dict.h"

namespace tensordict::detail {

// `data`'s tensor at `key`, for the estimators, multi_step and the losses:
// an error starting with `fn`, naming the key and its role (then `hint`
// and `hint_end`) when the key is missing, or when it holds a TensorDict.
[[nodiscard]] at::Tensor input_tensor(const char* fn, const char* role,
                                      const TensorDict& data,
                                      const NestedKey& key,
                                      const char* hint = "",
                                      const char* hint_end = "");

class EstimatorInputs {
 public:
  // `fn` starts every error; `before` ends the hint for missing values
  // ("... before compute_gae").
  EstimatorInputs(const TensorDict& data, const EstimatorKeys& keys,
                  const char* fn, const char* before)
      : data_(data), keys_(keys), fn_(fn), before_(before) {}

  // The value: present, a tensor, floating point (a TypeError otherwise).
  [[nodiscard]] at::Tensor value() const;
  // An input shaped like `value`.
  [[nodiscard]] at::Tensor tensor(const char* role, const NestedKey& key,
                                  const at::Tensor& value) const;
  // A flag shaped like `value`; bool unless `numeric`.
  [[nodiscard]] at::Tensor flag(const char* role, const NestedKey& key,
                                const at::Tensor& value, bool numeric) const;
  // Done, OR-ed with the truncated key when present.
  [[nodiscard]] at::Tensor done(const at::Tensor& value, bool numeric) const;
  // The tensor at `key`, or an undefined one when the key is missing.
  [[nodiscard]] at::Tensor optional(const char* role,
                                    const NestedKey& key) const;

 private:
  at::Tensor fetch(const char* role, const NestedKey& key, bool is_value) const;
  void check_shape(const NestedKey& key, const at::Tensor& t,
                   const at::Tensor& value) const;

  const TensorDict& data_;
  const EstimatorKeys& keys_;
  const char* fn_;
  const char* before_;
};

// Throws, naming the key, unless the advantage and value target can be
// stored in `data` (no sub-dict at the key, no tensor on the way to it).
void check_estimator_outputs(const TensorDict& data, const EstimatorKeys& keys,
                             const char* fn);

}  // namespace tensordict::detail
