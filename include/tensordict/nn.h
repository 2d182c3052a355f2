// tensordict/nn.h — modules that read and write TensorDicts: Python
// tensordict.nn's `TensorDictModule` and `TensorDictSequential`.
//
// A `TensorDictModule` wraps a computation on tensors with the keys it reads
// (`in_keys`) and the keys it writes (`out_keys`). Calling it on a dict reads
// the in-keys' tensors, passes them to the computation in that order, and
// sets the results under the out-keys (in order), in the dict itself, which
// it returns. As in Python, the results replace what the out-keys held
// (`set`, not an in-place copy), nested out-keys create their sub-dicts, and
// the dict's batch size and device apply: a result whose leading dims are not
// the batch size is an error naming its key, and a dict with a device moves
// the results there. All-or-nothing: every result is checked before any is
// set. A missing in-key is an error naming it, before the computation runs.
//
// The computation is one of:
//   - a `torch::nn` module: a `ModuleHolder` such as `torch::nn::Linear`, or
//     a `std::shared_ptr` to a module, whose one (non-template, not
//     overloaded) `forward` takes tensors and returns a tensor or a
//     `std::tuple` of tensors. Its arity must match `in_keys`. A module
//     whose `forward` is a template (`torch::nn::Sequential`) is called
//     with one tensor and returns one;
//   - a `std::function` from the in-keys' tensors to the out-keys' tensors;
//   - a TorchScript module (`torch::jit::Module`), whose `forward` takes the
//     tensors and returns a tensor or a tuple of tensors.
//
// `TensorDictSequential` runs modules one after the other on the same dict.
// Its in-keys are those its modules read that no earlier module writes, and
// its out-keys every key they write (first occurrence order), as in Python.
// A failure in any module leaves the dict unchanged (the modules run on a
// shallow copy, whose new entries are set into the dict at the end).
//
// `select_out_keys(keys)` keeps only `keys` among the out-keys: the other
// results (a sequence's intermediate results) are not written into the
// dict, while the modules after the one that computed them still read them.
// (Python 0.4's `select_out_keys` also drops every key of the dict that is
// not an in-key or a selected out-key; here the dict's other keys stay.)
//
// Cost: one `get` per in-key and one `set` per out-key (one `update` when
// there are several), on top of the computation.
//
// Module parameters as dicts (Python's `TensorDict.from_module(module)` and
// `td.to_module(module)`): `from_module` gives a dict of a `torch::nn`
// module's parameters and buffers, nested by submodule name, whose leaves
// are the module's own tensors; `to_module` copies a dict's leaves back into
// a module's tensors, checking every key and shape first. With `lerp_`
// (tensor_dict.h) a soft target update is one call:
// ```
//   TensorDict online = from_module(*qnet), target = from_module(*target_net);
//   torch::NoGradGuard no_grad;
//   target.lerp_(online, tau);   // every parameter: target += tau * (online - target)
// ```
//
// Example:
// ```
//   TensorDictModule actor(torch::nn::Linear(4, 2), {"observation"}, {"logits"});
//   TensorDictModule sample(
//       [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
//         return {in[0].argmax(-1)};
//       },
//       {"logits"}, {"action"});
//   TensorDictSequential policy({actor, sample});
//   policy(td);   // td gains "logits" and "action"
// ```
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensordict/nested_key.h"
#include "tensordict/tensor_dict.h"

namespace torch {
namespace jit {
struct Module;
}  // namespace jit
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace tensordict {

namespace detail {

// The signature of a module's `forward` (a member function pointer).
template <typename F>
struct ForwardTraits;
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...)> {
  static constexpr size_t arity = sizeof...(A);
};
template <typename C, typename R, typename... A>
struct ForwardTraits<R (C::*)(A...) const> : ForwardTraits<R (C::*)(A...)> {};

// The module that `M` (a ModuleHolder or a std::shared_ptr) holds.
template <typename M>
using ModuleImpl = std::decay_t<decltype(*std::declval<M&>())>;

// `M`'s module has one non-template `forward`: its arity is known.
template <typename M, typename = void>
struct ForwardArity {
  static constexpr bool known = false;
  static constexpr size_t value = 1;
};
template <typename M>
struct ForwardArity<M, std::void_t<decltype(&ModuleImpl<M>::forward)>> {
  static constexpr bool known = true;
  static constexpr size_t value =
      ForwardTraits<decltype(&ModuleImpl<M>::forward)>::arity;
};

// `M`'s module can be called on one tensor (torch::nn::Sequential, whose
// forward is a template).
template <typename M, typename = void>
struct HasUnaryForward : std::false_type {};
template <typename M>
struct HasUnaryForward<
    M, std::void_t<decltype((*std::declval<M&>())
                                .forward(std::declval<const at::Tensor&>()))>>
    : std::true_type {};

// `M` holds a torch::nn module this header can call.
template <typename M, typename = void>
struct IsNnModule : std::false_type {};
template <typename M>
struct IsNnModule<M, std::void_t<ModuleImpl<M>>>
    : std::integral_constant<bool, ForwardArity<M>::known ||
                                       HasUnaryForward<M>::value> {
  static constexpr size_t arity = ForwardArity<M>::value;
};

inline void append_outputs(at::Tensor t, std::vector<at::Tensor>& out) {
  out.push_back(std::move(t));
}
template <typename... T>
void append_outputs(std::tuple<T...> t, std::vector<at::Tensor>& out) {
  std::apply([&](auto&... x) { (out.push_back(std::move(x)), ...); }, t);
}

// The tensors of a wrapped module (`TensorDictModule::parameters` and
// `from_module`); nn/parameters.cpp and jit/ivalue.cpp make them.
struct ModuleTensors {
  // The parameters and buffers in `from_module`'s layout.
  std::function<TensorDict(bool filter_empty)> dict;
  // The parameters, with LibTorch's dotted names.
  std::function<std::vector<std::pair<std::string, at::Tensor>>()> parameters;
};
[[nodiscard]] ModuleTensors nn_module_tensors(
    const std::shared_ptr<torch::nn::Module>& module);

// The std::shared_ptr to the module that `m` (a ModuleHolder or a
// std::shared_ptr) holds.
template <typename M>
auto module_shared_ptr(const M& m) {
  if constexpr (std::is_same_v<M, std::shared_ptr<ModuleImpl<M>>>) {
    return m;
  } else {
    return m.ptr();
  }
}

template <typename M, size_t... I>
std::vector<at::Tensor> call_forward(M& m, const std::vector<at::Tensor>& in,
                                     std::index_sequence<I...>) {
  std::vector<at::Tensor> out;
  append_outputs((*m).forward(in[I]...), out);
  return out;
}

}  // namespace detail

/// A computation on tensors, with the keys it reads and writes (see the top
/// of this file).
class TensorDictModule {
 public:
  /// The computation's form once wrapped: the in-keys' tensors in, one
  /// tensor per out-key back.
  using Function =
      std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

  /// `fn` (a `Function`, or anything it is made from: a lambda, a function)
  /// reads the tensors of `in_keys` and returns one per `out_key`.
  template <
      typename F,
      std::enable_if_t<
          std::conjunction_v<std::negation<detail::IsNnModule<std::decay_t<F>>>,
                             std::is_constructible<Function, F>>,
          int> = 0>
  TensorDictModule(F fn, std::vector<NestedKey> in_keys,
                   std::vector<NestedKey> out_keys)
      : TensorDictModule(Function(std::move(fn)), std::move(in_keys),
                         std::move(out_keys), Wrapped()) {}

  /// A `torch::nn` module (`torch::nn::Linear(4, 2)`, or a
  /// `std::shared_ptr<MyModuleImpl>`): its `forward` takes one tensor per
  /// in-key and returns a tensor or a `std::tuple` of them, one per out-key.
  template <
      typename M,
      std::enable_if_t<detail::IsNnModule<std::decay_t<M>>::value, int> = 0>
  TensorDictModule(M module, std::vector<NestedKey> in_keys,
                   std::vector<NestedKey> out_keys)
      : TensorDictModule(wrap(module), std::move(in_keys), std::move(out_keys),
                         Wrapped{detail::IsNnModule<std::decay_t<M>>::arity}) {
    tensors_ = detail::nn_module_tensors(
        std::shared_ptr<torch::nn::Module>(detail::module_shared_ptr(module)));
  }

  /// A TorchScript module (loaded with `torch::jit::load`; a shallow handle
  /// is kept): `forward(tensors...)` returns a tensor or a tuple of them.
  TensorDictModule(const torch::jit::Module& module,
                   std::vector<NestedKey> in_keys,
                   std::vector<NestedKey> out_keys);

  /// Reads the in-keys, runs the computation, sets the results under the
  /// out-keys; returns `td`. Throws, leaving `td` unchanged, when an in-key
  /// is missing, the computation throws or returns the wrong number of
  /// tensors, or a result does not fit the dict.
  const TensorDict& operator()(const TensorDict& td) const;

  /// The keys the computation reads, in the order of its arguments.
  [[nodiscard]] const std::vector<NestedKey>& in_keys() const {
    return in_keys_;
  }
  /// The out-keys the call leaves in the dict (all of them, unless
  /// `select_out_keys` chose some).
  [[nodiscard]] const std::vector<NestedKey>& out_keys() const {
    return out_keys_;
  }
  /// Every key the computation writes, selected or not.
  [[nodiscard]] const std::vector<NestedKey>& out_keys_source() const {
    return out_keys_source_;
  }
  /// Keeps only `keys` (a subset of `out_keys_source()`) in the dict after a
  /// call; returns `*this`.
  TensorDictModule& select_out_keys(std::vector<NestedKey> keys);

  /// The parameters of the wrapped `torch::nn` or TorchScript module (of a
  /// sequence's modules, in order; none for a function), as LibTorch's
  /// `Module::parameters()`: the modules' own tensors, for an optimizer.
  [[nodiscard]] std::vector<at::Tensor> parameters() const;
  /// The parameters with Python's names: "module.weight" for a module,
  /// "module.0.module.weight" for a sequence's first (Python's
  /// `named_parameters()` of the same modules).
  [[nodiscard]] std::vector<std::pair<std::string, at::Tensor>>
  named_parameters() const;

 protected:
  /// A sequence of `modules` (TensorDictSequential).
  explicit TensorDictModule(std::vector<TensorDictModule> modules);
  /// A sequence's modules (empty for a single computation).
  [[nodiscard]] const std::vector<TensorDictModule>& children() const {
    return children_;
  }

 private:
  friend TensorDict from_module(const TensorDictModule& module,
                                bool filter_empty);
  // The computation, wrapped (every public constructor ends here), and the
  // number of tensors it takes when that is known (a torch::nn module's).
  // (Hidden from the API reference, which would list it as a class.)
  /// @cond
  struct Wrapped {
    size_t arity = static_cast<size_t>(-1);
  };
  /// @endcond
  TensorDictModule(Function fn, std::vector<NestedKey> in_keys,
                   std::vector<NestedKey> out_keys, Wrapped);

  template <typename M>
  static Function wrap(M module) {
    constexpr size_t arity = detail::IsNnModule<std::decay_t<M>>::arity;
    return [m = std::move(module)](const std::vector<at::Tensor>& in) mutable {
      return detail::call_forward(m, in, std::make_index_sequence<arity>());
    };
  }
  // Runs on `td` with the results so far in `outs` (read first, written
  // into); `td` itself does not change.
  void run_into(const TensorDict& td, const TensorDict& outs) const;
  // The results of the computation on the in-keys (read from `outs`, else
  // `td`), checked in number.
  [[nodiscard]] std::vector<at::Tensor> compute(const TensorDict& td,
                                                const TensorDict* outs) const;

  Function fn_;                             // empty for a sequence
  detail::ModuleTensors tensors_;           // empty for a function
  std::vector<TensorDictModule> children_;  // a sequence's modules
  std::vector<NestedKey> in_keys_;
  std::vector<NestedKey> out_keys_source_;
  std::vector<NestedKey> out_keys_;
};

/// Modules run one after the other on the same dict (see the top of this
/// file). It is a `TensorDictModule`, so sequences nest.
class TensorDictSequential : public TensorDictModule {
 public:
  /// Runs `modules` in order on each call.
  explicit TensorDictSequential(std::vector<TensorDictModule> modules);

  /// The number of modules.
  [[nodiscard]] size_t size() const { return children().size(); }
  /// The `i`-th module; throws an IndexError for `i >= size()`.
  [[nodiscard]] const TensorDictModule& operator[](size_t i) const;
  /// As `TensorDictModule::select_out_keys`: the intermediate keys are
  /// removed after a call.
  TensorDictSequential& select_out_keys(std::vector<NestedKey> keys);
};

// ---- Module parameters as dicts --------------------------------------------

/// Python's `TensorDict.from_module(module)` (tensordict 0.14): a dict with
/// batch size [] holding `module`'s parameters, then its buffers, then one
/// sub-dict per submodule (by its name: "0", "1", ... in a
/// `torch::nn::Sequential`), recursively, in registration order. The leaves
/// are the module's tensors themselves (not copies): an in-place write into
/// the dict is a write into the module. Undefined parameters (a `Linear`
/// without bias) are left out. A submodule with no tensors, directly or
/// below (a `ReLU`), is left out too, as Python 0.14's default
/// (`filter_empty=True`); with `filter_empty = false` it is an empty
/// sub-dict, as in Python 0.4.
[[nodiscard]] TensorDict from_module(const torch::nn::Module& module,
                                     bool filter_empty = true);

/// Python's `TensorDict.from_module(policy)` of a `TensorDictModule`:
/// `{"module": <the wrapped module's dict>}`, and for a sequence
/// `{"module": {"0": <the first module's dict>, ...}}`, the modules' own
/// tensors (a function has none, and is left out with `filter_empty`).
/// `from_module(policy).update_(params)` writes a learner's `params` into
/// the policy.
[[nodiscard]] TensorDict from_module(const TensorDictModule& module,
                                     bool filter_empty = true);

/// Python's `params.to_module(module, inplace=True)`: copies every leaf of
/// `params` into the parameter or buffer of `module` at the same key (a
/// sub-dict's keys into the submodule of its name), in place, without
/// recording autograd history. `params` may hold a subset of the module's
/// tensors. All-or-nothing: every key must name a defined parameter or
/// buffer (a sub-dict a submodule) and every value must have its shape, a
/// dtype that casts to its dtype, and a device it can be copied from, or the
/// call throws, naming the key, before anything is written. (Python's
/// default `inplace=False` swaps the module's tensors for the dict's; a C++
/// module holds its tensors in members such as `LinearImpl::weight` as well,
/// so here they are always written in place.)
void to_module(const TensorDict& params, torch::nn::Module& module);

}  // namespace tensordict
