#include "core/tree.h"

#include "core/internal.h"

namespace tensordict {
namespace detail {

std::vector<at::Tensor> leaf_tensors(const TensorDictImpl& root) {
  std::vector<at::Tensor> out;
  out.reserve(root.nodes.size());
  for_each_leaf(root, [&](const at::Tensor& t) { out.push_back(t); });
  return out;
}

void leaf_ptrs(const TensorDictImpl& root,
               std::vector<const at::Tensor*>& out) {
  for_each_leaf(root, [&](const at::Tensor& t) { out.push_back(&t); });
}

namespace {

void gather_pair(const TensorDictImpl& a, const TensorDictImpl& b,
                 std::vector<at::Tensor>& va, std::vector<at::Tensor>& vb) {
  for (const auto& n : a.nodes) {
    const Node* m = b.find(n.key);
    // check_same_keys ran first.
    TORCH_CHECK(m != nullptr && n.is_dict() == m->is_dict(), "key ", n.key,
                " differs between the two TensorDicts");
    if (n.is_dict()) {
      gather_pair(*n.dict, *m->dict, va, vb);
    } else {
      va.push_back(n.tensor);
      vb.push_back(m->tensor);
    }
  }
}

}  // namespace

void pair_leaves(const TensorDictImpl& a, const TensorDictImpl& b,
                 const char* op, std::vector<at::Tensor>& va,
                 std::vector<at::Tensor>& vb) {
  check_same_keys(a, b, op);
  va.reserve(a.nodes.size());
  vb.reserve(a.nodes.size());
  gather_pair(a, b, va, vb);
}

ImplPtr rebuild_from(const TensorDictImpl& src, std::vector<at::Tensor> vals,
                     const char* check_op) {
  size_t i = 0;
  return rebuild(
      src, src.batch_size,
      [&](const KeyPath&, const at::Tensor&) { return std::move(vals[i++]); },
      check_op);
}

namespace tree_impl {

void throw_bad_leaf_shape(const char* op, const KeyPath& path,
                          const at::Tensor& t, c10::IntArrayRef batch) {
  TORCH_CHECK(false, op, ": key ", path.key().str(), ": the result's shape ",
              shape_str(t.sizes()), " does not start with the batch_size ",
              shape_str(batch));
}

}  // namespace tree_impl

}  // namespace detail
}  // namespace tensordict
