// tensordict/persistence.h — TensorDicts on disk, and over to Python.
//
// Four routes, each readable by Python:
//
//  - a memmap directory (`memmap_`, `memmap`, `memmap_like`,
//    `TensorDict::load_memmap`), in the layout Python tensordict's
//    `TensorDict.memmap(prefix)` writes, so Python's
//    `TensorDict.load_memmap(prefix)` opens what these write, and the
//    reverse. The leaves stay in the files;
//  - a `.tdz` archive (`memmap("x.tdz")`, `memmap_like("x.tdz")`,
//    `TensorDict::load_memmap("x.tdz")`): the same directory in one zip
//    file, as Python tensordict 0.14 writes it for a prefix ending in
//    ".tdz" (and `pack_memmap`); the leaves are views into one mapping of
//    the file;
//  - one file (`consolidate`, `save`, `TensorDict::load`), for shipping a
//    dict as a single blob;
//  - `pickle_save` (below), `torch.save`'s format, for `torch.load`.
//
// The first two are members of `TensorDict`, as in Python, declared in
// tensordict/tensor_dict.h (included here). This header states their
// contract: the formats, what is atomic and what throws.
// docs/tutorials/memmap_and_python_interop.md walks through them from both
// languages.
//
// Memmap directory. One directory per dict level: the root's is `prefix`, a
// sub-dict's is the sub-directory named after its key. Each holds
//
//   meta.json       {"<key>": {"device": "cpu", "shape": [4, 3],
//                              "dtype": "torch.float32", "is_nested": false},
//                    "<sub>": {"type": "TensorDict"}, ...,
//                    "shape": [<batch size>], "device": "cpu",
//                    "_type": "<class 'tensordict._td.TensorDict'>"}
//   <key>.memmap    one per leaf: the raw element bytes, C-contiguous and
//                   little-endian, no header (numel * itemsize bytes, 1 byte
//                   per bool); a leaf with no elements has no file
//   <key>/          one per sub-dict, with its own meta.json
//   <key>/          one per non-tensor entry (see `set_non_tensor`), marked
//                   {"type": "NonTensorData"} (or "NonTensorStack") in the
//                   parent's meta.json; its meta.json is Python's:
//                   {"_type": "<class 'tensordict.tensorclass.NonTensorData'>",
//                    "data": <the value>, "_metadata": null}, plus
//                   _tensordict/meta.json with its batch size (Python 0.4
//                   needs it; newer versions write none, and the entry then
//                   takes its dict's batch size), or for a stack
//                   {"_type": "<class '...NonTensorStack'>", "stack_dim": 0,
//                    "device": "cpu", "data": <nested lists over the batch>}
//   <key>/          one per field of a tensor class (tensorclass.h), marked
//                   {"type": "<ClassName>"} in the parent's meta.json; its
//                   meta.json is {"_type": "<class 'module.ClassName'>"}
//                   and its dict is in <key>/_tensordict/, as Python's
//                   @tensorclass writes them (a tensor class's own
//                   directory has the same form at the root). `load_memmap`
//                   reads such a directory, at the root or below, as its
//                   dict; a field Python wrote as None is a missing key, and
//                   any other non-tensor field of the class is an error.
//
// A lazy stack (lazy_stack.h) has a directory of its own form:
//
//   meta.json       {"_type": "<class 'tensordict._lazy.LazyStackedTensorDict'>",
//                    "stack_dim": <d>}
//   0/, 1/, ...     its dicts, each a memmap directory as above
//
// as Python writes it; Python reads the dicts while `<prefix>/<i>` exists,
// so a write removes the dicts an earlier, longer stack left there.
// `TensorDict::load_memmap` of such a directory throws, pointing to
// `LazyStackedTensorDict::load_memmap`, and a lazy stack below a dict
// (Python's {"type": "LazyStackedTensorDict"} entry) cannot be loaded.
//
// `meta.json` lists the entries first, in insertion order, under their raw
// keys, so the keys `shape`, `device` and `_type` are reserved. The dtypes are
// float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool,
// complex64 and complex128, named as in Python (`torch.float32`).
//
// File names. A file or sub-directory is named after the key escaped as
// Python tensordict >= 0.13 does by default (`robust_key=True`): each byte of
// `/<>:"|?*\`, space, `%` and the control characters written `%XX`
// (uppercase hex), the empty key `%`, and `.` and `..` `%2E` and `%2E%2E`.
// So "a b" is stored in `a%20b.memmap` and "a/b" in `a%2Fb.memmap`; a key
// without those bytes ("obs") keeps its name. Python 0.4 to 0.12 look for raw
// names only and silently skip the entries whose names differ: for them,
// write with `MemmapKeyNames::kRaw`, which names a file after the raw key
// ("a b" in `a b.memmap`) unless the key is not one legal file name (empty,
// `.`, `..`, or with a `/` or NUL) or could be read as another name: `%`, or
// a `%` followed by two hex digits or by `tmp`; those keys keep their escaped
// names. Readers try the escaped name, then the raw one, as Python >= 0.13
// does (but the raw one first where the escaped name is another key of the
// same dict, which 0.4 stored there), so directories from every Python
// version load. Writing a key under
// one name removes a leaf file, or a sub-dict's `meta.json`, that an earlier
// write in the other mode left under its other name, which readers of that
// name would take for the key's data (a raw name only where kRaw would use
// it, so it is no other key's name). Readers ignore bytes past a leaf's data
// (Python sometimes writes some). A non-tensor value that Python pickled (not
// JSON: `other.pickle`, or a stack's "data": "pickle.pkl") cannot be read: a
// c10::Error names the entry.
//
// Writing into a directory that holds an earlier dict leaves it holding the
// new dict alone: the entries the old `meta.json` files list (leaf files,
// sub-directories, at every level) that the new dict does not write are
// removed once the old `meta.json` files are gone, so that no stale data
// stays next to the new (Python keeps it, TorchRL's rl#2437). Files the
// format does not name, directories that still hold some, and links to
// directories stay: nothing is removed through a link.
//
// A memory-mapped dict (`memmap_`, `memmap`, `memmap_like`, `load_memmap`) is
// on the CPU (`meta.json` says "cpu"; "None", which old Python versions
// wrote, loads as no device) and locked at every level, as in Python: a key
// added later would never reach the disk.
//
// Memory-mapped leaves are ordinary CPU tensors over shared file mappings:
// writes into them (`td[i] = row`) go straight to the files, and a file is
// unmapped when the last tensor viewing it dies, so tensors taken out of the
// dict keep working after it is gone. `load_memmap` maps the leaf files and
// reads only the `meta.json` files; `memmap_like` creates sparse files and
// copies no data.
//
// What is atomic. Writing a memmap directory is all-or-nothing for the dict
// and crash-safe for the directory. Every key, dtype and layout is checked
// before any file is touched. Each file is written under a temporary name
// that contains `%tmp` and renamed into place; the old `meta.json` files are
// removed before the first rename, and each level's new one is renamed in
// last, after its sub-dicts' (the root's at the very end). A process killed
// half-way therefore leaves either no `meta.json` or a complete new version,
// never a `meta.json` that describes missing data, and the loader ignores the
// leftover `%tmp` files. An I/O error removes the temporary files and leaves
// the dict unchanged. `save` writes its file under a temporary name too and
// renames it into place. Nothing calls `fsync`: the files survive a killed
// process, not a power cut.
//
// Archive. A path ending in ".tdz" given to `memmap` or `memmap_like` names
// an archive, not a directory (`memmap_` throws: it would keep the leaves in
// the dict, but an archive cannot hold them in place); `load_memmap` reads
// any regular file as one. The archive is a zip file whose entries are the
// files of the memmap directory above, by their paths under it
// ("meta.json", "next/obs.memmap"), at each level `meta.json` first, then
// the leaves by name, then each sub-directory by name, depth first. Entries
// are STORED, each local header carries a zip64 block (sizes in it) and a
// leaf's payload starts at a multiple of 64 bytes, padded by an extra block
// with id 0x6474 ahead of the zip64 one: tensordict 0.14's `_archive.py`
// layout, which `unzip` and Python's `zipfile` read, so unzipping gives the
// directory. Readers also take archives from other zip tools (`zip -0 -r` of
// a memmap directory): directory entries, leaves at any offset, deflated
// entries, zip64 or not.
//
// A dict over an archive is what Python makes of one: not locked, not
// `is_memmap()`, no `saved_path()`; its leaves print as shared tensors.
// `memmap` returns it copy-on-write (writes into it stay in memory, as
// Python's mode "r"); `memmap_like` and `load_memmap(path)` map the file
// shared, so writes into the leaves reach it (Python's mode "r+"), and
// `load_memmap(path, true)` copy-on-write. Writes never update the CRC-32s
// the zip format keeps: `refresh_archive_checksums` (below) does, for tools
// that check them. A leaf that cannot be viewed in place (deflated, or at an
// offset its dtype cannot be read at) is read into memory, which only a
// copy-on-write load allows: a writable one throws rather than take writes
// that would never reach the file. Writing an archive is all-or-nothing: the
// same checks as a directory's before any I/O, then one temporary file
// renamed into place, so a dict loaded from the old file keeps its data.
// The zeros of `memmap_like` are holes or reserved space, as for a
// directory, and never written.
//
// Single file (`save`, `load`): `[data][metadata JSON][int64 little-endian
// length of the JSON]`. The data is the consolidated buffer (see
// `consolidate`): every leaf C-contiguous at an 8-byte aligned offset (16 for
// complex128), in `keys(true, true)` order. The metadata is
//
//   {"type": "TensorDict", "batch_size": [...], "device": "cpu" | "None",
//    "entries": {"<key>": {"dtype": "torch.float32", "shape": [...],
//                          "offset": <bytes from the start of the data>},
//                "<sub>": <the same object for the sub-dict>, ...}}
//
// `load` maps the file copy-on-write: the dict is consolidated, and writes
// into it never reach the file.
//
// Errors. Every failure is a `c10::Error` (or a typed subclass) from
// `TORCH_CHECK`, naming the operation and, where one is at fault, the key or
// the file. Whatever a directory or file holds, the loaders throw rather than
// crash or read out of bounds (a fuzzer checks both). Any JSON they cannot
// use (a syntax error, a number out of range such as `1e400`, a field of the
// wrong type) is a `c10::Error` that names the file.
//
//  - `memmap_`, `memmap`, `memmap_like` throw before writing anything for an
//    empty `prefix`, a reserved key, a key that is not valid UTF-8 or too long
//    for a file name, two keys of one dict that map to the same file name, a
//    non-strided leaf (all `c10::ValueError`), or a dtype the format lacks,
//    such as complex32 or a quantized one (`c10::TypeError`); `memmap_` also
//    throws for a locked dict. An I/O error throws `c10::Error`.
//  - `load_memmap` throws for a missing directory or `meta.json`, malformed
//    JSON, JSON nested more than 512 levels deep (rejected while parsing), a
//    `_type` that is not a TensorDict, an unknown dtype (`c10::TypeError`), a
//    missing or short leaf file, a `meta.json` or leaf file that is not a
//    regular file (a FIFO or a device: opened without blocking, then
//    rejected), a shape that does not start with the batch size, a nested
//    (jagged) tensor, or a directory that contains itself.
//  - for an archive, `load_memmap` also throws for a file that is not a zip
//    file with a top-level meta.json, and for any record of it that does not
//    fit the file or contradicts another (the end record, the central
//    directory, a local header, an entry's size), for a duplicate entry, an
//    encrypted one, a name neither UTF-8-flagged nor ASCII, an entry
//    compressed otherwise than with deflate (read only when used), a
//    deflated one that declares more bytes than its data can hold or inflates
//    to fewer, and a meta.json whose CRC-32 does not match; `memmap` and
//    `memmap_like` also throw `c10::ValueError` for a path that is a
//    directory.
//  - `consolidate` throws `c10::ValueError` for a non-strided leaf or leaves
//    on different devices.
//  - `load` throws for a missing file, one that is not a regular file, one
//    that is too short or has an inconsistent length or metadata (metadata
//    nested more than 512 levels deep included), a non-CPU device, or a leaf
//    outside the data.
#pragma once

#include <string>
#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {

/// Serializes `td` as a nested `dict` of tensors (sub-dicts become nested
/// dicts, insertion order kept) with `torch::pickle_save`. Python reads the
/// bytes with `torch.load(io.BytesIO(data))`, or from a file they were
/// written to, also with `weights_only=True` (the default from torch 2.6):
/// the pickle holds only dicts, strings and tensors. The leaves are
/// detached; their data is copied into the bytes.
///
/// Example:
/// ```
///   std::vector<char> bytes = tensordict::pickle_save(td);
///   std::ofstream("td.pt", std::ios::binary).write(bytes.data(), bytes.size());
/// ```
[[nodiscard]] std::vector<char> pickle_save(const TensorDict& td);

/// Recomputes the CRC-32 that the zip format stores for each uncompressed
/// entry of the archive `path`, after writes through a dict loaded from it
/// with `read_only = false` (or made by `memmap_like`), which do not update
/// them. `load_memmap` never checks a leaf's CRC-32, but Python's `zipfile`,
/// `unpack_memmap` and `unzip` do. As Python's
/// `tensordict.refresh_archive_checksums`. Throws as `load_memmap` does for
/// a file that is not an archive.
void refresh_archive_checksums(const std::string& path);

}  // namespace tensordict
