// parse_output over recorded outputs of every family, and the partial-parse rules.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_format.hpp"
#include "chat/parse_cases.hpp"

namespace okapi::chat {
namespace {

std::string describe(const ChatMessage& m) { return m.to_json().dump(2); }

class ParserTest : public ::testing::TestWithParam<test_cases::Case> {};

TEST_P(ParserTest, ParsesToTheExpectedMessage) {
  const auto& c = GetParam();
  const ChatMessage got = parse_output(c.text, false, c.options);
  EXPECT_EQ(got, c.expected) << c.name << "\ngot: " << describe(got) << "\nexpected: " << describe(c.expected);
  for (const auto& call : got.tool_calls) {
    EXPECT_TRUE(Json::accept(call.arguments)) << c.name << ": arguments are not JSON: " << call.arguments;
  }
}

// Every prefix parsed as partial reports only what the whole text reports.
TEST_P(ParserTest, PrefixesReportPrefixes) {
  const auto& c = GetParam();
  const ChatMessage whole = parse_output(c.text, false, c.options);
  for (size_t n = 0; n <= c.text.size(); ++n) {
    const ChatMessage part = parse_output(std::string_view(c.text).substr(0, n), true, c.options);
    ASSERT_TRUE(whole.content.starts_with(part.content)) << c.name << " at " << n << ": " << part.content;
    ASSERT_TRUE(whole.reasoning_content.starts_with(part.reasoning_content)) << c.name << " at " << n;
    ASSERT_LE(part.tool_calls.size(), whole.tool_calls.size()) << c.name << " at " << n;
    for (size_t i = 0; i < part.tool_calls.size(); ++i) {
      ASSERT_EQ(part.tool_calls[i].name, whole.tool_calls[i].name) << c.name << " at " << n;
      ASSERT_TRUE(whole.tool_calls[i].arguments.starts_with(part.tool_calls[i].arguments))
          << c.name << " at " << n << ": " << part.tool_calls[i].arguments;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ParserTest, ::testing::ValuesIn(test_cases::all_cases()),
                         [](const ::testing::TestParamInfo<test_cases::Case>& param_info) { return param_info.param.name; });

ParseOptions hermes() { return test_cases::options_for(Family::Hermes, true); }

TEST(ParsePartial, HoldsBackAnUnfinishedMarker) {
  EXPECT_EQ(parse_output("Let me check <tool_ca", true, hermes()).content, "Let me check ");
  EXPECT_EQ(parse_output("Let me check <tool_ca", false, hermes()).content, "Let me check <tool_ca");
  EXPECT_EQ(parse_output("<thi", true, hermes()), ChatMessage{});
  EXPECT_EQ(parse_output("<think>abc</thi", true, hermes()).reasoning_content, "abc");
}

TEST(ParsePartial, ReportsTheNameFirstAndArgumentsAsAPrefix) {
  const auto m = parse_output("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", true, hermes());
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"city\":\"Par");
  EXPECT_EQ(m.content, "");
  const auto before_name = parse_output("<tool_call>\n{\"name\": \"get_wea", true, hermes());
  EXPECT_TRUE(before_name.tool_calls.empty());
  EXPECT_EQ(before_name.content, "");
}

TEST(ParsePartial, MistralWaitsForTheId) {
  const auto o = test_cases::options_for(Family::Mistral);
  EXPECT_TRUE(parse_output("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}", true, o).tool_calls.empty());
  const auto m = parse_output("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}", true, o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].id, "abcdefghi");
}

TEST(ParseOutput, UnterminatedReasoning) {
  // Not forced open: a <think> that never closes in a complete text is content; forced open: reasoning.
  EXPECT_EQ(parse_output("<think>abc", false, hermes()), test_cases::content("<think>abc"));
  EXPECT_EQ(parse_output("<think>abc", true, hermes()).reasoning_content, "abc");
  auto forced = hermes();
  forced.thinking_forced_open = true;
  EXPECT_EQ(parse_output("abc", false, forced).reasoning_content, "abc");
  EXPECT_EQ(parse_output("<think>abc</think>x", false, forced), (ChatMessage{"x", "abc", {}}));
}

TEST(ParseOutput, HostileNestingIsContent) {
  const std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": " + std::string(100000, '[') + "</tool_call>";
  const auto m = parse_output(deep, false, hermes());
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, deep);
}

TEST(ChatMessageJson, OpenAiShape) {
  const ChatMessage m{"", "why", {{"f", "{}", "call_1"}}};
  const Json j = m.to_json();
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_TRUE(j["content"].is_null());
  EXPECT_EQ(j["reasoning_content"], "why");
  EXPECT_EQ(j["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(j["tool_calls"][0]["type"], "function");
  EXPECT_EQ(j["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(j["tool_calls"][0]["function"]["arguments"], "{}");
  const ChatMessage plain{"hi", "", {}};
  EXPECT_FALSE(plain.to_json().contains("tool_calls"));
  EXPECT_EQ(plain.to_json()["content"], "hi");
}

}  // namespace
}  // namespace okapi::chat
