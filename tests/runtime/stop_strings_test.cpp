// Stop strings: text that could still become a stop string is held back, the text before the
// first stop string is all that comes out, and pieces may split a stop string anywhere.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/stop_strings.hpp"

namespace okapi::runtime {
namespace {

std::string feed(StopStrings& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += s.push(p);
  return out + s.flush();
}

TEST(StopStrings, NoStopsPassEverything) {
  StopStrings s;
  EXPECT_EQ(feed(s, {"Once ", "upon"}), "Once upon");
  EXPECT_FALSE(s.matched());
}

TEST(StopStrings, HoldsBackAPossibleStart) {
  StopStrings s({"The end"});
  EXPECT_EQ(s.push("happy. Th"), "happy. ");
  EXPECT_EQ(s.push("e"), "");
  EXPECT_EQ(s.push("y ran"), "They ran");
  EXPECT_EQ(s.flush(), "");
  EXPECT_FALSE(s.matched());
}

TEST(StopStrings, StopSplitAcrossPieces) {
  StopStrings s({"The end"});
  EXPECT_EQ(feed(s, {"happy. T", "he e", "nd. More"}), "happy. ");
  EXPECT_TRUE(s.matched());
  EXPECT_EQ(s.matched_stop(), "The end");
  EXPECT_EQ(s.push("anything"), "");
}

TEST(StopStrings, EarliestOfSeveralWins) {
  StopStrings s({"at", "cat"});
  EXPECT_EQ(feed(s, {"the cat"}), "the ");
  EXPECT_EQ(s.matched_stop(), "cat");
}

TEST(StopStrings, HeldTextComesOutAtTheEnd) {
  StopStrings s({"\n\nUser:"});
  EXPECT_EQ(s.push("Bye.\n"), "Bye.");
  EXPECT_EQ(s.flush(), "\n");
  EXPECT_FALSE(s.matched());
}

TEST(StopStrings, EmptyStopStringsAreIgnored) {
  StopStrings s({"", "x"});
  EXPECT_EQ(feed(s, {"abc"}), "abc");
}

}  // namespace
}  // namespace okapi::runtime
