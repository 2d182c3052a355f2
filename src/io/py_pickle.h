// Internal: Python pickles of plain data (dicts, lists, tuples, str, int,
// float, bool, None), as JSON values. The metadata message of Python
// tensordict's `init_remote` (src/dist/remote.cpp) is such a pickle.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace tensordict {
namespace detail {

/// A pickle (protocol 2) of `value` that Python's `pickle.loads` reads back
/// as dicts (JSON objects, keys in order), lists (arrays), str, int, float,
/// bool and None.
std::string py_pickle(const nlohmann::ordered_json& value);

/// The value of a pickle of plain data (protocols 2 to 5, as Python's
/// `pickle.dumps` writes them): tuples become arrays; dict keys must be
/// str. Anything else (classes, objects, bytes, ints beyond 64 bits,
/// nesting deeper than 64, a truncated or malformed pickle) throws a
/// c10::Error "<what>: ...".
nlohmann::ordered_json py_unpickle(const char* data, size_t size,
                                   const char* what);

}  // namespace detail
}  // namespace tensordict
