// Internal: the io layer's file primitives for small files that sit next to
// memmap directories (the replay buffer's TorchRL metadata, rl/torchrl_files.h),
// and the single-file format's metadata for other carriers (dist/remote.cpp).
// They give these files the memmap writer's and loaders' guarantees:
//   - a write replaces a file atomically (a locked temporary file, then
//     rename; no fsync), and removes the temporaries of dead writers;
//   - a read opens regular files only, without blocking (a FIFO cannot hang
//     it), and every failure, JSON included, is a c10::Error naming the file.
// Implemented in io/memmap.cpp, next to the helpers they share.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/internal.h"

namespace tensordict {
namespace detail {

/// Creates the directory `dir` and its missing parents; throws naming the
/// first one that cannot be made, or `dir` when it exists and is not a
/// directory.
void make_dir(const std::string& dir);

/// Whether something exists at `path` (stat succeeds).
bool path_exists(const std::string& path);

/// Whether the directory `dir` has no entries; throws naming it when it
/// cannot be listed. Messages start with `fn`.
bool dir_is_empty(const std::string& dir, const char* fn);

/// Replaces the file `dir`/`name` by one holding the `size` bytes at `data`.
/// When `map`, returns the new file mapped shared and writable (uint8
/// `[size]`; stores into it reach the file), else an undefined tensor. On
/// error nothing is replaced; messages start with `fn`.
at::Tensor write_file(const std::string& dir, const std::string& name,
                      const void* data, size_t size, bool map, const char* fn);

/// The regular file `path` mapped shared and writable as uint8 `[nbytes]`,
/// or an undefined tensor when it does not exist. Throws when it is not a
/// regular file or holds fewer than `nbytes` bytes; messages start with `fn`.
at::Tensor map_file(const std::string& path, int64_t nbytes, const char* fn);

/// The JSON value in the file `path` (at most 64 MiB, nesting bounded as
/// in load_memmap), or nullopt when the file does not exist. Any other
/// failure is a c10::Error that starts with `fn` and names the file.
c10::optional<nlohmann::ordered_json> read_json_file(const std::string& path,
                                                     const char* fn);

/// The dtype Python names `name` ("torch.float32"), among those the
/// formats store; nullopt for any other name.
c10::optional<at::ScalarType> dtype_from_name(const std::string& name);

/// The metadata of a consolidated dict in the single-file format
/// (tensordict/persistence.h: {"type": "TensorDict", "batch_size",
/// "device", "entries": {key: {"dtype", "shape", "offset"} or a sub-dict}}),
/// offsets in bytes from the start of `buffer`, its uint8 storage.
nlohmann::ordered_json consolidated_meta(const TensorDictImpl& root,
                                         const at::Tensor& buffer);
/// The dict that `meta` (consolidated_meta's format) describes over the
/// CPU uint8 `buffer` (offset 0 of its storage), consolidated over it, with
/// the loader's checks: any metadata that does not fit the buffer is a
/// c10::Error "<fn>: '<source>': ...".
ImplPtr dict_from_consolidated_meta(const nlohmann::ordered_json& meta,
                                    const at::Tensor& buffer, const char* fn,
                                    const std::string& source);

}  // namespace detail
}  // namespace tensordict
