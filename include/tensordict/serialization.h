// tensordict/serialization.h — exchanging TensorDicts with Python's torch.load.
//
// Memory-mapped directories and single-file `save`/`load` are methods of
// `TensorDict` (tensor_dict.h). This header adds the pickle route.
#pragma once

#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Serializes `td` as a nested `dict` of tensors (sub-dicts become nested
/// dicts, insertion order kept) with `torch::pickle_save`. Python reads the
/// bytes with `torch.load(io.BytesIO(data))`, or from a file they were
/// written to.
///
/// Example:
/// ```
///   std::vector<char> bytes = tensordict::pickle_save(td);
///   std::ofstream("td.pt", std::ios::binary).write(bytes.data(), bytes.size());
/// ```
[[nodiscard]] std::vector<char> pickle_save(const TensorDict& td);

}  // namespace tensordict
