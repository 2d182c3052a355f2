// Internal: the sum and min segment trees behind PrioritizedSampler.
//
// Both are 8-ary (see `SegmentTree`). `set` is O(log N); the sum tree's
// prefix-sum search is O(log N) per query and walks a whole batch of queries
// level by level, as `refresh` walks a batch of updated leaves, so that the
// memory loads of different queries overlap (at capacity 1e6 the lower
// levels do not fit in cache).
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "rl/storage.h"

namespace tensordict {
namespace detail {

struct SumOp {
  static double identity() { return 0.0; }
  static double combine(double a, double b) { return a + b; }
};

// The least positive value (+inf when none): a leaf of 0 counts for
// nothing, so that the min tree can hold the masses as the sum tree does,
// and share its leaves.
struct MinPositiveOp {
  static double identity() { return std::numeric_limits<double>::infinity(); }
  static double combine(double a, double b) { return b > 0 && b < a ? b : a; }
};

/// An array of doubles (zeros_cpu's memory: a large one is fresh memory
/// advised to use huge pages, since random descents through a tree of 1e6
/// leaves otherwise miss the TLB at nearly every level; a large array of
/// zeros is not touched until used).
class NodeArray {
 public:
  NodeArray() = default;
  NodeArray(const NodeArray&) = delete;
  NodeArray& operator=(const NodeArray&) = delete;

  void allocate(size_t n, double value) {
    tensor_ = zeros_cpu({static_cast<int64_t>(std::max<size_t>(n, 1))},
                        at::kDouble, "a priority tree");
    data_ = tensor_.data_ptr<double>();
    n_ = n;
    if (value != 0.0) fill(value);
  }
  void fill(double value) { std::fill(data_, data_ + n_, value); }
  [[nodiscard]] double* data() { return data_; }
  [[nodiscard]] const double* data() const { return data_; }

 private:
  at::Tensor tensor_;
  double* data_ = nullptr;
  size_t n_ = 0;
};

/// A tree whose nodes are `Op` (sum or min) of their children. It is 8-ary:
/// a node's 8 children are one 64-byte cache line, so a walk at capacity 1e6
/// touches 7 lines instead of the 20 nodes of a binary tree (10 instead of
/// 28 at 10^8). The padding past the last leaf holds `Op::identity()`.
template <typename Op>
class SegmentTree {
 public:
  static constexpr int64_t kFanout = 8;

  /// `shared_leaves`: the leaf level of another tree of this capacity
  /// (padding included), which this tree reads and never writes: its
  /// owner sets the leaves, and this tree recomputes its own ancestors.
  explicit SegmentTree(int64_t capacity,
                       const double* shared_leaves = nullptr) {
    // levels_[0] is the root; the last level holds the leaves. Each level is
    // padded to a whole number of child groups (the padding stays the
    // identity).
    std::vector<int64_t> counts;
    for (int64_t n = std::max<int64_t>(capacity, 1);;
         n = (n + kFanout - 1) / kFanout) {
      counts.push_back(n);
      if (n == 1) break;
    }
    std::reverse(counts.begin(), counts.end());
    if (counts.size() == 1) counts.push_back(1);  // a root above one leaf
    offsets_.resize(counts.size() + 1);
    last_.resize(counts.size());
    offsets_[0] = 0;
    for (size_t d = 0; d < counts.size(); ++d) {
      // Level d starts on a cache line (the root level is padded to 8 too).
      const int64_t padded = (counts[d] + kFanout - 1) / kFanout * kFanout;
      offsets_[d + 1] = offsets_[d] + static_cast<size_t>(padded);
      last_[d] = counts[d] - 1;
    }
    const size_t inner = offsets_[counts.size() - 1];
    nodes_.allocate(shared_leaves != nullptr ? inner : offsets_.back(),
                    Op::identity());
    leaves_ = shared_leaves != nullptr ? const_cast<double*>(shared_leaves)
                                       : nodes_.data() + inner;
    writes_leaves_ = shared_leaves == nullptr;
  }

  /// The leaf level (padding included), to share with another tree.
  [[nodiscard]] const double* leaves() const { return leaves_; }
  /// Whether `adopt_leaves` takes `leaves`: float64, contiguous, one per
  /// leaf, and no padding (the capacity a multiple of 8).
  [[nodiscard]] bool can_adopt(const at::Tensor& leaves) const {
    const size_t d = last_.size() - 1;
    const auto n = static_cast<int64_t>(offsets_[d + 1] - offsets_[d]);
    return leaves.defined() && leaves.scalar_type() == at::kDouble &&
           leaves.is_contiguous() && leaves.numel() == n && last_[d] + 1 == n;
  }
  /// The leaves become `leaves` (can_adopt), as they are, in place of the
  /// tree's own (freed): another copy of them, such as a mapped file,
  /// which this tree then writes. The ancestors are the identity until
  /// `rebuild()`. A tree sharing the old leaves must `share_leaves` anew.
  void adopt_leaves(at::Tensor leaves) {
    nodes_.allocate(offsets_[last_.size() - 1], Op::identity());
    leaves_ = leaves.data_ptr<double>();
    adopted_ = std::move(leaves);
    writes_leaves_ = true;
  }
  /// Reads `leaves` (another tree's `leaves()`) from now on.
  void share_leaves(const double* leaves) {
    leaves_ = const_cast<double*>(leaves);
  }

  /// Leaf `i` := `v` (a tree that shares its leaves leaves them to their
  /// owner), then every ancestor recomputed from its children (no
  /// accumulated rounding drift). O(log N).
  void set(int64_t i, double v) {
    size_t d = last_.size() - 1;
    auto j = static_cast<size_t>(i);
    if (writes_leaves_) level(d)[j] = v;
    while (d > 0) {
      --d;
      j /= kFanout;
      level(d)[j] = reduce(level(d + 1) + j * kFanout);
    }
  }
  [[nodiscard]] double get(int64_t i) const {
    return level(last_.size() - 1)[static_cast<size_t>(i)];
  }
  /// Leaf `i` := `v` alone (not in a tree that shares its leaves);
  /// `rebuild()` then recomputes the ancestors.
  void set_leaf(int64_t i, double v) {
    if (writes_leaves_) level(last_.size() - 1)[static_cast<size_t>(i)] = v;
  }
  /// The ancestors of leaves `leaf[0, n)` (set by `set_leaf`) recomputed,
  /// one level at a time for every leaf, so that the cache misses of
  /// different leaves overlap: what `set` of each leaf in turn gives.
  void refresh(const int64_t* leaf, int64_t n) {
    node_.assign(leaf, leaf + n);
    for (size_t d = last_.size() - 1; d > 0; --d) {
      const double* c = level(d);
      double* parent = level(d - 1);
      for (int64_t& j : node_) {
        j /= kFanout;
        parent[j] = reduce(c + j * kFanout);
      }
    }
  }
  /// Every inner node recomputed from its children, level by level from the
  /// leaves up: O(N), in sequential passes, for many leaves set at once.
  void rebuild() {
    for (size_t d = last_.size() - 1; d > 0; --d) {
      const double* c = level(d);
      double* parent = level(d - 1);
      const auto groups = static_cast<size_t>(last_[d - 1] + 1);
      for (size_t j = 0; j < groups; ++j) parent[j] = reduce(c + j * kFanout);
    }
  }
  [[nodiscard]] double root() const { return nodes_.data()[0]; }
  /// Every node the identity (the leaves too, unless shared or adopted:
  /// adopted leaves are a file that its owner resets, as
  /// `TorchRLFiles::clear_masses` does).
  void reset() { nodes_.fill(Op::identity()); }

  /// (Sum trees.) For each `mass[q]` in `[0, root())`, the smallest leaf `i` whose
  /// inclusive prefix sum exceeds it, written to `out[q]`. Leaves of
  /// priority 0 are never returned, except for a mass at or past the total
  /// (rounding), which gives the last leaf (index capacity - 1), whatever
  /// its priority: the caller clamps it to its last written row. The
  /// queries walk down level by level together, so that their cache misses
  /// overlap. O(log N) per query.
  void find_prefix(double* mass, int64_t n, int64_t* out) const {
    for (int64_t q = 0; q < n; ++q) out[q] = 0;
    const size_t depth = last_.size();
    for (size_t d = 1; d < depth; ++d) {
      const double* nodes = level(d);
      for (int64_t q = 0; q < n; ++q) {
        const double* c = nodes + out[q] * kFanout;
        const double m = mass[q];
        // Children before the chosen one: those whose running sum is <= m
        // (the running sums only grow). Branch-free.
        double acc = 0, before = 0;
        int64_t k = 0;
        for (int64_t j = 0; j + 1 < kFanout; ++j) {
          acc += c[j];
          const bool skip = acc <= m;
          k += skip ? 1 : 0;
          before = skip ? acc : before;
        }
        mass[q] = m - before;
        // A mass at or past the total (rounding) must not walk into the
        // padding, whose children lie past the next level's end.
        out[q] = std::min(out[q] * kFanout + k, last_[d]);
        if (d + 1 < depth) __builtin_prefetch(level(d + 1) + out[q] * kFanout);
      }
    }
  }

 private:
  /// `Op` over the 8 children at `c`, in order.
  static double reduce(const double* c) {
    double r = Op::identity();
    for (int64_t k = 0; k < kFanout; ++k) r = Op::combine(r, c[k]);
    return r;
  }
  [[nodiscard]] double* level(size_t d) {
    return d + 1 == last_.size() ? leaves_ : nodes_.data() + offsets_[d];
  }
  [[nodiscard]] const double* level(size_t d) const {
    return d + 1 == last_.size() ? leaves_ : nodes_.data() + offsets_[d];
  }

  NodeArray nodes_;  // the levels above the leaves, root first; then the
                     // leaves, unless shared or adopted
  double* leaves_ = nullptr;   // the leaf level (in nodes_, shared or adopted)
  bool writes_leaves_ = true;  // not shared
  at::Tensor adopted_;         // adopt_leaves's, kept alive
  std::vector<size_t> offsets_;  // level d is nodes_[offsets_[d]...]
  std::vector<int64_t> last_;    // per level: the last node that is not padding
  std::vector<int64_t> node_;    // refresh's nodes, kept to reuse the memory
};

using SumSegmentTree = SegmentTree<SumOp>;
using MinSegmentTree = SegmentTree<MinPositiveOp>;

}  // namespace detail
}  // namespace tensordict
