// Must not compile (tests/CMakeLists.txt, CompileFail.NamedIndexAssign): a
// named `td[i]` proxy is not assignable, and the error says what to write.
#include <tensordict/tensor_dict.h>

void write_row(const tensordict::TensorDict& td,
               const tensordict::TensorDict& row) {
  auto r = td[0];
  r = row;
}
