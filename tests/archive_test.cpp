// `.tdz` memmap archives (Python tensordict 0.14's single-file memmap
// format): writing, loading, foreign zip files, hostile files, atomicity.
// Python's own archives are tested in python_memmap_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/persistence.h>
#include <tensordict/tensordict.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::ListDir;
using tensordict_test::MakeDirs;
using tensordict_test::TakeSnapshot;
using tensordict_test::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string TensorBytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     static_cast<size_t>(c.numel()) * c.element_size());
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(::crc32(0L,
                                       reinterpret_cast<const Bytef*>(s.data()),
                                       static_cast<uInt>(s.size())));
}

uint16_t Rd16(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) |
                               (static_cast<uint8_t>(s[at + 1]) << 8));
}
uint32_t Rd32(const std::string& s, size_t at) {
  return Rd16(s, at) | (static_cast<uint32_t>(Rd16(s, at + 2)) << 16);
}
uint64_t Rd64(const std::string& s, size_t at) {
  return Rd32(s, at) | (static_cast<uint64_t>(Rd32(s, at + 4)) << 32);
}
void Put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}

// One entry of a zip file, as its central directory records it.
struct ZipEntry {
  std::string name;
  uint64_t record;   // offset of the central record
  uint64_t header;   // offset of the local header
  uint64_t payload;  // offset of the data
  uint64_t size;
  uint32_t crc;
  std::string data;  // the payload (stored entries)
};

// The entries of the zip file `bytes` (no comment, no zip64 end record).
std::vector<ZipEntry> ReadZip(const std::string& bytes) {
  const size_t eocd = bytes.size() - 22;
  EXPECT_EQ(Rd32(bytes, eocd), 0x06054b50u);
  const uint16_t count = Rd16(bytes, eocd + 10);
  size_t p = Rd32(bytes, eocd + 16);
  std::vector<ZipEntry> out;
  for (uint16_t k = 0; k < count; ++k) {
    EXPECT_EQ(Rd32(bytes, p), 0x02014b50u);
    ZipEntry e;
    e.record = p;
    const uint16_t n = Rd16(bytes, p + 28);
    const uint16_t x = Rd16(bytes, p + 30);
    const uint16_t c = Rd16(bytes, p + 32);
    e.name = bytes.substr(p + 46, n);
    e.crc = Rd32(bytes, p + 16);
    e.size = Rd32(bytes, p + 24);
    e.header = Rd32(bytes, p + 42);
    e.payload =
        e.header + 30 + Rd16(bytes, e.header + 26) + Rd16(bytes, e.header + 28);
    e.data = bytes.substr(e.payload, e.size);
    out.push_back(e);
    p += 46 + n + x + c;
  }
  return out;
}

// A zip file as other tools write it (`zip -0 -r`, Python's zipfile without
// tensordict's alignment): entries packed back to back, each stored or
// deflated, no zip64 blocks. `corrupt` hooks let tests break one field.
struct ZipBuilder {
  struct File {
    std::string name;
    std::string data;
    bool deflate = false;
    uint16_t method_override = 0xFFFF;
    uint16_t flags = 0;
  };
  std::vector<File> files;

  ZipBuilder& add(std::string name, std::string data, bool deflate = false) {
    files.push_back(File{std::move(name), std::move(data), deflate});
    return *this;
  }

  std::string build() const {
    std::string out;
    std::string cd;
    auto u16 = [](std::string& s, uint16_t v) {
      s.push_back(static_cast<char>(v & 0xFF));
      s.push_back(static_cast<char>(v >> 8));
    };
    auto u32 = [&](std::string& s, uint32_t v) {
      u16(s, static_cast<uint16_t>(v & 0xFFFF));
      u16(s, static_cast<uint16_t>(v >> 16));
    };
    for (const File& f : files) {
      std::string payload = f.data;
      if (f.deflate) {
        z_stream zs{};
        deflateInit2(&zs, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        payload.assign(deflateBound(&zs, f.data.size()), '\0');
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(f.data.data()));
        zs.avail_in = static_cast<uInt>(f.data.size());
        zs.next_out = reinterpret_cast<Bytef*>(&payload[0]);
        zs.avail_out = static_cast<uInt>(payload.size());
        deflate(&zs, Z_FINISH);
        payload.resize(zs.total_out);
        deflateEnd(&zs);
      }
      const uint16_t method =
          f.method_override != 0xFFFF ? f.method_override : (f.deflate ? 8 : 0);
      const uint32_t offset = static_cast<uint32_t>(out.size());
      u32(out, 0x04034b50);
      u16(out, 20);
      u16(out, f.flags);
      u16(out, method);
      u16(out, 0);
      u16(out, 0x21);
      u32(out, Crc(f.data));
      u32(out, static_cast<uint32_t>(payload.size()));
      u32(out, static_cast<uint32_t>(f.data.size()));
      u16(out, static_cast<uint16_t>(f.name.size()));
      u16(out, 0);
      out += f.name + payload;
      u32(cd, 0x02014b50);
      u16(cd, 0x0314);
      u16(cd, 20);
      u16(cd, f.flags);
      u16(cd, method);
      u16(cd, 0);
      u16(cd, 0x21);
      u32(cd, Crc(f.data));
      u32(cd, static_cast<uint32_t>(payload.size()));
      u32(cd, static_cast<uint32_t>(f.data.size()));
      u16(cd, static_cast<uint16_t>(f.name.size()));
      u16(cd, 0);
      u16(cd, 0);
      u16(cd, 0);
      u16(cd, 0);
      u32(cd, 0);
      u32(cd, offset);
      cd += f.name;
    }
    const uint32_t cd_offset = static_cast<uint32_t>(out.size());
    out += cd;
    u32(out, 0x06054b50);
    u16(out, 0);
    u16(out, 0);
    u16(out, static_cast<uint16_t>(files.size()));
    u16(out, static_cast<uint16_t>(files.size()));
    u32(out, static_cast<uint32_t>(cd.size()));
    u32(out, cd_offset);
    u16(out, 0);
    return out;
  }
};

const char* kMeta =
    R"({"x": {"device": "cpu", "shape": [2], "dtype": "torch.float32", "is_nested": false}, )"
    R"("shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})";

std::string FloatBytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

// kMeta, padded with spaces so that in Foreign() the payload of x.memmap
// (after two 30-byte local headers and the names) is not 4-byte aligned.
std::string ForeignMeta() {
  std::string meta = kMeta;
  while ((30 + 9 + meta.size() + 30 + 8) % 4 == 0) meta += ' ';
  return meta;
}

// A one-leaf archive, x = [1.5, 2.5], as foreign tools write it.
ZipBuilder Foreign(bool deflate = false) {
  ZipBuilder z;
  z.add("meta.json", ForeignMeta())
      .add("x.memmap", FloatBytes({1.5f, 2.5f}), deflate);
  return z;
}

TensorDict MakeNested() {
  TensorDict td({{"obs", at::arange(6, at::kFloat).reshape({2, 3})},
                 {{"next", "reward"}, at::tensor({1.5, 2.5}, at::kDouble)},
                 {{"next", "done"}, at::tensor({1, 0}).to(at::kBool)},
                 {"a b", at::tensor({7, 8}, at::kLong)},
                 {"none", at::empty({2, 0}, at::kFloat)},
                 {"c", at::tensor({1, 2}, at::kComplexDouble)}},
                {2});
  td.set("empty", TensorDict({}, {2}));
  td.set_non_tensor("note", "hello");
  return td;
}

void ExpectSameDict(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(true), b.keys(true));
  EXPECT_EQ(a.batch_size().vec(), b.batch_size().vec());
  for (const auto& k : a.keys(true, true)) {
    if (a.get_entry(k).is_non_tensor()) {
      EXPECT_EQ(a.get_non_tensor(k), b.get_non_tensor(k)) << k;
      continue;
    }
    EXPECT_EQ(a.get(k).scalar_type(), b.get(k).scalar_type()) << k;
    EXPECT_EQ(a.get(k).sizes(), b.get(k).sizes()) << k;
    EXPECT_EQ(TensorBytes(a.get(k)), TensorBytes(b.get(k))) << k;
  }
}

// ---------------------------------------------------------------------------
// Writing and loading
// ---------------------------------------------------------------------------

TEST(Archive, MemmapToATdzPathWritesOneFileThatLoadsBack) {
  TempDir dir;
  const TensorDict td = MakeNested();
  const std::string path = dir / "td.tdz";
  TensorDict out = td.memmap(path);
  EXPECT_EQ(ListDir(dir.str()), std::vector<std::string>{"td.tdz"});
  ExpectSameDict(out, td);
  TensorDict loaded = TensorDict::load_memmap(path);
  ExpectSameDict(loaded, td);
  // As in Python: no memmap dict (not locked, no saved path), its leaves
  // plain shared tensors.
  EXPECT_FALSE(loaded.is_locked());
  EXPECT_FALSE(out.is_locked());
  EXPECT_FALSE(loaded.is_memmap());
  EXPECT_EQ(loaded.saved_path(), c10::nullopt);
  EXPECT_EQ(tensordict::repr(loaded.select({"obs"})),
            "TensorDict(\n"
            "    fields={\n"
            "        obs: Tensor(shape=torch.Size([2, 3]), device=cpu, "
            "dtype=torch.float32, is_shared=True)},\n"
            "    batch_size=torch.Size([2]),\n"
            "    device=cpu,\n"
            "    is_shared=False)");
  // Every leaf is a view into one mapping of the file, 64-byte aligned.
  const at::Tensor obs = loaded.get("obs");
  for (const auto& k : {tensordict::NestedKey("a b"),
                        tensordict::NestedKey({"next", "reward"})}) {
    EXPECT_TRUE(tensordict_test::SharesStorage(loaded.get(k), obs)) << k;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(loaded.get(k).data_ptr()) % 64, 0u)
        << k;
  }
}

TEST(Archive, EntriesAreTheMemmapDirectorysFilesMetaJsonFirstAtEveryLevel) {
  TempDir dir;
  const TensorDict td = MakeNested();
  (void)td.memmap(dir / "td.tdz");
  (void)td.memmap(dir / "td");
  const std::string bytes = ReadFile(dir / "td.tdz");
  std::vector<std::string> names;
  for (const ZipEntry& e : ReadZip(bytes)) {
    names.push_back(e.name);
    // Byte for byte the directory's file, with the CRC-32 zip readers check.
    EXPECT_EQ(e.data, ReadFile(dir / ("td/" + e.name))) << e.name;
    EXPECT_EQ(e.crc, Crc(e.data)) << e.name;
    const bool leaf =
        e.name.size() > 7 && e.name.substr(e.name.size() - 7) == ".memmap";
    if (leaf) {
      EXPECT_EQ(e.payload % 64, 0u) << e.name;
    }
    // Python's local header: a zip64 block with the sizes, after the
    // padding block 0x6474 of a leaf.
    const uint16_t extra = Rd16(bytes, e.header + 28);
    EXPECT_EQ(Rd16(bytes, e.header + 30 + e.name.size() + extra - 20), 0x0001)
        << e.name;
    if (leaf) {
      EXPECT_EQ(Rd16(bytes, e.header + 30 + e.name.size()), 0x6474) << e.name;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "meta.json", "a%20b.memmap", "c.memmap", "obs.memmap",
                       "empty/meta.json", "next/meta.json", "next/done.memmap",
                       "next/reward.memmap", "note/meta.json",
                       "note/_tensordict/meta.json"}));
}

TEST(Archive, MemmapReturnsACopyOnWriteDictAsInPython) {
  TempDir dir;
  const std::string path = dir / "td.tdz";
  TensorDict out = TensorDict({{"x", at::ones({3})}}, {3}).memmap(path);
  const std::string before = ReadFile(path);
  out.get("x").fill_(5);
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_TRUE(at::equal(TensorDict::load_memmap(path).get("x"), at::ones({3})));
  // read_only loads are copy-on-write too.
  TensorDict ro = TensorDict::load_memmap(path, /*read_only=*/true);
  ro.get("x").fill_(7);
  EXPECT_EQ(ReadFile(path), before);
}

TEST(Archive, MemmapLikeMakesAZeroArchiveThatWritesReach) {
  TempDir dir;
  const std::string path = dir / "buf.tdz";
  const TensorDict row(
      {{"obs", at::ones({4})}, {{"next", "r"}, at::ones({1}, at::kLong)}}, {});
  for (bool sparse : {false, true}) {
    TensorDict buf = row.unsqueeze(0).expand({5}).memmap_like(path, sparse);
    EXPECT_TRUE(at::equal(buf.get("obs"), at::zeros({5, 4})));
    buf.get("obs")[2].fill_(3);
    buf.get({"next", "r"})[4].fill_(9);
    TensorDict again = TensorDict::load_memmap(path, /*read_only=*/true);
    EXPECT_EQ(again.get("obs")[2].sum().item<float>(), 12.0f);
    EXPECT_EQ(again.get({"next", "r"})[4].item<int64_t>(), 9);
  }
  // The writes left the CRC-32s stale, until refreshed.
  auto stale = [&] {
    int n = 0;
    for (const ZipEntry& e : ReadZip(ReadFile(path))) n += e.crc != Crc(e.data);
    return n;
  };
  EXPECT_EQ(stale(), 2);
  tensordict::refresh_archive_checksums(path);
  EXPECT_EQ(stale(), 0);
}

TEST(Archive, AnArchiveReplacedOnDiskLeavesDictsOverTheOldOneIntact) {
  TempDir dir;
  const std::string path = dir / "td.tdz";
  (void)TensorDict({{"x", at::ones({3})}}, {3}).memmap(path);
  TensorDict old = TensorDict::load_memmap(path);
  (void)TensorDict({{"x", at::full({3}, 2.0)}}, {3}).memmap(path);
  EXPECT_TRUE(at::equal(old.get("x"), at::ones({3})));
  EXPECT_TRUE(
      at::equal(TensorDict::load_memmap(path).get("x"), at::full({3}, 2.0)));
}

TEST(Archive, ForeignZipFilesLoadUnalignedAndDeflatedEntriesReadOnly) {
  TempDir dir;
  for (bool deflate : {false, true}) {
    SCOPED_TRACE(deflate ? "deflate" : "stored");
    const std::string path = dir / "foreign.tdz";
    WriteFile(path, Foreign(deflate).build());
    TensorDict td = TensorDict::load_memmap(path, /*read_only=*/true);
    EXPECT_TRUE(at::equal(td.get("x"), at::tensor({1.5f, 2.5f})));
    // ForeignMeta() puts x.memmap's payload at an odd offset.
    ExpectThrowsMsg(
        [&] { (void)TensorDict::load_memmap(path); },
        "load_memmap: key x: '" + path + "/x.memmap' is " +
            (deflate ? "compressed" : "not aligned for its dtype") +
            ", so writes into the leaf could not reach the file: load the "
            "archive with read_only = true, which reads it into memory");
  }
  // Directory entries and sub-dicts, as `zip -r` writes them.
  ZipBuilder z = Foreign();
  z.files.insert(z.files.begin(), ZipBuilder::File{"sub/", ""});
  z.files[1].data =
      R"({"sub": {"type": "TensorDict"}, "x": {"device": "cpu", "shape": [2], )"
      R"("dtype": "torch.float32", "is_nested": false}, "shape": [2], "device": "cpu", )"
      R"("_type": "<class 'tensordict._td.TensorDict'>"})";
  z.add(
      "sub/meta.json",
      R"({"shape": [2], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})");
  WriteFile(dir / "dirs.tdz", z.build());
  TensorDict td = TensorDict::load_memmap(dir / "dirs.tdz", /*read_only=*/true);
  EXPECT_EQ(td.keys(true), tensordict_test::Keys({"sub", "x"}));
}

TEST(Archive, AFourGibibyteLeafGetsZip64Records) {
  TempDir dir;
  const std::string path = dir / "big.tdz";
  const int64_t n = (int64_t{1} << 32) + 64;
  // Sparse: no data is written, and the CRC-32 of the zeros is computed
  // without reading them.
  TensorDict big = TensorDict({{"a", at::zeros({1}, at::kByte).expand({n})},
                               {"b", at::zeros({1}, at::kByte).expand({n})}},
                              {n})
                       .memmap_like(path, /*sparse=*/true);
  big.get("b")[n - 1].fill_(7);
  TensorDict again = TensorDict::load_memmap(path, /*read_only=*/true);
  EXPECT_EQ(again.get("b")[n - 1].item<uint8_t>(), 7);
  EXPECT_EQ(again.get("a").size(0), n);
  EXPECT_EQ(
      again.get("b").data_ptr<uint8_t>() - again.get("a").data_ptr<uint8_t>() >=
          n,
      true);
  // The end record points at the zip64 one (Python reads the same fields).
  const std::string tail = [&] {
    std::ifstream in(path, std::ios::binary);
    in.seekg(-98, std::ios::end);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_EQ(Rd32(tail, 0), 0x06064b50u);   // zip64 end record
  EXPECT_EQ(Rd32(tail, 56), 0x07064b50u);  // its locator
  EXPECT_EQ(Rd64(tail, 48), Rd64(tail, 64) - Rd64(tail, 40));  // cd offset
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

TEST(ArchiveErrors, HostileFilesGetAClearError) {
  TempDir dir;
  const std::string path = dir / "bad.tdz";
  auto expect = [&](const std::string& bytes, const std::string& msg,
                    bool read_only = true) {
    WriteFile(path, bytes);
    ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(path, read_only); },
                    "load_memmap: '" + path + "' " + msg);
  };
  const std::string not_archive =
      "is a file but not a TensorDict archive (a zip file with a top-level "
      "meta.json entry): ";
  expect("PK", not_archive + "it holds 2 bytes");
  expect(std::string(100, 'x'), not_archive + "it has no zip end record");
  expect(ZipBuilder().add("x.memmap", "abcd").build(),
         not_archive + "it has no meta.json entry");
  const std::string good = Foreign().build();
  const size_t eocd = good.size() - 22;
  const size_t cd = Rd32(good, eocd + 16);
  {
    std::string b = good;
    Put32(b, eocd + 16, static_cast<uint32_t>(good.size()));
    expect(b, "is corrupt: its central directory (" +
                  std::to_string(Rd32(good, eocd + 12)) + " bytes at offset " +
                  std::to_string(good.size()) + ") does not fit in its " +
                  std::to_string(good.size()) + " bytes");
  }
  {
    std::string b = good;
    b[eocd + 10] = 9;
    expect(b, "is corrupt: its central directory of " +
                  std::to_string(Rd32(good, eocd + 12)) +
                  " bytes cannot hold 9 entries");
  }
  {
    std::string b = good;
    Put32(b, cd + 42, 5);  // meta.json's local header offset
    expect(b, "is corrupt: entry 'meta.json' has no local header at offset 5");
  }
  {
    std::string b = good;
    Put32(b, cd + 20, 1u << 30);  // meta.json's compressed size
    Put32(b, cd + 24, 1u << 30);
    expect(b,
           "is corrupt: entry 'meta.json' (1073741824 bytes at offset 39) does "
           "not fit in its " +
               std::to_string(good.size()) + " bytes");
  }
  {
    std::string b = good;
    Put32(b, cd + 24, 3);  // stored, but sizes differ
    expect(b,
           "is corrupt: stored entry 'meta.json' has a size of 3 bytes but " +
               std::to_string(ForeignMeta().size()) + " bytes of data");
  }
  {
    ZipBuilder z = Foreign();
    z.add("x.memmap", "abcdefgh");
    expect(z.build(), "is corrupt: entry 'x.memmap' appears twice");
  }
  {
    ZipBuilder z = Foreign();
    z.files[1].name = "x\xe9.memmap";
    expect(z.build(),
           "is corrupt: entry 1's name is not marked UTF-8 and is not ASCII");
  }
  // Entries' own data: messages name the entry.
  auto expect_entry = [&](const std::string& bytes, const std::string& msg) {
    WriteFile(path, bytes);
    ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(path, true); }, msg);
  };
  {
    std::string b = good;
    b[39 + 2] ^= 1;  // a byte of meta.json
    expect_entry(b, "load_memmap: '" + path +
                        "/meta.json' is corrupt: its CRC-32 does not match");
  }
  {
    ZipBuilder z = Foreign();
    z.files[1].flags = 1;
    expect_entry(z.build(), "load_memmap: '" + path +
                                "': entry 'x.memmap' is encrypted, which this "
                                "library cannot read");
  }
  {
    ZipBuilder z = Foreign();
    z.files[1].method_override = 12;
    expect_entry(z.build(),
                 "load_memmap: key x: '" + path +
                     "/x.memmap' is compressed with method 12 (bzip2), which "
                     "this library cannot read: only stored and deflate "
                     "entries can be");
  }
  {
    std::string b = Foreign(/*deflate=*/true).build();
    const size_t x_record = Rd32(b, b.size() - 22 + 16) + 46 + 9;
    Put32(b, x_record + 24, 1u << 30);  // declares 1 GiB from a few bytes
    expect_entry(
        b, "load_memmap: key x: '" + path +
               "/x.memmap' is corrupt: it declares 1073741824 bytes, more "
               "than its " +
               std::to_string(Rd32(b, x_record + 20)) +
               " compressed bytes can hold");
  }
  {
    ZipBuilder z;
    z.add("meta.json", kMeta)
        .add("x.memmap", FloatBytes({1.5f}), /*deflate=*/true);
    std::string b = z.build();
    const size_t x_record = Rd32(b, b.size() - 22 + 16) + 46 + 9;
    Put32(b, x_record + 24, 8);  // claims 8 bytes; its data inflates to 4
    expect_entry(b, "load_memmap: key x: '" + path +
                        "/x.memmap' is corrupt: its deflate data ends early");
  }
  {
    ZipBuilder z;
    z.add("meta.json", kMeta).add("x.memmap", FloatBytes({1.5f}));
    expect_entry(z.build(), "load_memmap: key x: leaf entry '" + path +
                                "/x.memmap' holds 4 bytes, but shape [2] of "
                                "torch.float32 needs 8");
  }
  {
    ZipBuilder z;
    z.add("meta.json", kMeta);
    expect_entry(z.build(), "load_memmap: key x: leaf entry '" + path +
                                "/x.memmap' is missing");
  }
}

TEST(ArchiveErrors, AFailedWriteLeavesTheOldArchiveAndNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir / "td.tdz";
  (void)TensorDict({{"x", at::ones({3})}}, {3}).memmap(path);
  const std::string before = ReadFile(path);
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)TensorDict({{"shape", at::ones({3})}}, {3}).memmap(path);
      },
      "memmap: key shape is reserved by the memmap format (meta.json uses "
      "\"shape\", \"device\" and \"_type\" for the dict's own metadata)");
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_EQ(ListDir(dir.str()), std::vector<std::string>{"td.tdz"});
  // A directory at the path stays as it is.
  MakeDirs(dir / "d.tdz");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)TensorDict({{"x", at::ones({3})}}, {3}).memmap(dir / "d.tdz");
      },
      "memmap: '" + dir / "d.tdz" +
          "' is a directory, so no archive can be written there");
  EXPECT_TRUE(ListDir(dir / "d.tdz").empty());
  // A parent that is a file.
  WriteFile(dir / "f", "x");
  ExpectThrowsMsg(
      [&] {
        (void)TensorDict({{"x", at::ones({3})}}, {3}).memmap(dir / "f/t.tdz");
      },
      "memmap: '" + dir / "f" + "' exists and is not a directory");
  EXPECT_EQ(ListDir(dir.str()),
            (std::vector<std::string>{"d.tdz", "f", "td.tdz"}));
}

TEST(ArchiveErrors, MemmapInPlaceCannotTargetAnArchive) {
  TempDir dir;
  TensorDict td({{"x", at::ones({3})}}, {3});
  const auto snap = TakeSnapshot(td);
  ExpectThrowsMsg<c10::ValueError>(
      [&] { td.memmap_(dir / "td.tdz"); },
      "memmap_: '" + dir / "td.tdz" +
          "' names an archive (.tdz), which cannot hold this dict's leaves in "
          "place: memmap(\"" +
          dir / "td.tdz" + "\") writes it and returns a dict over it");
  ExpectUnchanged(td, snap);
  EXPECT_TRUE(ListDir(dir.str()).empty());
}

}  // namespace
