// Internal: the sum and min segment trees behind PrioritizedSampler.
//
// The min tree is a complete binary tree stored in one array (node 1 is the
// root, node k has children 2k and 2k+1, leaf i is node `leaves + i`), with a
// power-of-two number of leaves >= capacity. The sum tree is 8-ary (see
// below). `set` is O(log N) in both; the sum tree's prefix-sum search is
// O(log N) per query and walks a whole batch of queries level by level, so
// that the memory loads of different queries overlap (at capacity 1e6 the
// lower levels do not fit in cache).
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
  std::vector<double> tree_;
};

struct MinOp {
  static double identity() { return std::numeric_limits<double>::infinity(); }
  static double combine(double a, double b) { return a < b ? a : b; }
};

/// The sum tree is 8-ary: a node's 8 children are one 64-byte cache line, so
/// a prefix-sum search at capacity 1e6 touches 7 lines per query instead of
/// the 20 nodes of a binary tree.
class SumSegmentTree {
 public:
  static constexpr int64_t kFanout = 8;

  explicit SumSegmentTree(int64_t capacity) {
    // levels_[0] is the root; the last level holds the leaves. Each level is
    // padded to a whole number of child groups (the padding stays 0).
    std::vector<int64_t> counts;
    for (int64_t n = std::max<int64_t>(capacity, 1);;
         n = (n + kFanout - 1) / kFanout) {
      counts.push_back(n);
      if (n == 1) break;
    }
    std::reverse(counts.begin(), counts.end());
    if (counts.size() == 1) counts.push_back(1);  // a root above one leaf
    levels_.resize(counts.size());
    last_.resize(counts.size());
    for (size_t d = 0; d < counts.size(); ++d) {
      const int64_t padded =
          d == 0 ? 1 : (counts[d] + kFanout - 1) / kFanout * kFanout;
      levels_[d].assign(static_cast<size_t>(padded), 0.0);
      last_[d] = counts[d] - 1;
    }
  }

  /// Leaf `i` := `v`, then every ancestor recomputed from its children (no
  /// accumulated rounding drift). O(log N).
  void set(int64_t i, double v) {
    size_t d = levels_.size() - 1;
    auto j = static_cast<size_t>(i);
    levels_[d][j] = v;
    while (d > 0) {
      const size_t base = j / kFanout * kFanout;
      const double* c = &levels_[d][base];
      double s = 0;
      for (int64_t k = 0; k < kFanout; ++k) s += c[k];
      --d;
      j /= kFanout;
      levels_[d][j] = s;
    }
  }
  [[nodiscard]] double get(int64_t i) const {
    return levels_.back()[static_cast<size_t>(i)];
  }
  [[nodiscard]] double root() const { return levels_[0][0]; }
  void reset() {
    for (auto& l : levels_) std::fill(l.begin(), l.end(), 0.0);
  }

  /// For each `mass[q]` in `[0, root())`, the smallest leaf `i` whose
  /// inclusive prefix sum exceeds it, written to `out[q]`. Leaves of
  /// priority 0 are never returned, except for a mass at or past the total
  /// (rounding), which gives the last leaf (index capacity - 1), whatever
  /// its priority: the caller clamps it to its last written row. The queries walk down level by level
  /// together, so that their cache misses overlap. O(log N) per query.
  void find_prefix(double* mass, int64_t n, int64_t* out) const {
    for (int64_t q = 0; q < n; ++q) out[q] = 0;
    for (size_t d = 1; d < levels_.size(); ++d) {
      const double* level = levels_[d].data();
      for (int64_t q = 0; q < n; ++q) {
        const double* c = level + out[q] * kFanout;
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
        if (d + 1 < levels_.size()) {
          __builtin_prefetch(levels_[d + 1].data() + out[q] * kFanout);
        }
      }
    }
  }

 private:
  std::vector<std::vector<double>> levels_;
  std::vector<int64_t> last_;  // per level: the last node that is not padding
};

using MinSegmentTree = SegmentTree<MinOp>;

}  // namespace detail
}  // namespace tensordict
