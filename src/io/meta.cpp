// The vocabulary of Python tensordict's metadata files (meta.json, and the
// single-file format's header): dtype names, shapes, devices, bounded JSON
// excerpts. Shared by the memmap directories (io/memmap.cpp) and
// consolidation and the single file (io/consolidate.cpp).
#include "io/meta.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"

namespace tensordict {
namespace detail {

using ordered_json = nlohmann::ordered_json;

namespace {

// Whether `j` nests at most `limit` levels (recursion bounded by `limit`).
bool shallow(const ordered_json& j, int limit) {
  if (!j.is_structured()) return true;
  if (limit == 0) return false;
  for (const auto& v : j) {
    if (!shallow(v, limit - 1)) return false;
  }
  return true;
}

}  // namespace

// ---- dtypes ---------------------------------------------------------------

bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kByte:
    case at::kBool:
    case at::kComplexFloat:
    case at::kComplexDouble:
      return true;
    default:
      return false;
  }
}

c10::optional<at::ScalarType> parse_dtype(const std::string& s) {
  static const std::pair<const char*, at::ScalarType> kTable[] = {
      {"torch.float32", at::kFloat},
      {"torch.float64", at::kDouble},
      {"torch.float16", at::kHalf},
      {"torch.bfloat16", at::kBFloat16},
      {"torch.int8", at::kChar},
      {"torch.int16", at::kShort},
      {"torch.int32", at::kInt},
      {"torch.int64", at::kLong},
      {"torch.uint8", at::kByte},
      {"torch.bool", at::kBool},
      {"torch.complex64", at::kComplexFloat},
      {"torch.complex128", at::kComplexDouble},
  };
  for (const auto& e : kTable) {
    if (s == e.first) return e.second;
  }
  return c10::nullopt;
}

// Bytes of a C-contiguous tensor of `shape`, or nullopt when negative or
// when the product of its non-zero dims (and so a stride) overflows.
c10::optional<int64_t> checked_nbytes(c10::IntArrayRef shape,
                                      at::ScalarType dtype) {
  int64_t n = static_cast<int64_t>(c10::elementSize(dtype));
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return c10::nullopt;
    if (d == 0) {
      zero = true;
    } else if (__builtin_mul_overflow(n, d, &n)) {
      return c10::nullopt;
    }
  }
  return zero ? 0 : n;
}

// A JSON list of non-negative int64s, or nullopt.
c10::optional<std::vector<int64_t>> parse_shape(const ordered_json& j) {
  if (!j.is_array() || j.size() > 64) return c10::nullopt;
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (const auto& d : j) {
    if (d.is_number_unsigned()) {
      const auto v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return c10::nullopt;
      }
      out.push_back(static_cast<int64_t>(v));
    } else if (d.is_number_integer()) {
      const auto v = d.get<int64_t>();
      if (v < 0) return c10::nullopt;
      out.push_back(v);
    } else {
      return c10::nullopt;
    }
  }
  return out;
}

// `j` as JSON text for an error message: bounded depth and length (dump()
// recurses, and the value comes from an untrusted file).
std::string json_excerpt(const ordered_json& j) {
  if (!shallow(j, 16)) return "(deeply nested JSON)";
  std::string s =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// Python's batch size / device entries of a level.
std::vector<int64_t> parse_batch(const ordered_json& meta,
                                 const std::string& path, const char* key,
                                 const char* fn) {
  auto it = meta.find(key);
  TORCH_CHECK(it != meta.end(), fn, ": '", path, "' has no \"", key,
              "\" entry");
  auto shape = parse_shape(*it);
  TORCH_CHECK(shape.has_value(), fn, ": '", path, "': \"", key,
              "\" must be a list of non-negative integers, got ",
              json_excerpt(*it));
  return *shape;
}

c10::optional<at::Device> parse_device(const ordered_json& meta,
                                       const std::string& path,
                                       const char* fn) {
  auto it = meta.find("device");
  if (it == meta.end() || it->is_null()) return c10::nullopt;
  TORCH_CHECK(it->is_string(), fn, ": '", path,
              "': \"device\" must be a string, got ", json_excerpt(*it));
  const std::string s = it->get<std::string>();
  if (s == "None") return c10::nullopt;
  if (s == "cpu") return at::Device(at::kCPU);
  c10::optional<at::Device> d;
  try {
    d = at::Device(s);
  } catch (const c10::Error&) {
  }
  TORCH_CHECK(d.has_value(), fn, ": '", path, "': unknown device \"", s, "\"");
  return usable_device(fn, *d);
}

}  // namespace detail
}  // namespace tensordict
