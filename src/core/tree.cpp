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

// The keys of the leaves and empty sub-dicts of `a` that `b` lacks, appended
// to `out`, and the first leaf-vs-dict conflict.
void one_sided_difference(const TensorDictImpl& a, const TensorDictImpl& b,
                          std::vector<NestedKey>& out,
                          c10::optional<NestedKey>& kind) {
  pair_walk<Pairing::kInto>(
      a, &b, [&](const KeyPath& path, const Match<const TensorDictImpl>& m) {
        if (m.b != nullptr && m.b->is_dict() != m.a.is_dict()) {
          if (!kind) kind = path.key();
          return Next::kSkip;
        }
        if (m.a.is_dict() && !m.a.dict->nodes.empty()) return Next::kDescend;
        if (m.b == nullptr) out.push_back(path.key());
        return Next::kSkip;
      });
}

}  // namespace

bool same_keys(const TensorDictImpl& a, const TensorDictImpl& b) {
  return pair_walk<Pairing::kSameKeys>(
      a, &b, [](const Match<const TensorDictImpl>& m) {
        return m.a.is_dict() ? Next::kDescend : Next::kSkip;
      });
}

void throw_key_difference(const char* op, const TensorDictImpl& a,
                          const TensorDictImpl& b, const char* a_name,
                          const char* b_name) {
  std::vector<NestedKey> missing, extra;  // from b, from a
  c10::optional<NestedKey> kind, unused;
  one_sided_difference(a, b, missing, kind);
  one_sided_difference(b, a, extra, unused);
  if (kind) {
    const bool a_dict = lookup(a, *kind)->is_dict();
    TORCH_CHECK_TYPE(false, op, ": key ", kind->str(), " is a ",
                     a_dict ? "TensorDict" : "tensor", " in ", a_name,
                     " but a ", a_dict ? "tensor" : "TensorDict", " in ",
                     b_name);
  }
  // Only the sides that lack something are named.
  std::string msg = std::string(op) + ": TensorDicts have different keys: ";
  if (!extra.empty())
    msg += "missing from " + std::string(a_name) + ": " + key_vec_str(extra);
  if (!extra.empty() && !missing.empty()) msg += "; ";
  if (!missing.empty())
    msg += "missing from " + std::string(b_name) + ": " + key_vec_str(missing);
  TORCH_CHECK(false, msg);
}

void pair_leaves(const TensorDictImpl& a, const TensorDictImpl& b,
                 const char* op, std::vector<at::Tensor>& va,
                 std::vector<at::Tensor>& vb) {
  va.reserve(a.nodes.size());
  vb.reserve(a.nodes.size());
  const bool same = pair_walk<Pairing::kSameKeys>(
      a, &b, [&](const Match<const TensorDictImpl>& m) {
        if (m.a.is_dict()) return Next::kDescend;
        va.push_back(m.a.tensor);
        vb.push_back(m.b->tensor);
        return Next::kSkip;
      });
  if (!same) {
    throw_key_difference(op, a, b, "the left-hand side", "the right-hand side");
  }
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
