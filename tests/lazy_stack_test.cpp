// Lazy stacks (tensordict/lazy_stack.h): shapes, keys, reads, indexing,
// all-or-nothing writes, dense forms, joins, the repr and memmap
// directories. The comparisons with Python are in python_lazy_stack_test.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/lazy_replay_buffer.h>
#include <tensordict/lazy_stack.h>
#include <tensordict/tensordict.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using at::indexing::Ellipsis;
using at::indexing::Slice;
using tensordict::LazyStackedTensorDict;
using tensordict::NestedKey;
using tensordict::TensorDict;
using Stacks = std::vector<LazyStackedTensorDict>;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::ExpectUnchanged;
using tensordict_test::TakeSnapshot;
using tensordict_test::TempDir;

at::Tensor Arange(std::vector<int64_t> shape, double start = 0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return (at::arange(n, at::kFloat) + start).reshape(shape);
}

TensorDict Empty(std::vector<int64_t> batch) {
  return TensorDict(c10::IntArrayRef(batch));
}

// Two agents with observations of sizes 2 and 4, a shared reward, a nested
// dict, and a key of agent 1's own.
struct Agents {
  TensorDict a{{{"obs", Arange({3, 2})}, {"reward", at::ones({3})}}, {3}};
  TensorDict b{{{"obs", Arange({3, 4}, 100)},
                {"reward", at::full({3}, 2.0)},
                {"extra", at::zeros({3})}},
               {3}};
  Agents() {
    a.set({"next", "x"}, Arange({3, 1}));
    b.set({"next", "x"}, Arange({3, 1}, 10));
  }
  [[nodiscard]] LazyStackedTensorDict stack(int64_t dim = 0) const {
    return tensordict::lazy_stack({a, b}, dim);
  }
};

TEST(LazyStack, TheBatchSizeInsertsTheNumberOfDictsAtTheStackDim) {
  Agents g;
  EXPECT_EQ(g.stack().batch_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.stack(1).batch_size(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(g.stack(-1).stack_dim(), 1);
  EXPECT_EQ(g.stack().batch_dims(), 2);
  EXPECT_TRUE(g.stack().tensordicts()[1].is_same(g.b));
  // Batch sizes that differ are -1, as in Python 0.14.
  auto s = tensordict::lazy_stack({Empty({3}), Empty({5})});
  EXPECT_EQ(s.batch_size(), (std::vector<int64_t>{2, -1}));
}

TEST(LazyStack, BadStacksThrow) {
  ExpectThrowsMsg<c10::ValueError>(
      [] { (void)tensordict::lazy_stack({}); },
      "lazy_stack: the list of tensordicts is empty");
  ExpectThrowsMsg(
      [] {
        (void)tensordict::lazy_stack({Empty({3}), Empty({3, 1})});
      },
      "lazy_stack: the tensordicts must have the same number of batch dims: "
      "tensordicts[0] has batch_size [3] and tensordicts[1] has [3, 1]");
  ExpectThrowsMsg<c10::IndexError>(
      [] {
        (void)tensordict::lazy_stack({Empty({3}), Empty({3})}, 2);
      },
      "lazy_stack: dim 2 is out of range for TensorDicts with batch_size [3] "
      "(expected a dim in [-2, 1])");
}

TEST(LazyStack, KeysAreThoseEveryDictHolds) {
  Agents g;
  const auto s = g.stack();
  EXPECT_EQ(s.keys(), tensordict_test::Keys({"obs", "reward", "next"}));
  EXPECT_EQ(s.keys(true, true),
            tensordict_test::Keys({"obs", "reward", {"next", "x"}}));
  EXPECT_TRUE(s.contains({"next", "x"}));
  EXPECT_FALSE(s.contains("extra"));
  // The same key as a tensor in one dict and a sub-dict in the other.
  g.b.erase("reward");
  g.b.set("reward", Empty({3}));
  EXPECT_FALSE(g.stack().contains("reward"));
}

TEST(LazyStack, GetStacksLeavesWhoseShapesAgree) {
  Agents g;
  const auto s = g.stack();
  EXPECT_TRUE(at::equal(s.get("reward"),
                        at::stack({g.a.get("reward"), g.b.get("reward")})));
  EXPECT_TRUE(at::equal(
      g.stack(1).get({"next", "x"}),
      at::stack({g.a.get({"next", "x"}), g.b.get({"next", "x"})}, 1)));
  const auto list = s.get_list("obs");
  ASSERT_EQ(list.size(), 2U);
  EXPECT_TRUE(list[1].is_same(g.b.get("obs")));
  const at::Tensor padded = s.get_padded("obs", -1);
  EXPECT_EQ(padded.sizes(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(at::equal(padded[0].slice(1, 0, 2), g.a.get("obs")));
  EXPECT_TRUE(at::equal(padded[0].slice(1, 2), at::full({3, 2}, -1.0)));
  EXPECT_TRUE(at::equal(padded[1], g.b.get("obs")));
  // Python's get_item_shape: -1 where the sizes differ, [-1] where the
  // numbers of dims do.
  EXPECT_EQ(s.get_item_shape("obs"), (std::vector<int64_t>{2, 3, -1}));
  EXPECT_EQ(g.stack(1).get_item_shape("reward"), (std::vector<int64_t>{3, 2}));
  g.b.set("obs", at::zeros({3, 4, 1}));
  EXPECT_EQ(g.stack().get_item_shape("obs"), (std::vector<int64_t>{-1}));
  auto next = s.get_tensordict("next");
  EXPECT_EQ(next.batch_size(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(next.tensordicts()[0].is_same(g.a.get_tensordict("next")));
}

TEST(LazyStack, GetPaddedGivesPadAndStacksValuesOnEveryPath) {
  // What get_padded promises, computed the long way.
  auto expected = [](const std::vector<at::Tensor>& ts, double value,
                     int64_t dim) {
    std::vector<int64_t> shape = ts[0].sizes().vec();
    for (const auto& t : ts) {
      for (size_t d = 0; d < shape.size(); ++d) {
        shape[d] = std::max(shape[d], t.size(static_cast<int64_t>(d)));
      }
    }
    std::vector<at::Tensor> padded;
    for (const auto& t : ts) {
      std::vector<int64_t> pad;
      for (int64_t d = t.dim() - 1; d >= 0; --d) {
        pad.push_back(0);
        pad.push_back(shape[static_cast<size_t>(d)] - t.size(d));
      }
      padded.push_back(at::constant_pad_nd(t, pad, value));
    }
    return at::stack(padded, dim);
  };
  auto check = [&](const std::vector<at::Tensor>& ts, double value,
                   int64_t dim) {
    std::vector<TensorDict> tds;
    for (const auto& t : ts) {
      // Stacked along dim 1, the dicts have the leaves' first dim as theirs.
      tds.push_back(dim == 0 ? TensorDict({{"x", t}}, {})
                             : TensorDict({{"x", t}}, {t.size(0)}));
    }
    const at::Tensor got =
        tensordict::lazy_stack(tds, dim).get_padded("x", value);
    const at::Tensor want = expected(ts, value, dim);
    EXPECT_EQ(got.scalar_type(), want.scalar_type());
    EXPECT_TRUE(got.sizes() == want.sizes() && at::equal(got, want));
    EXPECT_EQ(got.requires_grad(), want.requires_grad());
  };
  // Byte copies: 1-D, 3-D, empty and scalar leaves, integers.
  check({Arange({5}), Arange({2}), Arange({0})}, -1, 0);
  check({Arange({2, 3, 4}), Arange({1, 3, 2}, 50)}, 7.5, 0);
  check({at::arange(4), at::arange(6)}, 3, 0);
  check({at::ones({}, at::kBool), at::zeros({}, at::kBool)}, 0, 0);
  check({at::ones({3}, at::kBool), at::ones({1}, at::kBool)}, 0, 0);
  // The general path: a non-integral value for integers, a strided leaf,
  // another stack dim, a leaf that requires grad.
  check({at::arange(4), at::arange(6)}, 0.5, 0);
  check({Arange({4, 2}).t(), Arange({2, 3})}, 0, 0);
  check({Arange({2, 3}), Arange({2, 1})}, 0, 1);
  check({Arange({3}).requires_grad_(), Arange({1})}, 0, 0);
}

TEST(LazyStack, GetNamesTheKeyAndTheShapes) {
  Agents g;
  const auto s = g.stack();
  ExpectThrowsMsg(
      [&] { (void)s.get("obs"); },
      "get: key obs has shape [3, 2] in tensordicts()[0] and [3, 4] in "
      "tensordicts()[1], so it cannot be stacked: read it with get_list or "
      "get_padded");
  ExpectThrowsMsg([&] { (void)s.get("extra"); },
                  "get: key extra is missing from tensordicts()[0] (a key "
                  "of a lazy stack is in every tensordict; read the others "
                  "from their tensordict)");
  ExpectThrowsMsg([&] { (void)s.get("nope"); },
                  "get: key nope is not in the lazy stack (the keys of "
                  "every tensordict: [obs, reward, next, ('next', 'x')])");
  ExpectThrowsMsg([&] { (void)s.get("next"); },
                  "get: key next holds a sub-dict in tensordicts()[0], not "
                  "a tensor");
  ExpectThrowsMsg([&] { (void)s.get_tensordict("obs"); },
                  "get_tensordict: key obs holds a tensor in "
                  "tensordicts()[0], not a sub-dict");
  g.b.set("reward", at::zeros({3}, at::kLong));
  ExpectThrowsMsg([&] { (void)g.stack().get_padded("reward"); },
                  "get_padded: key reward has dtype torch.float32 in "
                  "tensordicts()[0] and torch.int64 in tensordicts()[1]");
  g.b.set("obs", at::zeros({3, 4, 1}));
  ExpectThrowsMsg([&] { (void)g.stack().get_padded("obs"); },
                  "get_padded: key obs has shape [3, 2] in "
                  "tensordicts()[0] and [3, 4, 1] in tensordicts()[1]: a "
                  "padded tensor needs the same number of dims");
}

TEST(LazyStack, AnIntegerAtTheStackDimSelectsTheDictItself) {
  Agents g;
  const auto s = g.stack();
  TensorDict first = s[0];
  EXPECT_TRUE(first.is_same(g.a));
  TensorDict last = s[-1];
  EXPECT_TRUE(last.is_same(g.b));
  // Along a stack dim other than 0, an integer at dim 0 indexes each dict.
  LazyStackedTensorDict rows = g.stack(1)[2];
  EXPECT_EQ(rows.batch_size(), (std::vector<int64_t>{2}));
  EXPECT_EQ(rows.stack_dim(), 0);
  EXPECT_TRUE(at::equal(rows.get("reward"), at::tensor({1.0F, 2.0F})));
}

TEST(LazyStack, SlicesIndexTensorsAndMasksSelectDicts) {
  Agents g;
  const auto s = g.stack();
  LazyStackedTensorDict one = s[Slice(1, 2)];
  ASSERT_EQ(one.tensordicts().size(), 1U);
  EXPECT_TRUE(one.tensordicts()[0].is_same(g.b));
  LazyStackedTensorDict picked = s[at::tensor({1, 0, 1})];
  EXPECT_EQ(picked.batch_size(), (std::vector<int64_t>{3, 3}));
  EXPECT_TRUE(picked.tensordicts()[2].is_same(g.b));
  LazyStackedTensorDict masked = s[at::tensor({0, 1}).to(at::kBool)];
  EXPECT_TRUE(masked.tensordicts()[0].is_same(g.b));
  // The other dims index every dict.
  const auto cols = s.index({Slice(), Slice(1)});
  EXPECT_EQ(cols.batch_size(), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(at::equal(cols.get_list("obs")[1], g.b.get("obs").slice(0, 1)));
  const auto col = s.index({Ellipsis, 1});
  EXPECT_EQ(col.batch_size(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(at::equal(col.get("reward"), at::tensor({1.0F, 2.0F})));
  const auto none = s.index({at::indexing::None});
  EXPECT_EQ(none.batch_size(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(none.stack_dim(), 1);
}

TEST(LazyStack, BadIndicesThrow) {
  Agents g;
  const auto s = g.stack();
  ExpectThrowsMsg<c10::IndexError>(
      [&] { (void)s.index({0}); },
      "index: an integer at the stack dim (dim 0) selects one tensordict, "
      "which is a TensorDict: read it with s[i] (stack dim 0) or "
      "tensordicts()[i].index(...)");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { TensorDict x = s[Slice()]; },
      "the index keeps the stack dim (dim 0) of the lazy stack, so it "
      "selects a lazy stack, not one tensordict: read it as a "
      "LazyStackedTensorDict");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { TensorDict x = s[2]; },
      "index 2 is out of bounds for the stack dim (dim 0) with size 2");
  ExpectThrowsMsg<c10::IndexError>(
      [&] { LazyStackedTensorDict x = s[Slice(2)]; },
      "index: the index selects none of the lazy stack's 2 tensordicts, and "
      "a lazy stack holds one at least");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)s.index({Slice(), Slice(), 0});
      },
      "too many indices for a lazy stack with batch_size [2, 3]: 3 batch "
      "dims were indexed");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)s.index({at::tensor({0}), at::tensor({0})});
      },
      "an index of a lazy stack with batch_size [2, 3] holds one index "
      "tensor or mask at most, got 2");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)s.index({at::ones({2, 3}, at::kBool)});
      },
      "a mask over several dims of a lazy stack with batch_size [2, 3] that "
      "include its stack dim (dim 0) is not supported");
  ExpectThrowsMsg<c10::IndexError>(
      [&] {
        (void)s.index({at::zeros({1, 1}, at::kLong)});
      },
      "an index tensor at the stack dim (dim 0) of a lazy stack with "
      "batch_size [2, 3] must have one dim, got shape [1, 1]");
}

TEST(LazyStack, WritesGoIntoTheDictsInPlace) {
  Agents g;
  const auto s = g.stack();
  const at::Tensor obs = g.a.get("obs");
  s[0] =
      TensorDict({{"obs", at::full({3, 2}, 7.0)}, {"q", at::ones({3})}}, {3});
  EXPECT_TRUE(g.a.get("obs").is_same(obs));
  EXPECT_TRUE(at::equal(obs, at::full({3, 2}, 7.0)));
  // A key the dict lacks is allocated, as TensorDict::index_put_ does.
  EXPECT_TRUE(at::equal(g.a.get("q"), at::ones({3})));
  // Row 1 of agent 1.
  s.index_put_({1, 1}, TensorDict({{"reward", at::scalar_tensor(9.0)}}, {}));
  EXPECT_TRUE(at::equal(g.b.get("reward"), at::tensor({2.0F, 9.0F, 2.0F})));
  // A value covering the stack dim is split along it...
  s[Slice()] = TensorDict({{"reward", Arange({2, 3})}}, {2, 3});
  EXPECT_TRUE(at::equal(g.a.get("reward"), Arange({3})));
  EXPECT_TRUE(at::equal(g.b.get("reward"), Arange({3}, 3)));
  // ... and one that does not is written into every dict.
  s.index_put_({Slice(), 0},
               TensorDict({{"reward", at::scalar_tensor(-1.0)}}, {}));
  EXPECT_EQ(g.a.get("reward")[0].item<float>(), -1.0F);
  EXPECT_EQ(g.b.get("reward")[0].item<float>(), -1.0F);
  // Dicts without batch dims take whole-dict writes.
  TensorDict x({{"v", at::zeros({2})}}, {});
  TensorDict y({{"v", at::zeros({5})}}, {});
  auto xy = tensordict::lazy_stack({x, y});
  xy[1] = TensorDict({{"v", at::ones({5})}}, {});
  EXPECT_TRUE(at::equal(y.get("v"), at::ones({5})));
}

TEST(LazyStack, AFailedWriteChangesNoDict) {
  Agents g;
  const auto s = g.stack();
  const auto before_a = TakeSnapshot(g.a);
  const auto before_b = TakeSnapshot(g.b);
  // Agent 0 would take this row; agent 1's obs has 4 columns, so it fails.
  ExpectThrowsMsg(
      [&] {
        s.index_put_(
            {Slice(), 0},
            TensorDict({{"obs", at::ones({2})}, {"new", at::ones({})}}, {}));
      },
      "key obs: the value's trailing shape [2] (value shape [2]) does not "
      "match the existing buffer's trailing shape [4] (buffer shape [3, 4])");
  ExpectUnchanged(g.a, before_a);
  ExpectUnchanged(g.b, before_b);
  ExpectThrowsMsg(
      [&] {
        s[Slice()] = TensorDict({{"reward", at::ones({3, 3})}}, {3, 3});
      },
      "index_put_: the value's batch_size [3, 3] has 3 elements at dim 0, "
      "which meets the stack dim, where the index selects 2 tensordicts");
  ExpectUnchanged(g.a, before_a);
  ExpectUnchanged(g.b, before_b);
}

TEST(LazyStack, CopiesAndFunctionsWorkDictByDict) {
  Agents g;
  const auto s = g.stack();
  const auto c = s.clone();
  EXPECT_FALSE(c.tensordicts()[0].get("obs").is_same(g.a.get("obs")));
  EXPECT_TRUE((c == s).all());
  const auto doubled = s.apply([](const at::Tensor& t) { return t * 2; });
  EXPECT_TRUE(at::equal(doubled.get_list("obs")[1], g.b.get("obs") * 2));
  EXPECT_FALSE((doubled == s).all());
  EXPECT_TRUE((doubled != s).any());
  const auto moved = s.to(at::kCPU);
  EXPECT_EQ(moved.device(), c10::optional<at::Device>(at::kCPU));
  EXPECT_EQ(s.device(), c10::nullopt);
  ExpectThrowsMsg([&] { (void)(s == s[Slice(0, 1)].value()); },
                  "==: the lazy stacks hold 2 and 1 tensordicts");
}

TEST(LazyStack, DensifyStacksTheSharedKeys) {
  Agents g;
  g.b.set("obs", Arange({3, 2}, 50));
  const TensorDict d = g.stack(1).densify();
  EXPECT_EQ(d.batch_size().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(d.keys(true, true),
            tensordict_test::Keys({"obs", "reward", {"next", "x"}}));
  EXPECT_TRUE(
      at::equal(d.get("obs"), at::stack({g.a.get("obs"), g.b.get("obs")}, 1)));
  Agents h;
  ExpectThrowsMsg([&] { (void)h.stack().densify(); },
                  "densify: key obs has shape [3, 2] in tensordicts()[0] "
                  "and [3, 4] in tensordicts()[1]: use to_padded_tensor");
  ExpectThrowsMsg(
      [] {
        (void)tensordict::lazy_stack({Empty({3}), Empty({4})}).densify();
      },
      "densify: the tensordicts' batch sizes differ ([3] in "
      "tensordicts()[0], [4] in tensordicts()[1]): use to_padded_tensor");
}

TEST(LazyStack, ToPaddedTensorPadsEveryLeafAndMasksIt) {
  TensorDict a({{"tokens", Arange({2})}}, {});
  TensorDict b({{"tokens", Arange({4}, 10)}}, {});
  const TensorDict p =
      tensordict::lazy_stack({a, b}).to_padded_tensor(-1, true);
  EXPECT_EQ(p.keys(true, true),
            tensordict_test::Keys({"tokens", {"masks", "tokens"}}));
  EXPECT_TRUE(at::equal(
      p.get("tokens"),
      at::tensor({0.0F, 1.0F, -1.0F, -1.0F, 10.0F, 11.0F, 12.0F, 13.0F})
          .reshape({2, 4})));
  EXPECT_TRUE(at::equal(
      p.get({"masks", "tokens"}),
      at::tensor({1, 1, 0, 0, 1, 1, 1, 1}).to(at::kBool).reshape({2, 4})));
  // Batch dims that differ are padded too.
  TensorDict c({{"r", at::ones({2})}}, {2});
  TensorDict d({{"r", at::ones({3})}}, {3});
  const TensorDict q = tensordict::lazy_stack({c, d}).to_padded_tensor();
  EXPECT_EQ(q.batch_size().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(at::equal(
      q.get("r"),
      at::tensor({1.0F, 1.0F, 0.0F, 1.0F, 1.0F, 1.0F}).reshape({2, 3})));
  TensorDict m({{"masks", at::ones({})}}, {});
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        (void)tensordict::lazy_stack({m, m}).to_padded_tensor(0, true);
      },
      "to_padded_tensor: the tensordicts hold key masks, where the masks "
      "would go");
}

TEST(LazyStack, CatAndStackOfLazyStacks) {
  Agents g;
  const auto s = g.stack();
  const auto along = tensordict::cat(Stacks{s, s}, 0);
  EXPECT_EQ(along.batch_size(), (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(along.tensordicts()[2].is_same(g.a));
  const auto across = tensordict::cat(Stacks{s, s}, 1);
  EXPECT_EQ(across.batch_size(), (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(at::equal(across.get_list("obs")[1],
                        at::cat({g.b.get("obs"), g.b.get("obs")})));
  const auto stacked = tensordict::stack(Stacks{s, s}, 0);
  EXPECT_EQ(stacked.batch_size(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(stacked.stack_dim(), 1);
  EXPECT_TRUE(at::equal(stacked.get("reward"),
                        at::stack({s.get("reward"), s.get("reward")})));
  const auto inner = tensordict::stack(Stacks{s, s}, 2);
  EXPECT_EQ(inner.batch_size(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(inner.stack_dim(), 0);
  ExpectThrowsMsg(
      [&] {
        (void)tensordict::cat(Stacks{s, g.stack(1)}, 0);
      },
      "cat: the lazy stacks are stacked along dims 0 and 1");
}

TEST(LazyStack, PrintsAsPython) {
  // Python 0.4 and 0.14 print these stacks so (python_lazy_stack_test.cpp
  // checks the same against the real thing).
  TensorDict a({{"obs", at::zeros({3, 2})}, {"r", at::ones({3})}}, {3});
  TensorDict b({{"obs", at::ones({3, 4})},
                {"r", at::ones({3})},
                {"extra", at::zeros({3})}},
               {3});
  b.set({"sub", "y"}, at::zeros({3, 2}));
  EXPECT_EQ(tensordict::repr(tensordict::lazy_stack({a, b})),
            R"(LazyStackedTensorDict(
    fields={
        obs: Tensor(shape=torch.Size([2, 3, -1]), device=cpu, dtype=torch.float32, is_shared=False),
        r: Tensor(shape=torch.Size([2, 3]), device=cpu, dtype=torch.float32, is_shared=False)},
    exclusive_fields={
        1 ->
            extra: Tensor(shape=torch.Size([3]), device=cpu, dtype=torch.float32, is_shared=False),
            sub: TensorDict(
                fields={
                    y: Tensor(shape=torch.Size([3, 2]), device=cpu, dtype=torch.float32, is_shared=False)},
                batch_size=torch.Size([3]),
                device=None,
                is_shared=False)},
    batch_size=torch.Size([2, 3]),
    device=None,
    is_shared=False,
    stack_dim=0))");
  std::ostringstream os;
  os << tensordict::lazy_stack({Empty({2}), Empty({2})});
  EXPECT_EQ(os.str(), R"(LazyStackedTensorDict(
    fields={
    },
    exclusive_fields={
    },
    batch_size=torch.Size([2, 2]),
    device=None,
    is_shared=False,
    stack_dim=0))");
}

TEST(LazyStack, MemmapWritesPythonsLayoutAndLoadsBack) {
  TempDir dir("td_lazy_memmap");
  Agents g;
  const auto s = g.stack(1);
  const auto m = s.memmap(dir / "s");
  EXPECT_FALSE(g.a.is_memmap());
  EXPECT_TRUE(m.tensordicts()[1].is_memmap());
  std::ifstream meta(dir / "s/meta.json");
  std::string text((std::istreambuf_iterator<char>(meta)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(
      text,
      R"({"_type":"<class 'tensordict._lazy.LazyStackedTensorDict'>","stack_dim":1})");
  const auto back = LazyStackedTensorDict::load_memmap(dir / "s");
  EXPECT_EQ(back.stack_dim(), 1);
  ASSERT_EQ(back.tensordicts().size(), 2U);
  EXPECT_TRUE((back.tensordicts()[0] == g.a).all());
  EXPECT_TRUE((back.tensordicts()[1] == g.b).all());
  // In place, over a longer stack's directory: its dict 2/ goes, as Python
  // would load it.
  (void)tensordict::lazy_stack({g.a.clone(), g.b.clone(), g.a.clone()})
      .memmap(dir / "t");
  auto t = tensordict::lazy_stack({g.a, g.b});
  t.memmap_(dir / "t");
  EXPECT_TRUE(g.a.is_memmap());
  EXPECT_TRUE(g.a.is_locked());
  EXPECT_FALSE(tensordict_test::Exists(dir / "t/2"));
  EXPECT_EQ(LazyStackedTensorDict::load_memmap(dir / "t").tensordicts().size(),
            2U);
  ExpectThrowsMsg([&] { (void)TensorDict::load_memmap(dir / "t"); },
                  "load_memmap: '" + (dir / "t") +
                      "' holds a lazy stack: open it with "
                      "LazyStackedTensorDict::load_memmap");
  ExpectThrowsMsg<c10::ValueError>(
      [&] {
        tensordict::lazy_stack({g.a, g.a}).memmap_(dir / "u");
      },
      "memmap_: tensordicts()[0] and tensordicts()[1] are the same dict, "
      "which cannot live in two directories: memmap writes a copy");
}

TEST(LazyStack, HostileLazyDirectoriesThrow) {
  TempDir dir("td_lazy_hostile");
  auto write = [&](const std::string& name, const std::string& meta) {
    tensordict_test::MakeDirs(dir / name);
    std::ofstream(dir / name + "/meta.json") << meta;
    return dir / name;
  };
  const std::string type =
      R"("_type":"<class 'tensordict._lazy.LazyStackedTensorDict'>")";
  const std::string no_dim = write("no_dim", "{" + type + "}");
  ExpectThrowsMsg([&] { (void)LazyStackedTensorDict::load_memmap(no_dim); },
                  "load_memmap: '" + no_dim +
                      "/meta.json': \"stack_dim\" must be an integer, got "
                      "nothing");
  const std::string empty = write("empty", "{" + type + R"(,"stack_dim":0})");
  ExpectThrowsMsg([&] { (void)LazyStackedTensorDict::load_memmap(empty); },
                  "load_memmap: '" + empty +
                      "' holds no tensordict of the lazy stack (no 0/)");
  const std::string far = write("far", "{" + type + R"(,"stack_dim":7})");
  TensorDict({{"x", at::ones({2})}}, {2}).memmap(far + "/0");
  ExpectThrowsMsg(
      [&] { (void)LazyStackedTensorDict::load_memmap(far); },
      "load_memmap: '" + far +
          "': lazy_stack: dim 7 is out of range for TensorDicts with "
          "batch_size [2] (expected a dim in [-2, 1])");
  const std::string plain = dir / "plain";
  TensorDict({{"x", at::ones({2})}}, {2}).memmap(plain);
  ExpectThrowsMsg(
      [&] { (void)LazyStackedTensorDict::load_memmap(plain); },
      "load_memmap: '" + plain +
          "/meta.json' does not describe a LazyStackedTensorDict: "
          R"({"x":{"device":"cpu","shape":[2],"dtype":"torch.float32","is_nested":false},"shape":[2],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
}

}  // namespace

namespace {

using tensordict::LazyStackReplayBuffer;
using tensordict::ReplayBufferOptions;

// Row `i` of an agent rollout whose observation has `1 + i % 3` entries
// (all equal to i), with its step and a trajectory end every 4 rows.
TensorDict Row(int64_t i) {
  TensorDict r({{"obs", at::full({1 + i % 3}, static_cast<double>(i))},
                {"step", at::scalar_tensor(i, at::kLong)}},
               {});
  r.set({"next", "done"}, at::full({1}, i % 4 == 3, at::kBool));
  return r;
}

// The step of each sampled row.
std::vector<int64_t> Steps(const LazyStackedTensorDict& s) {
  const at::Tensor t = s.get("step");
  return std::vector<int64_t>(t.data_ptr<int64_t>(),
                              t.data_ptr<int64_t>() + t.numel());
}

TEST(LazyStackReplayBuffer, StoresRowsOfDifferentShapesAndSamplesLazyStacks) {
  LazyStackReplayBuffer rb(ReplayBufferOptions(5).seed(1));
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(rb.add(Row(i)), i % 5);
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.cursor(), 2);
  // Rows 5 and 6 replaced rows 0 and 1, round-robin.
  EXPECT_TRUE(at::equal(rb.row(1).get("obs"), at::full({1}, 6.0)));
  auto [batch, info] = rb.sample(16);
  EXPECT_EQ(batch.batch_size(), (std::vector<int64_t>{16}));
  const at::Tensor index = info.index;
  for (int64_t k = 0; k < 16; ++k) {
    const TensorDict stored = rb.row(index[k].item<int64_t>());
    const TensorDict got = batch.tensordicts()[static_cast<size_t>(k)];
    EXPECT_TRUE((got == stored).all());
    // A copy: writing into the sample leaves the buffer as it was.
    EXPECT_FALSE(
        tensordict_test::SharesStorage(got.get("obs"), stored.get("obs")));
  }
  // extend: a list or a lazy stack along dim 0; a batch larger than the
  // capacity keeps its last rows.
  std::vector<TensorDict> rows;
  for (int64_t i = 10; i < 17; ++i) rows.push_back(Row(i));
  const at::Tensor idx = rb.extend(rows);
  EXPECT_EQ(idx.numel(), 5);
  EXPECT_EQ(rb.row(idx[4].item<int64_t>()).get("step").item<int64_t>(), 16);
  rb.extend(tensordict::lazy_stack({Row(20), Row(21)}));
  EXPECT_EQ(rb.size(), 5);
  rb.clear();
  EXPECT_EQ(rb.size(), 0);
}

TEST(LazyStackReplayBuffer, EverySamplerWorks) {
  const std::vector<tensordict::SamplerConfig> samplers = {
      tensordict::RandomSampler(),
      tensordict::SamplerWithoutReplacement(),
      tensordict::PrioritizedSampler(),
      tensordict::SliceSampler(4),
      tensordict::SliceSamplerWithoutReplacement(4),
      tensordict::PrioritizedSliceSampler(4)};
  for (size_t s = 0; s < samplers.size(); ++s) {
    SCOPED_TRACE(s);
    LazyStackReplayBuffer rb(
        ReplayBufferOptions(16).sampler(samplers[s]).seed(3));
    for (int64_t i = 0; i < 16; ++i) rb.add(Row(i));
    auto [batch, info] = rb.sample(8);
    const auto steps = Steps(batch);
    ASSERT_EQ(steps.size(), 8U);
    if (s >= 3) {
      // Two slices of 4 rows, each one whole trajectory of 4 steps.
      for (size_t k = 0; k < 8; k += 4) {
        EXPECT_EQ(steps[k] % 4, 0);
        for (size_t j = 1; j < 4; ++j) EXPECT_EQ(steps[k + j], steps[k] + j);
      }
    }
    if (s == 1) {
      // Without replacement: two draws cover the 16 rows once.
      auto more = Steps(rb.sample(8).first);
      std::vector<int64_t> all = steps;
      all.insert(all.end(), more.begin(), more.end());
      std::sort(all.begin(), all.end());
      for (int64_t i = 0; i < 16; ++i)
        EXPECT_EQ(all[static_cast<size_t>(i)], i);
    }
    if (s == 2) {
      // Priorities: one row holds all of the mass.
      rb.update_priority(
          at::arange(16),
          at::zeros({16}).index_fill_(0, at::full({1}, 5, at::kLong), 1.0));
      for (int64_t st : Steps(rb.sample(8).first)) EXPECT_EQ(st, 5);
      EXPECT_TRUE(info.weight.defined());
    }
  }
}

TEST(LazyStackReplayBuffer, BadRowsChangeNothing) {
  LazyStackReplayBuffer rb(
      ReplayBufferOptions(8).sampler(tensordict::SliceSampler(2)));
  rb.add(Row(0));
  const TensorDict stored = rb.row(0);
  const auto before = TakeSnapshot(stored);
  TensorDict no_done({{"obs", at::zeros({2})}}, {});
  ExpectThrowsMsg(
      [&] { rb.add(no_done); },
      "LazyStackReplayBuffer::add: the SliceSampler reads key ('next', "
      "'done'), which the row does not hold as a tensor");
  TensorDict batched({{"obs", at::zeros({3, 2})}}, {3});
  batched.set({"next", "done"}, at::zeros({3, 1}, at::kBool));
  ExpectThrowsMsg([&] { rb.add(batched); },
                  "LazyStackReplayBuffer::add: the rows stored have 0 batch "
                  "dims, and this row has batch_size [3]");
  ExpectThrowsMsg(
      [&] {
        rb.extend({Row(1), batched});
      },
      "LazyStackReplayBuffer::extend: the rows have 0 batch "
      "dims, and rows[1] has batch_size [3]");
  EXPECT_EQ(rb.size(), 1);
  EXPECT_EQ(rb.cursor(), 1);
  EXPECT_TRUE(rb.row(0).is_same(stored));
  ExpectUnchanged(stored, before);
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        LazyStackReplayBuffer bad(ReplayBufferOptions(8).storage_dir("/tmp/x"));
      },
      "LazyStackReplayBuffer: storage_dir (the rows live in memory) is not "
      "supported");
  ExpectThrowsMsg<c10::ValueError>(
      [] { LazyStackReplayBuffer bad(ReplayBufferOptions(8).shared(true)); },
      "LazyStackReplayBuffer: shared is not supported");
}

TEST(LazyStackReplayBuffer, ARowThatFitsIsWrittenIntoTheRowItOverwrites) {
  LazyStackReplayBuffer rb(ReplayBufferOptions(3));
  for (int64_t i = 0; i < 3; ++i) rb.add(Row(i));  // obs of 1, 2 and 3
  // Row 3 (obs of 1) overwrites row 0, which it fits: into its tensors.
  const TensorDict old0 = rb.row(0);
  const void* obs0 = old0.get("obs").data_ptr();
  const void* done0 = old0.get({"next", "done"}).data_ptr();
  const TensorDict r3 = Row(3);
  EXPECT_EQ(rb.add(r3), 0);
  EXPECT_TRUE(rb.row(0).is_same(old0));
  EXPECT_EQ(rb.row(0).get("obs").data_ptr(), obs0);
  EXPECT_EQ(rb.row(0).get({"next", "done"}).data_ptr(), done0);
  EXPECT_TRUE((rb.row(0) == r3).all());
  EXPECT_FALSE(
      tensordict_test::SharesStorage(rb.row(0).get("obs"), r3.get("obs")));
  // Row 5 (obs of 3) does not fit row 1 (obs of 2): a copy, and the dict
  // handed out before keeps the old row.
  const TensorDict old1 = rb.row(1);
  EXPECT_EQ(rb.add(Row(5)), 1);
  EXPECT_FALSE(rb.row(1).is_same(old1));
  EXPECT_TRUE(at::equal(old1.get("obs"), at::full({2}, 1.0)));
  EXPECT_TRUE((rb.row(1) == Row(5)).all());
  // A row that autograd tracks is copied, as before.
  TensorDict tracked = Row(11);  // fits slot 2 (obs of 3)
  tracked.set("obs", at::full({3}, 11.0).requires_grad_());
  const void* obs2 = rb.row(2).get("obs").data_ptr();
  EXPECT_EQ(rb.add(tracked), 2);
  EXPECT_NE(rb.row(2).get("obs").data_ptr(), obs2);
  // A row that reads a slot the same write overwrites is copied first: row
  // 0 goes to slot 1 after row 6 (which fits slot 0) has replaced it.
  LazyStackReplayBuffer two(ReplayBufferOptions(2));
  two.extend({Row(0), Row(3)});  // obs of 1 each
  two.extend({Row(6), two.row(0)});
  EXPECT_TRUE((two.row(0) == Row(6)).all());
  EXPECT_TRUE((two.row(1) == Row(0)).all());
  // A refused write changes nothing, in place or not: rows[0] would fit.
  std::vector<TensorDict> stored;
  std::vector<tensordict_test::Snapshot> snaps;
  for (int64_t i = 0; i < 3; ++i) {
    stored.push_back(rb.row(i));
    snaps.push_back(TakeSnapshot(rb.row(i)));
  }
  TensorDict batched({{"obs", at::zeros({3, 2})}}, {3});
  ExpectThrowsMsg(
      [&] {
        rb.extend({Row(12), batched});
      },
      "LazyStackReplayBuffer::extend: the rows have 0 batch "
      "dims, and rows[1] has batch_size [3]");
  EXPECT_EQ(rb.cursor(), 0);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(rb.row(i).is_same(stored[static_cast<size_t>(i)]));
    ExpectUnchanged(rb.row(i), snaps[static_cast<size_t>(i)]);
  }
}

TEST(LazyStackReplayBuffer, CheckpointsResumeTheSameRowsAndSamples) {
  TempDir dir("td_lazy_checkpoint");
  LazyStackReplayBuffer rb(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(3));
  for (int64_t i = 0; i < 9; ++i) rb.add(Row(i));
  TensorDict own = Row(9);
  own.set("extra", at::ones({2, 2}));  // a key of its own
  rb.add(own);
  rb.dumps(dir / "cp");
  // The same options, another seed and other rows: all replaced.
  LazyStackReplayBuffer resumed(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(99));
  resumed.add(Row(50));
  resumed.loads(dir / "cp");
  EXPECT_EQ(resumed.size(), rb.size());
  EXPECT_EQ(resumed.cursor(), rb.cursor());
  for (int64_t i = 0; i < rb.size(); ++i) {
    EXPECT_TRUE((resumed.row(i) == rb.row(i)).all()) << "row " << i;
    EXPECT_FALSE(resumed.row(i).get("obs").is_same(rb.row(i).get("obs")));
    EXPECT_FALSE(resumed.row(i).get("obs").is_set_to(rb.row(i).get("obs")));
  }
  EXPECT_TRUE(resumed.row(3).contains("extra"));
  for (int k = 0; k < 3; ++k) {
    auto [a, ia] = rb.sample(4);
    auto [b, ib] = resumed.sample(4);
    EXPECT_TRUE(at::equal(ia.index, ib.index)) << "sample " << k;
    EXPECT_EQ(Steps(a), Steps(b));
  }
  // An empty buffer's checkpoint empties a buffer.
  LazyStackReplayBuffer empty(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)));
  empty.dumps(dir / "empty");
  resumed.loads(dir / "empty");
  EXPECT_EQ(resumed.size(), 0);
  resumed.add(Row(0));  // any row structure again
  ExpectThrowsMsg([&] { rb.dumps(dir / "cp"); },
                  "LazyStackReplayBuffer::dumps: '" + (dir / "cp") +
                      "' is not empty; dumps writes a checkpoint into a new "
                      "or empty directory only");
}

TEST(LazyStackReplayBuffer, ARefusedLoadChangesNothing) {
  TempDir dir("td_lazy_refused");
  LazyStackReplayBuffer source(ReplayBufferOptions(6).seed(3));
  for (int64_t i = 0; i < 3; ++i) source.add(Row(i));
  source.dumps(dir / "cp");
  LazyStackReplayBuffer rb(ReplayBufferOptions(6).seed(7));
  LazyStackReplayBuffer twin(ReplayBufferOptions(6).seed(7));
  for (int64_t i = 10; i < 14; ++i) {
    rb.add(Row(i));
    twin.add(Row(i));
  }
  std::vector<TensorDict> stored;
  std::vector<tensordict_test::Snapshot> snaps;
  for (int64_t i = 0; i < rb.size(); ++i) {
    stored.push_back(rb.row(i));
    snaps.push_back(TakeSnapshot(rb.row(i)));
  }
  auto unchanged = [&] {
    EXPECT_EQ(rb.size(), 4);
    EXPECT_EQ(rb.cursor(), 4);
    for (int64_t i = 0; i < rb.size(); ++i) {
      EXPECT_TRUE(rb.row(i).is_same(stored[static_cast<size_t>(i)]));
      ExpectUnchanged(rb.row(i), snaps[static_cast<size_t>(i)]);
    }
  };
  ExpectThrowsMsg([&] { rb.loads(dir / "none"); },
                  "LazyStackReplayBuffer::loads: '" + (dir / "none") +
                      "' holds no LazyStackReplayBuffer checkpoint (no "
                      "lazy/meta.json; dumps writes one)");
  unchanged();
  // Another capacity: the index buffer's own check.
  LazyStackReplayBuffer small(ReplayBufferOptions(2));
  small.add(Row(0));
  small.dumps(dir / "small");
  tensordict_test::ExpectThrowsMsgPrefix(
      [&] { rb.loads(dir / "small"); },
      "LazyStackReplayBuffer::loads: the index: ReplayBuffer::loads: ");
  unchanged();
  // Rows that do not match the index: one dict where the index has three.
  tensordict::lazy_stack({Row(0)}).memmap_(dir / "cp/rows");
  ExpectThrowsMsg([&] { rb.loads(dir / "cp"); },
                  "LazyStackReplayBuffer::loads: '" + (dir / "cp") +
                      "': the index holds 3 rows but rows/ holds 1 dicts "
                      "stacked along dim 0");
  unchanged();
  // Nothing was drawn either.
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(
        at::equal(rb.sample(4).second.index, twin.sample(4).second.index));
  }
}

}  // namespace
