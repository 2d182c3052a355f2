// TorchRL's replay-buffer directory: writing it for a disk-backed storage
// and reading a dump of TorchRL's (see rl/torchrl_files.h for the layout).
#include "rl/torchrl_files.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "core/non_tensor.h"
#include "io/files.h"
#include "rl/sampler_config.h"
#include "rl/storage.h"

namespace tensordict {
namespace detail {

using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kWhat = "ReplayBuffer";

// The text of a JSON file with one fixed-width number field: `before`, the
// field (spaces), `after`; the field's offset goes to `offset`.
std::string with_field(const std::string& before, size_t width,
                       const std::string& after, size_t& offset) {
  offset = before.size();
  return before + std::string(width, ' ') + after;
}

// Writes `text` to `dir`/`name` and binds `field` to its `width` bytes at
// `offset`.
JsonNumberField write_json_with_field(const std::string& dir,
                                      const std::string& name,
                                      const std::string& text, size_t offset,
                                      size_t width) {
  at::Tensor file =
      write_file(dir, name, text.data(), text.size(), /*map=*/true, kWhat);
  return JsonNumberField(std::move(file), offset, width);
}

void write_json(const std::string& dir, const std::string& name,
                const std::string& text) {
  (void)write_file(dir, name, text.data(), text.size(), /*map=*/false, kWhat);
}

// `dir`/`name`, a tree of `capacity` doubles that is then kept up to date in
// place, mapped. An existing regular file of that size (a reopened
// directory's) is mapped as it is, for the caller to correct the entries
// that differ: writing 16 bytes a row anew took seconds at 10^8 rows.
// Anything else there is replaced by a file of `fill`s.
at::Tensor tree_file(const std::string& dir, const char* name, int64_t capacity,
                     double fill) {
  const std::string path = join_path(dir, name);
  const auto nbytes = static_cast<int64_t>(sizeof(double)) * capacity;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size == nbytes) {
    return map_file(path, nbytes, kWhat);
  }
  const std::vector<double> values(static_cast<size_t>(capacity), fill);
  return write_file(dir, name, values.data(), static_cast<size_t>(nbytes),
                    /*map=*/true, kWhat);
}

// `slot` := `value` unless it holds those bits already (an unchanged page
// of a mapped file stays clean).
void set_bits(double& slot, double value) {
  uint64_t held = 0, bits = 0;
  std::memcpy(&held, &slot, sizeof(double));
  std::memcpy(&bits, &value, sizeof(double));
  if (held != bits) slot = value;
}

// The JSON object in `path`; `what` says which TorchRL file it is.
ordered_json read_object(const std::string& path) {
  c10::optional<ordered_json> j = read_json_file(path, kWhat);
  TORCH_CHECK(j.has_value(), kWhat, ": '", path,
              "' is missing; TorchRL's ReplayBuffer.dumps writes it");
  TORCH_CHECK(j->is_object(), kWhat, ": '", path,
              "' must hold a JSON object, got ", j->type_name());
  return std::move(*j);
}

// Entry `key` of the object `j` (read from `path`), which must exist.
const ordered_json& field(const ordered_json& j, const char* key,
                          const std::string& path) {
  auto it = j.find(key);
  TORCH_CHECK(it != j.end(), kWhat, ": '", path, "' has no \"", key,
              "\" entry");
  return *it;
}

// An integer; with `float_ok`, also a float of integral value (TorchRL 0.14
// writes the sampler's "_max_capacity" as 16.0).
int64_t int_field(const ordered_json& j, const char* key,
                  const std::string& path, bool float_ok = false) {
  const ordered_json& v = field(j, key, path);
  const bool integral_float = float_ok && v.is_number_float() &&
                              std::abs(v.get<double>()) < 9.0e15 &&
                              v.get<double>() == std::floor(v.get<double>());
  TORCH_CHECK(v.is_number_integer() || integral_float, kWhat, ": '", path,
              "': \"", key, "\" must be an integer, got ", v.dump());
  return integral_float ? static_cast<int64_t>(v.get<double>())
                        : v.get<int64_t>();
}

double float_field(const ordered_json& j, const char* key,
                   const std::string& path) {
  const ordered_json& v = field(j, key, path);
  TORCH_CHECK(v.is_number() && std::isfinite(v.get<double>()), kWhat, ": '",
              path, "': \"", key, "\" must be a finite number, got ", v.dump());
  return v.get<double>();
}

// TorchRL's "_max_priority": a number (TorchRL 0.4), or [value, index]
// (0.14: the largest raw priority and the row that holds it; both null
// before any row had a priority, when the next row gets priority 1).
double max_priority_field(const ordered_json& j, const std::string& path) {
  const ordered_json& v = field(j, "_max_priority", path);
  const bool pair =
      v.is_array() && v.size() == 2 && (v[1].is_null() || v[1].is_number());
  const ordered_json& value = pair ? v[0] : v;
  if (pair && value.is_null()) return kInitialMaxPriority;
  TORCH_CHECK(value.is_number() && std::isfinite(value.get<double>()), kWhat,
              ": '", path,
              "': \"_max_priority\" must be a finite number or [value, "
              "index], got ",
              v.dump());
  return value.get<double>();
}

}  // namespace

// ---- JsonNumberField --------------------------------------------------------

JsonNumberField::JsonNumberField(at::Tensor file, size_t offset, size_t width)
    : file_(std::move(file)),
      field_(static_cast<char*>(file_.data_ptr()) + offset),
      width_(width) {}

void JsonNumberField::put(const char* text, size_t n) const {
  std::memcpy(field_, text, n);
  std::memset(field_ + n, ' ', width_ - n);
}

void JsonNumberField::set(int64_t v) const {
  if (field_ == nullptr) return;
  char buf[kIntWidth];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  put(buf, static_cast<size_t>(r.ptr - buf));
}

void JsonNumberField::set(double v) const {
  if (field_ == nullptr) return;
  const std::string s = py_float_repr(v);
  put(s.data(), s.size());
}

// ---- Writing ----------------------------------------------------------------

void TorchRLFiles::write(const std::string& dir, const SamplerConfig& sampler,
                         int64_t capacity, int64_t size, int64_t cursor,
                         const double* raw, double max_priority,
                         TorchRLVersion version) {
  *this = TorchRLFiles();
  size_t at = 0;
  std::string text =
      with_field("{\"metadata\": {}, \"is_pytree\": false, \"len\": ",
                 JsonNumberField::kIntWidth, "}", at);
  JsonNumberField len =
      write_json_with_field(dir + "/storage", "storage_metadata.json", text, at,
                            JsonNumberField::kIntWidth);
  text = with_field("{\"cursor\": ", JsonNumberField::kIntWidth, "}", at);
  JsonNumberField cur = write_json_with_field(
      dir + "/writer", "metadata.json", text, at, JsonNumberField::kIntWidth);
  write_json(dir, "buffer_metadata.json", "{\"batch_size\": null}");

  const std::string sdir = dir + "/sampler";
  const c10::optional<PrioritizedSampler> prioritized = priority_spec(sampler);
  const PrioritizedSampler* p = prioritized ? &*prioritized : nullptr;
  const auto* w = std::get_if<SamplerWithoutReplacement>(&sampler);
  if (p == nullptr) {
    ::unlink((sdir + "/sumtree.memmap").c_str());
    ::unlink((sdir + "/mintree.memmap").c_str());
    if (w == nullptr) ::unlink((sdir + "/sampler_metadata.json").c_str());
  }
  if (w != nullptr) {
    write_json(sdir, "sampler_metadata.json",
               std::string("{\"len_storage\": 0, \"_sample_list\": null, "
                           "\"drop_last\": ") +
                   (w->drop_last() ? "true" : "false") +
                   ", \"_ran_out\": false}");
  }
  if (p == nullptr && w == nullptr) ::rmdir(sdir.c_str());  // when empty
  if (p != nullptr) {
    // The trees first: sampler_metadata.json names a complete sampler.
    constexpr double kNoMin = std::numeric_limits<float>::max();
    sum_file_ = tree_file(sdir, "sumtree.memmap", capacity, 0.0);
    min_file_ = tree_file(sdir, "mintree.memmap", capacity, kNoMin);
    sum_ = static_cast<double*>(sum_file_.data_ptr());
    min_ = static_cast<double*>(min_file_.data_ptr());
    // Runs of one priority (rows never updated) reuse the power.
    double last_raw = std::numeric_limits<double>::quiet_NaN(), mass = 0;
    for (int64_t i = 0; i < capacity; ++i) {
      double sum = 0.0, min = kNoMin;
      if (i < size) {
        if (!(raw[i] == last_raw)) {
          last_raw = raw[i];
          mass = row_mass(raw[i], max_priority, p->eps(), p->alpha());
        }
        sum = mass;
        if (mass > 0) min = mass;
      }
      set_bits(sum_[i], sum);
      set_bits(min_[i], min);
    }
    // TorchRL 0.14: [value, row] and a schema version (see
    // ReplayBufferOptions::torchrl_version); 0.4: the value.
    const bool v014 = version == TorchRLVersion::v0_14;
    text = with_field("{\"_alpha\": " + py_float_repr(p->alpha()) +
                          ", \"_beta\": " + py_float_repr(p->beta()) +
                          ", \"_eps\": " + py_float_repr(p->eps()) +
                          ", \"_max_priority\": " + (v014 ? "[" : ""),
                      JsonNumberField::kFloatWidth,
                      std::string(v014 ? ", null]" : "") +
                          ", \"_max_capacity\": " + std::to_string(capacity) +
                          (v014 ? ", \"_schema_version\": 1}" : "}"),
                      at);
    max_priority_ = write_json_with_field(sdir, "sampler_metadata.json", text,
                                          at, JsonNumberField::kFloatWidth);
    max_priority_.set(max_priority);
  }
  len_ = std::move(len);
  cursor_ = std::move(cur);
  set_counts(size, cursor);
}

void TorchRLFiles::set_mass(int64_t i, double mass) const {
  if (sum_ == nullptr) return;
  sum_[i] = mass;
  min_[i] = mass > 0 ? mass : std::numeric_limits<float>::max();
}

void TorchRLFiles::clear_masses() const {
  if (sum_ == nullptr) return;
  const int64_t n = sum_file_.numel() / static_cast<int64_t>(sizeof(double));
  for (int64_t i = 0; i < n; ++i) {
    set_bits(sum_[i], 0.0);
    set_bits(min_[i], std::numeric_limits<float>::max());
  }
}

// ---- Reading ----------------------------------------------------------------

bool is_torchrl_dump(const std::string& dir) {
  return path_exists(dir + "/storage/storage_metadata.json");
}

TorchRLDump read_torchrl_dump(const std::string& dir, int64_t capacity,
                              bool want_priorities) {
  TorchRLDump out;
  // The capacity, from the storage's own metadata.
  const std::string meta_path = dir + "/storage/meta.json";
  const ordered_json meta = read_object(meta_path);
  const ordered_json& shape = field(meta, "shape", meta_path);
  TORCH_CHECK(
      shape.is_array() && shape.size() == 1 && shape[0].is_number_integer(),
      kWhat, ": '", meta_path,
      "': the storage's batch size must be [capacity] (TorchRL's "
      "LazyMemmapStorage with ndim=1), got ",
      shape.dump());
  const int64_t stored_capacity = shape[0].get<int64_t>();
  TORCH_CHECK_VALUE(stored_capacity == capacity, kWhat, ": the buffer in '",
                    dir, "' has capacity ", stored_capacity,
                    ", but ReplayBufferOptions asks for capacity ", capacity,
                    "; open it with capacity ", stored_capacity);

  const std::string smeta_path = dir + "/storage/storage_metadata.json";
  const ordered_json smeta = read_object(smeta_path);
  const ordered_json& pytree = field(smeta, "is_pytree", smeta_path);
  TORCH_CHECK(pytree == false, kWhat, ": '", smeta_path,
              "' describes a pytree storage (\"is_pytree\": ", pytree.dump(),
              "); only TensorDict storages can be opened");
  const int64_t len = int_field(smeta, "len", smeta_path);
  TORCH_CHECK(len >= 0 && len <= capacity, kWhat, ": '", smeta_path,
              "': \"len\" is ", len, ", outside [0, ", capacity, "]");

  const std::string wpath = dir + "/writer/metadata.json";
  const int64_t cursor = int_field(read_object(wpath), "cursor", wpath);
  TORCH_CHECK(cursor >= 0 && cursor < capacity, kWhat, ": '", wpath,
              "': \"cursor\" is ", cursor, ", outside [0, ", capacity, ")");
  // A buffer that is not full has written rows [0, len) and writes next at
  // len.
  TORCH_CHECK(len == capacity || cursor == len, kWhat, ": '", wpath,
              "': \"cursor\" is ", cursor, " but the storage holds ", len,
              " of ", capacity,
              " rows; a buffer that is not full writes next at its length");
  out.rows_written = len < capacity || cursor == 0 ? len : capacity + cursor;

  const std::string ppath = dir + "/sampler/sampler_metadata.json";
  if (!want_priorities) return out;
  const c10::optional<ordered_json> pmeta = read_json_file(ppath, kWhat);
  if (!pmeta || !pmeta->is_object() || !pmeta->contains("_alpha")) return out;
  const double alpha = float_field(*pmeta, "_alpha", ppath);
  const double eps = float_field(*pmeta, "_eps", ppath);
  const double max_p = max_priority_field(*pmeta, ppath);
  const int64_t max_capacity =
      int_field(*pmeta, "_max_capacity", ppath, /*float_ok=*/true);
  TORCH_CHECK(alpha > 0 && eps >= 0 && max_p >= 0, kWhat, ": '", ppath,
              "': expected _alpha > 0, _eps >= 0 and _max_priority >= 0, got ",
              alpha, ", ", eps, " and ", max_p);
  TORCH_CHECK_VALUE(max_capacity == capacity, kWhat, ": '", ppath,
                    "': \"_max_capacity\" is ", max_capacity,
                    ", but the storage has capacity ", capacity);
  const std::string tree_path = dir + "/sampler/sumtree.memmap";
  const at::Tensor tree = map_file(
      tree_path, capacity * static_cast<int64_t>(sizeof(double)), kWhat);
  TORCH_CHECK(tree.defined(), kWhat, ": '", tree_path,
              "' is missing; TorchRL's PrioritizedSampler.dumps writes it "
              "next to '",
              ppath, "'");
  const auto* mass = static_cast<const double*>(tree.data_ptr());
  out.priorities.resize(static_cast<size_t>(std::min(len, capacity)));
  for (size_t i = 0; i < out.priorities.size(); ++i) {
    const double m = mass[i];
    out.priorities[i] =
        std::isfinite(m) && m >= 0 ? raw_priority(m, alpha, eps) : max_p;
  }
  out.has_priorities = true;
  out.max_priority = max_p;
  return out;
}

}  // namespace detail
}  // namespace tensordict
