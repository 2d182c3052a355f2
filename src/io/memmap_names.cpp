#include "io/memmap_names.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <utility>

#include "io/files.h"

namespace tensordict {
namespace detail {

namespace {

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

}  // namespace

bool is_tensordict_meta(const nlohmann::ordered_json& meta) {
  auto it = meta.find("_type");
  return it != meta.end() && it->is_string() &&
         (it->get<std::string>() == kTdType ||
          it->get<std::string>() ==
              "<class 'tensordict.tensordict.TensorDict'>");
}

bool is_lazy_stack_meta(const nlohmann::ordered_json& meta) {
  auto it = meta.find("_type");
  return it != meta.end() && it->is_string() &&
         it->get<std::string>() == kLazyStackType;
}

bool is_reserved_key(const std::string& k) {
  return k == "shape" || k == "device" || k == "_type";
}

std::string escape_key(const std::string& key) {
  if (key.empty()) return "%";
  if (key == ".") return "%2E";
  if (key == "..") return "%2E%2E";
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F || std::strchr("/<>:\"|?*\\ %", c) != nullptr) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += ch;
    }
  }
  return out;
}

bool is_single_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

bool raw_name_ok(const std::string& key) {
  if (!is_single_file_name(key) || key == "%") return false;
  for (size_t i = key.find('%'); i != std::string::npos;
       i = key.find('%', i + 1)) {
    if (i + 2 < key.size() && is_hex(key[i + 1]) && is_hex(key[i + 2])) {
      return false;
    }
    if (key.compare(i + 1, 3, "tmp") == 0) return false;
  }
  return true;
}

std::string file_name(const std::string& key, MemmapKeyNames names) {
  return names == MemmapKeyNames::kRaw && raw_name_ok(key) ? key
                                                           : escape_key(key);
}

std::vector<std::string> file_name_candidates(
    const std::string& key, const nlohmann::ordered_json& meta) {
  std::string escaped = escape_key(key);
  if (escaped == key || !is_single_file_name(key)) return {std::move(escaped)};
  if (meta.contains(escaped)) return {key, std::move(escaped)};
  return {std::move(escaped), key};
}

namespace {

using ordered_json = nlohmann::ordered_json;

// A directory itself, not a link to one.
bool is_real_dir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A file or link (no directory) at `path`.
bool is_non_dir(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

// The dict level an old meta.json describes, or nullopt (none, unreadable,
// or no dict level, such as a NonTensorData's): cleaning up never fails a
// write.
c10::optional<ordered_json> old_dict_meta(const std::string& dir) {
  try {
    c10::optional<ordered_json> j =
        read_json_file(join_path(dir, "meta.json"), "memmap");
    if (j.has_value() && j->is_object() &&
        (is_tensordict_meta(*j) || is_lazy_stack_meta(*j))) {
      return j;
    }
  } catch (const c10::Error&) {
  }
  return c10::nullopt;
}

void collect(const std::string& dir, const std::set<std::string>& written,
             bool whole, int depth, OldEntries& out) {
  // Deeper than any directory load_memmap reads.
  if (depth > 64) return;
  const c10::optional<ordered_json> meta = old_dict_meta(dir);
  if (meta.has_value() && is_lazy_stack_meta(*meta)) {
    // A lazy stack's dicts, as Python loads them: 0/, 1/, ... while they
    // exist. One the new write rewrites keeps its directory.
    for (int i = 0; i < (1 << 20); ++i) {
      const std::string path = join_path(dir, std::to_string(i));
      if (!is_real_dir(path)) break;
      collect(path, written, /*whole=*/written.count(path) == 0, depth + 1,
              out);
    }
  } else if (meta.has_value()) {
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      if (is_reserved_key(it.key()) || !it.value().is_object()) continue;
      const bool is_dict = it.value().contains("type");
      for (const std::string& name : file_name_candidates(it.key(), *meta)) {
        const std::string path =
            join_path(dir, is_dict ? name : name + ".memmap");
        if (written.count(path) != 0) continue;
        if (is_dict && is_real_dir(path)) {
          collect(path, written, /*whole=*/true, depth + 1, out);
        } else if (!is_dict && is_non_dir(path)) {
          out.files.push_back(path);
        }
      }
    }
  }
  if (!whole) return;
  // A NonTensorData's batch size lives in _tensordict/meta.json.
  const std::string td_dir = join_path(dir, "_tensordict");
  if (is_real_dir(td_dir)) {
    out.files.push_back(join_path(td_dir, "meta.json"));
    out.dirs.push_back(td_dir);
  }
  const std::string meta_file = join_path(dir, "meta.json");
  if (is_non_dir(meta_file)) out.files.push_back(meta_file);
  out.dirs.push_back(dir);
}

}  // namespace

void collect_old_entries(const std::string& dir,
                         const std::set<std::string>& written,
                         OldEntries& out) {
  collect(dir, written, /*whole=*/false, 0, out);
}

void remove_old_entries(const OldEntries& old) {
  for (const std::string& f : old.files) ::unlink(f.c_str());
  for (const std::string& d : old.dirs) ::rmdir(d.c_str());
}

}  // namespace detail
}  // namespace tensordict
