// tensordict/jit.h — TensorDicts as TorchScript values, and scripted modules
// called on TensorDicts.
//
// A policy trained in Python and saved with `torch.jit.save` runs in C++ on
// a TensorDict when its `forward` takes and returns `Dict[str, Tensor]`:
//
//   torch::jit::Module policy = torch::jit::load("policy.pt");
//   TensorDict out = tensordict::forward(policy, obs);   // obs: batch [E]
//
// Conversion. `to_ivalue` turns a dict into a `c10::Dict` with string keys,
// in the dict's key order: a level that holds only tensors is a
// `Dict[str, Tensor]`, a level of sub-dicts that all have the same type is a
// `Dict[str, <that type>]` (`Dict[str, Dict[str, Tensor]]`, ...), and any
// other level is a `Dict[str, Any]`. These are the types TorchScript checks
// arguments against. The tensors are the dict's own (no copy). Non-tensor
// data has no TorchScript form and is an error naming its key.
//
// `from_ivalue` goes back: every dict level with string keys becomes a
// level, every tensor a leaf (not copied). Without a batch size, each level's
// batch size is inferred as Python's `auto_batch_size_()` does: sub-dicts
// first, then the longest leading shape shared by all of the level's values
// (a sub-dict counting with its batch size, an empty sub-dict not at all).
// With a batch size, every level gets that one, as Python's
// `TensorDict(dict, batch_size)` does. Anything else (another key type, a
// value that is neither a tensor nor such a dict, leaves that do not start
// with the batch size) is a `c10::Error` naming the key.
//
// Not synchronized; the dict must not change during a call.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <vector>

// TensorDictModule, which also wraps TorchScript modules, and the forward
// declaration of torch::jit::Module.
#include "tensordict/nn.h"
#include "tensordict/tensor_dict.h"

namespace tensordict {

/// `td` as a TorchScript dict (see the top of this file for the types).
///
/// Example:
/// ```
///   c10::IValue v = tensordict::to_ivalue(td);   // Dict[str, Tensor]
///   module.forward({v});
/// ```
[[nodiscard]] c10::IValue to_ivalue(const TensorDict& td);

/// The dict that the TorchScript dict `value` holds, with `batch_size`, or
/// with the batch sizes Python's `auto_batch_size_()` infers when it is
/// unset. `max_batch_dims` bounds the inferred batch sizes (Python's
/// `auto_batch_size_(batch_dims)`); it is ignored when `batch_size` is set.
[[nodiscard]] TensorDict from_ivalue(
    const c10::IValue& value,
    c10::optional<std::vector<int64_t>> batch_size = c10::nullopt,
    c10::optional<int64_t> max_batch_dims = c10::nullopt);

/// Calls `module.forward(to_ivalue(input))` and returns its result, which
/// must be a dict of tensors (nested dicts allowed), as a TensorDict. Its
/// batch size is the longest leading part of `input.batch_size()` that every
/// value of the result starts with: a module that keeps the batch dims
/// returns a dict of `input`'s batch size, one that reduces them a dict of
/// batch size []. Sub-dicts get their batch sizes as `from_ivalue` infers
/// them (at most `input.batch_dims()` dims), or the root's when those depart
/// from `input`'s. Errors of the module (its argument type checks included)
/// are rethrown as `c10::Error`s that start with "forward: ".
[[nodiscard]] TensorDict forward(torch::jit::Module& module,
                                 const TensorDict& input);

}  // namespace tensordict
