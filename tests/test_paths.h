// The build's paths for the tests: tests/data in the source tree and the
// distributed tests' peer program. They are compiled into test_paths.cpp
// only, so that no other test object depends on where the checkout is:
// ccache then reuses them in a clone elsewhere (tests/CMakeLists.txt).
#pragma once

#include <string>

namespace tensordict_test {

/// tests/data in the source tree.
std::string TestDataDir();
/// The tensordict_dist_peer program.
std::string DistPeerPath();

}  // namespace tensordict_test
