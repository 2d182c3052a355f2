// The build's paths for the tests (test_paths.h), from the compile
// definitions that tests/CMakeLists.txt gives this file alone.
#include "test_paths.h"

#ifndef TENSORDICT_TEST_DATA_DIR
#error "TENSORDICT_TEST_DATA_DIR must be defined (the path of tests/data)"
#endif
#ifndef TENSORDICT_DIST_PEER
#error "TENSORDICT_DIST_PEER must be defined (the path of tensordict_dist_peer)"
#endif

namespace tensordict_test {

std::string TestDataDir() { return TENSORDICT_TEST_DATA_DIR; }
std::string DistPeerPath() { return TENSORDICT_DIST_PEER; }

}  // namespace tensordict_test
