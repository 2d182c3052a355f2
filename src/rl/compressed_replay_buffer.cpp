// CompressedReplayBuffer (tensordict/lazy_replay_buffer.h): TorchRL's
// CompressedListStorage. A row is kept as a skeleton (the row with every
// tensor leaf replaced by a meta-device tensor of its shape and dtype, so
// that its keys, order, batch sizes and non-tensor data are the row's own)
// and each leaf's compressed bytes, in the skeleton's leaf order. The rows
// sit in slots beside a dense index buffer, as LazyStackReplayBuffer's do
// (rl/list_buffer.h). Rows are immutable once compressed and shared by
// pointer, so `sample` decompresses them after releasing the lock.
//
// Checkpoints are in TorchRL's layout (CompressedListStorageCheckpointer):
//   storage/compressed_data/  a lazy stack (Python's memmap layout) of one
//                             dict of batch size [] per row: each tensor
//                             leaf's bytes (uint8 [n]) at its key, and the
//                             non-tensor data;
//   storage/metadata.json     one object per row: {"type": "tensordict",
//                             "fields": {key: {"type": "tensor", "shape",
//                             "dtype", "device"} or {"type": "non_tensor",
//                             "value"} or, for a sub-dict (this library's;
//                             TorchRL does not compress sub-dicts),
//                             {"type": "tensordict", "batch_size",
//                             "fields"}}, "batch_size"}, with TorchRL's
//                             tagged values ({"__type__": "torch.Size",
//                             "value": [...]} and the like);
//   storage/data_indices.json the row's position in compressed_data;
//   writer/metadata.json, buffer_metadata.json: TorchRL's;
//   index/                    the index buffer's checkpoint (ours only).
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <zlib.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/internal.h"
#include "core/names.h"
#include "io/files.h"
#include "rl/list_buffer.h"
#include "rl/samplers.h"
#include "tensordict/lazy_replay_buffer.h"

namespace tensordict {

namespace detail {

struct CompressedRow {
  // The row with meta-device leaves.
  TensorDict skeleton;
  // Per leaf of the skeleton (keys(true, true) order): the compressed bytes
  // (1-D uint8) and the device the leaf was on.
  std::vector<at::Tensor> bytes;
  std::vector<at::Device> devices;
  int64_t nbytes = 0;
};

}  // namespace detail

namespace {

using json = nlohmann::ordered_json;
using detail::CompressedRow;

// ---- zlib ---------------------------------------------------------------------

// A leaf's bytes in C order, on the CPU.
at::Tensor leaf_bytes(const at::Tensor& leaf) {
  return leaf.detach().resolve_conj().resolve_neg().cpu().contiguous();
}

at::Tensor zlib_compress(const at::Tensor& leaf, int64_t level) {
  const at::Tensor src = leaf_bytes(leaf);
  const auto n = static_cast<uLong>(src.nbytes());
  uLongf cap = ::compressBound(n);
  at::Tensor out = at::empty({static_cast<int64_t>(cap)}, at::kByte);
  const int rc = ::compress2(out.data_ptr<uint8_t>(), &cap,
                             static_cast<const Bytef*>(src.data_ptr()), n,
                             static_cast<int>(level));
  TORCH_CHECK(rc == Z_OK, "zlib could not compress ", n, " bytes (",
              ::zError(rc), ")");
  return out.narrow(0, 0, static_cast<int64_t>(cap)).clone();
}

at::Tensor zlib_decompress(const at::Tensor& bytes, c10::IntArrayRef shape,
                           at::ScalarType dtype) {
  const at::Tensor src = bytes.cpu().contiguous();
  const auto* p = src.data_ptr<uint8_t>();
  const auto n = static_cast<uLong>(src.numel());
  // zstd's frame magic, little-endian 0xFD2FB528: TorchRL on Python 3.14.
  TORCH_CHECK(
      !(n >= 4 && p[0] == 0x28 && p[1] == 0xB5 && p[2] == 0x2F && p[3] == 0xFD),
      "the bytes are zstd data (TorchRL's default on Python 3.14), "
      "and this buffer decompresses zlib: pass RowCompression a "
      "decompress function");
  at::Tensor out = at::empty(shape, dtype);
  const auto want = static_cast<uLongf>(out.nbytes());
  uLongf got = want;
  const int rc = ::uncompress(static_cast<Bytef*>(out.data_ptr()), &got, p, n);
  TORCH_CHECK(rc == Z_OK && got == want, "the bytes do not decompress to the ",
              want, " bytes of shape ", detail::shape_str(shape), " and dtype ",
              dtype, " (zlib: ",
              rc == Z_OK ? "stream of " + std::to_string(got) + " bytes"
                         : std::string(::zError(rc)),
              ")");
  return out;
}

// ---- The checkpoint's JSON ------------------------------------------------------

json tagged(const char* type, json value) {
  return json{{"__type__", type}, {"value", std::move(value)}};
}

// The value of a tagged entry {"__type__": type, "value": v} (a copy: the
// values are small); a c10::Error naming `what` otherwise.
json untag(const json& j, const char* type, const std::string& what) {
  TORCH_CHECK(j.is_object() && j.contains("__type__") &&
                  j["__type__"] == type && j.contains("value"),
              what, " is not a ", type, " entry ({\"__type__\": \"", type,
              "\", \"value\": ...})");
  return j["value"];
}

std::vector<int64_t> read_size(const json& j, const std::string& what) {
  const json v = untag(j, "torch.Size", what);
  TORCH_CHECK(v.is_array(), what, " is not a list of sizes");
  std::vector<int64_t> out;
  for (const json& d : v) {
    TORCH_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, what, " holds ",
                d.dump(), ", which is not a size");
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// The metadata of one level of a skeleton; `leaf` counts the leaves, in
// order, to read their devices.
json level_meta(const TensorDict& level, const CompressedRow& row,
                size_t& leaf) {
  json fields = json::object();
  for (const auto& [key, entry] : level.items()) {
    const std::string& name = key.back();
    if (entry.is_non_tensor()) {
      fields[name] = {{"type", "non_tensor"},
                      {"value", tagged("NonTensorData", entry.non_tensor())}};
    } else if (entry.is_tensordict()) {
      const TensorDict sub = entry.tensordict();
      json m = {{"type", "tensordict"},
                {"batch_size", tagged("torch.Size", sub.batch_size().vec())}};
      m["fields"] = level_meta(sub, row, leaf)["fields"];
      fields[name] = std::move(m);
    } else {
      const at::Tensor& t = entry.tensor();
      fields[name] = {
          {"type", "tensor"},
          {"shape", tagged("torch.Size", t.sizes().vec())},
          {"dtype", tagged("torch.dtype", detail::dtype_name(t.scalar_type()))},
          {"device", tagged("torch.device", row.devices[leaf].str())}};
      ++leaf;
    }
  }
  return json{{"type", "tensordict"}, {"fields", std::move(fields)}};
}

// Fills `out` (a dict of the level's batch size) and `row` from the level's
// metadata `m` and its bytes in `data` (the row's dict in compressed_data).
void read_level(const json& m, const TensorDict& data,
                const std::vector<std::string>& prefix, TensorDict& out,
                CompressedRow& row, const std::string& what) {
  TORCH_CHECK(m.is_object() && m.contains("fields") && m["fields"].is_object(),
              what, " has no \"fields\" object");
  for (const auto& [name, f] : m["fields"].items()) {
    std::vector<std::string> parts = prefix;
    parts.push_back(name);
    const NestedKey key(parts);
    const std::string at = what + ", key " + key.str();
    TORCH_CHECK(f.is_object() && f.contains("type") && f["type"].is_string(),
                at, ": the field has no \"type\"");
    const std::string type = f["type"].get<std::string>();
    if (type == "non_tensor") {
      TORCH_CHECK(f.contains("value"), at, ": a non_tensor field has no value");
      const json& v = f["value"];
      const bool wrapped = v.is_object() && v.contains("__type__");
      out.set_non_tensor(name, wrapped ? untag(v, "NonTensorData", at) : v);
    } else if (type == "tensordict") {
      TensorDict sub(
          read_size(f.contains("batch_size") ? f["batch_size"] : json(),
                    at + ": batch_size"));
      read_level(f, data, parts, sub, row, what);
      out.set(name, sub);
    } else {
      TORCH_CHECK(type == "tensor", at, ": unknown field type '", type, "'");
      TORCH_CHECK(f.contains("shape") && f.contains("dtype"), at,
                  ": a tensor field needs a shape and a dtype");
      const std::vector<int64_t> shape = read_size(f["shape"], at + ": shape");
      const json dn = untag(f["dtype"], "torch.dtype", at + ": dtype");
      const auto dtype = dn.is_string()
                             ? detail::dtype_from_name(dn.get<std::string>())
                             : c10::nullopt;
      TORCH_CHECK(dtype.has_value(), at, ": unknown dtype ", dn.dump());
      at::Device device(at::kCPU);
      if (f.contains("device")) {
        const json dv = untag(f["device"], "torch.device", at + ": device");
        TORCH_CHECK(dv.is_string(), at, ": the device is not a string");
        try {
          device = at::Device(dv.get<std::string>());
        } catch (const c10::Error&) {
          TORCH_CHECK(false, at, ": unknown device ", dv.dump());
        }
      }
      TORCH_CHECK(data.contains(key) && data.get_entry(key).is_tensor(), at,
                  ": compressed_data holds no bytes at that key");
      const at::Tensor b = data.get(key);
      TORCH_CHECK(b.scalar_type() == at::kByte && b.dim() == 1, at,
                  ": the compressed bytes are ", b.scalar_type(), " of shape ",
                  detail::shape_str(b.sizes()), ", not 1-D uint8");
      row.bytes.push_back(b.clone());  // into memory
      row.devices.push_back(device);
      row.nbytes += b.numel();
      out.set(name,
              at::empty(shape, at::TensorOptions(*dtype).device(at::kMeta)));
    }
  }
}

}  // namespace

// ---- CompressedReplayBuffer ---------------------------------------------------

namespace {

RowCompression checked(RowCompression c) {
  TORCH_CHECK_VALUE(c.level() >= 0 && c.level() <= 9,
                    "CompressedReplayBuffer: zlib's level is 0 to 9, got ",
                    c.level());
  TORCH_CHECK_VALUE(
      static_cast<bool>(c.compress()) == static_cast<bool>(c.decompress()),
      "CompressedReplayBuffer: set both compress and decompress, or neither "
      "(zlib)");
  return c;
}

}  // namespace

CompressedReplayBuffer::CompressedReplayBuffer(ReplayBufferOptions options,
                                               RowCompression compression)
    : compression_(checked(std::move(compression))),
      state_(std::make_unique<detail::ListState>(std::move(options),
                                                 "CompressedReplayBuffer")) {}

CompressedReplayBuffer::~CompressedReplayBuffer() = default;

CompressedReplayBuffer::RowPtr CompressedReplayBuffer::compress_row(
    const TensorDict& row) const {
  auto out = std::make_shared<CompressedRow>();
  out->skeleton = row.named_apply([&](const NestedKey& key,
                                      const at::Tensor& t) {
    at::Tensor b;
    if (compression_.compress()) {
      b = compression_.compress()(t);
      TORCH_CHECK(b.defined() && b.scalar_type() == at::kByte && b.dim() == 1,
                  "compress returned ",
                  b.defined() ? std::string("a tensor of dtype ") +
                                    c10::toString(b.scalar_type()) +
                                    " and shape " + detail::shape_str(b.sizes())
                              : std::string("an undefined tensor"),
                  " for key ", key.str(), "; it must return 1-D uint8 bytes");
      b = b.clone(at::MemoryFormat::Contiguous);  // never the caller's memory
    } else {
      b = zlib_compress(t, compression_.level());
    }
    out->nbytes += b.numel();
    out->bytes.push_back(std::move(b));
    out->devices.push_back(t.device());
    return at::empty(t.sizes(), t.options().device(at::kMeta));
  });
  return out;
}

TensorDict CompressedReplayBuffer::decompress_row(
    const CompressedRow& row) const {
  const auto& device = state_->device;
  size_t k = 0;
  return row.skeleton.named_apply([&](const NestedKey& key,
                                      const at::Tensor& m) {
    const at::Tensor& b = row.bytes[k];
    const at::Device to = device.has_value() ? *device : row.devices[k];
    ++k;
    at::Tensor t;
    try {
      t = compression_.decompress()
              ? compression_.decompress()(b, m.sizes(), m.scalar_type())
              : zlib_decompress(b, m.sizes(), m.scalar_type());
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, "key ", key.str(), ": ", e.msg());
    }
    TORCH_CHECK(t.defined() && t.sizes() == m.sizes() &&
                    t.scalar_type() == m.scalar_type(),
                "key ", key.str(), ": decompress returned ",
                t.defined() ? std::string("a tensor of dtype ") +
                                  c10::toString(t.scalar_type()) +
                                  " and shape " + detail::shape_str(t.sizes())
                            : std::string("an undefined tensor"),
                "; the leaf is ", m.scalar_type(), " of shape ",
                detail::shape_str(m.sizes()));
    if (t.is_alias_of(b)) t = t.clone();  // a sample owns its memory
    return t.device() == to ? t : t.to(to);
  });
}

int64_t CompressedReplayBuffer::add(const TensorDict& row) {
  return write("CompressedReplayBuffer::add", {row}, true)
      .data_ptr<int64_t>()[0];
}

at::Tensor CompressedReplayBuffer::extend(const std::vector<TensorDict>& rows) {
  return write("CompressedReplayBuffer::extend", rows, false);
}

at::Tensor CompressedReplayBuffer::extend(const TensorDict& rows) {
  TORCH_CHECK(rows.batch_dims() >= 1,
              "CompressedReplayBuffer::extend: the rows are the first batch "
              "dim of the dict, which has batch_size []");
  return extend(rows.unbind(0));
}

at::Tensor CompressedReplayBuffer::extend(const LazyStackedTensorDict& rows) {
  TORCH_CHECK(rows.stack_dim() == 0,
              "CompressedReplayBuffer::extend: the rows must be stacked along "
              "dim 0, got stack_dim ",
              rows.stack_dim());
  return extend(rows.tensordicts());
}

at::Tensor CompressedReplayBuffer::write(const char* op,
                                         const std::vector<TensorDict>& rows,
                                         bool one) {
  // Everything that reads the rows runs before the lock: the index rows
  // (their checks) and the compression.
  detail::ListState& st = *state_;
  const std::vector<TensorDict> index_rows = st.index_rows(op, rows);
  std::vector<RowPtr> packed;
  packed.reserve(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) {
    try {
      packed.push_back(compress_row(rows[k]));
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, op, ": ",
                  one ? "" : "rows[" + std::to_string(k) + "]: ", e.msg());
    }
  }
  detail::ListLock lock(mutex_);
  return st.write(
      lock, rows_, op, rows, one, index_rows,
      [](const std::vector<int64_t>& /*next*/) {},
      [&](size_t k, RowPtr& slot) { slot = std::move(packed[k]); });
}

std::pair<LazyStackedTensorDict, SampleInfo> CompressedReplayBuffer::sample(
    int64_t batch_size) {
  std::vector<RowPtr> drawn_rows;
  SampleInfo info;
  {
    detail::ListLock lock(mutex_);
    info = state_->draw(lock, "CompressedReplayBuffer::sample", batch_size);
    drawn_rows = detail::list_gather(rows_, info.index);
  }
  std::vector<TensorDict> out;
  out.reserve(drawn_rows.size());
  for (size_t k = 0; k < drawn_rows.size(); ++k) {
    try {
      out.push_back(decompress_row(*drawn_rows[k]));
    } catch (const c10::Error& e) {
      TORCH_CHECK(
          false,
          "CompressedReplayBuffer::sample: the row at storage "
          "index ",
          info.index.reshape({-1})[static_cast<int64_t>(k)].item<int64_t>(),
          ", ", e.msg());
    }
  }
  return {LazyStackedTensorDict(std::move(out), 0), std::move(info)};
}

void CompressedReplayBuffer::update_priority(const at::Tensor& index,
                                             const at::Tensor& priority) {
  state_->index.update_priority(index, priority);
}

int64_t CompressedReplayBuffer::size() const { return state_->index.size(); }

int64_t CompressedReplayBuffer::capacity() const {
  return state_->index.capacity();
}

int64_t CompressedReplayBuffer::cursor() const {
  return state_->index.cursor();
}

RateLimiterInfo CompressedReplayBuffer::rate_limiter_info() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_->limiter.info();
}

int64_t CompressedReplayBuffer::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t total = 0;
  for (const auto& r : rows_) total += r ? r->nbytes : 0;
  return total;
}

void CompressedReplayBuffer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_->clear();
  rows_.clear();
}

void CompressedReplayBuffer::manual_seed(uint64_t seed) {
  state_->index.manual_seed(seed);
}

TensorDict CompressedReplayBuffer::row(int64_t i) const {
  RowPtr r;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t n = state_->index.size();
    TORCH_CHECK_INDEX(i >= 0 && i < n, "CompressedReplayBuffer::row: index ", i,
                      " is out of range for the ", n, " rows stored");
    r = rows_[static_cast<size_t>(i)];
  }
  TensorDict out;
  try {
    out = decompress_row(*r);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "CompressedReplayBuffer::row: ", e.msg());
  }
  return out;
}

// ---- Checkpoints --------------------------------------------------------------

namespace {

void write_json(const std::string& dir, const std::string& name, const json& j,
                const char* fn) {
  detail::make_dir(dir);
  const std::string text = j.dump();
  (void)detail::write_file(dir, name, text.data(), text.size(), false, fn);
}

}  // namespace

void CompressedReplayBuffer::dumps(const std::string& dir) const {
  constexpr const char* kFn = "CompressedReplayBuffer::dumps";
  std::lock_guard<std::mutex> lock(mutex_);
  detail::make_dir(dir);
  TORCH_CHECK(detail::dir_is_empty(dir, kFn), kFn, ": '", dir,
              "' is not empty; dumps writes a checkpoint into a new or empty "
              "directory only");
  const detail::ListState& st = *state_;
  st.index.dumps(dir + "/index");
  st.save(dir + "/compressed");
  const auto n = static_cast<size_t>(st.index.size());
  json meta = json::array();
  json indices = json::array();
  std::vector<TensorDict> data;
  data.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const CompressedRow& r = *rows_[i];
    size_t leaf = 0;
    json m = level_meta(r.skeleton, r, leaf);
    m["batch_size"] = tagged("torch.Size", r.skeleton.batch_size().vec());
    meta.push_back(std::move(m));
    indices.push_back(static_cast<int64_t>(i));
    TensorDict d(c10::IntArrayRef{});
    size_t k = 0;
    for (const auto& [key, entry] : r.skeleton.items(true, false)) {
      if (entry.is_non_tensor()) {
        if (!key.is_nested()) d.set_non_tensor(key, entry.non_tensor());
      } else if (entry.is_tensor()) {
        d.set(key, r.bytes[k++]);
      }
    }
    data.push_back(std::move(d));
  }
  if (n > 0) {
    (void)LazyStackedTensorDict(std::move(data), 0)
        .memmap(dir + "/storage/compressed_data");
  }
  write_json(dir + "/storage", "metadata.json", meta, kFn);
  write_json(dir + "/storage", "data_indices.json", indices, kFn);
  write_json(dir + "/writer", "metadata.json",
             json{{"cursor", st.index.cursor()}}, kFn);
  write_json(
      dir, "buffer_metadata.json",
      json{{"batch_size", nullptr}, {"consume_after_n_samples", nullptr}}, kFn);
}

void CompressedReplayBuffer::loads(const std::string& dir) {
  constexpr const char* kFn = "CompressedReplayBuffer::loads";
  const std::string storage = dir + "/storage";
  const auto meta = detail::read_json_file(storage + "/metadata.json", kFn);
  const auto indices =
      detail::read_json_file(storage + "/data_indices.json", kFn);
  TORCH_CHECK(meta.has_value() && indices.has_value(), kFn, ": '", dir,
              "' holds no CompressedReplayBuffer checkpoint (no "
              "storage/metadata.json and storage/data_indices.json; dumps "
              "writes them, as TorchRL's ReplayBuffer.dumps of a "
              "CompressedListStorage does)");
  TORCH_CHECK(meta->is_array() && indices->is_array() &&
                  meta->size() == indices->size(),
              kFn, ": '", dir,
              "': storage/metadata.json and storage/data_indices.json must "
              "be lists of one length");
  const bool ours = detail::path_exists(dir + "/index");
  std::lock_guard<std::mutex> lock(mutex_);
  detail::ListState& st = *state_;
  const auto n = static_cast<int64_t>(meta->size());
  int64_t cursor = 0;
  detail::ListState::Saved saved;
  if (ours) {
    TORCH_CHECK(detail::path_exists(dir + "/compressed/meta.json"), kFn, ": '",
                dir,
                "' has an index/ but no compressed/meta.json (dumps "
                "writes both)");
    saved = detail::ListState::read(dir + "/compressed", kFn);
    int64_t held = 0;
    try {
      held = detail::check_loads(st.index, dir + "/index");
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, kFn, ": the index: ", e.msg());
    }
    TORCH_CHECK(held == n, kFn, ": '", dir, "': the index holds ", held,
                " rows but storage/ holds ", n);
  } else {
    const auto writer =
        detail::read_json_file(dir + "/writer/metadata.json", kFn);
    TORCH_CHECK(writer.has_value() && writer->is_object() &&
                    writer->contains("cursor") &&
                    (*writer)["cursor"].is_number_integer(),
                kFn, ": '", dir,
                "': writer/metadata.json with an integer cursor is missing");
    cursor = (*writer)["cursor"].get<int64_t>();
    TORCH_CHECK(n <= st.index.capacity(), kFn, ": '", dir, "' holds ", n,
                " rows, more than this buffer's capacity ",
                st.index.capacity());
    TORCH_CHECK(
        n == st.index.capacity() ? cursor >= 0 && cursor < n : cursor == n, kFn,
        ": '", dir, "': the writer's cursor ", cursor, " does not fit the ", n,
        " rows stored (capacity ", st.index.capacity(), ")");
  }
  c10::optional<LazyStackedTensorDict> data;
  if (n > 0) {
    TORCH_CHECK(detail::path_exists(storage + "/compressed_data/meta.json"),
                kFn, ": '", dir, "': storage/ holds ", n,
                " rows but no compressed_data/");
    data =
        LazyStackedTensorDict::load_memmap(storage + "/compressed_data", true);
  }
  std::vector<RowPtr> rows;
  std::vector<TensorDict> index_rows;
  int64_t dims = -1;
  for (int64_t i = 0; i < n; ++i) {
    const std::string what =
        std::string(kFn) + ": '" + dir + "': row " + std::to_string(i);
    const json& at_i = (*indices)[static_cast<size_t>(i)];
    TORCH_CHECK(at_i.is_number_integer() && at_i.get<int64_t>() >= 0 &&
                    at_i.get<int64_t>() <
                        static_cast<int64_t>(data->tensordicts().size()),
                what, ": data index ", at_i.dump(), " is not one of the ",
                data->tensordicts().size(), " dicts of compressed_data");
    const json& m = (*meta)[static_cast<size_t>(i)];
    TORCH_CHECK(
        m.is_object() && m.contains("type") && m["type"] == "tensordict", what,
        ": its metadata is not of type \"tensordict\"");
    auto r = std::make_shared<CompressedRow>();
    TensorDict skeleton(m.contains("batch_size")
                            ? read_size(m["batch_size"], what + ": batch_size")
                            : std::vector<int64_t>{});
    read_level(m, data->tensordicts()[at_i.get<size_t>()], {}, skeleton, *r,
               what);
    r->skeleton = skeleton;
    // Every row decompresses now, so that no later sample fails.
    TensorDict full;
    try {
      full = decompress_row(*r);
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, what, ": ", e.msg());
    }
    TORCH_CHECK(dims < 0 || full.batch_dims() == dims, what, " has batch_size ",
                detail::shape_str(full.batch_size()), ", and row 0 has ", dims,
                " batch dims");
    dims = full.batch_dims();
    if (!ours) {
      index_rows.push_back(st.index_row(what.c_str(), full));
    }
    rows.push_back(std::move(r));
  }
  if (!ours && n > 0) (void)tensordict::stack(index_rows, 0);  // one structure
  // Nothing has changed so far; from here on nothing throws.
  rows.resize(static_cast<size_t>(st.index.capacity()));
  if (ours) {
    st.index.loads(dir + "/index");
  } else {
    // The rows in storage order, then (a round-robin buffer that is full)
    // the first `cursor` of them again, which moves the cursor there.
    st.index.clear();
    if (n > 0) {
      (void)st.index.extend(tensordict::stack(index_rows, 0));
      if (cursor > 0 && n == st.index.capacity() &&
          std::holds_alternative<RoundRobinWriter>(
              st.index.options().writer())) {
        (void)st.index.extend(tensordict::stack(
            std::vector<TensorDict>(index_rows.begin(),
                                    index_rows.begin() + cursor),
            0));
      }
    }
  }
  saved.row_dims = dims;  // the rows' own
  st.restore(saved, n);
  rows_ = n > 0 ? std::move(rows) : std::vector<RowPtr>();
}

}  // namespace tensordict
