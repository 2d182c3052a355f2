// Internal: the names in a memmap directory (tensordict/persistence.h): which
// file or sub-directory holds which key, and what an earlier dict written to
// the same directory left there.
//
// A key is stored under its escaped name (MemmapKeyNames::kEscaped, Python
// >= 0.13's), or (kRaw) under its raw name wherever that is a legal file
// name that no other key's escaped name equals, so that every Python version
// finds it: 0.4 to 0.12 read raw names only, 0.13 and later read the escaped
// name and then the raw one. Readers try both, in 0.13's order.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tensordict/tensor_dict.h"

namespace tensordict {
namespace detail {

/// The `_type` of a dict level's meta.json, as Python >= 0.5 writes it.
constexpr const char* kTdType = "<class 'tensordict._td.TensorDict'>";
/// The `_type` of a non-tensor level's meta.json: NonTensorData, and a
/// NonTensorStack.
constexpr const char* kNonTensorDataType =
    "<class 'tensordict.tensorclass.NonTensorData'>";
constexpr const char* kNonTensorStackType =
    "<class 'tensordict.tensorclass.NonTensorStack'>";
/// Whether a level's meta.json describes a TensorDict: its `_type` is
/// `kTdType` or 0.4's "<class 'tensordict.tensordict.TensorDict'>".
bool is_tensordict_meta(const nlohmann::ordered_json& meta);

/// The `_type` of a lazy stack's meta.json (tensordict/lazy_stack.h), which
/// also holds "stack_dim"; its dicts live in the sub-directories 0/, 1/, ...
constexpr const char* kLazyStackType =
    "<class 'tensordict._lazy.LazyStackedTensorDict'>";
/// Whether a directory's meta.json describes a lazy stack.
bool is_lazy_stack_meta(const nlohmann::ordered_json& meta);

/// The entries of a level's meta.json that are no keys: the batch size, the
/// device and the type.
bool is_reserved_key(const std::string& k);

/// The escaped form of a key (Python tensordict >= 0.13's file names): each
/// byte of `/<>:"|?*\`, space, `%` and the control characters becomes `%XX`;
/// "" is "%", "." and ".." are "%2E" and "%2E%2E". Always one file name.
std::string escape_key(const std::string& key);

/// Whether `name` is one file name: not empty, "." or "..", no '/' or NUL.
bool is_single_file_name(const std::string& name);

/// Whether `key` is stored under its raw name. Besides being one file name, it
/// must not be "%" (the empty key's escaped name) nor hold a '%' followed by
/// two hex digits (an escape: "a%20b" is the escaped name of "a b") or by
/// "tmp" (which marks temporary files, see tmp_name).
bool raw_name_ok(const std::string& key);

/// The name of `key`'s file (plus ".memmap" for a leaf) or sub-directory.
std::string file_name(const std::string& key, MemmapKeyNames names);

/// The names a reader tries for `key`, an entry of `meta`, in order: the
/// escaped name, then the raw one where it is one file name, as Python >=
/// 0.13 reads; but the raw one first when the escaped name is another key of
/// `meta`, which Python 0.4 to 0.12 stored under that raw name ("a b" and
/// "a%20b" in `a b.memmap` and `a%20b.memmap`; Python >= 0.13 would read "a
/// b" from "a%20b"'s file). Each is one file name.
std::vector<std::string> file_name_candidates(
    const std::string& key, const nlohmann::ordered_json& meta);

/// What an earlier dict written to a directory left there that a new write
/// does not replace: the files and the sub-directories of the entries its
/// meta.json lists (at every level, as each sub-directory's meta.json lists
/// its own) under names the new write does not use, and the dicts of an
/// earlier lazy stack (0/, 1/, ...) that it does not rewrite. Only names an old
/// meta.json gives are collected, never other files (a user's stay, and so
/// does their directory), never through a symbolic link; an old meta.json
/// that cannot be read adds nothing.
struct OldEntries {
  std::vector<std::string> files;
  std::vector<std::string> dirs;  // inner ones first
};
/// Adds to `out` what the old meta.json in `dir` lists and `written` (every
/// path the new write makes: its directories, files and meta.json files)
/// lacks.
void collect_old_entries(const std::string& dir,
                         const std::set<std::string>& written, OldEntries& out);
/// Removes what `collect_old_entries` collected (errors are ignored: a
/// directory that holds other files stays).
void remove_old_entries(const OldEntries& old);

}  // namespace detail
}  // namespace tensordict
