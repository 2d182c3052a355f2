// Atomicity of the writes into a dict's existing leaves and rows:
// td[idx] = row / index_put_, stack_out / cat_out, the in-place arithmetic,
// apply_, and ReplayBuffer::add / extend. A failed call must leave the dict
// (or the buffer) exactly as it was; the seeded driver, its snapshots and the
// reproduction steps are in atomicity_driver.h.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "atomicity_driver.h"

namespace tensordict_test::atomicity {

// ===========================================================================
// Op generators
// ===========================================================================

// td[idx] = row / index_put_: every index kind; rows with missing keys (lazy
// allocation), a wrong trailing shape, an uncastable dtype, a tensor where a
// dict lives and the reverse, a meta value, rows that are views of the
// destination, a batch that does not fit, an out-of-range index.
void GenIndexPut(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const size_t bd = batch.size();
  const int64_t n0 = batch[0];
  const IndexSpec idx = RandomIndex(rng, batch, Coin(rng, 0.08));
  Shape ib;
  const bool index_ok = IndexedShape(batch, idx, &ib);
  Shape row_batch = index_ok ? ib : Shape(batch.begin() + 1, batch.end());
  if (index_ok && !row_batch.empty() && Coin(rng, 0.15)) {
    row_batch.erase(row_batch.begin());  // broadcasts from the left
  }
  TensorDict row = RandomRow(w, dst, row_batch, /*all_keys=*/false);
  Op op;
  op.family = kIndexPut;
  op.expect_throw = !index_ok;
  std::ostringstream d;
  d << dst_name << "[" << idx.str << "] = row(batch " << ShapeStr(row_batch)
    << ")";
  if (Coin(rng, 0.4)) {  // a key the destination lacks: allocated lazily
    const std::string n = w.NewKey("lazy");
    const NestedKey k = Coin(rng, 0.5)   ? NestedKey(n)
                        : Coin(rng, 0.5) ? NestedKey({"next", n})
                                         : NestedKey({n, "x"});
    const at::ScalarType dt = Pick(
        rng, std::vector<at::ScalarType>{at::kFloat, at::kLong, at::kBool});
    if (!(k.is_nested() && IsLeaf(row, NestedKey(k.front())))) {
      row.set(k, RandT(rng, Cat(row_batch, {2}), dt));
      d << " +lazy key " << k.str();
    }
  }
  std::vector<NestedKey> in_both;  // row leaves that dst holds as leaves
  for (const auto& k : row.keys(true, true)) {
    if (IsLeaf(dst, k)) in_both.push_back(k);
  }
  switch (Uniform(rng, 0, 10)) {
    case 0:
    case 1:
      d << " (valid)";
      break;
    case 2: {  // wrong trailing shape
      if (in_both.empty()) break;
      const NestedKey k = Pick(rng, in_both);
      const at::Tensor dt = dst.get(k);
      row.set(k, RandT(rng, Cat(row_batch, BadTrailing(dt.sizes().slice(bd))),
                       dt.is_meta() ? at::kFloat : dt.scalar_type()));
      d << "; wrong trailing shape at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 3: {  // uncastable dtype (float -> int64/bool, int64 -> bool)
      std::vector<NestedKey> ints;
      for (const auto& k : in_both) {
        const auto st = dst.get(k).scalar_type();
        if (st == at::kLong || st == at::kBool) ints.push_back(k);
      }
      if (ints.empty()) break;
      const NestedKey k = Pick(rng, ints);
      const bool to_bool = dst.get(k).scalar_type() == at::kBool;
      const at::ScalarType src =
          to_bool && Coin(rng, 0.5) ? at::kLong : at::kFloat;
      row.set(k, RandT(rng, row.get(k).sizes(), src));
      d << "; uncastable " << src << " value at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 4: {  // a tensor where a dict lives
      if (!IsDict(dst, "next")) break;
      if (row.contains("next")) row.erase("next");
      row.set("next", RandT(rng, Cat(row_batch, {1}), at::kFloat));
      d << "; tensor at next (a sub-dict in the destination)";
      op.expect_throw = true;
      break;
    }
    case 5: {  // a dict where a tensor lives
      const NestedKey k =
          Coin(rng, 0.5) ? NestedKey("a") : NestedKey({"next", "obs"});
      if (!IsLeaf(dst, k)) break;
      if (row.contains(k)) row.erase(k);
      row.set(k.join(NestedKey("z")), RandT(rng, row_batch, at::kFloat));
      d << "; sub-dict at " << k.str() << " (a tensor in the destination)";
      op.expect_throw = true;
      break;
    }
    case 6: {  // a meta value into a CPU buffer
      std::vector<NestedKey> cpu;
      for (const auto& k : in_both) {
        if (!dst.get(k).is_meta()) cpu.push_back(k);
      }
      if (cpu.empty()) break;
      const NestedKey k = Pick(rng, cpu);
      row.set(k, MetaT(row.get(k).sizes(), row.get(k).scalar_type()));
      d << "; meta value at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 7: {  // castable dtype change (int64 into float, bool into int64)
      for (const auto& k : in_both) {
        const auto st = dst.get(k).scalar_type();
        if (at::isFloatingType(st))
          row.set(k, RandT(rng, row.get(k).sizes(), at::kLong));
        if (st == at::kLong)
          row.set(k, RandT(rng, row.get(k).sizes(), at::kBool));
      }
      d << "; castable dtypes (valid)";
      break;
    }
    case 8: {  // the row is a view of the destination
      if (!kAliasedInputs || !index_ok) break;
      if (idx.kind == IndexSpec::kSlice && idx.step == 1 && row_batch == ib) {
        const int64_t len = idx.stop - idx.start;
        int64_t s2 = -1;
        if (idx.start + 1 + len <= n0) {
          s2 = idx.start + 1;
        } else if (idx.start >= 1) {
          s2 = idx.start - 1;
        }
        if (s2 < 0) break;
        row = dst.index({Slice(s2, s2 + len)});
        // The first leaf is a copy, so that it is written before the
        // overlapping ones are reached.
        const auto ks = row.keys(true, true);
        if (!ks.empty()) row.set(ks[0], row.get(ks[0]).clone());
        d << "; row = " << dst_name << "[Slice(" << s2 << "," << s2 + len
          << ")] (views overlapping the region, first leaf cloned)";
      } else if (idx.is_int() && row_batch == ib) {
        const int64_t j = Uniform(rng, 0, n0 - 1);
        row = dst.index({TensorIndex(j)});
        d << "; row = " << dst_name << "[" << j << "] (views)";
      }
      break;
    }
    case 9: {  // a batch that does not fit the indexed region
      Shape bb = row_batch;
      if (bb.empty()) {
        bb = {2};
      } else {
        bb[0] += 1;
      }
      row = RandomRow(w, dst, bb, /*all_keys=*/false);
      d << "; row batch " << ShapeStr(bb) << " instead";
      op.expect_throw = !index_ok || !BatchFits(bb, ib);
      break;
    }
    default: {  // a nested dict where a nested tensor lives
      if (!IsLeaf(dst, {"next", "obs"})) break;
      if (row.contains({"next", "obs"})) row.erase({"next", "obs"});
      row.set({"next", "obs", "deep"}, RandT(rng, row_batch, at::kFloat));
      d << "; sub-dict at (next, obs)";
      op.expect_throw = true;
      break;
    }
  }
  const int how = static_cast<int>(Uniform(rng, 0, 2));
  d << (how == 0   ? " via index_put_"
        : how == 1 ? " via operator="
                   : " via td[i] (int)");
  op.desc = d.str();
  op.run = [dst, idx, row, how] {
    if (how == 0) {
      dst.index_put_({ToIndex(idx)}, row);
    } else if (how == 2 && idx.is_int()) {
      dst[idx.i] = row;
    } else {
      dst[ToIndex(idx)] = row;
    }
  };
  w.Run(op);
}

// stack_out / cat_out into dst[Slice(s, s + k)]: fresh rows, rows that are
// views of the destination, clones; one input with a wrong trailing shape, an
// uncastable dtype, a missing or extra key, a meta leaf; keys the destination
// lacks (lazy); the wrong number of rows; a bad stack dim.
void GenStackCat(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const int64_t n0 = batch[0];
  const Shape row_batch(batch.begin() + 1, batch.end());
  const bool is_cat = Coin(rng, 0.4);
  const int64_t s = Uniform(rng, 0, n0 - 1);
  const int64_t k = Uniform(rng, 1, n0 - s);
  std::vector<TensorDict> inputs;
  std::ostringstream d;
  d << (is_cat ? "cat_out(" : "stack_out(") << dst_name << "[Slice(" << s << ","
    << s + k << ")], {";
  // len < 0: a stack row (batch row_batch); else a cat part of `len` rows.
  auto make_input = [&](int64_t len) {
    const int kind = static_cast<int>(Uniform(rng, 0, kAliasedInputs ? 2 : 0));
    d << (inputs.empty() ? "" : ", ");
    if (kind == 0) {
      const Shape b = len < 0 ? row_batch : Cat({len}, row_batch);
      d << "fresh";
      inputs.push_back(RandomRow(w, dst, b, /*all_keys=*/true));
      return;
    }
    TensorDict in;
    if (len < 0) {
      const int64_t j = Uniform(rng, 0, n0 - 1);
      in = dst.index({TensorIndex(j)});
      d << dst_name << "[" << j << "]";
    } else {
      const int64_t a = Uniform(rng, 0, n0 - len);
      in = dst.index({Slice(a, a + len)});
      d << dst_name << "[Slice(" << a << "," << a + len << ")]";
    }
    if (kind == 2) {
      in = in.clone();
      d << ".clone()";
    }
    inputs.push_back(in);
  };
  if (!is_cat) {
    for (int64_t j = 0; j < k; ++j) make_input(-1);
  } else {
    int64_t left = k;
    while (left > 0) {
      const int64_t len = Uniform(rng, 1, left);
      make_input(len);
      left -= len;
    }
  }
  d << "}";
  Op op;
  op.family = kStackCat;
  int64_t dim = 0;
  const size_t r = static_cast<size_t>(
      Uniform(rng, 0, static_cast<int64_t>(inputs.size()) - 1));
  TensorDict& in = inputs[r];
  const std::vector<NestedKey> in_keys = in.keys(true, true);
  const size_t in_bd = static_cast<size_t>(in.batch_dims());
  switch (Uniform(rng, 0, 10)) {
    case 0:
    case 1:
    case 2:
      d << " (valid)";
      break;
    case 3: {  // wrong trailing shape in one input
      if (in_keys.empty()) break;
      const NestedKey key = Pick(rng, in_keys);
      const at::Tensor t = in.get(key);
      in.set(key, RandT(rng,
                        Cat(t.sizes().slice(0, in_bd),
                            BadTrailing(t.sizes().slice(in_bd))),
                        t.scalar_type()));
      d << "; input " << r << " has a wrong trailing shape at " << key.str();
      op.expect_throw = true;
      break;
    }
    case 4: {  // uncastable dtype in one input
      std::vector<NestedKey> ints;
      for (const auto& key : in_keys) {
        if (IsLeaf(dst, key) &&
            !at::isFloatingType(dst.get(key).scalar_type())) {
          ints.push_back(key);
        }
      }
      if (ints.empty()) break;
      const NestedKey key = Pick(rng, ints);
      in.set(key, RandT(rng, in.get(key).sizes(), at::kFloat));
      d << "; input " << r << " has a float value at " << key.str()
        << " (uncastable)";
      op.expect_throw = true;
      break;
    }
    case 5: {  // a key missing from one input
      if (in_keys.empty()) break;
      const NestedKey key = Pick(rng, in_keys);
      in.erase(key);
      d << "; input " << r << " lacks " << key.str();
      op.expect_throw = inputs.size() >= 2;
      break;
    }
    case 6: {  // a key every input has and the destination lacks (lazy)
      const std::string n = w.NewKey("lazy");
      for (auto& x : inputs) {
        x.set(n, RandT(rng, Cat(x.batch_size(), {2}), at::kFloat));
      }
      d << "; every input has the new key " << n << " (valid, lazy)";
      break;
    }
    case 7: {  // an extra key in one input only
      const std::string n = w.NewKey("extra");
      in.set(n, RandT(rng, Cat(in.batch_size(), {2}), at::kFloat));
      d << "; input " << r << " has an extra key " << n;
      op.expect_throw = inputs.size() >= 2;
      break;
    }
    case 8: {  // a meta leaf in one input (the destination's leaf is on the CPU)
      std::vector<NestedKey> cpu;
      for (const auto& key : in_keys) {
        if (IsLeaf(dst, key) && !dst.get(key).is_meta()) cpu.push_back(key);
      }
      if (cpu.empty()) break;
      const NestedKey key = Pick(rng, cpu);
      in.set(key, MetaT(in.get(key).sizes(), in.get(key).scalar_type()));
      d << "; input " << r << " has a meta leaf at " << key.str();
      break;
    }
    case 9: {  // the wrong number of rows
      make_input(is_cat ? 1 : -1);
      d << "; one input too many";
      op.expect_throw = true;
      break;
    }
    default: {  // another dim
      if (is_cat) {
        if (!row_batch.empty()) break;
        dim = 1;
        op.expect_throw = true;  // inputs have one batch dim
      } else {
        dim = Uniform(rng, 1, static_cast<int64_t>(row_batch.size()) + 1);
        if (dim > static_cast<int64_t>(row_batch.size())) {
          op.expect_throw = true;
        } else {
          // Built by push_back: g++ 16 misreads vector::insert here as
          // writing out of bounds (-Warray-bounds).
          Shape stacked;
          for (int64_t j = 0; j <= static_cast<int64_t>(row_batch.size());
               ++j) {
            if (j == dim) stacked.push_back(k);
            if (j < static_cast<int64_t>(row_batch.size())) {
              stacked.push_back(row_batch[static_cast<size_t>(j)]);
            }
          }
          op.expect_throw = stacked != Cat({k}, row_batch);
        }
      }
      d << "; dim " << dim;
      break;
    }
  }
  // The values a correct write produces: the inputs as they are now.
  TensorDict expected;
  bool check = kCheckAliasedResults && dim == 0 && !op.expect_throw;
  if (check) {
    try {
      at::NoGradGuard no_grad;
      std::vector<TensorDict> clones;
      for (const auto& x : inputs) clones.push_back(x.clone());
      expected =
          is_cat ? tensordict::cat(clones, 0) : tensordict::stack(clones, 0);
    } catch (const c10::Error&) {
      check = false;
    }
  }
  op.desc = d.str();
  op.run = [dst, inputs, is_cat, s, k, dim] {
    if (is_cat) {
      (void)tensordict::cat_out(dst[Slice(s, s + k)], inputs, dim);
    } else {
      (void)tensordict::stack_out(dst[Slice(s, s + k)], inputs, dim);
    }
  };
  if (check) {
    op.after_success = [dst, expected, s, k]() -> std::string {
      at::NoGradGuard no_grad;
      std::ostringstream out;
      for (const auto& key : expected.keys(true, true)) {
        const at::Tensor e = expected.get(key);
        if (!IsLeaf(dst, key)) {
          out << "  key " << key.str() << " is missing after the call\n";
          continue;
        }
        const at::Tensor got = dst.get(key);
        if (got.is_meta() || e.is_meta()) continue;
        if (!SameValues(got.detach().narrow(0, s, k),
                        e.detach().to(got.scalar_type()))) {
          out << "  key " << key.str()
              << ": the written rows differ from the inputs' values before "
                 "the call\n";
        }
      }
      const std::string o = out.str();
      return o.empty() ? o : "the call succeeded but wrote wrong values:\n" + o;
    };
  }
  w.Run(op);
}

// add_ / sub_ / mul_ / div_ with a scalar, a tensor or a dict operand, on the
// dict, its float leaves only, or its "next" sub-dict; dtype-invalid
// combinations, bad operand shapes, missing keys, a float alpha on integer
// leaves, meta operands.
void GenArith(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  TensorDict target = dst;
  std::string tname = dst_name;
  switch (Uniform(rng, 0, 2)) {
    case 0:
      break;
    case 1:
      target = FloatOnly(dst);
      tname = dst_name + ".exclude(non-float)";
      break;
    default:
      if (IsDict(dst, "next")) {
        target = dst.get_tensordict("next");
        tname = dst_name + ".next";
      }
      break;
  }
  const std::vector<LeafRef> leaves = Leaves(target);
  bool has_int = false;
  bool has_bool = false;
  bool has_grad_leaf = false;
  for (const auto& l : leaves) {
    has_int = has_int || IsIntegral(l.tensor.scalar_type());
    has_bool = has_bool || l.tensor.scalar_type() == at::kBool;
    has_grad_leaf =
        has_grad_leaf || (l.tensor.requires_grad() && l.tensor.is_leaf());
  }
  const Shape batch = target.batch_size().vec();
  const int opk = static_cast<int>(Uniform(rng, 0, 3));
  static const char* const kNames[] = {"add_", "sub_", "mul_", "div_"};
  const bool is_div = opk == 3;
  const bool is_sub = opk == 1;
  Op op;
  op.family = kArith;
  op.expect_throw = has_grad_leaf;
  std::ostringstream d;
  d << tname << "." << kNames[opk] << "(";
  switch (Uniform(rng, 0, 2)) {
    case 0: {  // scalar
      const int kind = static_cast<int>(Uniform(rng, 0, 2));
      const at::Scalar sc = kind == 0   ? at::Scalar(int64_t{2})
                            : kind == 1 ? at::Scalar(0.5)
                                        : at::Scalar(true);
      d << (kind == 0 ? "2" : kind == 1 ? "0.5" : "true") << ")";
      if ((is_div && (has_int || has_bool)) ||
          (kind == 1 && (has_int || has_bool)) || (has_bool && kind != 2) ||
          (is_sub && has_bool)) {
        op.expect_throw = true;
      }
      op.run = [target, opk, sc] {
        switch (opk) {
          case 0:
            target.add_(sc);
            break;
          case 1:
            target.sub_(sc);
            break;
          case 2:
            target.mul_(sc);
            break;
          default:
            target.div_(sc);
            break;
        }
      };
      break;
    }
    case 1: {  // tensor
      at::Tensor t;
      switch (Uniform(rng, 0, 5)) {
        case 0:
          t = RandT(rng, batch, at::kFloat);
          break;
        case 1:
          t = RandT(rng, batch, at::kLong);
          break;
        case 2:
          t = RandT(rng, {batch[0]}, at::kFloat);
          break;
        case 3:
          t = RandT(rng, {}, at::kFloat);
          break;
        case 4:
          t = RandT(rng, {batch[0] + 1}, at::kFloat);
          op.expect_throw = true;
          break;
        default:
          t = RandT(rng, Cat(batch, {7}), at::kFloat);
          op.expect_throw = true;
          break;
      }
      // Avoid division by zero: integer-valued operands, made nonzero.
      if (is_div) t = at::where(t == 0, at::ones_like(t), t);
      d << "tensor " << t.scalar_type() << ShapeStr(t.sizes()) << ")";
      const bool is_float = at::isFloatingType(t.scalar_type());
      if ((is_float && (has_int || has_bool)) || has_bool ||
          (is_div && (has_int || has_bool))) {
        op.expect_throw = true;
      }
      op.run = [target, opk, t] {
        switch (opk) {
          case 0:
            target.add_(t);
            break;
          case 1:
            target.sub_(t);
            break;
          case 2:
            target.mul_(t);
            break;
          default:
            target.div_(t);
            break;
        }
      };
      break;
    }
    default: {  // dict
      TensorDict other{c10::IntArrayRef(batch)};
      for (const auto& l : leaves) {
        other.set(l.key, RandT(rng, l.tensor.sizes(), l.tensor.scalar_type()));
      }
      at::Scalar alpha = int64_t{1};
      d << "dict";
      if (is_div && (has_int || has_bool)) op.expect_throw = true;
      if (is_sub && has_bool) op.expect_throw = true;
      switch (Uniform(rng, 0, 6)) {
        case 0:
        case 1:
        case 2:
          break;
        case 3:  // a key missing from the operand
          if (leaves.empty()) break;
          other.erase(Pick(rng, leaves).key);
          d << " missing a key";
          op.expect_throw = true;
          break;
        case 4: {  // a bad shape in the operand
          if (leaves.empty()) break;
          const LeafRef& l = Pick(rng, leaves);
          other.set(l.key, RandT(rng,
                                 Cat(batch, BadTrailing(l.tensor.sizes().slice(
                                                batch.size()))),
                                 l.tensor.scalar_type()));
          d << " with a bad shape at " << l.key.str();
          op.expect_throw = true;
          break;
        }
        case 5:  // a float alpha (LibTorch rejects it for integer leaves)
          if (opk > 1) break;
          alpha = 0.5;
          d << ", alpha=0.5";
          break;
        default: {  // a meta operand leaf
          std::vector<LeafRef> cpu;
          for (const auto& l : leaves) {
            if (!l.tensor.is_meta()) cpu.push_back(l);
          }
          if (cpu.empty()) break;
          const LeafRef& l = Pick(rng, cpu);
          other.set(l.key, MetaT(l.tensor.sizes(), l.tensor.scalar_type()));
          d << " with a meta leaf at " << l.key.str();
          break;
        }
      }
      if (is_div) {  // no integer division by zero
        for (const auto& l : Leaves(other)) {
          if (!l.tensor.is_meta() && l.tensor.scalar_type() != at::kBool) {
            other.set(l.key, at::where(l.tensor == 0, at::ones_like(l.tensor),
                                       l.tensor));
          }
        }
      }
      d << ")";
      op.run = [target, opk, other, alpha] {
        switch (opk) {
          case 0:
            target.add_(other, alpha);
            break;
          case 1:
            target.sub_(other, alpha);
            break;
          case 2:
            target.mul_(other);
            break;
          default:
            target.div_(other);
            break;
        }
      };
      break;
    }
  }
  if (leaves.empty()) op.expect_throw = false;
  op.desc = d.str();
  w.Run(op);
}

// apply_ with a callback that misbehaves for one leaf: a bad shape, a
// c10::Error, a view overlapping the leaf, a meta result; or behaves (t + 1,
// undefined, the leaf itself).
void GenApply(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  TensorDict target = dst;
  std::string tname = dst_name;
  if (Coin(rng, 0.25) && IsDict(dst, "next")) {
    target = dst.get_tensordict("next");
    tname = dst_name + ".next";
  } else if (Coin(rng, 0.25)) {
    target = FloatOnly(dst);
    tname = dst_name + ".exclude(non-float)";
  }
  const std::vector<LeafRef> leaves = Leaves(target);
  Op op;
  op.family = kApply;
  std::ostringstream d;
  d << tname << ".apply_(fn)";
  at::Tensor victim;   // the leaf the callback misbehaves for
  at::Tensor special;  // what it returns for it
  int kind = leaves.empty() ? 0 : static_cast<int>(Uniform(rng, 0, 6));
  if (kind != 0) {
    const LeafRef& l = Pick(rng, leaves);
    victim = l.tensor;
    d << "; for " << l.key.str() << ": ";
  }
  switch (kind) {
    case 0:
      d << " (valid: t + 1 everywhere)";
      break;
    case 1:
      special = RandT(rng, Cat(victim.sizes(), {2}), at::kFloat);
      d << "returns a bad shape " << ShapeStr(special.sizes());
      op.expect_throw = true;
      break;
    case 2:
      d << "throws a c10::Error";
      op.expect_throw = true;
      break;
    case 3:
      d << "returns an undefined tensor (valid)";
      break;
    case 4:
      if (kAliasedInputs && !victim.is_meta() && victim.size(0) > 1) {
        d << "returns t.narrow(0, 0, 1) (overlaps the leaf)";
      } else {
        kind = 6;
        d << "returns t itself (valid)";
      }
      break;
    case 5:
      if (!victim.is_meta()) {
        special = MetaT(victim.sizes(), victim.scalar_type());
        d << "returns a meta tensor";
      } else {
        kind = 6;
        d << "returns t itself (valid)";
      }
      break;
    default:
      d << "returns t itself (valid)";
      break;
  }
  const TensorDict::LeafFn fn = [victim, special,
                                 kind](const at::Tensor& t) -> at::Tensor {
    if (victim.defined() && t.is_same(victim)) {
      switch (kind) {
        case 1:
        case 5:
          return special;
        case 2:
          TORCH_CHECK(false,
                      "atomicity test: the callback fails for this leaf");
          return at::Tensor();  // unreachable
        case 3:
          return at::Tensor();
        case 4:
          return t.narrow(0, 0, 1);
        default:
          return t;
      }
    }
    if (t.scalar_type() == at::kBool) return t.logical_not();
    return t + 1;
  };
  op.desc = d.str();
  op.run = [target, fn] { target.apply_(fn); };
  w.Run(op);
}

namespace {

// A row (`b` = []) or a batch for the buffer.
TensorDict RbData(Rng& rng, const Shape& b) {
  TensorDict r{c10::IntArrayRef(b)};
  r.set("obs", RandT(rng, Cat(b, {3}), at::kFloat));
  r.set("act", RandT(rng, b, at::kLong));
  r.set({"next", "obs"}, RandT(rng, Cat(b, {3}), at::kFloat));
  r.set("done", RandT(rng, b, at::kBool));
  return r;
}

}  // namespace

// ReplayBuffer::add / extend: valid rows and batches; a missing or extra
// key, a wrong row shape or dtype, the wrong batch dims, a meta leaf, rows
// that are views of the storage.
void GenReplayBuffer(World& w) {
  Rng& rng = w.rng;
  if (!w.rb) {
    w.rb = std::make_unique<ReplayBuffer>(
        ReplayBufferOptions(kBufferCapacity).seed(1));
  }
  ReplayBuffer* rb = w.rb.get();
  const bool allocated = !rb->storage().empty();
  const bool extend = Coin(rng, 0.5);
  const int64_t n = Uniform(rng, 1, kBufferCapacity + 2);
  TensorDict data = RbData(rng, extend ? Shape{n} : Shape{});
  Op op;
  op.family = kReplayBuffer;
  std::ostringstream d;
  d << (extend ? "rb.extend(" : "rb.add(");
  bool check = false;
  // The first write defines the storage: keep it valid.
  switch (allocated ? Uniform(rng, 0, 8) : 0) {
    case 0:
    case 1:
      d << (extend ? "batch of " + std::to_string(n) : std::string("row"))
        << ", valid";
      check = true;
      break;
    case 2:
      data.erase("act");
      d << "missing act";
      op.expect_throw = true;
      break;
    case 3:
      data.set("extra", RandT(rng, Cat(data.batch_size(), {1}), at::kFloat));
      d << "extra key";
      op.expect_throw = true;
      break;
    case 4:
      data.set("obs", RandT(rng, Cat(data.batch_size(), {4}), at::kFloat));
      d << "obs with row shape [4]";
      op.expect_throw = true;
      break;
    case 5:
      data.set("act", RandT(rng, data.batch_size(), at::kFloat));
      d << "act as float";
      op.expect_throw = true;
      break;
    case 6:
      data = RbData(rng, extend ? Shape{} : Shape{2});
      d << "batch_size " << ShapeStr(data.batch_size());
      op.expect_throw = true;
      break;
    case 7:
      data.set("done", MetaT(data.batch_size(), at::kBool));  // the last leaf
      d << "done on meta (last leaf)";
      break;
    default: {
      if (!kAliasedInputs) break;
      const TensorDict st = rb->storage();
      if (extend) {
        const int64_t a = Uniform(rng, 0, kBufferCapacity - 1);
        const int64_t len = Uniform(rng, 1, kBufferCapacity - a);
        data = st.index({Slice(a, a + len)});
        d << "storage[Slice(" << a << "," << a + len << ")] (views; cursor "
          << rb->cursor() << ")";
      } else {
        const int64_t j = Uniform(rng, 0, kBufferCapacity - 1);
        data = st.index({TensorIndex(j)});
        d << "storage[" << j << "] (views; cursor " << rb->cursor() << ")";
      }
      check = true;
      break;
    }
  }
  d << ")";
  TensorDict expected;
  if (kCheckAliasedResults && check) {
    at::NoGradGuard no_grad;
    expected = data.clone();
  }
  auto written = std::make_shared<at::Tensor>();
  op.desc = d.str();
  op.run = [rb, data, extend, written] {
    if (extend) {
      *written = rb->extend(data);
    } else {
      *written = at::full({1}, rb->add(data), at::kLong);
    }
  };
  if (kCheckAliasedResults && check) {
    op.after_success = [rb, expected, extend, written]() -> std::string {
      const TensorDict st = rb->storage();
      const int64_t kept = written->size(0);
      std::ostringstream out;
      for (const auto& key : expected.keys(true, true)) {
        at::Tensor want = expected.get(key);
        want = extend ? want.narrow(0, want.size(0) - kept, kept)
                      : want.unsqueeze(0);
        const at::Tensor got = st.get(key).index_select(0, *written);
        if (!SameValues(got, want)) {
          out << "  key " << key.str()
              << ": the stored rows differ from the written values\n";
        }
      }
      const std::string o = out.str();
      return o.empty() ? o
                       : "the call succeeded but stored wrong values:\n" + o;
    };
  }
  RunOp(
      w.runner, [rb] { return rb->storage(); }, op,
      [rb] {
        return "size " + std::to_string(rb->size()) + ", cursor " +
               std::to_string(rb->cursor());
      });
}

// ===========================================================================
// The tests: one per family, over the same driver run
// ===========================================================================

// td[idx] = row / index_put_, lazy allocation.
TEST(Atomicity, IndexPut) { ExpectFamilyLeavesTheDictUnchanged(kIndexPut); }

// stack_out / cat_out into td[Slice(...)].
TEST(Atomicity, StackCatOut) { ExpectFamilyLeavesTheDictUnchanged(kStackCat); }

// add_ / sub_ / mul_ / div_.
TEST(Atomicity, Arithmetic) { ExpectFamilyLeavesTheDictUnchanged(kArith); }

// apply_ with a misbehaving callback.
TEST(Atomicity, ApplyInPlace) { ExpectFamilyLeavesTheDictUnchanged(kApply); }

// ReplayBuffer::add / extend.
TEST(Atomicity, ReplayBuffer) {
  ExpectFamilyLeavesTheDictUnchanged(kReplayBuffer);
}

}  // namespace tensordict_test::atomicity
