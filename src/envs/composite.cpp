// TorchRL 0.14's Composite spec (tensordict/specs.h): SpecEntry, the tree of
// specs keyed like a TensorDict, and its rand/zero/is_in/project over
// TensorDicts, expand, to, the repr and ==.
//
// As TorchRL's: entries keep their insertion order; a nested key creates the
// missing sub-composites with the shape and device of the nearest existing
// one; a sub-composite whose shape is a prefix of the holder's takes the
// holder's shape; `keys(true)` lists a sub-composite's keys before its own.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "envs/specs_internal.h"
#include "tensordict/specs.h"

namespace tensordict {

using detail::check_spec_out;
using detail::check_spec_shape;
using detail::device_name;
using detail::shape_str;
using detail::spec_device;
using detail::torch_size_str;

// ---- SpecEntry ----------------------------------------------------------------

SpecEntry::SpecEntry(SpecPtr spec) : leaf_(std::move(spec)) {
  TORCH_CHECK_VALUE(leaf_ != nullptr, "SpecEntry: the spec is null");
}

SpecEntry::SpecEntry(const Composite& spec)
    : composite_(std::make_unique<Composite>(spec)) {}

SpecEntry::SpecEntry(const SpecEntry& other)
    : leaf_(other.leaf_),
      composite_(other.composite_
                     ? std::make_unique<Composite>(*other.composite_)
                     : nullptr) {}

SpecEntry& SpecEntry::operator=(const SpecEntry& other) {
  if (this != &other) *this = SpecEntry(other);
  return *this;
}

SpecEntry::~SpecEntry() = default;

const TensorSpec& SpecEntry::leaf() const {
  TORCH_CHECK_TYPE(leaf_ != nullptr,
                   "SpecEntry: the entry is a Composite, not a leaf spec");
  return *leaf_;
}

const SpecPtr& SpecEntry::leaf_ptr() const {
  TORCH_CHECK_TYPE(leaf_ != nullptr,
                   "SpecEntry: the entry is a Composite, not a leaf spec");
  return leaf_;
}

const Composite& SpecEntry::composite() const {
  TORCH_CHECK_TYPE(
      composite_ != nullptr, "SpecEntry: the entry is a leaf spec (",
      leaf_ ? leaf_->type_name() : "moved from", "), not a Composite");
  return *composite_;
}

Composite& SpecEntry::composite() {
  return const_cast<Composite&>(std::as_const(*this).composite());
}

// ---- Helpers ------------------------------------------------------------------

namespace {

bool starts_with(c10::IntArrayRef shape, c10::IntArrayRef head) {
  return shape.size() >= head.size() && shape.slice(0, head.size()) == head;
}

std::vector<int64_t> concat(c10::IntArrayRef a, c10::IntArrayRef b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

const SpecEntry* find_entry(const Composite& c, const std::string& key) {
  for (const auto& [k, e] : c.entries()) {
    if (k == key) return &e;
  }
  return nullptr;
}

NestedKey child_key(const std::vector<std::string>& prefix,
                    const std::string& key) {
  std::vector<std::string> parts = prefix;
  parts.push_back(key);
  return NestedKey(std::move(parts));
}

std::string missing_key_msg(const Composite& c, const NestedKey& key) {
  return "key " + key.str() + " not found in Composite with keys " +
         detail::key_vec_str(c.keys(true));
}

void collect_keys(const Composite& c, const std::vector<std::string>& prefix,
                  bool include_nested, bool leaves_only,
                  std::vector<NestedKey>& out) {
  for (const auto& [k, e] : c.entries()) {
    std::vector<std::string> path = prefix;
    path.push_back(k);
    // TorchRL's _CompositeSpecItemsView: the sub-composite's keys, then its
    // own (unless leaves_only).
    if (include_nested && e.is_composite()) {
      collect_keys(e.composite(), path, include_nested, leaves_only, out);
    }
    if (!leaves_only || !e.is_composite()) out.emplace_back(std::move(path));
  }
}

SpecEntry checked_entry(SpecEntry spec, c10::IntArrayRef shape,
                        c10::optional<at::Device> device, const NestedKey& key);

// `sub` with the shape `shape` (TorchRL's Composite.shape setter): every
// leaf's shape must start with it; sub-composites take it too.
Composite with_shape(const Composite& sub, c10::IntArrayRef shape,
                     const NestedKey& key) {
  Composite out(shape.vec(), sub.device());
  for (const auto& [k, e] : sub.entries()) {
    const NestedKey full = key.join(k);
    if (e.is_composite()) {
      out.set(k, with_shape(e.composite(), shape, full));
    } else {
      out.set(k, checked_entry(e, shape, sub.device(), full));
    }
  }
  return out;
}

// `spec` as it is stored in a holder of `shape` and `device`, or throws
// naming `key` (TorchRL's Composite.set).
SpecEntry checked_entry(SpecEntry spec, c10::IntArrayRef shape,
                        c10::optional<at::Device> device,
                        const NestedKey& key) {
  if (!spec.is_composite()) {
    const TensorSpec& leaf = spec.leaf();
    TORCH_CHECK_VALUE(!device || leaf.device() == *device,
                      "Composite.set: key ", key.str(), ": the spec (",
                      leaf.type_name(), ") is on ", device_name(leaf.device()),
                      ", the Composite on ",
                      device ? device_name(*device) : std::string());
    TORCH_CHECK_VALUE(starts_with(leaf.shape(), shape), "Composite.set: key ",
                      key.str(), ": expected a shape starting with ",
                      shape_str(shape), ", got ", shape_str(leaf.shape()));
    return spec;
  }
  const Composite& sub = spec.composite();
  if (device && !sub.device()) {
    // TorchRL: a Composite without a device takes the holder's.
    return checked_entry(SpecEntry(sub.to(*device)), shape, device, key);
  }
  TORCH_CHECK_VALUE(!device || *sub.device() == *device, "Composite.set: key ",
                    key.str(), ": the Composite is on ",
                    device_name(*sub.device()), ", its holder on ",
                    device ? device_name(*device) : std::string());
  if (starts_with(sub.shape(), shape)) return spec;
  TORCH_CHECK_VALUE(starts_with(shape, sub.shape()), "Composite.set: key ",
                    key.str(), ": expected a shape starting with ",
                    shape_str(shape), ", got ", shape_str(sub.shape()));
  return SpecEntry(with_shape(sub, shape, key));
}

void rand_into(const Composite& c, const TensorDict& out,
               const std::vector<std::string>& prefix,
               const c10::optional<at::Generator>& generator) {
  for (const auto& [k, e] : c.entries()) {
    const NestedKey full = child_key(prefix, k);
    TORCH_CHECK_INDEX(out.contains(k), "Composite.rand_: key ", full.str(),
                      " not found in the TensorDict");
    const Entry entry = out.get_entry(k);
    if (e.is_composite()) {
      TORCH_CHECK_TYPE(entry.is_tensordict(), "Composite.rand_: key ",
                       full.str(), ": expected a TensorDict, got a tensor");
      std::vector<std::string> path = prefix;
      path.push_back(k);
      rand_into(e.composite(), entry.tensordict(), path, generator);
    } else {
      TORCH_CHECK_TYPE(entry.is_tensor(), "Composite.rand_: key ", full.str(),
                       ": expected a tensor, got a TensorDict");
      check_spec_out(e.leaf(), entry.tensor(),
                     "Composite.rand_: key " + full.str());
      e.leaf().rand_(entry.tensor(), generator);
    }
  }
}

void project_into(const Composite& c, const TensorDict& value,
                  const TensorDict& out,
                  const std::vector<std::string>& prefix) {
  for (const auto& [k, e] : c.entries()) {
    const NestedKey full = child_key(prefix, k);
    if (e.is_composite() && e.composite().empty()) continue;
    TORCH_CHECK_INDEX(value.contains(full), "Composite.project: key ",
                      full.str(), " not found in the TensorDict");
    const Entry entry = value.get_entry(full);
    if (e.is_composite()) {
      TORCH_CHECK_TYPE(entry.is_tensordict(), "Composite.project: key ",
                       full.str(), ": expected a TensorDict, got a tensor");
      std::vector<std::string> path = prefix;
      path.push_back(k);
      project_into(e.composite(), value, out, path);
    } else {
      TORCH_CHECK_TYPE(entry.is_tensor(), "Composite.project: key ", full.str(),
                       ": expected a tensor, got a TensorDict");
      const at::Tensor& t = entry.tensor();
      if (!e.leaf().is_in(t)) out.set(full, e.leaf().project(t));
    }
  }
}

}  // namespace

// ---- Composite ----------------------------------------------------------------

Composite::Composite() = default;

Composite::Composite(std::vector<int64_t> shape,
                     c10::optional<at::Device> device)
    : shape_(std::move(shape)),
      device_(device ? c10::optional<at::Device>(spec_device(*device))
                     : c10::nullopt) {
  check_spec_shape("Composite", shape_);
}

Composite::Composite(std::vector<std::pair<NestedKey, SpecEntry>> specs,
                     std::vector<int64_t> shape,
                     c10::optional<at::Device> device)
    : Composite(std::move(shape), device) {
  for (auto& item : specs) set(item.first, std::move(item.second));
}

bool Composite::contains(const NestedKey& key) const {
  const Composite* cur = this;
  const auto& parts = key.parts();
  for (size_t i = 0; i < parts.size(); ++i) {
    const SpecEntry* e = find_entry(*cur, parts[i]);
    if (e == nullptr) return false;
    if (i + 1 == parts.size()) return true;
    if (!e->is_composite()) return false;
    cur = &e->composite();
  }
  return false;
}

std::vector<NestedKey> Composite::keys(bool include_nested,
                                       bool leaves_only) const {
  std::vector<NestedKey> out;
  collect_keys(*this, {}, include_nested, leaves_only, out);
  return out;
}

const SpecEntry& Composite::get(const NestedKey& key) const {
  TORCH_CHECK_INDEX(contains(key), "Composite: ", missing_key_msg(*this, key));
  const Composite* cur = this;
  const auto& parts = key.parts();
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    cur = &find_entry(*cur, parts[i])->composite();
  }
  return *find_entry(*cur, parts.back());
}

const TensorSpec& Composite::leaf(const NestedKey& key) const {
  const SpecEntry& e = get(key);
  TORCH_CHECK_TYPE(!e.is_composite(), "Composite.leaf: key ", key.str(),
                   " holds a Composite, not a leaf spec");
  return e.leaf();
}

Composite& Composite::set(const NestedKey& key, SpecEntry spec) {
  const auto& parts = key.parts();
  // The existing part of the path.
  Composite* holder = this;
  size_t depth = 0;
  for (; depth + 1 < parts.size(); ++depth) {
    auto it =
        std::find_if(holder->entries_.begin(), holder->entries_.end(),
                     [&](const auto& kv) { return kv.first == parts[depth]; });
    if (it == holder->entries_.end()) break;
    TORCH_CHECK_VALUE(it->second.is_composite(), "Composite.set: key ",
                      key.str(), ": ",
                      NestedKey(std::vector<std::string>(
                                    parts.begin(), parts.begin() + depth + 1))
                          .str(),
                      " holds a leaf spec, not a Composite");
    holder = &it->second.composite();
  }
  // Every check before any change: the sub-composites still missing take
  // the holder's shape and device.
  SpecEntry checked =
      checked_entry(std::move(spec), holder->shape_, holder->device_, key);
  for (; depth + 1 < parts.size(); ++depth) {
    holder->entries_.emplace_back(
        parts[depth], SpecEntry(Composite(holder->shape_, holder->device_)));
    holder = &holder->entries_.back().second.composite();
  }
  auto it =
      std::find_if(holder->entries_.begin(), holder->entries_.end(),
                   [&](const auto& kv) { return kv.first == parts.back(); });
  if (it != holder->entries_.end()) {
    it->second = std::move(checked);
  } else {
    holder->entries_.emplace_back(parts.back(), std::move(checked));
  }
  return *this;
}

void Composite::erase(const NestedKey& key) {
  TORCH_CHECK_INDEX(contains(key),
                    "Composite.erase: ", missing_key_msg(*this, key));
  const auto& parts = key.parts();
  Composite* holder = this;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it =
        std::find_if(holder->entries_.begin(), holder->entries_.end(),
                     [&](const auto& kv) { return kv.first == parts[i]; });
    holder = &it->second.composite();
  }
  holder->entries_.erase(
      std::find_if(holder->entries_.begin(), holder->entries_.end(),
                   [&](const auto& kv) { return kv.first == parts.back(); }));
}

TensorDict Composite::rand(c10::IntArrayRef batch,
                           c10::optional<at::Generator> generator) const {
  check_spec_shape("Composite.rand: batch", batch);
  // Every leaf draws from the one generator, in order.
  const c10::optional<at::Generator> gen = std::move(generator);
  const std::vector<int64_t> batch_size = concat(batch, shape_);
  TensorDict out =
      device_ ? TensorDict(batch_size, *device_) : TensorDict(batch_size);
  for (const auto& [k, e] : entries_) {
    if (e.is_composite()) {
      out.set(k, e.composite().rand(batch, gen));
    } else {
      out.set(k, e.leaf().rand(batch, gen));
    }
  }
  return out;
}

void Composite::rand_(const TensorDict& out,
                      c10::optional<at::Generator> generator) const {
  const c10::optional<at::Generator> gen = std::move(generator);
  rand_into(*this, out, {}, gen);
}

TensorDict Composite::zero(c10::IntArrayRef batch) const {
  check_spec_shape("Composite.zero: batch", batch);
  const std::vector<int64_t> batch_size = concat(batch, shape_);
  TensorDict out =
      device_ ? TensorDict(batch_size, *device_) : TensorDict(batch_size);
  for (const auto& [k, e] : entries_) {
    if (e.is_composite()) {
      out.set(k, e.composite().zero(batch));
    } else {
      out.set(k, e.leaf().zero(batch));
    }
  }
  return out;
}

bool Composite::is_in(const TensorDict& value) const {
  for (const auto& [k, e] : entries_) {
    // TorchRL skips empty sub-composites.
    if (e.is_composite() && e.composite().empty()) continue;
    if (!value.contains(k)) return false;
    const Entry entry = value.get_entry(k);
    if (e.is_composite()) {
      if (!entry.is_tensordict() || !e.composite().is_in(entry.tensordict())) {
        return false;
      }
    } else if (!entry.is_tensor() || !e.leaf().is_in(entry.tensor())) {
      return false;
    }
  }
  return true;
}

TensorDict Composite::project(const TensorDict& value) const {
  TensorDict out = value.copy();
  project_into(*this, value, out, {});
  return out;
}

Composite Composite::expand(c10::IntArrayRef shape) const {
  check_spec_shape("Composite.expand", shape);
  TORCH_CHECK_VALUE(
      detail::ends_with_broadcast(shape, shape_),
      "Composite.expand: expected a shape ending with ", shape_str(shape_),
      " (where a dim of size 1 may take any size), got ", shape_str(shape));
  Composite out(shape.vec(), device_);
  const size_t nd = shape_.size();
  for (const auto& [k, e] : entries_) {
    if (e.is_composite()) {
      const Composite& sub = e.composite();
      out.set(k, sub.expand(concat(shape, sub.shape().slice(nd))));
    } else {
      const TensorSpec& leaf = e.leaf();
      out.set(k, leaf.expand(concat(shape, leaf.shape().slice(nd))));
    }
  }
  return out;
}

Composite Composite::to(at::Device device) const {
  Composite out(shape_, device);
  for (const auto& [k, e] : entries_) {
    if (e.is_composite()) {
      out.set(k, e.composite().to(device));
    } else {
      out.set(k, e.leaf().to(device));
    }
  }
  return out;
}

std::string Composite::repr() const {
  const std::string device = device_ ? device_name(*device_) : "None";
  const std::string tail = "device=" + device +
                           ", shape=" + torch_size_str(shape_) +
                           ", data_cls=None";
  if (entries_.empty()) return "Composite(" + tail + ")";
  std::string out = "Composite(\n";
  for (const auto& [k, e] : entries_) {
    std::string line = k;
    line += ": ";
    line += e.is_composite() ? e.composite().repr() : e.leaf().repr();
    out += detail::indent(line, 4);
    out += ",\n";
  }
  out += "    device=" + device + ",\n    shape=" + torch_size_str(shape_) +
         ",\n    data_cls=None)";
  return out;
}

bool Composite::operator==(const Composite& other) const {
  if (shape_ != other.shape_ || device_ != other.device_ ||
      entries_.size() != other.entries_.size()) {
    return false;
  }
  for (const auto& [k, e] : entries_) {
    const SpecEntry* o = find_entry(other, k);
    if (o == nullptr || o->is_composite() != e.is_composite()) return false;
    if (e.is_composite() ? e.composite() != o->composite()
                         : e.leaf() != o->leaf()) {
      return false;
    }
  }
  return true;
}

std::ostream& operator<<(std::ostream& os, const Composite& spec) {
  return os << spec.repr();
}

}  // namespace tensordict
