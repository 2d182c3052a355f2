// The vocabulary of Python tensordict's metadata files (meta.json, and the
// single-file format's header): dtype names, shapes, devices, bounded JSON
// excerpts (io/meta.cpp). Keys in errors are NestedKey::str()'s, as
// everywhere in the library.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tensordict {
namespace detail {

/// Whether the formats store `t` (the dtypes Python's memmap writes).
bool supported_dtype(at::ScalarType t);
/// The dtype named "torch.float32" etc., or nullopt for any other text.
c10::optional<at::ScalarType> parse_dtype(const std::string& s);

/// Bytes of a C-contiguous tensor of `shape`, or nullopt when negative or
/// when the product of its non-zero dims (and so a stride) overflows.
c10::optional<int64_t> checked_nbytes(c10::IntArrayRef shape,
                                      at::ScalarType dtype);
/// A JSON list of non-negative int64s, or nullopt.
c10::optional<std::vector<int64_t>> parse_shape(
    const nlohmann::ordered_json& j);

/// Python's batch size entry `key` ("shape") of a level's metadata `meta`,
/// read from `path`; `fn` names the caller in errors.
std::vector<int64_t> parse_batch(const nlohmann::ordered_json& meta,
                                 const std::string& path, const char* key,
                                 const char* fn);
/// Python's device entry of a level's metadata (absent, null or "None": no
/// device), checked to be usable here.
c10::optional<at::Device> parse_device(const nlohmann::ordered_json& meta,
                                       const std::string& path, const char* fn);

/// `j` as JSON text for an error message: bounded depth and length (the
/// value comes from an untrusted file).
std::string json_excerpt(const nlohmann::ordered_json& j);

}  // namespace detail
}  // namespace tensordict
