// The tensor classes shared by the tensor-class tests (tensorclass_test.cpp,
// python_tensorclass_test.cpp): a transition with a nested `next` class, as
// TorchRL lays one out.
#pragma once

#include <tensordict/tensorclass.h>

namespace tensordict_test {

struct Next : tensordict::TensorClass<Next> {
  TENSORDICT_TENSORCLASS(Next)
  TENSORDICT_FIELDS(obs, reward, done)
};

struct Transition : tensordict::TensorClass<Transition> {
  TENSORDICT_TENSORCLASS(Transition)
  TENSORDICT_FIELDS(obs, action)
  TENSORDICT_CLASS_FIELDS(Next, next)
};

}  // namespace tensordict_test
