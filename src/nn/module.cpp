// TensorDictModule / TensorDictSequential (see tensordict/nn.h). The
// TorchScript constructor is in jit/ivalue.cpp, next to the other code that
// needs LibTorch's jit headers.
//
// A call runs the computation (or a sequence's modules, depth first) with
// its results gathered in a dict of their own, `outs`: in-keys are read from
// `outs` first (an earlier module's result), then from the caller's dict.
// The caller's dict changes only at the end, through one all-or-nothing
// `update(outs)`, or one `set` when there is a single result.
#include "tensordict/nn.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "core/internal.h"

namespace tensordict {

namespace {

bool has_key(const std::vector<NestedKey>& keys, const NestedKey& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

void check_unique(const char* what, const std::vector<NestedKey>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    TORCH_CHECK_VALUE(
        std::find(keys.begin() + static_cast<std::ptrdiff_t>(i) + 1, keys.end(),
                  keys[i]) == keys.end(),
        "TensorDictModule: ", what, " ", keys[i].str(), " appears twice");
  }
}

}  // namespace

TensorDictModule::TensorDictModule(Function fn, std::vector<NestedKey> in_keys,
                                   std::vector<NestedKey> out_keys,
                                   Wrapped wrapped)
    : fn_(std::move(fn)),
      in_keys_(std::move(in_keys)),
      out_keys_source_(std::move(out_keys)) {
  TORCH_CHECK_VALUE(fn_ != nullptr, "TensorDictModule: the function is empty");
  TORCH_CHECK_VALUE(wrapped.arity == static_cast<size_t>(-1) ||
                        wrapped.arity == in_keys_.size(),
                    "TensorDictModule: the module's forward takes ",
                    wrapped.arity, " tensors, but in_keys has ",
                    in_keys_.size(), " keys");
  check_unique("out_key", out_keys_source_);
  out_keys_ = out_keys_source_;
}

// Python's TensorDictSequential._compute_in_and_out_keys: the in-keys that
// no earlier module writes, in first-read order; the out-keys in write
// order, each at its last occurrence.
TensorDictModule::TensorDictModule(std::vector<TensorDictModule> modules)
    : children_(std::move(modules)) {
  TORCH_CHECK_VALUE(!children_.empty(),
                    "TensorDictSequential: expected at least one module");
  std::vector<NestedKey> written;
  for (const TensorDictModule& m : children_) {
    for (const NestedKey& k : m.in_keys()) {
      if (!has_key(written, k) && !has_key(in_keys_, k)) in_keys_.push_back(k);
    }
    written.insert(written.end(), m.out_keys().begin(), m.out_keys().end());
  }
  for (size_t i = 0; i < written.size(); ++i) {
    if (std::find(written.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                  written.end(), written[i]) == written.end()) {
      out_keys_source_.push_back(written[i]);
    }
  }
  out_keys_ = out_keys_source_;
}

TensorDictModule& TensorDictModule::select_out_keys(
    std::vector<NestedKey> keys) {
  for (const NestedKey& k : keys) {
    TORCH_CHECK_VALUE(has_key(out_keys_source_, k),
                      "TensorDictModule::select_out_keys: ", k.str(),
                      " is not an out_key (out_keys: ",
                      detail::key_vec_str(out_keys_source_), ")");
  }
  check_unique("selected out_key", keys);
  out_keys_ = std::move(keys);
  return *this;
}

std::vector<at::Tensor> TensorDictModule::compute(
    const TensorDict& td, const TensorDict* outs) const {
  std::vector<at::Tensor> in;
  in.reserve(in_keys_.size());
  for (const NestedKey& k : in_keys_) {
    if (outs != nullptr && outs->contains(k)) {
      in.push_back(outs->get(k));
      continue;
    }
    TORCH_CHECK_INDEX(td.contains(k), "TensorDictModule: in_key ", k.str(),
                      " is not in the dict (keys: ",
                      detail::key_list_str(detail::TensorDictImpl::of(td)),
                      ")");
    in.push_back(td.get(k));
  }
  std::vector<at::Tensor> out = fn_(in);
  TORCH_CHECK(out.size() == out_keys_source_.size(),
              "TensorDictModule: the computation returned ", out.size(),
              " tensors for ", out_keys_source_.size(), " out_keys ",
              detail::key_vec_str(out_keys_source_));
  return out;
}

void TensorDictModule::run_into(const TensorDict& td,
                                const TensorDict& outs) const {
  if (children_.empty()) {
    std::vector<at::Tensor> results = compute(td, &outs);
    for (size_t i = 0; i < results.size(); ++i) {
      if (has_key(out_keys_, out_keys_source_[i])) {
        outs.set(out_keys_source_[i], results[i]);
      }
    }
    return;
  }
  for (const TensorDictModule& m : children_) m.run_into(td, outs);
  if (out_keys_.size() == out_keys_source_.size()) return;
  for (const NestedKey& k : out_keys_source_) {  // the intermediate results
    if (!has_key(out_keys_, k) && outs.contains(k)) outs.erase(k);
  }
}

const TensorDict& TensorDictModule::operator()(const TensorDict& td) const {
  if (children_.empty() && out_keys_source_.size() == 1) {
    // One result: one set, all-or-nothing by itself.
    std::vector<at::Tensor> results = compute(td, nullptr);
    if (!out_keys_.empty()) td.set(out_keys_[0], results[0]);
    return td;
  }
  const TensorDict outs(td.batch_size());
  run_into(td, outs);
  td.update(outs);
  return td;
}

TensorDictSequential::TensorDictSequential(
    std::vector<TensorDictModule> modules)
    : TensorDictModule(std::move(modules)) {}

const TensorDictModule& TensorDictSequential::operator[](size_t i) const {
  TORCH_CHECK_INDEX(i < children().size(), "TensorDictSequential: index ", i,
                    " is out of range for ", children().size(), " modules");
  return children()[i];
}

TensorDictSequential& TensorDictSequential::select_out_keys(
    std::vector<NestedKey> keys) {
  TensorDictModule::select_out_keys(std::move(keys));
  return *this;
}

}  // namespace tensordict
