// `.tdz` memmap archives: the zip container (io/archive.h). The layout is
// Python tensordict 0.14's (`tensordict/_archive.py`), which Python's
// `zipfile` and `unzip` read:
//
//   [local header, name, extra, payload] per file, in the order given
//   [central directory record, name, extra] per file
//   [zip64 end record, zip64 locator]       when a count or offset needs it
//   [end of central directory record]
//
// Every local header carries a zip64 block (sizes 0xFFFFFFFF in the header
// itself), as Python's `force_zip64=True` writes it; an aligned entry's
// local extra starts with a block 0x6474 ("td") of zeros that pads its
// payload to a multiple of 64 bytes. All numbers are little-endian.
#include "io/archive.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/internal.h"
#include "tensordict/persistence.h"

namespace tensordict {
namespace detail {
namespace {

constexpr uint64_t kAlignment = 64;
constexpr uint16_t kPadExtraId = 0x6474;  // "td"
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kDescriptorSig = 0x08074b50;
constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kEndSize = 22;
// Past this, Python's zipfile writes a field in a zip64 block.
constexpr uint64_t kZip64Limit = (uint64_t{1} << 31) - 1;
constexpr uint64_t kMaxSmall = uint64_t{64} << 20;
constexpr uint16_t kUtf8Flag = 0x800;
constexpr uint16_t kStored = 0;
constexpr uint16_t kDeflated = 8;

// Little-endian records.
struct Bytes {
  std::string s;
  void u16(uint16_t v) {
    s.push_back(static_cast<char>(v & 0xFF));
    s.push_back(static_cast<char>(v >> 8));
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v & 0xFFFF));
    u16(static_cast<uint16_t>(v >> 16));
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v));
    u32(static_cast<uint32_t>(v >> 32));
  }
};

uint16_t rd16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(rd16(p)) |
         (static_cast<uint32_t>(rd16(p + 2)) << 16);
}
uint64_t rd64(const uint8_t* p) {
  return static_cast<uint64_t>(rd32(p)) |
         (static_cast<uint64_t>(rd32(p + 4)) << 32);
}

uint32_t crc_of(const void* data, uint64_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk =
        static_cast<uInt>(std::min<uint64_t>(n, uint64_t{1} << 30));
    crc = ::crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// The CRC-32 of `n` zero bytes, in O(log n): runs of zeros doubled with
// crc32_combine.
uint32_t crc_of_zeros(uint64_t n) {
  const Bytef zero = 0;
  uLong run = ::crc32(::crc32(0L, Z_NULL, 0), &zero, 1);
  uint64_t run_len = 1;
  uLong acc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    if (n & 1) acc = ::crc32_combine(acc, run, static_cast<z_off_t>(run_len));
    n >>= 1;
    if (n > 0) {
      run = ::crc32_combine(run, run, static_cast<z_off_t>(run_len));
      run_len *= 2;
    }
  }
  return static_cast<uint32_t>(acc);
}

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x80;
  });
}

// The MS-DOS time and date of now, local time, as zip headers store them.
std::pair<uint16_t, uint16_t> dos_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  const int year = std::max(tm.tm_year + 1900, 1980);
  const auto time = static_cast<uint16_t>((tm.tm_hour << 11) |
                                          (tm.tm_min << 5) | (tm.tm_sec / 2));
  const auto date = static_cast<uint16_t>(((year - 1980) << 9) |
                                          ((tm.tm_mon + 1) << 5) | tm.tm_mday);
  return {time, date};
}

void pwrite_all(int fd, const void* data, uint64_t n, uint64_t offset,
                const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk =
        static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t w = ::pwrite(fd, p, chunk, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      TORCH_CHECK(false, "cannot write '", path, "': ", errno_str(err));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

const char* method_name(uint16_t method) {
  switch (method) {
    case 12:
      return "bzip2";
    case 14:
      return "lzma";
    case 93:
      return "zstd";
    default:
      return "unknown";
  }
}

}  // namespace

bool is_archive_path(const std::string& path) {
  static const std::string kSuffix = ".tdz";
  return path.size() > kSuffix.size() &&
         path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) ==
             0;
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

void write_archive(const std::string& path,
                   const std::vector<ArchiveFile>& files, Space space) {
  struct stat st {};
  TORCH_CHECK_VALUE(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), "'",
                    path,
                    "' is a directory, so no archive can be written there");
  const auto [dir, name] = split_path(path);
  const auto [time, date] = dos_now();

  // Where each file goes: its local header, then its payload.
  struct Placed {
    uint64_t header;
    uint64_t payload;
    uint32_t crc;
    uint16_t flags;
    std::string local;  // header, name and extra
  };
  std::vector<Placed> placed;
  placed.reserve(files.size());
  uint64_t pos = 0;
  for (const ArchiveFile& f : files) {
    TORCH_CHECK(f.name.size() <= 0xFFFF, "the entry name '", f.name,
                "' is too long for a zip file");
    const uint16_t flags = is_ascii(f.name) ? 0 : kUtf8Flag;
    Bytes extra;
    if (f.align) {
      // The payload starts after the header, the name, this block's 4-byte
      // header and its padding, and the 20-byte zip64 block.
      const uint64_t start = pos + kLocalSize + f.name.size() + 4 + 20;
      const uint64_t pad = (kAlignment - start % kAlignment) % kAlignment;
      extra.u16(kPadExtraId);
      extra.u16(static_cast<uint16_t>(pad));
      extra.s.append(pad, '\0');
    }
    extra.u16(kZip64ExtraId);
    extra.u16(16);
    extra.u64(f.size);
    extra.u64(f.size);
    const uint32_t crc =
        f.data != nullptr ? crc_of(f.data, f.size) : crc_of_zeros(f.size);
    Bytes h;
    h.u32(kLocalSig);
    h.u16(45);  // version needed: zip64
    h.u16(flags);
    h.u16(kStored);
    h.u16(time);
    h.u16(date);
    h.u32(crc);
    h.u32(0xFFFFFFFF);  // sizes: in the zip64 block
    h.u32(0xFFFFFFFF);
    h.u16(static_cast<uint16_t>(f.name.size()));
    h.u16(static_cast<uint16_t>(extra.s.size()));
    h.s += f.name;
    h.s += extra.s;
    const uint64_t payload = pos + h.s.size();
    placed.push_back(Placed{pos, payload, crc, flags, std::move(h.s)});
    pos = payload + f.size;
  }

  Bytes cd;
  for (size_t i = 0; i < files.size(); ++i) {
    const ArchiveFile& f = files[i];
    const Placed& p = placed[i];
    const bool big = f.size > kZip64Limit;
    const bool far = p.header > kZip64Limit;
    Bytes extra;
    if (big || far) {
      extra.u16(kZip64ExtraId);
      extra.u16(static_cast<uint16_t>((big ? 16 : 0) + (far ? 8 : 0)));
      if (big) {
        extra.u64(f.size);
        extra.u64(f.size);
      }
      if (far) extra.u64(p.header);
    }
    cd.u32(kCentralSig);
    cd.u16(big || far ? 0x032D : 0x0314);  // made by: Unix, zip 4.5 / 2.0
    cd.u16(45);
    cd.u16(p.flags);
    cd.u16(kStored);
    cd.u16(time);
    cd.u16(date);
    cd.u32(p.crc);
    cd.u32(big ? 0xFFFFFFFF : static_cast<uint32_t>(f.size));
    cd.u32(big ? 0xFFFFFFFF : static_cast<uint32_t>(f.size));
    cd.u16(static_cast<uint16_t>(f.name.size()));
    cd.u16(static_cast<uint16_t>(extra.s.size()));
    cd.u16(0);  // comment
    cd.u16(0);  // disk
    cd.u16(0);  // internal attributes
    cd.u32(0644u << 16);
    cd.u32(far ? 0xFFFFFFFF : static_cast<uint32_t>(p.header));
    cd.s += f.name;
    cd.s += extra.s;
  }
  const uint64_t cd_offset = pos;
  const uint64_t cd_size = cd.s.size();
  const uint64_t count = files.size();
  Bytes end;
  if (count >= 0xFFFF || cd_offset > kZip64Limit || cd_size > kZip64Limit) {
    end.u32(kZip64EndSig);
    end.u64(44);  // the record's size after this field
    end.u16(45);
    end.u16(45);
    end.u32(0);
    end.u32(0);
    end.u64(count);
    end.u64(count);
    end.u64(cd_size);
    end.u64(cd_offset);
    end.u32(kZip64LocatorSig);
    end.u32(0);
    end.u64(cd_offset + cd_size);
    end.u32(1);
  }
  end.u32(kEndSig);
  end.u16(0);
  end.u16(0);
  end.u16(static_cast<uint16_t>(std::min<uint64_t>(count, 0xFFFF)));
  end.u16(static_cast<uint16_t>(std::min<uint64_t>(count, 0xFFFF)));
  end.u32(static_cast<uint32_t>(std::min<uint64_t>(cd_size, 0xFFFFFFFF)));
  end.u32(static_cast<uint32_t>(std::min<uint64_t>(cd_offset, 0xFFFFFFFF)));
  end.u16(0);

  TmpFiles tmps;
  try {
    make_dir(dir);
    remove_stale_tmps(dir, name);
    std::string tmp;
    // Sized up front (holes or reserved space): the zeros of files without
    // data are never written.
    const int fd = tmps.create(
        dir, name, nullptr,
        static_cast<size_t>(pos + cd.s.size() + end.s.size()), space, tmp);
    for (size_t i = 0; i < files.size(); ++i) {
      pwrite_all(fd, placed[i].local.data(), placed[i].local.size(),
                 placed[i].header, tmp);
      if (files[i].data != nullptr) {
        pwrite_all(fd, files[i].data, files[i].size, placed[i].payload, tmp);
      }
    }
    pwrite_all(fd, cd.s.data(), cd.s.size(), cd_offset, tmp);
    pwrite_all(fd, end.s.data(), end.s.size(), cd_offset + cd_size, tmp);
    rename_or_throw(tmp, path);
  } catch (const c10::Error&) {
    tmps.remove_all();
    throw;
  }
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

Archive::Archive(const std::string& path, bool read_only, const char* fn)
    : path_(path), read_only_(read_only), fn_(fn) {
  struct stat st {};
  Fd fd = open_regular_file(path, !read_only, std::string(fn) + ": ", st);
  TORCH_CHECK(fd.valid(), fn, ": '", path, "' does not exist");
  const auto size = static_cast<uint64_t>(st.st_size);
  const std::string not_archive =
      std::string(fn) + ": '" + path +
      "' is a file but not a TensorDict archive (a zip file with a top-level "
      "meta.json entry)";
  TORCH_CHECK(size >= kEndSize, not_archive, ": it holds ", size, " bytes");
  // Copy-on-write when read_only: writes into the leaves stay in memory.
  storage_ = map_storage(fd.get(), static_cast<size_t>(size),
                         static_cast<size_t>(size), /*writable=*/true,
                         /*shared=*/!read_only, path, /*archive=*/true);
  const auto* base = static_cast<const uint8_t*>(storage_.data_ptr().get());
  const std::string corrupt = std::string(fn) + ": '" + path + "' is corrupt: ";

  // The end record: the last one in the final 64 KiB (its comment may
  // follow it).
  uint64_t eocd = std::numeric_limits<uint64_t>::max();
  const uint64_t lowest =
      size > kEndSize + 0xFFFF ? size - kEndSize - 0xFFFF : 0;
  for (uint64_t p = size - kEndSize + 1; p-- > lowest;) {
    if (rd32(base + p) == kEndSig &&
        p + kEndSize + rd16(base + p + 20) <= size) {
      eocd = p;
      break;
    }
  }
  TORCH_CHECK(eocd != std::numeric_limits<uint64_t>::max(), not_archive,
              ": it has no zip end record");
  TORCH_CHECK(rd16(base + eocd + 4) == 0 && rd16(base + eocd + 6) == 0, fn,
              ": '", path,
              "' is a zip file split over several disks, which "
              "this library cannot read");
  uint64_t count = rd16(base + eocd + 10);
  uint64_t cd_size = rd32(base + eocd + 12);
  uint64_t cd_offset = rd32(base + eocd + 16);
  if (eocd >= 20 && rd32(base + eocd - 20) == kZip64LocatorSig) {
    const uint64_t z64 = rd64(base + eocd - 20 + 8);
    TORCH_CHECK(z64 <= eocd - 20 && eocd - 20 - z64 >= 56 &&
                    rd32(base + z64) == kZip64EndSig,
                corrupt, "its zip64 end record is missing or out of place");
    count = rd64(base + z64 + 32);
    cd_size = rd64(base + z64 + 40);
    cd_offset = rd64(base + z64 + 48);
  }
  TORCH_CHECK(cd_offset <= eocd && cd_size <= eocd - cd_offset, corrupt,
              "its central directory (", cd_size, " bytes at offset ",
              cd_offset, ") does not fit in its ", size, " bytes");
  TORCH_CHECK(count <= cd_size / kCentralSize, corrupt,
              "its central directory of ", cd_size, " bytes cannot hold ",
              count, " entries");

  dirs_.insert("");
  auto add_dirs = [&](std::string name) {
    for (size_t cut = name.rfind('/'); cut != std::string::npos;
         cut = name.rfind('/')) {
      name.resize(cut);
      dirs_.insert(name);
    }
  };
  uint64_t p = cd_offset;
  const uint64_t cd_end = cd_offset + cd_size;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t record = p;
    TORCH_CHECK(cd_end - p >= kCentralSize && rd32(base + p) == kCentralSig,
                corrupt, "central directory record ", k, " is malformed");
    const uint8_t* r = base + p;
    const uint16_t flags = rd16(r + 8);
    const uint16_t method = rd16(r + 10);
    const uint32_t crc = rd32(r + 16);
    uint64_t csize = rd32(r + 20);
    uint64_t usize = rd32(r + 24);
    const uint16_t name_len = rd16(r + 28);
    const uint16_t extra_len = rd16(r + 30);
    const uint16_t comment_len = rd16(r + 32);
    uint64_t header = rd32(r + 42);
    TORCH_CHECK(cd_end - p - kCentralSize >=
                    uint64_t{name_len} + extra_len + comment_len,
                corrupt, "central directory record ", k, " is malformed");
    std::string name(reinterpret_cast<const char*>(r + kCentralSize), name_len);
    // The zip64 block holds, in order, the fields that are 0xFFFFFFFF.
    const uint8_t* x = r + kCentralSize + name_len;
    for (uint64_t q = 0; q + 4 <= extra_len;) {
      const uint16_t id = rd16(x + q);
      const uint16_t len = rd16(x + q + 2);
      TORCH_CHECK(q + 4 + len <= extra_len, corrupt, "entry '", name,
                  "' has a malformed extra field");
      if (id == kZip64ExtraId) {
        uint64_t at = q + 4;
        for (uint64_t* field : {&usize, &csize, &header}) {
          if (*field != 0xFFFFFFFF) continue;
          TORCH_CHECK(at + 8 <= q + 4 + len, corrupt, "entry '", name,
                      "' has a short zip64 field");
          *field = rd64(x + at);
          at += 8;
        }
      }
      q += 4 + len;
    }
    p += kCentralSize + name_len + extra_len + comment_len;

    TORCH_CHECK((flags & kUtf8Flag) != 0 || is_ascii(name), corrupt, "entry ",
                k, "'s name is not marked UTF-8 and is not ASCII");
    TORCH_CHECK((flags & 0x1) == 0, fn, ": '", path, "': entry '", name,
                "' is encrypted, which this library cannot read");
    if (!name.empty() && name.back() == '/') {  // a directory entry
      name.pop_back();
      dirs_.insert(name);
      add_dirs(name);
      continue;
    }
    TORCH_CHECK(header <= size && size - header >= kLocalSize &&
                    rd32(base + header) == kLocalSig,
                corrupt, "entry '", name, "' has no local header at offset ",
                header);
    const uint64_t payload = header + kLocalSize + rd16(base + header + 26) +
                             rd16(base + header + 28);
    TORCH_CHECK(payload <= size && csize <= size - payload, corrupt, "entry '",
                name, "' (", csize, " bytes at offset ", payload,
                ") does not fit in its ", size, " bytes");
    TORCH_CHECK(method != kStored || csize == usize, corrupt, "stored entry '",
                name, "' has a size of ", usize, " bytes but ", csize,
                " bytes of data");
    TORCH_CHECK(entries_.count(name) == 0, corrupt, "entry '", name,
                "' appears twice");
    entries_.emplace(
        name, Entry{header, record, payload, usize, csize, crc, method, flags});
    add_dirs(name);
  }
  TORCH_CHECK(is_file("meta.json"), not_archive, ": it has no meta.json entry");
}

std::string Archive::describe(const std::string& name) const {
  return join_path(path_, name);
}

void Archive::inflate_into(const std::string& name, const Entry& e,
                           uint8_t* dst, uint64_t want,
                           const std::string& context) const {
  TORCH_CHECK(e.method == kDeflated, context, "'", describe(name),
              "' is compressed with method ", e.method, " (",
              method_name(e.method),
              "), which this library cannot read: only stored and deflate "
              "entries can be");
  // Deflate expands at most 1032-fold: a larger size is a lie that would
  // make the reader allocate it.
  TORCH_CHECK(e.size / 1032 <= e.csize + 1, context, "'", describe(name),
              "' is corrupt: it declares ", e.size, " bytes, more than its ",
              e.csize, " compressed bytes can hold");
  const auto* base = static_cast<const uint8_t*>(storage_.data_ptr().get());
  z_stream zs{};
  TORCH_CHECK(::inflateInit2(&zs, -MAX_WBITS) == Z_OK, context,
              "cannot start zlib's inflate");
  uint64_t in_left = e.csize;
  uint64_t out_left = want;
  const uint8_t* in = base + e.payload;
  int rc = Z_OK;
  while (out_left > 0 && rc == Z_OK) {
    const auto in_chunk =
        static_cast<uInt>(std::min<uint64_t>(in_left, 1u << 30));
    const auto out_chunk =
        static_cast<uInt>(std::min<uint64_t>(out_left, 1u << 30));
    zs.next_in = const_cast<Bytef*>(in);
    zs.avail_in = in_chunk;
    zs.next_out = dst;
    zs.avail_out = out_chunk;
    rc = ::inflate(&zs, Z_NO_FLUSH);
    const uint64_t used = in_chunk - zs.avail_in;
    const uint64_t made = out_chunk - zs.avail_out;
    in += used;
    in_left -= used;
    dst += made;
    out_left -= made;
    if (rc == Z_BUF_ERROR && used == 0 && made == 0) break;  // input ran out
    if (rc == Z_BUF_ERROR) rc = Z_OK;
  }
  ::inflateEnd(&zs);
  TORCH_CHECK(out_left == 0, context, "'", describe(name),
              "' is corrupt: its deflate data ",
              rc == Z_STREAM_END || rc == Z_OK || rc == Z_BUF_ERROR
                  ? "ends early"
                  : "is malformed");
}

c10::optional<std::string> Archive::read_small(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return c10::nullopt;
  const Entry& e = it->second;
  TORCH_CHECK(e.size <= kMaxSmall, fn_, ": '", describe(name),
              "' is too large (", e.size, " bytes)");
  std::string out(static_cast<size_t>(e.size), '\0');
  if (e.method == kStored) {
    std::memcpy(
        &out[0],
        static_cast<const uint8_t*>(storage_.data_ptr().get()) + e.payload,
        out.size());
  } else {
    inflate_into(name, e, reinterpret_cast<uint8_t*>(&out[0]), e.size,
                 std::string(fn_) + ": ");
  }
  TORCH_CHECK(crc_of(out.data(), out.size()) == e.crc, fn_, ": '",
              describe(name), "' is corrupt: its CRC-32 does not match");
  return out;
}

at::Tensor Archive::leaf(const std::string& name, at::ScalarType dtype,
                         c10::IntArrayRef shape, int64_t nbytes,
                         const std::string& context) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return at::Tensor();
  const Entry& e = it->second;
  TORCH_CHECK(e.size >= static_cast<uint64_t>(nbytes), context, "leaf entry '",
              describe(name), "' holds ", e.size, " bytes, but shape ",
              shape_str(shape), " of ", dtype_name(dtype), " needs ", nbytes);
  const uint64_t item = c10::elementSize(dtype);
  if (e.method == kStored && e.payload % item == 0) {
    return tensor_on(storage_, static_cast<int64_t>(e.payload), dtype, shape);
  }
  TORCH_CHECK(read_only_, context, "'", describe(name), "' is ",
              e.method != kStored ? "compressed" : "not aligned for its dtype",
              ", so writes into the leaf could not reach the file: load the "
              "archive with read_only = true, which reads it into memory");
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(dtype));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  if (e.method == kStored) {
    std::memcpy(
        dst, static_cast<const uint8_t*>(storage_.data_ptr().get()) + e.payload,
        static_cast<size_t>(nbytes));
  } else {
    inflate_into(name, e, dst, static_cast<uint64_t>(nbytes), context);
  }
  return out;
}

void Archive::refresh_checksums() {
  TORCH_CHECK(!read_only_, fn_, ": the archive was opened read-only");
  auto* base = static_cast<uint8_t*>(storage_.data_ptr().get());
  const uint64_t size = storage_.nbytes();
  auto put32 = [&](uint64_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i)
      base[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  for (auto& [name, e] : entries_) {
    if (e.method != kStored) continue;  // compressed: never written in place
    e.crc = crc_of(base + e.payload, e.size);
    if ((e.flags & 0x8) == 0) {
      put32(e.header + 14, e.crc);
    } else {
      // In the data descriptor after the payload, maybe after a signature.
      uint64_t at = e.payload + e.csize;
      if (at + 4 <= size && rd32(base + at) == kDescriptorSig) at += 4;
      TORCH_CHECK(at + 4 <= size, fn_, ": '", describe(name),
                  "' is corrupt: its data descriptor is missing");
      put32(at, e.crc);
    }
    put32(e.record + 16, e.crc);
  }
}

}  // namespace detail

void refresh_archive_checksums(const std::string& path) {
  detail::Archive(path, /*read_only=*/false, "refresh_archive_checksums")
      .refresh_checksums();
}

}  // namespace tensordict
