// StreamParser: every recorded output fed in pieces of every size reassembles exactly to
// parse_output(text, false), with OpenAI-shaped deltas and no marker text in content.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "chat/chat_format.hpp"
#include "chat/parse_cases.hpp"

namespace okapi::chat {
namespace {

struct Reassembled {
  ChatMessage message;
  std::map<size_t, std::string> ids;
};

// Applies deltas as an OpenAI client does, checking their shape.
void apply(const std::vector<Json>& deltas, Reassembled& r, const std::string& where) {
  for (const Json& d : deltas) {
    ASSERT_EQ(d.size(), 1u) << where << ": " << d.dump();
    if (d.contains("content")) {
      r.message.content += d["content"].get<std::string>();
    } else if (d.contains("reasoning_content")) {
      r.message.reasoning_content += d["reasoning_content"].get<std::string>();
    } else {
      ASSERT_TRUE(d.contains("tool_calls")) << where << ": " << d.dump();
      ASSERT_EQ(d["tool_calls"].size(), 1u);
      const Json& t = d["tool_calls"][0];
      const size_t index = t["index"].get<size_t>();
      if (t.contains("id")) {
        ASSERT_EQ(index, r.message.tool_calls.size()) << where << ": calls arrive in order";
        ASSERT_EQ(t["type"], "function");
        ASSERT_FALSE(t["function"]["name"].get<std::string>().empty());
        r.ids[index] = t["id"].get<std::string>();
        r.message.tool_calls.push_back({t["function"]["name"], t["function"]["arguments"], t["id"]});
      } else {
        ASSERT_LT(index, r.message.tool_calls.size()) << where << ": arguments before the call";
        ASSERT_FALSE(t["function"].contains("name"));
        r.message.tool_calls[index].arguments += t["function"]["arguments"].get<std::string>();
      }
    }
  }
}

void check_stream(const test_cases::Case& c, const std::vector<size_t>& cuts, const std::string& where) {
  StreamParser stream(c.options);
  Reassembled r;
  const ChatMessage expected = parse_output(c.text, false, c.options);
  size_t from = 0;
  for (const size_t cut : cuts) {
    apply(stream.push(std::string_view(c.text).substr(from, cut - from)), r, where);
    from = cut;
    // Never ahead of (or contradicting) the final message: no marker text reaches content.
    ASSERT_TRUE(expected.content.starts_with(r.message.content)) << where << " content: " << r.message.content;
    ASSERT_TRUE(expected.reasoning_content.starts_with(r.message.reasoning_content)) << where;
    ASSERT_TRUE(Json(r.message.content).dump().size() > 0);  // valid UTF-8 (dump throws otherwise)
  }
  apply(stream.push(std::string_view(c.text).substr(from)), r, where);
  apply(stream.finish(), r, where);
  ASSERT_EQ(r.message.tool_calls.size(), expected.tool_calls.size()) << where;
  ChatMessage with_ids = expected;
  for (size_t i = 0; i < with_ids.tool_calls.size(); ++i) {
    if (expected.tool_calls[i].id.empty()) {
      EXPECT_TRUE(r.ids[i].starts_with("call_")) << where;
      EXPECT_EQ(r.ids[i].size(), 5u + 24u) << where;
    }
    with_ids.tool_calls[i].id = r.ids[i];
  }
  ASSERT_EQ(r.message, with_ids) << where;
  ASSERT_EQ(stream.message(), with_ids) << where;
}

class StreamTest : public ::testing::TestWithParam<test_cases::Case> {};

TEST_P(StreamTest, EverySplitSizeReassembles) {
  const auto& c = GetParam();
  for (size_t step = 1; step <= c.text.size(); ++step) {
    std::vector<size_t> cuts;
    for (size_t at = step; at < c.text.size(); at += step) cuts.push_back(at);
    check_stream(c, cuts, c.name + " step " + std::to_string(step));
    if (HasFatalFailure()) return;
  }
}

TEST_P(StreamTest, RandomSplitsReassemble) {
  const auto& c = GetParam();
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts;
    for (size_t at = 0; at < c.text.size();) {
      at += 1 + rng() % 7;
      if (at < c.text.size()) cuts.push_back(at);
    }
    check_stream(c, cuts, c.name + " trial " + std::to_string(trial));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, StreamTest, ::testing::ValuesIn(test_cases::all_cases()),
                         [](const ::testing::TestParamInfo<test_cases::Case>& param_info) { return param_info.param.name; });

TEST(Stream, NameFirstThenArgumentPieces) {
  StreamParser stream(test_cases::options_for(Family::Hermes), "call_");
  std::vector<Json> all;
  for (const std::string piece : {"<tool_call>\n{\"name\": \"f\", ", "\"arguments\": {\"a\": ", "12", "3}}\n</tool_call>"}) {
    for (auto& d : stream.push(piece)) all.push_back(std::move(d));
  }
  for (auto& d : stream.finish()) all.push_back(std::move(d));
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(all[0]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(all[0]["tool_calls"][0]["function"]["arguments"], "");
  EXPECT_EQ(all[0]["tool_calls"][0]["index"], 0);
  const std::string id = all[0]["tool_calls"][0]["id"];
  EXPECT_EQ(id.size(), 29u);
  std::string arguments;
  for (size_t i = 1; i < all.size(); ++i) arguments += all[i]["tool_calls"][0]["function"]["arguments"].get<std::string>();
  EXPECT_EQ(arguments, "{\"a\":123}");
  EXPECT_EQ(stream.message().tool_calls[0].id, id);
}

TEST(Stream, UnterminatedReasoningStaysReasoning) {
  // Streamed as reasoning while it was open; finish() does not take it back into content.
  StreamParser stream(test_cases::options_for(Family::Hermes, true));
  stream.push("<think>abc");
  stream.finish();
  EXPECT_EQ(stream.message().reasoning_content, "abc");
  EXPECT_EQ(stream.message().content, "");
}

TEST(Stream, SplitUtf8NeverLeavesADelta) {
  StreamParser stream(test_cases::options_for(Family::ContentOnly));
  const std::string text = "é🌍";
  std::string got;
  for (const char byte : text) {
    for (const auto& d : stream.push(std::string(1, byte))) got += d["content"].get<std::string>();
    EXPECT_NO_THROW((void)Json(got).dump());
  }
  for (const auto& d : stream.finish()) got += d["content"].get<std::string>();
  EXPECT_EQ(got, text);
}

}  // namespace
}  // namespace okapi::chat
