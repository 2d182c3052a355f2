// Persistence: loading Python tensordict's memmap directory format
// (io/memmap.cpp writes it, and describes it), from a directory or from a
// .tdz archive.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "core/non_tensor.h"
#include "core/tree.h"
#include "io/archive.h"
#include "io/files.h"
#include "io/memmap_names.h"
#include "io/meta.h"
#include "tensordict/lazy_stack.h"
#include "tensordict/persistence.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the memmap format is little-endian; big-endian hosts are not supported"
#endif

namespace tensordict {

using detail::checked_nbytes;
using detail::errno_str;
using detail::Fd;
using detail::file_name_candidates;
using detail::ImplPtr;
using detail::is_reserved_key;
using detail::join_path;
using detail::json_excerpt;
using detail::kNonTensorDataType;
using detail::kNonTensorStackType;
using detail::map_storage;
using detail::Node;
using detail::open_regular_file;
using detail::parse_batch;
using detail::parse_device;
using detail::parse_dtype;
using detail::parse_shape;
using detail::read_json;
using detail::read_small_file;
using detail::tensor_on;
using detail::TensorDictImpl;
using ordered_json = nlohmann::ordered_json;

namespace {

// ===========================================================================
// Loading
// ===========================================================================

// What load_memmap reads: a directory tree, or an archive (`archive` set),
// whose entries it names as paths under the archive's: "<archive>/sub/x".
struct LoadCtx {
  bool read_only;
  std::vector<std::pair<dev_t, ino_t>> stack;  // directories being loaded
  const detail::Archive* archive = nullptr;

  // The archive entry that `path` names ("" for the archive's root).
  std::string entry(const std::string& path) const {
    const std::string& root = archive->path();
    return path.size() > root.size() ? path.substr(root.size() + 1)
                                     : std::string();
  }
  // The small file `path` (a meta.json), or nullopt when there is none.
  c10::optional<std::string> read_text(const std::string& path) const {
    return archive != nullptr ? archive->read_small(entry(path))
                              : read_small_file(path, "load_memmap");
  }
  // Whether a file or directory exists at `path` (or the stat fails for
  // another reason than its absence, which the load then reports).
  bool exists(const std::string& path) const {
    if (archive != nullptr) {
      return archive->is_file(entry(path)) || archive->is_dir(entry(path));
    }
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
  }
};

// The JSON object in `dir`/meta.json (which must exist) for `krepr`'s entry.
ordered_json read_entry_meta(const LoadCtx& ctx, const std::string& dir,
                             const std::string& krepr) {
  const std::string path = join_path(dir, "meta.json");
  const c10::optional<std::string> text = ctx.read_text(path);
  TORCH_CHECK(text.has_value(), "load_memmap: key ", krepr, ": '", path,
              "' is missing");
  ordered_json j =
      read_json(text->data(), text->data() + text->size(), "load_memmap",
                "'" + path + "'", [](const ordered_json& v) { return v; });
  TORCH_CHECK(j.is_object(), "load_memmap: '", path,
              "' must hold a JSON object, got ", json_excerpt(j));
  return j;
}

// The non-tensor entry (Python's NonTensorData or NonTensorStack) stored in
// `dir`, under a level of batch size `parent_batch`. NonTensorData: "data"
// in meta.json; its batch size from _tensordict/meta.json (0.4), else the
// parent's (newer versions write none). NonTensorStack: "data", the values
// as nested lists over the parent's batch size (the only field Python 0.4
// reads back).
ImplPtr load_non_tensor(const LoadCtx& ctx, const std::string& dir, bool stack,
                        const std::vector<int64_t>& parent_batch,
                        const std::string& krepr) {
  const std::string path = join_path(dir, "meta.json");
  const ordered_json meta = read_entry_meta(ctx, dir, krepr);
  const char* want = stack ? kNonTensorStackType : kNonTensorDataType;
  auto type_it = meta.find("_type");
  TORCH_CHECK(
      type_it != meta.end() && *type_it == want, "load_memmap: '", path,
      "': key ", krepr, " should hold a ", want, ", but \"_type\" is ",
      type_it == meta.end() ? std::string("missing") : json_excerpt(*type_it));
  auto data = meta.find("data");
  TORCH_CHECK(data != meta.end() && !(stack && data->is_string()),
              "load_memmap: key ", krepr,
              ": its value was pickled by Python (it is not JSON), which "
              "this library cannot read ('",
              path, "' has no JSON \"data\")");
  if (!stack) {
    std::vector<int64_t> batch = parent_batch;
    const std::string td_dir = join_path(dir, "_tensordict");
    const std::string td_path = join_path(td_dir, "meta.json");
    if (ctx.exists(td_path)) {
      batch = parse_batch(read_entry_meta(ctx, td_dir, krepr), td_path, "shape",
                          "load_memmap");
      TORCH_CHECK(detail::starts_with(batch, parent_batch), "load_memmap: '",
                  td_path, "': the batch size ", detail::shape_str(batch),
                  " of key ", krepr,
                  " does not start with the parent's batch size ",
                  detail::shape_str(parent_batch));
    }
    try {
      return detail::make_non_tensor_data(*data, std::move(batch),
                                          at::Device(at::kCPU), krepr);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "load_memmap: '", path, "': ", e.msg());
    }
  }
  // The elements, row-major over the batch.
  auto values = std::make_shared<std::vector<ordered_json>>();
  std::function<void(const ordered_json&, size_t)> flatten =
      [&](const ordered_json& v, size_t d) {
        if (d == parent_batch.size()) {
          values->push_back(v);
          return;
        }
        TORCH_CHECK(
            v.is_array() && static_cast<int64_t>(v.size()) == parent_batch[d],
            "load_memmap: '", path, "': key ", krepr,
            ": \"data\" does not hold nested lists of the batch size ",
            detail::shape_str(parent_batch));
        for (const auto& e : v) flatten(e, d + 1);
      };
  TORCH_CHECK(!parent_batch.empty(), "load_memmap: '", path, "': key ", krepr,
              " is a NonTensorStack in a dict without batch dims");
  flatten(*data, 0);
  const int64_t n = static_cast<int64_t>(values->size());
  ImplPtr level = detail::make_impl(parent_batch, at::Device(at::kCPU));
  level->non_tensor = detail::non_tensor_stack(
      std::move(values), at::arange(n, at::kLong).view(parent_batch));
  return level;
}

// The dict that `meta`, the parsed `path` (`dir`/meta.json), describes; its
// sub-dicts are loaded with load_dir.
ImplPtr load_level(const ordered_json& meta, const std::string& dir,
                   const std::string& path, std::vector<std::string>& key_path,
                   LoadCtx& ctx);

// The dict stored in directory `dir`; `ctx.stack` holds its parents.
ImplPtr load_dir(const std::string& dir, std::vector<std::string>& key_path,
                 LoadCtx& ctx) {
  struct stat st {};
  if (ctx.archive != nullptr) {
    TORCH_CHECK(ctx.archive->is_dir(ctx.entry(dir)), "load_memmap: '", dir,
                "' is not a directory of the archive");
  } else if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    TORCH_CHECK(err != ENOENT, "load_memmap: '", dir, "' does not exist");
    TORCH_CHECK(false, "load_memmap: cannot open '", dir,
                "': ", errno_str(err));
  } else {
    TORCH_CHECK(S_ISDIR(st.st_mode), "load_memmap: '", dir,
                "' is not a directory");
    for (const auto& s : ctx.stack) {
      TORCH_CHECK(!(s.first == st.st_dev && s.second == st.st_ino),
                  "load_memmap: '", dir,
                  "' is one of its own parent directories");
    }
  }
  TORCH_CHECK(ctx.stack.size() < 64, "load_memmap: '", dir,
              "' is nested more than 64 levels deep");
  ctx.stack.emplace_back(st.st_dev, st.st_ino);

  const std::string path = join_path(dir, "meta.json");
  const c10::optional<std::string> text = ctx.read_text(path);
  TORCH_CHECK(text.has_value(), "load_memmap: '", dir,
              "' is not a TensorDict memmap directory: it has no meta.json");
  ImplPtr impl =
      read_json(text->data(), text->data() + text->size(), "load_memmap",
                "'" + path + "'", [&](const ordered_json& meta) {
                  return load_level(meta, dir, path, key_path, ctx);
                });
  ctx.stack.pop_back();
  return impl;
}

// Whether `meta` (a directory's meta.json) is a Python tensorclass's: its
// `_type` names a class ("<class 'module.Name'>") that is neither a
// TensorDict nor non-tensor data.
bool is_tensorclass_meta(const ordered_json& meta) {
  auto it = meta.find("_type");
  if (it == meta.end() || !it->is_string()) return false;
  const auto& t = it->get_ref<const std::string&>();
  return t.size() > 10 && t.compare(0, 8, "<class '") == 0 &&
         t.compare(t.size() - 2, 2, "'>") == 0 &&
         !detail::is_tensordict_meta(meta) && t != kNonTensorDataType &&
         t != kNonTensorStackType && t != detail::kLazyStackType;
}

// The directory of the dict that the tensorclass directory `dir` (its
// meta.json `meta`) holds: `dir/_tensordict`. Python keeps a tensorclass's
// non-tensor fields in that meta.json (JSON values) and in other.pickle: a
// field set to None (null) is a missing field; any other has no place in a
// TensorDict.
std::string tensorclass_dict_dir(const LoadCtx& ctx, const ordered_json& meta,
                                 const std::string& dir) {
  const std::string path = join_path(dir, "meta.json");
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    TORCH_CHECK(it.key() == "_type" || it.value().is_null(), "load_memmap: '",
                path, "': the tensorclass ",
                meta.at("_type").get<std::string>(),
                " has the non-tensor field ", NestedKey(it.key()).str(),
                ", which a TensorDict cannot hold");
  }
  TORCH_CHECK(!ctx.exists(join_path(dir, "other.pickle")), "load_memmap: '",
              join_path(dir, "other.pickle"),
              "' holds non-tensor fields pickled by Python, which this "
              "library cannot read");
  return join_path(dir, "_tensordict");
}

// Checks that `meta`, the parsed `path`, describes a dict level.
void check_level_meta(const ordered_json& meta, const std::string& path) {
  TORCH_CHECK(meta.is_object(), "load_memmap: '", path,
              "' must hold a JSON object, got ", json_excerpt(meta));
  auto type_it = meta.find("_type");
  TORCH_CHECK(
      detail::is_tensordict_meta(meta), "load_memmap: '", path,
      "' does not describe a TensorDict (\"_type\" is ",
      type_it == meta.end() ? std::string("missing") : json_excerpt(*type_it),
      ")");
}

// The sub-directory of `dir` that holds the sub-dict `key` of the level
// `meta` describes: the first of its candidate names that exists.
std::string find_sub_dir(const LoadCtx& ctx, const std::string& dir,
                         const std::string& key, const ordered_json& meta) {
  const std::vector<std::string> names = file_name_candidates(key, meta);
  std::string sub_dir;
  for (const auto& name : names) {
    const std::string candidate = join_path(dir, name);
    if (ctx.exists(candidate)) {
      sub_dir = candidate;
      break;
    }
  }
  TORCH_CHECK(!sub_dir.empty(), "load_memmap: '", join_path(dir, names[0]),
              "' does not exist",
              names.size() > 1
                  ? " (nor does '" + join_path(dir, names[1]) + "')"
                  : std::string());
  return sub_dir;
}

// The sub-dict entry `e` (a TensorDict, NonTensorData or NonTensorStack
// directory) of the last key of `key_path` (`krepr`), in the level `meta`
// (the parsed `path` in `dir`) of batch size `parent_batch`.
ImplPtr load_sub_entry(const ordered_json& e, const ordered_json& meta,
                       const std::string& dir, const std::string& path,
                       const std::vector<int64_t>& parent_batch,
                       std::vector<std::string>& key_path,
                       const std::string& krepr, LoadCtx& ctx) {
  const auto t_it = e.find("type");
  const std::string type =
      t_it->is_string() ? t_it->get<std::string>() : json_excerpt(*t_it);
  const bool non_tensor = type == "NonTensorData" || type == "NonTensorStack";
  ImplPtr sub;
  std::string sub_dir;
  if (type == "TensorDict" || non_tensor) {
    sub_dir = find_sub_dir(ctx, dir, key_path.back(), meta);
    sub = non_tensor ? load_non_tensor(ctx, sub_dir, type == "NonTensorStack",
                                       parent_batch, krepr)
                     : load_dir(sub_dir, key_path, ctx);
  } else {
    // Another type is a Python tensorclass (its class name) when the entry's
    // directory says so: the dict is in its _tensordict/.
    ordered_json cls;
    if (t_it->is_string()) {
      for (const auto& name : file_name_candidates(key_path.back(), meta)) {
        const std::string candidate = join_path(dir, name);
        if (!ctx.exists(join_path(candidate, "meta.json"))) continue;
        sub_dir = candidate;
        cls = read_entry_meta(ctx, sub_dir, krepr);
        break;
      }
    }
    TORCH_CHECK(type != "LazyStackedTensorDict", "load_memmap: '", path,
                "': key ", krepr,
                " holds a lazy stack, which a C++ TensorDict cannot hold "
                "(LazyStackedTensorDict::load_memmap opens its directory)");
    TORCH_CHECK(is_tensorclass_meta(cls), "load_memmap: '", path, "': key ",
                krepr, " has unsupported type \"", type, "\"");
    sub = load_dir(tensorclass_dict_dir(ctx, cls, sub_dir), key_path, ctx);
  }
  TORCH_CHECK(detail::starts_with(sub->batch_size, parent_batch),
              "load_memmap: '", join_path(sub_dir, "meta.json"),
              "': the batch size ", detail::shape_str(sub->batch_size),
              " of key ", krepr,
              " does not start with the parent's batch size ",
              detail::shape_str(parent_batch));
  return sub;
}

// A leaf's entry of meta.json, checked.
struct LeafMeta {
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t nbytes;
};

// Checks the leaf entry `e` of key `krepr` in `path`, a level of batch size
// `batch`.
LeafMeta parse_leaf_meta(const ordered_json& e, const std::string& path,
                         const std::string& krepr, c10::IntArrayRef batch) {
  auto d_it = e.find("dtype");
  TORCH_CHECK(d_it != e.end(), "load_memmap: '", path, "': key ", krepr,
              " has no \"dtype\"");
  c10::optional<at::ScalarType> dtype;
  if (d_it->is_string()) dtype = parse_dtype(d_it->get<std::string>());
  TORCH_CHECK_TYPE(dtype.has_value(), "load_memmap: '", path, "': key ", krepr,
                   " has unknown dtype ", json_excerpt(*d_it));
  auto s_it = e.find("shape");
  TORCH_CHECK(s_it != e.end(), "load_memmap: '", path, "': key ", krepr,
              " has no \"shape\"");
  auto shape = parse_shape(*s_it);
  TORCH_CHECK(shape.has_value(), "load_memmap: '", path, "': key ", krepr,
              " has an invalid shape ", json_excerpt(*s_it),
              " (expected a list of non-negative integers)");
  auto n_it = e.find("is_nested");
  TORCH_CHECK(n_it == e.end() || !n_it->is_boolean() || !n_it->get<bool>(),
              "load_memmap: '", path, "': key ", krepr,
              " is a nested (jagged) tensor, which is not supported");
  TORCH_CHECK(detail::starts_with(*shape, batch), "load_memmap: '", path,
              "': key ", krepr, " has shape ", detail::shape_str(*shape),
              ", which does not start with the batch size ",
              detail::shape_str(batch));
  const auto nbytes = checked_nbytes(*shape, *dtype);
  TORCH_CHECK(nbytes.has_value(), "load_memmap: '", path, "': key ", krepr,
              " has shape ", detail::shape_str(*shape), ", which is too large");
  return LeafMeta{*dtype, std::move(*shape), *nbytes};
}

// The leaf of `krepr` in an archive: a view (or copy) of the entry of the
// first of its candidate file `names` in `dir`.
at::Tensor archive_leaf(const LoadCtx& ctx, const std::string& dir,
                        const std::vector<std::string>& names,
                        const LeafMeta& m, const std::string& krepr) {
  at::Tensor leaf;
  for (const auto& name : names) {
    leaf = ctx.archive->leaf(ctx.entry(join_path(dir, name + ".memmap")),
                             m.dtype, m.shape, m.nbytes,
                             "load_memmap: key " + krepr + ": ");
    if (leaf.defined()) break;
  }
  TORCH_CHECK(leaf.defined(), "load_memmap: key ", krepr, ": leaf entry '",
              join_path(dir, names[0] + ".memmap"), "' is missing",
              names.size() > 1 ? " (and so is '" +
                                     join_path(dir, names[1] + ".memmap") + "')"
                               : std::string());
  return leaf;
}

// The leaf of `krepr` in a directory: the first of its candidate files
// `names` in `dir` that exists, mapped.
at::Tensor mapped_leaf(const LoadCtx& ctx, const std::string& dir,
                       const std::vector<std::string>& names, const LeafMeta& m,
                       const std::string& krepr) {
  std::string file;
  struct stat fst {};
  Fd fd;
  for (const auto& name : names) {
    file = join_path(dir, name + ".memmap");
    fd = open_regular_file(file, !ctx.read_only,
                           "load_memmap: key " + krepr + ": ", fst);
    if (fd.valid()) break;
  }
  TORCH_CHECK(fd.valid(), "load_memmap: key ", krepr, ": leaf file '",
              join_path(dir, names[0] + ".memmap"), "' is missing",
              names.size() > 1 ? " (and so is '" +
                                     join_path(dir, names[1] + ".memmap") + "')"
                               : std::string());
  TORCH_CHECK(fst.st_size >= m.nbytes, "load_memmap: key ", krepr,
              ": leaf file '", file, "' holds ", fst.st_size,
              " bytes, but shape ", detail::shape_str(m.shape), " of ",
              detail::dtype_name(m.dtype), " needs ", m.nbytes);
  // read_only: a private copy-on-write mapping of a file opened O_RDONLY.
  // Writes into the leaves stay in this process's memory and never reach
  // the file (and never fault).
  c10::Storage storage = map_storage(
      fd.get(), static_cast<size_t>(m.nbytes), static_cast<size_t>(m.nbytes),
      /*writable=*/true, /*shared=*/!ctx.read_only, file);
  return tensor_on(storage, 0, m.dtype, m.shape);
}

// The leaf `key` (`krepr`) of the level `meta` describes in `dir`.
at::Tensor load_leaf(const LoadCtx& ctx, const std::string& dir,
                     const std::string& key, const ordered_json& meta,
                     const LeafMeta& m, const std::string& krepr) {
  if (m.nbytes == 0) {
    return at::empty(m.shape, at::TensorOptions().dtype(m.dtype));
  }
  const std::vector<std::string> names = file_name_candidates(key, meta);
  return ctx.archive != nullptr ? archive_leaf(ctx, dir, names, m, krepr)
                                : mapped_leaf(ctx, dir, names, m, krepr);
}

ImplPtr load_level(const ordered_json& meta, const std::string& dir,
                   const std::string& path, std::vector<std::string>& key_path,
                   LoadCtx& ctx) {
  check_level_meta(meta, path);
  auto impl = detail::make_impl(parse_batch(meta, path, "shape", "load_memmap"),
                                c10::nullopt);
  const c10::optional<at::Device> device =
      parse_device(meta, path, "load_memmap");
  // As in Python, a dict over an archive is no memmap dict: not locked, its
  // non-tensor values free to change (the archive is never rewritten).
  if (ctx.archive == nullptr) impl->saved_path = dir;

  for (auto it = meta.begin(); it != meta.end(); ++it) {
    const std::string& key = it.key();
    if (is_reserved_key(key)) continue;
    key_path.push_back(key);
    TORCH_CHECK(!key.empty(), "load_memmap: '", path,
                "' has an empty key, which a C++ TensorDict cannot hold");
    const std::string krepr = NestedKey(key_path).str();
    const ordered_json& e = it.value();
    TORCH_CHECK(e.is_object(), "load_memmap: '", path, "': the entry of key ",
                krepr, " must be a JSON object, got ", json_excerpt(e));
    if (e.contains("type")) {
      ImplPtr sub = load_sub_entry(e, meta, dir, path, impl->batch_size,
                                   key_path, krepr, ctx);
      impl->nodes.push_back(Node{key, at::Tensor(), std::move(sub)});
    } else {
      const LeafMeta m = parse_leaf_meta(e, path, krepr, impl->batch_size);
      impl->nodes.push_back(
          Node{key, load_leaf(ctx, dir, key, meta, m, krepr), nullptr});
    }
    key_path.pop_back();
  }
  if (device.has_value()) {
    if (!device->is_cpu()) {
      for (auto& n : impl->nodes) {
        if (!n.is_dict()) n.tensor = n.tensor.to(*device);
      }
    }
    impl->device = *device;
  }
  return impl;
}

}  // namespace

TensorDict TensorDict::load_memmap(const std::string& prefix, bool read_only) {
  TORCH_CHECK_VALUE(!prefix.empty(),
                    "load_memmap: the directory name is empty");
  LoadCtx ctx{read_only, {}};
  std::unique_ptr<detail::Archive> archive;
  struct stat st {};
  if (::stat(prefix.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    archive =
        std::make_unique<detail::Archive>(prefix, read_only, "load_memmap");
    ctx.archive = archive.get();
  }
  // A Python tensorclass's directory holds its dict in _tensordict/.
  std::string dir = prefix;
  const std::string root_meta = join_path(prefix, "meta.json");
  const c10::optional<std::string> text = ctx.read_text(root_meta);
  if (text.has_value()) {
    dir = read_json(
        text->data(), text->data() + text->size(), "load_memmap",
        "'" + root_meta + "'", [&](const ordered_json& meta) {
          TORCH_CHECK(!meta.is_object() || !detail::is_lazy_stack_meta(meta),
                      "load_memmap: '", prefix,
                      "' holds a lazy stack: open it with "
                      "LazyStackedTensorDict::load_memmap");
          return meta.is_object() && is_tensorclass_meta(meta)
                     ? tensorclass_dict_dir(ctx, meta, prefix)
                     : prefix;
        });
  }
  std::vector<std::string> key_path;
  ImplPtr root = load_dir(dir, key_path, ctx);
  if (archive == nullptr) {
    detail::for_each_level(*root,
                           [](TensorDictImpl& level) { level.locked = true; });
  }
  return TensorDict(std::move(root));
}

LazyStackedTensorDict LazyStackedTensorDict::load_memmap(
    const std::string& prefix, bool read_only) {
  TORCH_CHECK_VALUE(!prefix.empty(),
                    "load_memmap: the directory name is empty");
  struct stat st {};
  TORCH_CHECK_VALUE(::stat(prefix.c_str(), &st) != 0 || !S_ISREG(st.st_mode),
                    "load_memmap: '", prefix,
                    "' is a file, and a lazy stack is a directory");
  const std::string root_meta = join_path(prefix, "meta.json");
  const c10::optional<std::string> text =
      read_small_file(root_meta, "load_memmap");
  TORCH_CHECK(text.has_value(), "load_memmap: '", root_meta,
              "' does not exist");
  const int64_t stack_dim = read_json(
      text->data(), text->data() + text->size(), "load_memmap",
      "'" + root_meta + "'", [&](const ordered_json& meta) -> int64_t {
        TORCH_CHECK(meta.is_object() && detail::is_lazy_stack_meta(meta),
                    "load_memmap: '", root_meta,
                    "' does not describe a LazyStackedTensorDict: ",
                    json_excerpt(meta));
        auto it = meta.find("stack_dim");
        TORCH_CHECK(
            it != meta.end() && it->is_number_integer(), "load_memmap: '",
            root_meta, "': \"stack_dim\" must be an integer, got ",
            it == meta.end() ? std::string("nothing") : json_excerpt(*it));
        return it->get<int64_t>();
      });
  // As Python loads them: 0/, 1/, ... while they exist.
  std::vector<TensorDict> tds;
  for (size_t i = 0;; ++i) {
    const std::string dir = join_path(prefix, std::to_string(i));
    if (::stat(dir.c_str(), &st) != 0) break;
    tds.push_back(TensorDict::load_memmap(dir, read_only));
  }
  TORCH_CHECK(!tds.empty(), "load_memmap: '", prefix,
              "' holds no tensordict of the lazy stack (no 0/)");
  try {
    return LazyStackedTensorDict(std::move(tds), stack_dim);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "load_memmap: '", prefix, "': ", e.msg());
  }
}

}  // namespace tensordict
