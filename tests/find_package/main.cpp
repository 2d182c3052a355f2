#include <tensordict/tensordict.h>

#include <cstring>
#include <iostream>

int main() {
  // The header and the CMake package agree on the version.
  if (std::strcmp(TENSORDICT_VERSION_STRING, TENSORDICT_PACKAGE_VERSION) != 0) {
    std::cerr << "version.h says " << TENSORDICT_VERSION_STRING
              << ", the package " << TENSORDICT_PACKAGE_VERSION << "\n";
    return 1;
  }
  tensordict::TensorDict td({{"obs", torch::zeros({4, 3})}}, {4});
  td[0] = tensordict::TensorDict({{"obs", torch::ones({3})}}, {});
  std::cout << td << "\n";
  return td.get("obs")[0].sum().item<float>() == 3.0f ? 0 : 1;
}
