// The LibTorch 1.13 / 2.x guards of src/core/compat.h, one test each. The
// branch a guard takes depends on the LibTorch the suite is built against;
// the tests hold for both.
#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/compat.h"

namespace {

using tensordict::detail::as_int;

// A tensor over `t`'s storage with `t`'s geometry, unknown to autograd: what
// the library's row views are before `as_view` registers them.
at::Tensor raw_alias(const at::Tensor& t) {
  c10::TensorImpl* ti = t.unsafeGetTensorImpl();
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW,
                                                   c10::Storage(ti->storage()),
                                                   ti->key_set(), ti->dtype());
  impl->set_sizes_and_strides(ti->sizes(), ti->strides());
  impl->set_storage_offset(ti->storage_offset());
  return at::Tensor(std::move(impl));
}

TEST(Compat, TorchVersionMatchesTheHeaders) {
  EXPECT_EQ(tensordict::detail::kTorchVersion,
            TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR);
  EXPECT_GE(tensordict::detail::kTorchVersion, 113);
}

TEST(Compat, AsIntReadsTensorIndexIntegersAndSliceBounds) {
  // int64_t in LibTorch 1.13, c10::SymInt in 2.x.
  const at::indexing::TensorIndex i(int64_t{-3});
  EXPECT_EQ(as_int(i.integer()), -3);
  const at::indexing::Slice s(1, 7, 2);
  EXPECT_EQ(as_int(s.start()), 1);
  EXPECT_EQ(as_int(s.stop()), 7);
  EXPECT_EQ(as_int(s.step()), 2);
  // An open slice: 0, INDEX_MAX, 1. INDEX_MAX is the largest int64 in 1.13
  // and 2^62 - 1 in 2.x (the largest SymInt that is not symbolic); the
  // library clamps stops to the dim's size, so either is open.
  const at::indexing::Slice open;
  EXPECT_EQ(as_int(open.start()), 0);
  EXPECT_EQ(as_int(open.stop()), at::indexing::INDEX_MAX);
  EXPECT_GE(as_int(open.stop()), (int64_t{1} << 62) - 1);
  EXPECT_EQ(as_int(open.step()), 1);
  EXPECT_EQ(as_int(c10::SymInt(int64_t{42})), 42);
}

TEST(Compat, AsViewRegistersAViewThatAutogradTracks) {
  const at::Tensor base = at::zeros({2, 3});
  const at::Tensor raw = raw_alias(base);
  EXPECT_FALSE(raw.is_view());
  const at::Tensor view = tensordict::detail::as_view(base, raw);
  EXPECT_TRUE(view.is_view());
  EXPECT_TRUE(view._base().is_same(base));
  EXPECT_EQ(view.data_ptr(), base.data_ptr());
  // An in-place write through the view bumps the base's version and puts
  // the base into the graph, as a write through `select` would.
  const auto version = base._version();
  const at::Tensor x = at::ones({2, 3}).requires_grad_(true);
  view.copy_(x * 2);
  EXPECT_EQ(base._version(), version + 1);
  ASSERT_TRUE(base.requires_grad());
  base.sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), at::full({2, 3}, 2.0f)));
}

TEST(Compat, AsViewUnderNoGradIsANoGradView) {
  const at::Tensor leaf = at::ones({3}).requires_grad_(true);
  const at::Tensor nonleaf = leaf * 1;
  at::Tensor view;
  {
    at::NoGradGuard no_grad;
    view = tensordict::detail::as_view(nonleaf, raw_alias(nonleaf));
  }
  EXPECT_TRUE(view.is_view());
  // LibTorch's rule for views made under no_grad: an in-place write to one
  // that requires grad is an error, as with a view from `select`.
  try {
    view.mul_(2);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_grad mode"), std::string::npos)
        << e.what();
  }
}

TEST(Compat, ForeachCopyCopiesEveryPairWithCasts) {
  std::vector<at::Tensor> dst{at::zeros({3}), at::zeros({2, 2}, at::kDouble)};
  const std::vector<at::Tensor> src{at::arange(3, at::kFloat),
                                    at::ones({2, 2}, at::kInt)};
  const void* p0 = dst[0].data_ptr();
  tensordict::detail::foreach_copy_(dst, src, /*non_blocking=*/false);
  EXPECT_TRUE(at::equal(dst[0], at::arange(3, at::kFloat)));
  EXPECT_TRUE(at::equal(dst[1], at::ones({2, 2}, at::kDouble)));
  EXPECT_EQ(dst[0].data_ptr(), p0);  // in place
  std::cout << "[ info ] foreach_copy_ uses "
            << (TENSORDICT_HAS_FOREACH_COPY ? "at::_foreach_copy_"
                                            : "one copy_ per pair")
            << '\n';
}

TEST(Compat, ForeachCopyRejectsListsOfDifferentLengths) {
  std::vector<at::Tensor> dst{at::zeros({3})};
  const std::vector<at::Tensor> src{at::ones({3}), at::ones({3})};
  try {
    tensordict::detail::foreach_copy_(dst, src, false);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), "foreach_copy_: 1 destinations but 2 sources");
  }
  EXPECT_TRUE(at::equal(dst[0], at::zeros({3})));
}

struct Named {
  bool has_names() const { return true; }
};
struct Unnamed {};

TEST(Compat, HasNamesAsksTheTensorWhereLibTorchHasNamedTensors) {
  // Both branches, on any LibTorch: a type with has_names() is asked, one
  // without (a 2.14 tensor) has none.
  EXPECT_TRUE(tensordict::detail::has_names(Named{}));
  EXPECT_FALSE(tensordict::detail::has_names(Unnamed{}));
  EXPECT_FALSE(tensordict::detail::has_names(at::zeros({2, 3})));
}

struct StoreOptionsWithLibUV {
  bool useLibUV = true;
};
struct StoreOptionsWithoutLibUV {
  int port = 0;
};

TEST(Compat, DisableLibuvClearsTheFlagWhereTheOptionsHaveIt) {
  StoreOptionsWithLibUV with;
  tensordict::detail::disable_libuv(with);
  EXPECT_FALSE(with.useLibUV);
  StoreOptionsWithoutLibUV without;
  tensordict::detail::disable_libuv(without);  // compiles, changes nothing
  EXPECT_EQ(without.port, 0);
}

// Both layouts, on any LibTorch: what Python's init_process_group does in
// torch 1.13 (one group prefix, a barrier every rank waits at) and in 2.x
// (the group's prefix, then the device's; a barrier nobody waits at by
// default). PythonReference's Gloo tests check the one of this LibTorch
// against a live Python peer.
TEST(Compat, PythonWorldIsTheStoreLayoutOfPythonsDefaultGroup) {
  using tensordict::detail::python_world;
  const auto v113 = python_world(113);
  EXPECT_EQ(v113.group_prefixes, (std::vector<std::string>{"0"}));
  EXPECT_EQ(v113.barrier_key, "store_based_barrier_key:1");
  EXPECT_TRUE(v113.wait_at_barrier);
  for (int version : {200, 206, 214}) {
    const auto v2 = python_world(version);
    EXPECT_EQ(v2.group_prefixes, (std::vector<std::string>{"0/", "cpu/"}))
        << version;
    EXPECT_EQ(v2.barrier_key, "store_based_barrier_key:0") << version;
    EXPECT_FALSE(v2.wait_at_barrier) << version;
  }
  EXPECT_EQ(python_world().wait_at_barrier,
            tensordict::detail::kTorchVersion < 200);
}

TEST(Compat, OptionalIsLibTorchsOptional) {
  static_assert(std::is_same<tensordict::detail::Optional<int>,
                             c10::optional<int>>::value,
                "Optional is c10::optional");
  // Where LibTorch made c10::optional an alias, it is std::optional.
  constexpr bool alias =
      std::is_same<c10::optional<int>, std::optional<int>>::value;
  if (tensordict::detail::kTorchVersion < 200) {
    EXPECT_FALSE(alias);
  }
  tensordict::detail::Optional<int> v = c10::nullopt;
  EXPECT_FALSE(v.has_value());
  v = 3;
  EXPECT_EQ(v.value_or(0), 3);
}

TEST(Compat, Cxx20IsRequiredFromLibTorch213) {
  EXPECT_EQ(tensordict::detail::kCxx20Required,
            tensordict::detail::kTorchVersion >= 213);
  // compat.h's static_assert holds in this build.
  EXPECT_TRUE(!tensordict::detail::kCxx20Required || __cplusplus >= 202002L);
}

}  // namespace
