// Internal: the sum and min segment trees behind PrioritizedSampler.
//
// Both are complete binary trees stored in one array (node 1 is the root,
// node k has children 2k and 2k+1, leaf i is node `leaves + i`), with a
// power-of-two number of leaves >= capacity. `set` is O(log N); the sum
// tree's prefix-sum search is O(log N) per query and walks a whole batch of
// queries level by level, so that the memory loads of different queries
// overlap (at capacity 1e6 the lower levels do not fit in cache).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace tensordict {
namespace detail {

template <typename Op>
class SegmentTree {
 public:
  explicit SegmentTree(int64_t capacity) {
    leaves_ = 1;
    while (leaves_ < capacity) leaves_ *= 2;
    depth_ = 0;
    while ((int64_t{1} << depth_) < leaves_) ++depth_;
    tree_.assign(static_cast<size_t>(2 * leaves_), Op::identity());
  }

  /// Leaf `i` := `v`, then every ancestor recomputed from its children (no
  /// accumulated rounding drift).
  void set(int64_t i, double v) {
    size_t k = static_cast<size_t>(leaves_ + i);
    tree_[k] = v;
    for (k /= 2; k >= 1; k /= 2) {
      tree_[k] = Op::combine(tree_[2 * k], tree_[2 * k + 1]);
    }
  }
  [[nodiscard]] double get(int64_t i) const {
    return tree_[static_cast<size_t>(leaves_ + i)];
  }
  /// The reduction over every leaf.
  [[nodiscard]] double root() const { return tree_[1]; }
  /// Every leaf back to the identity.
  void reset() { std::fill(tree_.begin(), tree_.end(), Op::identity()); }

 protected:
  int64_t leaves_ = 1;
  int depth_ = 0;
  std::vector<double> tree_;
};

struct SumOp {
  static double identity() { return 0.0; }
  static double combine(double a, double b) { return a + b; }
};
struct MinOp {
  static double identity() { return std::numeric_limits<double>::infinity(); }
  static double combine(double a, double b) { return a < b ? a : b; }
};

class SumSegmentTree : public SegmentTree<SumOp> {
 public:
  using SegmentTree<SumOp>::SegmentTree;

  /// For each `mass[q]` in `[0, root())`, the smallest leaf `i` whose
  /// inclusive prefix sum exceeds it, written to `out[q]` (leaves of
  /// priority 0 are never returned, except for a mass at or past the total,
  /// which the caller clamps). `node` is scratch space of `n` entries.
  void find_prefix(double* mass, int64_t n, int64_t* node) const {
    for (int64_t q = 0; q < n; ++q) node[q] = 1;
    for (int level = 0; level < depth_; ++level) {
      for (int64_t q = 0; q < n; ++q) {
        const int64_t left = 2 * node[q];
        const double s = tree_[static_cast<size_t>(left)];
        const bool go_right = mass[q] >= s;
        mass[q] -= go_right ? s : 0.0;
        node[q] = left + (go_right ? 1 : 0);
      }
    }
    for (int64_t q = 0; q < n; ++q) node[q] -= leaves_;
  }
};

using MinSegmentTree = SegmentTree<MinOp>;

}  // namespace detail
}  // namespace tensordict
