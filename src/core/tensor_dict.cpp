// The TensorDict container: construction, keys, get/set/erase/rename,
// locking, copies and moves, comparisons. Indexing lives in indexing.cpp,
// indexed writes in write_plan.cpp, tree walks in tree.h.
#include "tensordict/tensor_dict.h"

#include <ATen/ATen.h>
#include <ATen/MapAllocator.h>
#include <ATen/Parallel.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/fork_safety.h"
#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "core/write_plan.h"

namespace tensordict {

using detail::Node;
using detail::TensorDictImpl;
using ImplPtr = std::shared_ptr<TensorDictImpl>;
using namespace detail;  // NOLINT(google-build-using-namespace)

namespace detail {

// Every program that makes a TensorDict links this file: processes it forks
// stay usable after intra-op parallel work (core/fork_safety.h).
const bool kForkHandlerRegistered = register_fork_handler();

ImplPtr make_impl(std::vector<int64_t> batch_size,
                  c10::optional<at::Device> device) {
  auto impl = std::make_shared<TensorDictImpl>();
  impl->batch_size = std::move(batch_size);
  impl->device = device;
  return impl;
}

std::vector<int64_t> concat(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out;
  out.reserve(a.size() + b.size());
  out.insert(out.end(), a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool starts_with(c10::IntArrayRef shape, c10::IntArrayRef prefix) {
  return shape.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), shape.begin());
}

at::Device normalize_device(at::Device d) {
  if (d.is_cuda() && !d.has_index()) return at::Device(at::kCUDA, 0);
  return d;
}

at::Device usable_device(const char* op, at::Device d) {
  d = normalize_device(d);
  if (d.is_cpu() || d.type() == at::kMeta) return d;
  const std::string type = c10::DeviceTypeName(d.type());
  TORCH_CHECK(c10::impl::hasDeviceGuardImpl(d.type()), op, ": device ",
              device_name(d),
              " is not available: this LibTorch was built "
              "without ",
              type, " support");
  if (d.has_index()) {
    // A count (c10::DeviceIndex is int8_t), printed as a number below.
    // NOLINTNEXTLINE(bugprone-signed-char-misuse)
    const int64_t n = c10::impl::getDeviceGuardImpl(d.type())->deviceCount();
    TORCH_CHECK(d.index() < n, op, ": device ", device_name(d),
                " is not available: this machine has ", n, " ", type,
                n == 1 ? " device" : " devices");
  }
  return d;
}

NestedKey prefixed(const NestedKey* prefix, const std::string& key) {
  if (prefix == nullptr) return NestedKey(key);
  return prefix->join(NestedKey(key));
}

void collect_keys(const TensorDictImpl& impl, const NestedKey* prefix,
                  bool include_nested, bool leaves_only,
                  std::vector<NestedKey>& out) {
  if (!include_nested) {
    for (const auto& n : impl.nodes) {
      if (!(n.is_dict() && leaves_only)) out.push_back(prefixed(prefix, n.key));
    }
    return;
  }
  auto key = [&](const KeyPath& path) {
    return prefix == nullptr ? path.key() : prefix->join(path.key());
  };
  visit(
      impl,
      [&](const KeyPath& path, const TensorDictImpl&) {
        if (!leaves_only && !path.parts.empty()) out.push_back(key(path));
      },
      [&](const KeyPath& path, const at::Tensor&) { out.push_back(key(path)); },
      Ignore());
}

std::string key_vec_str(const std::vector<NestedKey>& ks) {
  std::string out = "[";
  for (size_t i = 0; i < ks.size(); ++i) {
    if (i) out += ", ";
    out += ks[i].str();
  }
  return out + "]";
}

std::string key_list_str(const TensorDictImpl& impl) {
  std::vector<NestedKey> keys;
  collect_keys(impl, nullptr, /*include_nested=*/true, /*leaves_only=*/false,
               keys);
  return key_vec_str(keys);
}

// New dict structure (every level, with its saved path and consolidated
// buffer), same tensors.
ImplPtr shallow_copy(const TensorDictImpl& src) {
  return rebuild(
      src, src.batch_size,
      [](const KeyPath&, const at::Tensor& t) { return t; }, nullptr,
      [](const TensorDictImpl& from, TensorDictImpl& to) {
        to.saved_path = from.saved_path;
        to.consolidated = from.consolidated;
        to.non_tensor = from.non_tensor;  // `src` may be non-tensor data
      });
}

// Walks `key` from `root`. Returns the node, or nullptr when some component
// is missing (or an intermediate component is a tensor).
const Node* lookup(const TensorDictImpl& root, const NestedKey& key) {
  const TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const Node* n = cur->find(parts[i]);
    if (n == nullptr || !n->is_dict()) return nullptr;
    cur = n->dict.get();
  }
  return cur->find(parts.back());
}

// The dict holding the last component of `key`, or nullptr.
TensorDictImpl* parent_of(TensorDictImpl& root, const NestedKey& key) {
  TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Node* n = cur->find(parts[i]);
    if (n == nullptr || !n->is_dict()) return nullptr;
    cur = n->dict.get();
  }
  return cur;
}

const Node& lookup_or_throw(const TensorDictImpl& root, const NestedKey& key) {
  const Node* n = lookup(root, key);
  TORCH_CHECK_INDEX(n != nullptr, "key ", key.str(),
                    " not found in TensorDict with keys ", key_list_str(root));
  return *n;
}

NestedKey leaf_key(const TensorDictImpl& root, size_t i) {
  std::vector<NestedKey> keys;
  collect_keys(root, nullptr, /*include_nested=*/true, /*leaves_only=*/true,
               keys);
  return keys.at(i);
}

void check_unlocked(const TensorDictImpl& dict, const char* op,
                    const NestedKey* key) {
  if (!dict.locked) return;
  if (key == nullptr) {
    TORCH_CHECK(false, op,
                ": the TensorDict is locked: its entries cannot be added, "
                "removed, renamed or replaced (unlock_() it first)");
  }
  TORCH_CHECK(false, op, ": key ", key->str(),
              ": the TensorDict is locked: its entries cannot be added, "
              "removed, renamed or replaced (write into existing tensors "
              "with set_() or td[i] = row, or unlock_() it first)");
}

bool reaches(const TensorDictImpl& from, const TensorDictImpl* target) {
  bool found = false;
  for_each_level(from, [&](const TensorDictImpl& level) {
    found = found || &level == target;
  });
  return found;
}

}  // namespace detail

// ===========================================================================
// Entry
// ===========================================================================

Entry::Entry(at::Tensor tensor) : tensor_(std::move(tensor)) {}
Entry::Entry(const TensorDict& dict)
    : dict_(dict.impl_), non_tensor_(dict_->non_tensor != nullptr) {}
Entry::Entry(std::shared_ptr<detail::TensorDictImpl> dict)
    : dict_(std::move(dict)), non_tensor_(dict_->non_tensor != nullptr) {}

namespace {
const char* entry_kind(const Entry& e) {
  return e.is_tensor()       ? "a tensor"
         : e.is_non_tensor() ? "non-tensor data"
                             : "a TensorDict";
}
}  // namespace

const at::Tensor& Entry::tensor() const {
  TORCH_CHECK_TYPE(is_tensor(), "this entry holds ", entry_kind(*this),
                   ", not a tensor");
  return tensor_;
}

TensorDict Entry::tensordict() const {
  TORCH_CHECK_TYPE(is_tensordict(), "this entry holds ", entry_kind(*this),
                   ", not a TensorDict");
  return TensorDict(dict_);
}

nlohmann::ordered_json Entry::non_tensor() const {
  TORCH_CHECK_TYPE(non_tensor_, "this entry holds ", entry_kind(*this),
                   ", not non-tensor data");
  return detail::non_tensor_value(*dict_);
}

// ===========================================================================
// TensorDict: construction and accessors
// ===========================================================================

TensorDict::TensorDict() : impl_(make_impl({}, c10::nullopt)) {}

TensorDict::TensorDict(std::shared_ptr<detail::TensorDictImpl> impl)
    : impl_(std::move(impl)) {}

TensorDict::TensorDict(c10::IntArrayRef batch_size)
    : TensorDict(std::vector<Item>{}, batch_size, c10::nullopt) {}

TensorDict::TensorDict(c10::IntArrayRef batch_size, at::Device device)
    : TensorDict(std::vector<Item>{}, batch_size, device) {}

TensorDict::TensorDict(const std::vector<Item>& items,
                       c10::IntArrayRef batch_size,
                       c10::optional<at::Device> device) {
  for (int64_t d : batch_size) {
    TORCH_CHECK_VALUE(d >= 0, "TensorDict: batch_size ", shape_str(batch_size),
                      " has a negative dimension");
  }
  if (device) device = usable_device("TensorDict", *device);
  impl_ = make_impl(batch_size.vec(), device);
  for (auto& item : items) {
    if (item.second.is_tensor()) {
      set(item.first, item.second.tensor());
    } else {
      set(item.first, TensorDict(item.second.dict_));  // non-tensor data too
    }
  }
}

c10::IntArrayRef TensorDict::batch_size() const { return impl_->batch_size; }
int64_t TensorDict::batch_dims() const { return impl_->batch_dims(); }
int64_t TensorDict::numel() const {
  int64_t n = 1;
  for (int64_t d : impl_->batch_size) n *= d;
  return n;
}
c10::optional<at::Device> TensorDict::device() const { return impl_->device; }
size_t TensorDict::size() const { return impl_->nodes.size(); }
bool TensorDict::empty() const { return impl_->nodes.empty(); }

bool TensorDict::contains(const NestedKey& key) const {
  return lookup(*impl_, key) != nullptr;
}

std::vector<NestedKey> TensorDict::keys(bool include_nested,
                                        bool leaves_only) const {
  std::vector<NestedKey> out;
  out.reserve(impl_->nodes.size());
  collect_keys(*impl_, nullptr, include_nested, leaves_only, out);
  return out;
}

namespace {
// "holds ... ; use ...()" for a TypeError about the node at `key`.
[[noreturn]] void throw_wrong_kind(const NestedKey& key, const Node& n,
                                   const char* wanted) {
  const char* holds = n.is_non_tensor() ? "non-tensor data"
                      : n.is_dict()     ? "a TensorDict"
                                        : "a tensor";
  const char* use = n.is_non_tensor() ? "get_non_tensor"
                    : n.is_dict()     ? "get_tensordict"
                                      : "get";
  TORCH_CHECK_TYPE(false, "key ", key.str(), " holds ", holds, ", not ", wanted,
                   "; use ", use, "()");
}
}  // namespace

at::Tensor TensorDict::get(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (n.is_dict()) throw_wrong_kind(key, n, "a tensor");
  return n.tensor;
}

TensorDict TensorDict::get_tensordict(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (!n.is_dict() || n.is_non_tensor())
    throw_wrong_kind(key, n, "a TensorDict");
  return TensorDict(n.dict);
}

nlohmann::ordered_json TensorDict::get_non_tensor(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (!n.is_non_tensor()) throw_wrong_kind(key, n, "non-tensor data");
  return non_tensor_value(*n.dict);
}

bool TensorDict::is_non_tensor(const NestedKey& key) const {
  const Node* n = lookup(*impl_, key);
  return n != nullptr && n->is_non_tensor();
}

Entry TensorDict::get_entry(const NestedKey& key) const {
  const Node& n = lookup_or_throw(*impl_, key);
  if (n.is_dict()) return Entry(n.dict);
  return Entry(n.tensor);
}

// ---------------------------------------------------------------------------
// set / set_ / erase / pop / rename
// ---------------------------------------------------------------------------

namespace {

// Finds (without creating) where `key` will live. Returns the deepest
// existing dict on the path and the index of the first missing intermediate
// component (parts.size() - 1 when the parent exists).
std::pair<TensorDictImpl*, size_t> walk_for_set(TensorDictImpl& root,
                                                const NestedKey& key) {
  TensorDictImpl* cur = &root;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Node* n = cur->find(parts[i]);
    if (n == nullptr) return {cur, i};
    TORCH_CHECK_TYPE(n->is_dict() && !n->is_non_tensor(), "key ", key.str(),
                     ": cannot create a sub-TensorDict at ",
                     NestedKey(std::vector<std::string>(
                                   parts.begin(),
                                   parts.begin() + static_cast<int64_t>(i) + 1))
                         .str(),
                     n->is_dict() ? ": non-tensor data lives there"
                                  : ": a tensor lives there");
    cur = n->dict.get();
  }
  return {cur, parts.size() - 1};
}

// Creates the missing intermediates found by walk_for_set and returns the
// dict that holds the last component.
TensorDictImpl* create_path(TensorDictImpl* cur, size_t from,
                            const NestedKey& key) {
  const auto& parts = key.parts();
  for (size_t i = from; i + 1 < parts.size(); ++i) {
    auto sub = make_impl(cur->batch_size, cur->device);
    TensorDictImpl* next = sub.get();
    cur->nodes.push_back(Node{parts[i], at::Tensor(), std::move(sub)});
    cur = next;
  }
  return cur;
}

}  // namespace

void detail::check_leading_dims(const NestedKey& key, const at::Tensor& value,
                                c10::IntArrayRef batch, const char* context) {
  TORCH_CHECK_VALUE(value.defined(), context, "key ", key.str(),
                    ": cannot set an undefined tensor");
  auto sizes = value.sizes();
  const bool ok = starts_with(sizes, batch);
  TORCH_CHECK(ok, context, "key ", key.str(), ": expected leading dims ",
              shape_str(batch), ", got ",
              shape_str(sizes.slice(0, std::min(sizes.size(), batch.size()))));
}

const TensorDict& TensorDict::set(const NestedKey& key,
                                  const at::Tensor& value) const {
  auto [parent, missing_from] = walk_for_set(*impl_, key);
  const bool parent_exists = missing_from + 1 == key.parts().size();
  check_unlocked(*parent, "set", key);
  if (parent_exists) {
    const Node* existing = parent->find(key.back());
    TORCH_CHECK_TYPE(existing == nullptr || !existing->is_dict() ||
                         existing->is_non_tensor(),
                     "key ", key.str(),
                     ": cannot set a tensor where a TensorDict lives");
  }
  check_leading_dims(key, value, parent->batch_size);
  at::Tensor v = value;
  if (parent->device && v.device() != *parent->device)
    v = v.to(*parent->device);
  parent = create_path(parent, missing_from, key);
  if (Node* n = parent->find(key.back())) {
    n->tensor = std::move(v);
    n->dict = nullptr;  // it may have held non-tensor data
  } else {
    parent->nodes.push_back(Node{key.back(), std::move(v), nullptr});
  }
  return *this;
}

const TensorDict& TensorDict::set_non_tensor(
    const NestedKey& key, const nlohmann::ordered_json& value) const {
  auto [parent, missing_from] = walk_for_set(*impl_, key);
  check_unlocked(*parent, "set_non_tensor", key);
  ImplPtr level = make_non_tensor_data(value, parent->batch_size,
                                       parent->device, key.str());
  parent = create_path(parent, missing_from, key);
  if (Node* n = parent->find(key.back())) {
    n->tensor = at::Tensor();
    n->dict = std::move(level);
  } else {
    parent->nodes.push_back(Node{key.back(), at::Tensor(), std::move(level)});
  }
  return *this;
}

const TensorDict& TensorDict::set(const NestedKey& key,
                                  const TensorDict& value) const {
  auto [parent, missing_from] = walk_for_set(*impl_, key);
  const bool parent_exists = missing_from + 1 == key.parts().size();
  check_unlocked(*parent, "set", key);
  if (parent_exists) {
    const Node* existing = parent->find(key.back());
    TORCH_CHECK_TYPE(existing == nullptr || existing->is_dict(), "key ",
                     key.str(),
                     ": cannot set a TensorDict where a tensor lives");
  }
  TORCH_CHECK(starts_with(value.batch_size(), parent->batch_size), "key ",
              key.str(), ": the sub-TensorDict's batch_size ",
              shape_str(value.batch_size()), " must start with ",
              shape_str(parent->batch_size));
  // Any dict on the path, the root included, would end up inside `value`
  // if `value` reaches the deepest existing one.
  TORCH_CHECK(!reaches(*value.impl_, parent), "key ", key.str(),
              ": cannot set a TensorDict inside itself");
  ImplPtr v = value.impl_;
  if (parent->device && value.device() != parent->device) {
    v = value.to(*parent->device).impl_;
  }
  parent = create_path(parent, missing_from, key);
  if (Node* n = parent->find(key.back())) {
    n->dict = std::move(v);
  } else {
    parent->nodes.push_back(Node{key.back(), at::Tensor(), std::move(v)});
  }
  return *this;
}

const TensorDict& TensorDict::set_(const NestedKey& key,
                                   const at::Tensor& value) const {
  const Node& n = lookup_or_throw(*impl_, key);
  TORCH_CHECK_TYPE(!n.is_dict(), "set_: key ", key.str(),
                   ": cannot write a tensor where a TensorDict lives");
  check_leaf_copy("set_", key, parent_of(*impl_, key)->batch_size, n.tensor,
                  value);
  if (!n.tensor.is_same(value)) n.tensor.copy_(value);
  return *this;
}

namespace {

Entry remove(TensorDictImpl& root, const NestedKey& key, const char* op) {
  (void)lookup_or_throw(root, key);
  TensorDictImpl* parent = parent_of(root, key);
  check_unlocked(*parent, op, key);
  auto it = std::find_if(parent->nodes.begin(), parent->nodes.end(),
                         [&](const Node& n) { return n.key == key.back(); });
  Entry out =
      it->is_dict() ? Entry(TensorDictImpl::wrap(it->dict)) : Entry(it->tensor);
  parent->nodes.erase(it);
  return out;
}

}  // namespace

void TensorDict::erase(const NestedKey& key) const {
  (void)remove(*impl_, key, "erase");
}

Entry TensorDict::pop(const NestedKey& key) const {
  return remove(*impl_, key, "pop");
}

const TensorDict& TensorDict::rename_key_(const NestedKey& old_key,
                                          const NestedKey& new_key) const {
  Entry e = get_entry(old_key);
  if (old_key == new_key) return *this;
  const auto& op = old_key.parts();
  const auto& np = new_key.parts();
  TORCH_CHECK(
      !(np.size() > op.size() && std::equal(op.begin(), op.end(), np.begin())),
      "cannot rename key ", old_key.str(), " to ", new_key.str(),
      ": the new key lies inside the old one");
  TORCH_CHECK(
      !(op.size() > np.size() && std::equal(np.begin(), np.end(), op.begin())),
      "cannot rename key ", old_key.str(), " to ", new_key.str(),
      ": the old key lies inside the new one");
  check_unlocked(*parent_of(*impl_, old_key), "rename_key_", old_key);
  StructureSnapshot snapshot(*impl_);
  try {
    // As in Python, an entry already at `new_key` is replaced where it
    // stands (keys [c, a, b], rename a -> c: [c, b]); otherwise the entry
    // is appended. set() replaces an entry of its own kind in place, so an
    // entry of the other kind is first turned into an empty one of this
    // kind (the snapshot undoes that on failure).
    if (lookup(*impl_, new_key) != nullptr) {
      TensorDictImpl* parent = parent_of(*impl_, new_key);
      check_unlocked(*parent, "rename_key_", new_key);
      Node* n = parent->find(new_key.back());
      if (e.is_tensor()) {
        n->dict.reset();
      } else if (!n->is_dict()) {
        n->tensor = at::Tensor();
        n->dict = make_impl(parent->batch_size, parent->device);
      }
    }
    if (e.is_tensor()) {
      set(new_key, e.tensor());
    } else {
      set(new_key, TensorDict(e.dict_));  // non-tensor data too
    }
    erase(old_key);
  } catch (...) {
    snapshot.restore();
    throw;
  }
  return *this;
}

const TensorDict& TensorDict::lock_() const {
  for_each_level(*impl_, [](TensorDictImpl& d) { d.locked = true; });
  return *this;
}

const TensorDict& TensorDict::unlock_() const {
  for_each_level(*impl_, [](TensorDictImpl& d) { d.locked = false; });
  return *this;
}

bool TensorDict::is_locked() const { return impl_->locked; }

// ---------------------------------------------------------------------------
// Copies and moves
// ---------------------------------------------------------------------------

namespace {

// Leaves holding this many bytes in all are pinned by several threads.
constexpr int64_t kParallelPinBytes = int64_t{1} << 20;

// Whether `leaves` are pinned by several threads at once: dense CPU
// tensors, none requiring grad (autograd records each copy on the calling
// thread), holding kParallelPinBytes or more in all.
bool pin_in_parallel(const std::vector<at::Tensor>& leaves) {
  int64_t bytes = 0;
  for (const at::Tensor& t : leaves) {
    if (!t.is_cpu() || t.layout() != at::kStrided || t.requires_grad()) {
      return false;
    }
    bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes >= kParallelPinBytes;
}

// For each of `leaves`, in order, `send(pinned copy)` (a leaf already
// pinned is itself), made by LibTorch's intra-op threads (Python's
// `num_threads`) when `parallel` (see pin_in_parallel), else one by one.
// Pinned memory stays alive until the copies that read it complete
// (LibTorch's pinned allocator records each use on its stream).
template <typename Send>
std::vector<at::Tensor> pin_leaves(const std::vector<at::Tensor>& leaves,
                                   bool parallel, const Send& send) {
  std::vector<at::Tensor> out(leaves.size());
  const auto pin = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const at::Tensor& t = leaves[static_cast<size_t>(i)];
      out[static_cast<size_t>(i)] = send(t.is_pinned() ? t : t.pin_memory());
    }
  };
  const auto n = static_cast<int64_t>(leaves.size());
  if (parallel) {
    at::parallel_for(0, n, 1, pin);
  } else {
    pin(0, n);
  }
  return out;
}

}  // namespace

TensorDict TensorDict::to(at::Device device, bool non_blocking) const {
  device = usable_device("to", device);
  if (impl_->consolidated.defined() &&
      normalize_device(impl_->consolidated.device()) != device &&
      io_hooks().consolidated_to != nullptr && is_consolidated_impl(*impl_)) {
    return TensorDict(io_hooks().consolidated_to(*impl_, device, non_blocking));
  }
  // CPU leaves bound for a CUDA device without blocking are pinned by
  // several threads, and each thread sends a leaf by one asynchronous copy
  // as soon as it is pinned (on the caller's current stream), so that the
  // copies overlap the pinning of the next leaves.
  std::vector<at::Tensor> sent;  // in leaf_tensors order, when sent so
  if (device.is_cuda() && non_blocking && at::hasCUDA()) {
    const std::vector<at::Tensor> leaves = leaf_tensors(*impl_);
    if (pin_in_parallel(leaves)) {
      const c10::Stream stream =
          c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
      sent = pin_leaves(leaves, /*parallel=*/true, [&](const at::Tensor& p) {
        const c10::StreamGuard on_stream(stream);
        return p.to(device, /*non_blocking=*/true);
      });
    }
  }
  size_t k = 0;  // rebuild visits the leaves in leaf_tensors order
  return TensorDict(rebuild(
      *impl_, impl_->batch_size,
      [&](const KeyPath&, const at::Tensor& t) {
        return sent.empty() ? t.to(device, non_blocking) : sent[k++];
      },
      nullptr,
      [&](const TensorDictImpl&, TensorDictImpl& out) {
        out.device = device;
      }));
}

const TensorDict& TensorDict::record_stream(c10::Stream stream) const {
  TORCH_CHECK_VALUE(!stream.device().is_cpu(),
                    "record_stream: the stream is on cpu; only an "
                    "accelerator's stream (such as cuda:0's) records uses");
  const std::vector<at::Tensor> leaves = leaf_tensors(*impl_);
  for (size_t i = 0; i < leaves.size(); ++i) {
    TORCH_CHECK_VALUE(leaves[i].device() == stream.device(),
                      "record_stream: key ", LeafName(*impl_, i).str(),
                      " is on ", device_name(leaves[i].device()),
                      ", but the stream is on ", device_name(stream.device()));
  }
  for (const at::Tensor& t : leaves) t.record_stream(stream);
  return *this;
}

TensorDict TensorDict::pin_memory() const {
  TORCH_CHECK(at::globalContext().hasCUDA(),
              "pin_memory: no CUDA device is available");
  const std::vector<at::Tensor> leaves = leaf_tensors(*impl_);
  return TensorDict(
      rebuild_from(*impl_, pin_leaves(leaves, pin_in_parallel(leaves),
                                      [](at::Tensor p) { return p; })));
}

TensorDict TensorDict::to(at::ScalarType dtype) const {
  return TensorDict(
      rebuild_leaves(*impl_, [&](const at::Tensor& t) { return t.to(dtype); }));
}

TensorDict TensorDict::cpu() const { return to(at::Device(at::kCPU)); }

TensorDict TensorDict::clone() const {
  return TensorDict(
      rebuild_leaves(*impl_, [](const at::Tensor& t) { return t.clone(); }));
}

TensorDict TensorDict::copy() const { return TensorDict(shallow_copy(*impl_)); }

TensorDict TensorDict::contiguous() const {
  return TensorDict(rebuild_leaves(
      *impl_, [](const at::Tensor& t) { return t.contiguous(); }));
}

TensorDict TensorDict::detach() const {
  return TensorDict(
      rebuild_leaves(*impl_, [](const at::Tensor& t) { return t.detach(); }));
}

const TensorDict& TensorDict::zero_() const {
  size_t i = 0;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    check_leaf_write("zero_", LeafName(*impl_, i++), t, at::Tensor(),
                     WriteKind::kOp);
  });
  for_each_leaf(*impl_, [](const at::Tensor& t) { t.zero_(); });
  return *this;
}

bool TensorDict::all() const {
  bool result = true;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    if (result && !t.all().item<bool>()) result = false;
  });
  return result;
}

bool TensorDict::any() const {
  bool result = false;
  for_each_leaf(*impl_, [&](const at::Tensor& t) {
    if (!result && t.any().item<bool>()) result = true;
  });
  return result;
}

namespace detail {

bool tensor_is_shared(const at::Tensor& t) {
  if (t.is_cuda()) return true;
  if (!t.defined() || !t.has_storage()) return false;
  const auto& data_ptr = t.storage().data_ptr();
  if (auto* m = at::MapAllocator::fromDataPtr(data_ptr)) {
    // Shared-memory segments (not mapped files) are named "/torch_<...>".
    return std::strncmp(m->filename(), "/torch_", 7) == 0;
  }
  return at::RefcountedMapAllocator::fromDataPtr(data_ptr) != nullptr;
}

bool is_consolidated_impl(const TensorDictImpl& impl) {
  if (!impl.consolidated.defined()) return false;
  const void* base = impl.consolidated.storage().data_ptr().get();
  std::vector<const at::Tensor*> leaves;
  leaf_ptrs(impl, leaves);
  for (const at::Tensor* t : leaves) {
    if (!t->has_storage() || t->storage().data_ptr().get() != base)
      return false;
  }
  return true;
}

IoHooks& io_hooks() {
  static IoHooks hooks;
  return hooks;
}

bool is_shared(const TensorDictImpl& impl) {
  if (impl.device && impl.device->is_cuda()) return true;
  bool any_leaf = false;
  bool all_shared = true;
  for_each_leaf(impl, [&](const at::Tensor& t) {
    any_leaf = true;
    if (!tensor_is_shared(t)) all_shared = false;
  });
  return any_leaf && all_shared;
}

}  // namespace detail

bool TensorDict::is_shared() const { return detail::is_shared(*impl_); }

const TensorDict& TensorDict::share_memory_() const {
  // Every storage to move, once each (leaves may share one); the new
  // segments are all made before any storage switches to its segment.
  std::vector<c10::Storage> storages;
  detail::visit(
      *impl_, detail::Ignore(),
      [&](const detail::KeyPath& path, const at::Tensor& t) {
        const auto is_mapped = detail::io_hooks().is_mapped_tensor;
        if (t.is_cuda() || detail::tensor_is_shared(t) ||
            (is_mapped != nullptr && is_mapped(t)) || !t.has_storage()) {
          return;
        }
        TORCH_CHECK_VALUE(t.device().is_cpu(), "share_memory_: key ",
                          path.key().str(),
                          ": only CPU and CUDA tensors can be "
                          "shared, not ",
                          detail::device_name(t.device()), " ones");
        const c10::Storage& st = t.storage();
        for (const auto& s : storages) {
          if (s.is_alias_of(st)) return;
        }
        storages.push_back(st);
      },
      detail::Ignore());
  static std::atomic<uint64_t> counter{0};
  std::vector<at::DataPtr> segments;
  for (const auto& st : storages) {
    const std::string name = "/torch_" + std::to_string(::getpid()) + "_" +
                             std::to_string(counter++) + "_td";
    const size_t nbytes = std::max<size_t>(st.nbytes(), 1);
    at::DataPtr ptr = at::MapAllocator::makeDataPtr(
        name,
        at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_EXCLUSIVE |
            at::ALLOCATOR_MAPPED_UNLINK,
        nbytes, nullptr);
    if (st.nbytes() > 0) std::memcpy(ptr.get(), st.data(), st.nbytes());
    segments.push_back(std::move(ptr));
  }
  for (size_t i = 0; i < storages.size(); ++i) {
    storages[i].set_data_ptr_noswap(std::move(segments[i]));
  }
  lock_();
  return *this;
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

namespace {

// `a == b` (`eq`) or `a != b`: the matching leaves compared, shaped like
// `a`. Non-tensor entries compare their values as Python does: two
// NonTensorData or two stacks give bool tensors; NonTensorData against a
// stack gives None values.
TensorDict compare(const TensorDict& a, const TensorDict& b, bool eq) {
  const char* op = eq ? "operator==" : "operator!=";
  const TensorDictImpl& ai = TensorDictImpl::of(a);
  const TensorDictImpl& bi = TensorDictImpl::of(b);
  std::vector<at::Tensor> va, vb;
  pair_leaves(ai, bi, op, va, vb);
  for (size_t i = 0; i < va.size(); ++i) {
    va[i] = eq ? va[i].eq(vb[i]) : va[i].ne(vb[i]);
  }
  ImplPtr out = rebuild_from(ai, std::move(va));
  // `out`'s non-tensor entries are `a`'s; `m.a` is `b`'s entry.
  pair_walk<Pairing::kSameKeys>(
      bi, out.get(), [&](const KeyPath& path, const Match<TensorDictImpl>& m) {
        if (!m.a.is_dict()) return Next::kSkip;
        if (!m.a.is_non_tensor() && !m.b->is_non_tensor())
          return Next::kDescend;
        TORCH_CHECK_TYPE(
            m.a.is_non_tensor() && m.b->is_non_tensor(), op, ": key ",
            path.key().str(), " is ",
            m.b->is_non_tensor() ? "non-tensor data" : "a TensorDict",
            " in the left-hand side but ",
            m.a.is_non_tensor() ? "non-tensor data" : "a TensorDict",
            " in the right-hand side");
        TensorDictImpl& level = *m.b->dict;
        TORCH_CHECK_VALUE(
            level.batch_size == m.a.dict->batch_size, op, ": key ",
            path.key().str(), ": non-tensor data of batch size ",
            shape_str(level.batch_size),
            " cannot be compared with non-tensor data of batch size ",
            shape_str(m.a.dict->batch_size));
        at::Tensor r = non_tensor_eq(level, *m.a.dict);
        if (!r.defined()) {
          level.non_tensor = non_tensor_none(level);
        } else {
          *m.b = Node{m.b->key, eq ? std::move(r) : r.logical_not(), nullptr};
        }
        return Next::kSkip;
      });
  return TensorDictImpl::wrap(std::move(out));
}

// Every leaf compared with `b`; non-tensor entries get None for every value,
// as Python's comparisons with a scalar give them.
TensorDict compare(const TensorDict& a, const at::Scalar& b, bool eq) {
  ImplPtr out = rebuild_leaves(TensorDictImpl::of(a), [&](const at::Tensor& x) {
    return eq ? x.eq(b) : x.ne(b);
  });
  for_each_level(*out, [](TensorDictImpl& level) {
    if (level.non_tensor != nullptr) level.non_tensor = non_tensor_none(level);
  });
  return TensorDictImpl::wrap(std::move(out));
}

}  // namespace

TensorDict operator==(const TensorDict& a, const TensorDict& b) {
  return compare(a, b, /*eq=*/true);
}

TensorDict operator!=(const TensorDict& a, const TensorDict& b) {
  return compare(a, b, /*eq=*/false);
}

TensorDict operator==(const TensorDict& a, const at::Scalar& b) {
  return compare(a, b, /*eq=*/true);
}

TensorDict operator!=(const TensorDict& a, const at::Scalar& b) {
  return compare(a, b, /*eq=*/false);
}

}  // namespace tensordict
