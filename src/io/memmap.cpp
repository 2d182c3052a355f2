// Persistence: Python tensordict's memmap directory format, written here
// and loaded by io/memmap_load.cpp (consolidation and the single file are
// in io/consolidate.cpp).
// tensordict/persistence.h states the contract.
//
// Memmap directory (one per dict level):
//   meta.json        {"<key>": {"device": "cpu", "shape": [...],
//                     "dtype": "torch.float32", "is_nested": false},
//                     "<sub>": {"type": "TensorDict"}, ...,
//                     "shape": [batch], "device": "cpu" (read: or "None"),
//                     "_type": "<class 'tensordict._td.TensorDict'>"}
//   <key>.memmap     raw little-endian C-contiguous bytes, no header
//   <sub>/           a sub-dict, with its own meta.json
// where a key names its file as is, or escaped where it must be (see "file
// names" below). A tensor class (tensordict/tensorclass.h) is written in
// Python's tensorclass layout: its directory holds
//   meta.json        {"_type": "<class 'module.Name'>"}
//   _tensordict/     its dict, as above
// and its parent's meta.json names it {"type": "Name"}.
//
// Leaves are tensors over `mmap`ed files: their storage's DataPtr owns the
// mapping and unmaps it when the last tensor dies (`is_mapped_tensor` checks
// the deleter).
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
#include "tensordict/tensorclass.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the memmap format is little-endian; big-endian hosts are not supported"
#endif

namespace tensordict {

using detail::escape_key;
using detail::file_name;
using detail::ImplPtr;
using detail::is_reserved_key;
using detail::join_path;
using detail::kNonTensorDataType;
using detail::kNonTensorStackType;
using detail::kTdType;
using detail::map_storage;
using detail::raw_name_ok;
using detail::remove_stale_tmps;
using detail::rename_or_throw;
using detail::Space;
using detail::supported_dtype;
using detail::tensor_on;
using detail::TensorDictImpl;
using detail::TmpFiles;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxFileName = 255;

// ===========================================================================
// Writing
// ===========================================================================

enum class WriteMode { kCopy, kZeros };

struct LeafPlan {
  at::Tensor* leaf;   // the stored leaf, replaced by `mapped` on commit
  std::string name;   // file name
  std::string path;   // final file path
  std::string tmp;    // temporary file path
  at::Tensor mapped;  // the new leaf
};

// One directory of the plan: a dict level.
struct DirPlan {
  TensorDictImpl* impl;
  std::string dir;
  std::string meta;  // meta.json content
  std::vector<LeafPlan> leaves;
  // What an earlier write may have left under the escaped names of entries
  // now stored under their raw names: leaf files and sub-dicts' meta.json.
  std::vector<std::string> stale;
};

struct MemmapPlan {
  std::vector<DirPlan> dirs;       // every level, parents first
  std::vector<size_t> meta_order;  // indices into `dirs`, sub-dicts first
};

// The meta.json of a non-tensor level, in Python's format.
ordered_json non_tensor_meta(const TensorDictImpl& level) {
  if (!detail::non_tensor_is_stack(level)) {
    return ordered_json{{"_type", kNonTensorDataType},
                        {"data", level.non_tensor->data},
                        {"_metadata", nullptr}};
  }
  // Python's is its outer stack's dim: here the first stack dim (readers
  // take the layout from "data" alone).
  const auto& dims = level.non_tensor->stack_dims;
  const auto first = std::find(dims.begin(), dims.end(), 1);
  const int64_t stack_dim = first == dims.end() ? 0 : first - dims.begin();
  return ordered_json{{"_type", kNonTensorStackType},
                      {"stack_dim", stack_dim},
                      {"device", "cpu"},
                      {"data", detail::non_tensor_tolist(level)}};
}

// The metadata of a dict level itself in its meta.json: its batch size,
// its device (a memory-mapped dict lives on the CPU, whatever device it
// had) and Python's class name.
ordered_json level_meta(const TensorDictImpl& level) {
  ordered_json batch = ordered_json::array();
  for (int64_t d : level.batch_size) batch.push_back(d);
  return ordered_json{
      {"shape", std::move(batch)}, {"device", "cpu"}, {"_type", kTdType}};
}

// The meta.json entry of a leaf.
ordered_json leaf_meta(const at::Tensor& t) {
  ordered_json shape = ordered_json::array();
  for (int64_t d : t.sizes()) shape.push_back(d);
  return ordered_json{{"device", "cpu"},
                      {"shape", std::move(shape)},
                      {"dtype", detail::dtype_name(t.scalar_type())},
                      {"is_nested", false}};
}

// What an earlier write in the other key-name mode left under the name of
// `key` that it is not stored under now (`name`, with `suffix`), if that
// name is no other entry's; empty when there is none. An escaped name holds
// a '%' and a hex digit pair, so it is no raw name and no other key escapes
// to it; a raw one (raw_name_ok) holds no such pair, so it is no other
// key's name.
std::string other_name(const std::string& key, const std::string& name,
                       const char* suffix) {
  std::string escaped = escape_key(key) + suffix;
  if (name != escaped) return escaped;
  if (raw_name_ok(key) && key + suffix != name) return key + suffix;
  return std::string();
}

// Builds the write plan of a tree during one `detail::visit` of it: `enter`
// opens a level (its directory), `leaf` plans a leaf's file, `leave` writes
// the level's meta.json. Each step checks what the format cannot hold, and
// none touches the file system.
class MemmapPlanner {
 public:
  MemmapPlanner(const std::string& prefix, MemmapKeyNames key_names,
                const char* fn,
                const std::vector<detail::TensorClassType>* classes,
                const int64_t* lazy_stack_dim)
      : prefix_(prefix),
        key_names_(key_names),
        fn_(fn),
        classes_(classes),
        lazy_stack_dim_(lazy_stack_dim) {}

  void enter(const detail::KeyPath& path, TensorDictImpl& level) {
    std::string dir = prefix_;
    const std::string* cls = class_at(path);
    if (!path.parts.empty()) {
      const std::string name = entry_name(path, /*is_dict=*/true);
      const std::string type = cls != nullptr ? cls->substr(cls->rfind('.') + 1)
                               : level.non_tensor == nullptr ? "TensorDict"
                               : detail::non_tensor_is_stack(level)
                                   ? "NonTensorStack"
                                   : "NonTensorData";
      // A lazy stack's meta.json lists no dicts: they are 0/, 1/, ...
      if (lazy_stack_dim_ == nullptr || path.parts.size() > 1) {
        levels_.back().meta[*path.parts.back()] = ordered_json{{"type", type}};
      }
      dir = join_path(current().dir, name);
    }
    size_t wrapper = kNoWrapper;
    if (cls != nullptr) {
      // A tensor class: its type here, its dict in _tensordict/.
      const ordered_json m{{"_type", "<class '" + *cls + "'>"}};
      plan_.dirs.push_back(DirPlan{nullptr, dir, m.dump(), {}, {}});
      wrapper = plan_.dirs.size() - 1;
      dir = join_path(dir, "_tensordict");
    }
    plan_.dirs.push_back(DirPlan{&level, std::move(dir), {}, {}, {}});
    levels_.push_back(Level{
        plan_.dirs.size() - 1, ordered_json::object(), {"meta.json"}, wrapper});
  }

  void leaf(const detail::KeyPath& path, at::Tensor& t) {
    std::string name = entry_name(path, /*is_dict=*/false);
    TORCH_CHECK_TYPE(supported_dtype(t.scalar_type()), fn_, ": key ",
                     path.key().str(), " has dtype ",
                     detail::dtype_name(t.scalar_type()),
                     ", which the memmap format does not support");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided && !t.is_quantized(), fn_,
                      ": key ", path.key().str(),
                      " is not a dense (strided) tensor and cannot be "
                      "memory-mapped");
    levels_.back().meta[*path.parts.back()] = leaf_meta(t);
    DirPlan& d = current();
    std::string file = join_path(d.dir, name);
    d.leaves.push_back(LeafPlan{&t, std::move(name), std::move(file), {}, {}});
  }

  void leave(const detail::KeyPath& path, TensorDictImpl& level) {
    ordered_json& meta = levels_.back().meta;
    const ordered_json td_meta = level_meta(level);
    if (lazy_stack_dim_ != nullptr && path.parts.empty()) {
      meta = ordered_json{{"_type", detail::kLazyStackType},
                          {"stack_dim", *lazy_stack_dim_}};
    } else if (level.non_tensor != nullptr) {
      // Python's NonTensorData / NonTensorStack directory (see
      // persistence.h): the value in meta.json, and for NonTensorData the
      // batch size in _tensordict/meta.json, which 0.4 needs.
      meta = non_tensor_meta(level);
      if (!detail::non_tensor_is_stack(level)) {
        const std::string sub = join_path(current().dir, "_tensordict");
        plan_.dirs.push_back(DirPlan{nullptr, sub, td_meta.dump(), {}, {}});
        plan_.meta_order.push_back(plan_.dirs.size() - 1);
      }
    } else {
      for (auto it = td_meta.begin(); it != td_meta.end(); ++it) {
        meta[it.key()] = it.value();
      }
    }
    try {
      current().meta = meta.dump();
    } catch (const nlohmann::json::exception&) {
      // Keys were checked; a non-tensor string value was not.
      TORCH_CHECK_VALUE(false, fn_, ": key ", path.key().str(),
                        ": its non-tensor value holds a string that is "
                        "not valid UTF-8, which meta.json cannot hold");
    }
    plan_.meta_order.push_back(levels_.back().dir);
    if (levels_.back().wrapper != kNoWrapper) {
      plan_.meta_order.push_back(levels_.back().wrapper);
    }
    levels_.pop_back();
  }

  MemmapPlan take() { return std::move(plan_); }

 private:
  // A level being planned: its directory, its meta.json so far and the
  // file-system names it uses.
  struct Level {
    size_t dir;
    ordered_json meta;
    std::vector<std::string> names;
    size_t wrapper;  // a tensor class's directory (its meta.json), if any
  };
  static constexpr size_t kNoWrapper = static_cast<size_t>(-1);

  // The Python type of the tensor class at `path`, if it is one.
  const std::string* class_at(const detail::KeyPath& path) const {
    if (classes_ == nullptr) return nullptr;
    for (const auto& c : *classes_) {
      if (c.path.size() != path.parts.size()) continue;
      bool same = true;
      for (size_t i = 0; same && i < c.path.size(); ++i) {
        same = c.path[i] == *path.parts[i];
      }
      if (same) return &c.type;
    }
    return nullptr;
  }

  // The innermost level's directory.
  DirPlan& current() { return plan_.dirs[levels_.back().dir]; }

  // Checks that meta.json can hold the key of the entry at `path`.
  void check_key(const detail::KeyPath& path) const {
    const std::string& key = *path.parts.back();
    TORCH_CHECK_VALUE(!is_reserved_key(key), fn_, ": key ", path.key().str(),
                      " is reserved by the memmap format (meta.json uses "
                      "\"shape\", \"device\" and \"_type\" for the dict's own "
                      "metadata)");
    try {
      (void)ordered_json(key).dump();
    } catch (const nlohmann::json::exception&) {
      TORCH_CHECK_VALUE(false, fn_, ": key ", path.key().str(),
                        " is not valid UTF-8, which meta.json cannot hold");
    }
  }

  // Checks the entry at `path` of the innermost level; returns its file
  // name, and plans the removal of what an earlier write left under its
  // other name.
  std::string entry_name(const detail::KeyPath& path, bool is_dict) {
    check_key(path);
    const std::string& key = *path.parts.back();
    const char* suffix = is_dict ? "" : ".memmap";
    std::string name = file_name(key, key_names_) + suffix;
    TORCH_CHECK_VALUE(name.size() + 32 <= kMaxFileName, fn_, ": key ",
                      path.key().str(), " is too long for a file name ('", name,
                      "' has ", name.size(), " bytes)");
    std::vector<std::string>& names = levels_.back().names;
    for (const auto& used : names) {
      TORCH_CHECK_VALUE(used != name, fn_, ": key ", path.key().str(),
                        " would be stored as '", name,
                        "', which another entry of the same dict uses");
    }
    names.push_back(name);
    const std::string other = other_name(key, name, suffix);
    if (!other.empty()) {
      DirPlan& d = current();
      d.stale.push_back(is_dict
                            ? join_path(join_path(d.dir, other), "meta.json")
                            : join_path(d.dir, other));
    }
    return name;
  }

  std::string prefix_;
  MemmapKeyNames key_names_;
  const char* fn_;
  const std::vector<detail::TensorClassType>* classes_;
  // Set when the root is a lazy stack's (its nodes "0", "1", ... its dicts).
  const int64_t* lazy_stack_dim_;
  MemmapPlan plan_;
  std::vector<Level> levels_;  // the innermost last
};

// Validates the tree under `root` and builds the write plan, without touching
// the file system.
MemmapPlan plan_memmap(
    TensorDictImpl& root, const std::string& prefix, MemmapKeyNames key_names,
    const char* fn,
    const std::vector<detail::TensorClassType>* classes = nullptr,
    const int64_t* lazy_stack_dim = nullptr) {
  MemmapPlanner planner(prefix, key_names, fn, classes, lazy_stack_dim);
  detail::visit(
      root,
      [&](const detail::KeyPath& path, TensorDictImpl& level) {
        planner.enter(path, level);
      },
      [&](const detail::KeyPath& path, at::Tensor& t) {
        planner.leaf(path, t);
      },
      [&](const detail::KeyPath& path, TensorDictImpl& level) {
        planner.leave(path, level);
      });
  return planner.take();
}

void make_dirs(const MemmapPlan& plan) {
  for (const DirPlan& p : plan.dirs) detail::make_dir(p.dir);
}

// Writes every leaf to its temporary file and maps it.
void write_leaves(MemmapPlan& plan, WriteMode mode, Space space,
                  TmpFiles& tmps) {
  for (DirPlan& p : plan.dirs) {
    for (auto& lp : p.leaves) {
      const at::Tensor& old = *lp.leaf;
      const at::ScalarType dtype = old.scalar_type();
      const int64_t nbytes = static_cast<int64_t>(old.numel()) *
                             static_cast<int64_t>(old.element_size());
      if (nbytes == 0) {  // zero-element leaf: no file
        lp.mapped = at::empty(old.sizes(), at::TensorOptions().dtype(dtype));
        continue;
      }
      const void* data = nullptr;
      at::Tensor src;
      if (mode == WriteMode::kCopy) {
        src = old.detach();
        if (!src.device().is_cpu()) src = src.to(at::kCPU);
        src = src.contiguous();
        data = src.data_ptr();
      }
      const int fd = tmps.create(p.dir, lp.name, data,
                                 static_cast<size_t>(nbytes), space, lp.tmp);
      c10::Storage st =
          map_storage(fd, static_cast<size_t>(nbytes),
                      static_cast<size_t>(nbytes), true, true, lp.tmp);
      lp.mapped = tensor_on(st, 0, dtype, old.sizes());
    }
  }
}

void unlink_metas(const MemmapPlan& plan) {
  for (const DirPlan& p : plan.dirs) {
    ::unlink(join_path(p.dir, "meta.json").c_str());
  }
}

// Removes what earlier writes left under the escaped names of entries now
// stored under their raw names, which readers that try the escaped name first
// (Python tensordict >= 0.13) would take for the entries' data.
void unlink_stale(const MemmapPlan& plan) {
  for (const DirPlan& p : plan.dirs) {
    for (const auto& path : p.stale) ::unlink(path.c_str());
  }
}

// What the dict that `plan` replaces left that `plan` does not write over
// (detail::collect_old_entries): read before the old meta.json files go.
detail::OldEntries old_entries(const MemmapPlan& plan) {
  std::set<std::string> written;
  for (const DirPlan& p : plan.dirs) {
    written.insert(p.dir);
    written.insert(join_path(p.dir, "meta.json"));
    for (const auto& lp : p.leaves) written.insert(lp.path);
  }
  detail::OldEntries old;
  for (const DirPlan& p : plan.dirs) {
    if (p.impl != nullptr && p.impl->non_tensor == nullptr) {
      detail::collect_old_entries(p.dir, written, old);
    }
  }
  return old;
}

void rename_leaves(const MemmapPlan& plan) {
  for (const DirPlan& p : plan.dirs) {
    for (const auto& lp : p.leaves) {
      if (!lp.tmp.empty()) rename_or_throw(lp.tmp, lp.path);
    }
  }
}

// Each level's meta.json after its sub-dicts', the root's last.
void write_metas(const MemmapPlan& plan, TmpFiles& tmps) {
  for (size_t i : plan.meta_order) {
    const DirPlan& p = plan.dirs[i];
    const std::string final_path = join_path(p.dir, "meta.json");
    std::string tmp;
    (void)tmps.create(p.dir, "meta.json", p.meta.data(), p.meta.size(),
                      Space::kSparse, tmp);
    rename_or_throw(tmp, final_path);
  }
}

void commit(MemmapPlan& plan, WriteMode mode) {
  for (DirPlan& p : plan.dirs) {
    for (auto& lp : p.leaves) {
      at::Tensor t = lp.mapped;
      if (mode == WriteMode::kCopy && lp.leaf->requires_grad() &&
          at::isFloatingType(t.scalar_type())) {
        t.requires_grad_(true);
      }
      *lp.leaf = std::move(t);
    }
    if (p.impl == nullptr) continue;  // a NonTensorData's _tensordict/
    p.impl->saved_path = p.dir;
    p.impl->consolidated = at::Tensor();
    // As in Python: a memory-mapped dict lives on the CPU, and is locked
    // (a key added later would never reach the disk).
    p.impl->device = at::Device(at::kCPU);
    p.impl->locked = true;
  }
}

// Writes `impl` (already a private copy for memmap/memmap_like) under
// `prefix` and points its leaves at the files.
void memmap_impl(TensorDictImpl& impl, const std::string& prefix,
                 WriteMode mode, MemmapKeyNames names, const char* fn,
                 Space space = Space::kReserve,
                 const std::vector<detail::TensorClassType>* classes = nullptr,
                 const int64_t* lazy_stack_dim = nullptr) {
  TORCH_CHECK_VALUE(!prefix.empty(), fn, ": the directory name is empty");
  // Validates; no I/O.
  MemmapPlan plan =
      plan_memmap(impl, prefix, names, fn, classes, lazy_stack_dim);
  TmpFiles tmps;
  try {
    make_dirs(plan);
    for (const DirPlan& p : plan.dirs) remove_stale_tmps(p.dir);
    const detail::OldEntries old = old_entries(plan);
    write_leaves(plan, mode, space, tmps);
    // From here on no old meta.json can describe the new files.
    unlink_metas(plan);
    unlink_stale(plan);
    detail::remove_old_entries(old);
    rename_leaves(plan);
    write_metas(plan, tmps);
  } catch (const c10::Error& e) {
    tmps.remove_all();
    TORCH_CHECK(false, fn, ": ", e.msg());
  }
  commit(plan, mode);
}

// Writes `impl` as the archive `path` (tensordict/persistence.h): the files
// of the memmap directory plan_memmap plans, in Python's order
// (`_iter_memmap_dir`): at each level meta.json, the leaves by file name,
// then each sub-directory by name, depth first.
void archive_impl(TensorDictImpl& impl, const std::string& path, WriteMode mode,
                  MemmapKeyNames names, const char* fn, Space space) {
  MemmapPlan plan = plan_memmap(impl, path, names, fn);  // validates; no I/O
  struct stat st {};
  TORCH_CHECK_VALUE(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), fn,
                    ": '", path,
                    "' is a directory, so no archive can be written there");
  std::map<std::string, std::vector<size_t>> children;  // by parent directory
  for (size_t i = 1; i < plan.dirs.size(); ++i) {
    const std::string& d = plan.dirs[i].dir;
    children[d.substr(0, d.rfind('/'))].push_back(i);
  }
  auto base_name = [](const std::string& p) {
    return p.substr(p.rfind('/') + 1);
  };
  std::vector<at::Tensor> sources;  // the contiguous CPU bytes, kept alive
  std::vector<detail::ArchiveFile> files;
  std::function<void(size_t)> add = [&](size_t i) {
    const DirPlan& p = plan.dirs[i];
    const std::string rel =
        i == 0 ? std::string() : p.dir.substr(path.size() + 1) + "/";
    files.push_back(detail::ArchiveFile{rel + "meta.json", p.meta.data(),
                                        p.meta.size(), /*align=*/false});
    std::vector<const LeafPlan*> leaves;
    for (const LeafPlan& lp : p.leaves) leaves.push_back(&lp);
    std::sort(
        leaves.begin(), leaves.end(),
        [](const LeafPlan* a, const LeafPlan* b) { return a->name < b->name; });
    for (const LeafPlan* lp : leaves) {
      const at::Tensor& t = *lp->leaf;
      const auto nbytes = static_cast<uint64_t>(t.numel()) * t.element_size();
      if (nbytes == 0) continue;  // zero-element leaf: no file
      const void* data = nullptr;
      if (mode == WriteMode::kCopy) {
        at::Tensor src = t.detach();
        if (!src.device().is_cpu()) src = src.to(at::kCPU);
        sources.push_back(src.contiguous());
        data = sources.back().data_ptr();
      }
      files.push_back(detail::ArchiveFile{rel + lp->name, data, nbytes, true});
    }
    auto it = children.find(p.dir);
    if (it == children.end()) return;
    std::vector<size_t> subs = it->second;
    std::sort(subs.begin(), subs.end(), [&](size_t a, size_t b) {
      return base_name(plan.dirs[a].dir) < base_name(plan.dirs[b].dir);
    });
    for (size_t j : subs) add(j);
  };
  add(0);
  try {
    detail::write_archive(path, files, space);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, fn, ": ", e.msg());
  }
}

}  // namespace

// ===========================================================================
// Public API
// ===========================================================================

const TensorDict& TensorDict::memmap_(const std::string& prefix,
                                      MemmapKeyNames names) const {
  TORCH_CHECK_VALUE(!detail::is_archive_path(prefix), "memmap_: '", prefix,
                    "' names an archive (.tdz), which cannot hold this dict's "
                    "leaves in place: memmap(\"",
                    prefix, "\") writes it and returns a dict over it");
  // Each stored tensor is replaced by one with the same values over its
  // file; no key changes, so a locked dict may be memory-mapped (as in
  // Python).
  memmap_impl(*impl_, prefix, WriteMode::kCopy, names, "memmap_");
  return *this;
}

TensorDict TensorDict::memmap(const std::string& prefix,
                              MemmapKeyNames names) const {
  ImplPtr copy = detail::shallow_copy(*impl_);
  if (detail::is_archive_path(prefix)) {
    // As in Python: the dict over the archive is copy-on-write.
    archive_impl(*copy, prefix, WriteMode::kCopy, names, "memmap",
                 Space::kReserve);
    return load_memmap(prefix, /*read_only=*/true);
  }
  memmap_impl(*copy, prefix, WriteMode::kCopy, names, "memmap");
  return TensorDict(std::move(copy));
}

TensorDict TensorDict::memmap_like(const std::string& prefix, bool sparse,
                                   MemmapKeyNames names) const {
  ImplPtr copy = detail::shallow_copy(*impl_);
  const Space space = sparse ? Space::kSparse : Space::kReserve;
  if (detail::is_archive_path(prefix)) {
    // As in Python: writes into the dict reach the archive.
    archive_impl(*copy, prefix, WriteMode::kZeros, names, "memmap_like", space);
    return load_memmap(prefix, /*read_only=*/false);
  }
  memmap_impl(*copy, prefix, WriteMode::kZeros, names, "memmap_like", space);
  return TensorDict(std::move(copy));
}

TensorDict detail::memmap_tensorclass(const TensorDict& td,
                                      const std::string& prefix,
                                      const std::vector<TensorClassType>& types,
                                      bool copy) {
  const char* fn = copy ? "memmap" : "memmap_";
  TORCH_CHECK_VALUE(!detail::is_archive_path(prefix), fn, ": '", prefix,
                    "' names an archive (.tdz), which does not hold tensor "
                    "classes: write their dict (tensordict().memmap)");
  TensorDictImpl& impl = TensorDictImpl::of(td);
  if (!copy) {
    memmap_impl(impl, prefix, WriteMode::kCopy, MemmapKeyNames::kEscaped, fn,
                Space::kReserve, &types);
    return td;
  }
  ImplPtr out = detail::shallow_copy(impl);
  memmap_impl(*out, prefix, WriteMode::kCopy, MemmapKeyNames::kEscaped, fn,
              Space::kReserve, &types);
  return TensorDictImpl::wrap(std::move(out));
}

namespace {

// Writes the dicts `tds` as a lazy stack under `prefix` (persistence.h): a
// root whose sub-dicts "0", "1", ... are the dicts themselves (`copy`
// false) or shallow copies of them, planned and written as one tree.
// Returns the written dicts.
std::vector<TensorDict> memmap_lazy(const std::vector<TensorDict>& tds,
                                    int64_t stack_dim,
                                    const std::string& prefix,
                                    MemmapKeyNames names, bool copy) {
  const char* fn = copy ? "memmap" : "memmap_";
  TORCH_CHECK_VALUE(!detail::is_archive_path(prefix), fn, ": '", prefix,
                    "' names an archive (.tdz), which does not hold lazy "
                    "stacks: write a dense dict (densify)");
  TensorDict root;
  std::vector<TensorDict> out;
  for (size_t i = 0; i < tds.size(); ++i) {
    TensorDictImpl& impl = TensorDictImpl::of(tds[i]);
    for (size_t j = 0; !copy && j < i; ++j) {
      TORCH_CHECK_VALUE(!tds[j].is_same(tds[i]), fn, ": tensordicts()[", j,
                        "] and tensordicts()[", i,
                        "] are the same dict, which cannot live in two "
                        "directories: memmap writes a copy");
    }
    out.push_back(copy ? TensorDictImpl::wrap(detail::shallow_copy(impl))
                       : tds[i]);
    root.set(std::to_string(i), out.back());  // the dict itself
  }
  memmap_impl(TensorDictImpl::of(root), prefix, WriteMode::kCopy, names, fn,
              Space::kReserve, nullptr, &stack_dim);
  return out;
}

}  // namespace

const LazyStackedTensorDict& LazyStackedTensorDict::memmap_(
    const std::string& prefix, MemmapKeyNames names) const {
  memmap_lazy(tds_, stack_dim_, prefix, names, /*copy=*/false);
  return *this;
}

LazyStackedTensorDict LazyStackedTensorDict::memmap(
    const std::string& prefix, MemmapKeyNames names) const {
  return LazyStackedTensorDict(
      memmap_lazy(tds_, stack_dim_, prefix, names, /*copy=*/true), stack_dim_);
}

bool TensorDict::is_memmap() const {
  if (!impl_->saved_path.has_value()) return false;
  std::vector<const at::Tensor*> leaves;
  detail::leaf_ptrs(*impl_, leaves);
  for (const at::Tensor* t : leaves) {
    if (t->numel() > 0 && !detail::is_mapped_tensor(*t)) return false;
  }
  return true;
}

c10::optional<std::string> TensorDict::saved_path() const {
  return impl_->saved_path;
}

}  // namespace tensordict
