// tensordict/tensordict.h — the umbrella header of tensordict-cpp.
//
// Brings in the whole public API (`NestedKey`, `TensorDict`, printing,
// transfers between processes, persistence, tensor classes, modules and
// module parameters, distributions and probabilistic modules, the replay
// and rollout buffers, the version) plus
// `<torch/types.h>`, so that code using the library can also write
// `torch::rand(...)` and `torch::indexing::Slice` without further includes.
// For faster compiles, translation units that only pass dicts around may
// include the focused headers (`tensordict/tensor_dict.h`, ...) instead.
#pragma once

#include <torch/types.h>

#include "tensordict/distributed.h"
#include "tensordict/distributions.h"
#include "tensordict/format.h"
#include "tensordict/functional.h"
#include "tensordict/jit.h"
#include "tensordict/lazy_replay_buffer.h"
#include "tensordict/lazy_stack.h"
#include "tensordict/nested_key.h"
#include "tensordict/nn.h"
#include "tensordict/persistence.h"
#include "tensordict/probabilistic.h"
#include "tensordict/replay_buffer.h"
#include "tensordict/returns.h"
#include "tensordict/rollout_buffer.h"
#include "tensordict/tensor_dict.h"
#include "tensordict/tensorclass.h"
#include "tensordict/version.h"
