// Consolidation (all leaves in one buffer, Python tensordict's
// `consolidate()`), its move to a device, and the single-file format
// (`save`/`load`: the buffer plus a JSON header, Python's `_consolidated`
// metadata). tensordict/persistence.h states the contract.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "io/archive.h"
#include "io/files.h"
#include "io/meta.h"
#include "tensordict/persistence.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error \
    "the single-file format is little-endian; big-endian hosts are not supported"
#endif

namespace tensordict {

using detail::Fd;
using detail::ImplPtr;
using detail::map_storage;
using detail::Node;
using detail::open_regular_file;
using detail::read_json;
using detail::remove_stale_tmps;
using detail::rename_or_throw;
using detail::Space;
using detail::tensor_on;
using detail::TensorDictImpl;
using detail::TmpFiles;
using detail::write_all;
using ordered_json = nlohmann::ordered_json;
using detail::checked_nbytes;
using detail::json_excerpt;
using detail::parse_batch;
using detail::parse_device;
using detail::parse_dtype;
using detail::parse_shape;

namespace {

// ===========================================================================
// Consolidation
// ===========================================================================

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// The byte alignment of a leaf in a consolidated buffer: 8, or the element
// size when larger (complex128), so that every leaf is a valid typed view.
int64_t leaf_alignment(at::ScalarType t) {
  return std::max<int64_t>(8, static_cast<int64_t>(c10::elementSize(t)));
}

// A tree shaped like `src` whose leaves are `fn(leaf)`, with
// `consolidated = buffer` at every level, and every level on `device` when
// given.
template <typename Fn>
ImplPtr over_buffer(const TensorDictImpl& src, const at::Tensor& buffer,
                    c10::optional<at::Device> device, const Fn& fn) {
  return detail::rebuild(
      src, src.batch_size,
      [&](const detail::KeyPath&, const at::Tensor& t) { return fn(t); },
      nullptr,
      [&](const TensorDictImpl&, TensorDictImpl& out) {
        out.consolidated = buffer;
        if (device) out.device = device;
      });
}

// ---- single-file format ----------------------------------------------------

ordered_json save_meta(const TensorDictImpl& root, const at::Tensor& buffer) {
  const int64_t base = buffer.storage_offset();
  // The entries of each level being described, the innermost last.
  std::vector<ordered_json> entries;
  ordered_json out;
  detail::visit(
      root,
      [&](const detail::KeyPath&, const TensorDictImpl&) {
        entries.push_back(ordered_json::object());
      },
      [&](const detail::KeyPath& path, const at::Tensor& t) {
        ordered_json shape = ordered_json::array();
        for (int64_t d : t.sizes()) shape.push_back(d);
        entries.back()[*path.parts.back()] = ordered_json{
            {"dtype", detail::dtype_name(t.scalar_type())},
            {"shape", std::move(shape)},
            {"offset", t.storage_offset() * t.element_size() - base}};
      },
      [&](const detail::KeyPath& path, const TensorDictImpl& level) {
        ordered_json batch = ordered_json::array();
        for (int64_t d : level.batch_size) batch.push_back(d);
        ordered_json meta{
            {"type", "TensorDict"},
            {"batch_size", std::move(batch)},
            {"device",
             level.device ? detail::device_name(*level.device) : "None"},
            {"entries", std::move(entries.back())}};
        entries.pop_back();
        if (entries.empty()) {
          out = std::move(meta);
        } else {
          entries.back()[*path.parts.back()] = std::move(meta);
        }
      });
  return out;
}

ImplPtr load_meta(const ordered_json& j, const c10::Storage& storage,
                  const at::Tensor& buffer, int64_t data_size,
                  const std::string& path, std::vector<std::string>& key_path,
                  c10::IntArrayRef parent_batch, int depth,
                  const char* fn = "load") {
  TORCH_CHECK(depth < 64, fn, ": '", path, "': the dict is nested too deeply");
  TORCH_CHECK(
      j.is_object() && j.contains("entries") && j["entries"].is_object(), fn,
      ": '", path, "': malformed metadata ",
      key_path.empty() ? "at the root" : "at key " + NestedKey(key_path).str());
  auto impl =
      detail::make_impl(parse_batch(j, path, "batch_size", fn), c10::nullopt);
  TORCH_CHECK(
      detail::starts_with(impl->batch_size, parent_batch), fn, ": '", path,
      "': the batch size ", detail::shape_str(impl->batch_size),
      key_path.empty() ? std::string() : " of key " + NestedKey(key_path).str(),
      " does not start with the parent's batch size ",
      detail::shape_str(parent_batch));
  auto dev = parse_device(j, path, fn);
  TORCH_CHECK(!dev.has_value() || dev->is_cpu(), fn, ": '", path,
              "': only CPU dicts can be loaded, the file says ",
              detail::device_name(*dev));
  impl->device = dev;
  impl->consolidated = buffer;
  const ordered_json& entries = j["entries"];
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    key_path.push_back(it.key());
    TORCH_CHECK(!it.key().empty(), fn, ": '", path, "' has an empty key");
    const std::string krepr = NestedKey(key_path).str();
    const ordered_json& e = it.value();
    TORCH_CHECK(e.is_object(), fn, ": '", path, "': the entry of key ", krepr,
                " must be a JSON object, got ", json_excerpt(e));
    if (e.contains("entries")) {
      impl->nodes.push_back(
          Node{it.key(), at::Tensor(),
               load_meta(e, storage, buffer, data_size, path, key_path,
                         impl->batch_size, depth + 1, fn)});
      key_path.pop_back();
      continue;
    }
    c10::optional<at::ScalarType> dtype;
    if (e.contains("dtype") && e["dtype"].is_string()) {
      dtype = parse_dtype(e["dtype"].get<std::string>());
    }
    TORCH_CHECK_TYPE(dtype.has_value(), fn, ": '", path, "': key ", krepr,
                     " has unknown dtype ",
                     e.contains("dtype") ? json_excerpt(e["dtype"]) : "(none)");
    c10::optional<std::vector<int64_t>> shape;
    if (e.contains("shape")) shape = parse_shape(e["shape"]);
    TORCH_CHECK(shape.has_value(), fn, ": '", path, "': key ", krepr,
                " has an invalid shape");
    TORCH_CHECK(detail::starts_with(*shape, impl->batch_size), fn, ": '", path,
                "': key ", krepr, " has shape ", detail::shape_str(*shape),
                ", which does not start with the batch size ",
                detail::shape_str(impl->batch_size));
    const auto nbytes = checked_nbytes(*shape, *dtype);
    TORCH_CHECK(nbytes.has_value(), fn, ": '", path, "': key ", krepr,
                " has shape ", detail::shape_str(*shape),
                ", which is too large");
    int64_t offset = -1;
    if (e.contains("offset") && e["offset"].is_number_integer()) {
      offset = e["offset"].get<int64_t>();
    }
    const int64_t item = static_cast<int64_t>(c10::elementSize(*dtype));
    TORCH_CHECK(offset >= 0 && offset % item == 0 && offset <= data_size &&
                    *nbytes <= data_size - offset,
                fn, ": '", path, "': key ", krepr, " has offset ",
                e.contains("offset") ? json_excerpt(e["offset"]) : "(none)",
                " and ", *nbytes, " bytes, which do not fit in the file's ",
                data_size, " data bytes");
    impl->nodes.push_back(
        Node{it.key(), tensor_on(storage, offset, *dtype, *shape), nullptr});
    key_path.pop_back();
  }
  return impl;
}

}  // namespace

namespace detail {

ImplPtr consolidated_to(const TensorDictImpl& impl, at::Device device,
                        bool non_blocking) {
  const at::Tensor& buf = impl.consolidated;
  at::Tensor moved = buf.to(device, non_blocking);
  const int64_t base = buf.storage_offset();  // bytes (uint8)
  const c10::Storage& storage = moved.storage();
  const int64_t moved_base = moved.storage_offset();
  return over_buffer(impl, moved, device, [&](const at::Tensor& t) {
    const int64_t byte_off =
        t.storage_offset() * t.element_size() - base + moved_base;
    at::Tensor v = at::empty({0}, moved.options().dtype(t.scalar_type()));
    v.set_(storage, byte_off / t.element_size(), t.sizes(), t.strides());
    return v;
  });
}

namespace {
// Core moves consolidated dicts through this (core/internal.h).
struct RegisterConsolidatedHook {
  RegisterConsolidatedHook() { io_hooks().consolidated_to = &consolidated_to; }
} register_consolidated_hook;
}  // namespace

}  // namespace detail

TensorDict TensorDict::consolidate() const {
  detail::check_no_non_tensor("consolidate", "a consolidated TensorDict",
                              *impl_);
  std::vector<const at::Tensor*> leaves;
  detail::leaf_ptrs(*impl_, leaves);
  c10::optional<at::Device> dev;
  std::vector<int64_t> offsets;
  offsets.reserve(leaves.size());
  int64_t total = 0;
  for (const at::Tensor* t : leaves) {
    TORCH_CHECK_VALUE(
        t->layout() == at::kStrided && !t->is_quantized(),
        "consolidate: every leaf must be a dense (strided) tensor");
    const at::Device d = detail::normalize_device(t->device());
    TORCH_CHECK_VALUE(!dev.has_value() || *dev == d,
                      "consolidate: the leaves live on different devices (",
                      detail::device_name(*dev), " and ",
                      detail::device_name(d), ")");
    dev = d;
    total = align_up(total, leaf_alignment(t->scalar_type()));
    offsets.push_back(total);
    total += t->numel() * static_cast<int64_t>(t->element_size());
  }
  const at::Device device =
      dev.value_or(impl_->device.value_or(at::Device(at::kCPU)));
  at::Tensor buffer =
      at::empty({total}, at::TensorOptions().dtype(at::kByte).device(device));
  const c10::Storage& storage = buffer.storage();
  auto* base = static_cast<uint8_t*>(buffer.data_ptr());
  size_t i = 0;
  int64_t prev_end = 0;
  ImplPtr out =
      over_buffer(*impl_, buffer, impl_->device, [&](const at::Tensor& t) {
        const int64_t off = offsets[i++];
        const int64_t nbytes =
            t.numel() * static_cast<int64_t>(t.element_size());
        at::Tensor v = tensor_on(storage, off, t.scalar_type(), t.sizes(),
                                 buffer.options());
        if (device.is_cpu()) {
          if (off > prev_end)
            std::memset(base + prev_end, 0,
                        static_cast<size_t>(off - prev_end));
          if (nbytes > 0) {
            if (t.is_contiguous()) {
              std::memcpy(base + off, t.data_ptr(),
                          static_cast<size_t>(nbytes));
            } else {
              v.copy_(t);
            }
          }
        } else {
          v.copy_(t);
        }
        prev_end = off + nbytes;
        return v;
      });
  return TensorDict(std::move(out));
}

bool TensorDict::is_consolidated() const {
  return detail::is_consolidated_impl(*impl_);
}

void TensorDict::save(const std::string& path) const {
  TORCH_CHECK_VALUE(!path.empty(), "save: the file name is empty");
  detail::check_no_non_tensor("save", "a saved file", *impl_);
  bool reuse = is_consolidated() && impl_->consolidated.device().is_cpu();
  if (reuse) {
    std::vector<const at::Tensor*> leaves;
    detail::leaf_ptrs(*impl_, leaves);
    for (const at::Tensor* t : leaves) reuse = reuse && t->is_contiguous();
  }
  TensorDict c = reuse ? *this : cpu().consolidate();
  const at::Tensor& buf = TensorDictImpl::of(c).consolidated;
  std::string meta;
  try {
    meta = save_meta(TensorDictImpl::of(c), buf).dump();
  } catch (const nlohmann::json::exception&) {
    TORCH_CHECK_VALUE(false, "save: a key is not valid UTF-8");
  }
  const auto [dir, name] = detail::split_path(path);
  TmpFiles tmps;
  try {
    remove_stale_tmps(dir, name);
    std::string tmp;
    const int fd =
        tmps.create(dir, name, buf.data_ptr(), static_cast<size_t>(buf.numel()),
                    Space::kSparse, tmp);
    write_all(fd, meta.data(), meta.size(), tmp);
    const int64_t len = static_cast<int64_t>(meta.size());
    write_all(fd, &len, sizeof(len), tmp);
    rename_or_throw(tmp, path);
  } catch (const c10::Error& e) {
    tmps.remove_all();
    TORCH_CHECK(false, "save: ", e.msg());
  }
}

TensorDict TensorDict::load(const std::string& path) {
  struct stat st {};
  Fd fd = open_regular_file(path, /*writable=*/false, "load: ", st);
  TORCH_CHECK(fd.valid(), "load: '", path, "' does not exist");
  const int64_t size = st.st_size;
  TORCH_CHECK(
      size >= 8, "load: '", path, "' holds ", size,
      " bytes, too few for a saved TensorDict (it ends with an 8-byte length)");
  // Copy-on-write mapping: writes into the loaded dict do not reach the file.
  c10::Storage storage =
      map_storage(fd.get(), static_cast<size_t>(size),
                  static_cast<size_t>(size), true, false, path);
  const auto* bytes = static_cast<const char*>(storage.data());
  int64_t len = 0;
  std::memcpy(&len, bytes + size - 8, sizeof(len));
  TORCH_CHECK(len >= 0 && len <= size - 8, "load: '", path,
              "' is not a saved TensorDict (its metadata length ", len,
              " does not fit in its ", size, " bytes)");
  const int64_t data_size = size - 8 - len;
  storage.set_nbytes(static_cast<size_t>(data_size));
  at::Tensor buffer = tensor_on(storage, 0, at::kByte, {data_size});
  return TensorDict(read_json(
      bytes + data_size, bytes + data_size + len, "load",
      "'" + path + "': the metadata", [&](const ordered_json& meta) {
        TORCH_CHECK(meta.is_object() &&
                        meta.value("type", ordered_json()) == "TensorDict",
                    "load: '", path, "' does not hold a saved TensorDict");
        std::vector<std::string> key_path;
        return load_meta(meta, storage, buffer, data_size, path, key_path, {},
                         0);
      }));
}

// ===========================================================================
// The single-file format's metadata, for other carriers (io/files.h)
// ===========================================================================

namespace detail {

c10::optional<at::ScalarType> dtype_from_name(const std::string& name) {
  return parse_dtype(name);
}

nlohmann::ordered_json consolidated_meta(const TensorDictImpl& root,
                                         const at::Tensor& buffer) {
  return save_meta(root, buffer);
}

ImplPtr dict_from_consolidated_meta(const nlohmann::ordered_json& meta,
                                    const at::Tensor& buffer, const char* fn,
                                    const std::string& source) {
  TORCH_CHECK(
      meta.is_object() && meta.value("type", ordered_json()) == "TensorDict",
      fn, ": '", source, "' does not describe a TensorDict");
  std::vector<std::string> key_path;
  return load_meta(meta, buffer.storage(), buffer, buffer.numel(), source,
                   key_path, {}, 0, fn);
}

}  // namespace detail
}  // namespace tensordict
