#include <tensordict/tensordict.h>

#include <iostream>

int main() {
  tensordict::TensorDict td({{"obs", torch::zeros({4, 3})}}, {4});
  td[0] = tensordict::TensorDict({{"obs", torch::ones({3})}}, {});
  std::cout << td << "\n";
  return td.get("obs")[0].sum().item<float>() == 3.0f ? 0 : 1;
}
