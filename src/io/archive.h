// Internal: `.tdz` memmap archives, Python tensordict 0.14's single-file
// form of a memmap directory (tensordict/persistence.h states the format):
// a zip file whose entries are the directory's files, `meta.json` first at
// every level, the leaves STORED (uncompressed) with their payloads aligned
// to 64 bytes, so that one mapping of the file holds every leaf.
//
// io/memmap.cpp plans what to write and io/memmap_load.cpp walks the
// metadata when loading; this layer knows the zip container only: writing
// a list of files, and reading one entry's bytes or mapping a leaf over its
// payload, with every offset and size of a hostile file checked.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/files.h"

namespace tensordict {
namespace detail {

/// Whether writers take `path` for an archive rather than a directory: it
/// ends with ".tdz", as in Python.
bool is_archive_path(const std::string& path);

/// One file of an archive to write.
struct ArchiveFile {
  std::string name;  // '/'-separated, relative to the archive's root
  const void* data;  // its bytes, or null for `size` zero bytes
  uint64_t size;
  bool align;  // a leaf: its payload starts at a multiple of 64
};

/// Writes `files`, in order, as the archive `path`: a temporary file next to
/// it, renamed into place (nothing changes at `path` on error). The zeros of
/// files without data are holes (Space::kSparse) or reserved up front
/// (Space::kReserve). Entries are STORED, with Python's layout: a zip64
/// block in every local header, an extra block 0x6474 padding aligned ones.
void write_archive(const std::string& path,
                   const std::vector<ArchiveFile>& files, Space space);

/// An opened archive: its central directory read and checked, the file
/// mapped once (shared and writable, or private copy-on-write when
/// `read_only`). Entry names are '/'-separated; a directory is any prefix
/// of an entry's name ("" is the root). Messages start with `fn`.
class Archive {
 public:
  /// Throws when `path` is not a regular file, or not a zip file with a
  /// top-level meta.json entry, or when any of its records does not fit.
  Archive(const std::string& path, bool read_only, const char* fn);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] bool is_file(const std::string& name) const {
    return entries_.count(name) > 0;
  }
  [[nodiscard]] bool is_dir(const std::string& name) const {
    return dirs_.count(name) > 0;
  }
  /// The bytes of entry `name` (at most 64 MiB, CRC-32 checked), or nullopt
  /// when there is none.
  [[nodiscard]] c10::optional<std::string> read_small(
      const std::string& name) const;
  /// A tensor of `dtype` and `shape` over the first `nbytes` bytes of entry
  /// `name`'s payload, or an undefined tensor when there is no such entry.
  /// A STORED payload aligned for `dtype` is viewed in place; a compressed
  /// or unaligned one is read into memory (only when `read_only`: otherwise
  /// writes into the leaf could not reach the file, and that throws).
  /// Messages start with `context` ("load_memmap: key 'x': ").
  [[nodiscard]] at::Tensor leaf(const std::string& name, at::ScalarType dtype,
                                c10::IntArrayRef shape, int64_t nbytes,
                                const std::string& context) const;
  /// Recomputes the CRC-32 of every stored entry and writes it into its
  /// local header (or data descriptor) and central record: after writes
  /// through a shared mapping (`refresh_archive_checksums`). Needs
  /// `!read_only`.
  void refresh_checksums();

 private:
  struct Entry {
    uint64_t header;   // offset of its local header
    uint64_t record;   // offset of its central directory record
    uint64_t payload;  // offset of its (compressed) data
    uint64_t size;     // uncompressed size
    uint64_t csize;    // compressed size
    uint32_t crc;
    uint16_t method;  // 0 stored, 8 deflate
    uint16_t flags;
  };
  std::string describe(const std::string& name) const;
  // Inflates the first `want` bytes of deflate entry `e` into `dst`;
  // messages start with `context`.
  void inflate_into(const std::string& name, const Entry& e, uint8_t* dst,
                    uint64_t want, const std::string& context) const;
  std::string path_;
  bool read_only_;
  const char* fn_;
  c10::Storage storage_;  // the whole file, mapped
  std::map<std::string, Entry> entries_;
  std::set<std::string> dirs_;
};

}  // namespace detail
}  // namespace tensordict
