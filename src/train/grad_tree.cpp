#include "train/grad_tree.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace okapi::train {

LeafRange rank_leaves(int64_t leaves, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks || leaves < ranks)
    throw_error("rank {} of {} cannot take a share of {} micro-batches", rank, ranks, leaves);
  const int64_t base = leaves / ranks, extra = leaves % ranks;
  const auto start = [&](int64_t r) { return r * base + std::min(r, extra); };
  return {start(rank), start(rank + 1)};
}

namespace {

void collect_nodes(LeafRange node, LeafRange range, std::vector<LeafRange>& out) {
  if (node.end <= range.begin || node.begin >= range.end) return;
  if (node.begin >= range.begin && node.end <= range.end) {
    out.push_back(node);
    return;
  }
  const int64_t mid = node.begin + node.size() / 2;
  collect_nodes({node.begin, mid}, range, out);
  collect_nodes({mid, node.end}, range, out);
}

}  // namespace

std::vector<LeafRange> covering_nodes(int64_t leaves, LeafRange range) {
  std::vector<LeafRange> nodes;
  if (leaves > 0 && range.size() > 0) collect_nodes({0, leaves}, range, nodes);
  return nodes;
}

void GradientTree::sum(LeafRange node, std::span<const KnownNode> known, const LeafFn& leaf,
                       std::span<float> out) {
  if (out.size() != width_) throw_error("gradient tree: {} floats for a width of {}", out.size(), width_);
  // One right-child buffer per level below the node, sized before the recursion holds pointers.
  size_t depth = 0;
  for (int64_t span = node.size(); span > 1; span = span - span / 2) ++depth;
  if (scratch_.size() < depth) scratch_.resize(depth);
  const float* result = sum_node(node, known, leaf, out.data(), 0);
  if (result != out.data()) std::copy(result, result + width_, out.data());
}

const float* GradientTree::sum_node(LeafRange node, std::span<const KnownNode> known,
                                    const LeafFn& leaf, float* out, size_t depth) {
  for (const KnownNode& k : known)
    if (k.node == node) return k.sum;
  if (node.size() == 1) {
    leaf(node.begin, std::span<float>(out, width_));
    return out;
  }
  std::vector<float>& right_buffer = scratch_[depth];
  right_buffer.resize(width_);
  const int64_t mid = node.begin + node.size() / 2;
  const float* left = sum_node({node.begin, mid}, known, leaf, out, depth + 1);
  const float* right = sum_node({mid, node.end}, known, leaf, right_buffer.data(), depth + 1);
  for (size_t i = 0; i < width_; ++i) out[i] = left[i] + right[i];
  return out;
}

}  // namespace okapi::train
