// split_trajectories (tensordict/collectors.h): TorchRL's
// `split_trajectories(batch, prefix="collector")`.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "tensordict/collectors.h"

namespace tensordict {

TensorDict split_trajectories(const TensorDict& batch) {
  const NestedKey ids_key({"collector", "traj_ids"});
  const NestedKey mask_key({"collector", "mask"});
  TORCH_CHECK_VALUE(!batch.batch_size().empty(),
                    "split_trajectories: the batch has no dims (it must be "
                    "[*B, T])");
  TORCH_CHECK_VALUE(batch.contains(ids_key),
                    "split_trajectories: the batch has no entry ",
                    ids_key.str());
  const at::Tensor ids =
      batch.get(ids_key).reshape({-1}).to(at::kCPU, at::kLong).contiguous();
  // The runs of equal ids, in row-major order (unique_consecutive).
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0, n = ids.numel(); i < n; ++i) {
    if (i == 0 || id[i] != id[i - 1]) {
      starts.push_back(i);
      lengths.push_back(0);
    }
    ++lengths.back();
  }
  const int64_t steps = batch.batch_size().back();
  const bool whole_rows =
      std::all_of(lengths.begin(), lengths.end(),
                  [&](int64_t len) { return len == steps; });
  if (whole_rows) {
    TensorDict out = batch.copy();
    out.set(mask_key,
            at::ones(batch.batch_size(), at::TensorOptions(at::kBool).device(
                                             batch.get(ids_key).device())));
    return batch.batch_size().size() == 1 ? out.unsqueeze(0) : out;
  }
  const int64_t runs = static_cast<int64_t>(lengths.size());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const TensorDict flat = batch.reshape({-1});
  TensorDict out = flat.apply(
      [&](const at::Tensor& leaf) {
        std::vector<int64_t> shape = {runs, longest};
        shape.insert(shape.end(), leaf.sizes().begin() + 1, leaf.sizes().end());
        at::Tensor padded = at::zeros(shape, leaf.options());
        for (int64_t r = 0; r < runs; ++r) {
          padded[r]
              .narrow(0, 0, lengths[r])
              .copy_(leaf.narrow(0, starts[r], lengths[r]));
        }
        return padded;
      },
      std::vector<int64_t>{runs, longest});
  at::Tensor mask = at::zeros({runs, longest}, at::kBool);
  for (int64_t r = 0; r < runs; ++r) {
    mask[r].narrow(0, 0, lengths[r]).fill_(true);
  }
  out.set(mask_key, mask.to(batch.get(ids_key).device()));
  return out;
}

}  // namespace tensordict
