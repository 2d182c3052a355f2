// The key check of tensor classes (tensordict/tensorclass.h): a dict fits a
// class when each of its keys is a field holding what the field holds. The
// rest of a tensor class is its header's templates, and its memmap layout
// is io/memmap.cpp's and io/memmap_load.cpp's.
#include "tensordict/tensorclass.h"

#include "core/internal.h"
#include "core/non_tensor.h"

#include <c10/util/Exception.h>

#include <utility>

#include <string>
#include <vector>

namespace tensordict {
namespace detail {

namespace {

const TensorClassField* find_field(const std::vector<TensorClassField>& fields,
                                   const std::string& name) {
  for (const auto& f : fields) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

const char* kind_of(const Node& n) {
  return !n.is_dict()        ? "a tensor"
         : n.is_non_tensor() ? "non-tensor data"
                             : "a dict";
}

NestedKey key_at(const std::vector<std::string>& where,
                 const std::string& name) {
  std::vector<std::string> path = where;
  path.push_back(name);
  return NestedKey(std::move(path));
}

}  // namespace

// Walks the level's nodes directly: a check of a valid dict (every typed
// sample's) allocates nothing but the path of each class field.
void check_tensorclass_keys(const TensorDict& td, const char* cls,
                            const std::vector<std::string>& where,
                            const std::vector<TensorClassField>& tensor_fields,
                            const std::vector<TensorClassField>& class_fields) {
  for (const Node& n : TensorDictImpl::of(td).nodes) {
    if (const TensorClassField* f = find_field(tensor_fields, n.key)) {
      TORCH_CHECK_TYPE(!n.is_dict(), cls, ": key ", key_at(where, n.key).str(),
                       " must hold a tensor (the field ", f->name, " of ", cls,
                       "), got ", kind_of(n));
      continue;
    }
    if (const TensorClassField* f = find_field(class_fields, n.key)) {
      TORCH_CHECK_TYPE(n.is_dict() && !n.is_non_tensor(), cls, ": key ",
                       key_at(where, n.key).str(),
                       " must hold a dict (the field ", f->name, " of ", cls,
                       "), got ", kind_of(n));
      std::vector<std::string> path = where;
      path.push_back(n.key);
      f->check(TensorDictImpl::wrap(n.dict), path);
      continue;
    }
    std::string names;
    for (const auto* fields : {&tensor_fields, &class_fields}) {
      for (const auto& f : *fields) {
        names += (names.empty() ? "" : ", ") + std::string(f.name);
      }
    }
    TORCH_CHECK_VALUE(false, cls, ": key ", key_at(where, n.key).str(),
                      " is not a field of ", cls, " (its fields: ", names, ")");
  }
}

}  // namespace detail
}  // namespace tensordict
