// The fixed gradient tree (train/grad_tree.hpp): any split of the leaves over ranks, each rank
// summing its covering nodes and one completing the tree from all of them, gives the bits of one
// process summing every leaf, for every leaf count and rank count (ranks <= leaves).
#include "train/grad_tree.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.hpp"

namespace okapi::train {
namespace {

constexpr size_t kWidth = 37;

// Leaf values spread over many magnitudes, so that a different summation order changes bits.
std::vector<std::vector<float>> random_leaves(int64_t leaves, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<std::vector<float>> values(static_cast<size_t>(leaves), std::vector<float>(kWidth));
  for (auto& leaf : values)
    for (float& v : leaf) v = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

TEST(GradTree, RankLeavesPartitionContiguously) {
  for (int64_t leaves = 1; leaves <= 12; ++leaves) {
    for (int ranks = 1; ranks <= leaves; ++ranks) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const LeafRange range = rank_leaves(leaves, r, ranks);
        EXPECT_EQ(range.begin, next);
        EXPECT_GE(range.size(), leaves / ranks);
        EXPECT_LE(range.size(), leaves / ranks + 1);
        next = range.end;
      }
      EXPECT_EQ(next, leaves);
    }
  }
  EXPECT_THROW(rank_leaves(2, 0, 3), Error);
}

TEST(GradTree, CoveringNodesAreTreeNodesThatPartitionTheRange) {
  EXPECT_EQ(covering_nodes(4, {0, 2}), (std::vector<LeafRange>{{0, 2}}));
  EXPECT_EQ(covering_nodes(4, {0, 4}), (std::vector<LeafRange>{{0, 4}}));
  // [0,3) splits as [0,1) + [1,3): leaves 0..1 are two nodes, leaf 2 one.
  EXPECT_EQ(covering_nodes(3, {0, 2}), (std::vector<LeafRange>{{0, 1}, {1, 2}}));
  EXPECT_EQ(covering_nodes(3, {2, 3}), (std::vector<LeafRange>{{2, 3}}));
  EXPECT_EQ(covering_nodes(8, {1, 7}), (std::vector<LeafRange>{{1, 2}, {2, 4}, {4, 6}, {6, 7}}));
}

TEST(GradTree, AnySplitOverRanksGivesTheBitsOfOneProcess) {
  for (int64_t leaves = 1; leaves <= 9; ++leaves) {
    const auto values = random_leaves(leaves, static_cast<uint32_t>(leaves));
    int computed = 0;
    const GradientTree::LeafFn leaf = [&](int64_t i, std::span<float> out) {
      ++computed;
      std::memcpy(out.data(), values[static_cast<size_t>(i)].data(), kWidth * sizeof(float));
    };
    GradientTree one(kWidth);
    std::vector<float> want(kWidth);
    one.sum({0, leaves}, {}, leaf, want);
    EXPECT_EQ(computed, leaves);
    // The tree's order differs from a left-to-right sum (else this test would not see a bad split).
    if (leaves == 7) {
      std::vector<float> sequential(kWidth, 0.0f);
      for (const auto& v : values)
        for (size_t i = 0; i < kWidth; ++i) sequential[i] += v[i];
      EXPECT_NE(sequential, want);
    }
    for (int ranks = 2; ranks <= leaves; ++ranks) {
      // Each rank's node sums, as the exchange delivers them to every rank.
      std::vector<std::vector<float>> sums;
      std::vector<LeafRange> nodes;
      for (int r = 0; r < ranks; ++r) {
        GradientTree mine(kWidth);
        for (const LeafRange& node : covering_nodes(leaves, rank_leaves(leaves, r, ranks))) {
          sums.emplace_back(kWidth);
          mine.sum(node, {}, leaf, sums.back());
          nodes.push_back(node);
        }
      }
      std::vector<KnownNode> known;
      for (size_t k = 0; k < nodes.size(); ++k) known.push_back({nodes[k], sums[k].data()});
      const GradientTree::LeafFn none = [](int64_t, std::span<float>) { FAIL() << "a leaf was not covered"; };
      GradientTree complete(kWidth);
      std::vector<float> got(kWidth);
      complete.sum({0, leaves}, known, none, got);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), kWidth * sizeof(float)), 0)
          << leaves << " leaves over " << ranks << " ranks";
    }
  }
}

}  // namespace
}  // namespace okapi::train
