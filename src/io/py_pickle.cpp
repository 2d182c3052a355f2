// Python pickles of plain data (io/py_pickle.h).
#include "io/py_pickle.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace tensordict {
namespace detail {

// ---- Writing -------------------------------------------------------------

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void write_value(std::string& out, const nlohmann::ordered_json& v) {
  using json = nlohmann::ordered_json;
  switch (v.type()) {
    case json::value_t::null:
      out.push_back('N');
      return;
    case json::value_t::boolean:
      out.push_back(v.get<bool>() ? '\x88' : '\x89');
      return;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      const bool is_signed = v.type() == json::value_t::number_integer;
      const int64_t i = is_signed ? v.get<int64_t>() : 0;
      if (is_signed && i >= INT32_MIN && i <= INT32_MAX) {
        out.push_back('J');  // BININT
        put_u32(out, static_cast<uint32_t>(static_cast<int32_t>(i)));
        return;
      }
      // LONG1: little-endian two's complement, 8 bytes (9 for large
      // unsigned values, with a zero sign byte).
      uint64_t u = is_signed ? static_cast<uint64_t>(i) : v.get<uint64_t>();
      const bool extra = !is_signed && (u >> 63) != 0;
      out.push_back('\x8a');
      out.push_back(static_cast<char>(extra ? 9 : 8));
      for (int k = 0; k < 8; ++k)
        out.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
      if (extra) out.push_back('\0');
      return;
    }
    case json::value_t::number_float: {
      out.push_back('G');  // BINFLOAT, big-endian
      const double d = v.get<double>();
      uint64_t bits = 0;
      std::memcpy(&bits, &d, 8);
      for (int k = 7; k >= 0; --k)
        out.push_back(static_cast<char>((bits >> (8 * k)) & 0xff));
      return;
    }
    case json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      out.push_back('X');  // BINUNICODE
      put_u32(out, static_cast<uint32_t>(s.size()));
      out += s;
      return;
    }
    case json::value_t::array:
      out.push_back(']');
      if (!v.empty()) {
        out.push_back('(');
        for (const auto& e : v) write_value(out, e);
        out.push_back('e');  // APPENDS
      }
      return;
    case json::value_t::object:
      out.push_back('}');
      if (!v.empty()) {
        out.push_back('(');
        for (const auto& [k, e] : v.items()) {
          write_value(out, k);
          write_value(out, e);
        }
        out.push_back('u');  // SETITEMS
      }
      return;
    default:
      TORCH_CHECK(false, "py_pickle: cannot pickle a ", v.type_name());
  }
}

}  // namespace

std::string py_pickle(const nlohmann::ordered_json& value) {
  std::string out = "\x80\x02";  // PROTO 2
  write_value(out, value);
  out.push_back('.');  // STOP
  return out;
}

// ---- Reading -------------------------------------------------------------

namespace {

// A value being unpickled: containers are shared, since the memo may refer
// to one that is still being filled.
struct Obj;
using ObjPtr = std::shared_ptr<Obj>;
struct Obj {
  enum Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kList,
    kDict,
    kMark
  } kind = kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<ObjPtr> items;                       // list (and tuple)
  std::vector<std::pair<ObjPtr, ObjPtr>> entries;  // dict
};

class Reader {
 public:
  Reader(const char* data, size_t size, const char* what)
      : p_(data), end_(data + size), what_(what) {}

  ObjPtr run() {
    while (true) {
      const char op = static_cast<char>(byte());
      switch (op) {
        case '\x80':
          byte();
          break;  // PROTO
        case '\x95':
          bytes(8);
          break;     // FRAME
        case '.': {  // STOP
          check(stack_.size() == 1, "the pickle does not end with one value");
          check(p_ == end_, "bytes follow the pickle's end");
          return stack_.back();
        }
        case '(':
          push(make(Obj::kMark));
          break;  // MARK
        case 'N':
          push(make(Obj::kNone));
          break;
        case '\x88':
        case '\x89': {
          auto o = make(Obj::kBool);
          o->b = op == '\x88';
          push(o);
          break;
        }
        case 'J':
          push(integer(static_cast<int32_t>(le(4))));
          break;  // BININT
        case 'K':
          push(integer(static_cast<int64_t>(le(1))));
          break;  // BININT1
        case 'M':
          push(integer(static_cast<int64_t>(le(2))));
          break;        // BININT2
        case '\x8a': {  // LONG1
          const size_t n = byte();
          check(n <= 8, "an integer does not fit in 64 bits");
          uint64_t u = n == 0 ? 0 : le(n);
          if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1)
            u |= ~uint64_t{0} << (8 * n);
          push(integer(static_cast<int64_t>(u)));
          break;
        }
        case 'G': {  // BINFLOAT
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | byte();
          auto o = make(Obj::kFloat);
          std::memcpy(&o->f, &bits, 8);
          push(o);
          break;
        }
        case '\x8c':
          push(str(le(1)));
          break;  // SHORT_BINUNICODE
        case 'X':
          push(str(le(4)));
          break;  // BINUNICODE
        case '\x8d':
          push(str(le(8)));
          break;  // BINUNICODE8
        case '}':
          push(make(Obj::kDict));
          break;  // EMPTY_DICT
        case ']':
        case ')':
          push(make(Obj::kList));
          break;  // EMPTY_LIST/TUPLE
        case 't':
        case 'l': {  // TUPLE, LIST
          auto o = make(Obj::kList);
          o->items = pop_to_mark();
          push(o);
          break;
        }
        case '\x85':
        case '\x86':
        case '\x87': {  // TUPLE1-3
          const size_t n = static_cast<size_t>(op - '\x85') + 1;
          check(stack_.size() >= n, "a tuple lacks its items");
          auto o = make(Obj::kList);
          o->items.assign(stack_.end() - n, stack_.end());
          for (const auto& it : o->items)
            check(it->kind != Obj::kMark, "misplaced mark");
          stack_.resize(stack_.size() - n);
          push(o);
          break;
        }
        case 'a': {  // APPEND
          ObjPtr v = pop();
          container(Obj::kList)->items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_to_mark();
          auto& list = container(Obj::kList)->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM
          ObjPtr v = pop();
          ObjPtr k = pop();
          container(Obj::kDict)->entries.emplace_back(k, v);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_to_mark();
          check(items.size() % 2 == 0, "a dict item lacks its value");
          auto& d = container(Obj::kDict)->entries;
          for (size_t k = 0; k < items.size(); k += 2)
            d.emplace_back(items[k], items[k + 1]);
          break;
        }
        case '\x94':
          memo_.push_back(top());
          break;  // MEMOIZE
        case 'q':
          memo_put(le(1));
          break;  // BINPUT
        case 'r':
          memo_put(le(4));
          break;  // LONG_BINPUT
        case 'h':
          memo_get(le(1));
          break;  // BINGET
        case 'j':
          memo_get(le(4));
          break;  // LONG_BINGET
        default:
          check(false, "unsupported pickle opcode 0x" + hex(op) +
                           " (only plain data is read)");
      }
    }
  }

 private:
  void check(bool ok, const std::string& msg) const {
    TORCH_CHECK(ok, what_, ": ", msg);
  }
  static std::string hex(char c) {
    const char* digits = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    return {digits[u >> 4], digits[u & 15]};
  }
  unsigned byte() {
    check(p_ < end_, "the pickle is truncated");
    return static_cast<unsigned char>(*p_++);
  }
  const char* bytes(uint64_t n) {
    check(n <= static_cast<uint64_t>(end_ - p_), "the pickle is truncated");
    const char* at = p_;
    p_ += n;
    return at;
  }
  uint64_t le(size_t n) {
    const char* b = bytes(n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(b[k])) << (8 * k);
    return v;
  }
  static ObjPtr make(Obj::Kind k) {
    auto o = std::make_shared<Obj>();
    o->kind = k;
    return o;
  }
  static ObjPtr integer(int64_t i) {
    auto o = make(Obj::kInt);
    o->i = i;
    return o;
  }
  ObjPtr str(uint64_t n) {
    auto o = make(Obj::kStr);
    const char* b = bytes(n);
    o->s.assign(b, n);
    return o;
  }
  void push(ObjPtr o) { stack_.push_back(std::move(o)); }
  ObjPtr top() const {
    check(!stack_.empty() && stack_.back()->kind != Obj::kMark,
          "the pickle's stack is empty");
    return stack_.back();
  }
  ObjPtr pop() {
    ObjPtr o = top();
    stack_.pop_back();
    return o;
  }
  std::vector<ObjPtr> pop_to_mark() {
    size_t m = stack_.size();
    while (m > 0 && stack_[m - 1]->kind != Obj::kMark) --m;
    check(m > 0, "a mark is missing");
    std::vector<ObjPtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(m),
                              stack_.end());
    stack_.resize(m - 1);
    return items;
  }
  Obj* container(Obj::Kind k) {
    ObjPtr o = top();
    check(o->kind == k, k == Obj::kList ? "appending to a non-list"
                                        : "setting an item of a non-dict");
    return o.get();
  }
  void memo_put(uint64_t idx) {
    check(idx < (uint64_t{1} << 20), "a memo index is out of range");
    if (memo_.size() <= idx) memo_.resize(idx + 1);
    memo_[idx] = top();
  }
  void memo_get(uint64_t idx) {
    check(idx < memo_.size() && memo_[idx] != nullptr,
          "a memo entry is missing");
    push(memo_[idx]);
  }

  const char* p_;
  const char* end_;
  const char* what_;
  std::vector<ObjPtr> stack_;
  std::vector<ObjPtr> memo_;
};

nlohmann::ordered_json to_json(const Obj& o, int depth, const char* what) {
  TORCH_CHECK(depth < 64, what, ": the pickle nests deeper than 64 levels");
  switch (o.kind) {
    case Obj::kNone:
      return nullptr;
    case Obj::kBool:
      return o.b;
    case Obj::kInt:
      return o.i;
    case Obj::kFloat:
      return o.f;
    case Obj::kStr:
      return o.s;
    case Obj::kList: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& it : o.items) a.push_back(to_json(*it, depth + 1, what));
      return a;
    }
    case Obj::kDict: {
      auto d = nlohmann::ordered_json::object();
      for (const auto& [k, v] : o.entries) {
        TORCH_CHECK(k->kind == Obj::kStr, what, ": a dict key is not a str");
        d[k->s] = to_json(*v, depth + 1, what);
      }
      return d;
    }
    case Obj::kMark:
      break;
  }
  TORCH_CHECK(false, what, ": misplaced mark");
}

}  // namespace

nlohmann::ordered_json py_unpickle(const char* data, size_t size,
                                   const char* what) {
  Reader r(data, size, what);
  ObjPtr root = r.run();
  return to_json(*root, 0, what);
}

}  // namespace detail
}  // namespace tensordict
