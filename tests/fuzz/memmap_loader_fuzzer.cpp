// libFuzzer target for the memmap directory loader (TensorDict::load_memmap),
// the `.tdz` archive loader (load_memmap of a file) and the single-file
// loader (TensorDict::load).
//
// Input format: one input describes a small directory, as sections
//
//   === <relative path>\n<file bytes>
//
// each running to the next "\n=== " or to the end of the input. A path that
// ends with '/' makes an (empty) directory. An input that does not start with
// "=== " is the bytes of a lone meta.json. Paths are sanitized: no "." or ".."
// components, no absolute paths, at most 8 levels and 32 files.
//
// Each input is materialized in a fresh temporary directory, loaded with
// load_memmap (every leaf byte is then read, so a mapping shorter than its
// tensor would fault), written back with memmap() and reloaded. The raw input
// is also given to TensorDict::load as a file, and to load_memmap as an
// archive, read-only and writable, then written back as an archive and
// reloaded; a directory that loads is written as an archive and reloaded
// too (seeds: corpus/archive_*, Python 0.14's). Clear errors (c10::Error) are
// the expected outcome for most inputs; anything else (a crash, an ASan
// report, an uncaught exception) is a bug.
#include <fcntl.h>
#include <tensordict/tensordict.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using tensordict::TensorDict;

std::string& Root() {
  static std::string root = [] {
    std::string tmpl = (fs::temp_directory_path() / "td_fuzz_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return root;
}

void WriteFile(const std::string& path, const char* data, size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w <= 0) break;
    data += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
}

// A safe relative path, or "" when `p` is not acceptable.
std::string Sanitize(const std::string& p) {
  if (p.empty() || p.size() > 200 || p.front() == '/') return "";
  size_t depth = 0;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string comp = p.substr(start, end - start);
    if (comp == "." || comp == ".." || comp.find('\0') != std::string::npos)
      return "";
    if (comp.empty() && end != p.size()) return "";
    if (++depth > 8) return "";
    start = end + 1;
  }
  return p;
}

void Materialize(const std::string& dir, const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  fs::create_directories(dir);
  if (in.compare(0, 4, "=== ") != 0) {
    WriteFile(dir + "/meta.json", in.data(), in.size());
    return;
  }
  size_t pos = 0;
  int files = 0;
  while (pos < in.size() && files < 32) {
    // `pos` is at "=== ".
    const size_t eol = in.find('\n', pos);
    const std::string name = Sanitize(in.substr(
        pos + 4, (eol == std::string::npos ? in.size() : eol) - pos - 4));
    const size_t body = eol == std::string::npos ? in.size() : eol + 1;
    size_t next = in.find("\n=== ", body);
    const size_t body_end = next == std::string::npos ? in.size() : next;
    if (!name.empty()) {
      std::error_code ec;
      const fs::path target = fs::path(dir) / name;
      if (name.back() == '/') {
        fs::create_directories(target, ec);
      } else {
        fs::create_directories(target.parent_path(), ec);
        WriteFile(target.string(), in.data() + body, body_end - body);
      }
      ++files;
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
}

// Reads every byte of every leaf.
uint64_t Touch(const TensorDict& td) {
  uint64_t sum = 0;
  for (const auto& k : td.keys(true, true)) {
    const at::Tensor t = td.get(k);
    if (t.numel() == 0) continue;
    const auto* p = static_cast<const volatile uint8_t*>(t.data_ptr());
    const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    for (size_t i = 0; i < n; ++i) sum += p[i];
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string root = Root();
  std::error_code ec;
  fs::remove_all(root + "/in", ec);
  fs::remove_all(root + "/out", ec);
  Materialize(root + "/in", data, size);
  try {
    TensorDict td = TensorDict::load_memmap(root + "/in");
    const uint64_t before = Touch(td);
    TensorDict copy = td.memmap(root + "/out");
    TensorDict again = TensorDict::load_memmap(root + "/out");
    if (Touch(again) != before || again.keys(true) != td.keys(true))
      std::abort();
    TensorDict packed = td.memmap(root + "/out.tdz");
    if (Touch(TensorDict::load_memmap(root + "/out.tdz")) != before)
      std::abort();
  } catch (const c10::Error&) {
  }
  WriteFile(root + "/in.tdz", reinterpret_cast<const char*>(data), size);
  for (bool read_only : {true, false}) {
    try {
      TensorDict td = TensorDict::load_memmap(root + "/in.tdz", read_only);
      const uint64_t before = Touch(td);
      (void)td.memmap(root + "/again.tdz");
      if (Touch(TensorDict::load_memmap(root + "/again.tdz")) != before)
        std::abort();
    } catch (const c10::Error&) {
    }
  }
  WriteFile(root + "/file.bin", reinterpret_cast<const char*>(data), size);
  try {
    (void)Touch(TensorDict::load(root + "/file.bin"));
  } catch (const c10::Error&) {
  }
  return 0;
}
