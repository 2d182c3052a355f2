// Internal: non-tensor data, Python tensordict's NonTensorData (one value
// for every element of a batch) and NonTensorStack (a value per element).
//
// A non-tensor entry is a sub-dict level without entries whose
// `non_tensor` is set (see TensorDictImpl): its batch size is the data's,
// which indexing, reshaping and stacking change as they change a sub-dict's.
// The payload is immutable and shared between copies (Python deep-copies;
// for immutable values that is the same). A stack holds its distinct values
// once and, for each element, the index of its value in an int64 tensor of
// the level's batch shape (`ids`), so that indexing, reshaping, expanding and
// stacking a stack are the same tensor ops on `ids` (tree.h's `rebuild`
// applies the leaf function to them, NonTensors::kIndex).
//
// Python's NonTensorStack is a lazy stack of NonTensorData along some batch
// dims (stacks of stacks along several). Indexing every one of those dims
// by an integer leaves one NonTensorData, and Python returns it as such
// (`stack(rows)[1]` holds the value of row 1). A stack records which of its
// batch dims are stack dims (`stack_dims`); index and shape ops carry them
// (tree.h's DimMap), and a stack left with none becomes NonTensorData.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace detail {

using ordered_json = nlohmann::ordered_json;

// The implicit default constructor is noexcept, as ordered_json's is, which
// reaches a throw that a null value never takes (nlohmann NOLINTs it too).
// NOLINTNEXTLINE(bugprone-exception-escape)
struct NonTensor {
  bool is_stack = false;
  /// NonTensorData: the value of every element.
  ordered_json data;
  /// NonTensorStack: element e (row-major over the level's batch size) is
  /// `(*values)[ids.flatten()[e]]`; ids are int64, on the CPU, contiguous.
  std::shared_ptr<const std::vector<ordered_json>> values;
  at::Tensor ids;
  /// NonTensorStack: per batch dim of its level, whether it is a stack dim;
  /// empty: every dim is (stacks that Python loads from disk or makes by an
  /// indexed write are stacks along every dim).
  std::vector<char> stack_dims;
};
using NonTensorPtr = std::shared_ptr<const NonTensor>;

/// A level holding `value` as NonTensorData of batch size `batch`. Throws a
/// ValueError (naming `key`) for a value JSON cannot hold as Python does: a
/// non-finite number.
ImplPtr make_non_tensor_data(ordered_json value, std::vector<int64_t> batch,
                             c10::optional<at::Device> device,
                             const std::string& key);
/// The payload of a stack of `values` (ids: int64 of the level's batch
/// shape) along `stack_dims` (see NonTensor; empty: every dim). With no
/// stack dim left (batch size [] included) it is NonTensorData of its
/// elements' one value.
NonTensorPtr non_tensor_stack(
    std::shared_ptr<const std::vector<ordered_json>> values, at::Tensor ids,
    std::vector<char> stack_dims = {});

/// Whether a non-tensor level is a NonTensorStack.
inline bool non_tensor_is_stack(const TensorDictImpl& level) {
  return level.non_tensor->is_stack;
}
/// `py_repr(v)`, cut to about 50 characters (for error messages).
std::string short_py_repr(const ordered_json& v);

/// Throws "<op>: key K holds non-tensor data, which <what> cannot hold" for
/// the first non-tensor entry of `root` (for tensor-only storage).
void check_no_non_tensor(const char* op, const char* what,
                         const TensorDictImpl& root);

/// Python's `tolist()` of a non-tensor level: nested lists over its batch
/// size (NonTensorData repeats its value), the value itself for batch [].
ordered_json non_tensor_tolist(const TensorDictImpl& level);
/// What `get_non_tensor` returns: NonTensorData's value, a stack's tolist.
ordered_json non_tensor_value(const TensorDictImpl& level);

/// Python's `==` on values: numbers and booleans by value (1 == 1.0 ==
/// True), NaN unequal to itself, dicts regardless of key order.
bool py_equal(const ordered_json& a, const ordered_json& b);

/// Python's `==` of two non-tensor levels of one batch size: for two
/// NonTensorData or two stacks, a bool tensor of the batch shape, element by
/// element (`py_equal`); for NonTensorData and a stack, undefined (Python
/// gives None values, see `non_tensor_none`).
at::Tensor non_tensor_eq(const TensorDictImpl& a, const TensorDictImpl& b);
/// `level`'s non-tensor data with None for every value (NonTensorData(None),
/// or a stack of None along the same dims): what Python's comparisons give
/// for a non-tensor entry compared with a scalar, or NonTensorData with a
/// stack.
NonTensorPtr non_tensor_none(const TensorDictImpl& level);

/// Appends the values of the non-tensor level `level` to `values`; returns
/// its elements' ids into `values` (int64, the level's batch shape).
at::Tensor append_elements(std::vector<ordered_json>& values,
                           const TensorDictImpl& level);

/// `stack` (`stacking`) or `cat` of the non-tensor levels `items` along
/// `dim`, into a level of batch size `batch` on `device`. As in Python:
/// NonTensorData inputs with equal values stay NonTensorData; otherwise the
/// result is a stack of every element.
ImplPtr join_non_tensor(const std::vector<const TensorDictImpl*>& items,
                        int64_t dim, bool stacking, std::vector<int64_t> batch,
                        c10::optional<at::Device> device);

/// Python's repr of a non-tensor level:
/// "NonTensorData(data=<str>, batch_size=torch.Size([..]), device=<dev>)",
/// or the multi-line NonTensorStack form.
std::string non_tensor_repr(const TensorDictImpl& level);
/// Python's `repr()` of a float ("1.0", "1e-05", "1e+16", "nan").
std::string py_float_repr(double v);
/// Python's `str()` and `repr()` of a value.
std::string py_str(const ordered_json& v);
std::string py_repr(const ordered_json& v);

}  // namespace detail
}  // namespace tensordict
