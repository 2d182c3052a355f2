#include <tensordict/tensordict.h>
#include <iostream>
using tensordict::TensorDict;
using namespace torch::indexing;

TensorDict make_tensordict() {
  return TensorDict({{"a", torch::rand({3})}, {"b", torch::rand({3, 4})}}, {3});
}

int main() {
  const int64_t N = 10;
  TensorDict td({}, {N, 3});
  for (int64_t i = 0; i < N; ++i) td[i] = make_tensordict();
  std::cout << td << "\n";

  TensorDict td2({}, {N, 3});
  std::cout << td2 << "\n";
  TensorDict r = make_tensordict();
  td2[0] = r;
  TORCH_CHECK((td2.index({Slice(1, None)}) == 0).all());
  TORCH_CHECK((td2[0] == r).all());
  torch::Tensor a = td2.get("a");
  td2[1] = make_tensordict();
  TORCH_CHECK(td2.get("a").is_same(a));
  TORCH_CHECK((td2.index({Slice(None, 2)}) != 0).all());
  fmt::print("{}\n", td2);
}
