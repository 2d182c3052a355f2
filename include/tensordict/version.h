// tensordict/version.h — the library's version, as macros for the
// preprocessor and as a string.
//
// CMakeLists.txt reads the three numbers below as the project's version (the
// shared library's, and the CMake package's: find_package(tensordict 0.1)),
// so this file is where a release changes it.
#pragma once

/// The major version: a change breaks the API or a file format (within
/// 0.x, the minor version does).
#define TENSORDICT_VERSION_MAJOR 0
/// The minor version.
#define TENSORDICT_VERSION_MINOR 1
/// The patch version: fixes only.
#define TENSORDICT_VERSION_PATCH 0

/// The version as one number, `MAJOR * 10000 + MINOR * 100 + PATCH`, for
/// comparisons: `#if TENSORDICT_VERSION >= 100` (0.1.0 or later).
#define TENSORDICT_VERSION                                             \
  (TENSORDICT_VERSION_MAJOR * 10000 + TENSORDICT_VERSION_MINOR * 100 + \
   TENSORDICT_VERSION_PATCH)

/// @cond
#define TENSORDICT_VERSION_STR_(x) #x
#define TENSORDICT_VERSION_STR(x) TENSORDICT_VERSION_STR_(x)
/// @endcond

// clang-format off
/// The version as a string literal, "MAJOR.MINOR.PATCH" ("0.1.0").
#define TENSORDICT_VERSION_STRING                       \
  TENSORDICT_VERSION_STR(TENSORDICT_VERSION_MAJOR) "." \
  TENSORDICT_VERSION_STR(TENSORDICT_VERSION_MINOR) "." \
  TENSORDICT_VERSION_STR(TENSORDICT_VERSION_PATCH)
// clang-format on
