// Tests of tensordict/specs.h: TorchRL 0.14's tensor specs. Shapes, dtypes
// and devices; draws (in the space, seeded, in place without allocating);
// zero, is_in, project, expand, to and ==; Composite's tree (nested set, get,
// erase, keys) and its TensorDicts; the exact messages of the checks; and
// the reprs, as golden strings printed by TorchRL 0.14 (Python torch 2.14).
// The live comparison with Python is python_specs_test.cpp.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <tensordict/specs.h>
#include <tensordict/tensordict.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "alloc_util.h"
#include "test_util.h"

namespace {

using tensordict::Binary;
using tensordict::Bounded;
using tensordict::Categorical;
using tensordict::Composite;
using tensordict::MultiCategorical;
using tensordict::NestedKey;
using tensordict::OneHot;
using tensordict::SpecPtr;
using tensordict::TensorDict;
using tensordict::TensorSpec;
using tensordict::Unbounded;
using tensordict_test::AllocationCounter;
using tensordict_test::ExpectThrowsMsg;

at::Generator Seeded(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

std::vector<int64_t> Sorted(const at::Tensor& t) {
  const at::Tensor u = std::get<0>(at::_unique(t.reshape(-1).to(at::kLong)));
  const at::Tensor s = std::get<0>(u.sort());
  return std::vector<int64_t>(s.data_ptr<int64_t>(),
                              s.data_ptr<int64_t>() + s.numel());
}

std::vector<std::string> KeyStrs(const std::vector<NestedKey>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.str());
  return out;
}

// Every leaf class, for the tests that go over all of them.
std::vector<SpecPtr> AllLeafSpecs() {
  return {std::make_shared<Unbounded>(std::vector<int64_t>{3}),
          std::make_shared<Unbounded>(std::vector<int64_t>{3}, at::kLong),
          std::make_shared<Bounded>(-1.0, 1.0, std::vector<int64_t>{3}),
          std::make_shared<Bounded>(0, 5, std::vector<int64_t>{3}, at::kInt),
          std::make_shared<Categorical>(4, std::vector<int64_t>{3}),
          std::make_shared<OneHot>(5),
          std::make_shared<Binary>(4),
          std::make_shared<MultiCategorical>(std::vector<int64_t>{2, 3, 4})};
}

}  // namespace

// ---- Shapes, dtypes and devices -------------------------------------------------

TEST(Specs, DefaultsAreTorchRLs) {
  const Unbounded u;
  EXPECT_EQ(u.shape(), c10::IntArrayRef{});
  EXPECT_EQ(u.dtype(), at::kFloat);
  EXPECT_EQ(u.device(), at::Device(at::kCPU));
  EXPECT_EQ(u.domain(), "continuous");
  EXPECT_EQ(Unbounded({2}, at::kLong).domain(), "discrete");
  EXPECT_EQ(Categorical(3).dtype(), at::kLong);
  EXPECT_EQ(OneHot(3).dtype(), at::kBool);
  EXPECT_EQ(OneHot(3).shape(), c10::IntArrayRef{3});
  EXPECT_EQ(Binary(4).dtype(), at::kChar);
  EXPECT_EQ(Binary(4).shape(), c10::IntArrayRef{4});
  EXPECT_EQ(MultiCategorical({2, 3}).shape(), c10::IntArrayRef{2});
  EXPECT_EQ(MultiCategorical({2, 3}).dtype(), at::kLong);
  EXPECT_EQ(Bounded(0, 1, {2}, at::kInt).domain(), "discrete");
}

TEST(Specs, BoundedBroadcastsItsBoundsToTheShape) {
  const Bounded b(at::tensor({-1.0, 0.0, 2.0}), at::tensor(3.0), {2, 3});
  EXPECT_EQ(b.low().sizes(), (c10::IntArrayRef{2, 3}));
  EXPECT_EQ(b.high().sizes(), (c10::IntArrayRef{2, 3}));
  EXPECT_TRUE(b.low().is_contiguous());
  EXPECT_TRUE(at::equal(b.low()[1], at::tensor({-1.0f, 0.0f, 2.0f})));
  // The bounds are copies: the caller's tensor may change.
  at::Tensor low = at::zeros({3});
  const Bounded c(low, at::ones({3}), {3});
  low.fill_(5);
  EXPECT_EQ(c.low()[0].item<float>(), 0.0f);
}

TEST(Specs, CudaWithoutAnIndexIsCudaZero) {
  const Unbounded u({3}, at::kFloat, at::Device("cuda"));
  EXPECT_EQ(u.device(), at::Device("cuda:0"));
  EXPECT_NE(u.repr().find("device=cuda:0,\n"), std::string::npos);
}

// ---- Reprs (TorchRL 0.14's, byte for byte) ---------------------------------------

TEST(Specs, UnboundedReprsMatchTorchRL) {
  EXPECT_EQ(Unbounded().repr(), R"repr(UnboundedContinuous(
    shape=torch.Size([]),
    space=ContinuousBox(
        low=Tensor(shape=torch.Size([]), device=cpu, dtype=torch.float32, contiguous=True),
        high=Tensor(shape=torch.Size([]), device=cpu, dtype=torch.float32, contiguous=True)),
    device=cpu,
    dtype=torch.float32,
    domain=continuous))repr");
  EXPECT_EQ(Unbounded({3}, at::kLong).repr(), R"repr(UnboundedDiscrete(
    shape=torch.Size([3]),
    space=ContinuousBox(
        low=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int64, contiguous=True),
        high=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int64, contiguous=True)),
    device=cpu,
    dtype=torch.int64,
    domain=discrete))repr");
  EXPECT_EQ(Unbounded({2}, at::kBool).repr(), R"repr(UnboundedDiscrete(
    shape=torch.Size([2]),
    space=ContinuousBox(
        low=Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.bool, contiguous=True),
        high=Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.bool, contiguous=True)),
    device=cpu,
    dtype=torch.bool,
    domain=discrete))repr");
}

TEST(Specs, BoundedReprsMatchTorchRL) {
  EXPECT_EQ(Bounded(-1.0, 1.0, {3}).repr(), R"repr(BoundedContinuous(
    shape=torch.Size([3]),
    space=ContinuousBox(
        low=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.float32, contiguous=True),
        high=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.float32, contiguous=True)),
    device=cpu,
    dtype=torch.float32,
    domain=continuous))repr");
  EXPECT_EQ(Bounded(0, 5, {3}, at::kInt).repr(), R"repr(BoundedDiscrete(
    shape=torch.Size([3]),
    space=ContinuousBox(
        low=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int32, contiguous=True),
        high=Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.int32, contiguous=True)),
    device=cpu,
    dtype=torch.int32,
    domain=discrete))repr");
  EXPECT_EQ(Bounded(-1.0, 1.0).type_name(), "BoundedContinuous");
}

TEST(Specs, DiscreteSpecReprsMatchTorchRL) {
  EXPECT_EQ(Categorical(4).repr(), R"repr(Categorical(
    shape=torch.Size([]),
    space=CategoricalBox(n=4),
    device=cpu,
    dtype=torch.int64,
    domain=discrete))repr");
  EXPECT_EQ(Categorical(2, {1}, at::kBool).repr(), R"repr(Categorical(
    shape=torch.Size([1]),
    space=CategoricalBox(n=2),
    device=cpu,
    dtype=torch.bool,
    domain=discrete))repr");
  EXPECT_EQ(OneHot(5).repr(), R"repr(OneHot(
    shape=torch.Size([5]),
    space=CategoricalBox(n=5),
    device=cpu,
    dtype=torch.bool,
    domain=discrete))repr");
  EXPECT_EQ(OneHot(5, {2, 5}, at::kLong).repr(), R"repr(OneHot(
    shape=torch.Size([2, 5]),
    space=CategoricalBox(n=5),
    device=cpu,
    dtype=torch.int64,
    domain=discrete))repr");
  // TorchRL's Binary is a Categorical of n = 2.
  EXPECT_EQ(Binary(4).repr(), R"repr(Binary(
    shape=torch.Size([4]),
    space=CategoricalBox(n=2),
    device=cpu,
    dtype=torch.int8,
    domain=discrete))repr");
  EXPECT_EQ(Binary(3, {2, 3}, at::kBool).repr(), R"repr(Binary(
    shape=torch.Size([2, 3]),
    space=CategoricalBox(n=2),
    device=cpu,
    dtype=torch.bool,
    domain=discrete))repr");
}

TEST(Specs, MultiCategoricalReprsMatchTorchRL) {
  EXPECT_EQ(MultiCategorical({2, 3, 4}).repr(), R"repr(MultiCategorical(
    shape=torch.Size([3]),
    space=BoxList(boxes=[CategoricalBox(n=2), CategoricalBox(n=3), CategoricalBox(n=4)]),
    device=cpu,
    dtype=torch.int64,
    domain=discrete))repr");
  EXPECT_EQ(MultiCategorical({2, 3, 4}, {2, 3}).repr(), R"repr(MultiCategorical(
    shape=torch.Size([2, 3]),
    space=BoxList(boxes=[BoxList(boxes=[CategoricalBox(n=2), CategoricalBox(n=2)]), BoxList(boxes=[CategoricalBox(n=3), CategoricalBox(n=3)]), BoxList(boxes=[CategoricalBox(n=4), CategoricalBox(n=4)])]),
    device=cpu,
    dtype=torch.int64,
    domain=discrete))repr");
}

TEST(Specs, StreamsPrintTheRepr) {
  std::ostringstream os;
  os << Categorical(4);
  EXPECT_EQ(os.str(), Categorical(4).repr());
}

// ---- Draws ---------------------------------------------------------------------

TEST(Specs, RandDrawsInTheSpaceWithTheBatchDimsFirst) {
  at::Generator gen = Seeded(0);
  for (const SpecPtr& spec : AllLeafSpecs()) {
    const at::Tensor t = spec->rand({4, 2}, gen);
    std::vector<int64_t> expected = {4, 2};
    expected.insert(expected.end(), spec->shape().begin(), spec->shape().end());
    EXPECT_EQ(t.sizes(), c10::IntArrayRef(expected)) << spec->repr();
    EXPECT_EQ(t.scalar_type(), spec->dtype()) << spec->repr();
    EXPECT_TRUE(spec->is_in(t)) << spec->repr() << "\n" << t;
    EXPECT_TRUE(spec->is_in(spec->rand())) << spec->repr();
  }
}

TEST(Specs, SeededDrawsAreReproducible) {
  for (const SpecPtr& spec : AllLeafSpecs()) {
    at::Generator a = Seeded(7);
    at::Generator b = Seeded(7);
    at::Generator c = Seeded(8);
    const at::Tensor x = spec->rand({64}, a);
    EXPECT_TRUE(at::equal(x, spec->rand({64}, b))) << spec->repr();
    EXPECT_FALSE(at::equal(x, spec->rand({64}, c))) << spec->repr();
  }
}

TEST(Specs, UnboundedFloatDrawsAreStandardNormal) {
  const at::Tensor t = Unbounded({}, at::kDouble).rand({20000}, Seeded(1));
  EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(t.std().item<double>(), 1.0, 0.05);
  EXPECT_LT(t.min().item<double>(), -2.0);  // not uniform in [0, 1)
}

TEST(Specs, BoundedDrawsCoverTheBoundsElementWise) {
  const at::Tensor f =
      Bounded(-2.0, 3.0, {}, at::kDouble).rand({20000}, Seeded(2));
  EXPECT_GE(f.min().item<double>(), -2.0);
  EXPECT_LE(f.max().item<double>(), 3.0);
  EXPECT_NEAR(f.mean().item<double>(), 0.5, 0.05);
  // Every integer of [low, high], high included.
  EXPECT_EQ(Sorted(Bounded(-1, 4, {}, at::kLong).rand({2000}, Seeded(3))),
            (std::vector<int64_t>{-1, 0, 1, 2, 3, 4}));
  // Per-element bounds, floating and integer.
  const Bounded pf(at::tensor({-1.0, 10.0}), at::tensor({0.0, 10.5}), {2});
  const at::Tensor x = pf.rand({1000}, Seeded(4));
  EXPECT_TRUE(pf.is_in(x));
  EXPECT_GE(x.select(1, 1).min().item<float>(), 10.0f);
  const Bounded pi(at::tensor({0, 100}), at::tensor({1, 102}), {2}, at::kLong);
  const at::Tensor y = pi.rand({1000}, Seeded(5));
  EXPECT_EQ(Sorted(y.select(1, 0)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Sorted(y.select(1, 1)), (std::vector<int64_t>{100, 101, 102}));
}

TEST(Specs, DiscreteDrawsCoverTheirValues) {
  EXPECT_EQ(Sorted(Categorical(3).rand({500}, Seeded(1))),
            (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Sorted(Categorical(2, {}, at::kBool).rand({100}, Seeded(1))),
            (std::vector<int64_t>{0, 1}));
  const at::Tensor oh = OneHot(4, {4}, at::kLong).rand({500}, Seeded(2));
  EXPECT_TRUE(at::equal(oh.sum(-1), at::ones({500}, at::kLong)));
  EXPECT_EQ(Sorted(oh.argmax(-1)), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Sorted(Binary(3).rand({100}, Seeded(3))),
            (std::vector<int64_t>{0, 1}));
  const at::Tensor mc = MultiCategorical({2, 5}).rand({500}, Seeded(4));
  EXPECT_EQ(Sorted(mc.select(-1, 0)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Sorted(mc.select(-1, 1)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Specs, RandIntoOutAllocatesNothing) {
  const std::vector<SpecPtr> specs = {
      std::make_shared<Unbounded>(std::vector<int64_t>{3}),
      std::make_shared<Unbounded>(std::vector<int64_t>{3}, at::kInt),
      std::make_shared<Bounded>(-1.0, 1.0, std::vector<int64_t>{3}),
      std::make_shared<Bounded>(at::tensor({-1.0, 0.0, 1.0}),
                                at::tensor({0.0, 2.0, 5.0}),
                                std::vector<int64_t>{3}),
      std::make_shared<Bounded>(0, 9, std::vector<int64_t>{3}, at::kLong),
      std::make_shared<Categorical>(4, std::vector<int64_t>{3}),
      std::make_shared<Categorical>(2, std::vector<int64_t>{3}, at::kBool),
      std::make_shared<Binary>(3),
      std::make_shared<MultiCategorical>(std::vector<int64_t>{2, 2, 2}),
      std::make_shared<OneHot>(4)};
  at::Generator gen = Seeded(0);
  for (const SpecPtr& spec : specs) {
    const at::Tensor out = spec->zero({16});
    AllocationCounter counter;
    spec->rand_(out, gen);
    EXPECT_EQ(counter.count(), 0) << spec->repr();
    EXPECT_TRUE(spec->is_in(out)) << spec->repr();
  }
  // The counter does see the allocations inside rand_: the index of a
  // OneHot of integers.
  const OneHot one_hot(4, {}, at::kLong);
  const at::Tensor out = one_hot.zero({16});
  AllocationCounter counter;
  one_hot.rand_(out, gen);
  EXPECT_GT(counter.count(), 0);
}

TEST(Specs, RandIntoOutChecksItsDtypeDeviceAndShape) {
  const Categorical c(4, {3});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { c.rand_(at::zeros({3}, at::kInt), c10::nullopt); },
      "Categorical.rand_: expected out of dtype torch.int64, got torch.int32");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.rand_(at::zeros({3, 2}, at::kLong), c10::nullopt);
      },
      "Categorical.rand_: expected out of a shape ending with [3], got [3, 2]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { c.rand_(at::zeros({1}, at::kLong), c10::nullopt); },
      "Categorical.rand_: expected out of a shape ending with [3], got [1]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)c.rand({-1}); },
      "Categorical.rand: batch: the dims of a shape must be >= 0, got [-1]");
}

TEST(Specs, ZeroIsZerosOfTheBatchAndShape) {
  const at::Tensor z = OneHot(3).zero({2});
  EXPECT_EQ(z.sizes(), (c10::IntArrayRef{2, 3}));
  EXPECT_EQ(z.scalar_type(), at::kBool);
  EXPECT_FALSE(z.any().item<bool>());
  // TorchRL: zero need not be in the space.
  EXPECT_FALSE(OneHot(3).is_in(z));
  EXPECT_EQ(Bounded(1, 2, {2}, at::kInt).zero().sizes(), c10::IntArrayRef{2});
}

// ---- is_in and project ------------------------------------------------------------

TEST(Specs, IsInChecksTheDtypeTheShapeAndTheValues) {
  const Unbounded u({3});
  EXPECT_TRUE(u.is_in(at::zeros({5, 3})));
  EXPECT_FALSE(u.is_in(at::zeros({3}, at::kDouble)));
  EXPECT_FALSE(u.is_in(at::zeros({3, 5})));
  EXPECT_FALSE(u.is_in(at::zeros({})));
  EXPECT_FALSE(u.is_in(at::Tensor()));
  // TorchRL's rule is broadcasting: a dim of 1 of the spec takes any size.
  EXPECT_TRUE(Unbounded({1}).is_in(at::zeros({5})));

  const Bounded b(-1.0, 1.0, {2});
  EXPECT_TRUE(b.is_in(at::tensor({-1.0f, 1.0f})));
  EXPECT_FALSE(b.is_in(at::tensor({-1.0f, 1.5f})));

  const Categorical c(3);
  EXPECT_TRUE(c.is_in(at::tensor(2, at::kLong)));
  EXPECT_FALSE(c.is_in(at::tensor(3, at::kLong)));
  EXPECT_FALSE(c.is_in(at::tensor(-1, at::kLong)));
  EXPECT_FALSE(c.is_in(at::tensor(2, at::kInt)));

  const OneHot oh(3, {3}, at::kLong);
  EXPECT_TRUE(oh.is_in(at::tensor({0, 1, 0}, at::kLong)));
  EXPECT_FALSE(oh.is_in(at::tensor({1, 1, 0}, at::kLong)));
  EXPECT_FALSE(oh.is_in(at::tensor({0, 0, 0}, at::kLong)));
  // TorchRL checks that each vector sums to 1, nothing more.
  EXPECT_TRUE(oh.is_in(at::tensor({2, -1, 0}, at::kLong)));

  const Binary bin(2);
  EXPECT_TRUE(bin.is_in(at::tensor({1, 0}, at::kChar)));
  EXPECT_FALSE(bin.is_in(at::tensor({2, 0}, at::kChar)));

  const MultiCategorical mc({3, 2});
  EXPECT_TRUE(mc.is_in(at::tensor({2, 1}, at::kLong)));
  EXPECT_FALSE(mc.is_in(at::tensor({2, 2}, at::kLong)));
  EXPECT_FALSE(mc.is_in(at::tensor({-1, 0}, at::kLong)));
}

TEST(Specs, ProjectMapsIntoTheSpaceInTheSpecsDtype) {
  const Bounded b(-1.0, 1.0, {3});
  EXPECT_TRUE(at::equal(b.project(at::tensor({-3.0f, 0.5f, 2.0f})),
                        at::tensor({-1.0f, 0.5f, 1.0f})));
  // A value in the space is returned as it is.
  const at::Tensor in = at::tensor({0.0f, 0.1f, 0.2f});
  EXPECT_TRUE(b.project(in).is_same(in));
  // TorchRL rounds a Categorical's floats (and leaves them floats; here they
  // take the spec's dtype).
  const at::Tensor c = Categorical(3).project(at::tensor(7.6));
  EXPECT_EQ(c.scalar_type(), at::kLong);
  EXPECT_EQ(c.item<int64_t>(), 2);
  EXPECT_EQ(Categorical(3).project(at::tensor(1.6)).item<int64_t>(), 2);
  EXPECT_TRUE(at::equal(MultiCategorical({3, 4}).project(at::tensor({-2, 9})),
                        at::tensor({0, 3}, at::kLong)));
  EXPECT_TRUE(at::equal(Binary(3).project(at::tensor({-1.0, 0.4, 7.0})),
                        at::tensor({0, 0, 1}, at::kChar)));
  EXPECT_TRUE(at::equal(OneHot(3).project(at::tensor({0.1, 0.7, 0.2})),
                        at::tensor({0, 1, 0}).to(at::kBool)));
  const at::Tensor u = Unbounded({2}).project(at::tensor({1.5, 2.5}));
  EXPECT_EQ(u.scalar_type(), at::kFloat);
  EXPECT_TRUE(Unbounded({2}).is_in(u));
}

TEST(Specs, ProjectRejectsAValueOfAnotherShape) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)Bounded(-1.0, 1.0, {3}).project(at::zeros({2})); },
      "BoundedContinuous.project: expected a value of a shape ending with "
      "[3], got [2]");
}

// ---- expand, to, == -----------------------------------------------------------------

TEST(Specs, ExpandPrependsBatchDimsAndGrowsDimsOfOne) {
  EXPECT_EQ(Unbounded({1, 3}).expand({4, 3})->shape(),
            (c10::IntArrayRef{4, 3}));
  const SpecPtr b =
      Bounded(at::tensor({0.0, 1.0}), at::tensor(2.0), {2}).expand({3, 2});
  const auto& bounded = static_cast<const Bounded&>(*b);
  EXPECT_EQ(bounded.low().sizes(), (c10::IntArrayRef{3, 2}));
  EXPECT_TRUE(at::equal(bounded.low()[2], at::tensor({0.0f, 1.0f})));
  EXPECT_EQ(*Categorical(3, {2}).expand({5, 2}), Categorical(3, {5, 2}));
  EXPECT_EQ(*OneHot(4).expand({2, 4}), OneHot(4, {2, 4}));
  EXPECT_EQ(*MultiCategorical({2, 3}).expand({6, 2}),
            MultiCategorical({2, 3}, {6, 2}));
  // TorchRL: the last dim of a Binary is its n.
  EXPECT_EQ(*Binary(1).expand({2, 5}), Binary(5, {2, 5}));
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)Unbounded({3}).expand({4, 2});
      },
      "UnboundedContinuous.expand: expected a shape ending with [3] (where a "
      "dim of size 1 may take any size), got [4, 2]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)Categorical(3, {2}).expand({-1, 2});
      },
      "Categorical.expand: the dims of a shape must be >= 0, got [-1, 2]");
}

TEST(Specs, ToCpuGivesAnEqualSpec) {
  for (const SpecPtr& spec : AllLeafSpecs()) {
    const SpecPtr moved = spec->to(at::kCPU);
    EXPECT_EQ(*moved, *spec) << spec->repr();
    EXPECT_EQ(moved->repr(), spec->repr());
  }
}

TEST(Specs, EqualityComparesClassShapeDtypeDeviceAndSpace) {
  EXPECT_EQ(Unbounded({3}), Unbounded({3}));
  EXPECT_NE(Unbounded({3}), Unbounded({2}));
  EXPECT_NE(Unbounded({3}), Unbounded({3}, at::kDouble));
  EXPECT_NE(Unbounded({3}), Unbounded({3}, at::kFloat, at::Device("cuda:0")));
  EXPECT_EQ(Bounded(-1.0, 1.0, {2}), Bounded(-1.0, 1.0, {2}));
  EXPECT_NE(Bounded(-1.0, 1.0, {2}), Bounded(-1.0, 2.0, {2}));
  EXPECT_NE(Categorical(3), Categorical(4));
  EXPECT_NE(Categorical(2, {4}), static_cast<const TensorSpec&>(Binary(4)));
  EXPECT_NE(OneHot(3), OneHot(3, {3}, at::kLong));
  EXPECT_NE(MultiCategorical({2, 3}), MultiCategorical({3, 2}));
  EXPECT_NE(Binary(3), Binary(3, {3}, at::kBool));
}

TEST(Specs, ConstructorsRejectBadArgumentsWithTheirValues) {
  ExpectThrowsMsg<c10::ValueError>([] { Categorical c(0); },
                                   "Categorical: n must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>([] { OneHot o(-2); },
                                   "OneHot: n must be positive, got -2");
  ExpectThrowsMsg<c10::ValueError>([] { Binary b(0); },
                                   "Binary: n must be positive, got 0");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        OneHot o(3, {2, 4});
      },
      "OneHot: the last dim of shape must be n = 3, got shape [2, 4]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Binary b(3, {2, 4});
      },
      "Binary: the last dim of shape must be n = 3, got shape [2, 4]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        MultiCategorical m({2, 3}, {2, 3});
      },
      "MultiCategorical: the last dim of shape must be nvec.size() = 2, got "
      "shape [2, 3]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        MultiCategorical m({2, 0});
      },
      "MultiCategorical: every entry of nvec must be positive, got nvec [2, "
      "0]");
  ExpectThrowsMsg<c10::ValueError>([] { MultiCategorical m({}); },
                                   "MultiCategorical: nvec must not be empty");
  ExpectThrowsMsg<c10::ValueError>(
      [] { Bounded b(1.0, 0.0, {3}); },
      "Bounded: low (1.0) is greater than high (0.0)");
  ExpectThrowsMsg<c10::ValueError>([] { Bounded b(3, 2, {}, at::kLong); },
                                   "Bounded: low (3) is greater than high (2)");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Bounded b(at::tensor({0.0, 2.0, 3.0}), at::tensor(1.0), {3});
      },
      "Bounded: low is greater than high at 2 of 3 elements");
  ExpectThrowsMsg<c10::ValueError>(
      [] { Bounded b(at::zeros({2}), at::ones({3}), {3}); },
      "Bounded: low of shape [2] does not broadcast to the spec's shape [3]");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Unbounded u({2, -1});
      },
      "Unbounded: the dims of a shape must be >= 0, got [2, -1]");
}

// ---- Composite ----------------------------------------------------------------------

namespace {

// TorchRL's doc example's layout: a batch of 2.
Composite MakeComposite() {
  return Composite({{"obs", Unbounded({2, 3})},
                    {{"next", "done"}, Categorical(2, {2, 1}, at::kBool)},
                    {"act", Bounded(-1.0, 1.0, {2})}},
                   {2});
}

}  // namespace

TEST(SpecsComposite, ReprsMatchTorchRL) {
  EXPECT_EQ(MakeComposite().repr(), R"repr(Composite(
    obs: UnboundedContinuous(
        shape=torch.Size([2, 3]),
        space=ContinuousBox(
            low=Tensor(shape=torch.Size([2, 3]), device=cpu, dtype=torch.float32, contiguous=True),
            high=Tensor(shape=torch.Size([2, 3]), device=cpu, dtype=torch.float32, contiguous=True)),
        device=cpu,
        dtype=torch.float32,
        domain=continuous),
    next: Composite(
        done: Categorical(
            shape=torch.Size([2, 1]),
            space=CategoricalBox(n=2),
            device=cpu,
            dtype=torch.bool,
            domain=discrete),
        device=None,
        shape=torch.Size([2]),
        data_cls=None),
    act: BoundedContinuous(
        shape=torch.Size([2]),
        space=ContinuousBox(
            low=Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.float32, contiguous=True),
            high=Tensor(shape=torch.Size([2]), device=cpu, dtype=torch.float32, contiguous=True)),
        device=cpu,
        dtype=torch.float32,
        domain=continuous),
    device=None,
    shape=torch.Size([2]),
    data_cls=None))repr");
  EXPECT_EQ(Composite({2}).repr(),
            "Composite(device=None, shape=torch.Size([2]), data_cls=None)");
  EXPECT_EQ(Composite().repr(),
            "Composite(device=None, shape=torch.Size([]), data_cls=None)");
  EXPECT_EQ(Composite({{"a", Categorical(3)}}, {}, at::Device("cpu")).repr(),
            R"repr(Composite(
    a: Categorical(
        shape=torch.Size([]),
        space=CategoricalBox(n=3),
        device=cpu,
        dtype=torch.int64,
        domain=discrete),
    device=cpu,
    shape=torch.Size([]),
    data_cls=None))repr");
  EXPECT_EQ(Composite({{"a", Composite()}}).repr(), R"repr(Composite(
    a: Composite(device=None, shape=torch.Size([]), data_cls=None),
    device=None,
    shape=torch.Size([]),
    data_cls=None))repr");
  std::ostringstream os;
  os << MakeComposite();
  EXPECT_EQ(os.str(), MakeComposite().repr());
}

TEST(SpecsComposite, NestedKeysCreateSubCompositesInInsertionOrder) {
  const Composite c = MakeComposite();
  EXPECT_EQ(c.size(), 3u);
  EXPECT_TRUE(c.contains({"next", "done"}));
  EXPECT_TRUE(c.contains("next"));
  EXPECT_FALSE(c.contains({"obs", "x"}));
  EXPECT_FALSE(c.contains({"next", "x"}));
  EXPECT_TRUE(c.get("next").is_composite());
  EXPECT_EQ(c.get("next").composite().shape(), c10::IntArrayRef{2});
  EXPECT_EQ(c.leaf({"next", "done"}), Categorical(2, {2, 1}, at::kBool));
  EXPECT_EQ(KeyStrs(c.keys()),
            (std::vector<std::string>{"obs", "next", "act"}));
  // TorchRL lists a sub-composite's keys before its own.
  EXPECT_EQ(
      KeyStrs(c.keys(true)),
      (std::vector<std::string>{"obs", "('next', 'done')", "next", "act"}));
  EXPECT_EQ(KeyStrs(c.keys(true, true)),
            (std::vector<std::string>{"obs", "('next', 'done')", "act"}));
  EXPECT_EQ(KeyStrs(c.keys(false, true)),
            (std::vector<std::string>{"obs", "act"}));
}

TEST(SpecsComposite, SetReplacesInPlaceAndEraseRemoves) {
  Composite c = MakeComposite();
  c.set("obs", Unbounded({2, 5}));
  EXPECT_EQ(KeyStrs(c.keys()),
            (std::vector<std::string>{"obs", "next", "act"}));
  EXPECT_EQ(c.leaf("obs").shape(), (c10::IntArrayRef{2, 5}));
  c.set({"next", "reward"}, Unbounded({2, 1}))
      .set({"a", "b", "c"}, Binary(2, {2, 2}));
  EXPECT_EQ(c.get({"a", "b"}).composite().shape(), c10::IntArrayRef{2});
  c.erase({"next", "done"});
  EXPECT_EQ(KeyStrs(c.get("next").composite().keys()),
            (std::vector<std::string>{"reward"}));
  c.erase("a");
  EXPECT_EQ(KeyStrs(c.keys()),
            (std::vector<std::string>{"obs", "next", "act"}));
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        c.erase({"next", "done"});
      },
      "Composite.erase: key ('next', 'done') not found in Composite with keys "
      "[obs, ('next', 'reward'), next, act]");
}

TEST(SpecsComposite, LookupsNameTheMissingKey) {
  const Composite c = MakeComposite();
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)c.get({"next", "x"});
      },
      "Composite: key ('next', 'x') not found in Composite with keys [obs, "
      "('next', 'done'), next, act]");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)c.leaf("next"); },
      "Composite.leaf: key next holds a Composite, not a leaf spec");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)c.get("obs").composite(); },
      "SpecEntry: the entry is a leaf spec (UnboundedContinuous), not a "
      "Composite");
}

TEST(SpecsComposite, SetChecksShapesAndDevicesNamingTheKeyAndChangesNothing) {
  Composite c = MakeComposite();
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.set({"next", "obs"}, Unbounded({3, 4}));
      },
      "Composite.set: key ('next', 'obs'): expected a shape starting with "
      "[2], got [3, 4]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.set({"x", "y"}, Unbounded());
      },
      "Composite.set: key ('x', 'y'): expected a shape starting with [2], got "
      "[]");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.set({"obs", "y"}, Unbounded({2}));
      },
      "Composite.set: key ('obs', 'y'): obs holds a leaf spec, not a "
      "Composite");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.set("sub", Composite({{"z", Unbounded({3})}}, {3}));
      },
      "Composite.set: key sub: expected a shape starting with [2], got [3]");
  EXPECT_EQ(c, MakeComposite());  // no sub-composite "x" was left behind
  EXPECT_FALSE(c.contains("x"));

  Composite on_cpu({2}, at::Device("cpu"));
  ExpectThrowsMsg<c10::ValueError>(
      [&] { on_cpu.set("a", Unbounded({2}, at::kFloat, at::Device("cuda"))); },
      "Composite.set: key a: the spec (UnboundedContinuous) is on cuda:0, "
      "the Composite on cpu");
  // A sub-composite without a device takes its holder's.
  on_cpu.set("sub", Composite({{"b", Categorical(2, {2})}}, {2}));
  EXPECT_EQ(on_cpu.get("sub").composite().device(),
            c10::optional<at::Device>(at::Device("cpu")));
}

TEST(SpecsComposite, ASubCompositeOfAShorterShapeTakesTheHoldersShape) {
  Composite c({2, 3});
  c.set("sub", Composite({{"a", Unbounded({2, 3, 4})}}, {2}));
  c.set("empty", Composite());
  EXPECT_EQ(c.get("sub").composite().shape(), (c10::IntArrayRef{2, 3}));
  EXPECT_EQ(c.get("empty").composite().shape(), (c10::IntArrayRef{2, 3}));
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        c.set("bad", Composite({{"a", Unbounded({2, 4})}}, {2}));
      },
      "Composite.set: key ('bad', 'a'): expected a shape starting with [2, "
      "3], got [2, 4]");
}

TEST(SpecsComposite, CopiesOwnTheirSubComposites) {
  const Composite a = MakeComposite();
  Composite b = a;
  b.set({"next", "extra"}, Unbounded({2}));
  EXPECT_FALSE(a.contains({"next", "extra"}));
  // Leaves are shared: they never change.
  EXPECT_EQ(a.get("obs").leaf_ptr(), b.get("obs").leaf_ptr());
}

TEST(SpecsComposite, RandAndZeroGiveDictsOfTheBatchSize) {
  const Composite c = MakeComposite();
  const TensorDict r = c.rand({4}, Seeded(0));
  EXPECT_EQ(r.batch_size(), (c10::IntArrayRef{4, 2}));
  EXPECT_FALSE(r.device().has_value());
  EXPECT_EQ(r.get_tensordict("next").batch_size(), (c10::IntArrayRef{4, 2}));
  EXPECT_EQ(r.get("obs").sizes(), (c10::IntArrayRef{4, 2, 3}));
  EXPECT_EQ(r.get({"next", "done"}).scalar_type(), at::kBool);
  EXPECT_EQ(
      KeyStrs(r.keys(true)),
      (std::vector<std::string>{"obs", "next", "('next', 'done')", "act"}));
  EXPECT_TRUE(c.is_in(r));
  const TensorDict z = c.zero();
  EXPECT_EQ(z.batch_size(), c10::IntArrayRef{2});
  EXPECT_EQ(z.get("act").abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(c.rand({3}, Seeded(5)).get("obs"),
                        c.rand({3}, Seeded(5)).get("obs")));
  EXPECT_EQ(
      Composite({{"a", Unbounded()}}, {}, at::Device("cpu")).zero().device(),
      c10::optional<at::Device>(at::Device("cpu")));
  EXPECT_EQ(Composite({2}).rand().batch_size(), c10::IntArrayRef{2});
}

TEST(SpecsComposite, RandIntoADictWritesItsLeavesInPlace) {
  const Composite c = MakeComposite();
  const TensorDict out = c.zero({5});
  const void* obs = out.get("obs").data_ptr();
  c.rand_(out, Seeded(1));
  EXPECT_EQ(out.get("obs").data_ptr(), obs);
  EXPECT_TRUE(c.is_in(out));
  EXPECT_NE(out.get("obs").abs().sum().item<float>(), 0.0f);
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        c.rand_(TensorDict({{"obs", at::zeros({2, 3})}}, {2}));
      },
      "Composite.rand_: key next not found in the TensorDict");
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        c.rand_(TensorDict({{"obs", at::zeros({2, 3}, at::kDouble)}}, {2}));
      },
      "Composite.rand_: key obs: expected out of dtype torch.float32, got "
      "torch.float64");
}

TEST(SpecsComposite, IsInChecksEveryLeafAndIgnoresOtherKeys) {
  const Composite c = MakeComposite();
  TensorDict td = c.rand();
  td.set("extra", at::zeros({2}));
  EXPECT_TRUE(c.is_in(td));
  td.set("act", at::full({2}, 3.0f));
  EXPECT_FALSE(c.is_in(td));
  td.erase("act");
  EXPECT_FALSE(c.is_in(td));  // a missing leaf
  // TorchRL skips empty sub-composites.
  EXPECT_TRUE(Composite({{"e", Composite()}}).is_in(TensorDict()));
}

TEST(SpecsComposite, ProjectReturnsANewDictWithItsLeavesProjected) {
  const Composite c = MakeComposite();
  const TensorDict td = c.rand();
  td.set("act", at::tensor({-4.0f, 0.5f}));
  const at::Tensor obs = td.get("obs");
  const TensorDict p = c.project(td);
  EXPECT_TRUE(at::equal(p.get("act"), at::tensor({-1.0f, 0.5f})));
  EXPECT_TRUE(p.get("obs").is_same(obs));
  EXPECT_EQ(td.get("act")[0].item<float>(), -4.0f);  // unchanged
  EXPECT_TRUE(c.is_in(p));
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)c.project(TensorDict({{"obs", obs}}, {2}));
      },
      "Composite.project: key next not found in the TensorDict");
}

TEST(SpecsComposite, ExpandPrependsDimsToEveryEntry) {
  const Composite e = MakeComposite().expand({4, 2});
  EXPECT_EQ(e.shape(), (c10::IntArrayRef{4, 2}));
  EXPECT_EQ(e.leaf("obs").shape(), (c10::IntArrayRef{4, 2, 3}));
  EXPECT_EQ(e.get("next").composite().shape(), (c10::IntArrayRef{4, 2}));
  EXPECT_EQ(e.leaf({"next", "done"}).shape(), (c10::IntArrayRef{4, 2, 1}));
  EXPECT_EQ(e.rand().batch_size(), (c10::IntArrayRef{4, 2}));
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        (void)MakeComposite().expand({4, 3});
      },
      "Composite.expand: expected a shape ending with [2] (where a dim of size "
      "1 may take any size), got [4, 3]");
}

TEST(SpecsComposite, ToSetsTheDeviceOfEveryLevel) {
  const Composite c = MakeComposite().to(at::kCPU);
  EXPECT_EQ(c.device(), c10::optional<at::Device>(at::Device("cpu")));
  EXPECT_EQ(c.get("next").composite().device(),
            c10::optional<at::Device>(at::Device("cpu")));
  EXPECT_NE(c, MakeComposite());  // TorchRL compares the devices
  EXPECT_EQ(c.rand().device(), c10::optional<at::Device>(at::Device("cpu")));
}

TEST(SpecsComposite, EqualityIgnoresTheKeyOrderAsTorchRL) {
  const Composite a({{"x", Unbounded({3})}, {"y", Categorical(2)}});
  const Composite b({{"y", Categorical(2)}, {"x", Unbounded({3})}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Composite({{"x", Unbounded({3})}}));
  EXPECT_NE(a, Composite({{"x", Unbounded({3})}, {"y", Categorical(3)}}));
  EXPECT_NE(Composite({{"x", Composite()}}), Composite({{"x", Unbounded()}}));
  EXPECT_NE(Composite({2}), Composite({3}));
}
