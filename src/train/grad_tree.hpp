// The fixed summation tree of a step's gradient. A step's micro-batches are the leaves 0..n-1;
// node [begin, end) sums node [begin, mid) + node [mid, end), mid = begin + (end - begin) / 2,
// element by element in float. One process and N ranks add the same numbers in the same order,
// so the step's gradient has the same bits for any number of ranks: rank r computes the leaves
// rank_leaves(n, r, N) and the largest nodes they cover (covering_nodes), all ranks exchange those
// sums, and each completes the tree the same way (sum_tree with the known nodes).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace okapi::train {

struct LeafRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const LeafRange&) const = default;
};

// Rank `rank` of `ranks` takes a contiguous share of the leaves (the first ones one more when
// they do not divide evenly). ranks <= leaves.
LeafRange rank_leaves(int64_t leaves, int rank, int ranks);

// The largest tree nodes inside `range`, left to right (they partition it).
std::vector<LeafRange> covering_nodes(int64_t leaves, LeafRange range);

// A node whose sum is already known (computed by this or another rank), and where it is.
struct KnownNode {
  LeafRange node;
  const float* sum;
};

class GradientTree {
 public:
  // leaf(i, out) writes leaf i's gradient into `out` (zeroed first by the caller's leaf function).
  using LeafFn = std::function<void(int64_t leaf, std::span<float> out)>;
  explicit GradientTree(size_t width) : width_(width) {}

  // The sum of node `node` into `out` (width floats): known nodes are read, other leaves computed.
  void sum(LeafRange node, std::span<const KnownNode> known, const LeafFn& leaf, std::span<float> out);

 private:
  const float* sum_node(LeafRange node, std::span<const KnownNode> known, const LeafFn& leaf,
                        float* out, size_t depth);
  size_t width_;
  std::vector<std::vector<float>> scratch_;  // one buffer per tree depth (right children)
};

}  // namespace okapi::train
