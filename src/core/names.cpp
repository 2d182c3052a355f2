// Python's names for shapes, dtypes and devices, and repr() of a str
// (core/names.h).
#include "core/names.h"

#include <cstdint>
#include <cstdio>

namespace tensordict {
namespace detail {

std::string shape_str(c10::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  out += "]";
  return out;
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte:
      return "torch.uint8";
    case at::kChar:
      return "torch.int8";
    case at::kShort:
      return "torch.int16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kHalf:
      return "torch.float16";
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kComplexHalf:
      return "torch.complex32";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kBool:
      return "torch.bool";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kQInt8:
      return "torch.qint8";
    case at::kQUInt8:
      return "torch.quint8";
    case at::kQInt32:
      return "torch.qint32";
    default:
      return std::string("torch.") + c10::toString(dtype);
  }
}

std::string device_name(const at::Device& device) {
  if (device.is_cuda() && !device.has_index()) return "cuda:0";
  return device.str();
}

namespace {

// The code point starting at s[i] (advancing i past it). A byte that
// starts no UTF-8 sequence (a continuation byte, 0xF8-0xFF, or a lead byte
// without its continuation bytes) gives U+FFFD and advances i by one, so
// that the caller copies it as it is.
uint32_t next_code_point(const std::string& s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i++]);
  if (c < 0x80) return c;
  const int extra = c >= 0xF8   ? -1
                    : c >= 0xF0 ? 3
                    : c >= 0xE0 ? 2
                    : c >= 0xC0 ? 1
                                : -1;
  if (extra < 0 || s.size() - i < static_cast<size_t>(extra)) return 0xFFFD;
  uint32_t cp = c & (0x3F >> extra);
  for (size_t k = 0; k < static_cast<size_t>(extra); ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (b & 0x3F);
  }
  i += static_cast<size_t>(extra);
  return cp;
}

// Code points that Python's str.isprintable() rejects (besides ASCII
// controls): the C1 controls, and the separators and format characters of
// the ranges text commonly holds.
bool py_unprintable(uint32_t cp) {
  return (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
         (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF;
}

std::string hex_escape(uint32_t cp) {
  char buf[16];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
  }
  return buf;
}

}  // namespace

std::string py_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t cp = next_code_point(s, i);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || py_unprintable(cp)) {
      out += hex_escape(cp);
    } else {
      out.append(s, start, i - start);
    }
  }
  out += quote;
  return out;
}

}  // namespace detail
}  // namespace tensordict
