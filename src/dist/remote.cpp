// init_remote / from_remote_init: a dict and its structure, for a receiver
// that has no dict of its own, in Python tensordict's message layout.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>
#include <vector>

#include "dist/group.h"
#include "io/files.h"
#include "io/py_pickle.h"

namespace tensordict {
namespace {

using nlohmann::ordered_json;

// The keys of a level of Python's consolidate() metadata that are not
// sub-dicts.
bool reserved(const std::string& key) {
  return key == "cls" || key == "non_tensors" || key == "leaves" ||
         key == "cls_metadata" || key == "size" || key == "_total_bytes" ||
         key == "_tensorclass_type" || key == "_storage_device" ||
         key.rfind("njt_", 0) == 0;
}

// The dotted name of `key` in the level at `path` ("" at the root), as
// Python's metadata names nested keys: "next.obs".
std::string dotted(const std::string& path, const std::string& key) {
  if (path.empty()) return key;
  std::string out = path;
  out += '.';
  out += key;
  return out;
}

// The single-file format's metadata (io/files.h) as Python's consolidate()
// metadata: per level {"cls", "non_tensors", "leaves": {key: [dtype, shape,
// start, stop, pad]}, "cls_metadata": {"device", "names", "batch_size",
// "is_locked"}, <sub-dict key>: ...}.
ordered_json to_python_meta(const ordered_json& ours, const std::string& path) {
  ordered_json leaves = ordered_json::object();
  ordered_json subs = ordered_json::object();
  for (const auto& [key, e] : ours["entries"].items()) {
    const std::string where = dotted(path, key);
    if (e.contains("entries")) {
      TORCH_CHECK_VALUE(!reserved(key), "init_remote: the key ", where,
                        " names a field of Python's metadata layout and "
                        "cannot be a sub-dict");
      subs[key] = to_python_meta(e, where);
      continue;
    }
    const auto dtype = detail::dtype_from_name(e["dtype"].get<std::string>());
    int64_t nbytes = static_cast<int64_t>(c10::elementSize(*dtype));
    for (const auto& d : e["shape"]) nbytes *= d.get<int64_t>();
    const int64_t start = e["offset"].get<int64_t>();
    leaves[key] =
        ordered_json::array({e["dtype"], e["shape"], start, start + nbytes, 0});
  }
  const std::string device = ours["device"].get<std::string>();
  ordered_json out{
      {"cls", "TensorDict"},
      {"non_tensors", ordered_json::object()},
      {"leaves", std::move(leaves)},
      {"cls_metadata",
       {{"device", device == "None" ? ordered_json() : ordered_json(device)},
        {"names", ordered_json(ours["batch_size"].size(), nullptr)},
        {"batch_size", ours["batch_size"]},
        {"is_locked", false}}}};
  for (auto& [key, sub] : subs.items()) out[key] = std::move(sub);
  return out;
}

// Python's consolidate() metadata as the single-file format's, checking its
// shape (the offsets are checked against the storage when the dict is built).
ordered_json from_python_meta(const ordered_json& py, const std::string& path,
                              int depth) {
  const char* fn = "from_remote_init";
  const std::string where = path.empty() ? "at the root" : "at key " + path;
  TORCH_CHECK(depth < 64, fn, ": the metadata nests too deeply");
  TORCH_CHECK(py.is_object(), fn, ": malformed metadata ", where);
  TORCH_CHECK(py.value("cls", ordered_json()) == "TensorDict", fn,
              ": only TensorDict levels can be received, the metadata ", where,
              " says ", py.contains("cls") ? py["cls"].dump() : "nothing");
  const auto* nt = py.contains("non_tensors") ? &py["non_tensors"] : nullptr;
  TORCH_CHECK(nt == nullptr || (nt->is_object() && nt->empty()), fn,
              ": non-tensor data cannot be received yet (", where, ")");
  TORCH_CHECK(py.contains("leaves") && py["leaves"].is_object() &&
                  py.contains("cls_metadata") && py["cls_metadata"].is_object(),
              fn, ": malformed metadata ", where);
  const ordered_json& cls_meta = py["cls_metadata"];
  const ordered_json device = cls_meta.value("device", ordered_json());
  TORCH_CHECK(device.is_null() || device.is_string(), fn, ": malformed device ",
              where);
  ordered_json out{
      {"type", "TensorDict"},
      {"batch_size", cls_meta.value("batch_size", ordered_json())},
      {"device", device.is_null() ? "None" : device.get<std::string>()},
      {"entries", ordered_json::object()}};
  ordered_json& entries = out["entries"];
  for (const auto& [key, v] : py["leaves"].items()) {
    TORCH_CHECK(v.is_array() && v.size() >= 4 && v[2].is_number_integer(), fn,
                ": malformed leaf ", dotted(path, key));
    entries[key] = {{"dtype", v[0]}, {"shape", v[1]}, {"offset", v[2]}};
  }
  for (const auto& [key, v] : py.items()) {
    if (reserved(key)) continue;
    TORCH_CHECK(!entries.contains(key), fn, ": the key ", key, " ", where,
                " is both a leaf and a sub-dict");
    entries[key] = from_python_meta(v, dotted(path, key), depth + 1);
  }
  return out;
}

template <typename Call>
void transfer(const char* op, const char* what, const Group& pg, Call&& call) {
  detail::on_wire(op, what, [&] {
    detail::with_group(pg, [&](auto& g) { call(g)->wait(); });
  });
}

void check_tag(const char* op, int init_tag) {
  TORCH_CHECK_VALUE(init_tag >= 0, op, ": init_tag must be non-negative, got ",
                    init_tag);
}

}  // namespace

void init_remote(const TensorDict& td, int dst, const Group& pg, int init_tag) {
  constexpr const char* op = "init_remote";
  detail::check_peer(op, "destination", dst, pg);
  check_tag(op, init_tag);
  const TensorDict c =
      td.is_consolidated() && td.device() == at::Device(at::kCPU)
          ? td
          : td.cpu().consolidate();
  const auto& impl = detail::TensorDictImpl::of(c);
  at::Tensor storage = impl.consolidated;
  if (storage.storage_offset() != 0 || !storage.is_contiguous()) {
    // Offsets are counted from the storage's start: consolidate afresh.
    return init_remote(td.cpu().consolidate(), dst, pg, init_tag);
  }
  ordered_json meta =
      to_python_meta(detail::consolidated_meta(impl, storage), "");
  meta["_total_bytes"] = storage.numel();
  const std::string pickle = detail::py_pickle(meta);
  at::Tensor length =
      at::full({1}, static_cast<int64_t>(pickle.size()), at::kLong);
  at::Tensor bytes =
      at::empty({static_cast<int64_t>(pickle.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), pickle.data(), pickle.size());
  // torch.distributed.send_object_list's two messages, then the storage.
  std::vector<at::Tensor> a{length}, b{bytes}, s{storage};
  transfer(op, "the metadata length", pg,
           [&](auto& g) { return g.send(a, dst, init_tag); });
  transfer(op, "the metadata", pg,
           [&](auto& g) { return g.send(b, dst, init_tag); });
  transfer(op, "the storage", pg,
           [&](auto& g) { return g.send(s, dst, init_tag); });
}

TensorDict from_remote_init(int src, const Group& pg, int init_tag) {
  constexpr const char* op = "from_remote_init";
  detail::check_peer(op, "source", src, pg);
  check_tag(op, init_tag);
  std::vector<at::Tensor> a{at::empty({1}, at::kLong)};
  transfer(op, "the metadata length", pg,
           [&](auto& g) { return g.recv(a, src, init_tag); });
  const int64_t n = a[0].item<int64_t>();
  TORCH_CHECK(n > 0 && n <= (int64_t{1} << 30), op, ": the metadata length ", n,
              " is not between 1 and 2^30 bytes");
  std::vector<at::Tensor> b{at::empty({n}, at::kByte)};
  transfer(op, "the metadata", pg,
           [&](auto& g) { return g.recv(b, src, init_tag); });
  ordered_json py = detail::py_unpickle(
      static_cast<const char*>(b[0].data_ptr()), static_cast<size_t>(n), op);
  TORCH_CHECK(py.is_object() && py.contains("_total_bytes") &&
                  py["_total_bytes"].is_number_integer(),
              op, ": the metadata lacks _total_bytes");
  const int64_t total = py["_total_bytes"].get<int64_t>();
  TORCH_CHECK(total >= 0 && total <= (int64_t{1} << 48), op, ": _total_bytes ",
              total, " is out of range");
  const ordered_json ours = from_python_meta(py, "", 0);
  at::Tensor storage = at::empty({total}, at::kByte);
  // Checks every leaf against the storage before the storage moves.
  auto impl = detail::dict_from_consolidated_meta(
      ours, storage, op, "the metadata from rank " + std::to_string(src));
  std::vector<at::Tensor> s{storage};
  transfer(op, "the storage", pg,
           [&](auto& g) { return g.recv(s, src, init_tag); });
  return detail::TensorDictImpl::wrap(std::move(impl));
}

}  // namespace tensordict
