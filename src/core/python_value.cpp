// Python's str() and repr() of JSON values, and the reprs of non-tensor
// data (NonTensorData, NonTensorStack) as Python tensordict 0.4 prints them
// (core/non_tensor.h): the vocabulary of non-tensor values that errors
// (core, rl) and the repr (print/) share.
#include <ATen/ATen.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/names.h"
#include "core/non_tensor.h"

namespace tensordict {
namespace detail {

namespace {

// The number of code points of UTF-8 text (Python counts characters).
size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `n` code points of `s`, or its last `n` when `from_end`.
std::string code_point_slice(const std::string& s, size_t n, bool from_end) {
  if (!from_end) {
    size_t i = 0, seen = 0;
    while (i < s.size()) {
      if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == n)
        break;
      ++i;
    }
    return s.substr(0, i);
  }
  size_t i = s.size(), seen = 0;
  while (i > 0 && seen < n) {
    --i;
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++seen;
  }
  return s.substr(i);
}

}  // namespace

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest digits that read back as v, then Python's layout: fixed
  // notation for exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  const auto r =
      std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  const size_t e_pos = sci.find('e');
  const int exp = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  const bool neg = sci[0] == '-';
  for (size_t k = neg ? 1 : 0; k < e_pos; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+',
                exp < 0 ? -exp : exp);
  return out + ebuf;
}

std::string py_repr(const ordered_json& v) {
  switch (v.type()) {
    case ordered_json::value_t::null:
      return "None";
    case ordered_json::value_t::boolean:
      return v.get<bool>() ? "True" : "False";
    case ordered_json::value_t::number_integer:
      return std::to_string(v.get<int64_t>());
    case ordered_json::value_t::number_unsigned:
      return std::to_string(v.get<uint64_t>());
    case ordered_json::value_t::number_float:
      return py_float_repr(v.get<double>());
    case ordered_json::value_t::string:
      return py_string_repr(v.get_ref<const std::string&>());
    case ordered_json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        out += py_repr(v[i]);
      }
      return out + "]";
    }
    case ordered_json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += py_string_repr(it.key()) + ": " + py_repr(it.value());
      }
      return out + "}";
    }
    default:
      return "<binary>";
  }
}

std::string short_py_repr(const ordered_json& v) {
  std::string r = py_repr(v);
  if (code_points(r) > 50) r = code_point_slice(r, 50, false) + "...";
  return r;
}

std::string py_str(const ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : py_repr(v);
}

std::string non_tensor_repr(const TensorDictImpl& level) {
  const NonTensor& nt = *level.non_tensor;
  const std::string batch =
      "batch_size=torch.Size(" + shape_str(level.batch_size) + ")";
  const std::string device =
      "device=" + (level.device ? device_name(*level.device) : "None");
  if (!nt.is_stack) {
    std::string data = py_str(nt.data);
    if (code_points(data) > 200) {
      data = code_point_slice(data, 20, false) + "  ...  " +
             code_point_slice(data, 20, true);
    }
    return "NonTensorData(data=" + data + ", " + batch + ", " + device + ")";
  }
  // Python cuts the list's repr at 50 characters, as short_py_repr does.
  const std::string list = short_py_repr(non_tensor_tolist(level));
  return "NonTensorStack(\n    " + list + ",\n    " + batch + ",\n    " +
         device + ")";
}

}  // namespace detail
}  // namespace tensordict
