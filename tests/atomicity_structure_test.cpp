// Atomicity of the operations that add, remove, rename or replace keys:
// set, update_ / update, rename_key_ and erase. A failed call must leave the
// dict exactly as it was; the seeded driver, its snapshots and the
// reproduction steps are in atomicity_driver.h.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "atomicity_driver.h"

namespace tensordict_test::atomicity {

// ===========================================================================
// Op generators
// ===========================================================================

// set(): valid replacements and new keys; bad leading dims; a key through a
// tensor; a tensor where a dict lives and the reverse; a sub-dict with a bad
// batch size; a sub-dict set into its own descendant (a cycle); undefined.
void GenSet(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  const Shape batch = td.batch_size().vec();
  const int64_t n0 = batch[0];
  const std::vector<LeafRef> leaves = Leaves(td);
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  const bool has_next = IsDict(td, "next");
  Op op;
  op.family = kSet;
  std::ostringstream d;
  switch (Uniform(rng, 0, 9)) {
    case 0: {  // replace a leaf with a valid tensor
      if (leaves.empty()) return;
      const LeafRef& l = Pick(rng, leaves);
      const at::Tensor v = RandT(rng, l.tensor.sizes(), l.tensor.scalar_type());
      d << "td.set(" << l.key.str() << ", new " << ShapeStr(v.sizes())
        << ") (valid)";
      op.run = [td, k = l.key, v] { td.set(k, v); };
      break;
    }
    case 1: {  // new key
      const std::string n = w.NewKey("s");
      const NestedKey k = Uniform(rng, 0, 2) == 0 ? NestedKey(n)
                          : (has_next && Coin(rng, 0.5))
                              ? NestedKey({"next", n})
                              : NestedKey({n, "x"});
      const at::Tensor v = RandT(rng, Cat(batch, {2}), at::kFloat);
      d << "td.set(" << k.str() << ", " << ShapeStr(v.sizes())
        << ") (valid, new key)";
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 2: {  // bad leading dims
      NestedKey k("a");
      switch (Uniform(rng, 0, 2)) {
        case 0:
          if (!leaves.empty()) k = Pick(rng, leaves).key;
          break;
        case 1:
          k = NestedKey(w.NewKey("s"));
          break;
        default:
          k = NestedKey(
              {w.NewKey("sub"), "x"});  // the path must not be created
          break;
      }
      Shape shape = Cat({n0 + 1}, c10::IntArrayRef(batch).slice(1));
      shape.push_back(2);
      if (Coin(rng, 0.2)) shape = {};  // fewer dims than the batch
      const at::Tensor v = RandT(rng, shape, at::kFloat);
      d << "td.set(" << k.str() << ", " << ShapeStr(v.sizes())
        << ") (bad leading dims for batch " << ShapeStr(batch) << ")";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 3: {  // a key through a tensor
      if (top_leaves.empty()) return;
      const NestedKey k = Pick(rng, top_leaves).join(NestedKey("x"));
      const at::Tensor v = RandT(rng, batch, at::kFloat);
      d << "td.set(" << k.str() << ", ...) (an intermediate is a tensor)";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 4: {  // tensor where a dict lives
      if (!has_next) return;
      const at::Tensor v = RandT(rng, batch, at::kFloat);
      d << "td.set(next, tensor) (a sub-dict lives there)";
      op.expect_throw = true;
      op.run = [td, v] { td.set("next", v); };
      break;
    }
    case 5: {  // dict where a tensor lives
      if (top_leaves.empty()) return;
      const NestedKey k = Pick(rng, top_leaves);
      const TensorDict v{c10::IntArrayRef(batch)};
      d << "td.set(" << k.str() << ", TensorDict) (a tensor lives there)";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 6: {  // sub-dict with a bad batch size
      const Shape bad = Coin(rng, 0.5) ? Shape{n0 + 1} : Shape{};
      const TensorDict v({{"x", RandT(rng, Cat(bad, {1}), at::kFloat)}},
                         c10::IntArrayRef(bad));
      const std::string k = w.NewKey("sub");
      d << "td.set(" << k << ", TensorDict batch " << ShapeStr(bad) << ")";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 7: {  // a sub-dict into its own descendant
      if (!has_next) return;
      const std::string n = w.NewKey("loop");
      const bool deep = Coin(rng, 0.5);
      const NestedKey k =
          deep ? NestedKey({"next", n, "deep"}) : NestedKey({"next", n});
      d << "td.set(" << k.str() << ", td.get_tensordict(next)) (a cycle)";
      op.expect_throw = true;
      op.run = [td, k] { td.set(k, td.get_tensordict("next")); };
      // On success the dict contains itself: break the cycle before anything
      // walks it (keys(true) would recurse forever), then rebuild the dict.
      op.after_success = [&w, td, n] {
        try {
          td.erase({"next", n});
        } catch (const c10::Error&) {
        }
        w.recreate = true;
        return std::string(
            "the call created a reference cycle (next contains itself); "
            "broken by erasing it");
      };
      break;
    }
    case 8: {  // undefined tensor
      const std::string k = w.NewKey("u");
      d << "td.set(" << k << ", undefined tensor)";
      op.expect_throw = true;
      op.run = [td, k] { td.set(k, at::Tensor()); };
      break;
    }
    default: {  // valid sub-dict (a clone)
      const std::string k = w.NewKey("sub");
      const TensorDict v = has_next ? td.get_tensordict("next").clone()
                                    : TensorDict(c10::IntArrayRef(batch));
      d << "td.set(" << k << ", clone of next) (valid)";
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
  }
  op.desc = d.str();
  w.Run(op);
}

// update_ (in place): a key the dict lacks, a bad shape, a tensor where a
// dict lives, a source that overlaps the destination, a meta source, castable
// dtypes. update (structural): valid entries first, then a tensor where a
// dict lives, a dict where a tensor lives, bad leading dims, or a sub-dict set
// into itself.
void GenUpdate(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const size_t bd = batch.size();
  Op op;
  op.family = kUpdate;
  std::ostringstream d;
  TensorDict other{c10::IntArrayRef(batch)};
  if (Coin(rng, 0.75)) {
    d << dst_name << ".update_(other)";
    for (const auto& l : Leaves(dst)) {
      if (Coin(rng, 0.75)) {
        other.set(l.key, RandT(rng, l.tensor.sizes(), l.tensor.scalar_type()));
      }
    }
    const std::vector<NestedKey> keys = other.keys(true, true);
    switch (Uniform(rng, 0, 8)) {
      case 0:
      case 1:
        d << " (valid)";
        break;
      case 2: {  // a key the dict lacks
        const std::string n = w.NewKey("nope");
        const NestedKey k =
            Coin(rng, 0.5) ? NestedKey(n) : NestedKey({"next", n});
        if (IsLeaf(other, "next")) break;
        other.set(k, RandT(rng, Cat(batch, {1}), at::kFloat));
        d << "; other has " << k.str() << ", which the dict lacks";
        op.expect_throw = true;
        break;
      }
      case 3: {  // a bad shape
        if (keys.empty()) break;
        const NestedKey k = Pick(rng, keys);
        const at::Tensor t = other.get(k);
        other.set(k, RandT(rng, Cat(batch, BadTrailing(t.sizes().slice(bd))),
                           t.scalar_type()));
        d << "; bad shape at " << k.str();
        op.expect_throw = true;
        break;
      }
      case 4: {  // a tensor where a dict lives
        if (!IsDict(dst, "next")) break;
        if (other.contains("next")) other.erase("next");
        other.set("next", RandT(rng, batch, at::kFloat));
        d << "; other has a tensor at next";
        op.expect_throw = true;
        break;
      }
      case 5: {  // a source that overlaps its destination
        if (!kAliasedInputs) break;
        std::vector<NestedKey> ok;
        for (const auto& k : keys) {
          const at::Tensor t = dst.get(k);
          if (!t.is_meta() && t.size(0) > 1) ok.push_back(k);
        }
        if (ok.empty()) break;
        const NestedKey k = Pick(rng, ok);
        const at::Tensor t = dst.get(k);
        other.set(k, t.narrow(0, 0, 1).expand(t.sizes()));
        d << "; other's " << k.str() << " is dst's row 0 expanded (overlaps)";
        break;
      }
      case 6: {  // a meta source into a CPU leaf
        std::vector<NestedKey> cpu;
        for (const auto& k : keys) {
          if (!dst.get(k).is_meta()) cpu.push_back(k);
        }
        if (cpu.empty()) break;
        const NestedKey k = Pick(rng, cpu);
        other.set(k, MetaT(other.get(k).sizes(), other.get(k).scalar_type()));
        d << "; meta source at " << k.str();
        break;
      }
      default: {  // other dtypes (update_ casts like copy_)
        for (const auto& k : keys) {
          other.set(k, RandT(rng, other.get(k).sizes(), at::kFloat));
        }
        d << "; float sources everywhere (valid)";
        break;
      }
    }
    op.run = [dst, other] { dst.update_(other); };
  } else {
    d << dst_name << ".update(other)";
    // Valid entries first: a later failure must undo them.
    other.set(w.NewKey("new"), RandT(rng, Cat(batch, {2}), at::kFloat));
    if (IsLeaf(dst, "a")) {
      other.set("a", RandT(rng, dst.get("a").sizes(), at::kFloat));
    }
    switch (Uniform(rng, 0, 4)) {
      case 0:
        d << " (valid)";
        break;
      case 1:
        if (!IsDict(dst, "next")) break;
        other.set(w.NewKey("late"), RandT(rng, batch, at::kFloat));
        other.set("next", RandT(rng, batch, at::kFloat));
        d << "; other has a tensor at next (a sub-dict here)";
        op.expect_throw = true;
        break;
      case 2:
        if (!IsLeaf(dst, "i")) break;
        other.set({"i", "z"}, RandT(rng, batch, at::kFloat));
        d << "; other has a sub-dict at i (a tensor here)";
        op.expect_throw = true;
        break;
      case 3: {
        Shape bad = batch;
        bad[0] += 1;
        TensorDict o{c10::IntArrayRef(bad)};
        o.set(w.NewKey("new"), RandT(rng, Cat(bad, {2}), at::kFloat));
        other = o;
        d << "; other has batch " << ShapeStr(bad);
        op.expect_throw = true;
        break;
      }
      default: {
        if (!IsDict(dst, "next")) break;
        const std::string n = w.NewKey("loop");
        TensorDict inner{c10::IntArrayRef(batch)};
        inner.set(n, dst.get_tensordict("next"));
        other.set("next", inner);
        d << "; other = {next: {" << n << ": dst's next}} (a cycle)";
        op.expect_throw = true;
        op.after_success = [&w, dst, n] {
          try {
            dst.get_tensordict("next").erase(n);
          } catch (const c10::Error&) {
          }
          w.recreate = true;
          return std::string(
              "the call created a reference cycle; broken by erasing it");
        };
        break;
      }
    }
    op.run = [dst, other] { dst.update(other); };
  }
  op.desc = d.str();
  w.Run(op);
}

// rename_key_: to a new key, a nested new key, an existing key, a key inside
// the old one, a key through a tensor, an ancestor of the old key; a missing
// old key.
void GenRename(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  const std::vector<NestedKey> keys = td.keys(true);
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  Op op;
  op.family = kRename;
  const bool missing = keys.empty() || Coin(rng, 0.15);
  const NestedKey old_key =
      missing ? NestedKey(w.NewKey("missing")) : Pick(rng, keys);
  op.expect_throw = missing;
  NestedKey new_key(w.NewKey("renamed"));
  switch (Uniform(rng, 0, 5)) {
    case 0:
      break;
    case 1:
      if (IsDict(td, "next"))
        new_key = NestedKey({"next", w.NewKey("renamed")});
      break;
    case 2:
      if (keys.size() > 1) new_key = Pick(rng, keys);  // replaces it
      break;
    case 3:
      new_key = old_key.join(NestedKey("x"));
      op.expect_throw = true;
      break;
    case 4:
      if (top_leaves.empty()) break;
      new_key = Pick(rng, top_leaves).join(NestedKey("x"));
      op.expect_throw = true;
      break;
    default:
      if (old_key.is_nested()) new_key = NestedKey(old_key.front());
      break;
  }
  op.desc = "td.rename_key_(" + old_key.str() + ", " + new_key.str() + ")";
  op.run = [td, old_key, new_key] { td.rename_key_(old_key, new_key); };
  w.Run(op);
}

// erase: missing keys (top-level, nested, through a tensor, under a missing
// parent), or (rarely) an existing key.
void GenErase(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  Op op;
  op.family = kErase;
  op.expect_throw = true;
  NestedKey key(w.NewKey("missing"));
  switch (Uniform(rng, 0, 7)) {
    case 0:
    case 1:
      break;
    case 2:
      key = NestedKey({"next", w.NewKey("missing")});
      break;
    case 3:
      if (!top_leaves.empty()) key = Pick(rng, top_leaves).join(NestedKey("x"));
      break;
    case 4:
      key = NestedKey({w.NewKey("missing"), "x"});
      break;
    case 5:
      // A path through the leaf ("next", "obs"), unless earlier ops turned
      // it into a sub-dict holding "x".
      key = NestedKey({"next", "obs", "x"});
      if (td.contains(key)) op.expect_throw = false;
      break;
    default: {
      const auto keys = td.keys(true);
      if (keys.empty()) break;
      key = Pick(rng, keys);
      op.expect_throw = false;
      break;
    }
  }
  op.desc = "td.erase(" + key.str() + ")";
  op.run = [td, key] { td.erase(key); };
  w.Run(op);
}

// ===========================================================================
// The tests: one per family, over the same driver run
// ===========================================================================

// set(): leading dims, key conflicts, cycles.
TEST(Atomicity, Set) { ExpectFamilyLeavesTheDictUnchanged(kSet); }

// update_ / update.
TEST(Atomicity, Update) { ExpectFamilyLeavesTheDictUnchanged(kUpdate); }

// rename_key_.
TEST(Atomicity, RenameKey) { ExpectFamilyLeavesTheDictUnchanged(kRename); }

// erase.
TEST(Atomicity, Erase) { ExpectFamilyLeavesTheDictUnchanged(kErase); }

}  // namespace tensordict_test::atomicity
