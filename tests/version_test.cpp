// <tensordict/version.h>: the macros agree with each other (the CMake
// package's agreement is checked by tests/find_package, which CI builds
// against the installed package).
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <string>

namespace {

TEST(Version, TheStringAndTheNumberAreMadeOfTheThreeParts) {
  EXPECT_EQ(std::string(TENSORDICT_VERSION_STRING),
            std::to_string(TENSORDICT_VERSION_MAJOR) + "." +
                std::to_string(TENSORDICT_VERSION_MINOR) + "." +
                std::to_string(TENSORDICT_VERSION_PATCH));
  EXPECT_EQ(TENSORDICT_VERSION, TENSORDICT_VERSION_MAJOR * 10000 +
                                    TENSORDICT_VERSION_MINOR * 100 +
                                    TENSORDICT_VERSION_PATCH);
  static_assert(
      TENSORDICT_VERSION_MINOR < 100 && TENSORDICT_VERSION_PATCH < 100,
      "TENSORDICT_VERSION packs each part in two digits");
}

}  // namespace
