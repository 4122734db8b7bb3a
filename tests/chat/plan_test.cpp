// Request plans: per family, the tool-call grammar for tool_choice auto / required / named / none
// (lazy triggers, preserved tokens, stops), the generic JSON format, response schemas, and
// forced-open thinking read off prompts rendered from real chat templates. The grammars are run
// through the GBNF matcher: each accepts a call in its family's syntax and rejects calls with an
// unknown name or arguments that break the tool's schema.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "chat/chat_format.hpp"
#include "core/shared_dir.hpp"
#include "grammar/grammar.hpp"
#include "jinja/chat_template.hpp"
#include "support/paths.hpp"

namespace okapi::chat {
namespace {

Json weather_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "The weather in a place",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["location"]}}})");
}

Json add_tool() {
  return Json::parse(R"({"type": "function", "function": {"name": "add", "description": "The sum of two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]}}})");
}

Json both_tools() { return Json::array({weather_tool(), add_tool()}); }

bool accepts(const std::string& grammar_text, std::string_view text) {
  grammar::Matcher matcher(grammar::Grammar::parse(grammar_text));
  return matcher.accept(text) && matcher.can_end();
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

ChatRequest request_with(ToolChoice choice, bool parallel = false) {
  ChatRequest request;
  request.tools = both_tools();
  request.tool_choice = choice;
  request.parallel_tool_calls = parallel;
  return request;
}

// One family's call syntax, as its parser reads it (and as its real template writes calls).
struct FamilyCase {
  Family family;
  std::string reasoning_start, reasoning_end;
  std::string trigger;          // where a lazy grammar starts
  std::string weather_call;     // get_weather(location="Paris"), from the trigger's first byte on
  std::string add_call;         // add(a=1, b=2), written to follow weather_call in a parallel answer
  std::string unknown_name;     // a call of a function that is not among the tools
  std::string bad_arguments;    // add's arguments breaking its schema
  std::string required_answer;  // a whole answer under tool_choice required (empty: weather_call)
  std::vector<std::string> markers;  // among the preserved tokens
};

void PrintTo(const FamilyCase& c, std::ostream* os) { *os << family_name(c.family); }

std::string case_name(const testing::TestParamInfo<FamilyCase>& info) {
  std::string name(family_name(info.param.family));
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

std::vector<FamilyCase> family_cases() {
  return {
      {Family::Hermes, "<think>", "</think>", "<tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
       "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"one\", \"b\": 2}}\n</tool_call>", "",
       {"<tool_call>", "</tool_call>", "<think>", "</think>"}},
      {Family::Llama3, "", "", "{\"name\"", "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
       "\n{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
       "{\"name\": \"get_time\", \"parameters\": {\"location\": \"Paris\"}}",
       "{\"name\": \"add\", \"parameters\": {\"a\": 1}}",
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", {"<|python_tag|>"}},
      {Family::Mistral, "", "", "[TOOL_CALLS]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abc123XYZ\"}]", "",
       "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}, \"id\": \"abc123XYZ\"}]",
       "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2.5}, \"id\": \"abc123XYZ\"}]", "",
       {"[TOOL_CALLS]"}},
      {Family::MistralArgs, "", "", "[TOOL_CALLS]", "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}",
       "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}", "[TOOL_CALLS]get_time[ARGS]{\"location\": \"Paris\"}",
       "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2, \"c\": 3}", "", {"[TOOL_CALLS]", "[ARGS]"}},
      {Family::GptOss, "", "", " to=functions.",
       " to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Paris\"}<|call|>", "",
       " to=functions.get_time <|constrain|>json<|message|>{\"location\": \"Paris\"}",
       " to=functions.add <|constrain|>json<|message|>{\"a\": true, \"b\": 2}",
       "<|channel|>analysis<|message|>The user wants the weather; <b> call get_weather.<|end|>"
       "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
       "{\"location\": \"Paris\"}",
       {"<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"}},
      {Family::DeepSeekR1, "<think>", "</think>", "<｜tool▁calls▁begin｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"location\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "", {"<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "<think>"}},
      {Family::DeepSeekV3, "<think>", "</think>", "<｜tool▁calls▁begin｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": \"1\", \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "", {"<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"}},
      {Family::Qwen3Coder, "", "", "<tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis, <b>\"France\"</b>\n</parameter>\n</function>\n</tool_call>",
       "\n<tool_call>\n<function=add>\n<parameter=b>\n2\n</parameter>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_time>\n<parameter=location>\nParis\n</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=add>\n<parameter=a>\none\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>",
       "", {"<tool_call>", "</tool_call>"}},
      {Family::Glm45, "<think>", "</think>", "<tool_call>",
       "<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>Paris <i>x</i></arg_value>\n</tool_call>",
       "\n<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b</arg_key><arg_value>2</arg_value></tool_call>",
       "<tool_call>get_time\n<arg_key>location</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
       "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>", "",
       {"<tool_call>", "<arg_key>", "</arg_value>"}},
      {Family::FunctionaryV32, "", "", "get_weather\n", "get_weather\n{\"location\": \"Paris\"}",
       ">>>add\n{\"a\": 1, \"b\": 2}", "get_time\n{\"location\": \"Paris\"}", "add\n{\"a\": [1], \"b\": 2}", "", {}},
      {Family::CommandR7B, "<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>",
       "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}\n]<|END_ACTION|>",
       "", "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_time\", \"parameters\": {}}]<|END_ACTION|>",
       "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"add\", \"parameters\": {\"a\": null, \"b\": 2}}]<|END_ACTION|>",
       "", {"<|START_ACTION|>", "<|END_ACTION|>", "<|START_THINKING|>"}},
  };
}

// Two calls in one answer, in the family's syntax (Mistral's list, Command R7B's list, DeepSeek's
// block hold both; the others repeat the call).
std::string two_calls(const FamilyCase& c) {
  switch (c.family) {
    case Family::Mistral:
      return "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}, \"id\": \"abc123XYZ\"}, "
             "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]";
    case Family::CommandR7B:
      return "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
             "{\"location\": \"Paris\"}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"add\", \"parameters\": "
             "{\"a\": 1, \"b\": 2}}\n]<|END_ACTION|>";
    case Family::DeepSeekR1:
      return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": "
             "\"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{\"a\": 1, "
             "\"b\": 2}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    case Family::DeepSeekV3:
      return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}<｜tool▁call▁end｜>"
             "<｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, \"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    default: return c.add_call.empty() ? "" : c.weather_call + c.add_call;
  }
}

ChatFormat format_of(const FamilyCase& c) {
  ChatFormat format;
  format.family = c.family;
  format.reasoning_start = c.reasoning_start;
  format.reasoning_end = c.reasoning_end;
  format.supports_tools = true;
  return format;
}

class FamilyPlanTest : public testing::TestWithParam<FamilyCase> {};

TEST_P(FamilyPlanTest, AutoIsLazyFromTheCallMarker) {
  const FamilyCase& c = GetParam();
  const ChatPlan p = plan(format_of(c), request_with(ToolChoice::Auto), "prompt");
  EXPECT_TRUE(p.grammar_lazy);
  // Llama 3's bare JSON and Functionary's first call start the answer: their triggers are anchored.
  EXPECT_TRUE(contains(p.grammar_triggers, c.trigger) || contains(p.grammar_start_triggers, c.trigger)) << c.trigger;
  EXPECT_TRUE(p.parse.parse_tool_calls);
  EXPECT_EQ(p.parse.family, c.family);
  EXPECT_EQ(p.grammar_after_reasoning, !c.reasoning_start.empty());
  for (const std::string& marker : c.markers) EXPECT_TRUE(contains(p.preserved_tokens, marker)) << marker;
  EXPECT_TRUE(accepts(p.grammar, c.weather_call)) << p.grammar;
  if (c.family != Family::GptOss) {  // harmony's <|call|> ends the output
    EXPECT_TRUE(accepts(p.grammar, c.weather_call + "\n")) << "trailing whitespace";
  }
  EXPECT_FALSE(accepts(p.grammar, c.unknown_name)) << "a function that is not a tool";
  EXPECT_FALSE(accepts(p.grammar, c.bad_arguments)) << "arguments against the schema";
  EXPECT_FALSE(accepts(p.grammar, c.weather_call + " and some text"));
  for (const std::string& trigger : p.grammar_triggers) EXPECT_FALSE(trigger.empty());
  for (const std::string& trigger : p.grammar_start_triggers) EXPECT_FALSE(trigger.empty());
  if (const std::string both = two_calls(c); !both.empty()) {
    EXPECT_FALSE(accepts(p.grammar, both)) << "one call without parallel_tool_calls";
  }
}

TEST_P(FamilyPlanTest, ParallelCallsAcceptSeveral) {
  const FamilyCase& c = GetParam();
  const std::string both = two_calls(c);
  if (both.empty()) GTEST_SKIP() << family_name(c.family) << " writes one call per message";
  const ChatPlan p = plan(format_of(c), request_with(ToolChoice::Auto, true), "prompt");
  EXPECT_TRUE(accepts(p.grammar, both)) << both << "\n" << p.grammar;
  EXPECT_TRUE(accepts(p.grammar, c.weather_call));
}

TEST_P(FamilyPlanTest, RequiredForcesACall) {
  const FamilyCase& c = GetParam();
  const ChatPlan p = plan(format_of(c), request_with(ToolChoice::Required), "prompt");
  EXPECT_FALSE(p.grammar_lazy);
  EXPECT_TRUE(p.grammar_triggers.empty());
  EXPECT_EQ(p.grammar_after_reasoning, !c.reasoning_start.empty());
  const std::string answer = c.required_answer.empty() ? c.weather_call : c.required_answer;
  EXPECT_TRUE(accepts(p.grammar, answer)) << answer << "\n" << p.grammar;
  if (c.family != Family::FunctionaryV32 && c.family != Family::GptOss) {
    EXPECT_TRUE(accepts(p.grammar, "\n\n" + answer)) << "whitespace after the reasoning";
  }
  EXPECT_FALSE(accepts(p.grammar, "It is sunny in Paris."));
  EXPECT_FALSE(accepts(p.grammar, ""));
  EXPECT_FALSE(accepts(p.grammar, c.bad_arguments));
}

TEST_P(FamilyPlanTest, NamedForcesThatFunction) {
  const FamilyCase& c = GetParam();
  ChatRequest request = request_with(ToolChoice::Named);
  request.tool_name = "get_weather";
  const ChatPlan p = plan(format_of(c), request, "prompt");
  EXPECT_FALSE(p.grammar_lazy);
  const std::string answer = c.required_answer.empty() ? c.weather_call : c.required_answer;
  EXPECT_TRUE(accepts(p.grammar, answer));
  // The other tool's call, with valid arguments, is refused.
  std::string other = c.weather_call;
  const auto name_at = other.find("get_weather");
  ASSERT_NE(name_at, std::string::npos);
  other.replace(name_at, std::string("get_weather").size(), "add");
  const auto args_at = other.find("{\"location\": \"Paris\"}");
  if (args_at != std::string::npos) other.replace(args_at, std::string("{\"location\": \"Paris\"}").size(), "{\"a\": 1, \"b\": 2}");
  EXPECT_FALSE(accepts(p.grammar, other)) << other;
}

TEST_P(FamilyPlanTest, NoneHasNoToolGrammar) {
  const FamilyCase& c = GetParam();
  const ChatPlan p = plan(format_of(c), request_with(ToolChoice::None), "prompt");
  EXPECT_TRUE(p.grammar.empty());
  EXPECT_TRUE(p.grammar_triggers.empty());
  EXPECT_FALSE(p.grammar_lazy);
  EXPECT_FALSE(p.parse.parse_tool_calls);
  EXPECT_TRUE(p.additional_stops.empty() || c.family == Family::GptOss || c.family == Family::Llama3);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyPlanTest, testing::ValuesIn(family_cases()), case_name);

TEST(PlanTest, LlamaPythonTagCallsStopAtEom) {
  ChatFormat format;
  format.family = Family::Llama3;
  const ChatPlan p = plan(format, request_with(ToolChoice::Auto), "");
  EXPECT_TRUE(contains(p.grammar_triggers, "<|python_tag|>"));
  EXPECT_TRUE(contains(p.additional_stops, "<|eom_id|>"));
  EXPECT_TRUE(accepts(p.grammar, "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}"));
}

TEST(PlanTest, Qwen3CoderStringValuesCannotSwallowTheClosingTag) {
  ChatFormat format;
  format.family = Family::Qwen3Coder;
  const ChatPlan p = plan(format, request_with(ToolChoice::Auto), "");
  const std::string open = "<tool_call>\n<function=get_weather>\n<parameter=location>\n";
  const std::string close = "\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(accepts(p.grammar, open + "a <<</param\n</para x" + close));
  // The parser ends a value at the first </parameter>, with or without the newline before it.
  EXPECT_FALSE(accepts(p.grammar, open + "a </parameter> b" + close));
  EXPECT_TRUE(accepts(p.grammar, open + "" + close));
  EXPECT_FALSE(accepts(p.grammar, open + "Paris\n</parameter>\nRome" + close));
  // An optional argument may follow, a required one may not be missing.
  EXPECT_TRUE(accepts(p.grammar, open + "Paris\n</parameter>\n<parameter=unit>\ncelsius" + close));
  EXPECT_FALSE(accepts(p.grammar, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
}

TEST(PlanTest, GptOssRecipientInTheRoleHeader) {
  ChatFormat format;
  format.family = Family::GptOss;
  const ChatPlan p = plan(format, request_with(ToolChoice::Required), "<|start|>assistant");
  EXPECT_FALSE(p.grammar_after_reasoning) << "harmony's grammar covers the analysis channel itself";
  EXPECT_TRUE(accepts(p.grammar, " to=functions.add<|channel|>commentary json<|message|>{\"a\": 1, \"b\": 2}"));
  EXPECT_TRUE(contains(p.additional_stops, "<|call|>"));
}

TEST(PlanTest, GenericFormatIsOneJsonObject) {
  ChatFormat format;
  format.family = Family::ContentOnly;  // no native syntax: tools turn it generic
  ChatPlan p = plan(format, request_with(ToolChoice::Auto), "");
  EXPECT_EQ(p.parse.family, Family::Generic);
  EXPECT_FALSE(p.grammar_lazy);
  ASSERT_TRUE(p.extra_messages.is_array());
  ASSERT_EQ(p.extra_messages.size(), 1u);
  EXPECT_EQ(p.extra_messages[0]["role"], "system");
  EXPECT_NE(p.extra_messages[0]["content"].get<std::string>().find("tool_call"), std::string::npos);
  EXPECT_TRUE(accepts(p.grammar, R"({"tool_call": {"name": "get_weather", "arguments": {"location": "Paris"}}})"));
  EXPECT_TRUE(accepts(p.grammar, R"({"response": "Hello there"})"));
  EXPECT_FALSE(accepts(p.grammar, R"({"tool_call": {"name": "get_time", "arguments": {}}})"));
  EXPECT_FALSE(accepts(p.grammar, R"({"tool_call": {"name": "add", "arguments": {"a": "x", "b": 1}}})"));
  EXPECT_FALSE(accepts(p.grammar, "Hello there"));

  format.family = Family::Generic;
  p = plan(format, request_with(ToolChoice::Required), "");
  EXPECT_FALSE(accepts(p.grammar, R"({"response": "Hello there"})"));
  EXPECT_TRUE(accepts(p.grammar, R"({"tool_call": {"name": "add", "arguments": {"a": 1, "b": 2}}})"));

  p = plan(format, request_with(ToolChoice::Required, true), "");
  EXPECT_TRUE(accepts(p.grammar, R"({"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call1"},)"
                                 R"( {"name": "get_weather", "arguments": {"location": "Oslo"}, "id": "call2"}]})"));
  EXPECT_NE(p.extra_messages[0]["content"].get<std::string>().find("tool_calls"), std::string::npos);

  ChatRequest request = request_with(ToolChoice::Auto);
  request.json_schema = Json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  p = plan(format, request, "");
  EXPECT_TRUE(accepts(p.grammar, R"({"response": {"city": "Oslo"}})"));
  EXPECT_FALSE(accepts(p.grammar, R"({"response": "Oslo"})"));
}

TEST(PlanTest, ToolChoiceErrors) {
  ChatFormat format;
  format.family = Family::Hermes;
  ChatRequest named = request_with(ToolChoice::Named);
  named.tool_name = "get_time";
  try {
    plan(format, named, "");
    FAIL() << "an unknown function was accepted";
  } catch (const okapi::Error& e) {
    EXPECT_NE(std::string(e.what()).find("get_time"), std::string::npos) << e.what();
  }
  ChatRequest required;
  required.tool_choice = ToolChoice::Required;
  EXPECT_THROW(plan(format, required, ""), okapi::Error);

  ChatRequest with_grammar = request_with(ToolChoice::Auto);
  with_grammar.grammar = "root ::= \"x\"";
  EXPECT_THROW(plan(format, with_grammar, ""), okapi::Error);

  ChatRequest bad_name = request_with(ToolChoice::Auto);
  bad_name.tools[0]["function"]["name"] = "x</tool_call><tool_call>";
  EXPECT_THROW(plan(format, bad_name, ""), okapi::Error);
  ChatRequest not_array = request_with(ToolChoice::Auto);
  not_array.tools = Json::object();
  EXPECT_THROW(plan(format, not_array, ""), okapi::Error);
  ChatRequest bad_parameters = request_with(ToolChoice::Auto);
  bad_parameters.tools[1]["function"]["parameters"] = "a string";
  EXPECT_THROW(plan(format, bad_parameters, ""), okapi::Error);

  // tool_choice none with a grammar is fine: the tools are not used.
  ChatRequest none = request_with(ToolChoice::None);
  none.grammar = "root ::= \"x\"";
  EXPECT_EQ(plan(format, none, "").grammar, none.grammar);
}

TEST(PlanTest, ResponseFormatsWithoutTools) {
  ChatFormat thinking;
  thinking.family = Family::Hermes;
  thinking.reasoning_start = "<think>";
  thinking.reasoning_end = "</think>";
  ChatRequest request;
  request.json_schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  ChatPlan p = plan(thinking, request, "");
  EXPECT_FALSE(p.grammar_lazy);
  EXPECT_TRUE(p.grammar_after_reasoning) << "the schema constrains the answer, not the reasoning";
  EXPECT_FALSE(p.parse.parse_tool_calls);
  EXPECT_TRUE(accepts(p.grammar, R"({"n": 3})"));
  EXPECT_FALSE(accepts(p.grammar, R"({"n": "3"})"));

  ChatFormat plain;
  plain.family = Family::Generic;
  p = plan(plain, request, "");
  EXPECT_FALSE(p.grammar_after_reasoning);
  EXPECT_TRUE(p.extra_messages.is_null());

  request.json_schema = nullptr;
  request.json_object = true;
  p = plan(plain, request, "");
  EXPECT_TRUE(accepts(p.grammar, R"({"anything": [1, 2]})"));
  EXPECT_FALSE(accepts(p.grammar, "[1, 2]"));

  request.json_object = false;
  request.grammar = "root ::= \"yes\" | \"no\"";
  p = plan(thinking, request, "");
  EXPECT_EQ(p.grammar, request.grammar);
  EXPECT_TRUE(p.grammar_after_reasoning);

  request.json_schema = Json::object();
  EXPECT_THROW(plan(thinking, request, ""), okapi::Error) << "a grammar and a schema at once";
}

TEST(PlanTest, ResponseSchemaWrittenAsTheFamilyWritesContent) {
  ChatRequest request;
  request.json_schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  ChatFormat format;
  format.family = Family::FunctionaryV32;
  EXPECT_TRUE(accepts(plan(format, request, "").grammar, "all\n{\"n\": 1}"));
  format.family = Family::CommandR7B;
  EXPECT_TRUE(accepts(plan(format, request, "").grammar, "<|START_RESPONSE|>{\"n\": 1}<|END_RESPONSE|>"));
  format.family = Family::GptOss;
  const ChatPlan p = plan(format, request, "");
  EXPECT_TRUE(accepts(p.grammar, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final "
                                 "<|constrain|>json<|message|>{\"n\": 1}"));
  EXPECT_FALSE(accepts(p.grammar, "<|channel|>final<|message|>{\"n\": \"one\"}"));
}

TEST(PlanTest, ToolsWithAResponseSchemaConstrainTheContent) {
  ChatFormat format;
  format.family = Family::Hermes;
  ChatRequest request = request_with(ToolChoice::Auto);
  request.json_schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  const ChatPlan p = plan(format, request, "");
  EXPECT_FALSE(p.grammar_lazy) << "the content is constrained from its start";
  EXPECT_TRUE(accepts(p.grammar, R"({"n": 1})"));
  EXPECT_TRUE(accepts(p.grammar, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>"));
  EXPECT_FALSE(accepts(p.grammar, "Free text."));
}

// Forced-open thinking, read off prompts that real templates render.
std::filesystem::path template_path(const std::string& file) {
  const std::filesystem::path shared = okapi::shared_dir() / "templates" / file;
  if (std::filesystem::exists(shared)) return shared;
  return okapi::test::repo_dir() / "tests" / "data" / "templates" / file;
}

std::string render_prompt(const std::filesystem::path& path, const Json& extra) {
  const auto chat_template = jinja::ChatTemplate::parse(okapi::test::read_file(path), path.filename().string());
  jinja::RenderInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
  inputs.tools = both_tools();
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.extra = extra;
  inputs.now = 0;
  return chat_template.render(inputs);
}

struct ThinkingCase {
  std::string file;
  Json kwargs;
  bool forced_open;
};

TEST(PlanTest, ThinkingForcedOpenFromRealTemplates) {
  ChatFormat format;
  format.family = Family::Hermes;
  format.reasoning_start = "<think>";
  format.reasoning_end = "</think>";
  const std::vector<ThinkingCase> cases = {
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", Json::object(), true},
      {"Qwen-Qwen3-0.6B.jinja", Json::object(), false},
      {"Qwen-Qwen3-0.6B.jinja", Json{{"enable_thinking", false}}, false},
      {"GLM-4.7-Flash.jinja", Json::object(), true},
      {"GLM-4.7-Flash.jinja", Json{{"enable_thinking", false}}, false},
      {"Qwen-QwQ-32B.jinja", Json{{"enable_thinking", true}}, true},
      {"Qwen-QwQ-32B.jinja", Json::object(), false},  // this copy closes the block unless enable_thinking
      {"deepseek-ai-DeepSeek-V3.1.jinja", Json{{"thinking", true}}, true},
      {"deepseek-ai-DeepSeek-V3.1.jinja", Json::object(), false},
  };
  int rendered = 0;
  for (const ThinkingCase& c : cases) {
    const auto path = template_path(c.file);
    if (!std::filesystem::exists(path)) continue;  // copied into tests/data/templates by the parse branch
    SCOPED_TRACE(c.file + " " + c.kwargs.dump());
    const std::string prompt = render_prompt(path, c.kwargs);
    EXPECT_EQ(plan(format, request_with(ToolChoice::Auto), prompt).parse.thinking_forced_open, c.forced_open)
        << prompt.substr(prompt.size() - std::min<size_t>(prompt.size(), 40));
    ++rendered;
  }
  if (rendered == 0) OKAPI_REQUIRE_DATA(template_path(cases[0].file));
  // No reasoning markers: never forced open.
  format.reasoning_start.clear();
  EXPECT_FALSE(plan(format, ChatRequest{}, "<think>\n").parse.thinking_forced_open);
}

// What a real template writes for an assistant's call, from the call marker to the end of turn.
std::string rendered_call(const std::filesystem::path& path, const std::string& trigger, const std::string& end) {
  const auto chat_template = jinja::ChatTemplate::parse(okapi::test::read_file(path), path.filename().string());
  const Json user = {{"role", "user"}, {"content", "What is the weather in Paris?"}};
  // Templates differ in the assistant message they want: arguments as an object or as JSON text,
  // content "" or null (DeepSeek R1's distills write calls only with null content).
  for (const int variant : {0, 1, 2, 3}) {
    const bool arguments_as_string = (variant & 1) != 0;
    const Json content = (variant & 2) != 0 ? Json(nullptr) : Json("");
    const Json arguments = {{"location", "Paris"}};
    const Json call = {{"id", "abc123XYZ"},  // 9 alphanumerics, as Mistral's templates insist
                       {"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", arguments_as_string ? Json(arguments.dump()) : arguments}}}};
    jinja::RenderInputs inputs;
    inputs.messages = Json::array({user, {{"role", "assistant"}, {"content", content}, {"tool_calls", Json::array({call})}}});
    inputs.tools = both_tools();
    inputs.add_generation_prompt = false;
    inputs.bos_token = "<s>";
    inputs.eos_token = "</s>";
    inputs.now = 0;
    std::string text;
    try {
      text = chat_template.render(inputs);
    } catch (const jinja::TemplateError&) {
      continue;  // this template wants the other form of arguments
    }
    const auto start = text.find(trigger, text.find("What is the weather in Paris?"));
    if (start == std::string::npos) continue;
    auto stop = end.empty() ? std::string::npos : text.find(end, start);
    std::string segment = text.substr(start, stop == std::string::npos ? std::string::npos : stop - start);
    while (!segment.empty() && (segment.back() == '\n' || segment.back() == ' ')) segment.pop_back();
    return segment;
  }
  return {};
}

struct TemplateCase {
  std::string file;
  Family family;
  std::string trigger, end;
};

// The grammars accept the calls the families' real templates write into the conversation history
// (the syntax the models were trained on).
TEST(PlanTest, GrammarsAcceptCallsAsRealTemplatesWriteThem) {
  const std::vector<TemplateCase> cases = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", Family::Hermes, "<tool_call>", "<|im_end|>"},
      {"Qwen-Qwen3-0.6B.jinja", Family::Hermes, "<tool_call>", "<|im_end|>"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", Family::Hermes, "<tool_call>", "<|im_end|>"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", Family::Hermes, "<tool_call>", "<|im_end|>"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", Family::Llama3, "{\"name\"", "<|eot_id|>"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", Family::Llama3, "{\"name\"", "<|eot_id|>"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", Family::Llama3, "{\"name\"", "<|eot_id|>"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", Family::Mistral, "[TOOL_CALLS]", "</s>"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", Family::MistralArgs, "[TOOL_CALLS]", "</s>"},
      {"unsloth-mistral-Devstral-Small-2507.jinja", Family::MistralArgs, "[TOOL_CALLS]", "</s>"},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", Family::MistralArgs, "[TOOL_CALLS]", "</s>"},
      {"openai-gpt-oss-120b.jinja", Family::GptOss, " to=functions.", ""},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", Family::DeepSeekR1, "<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", Family::DeepSeekR1, "<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", Family::DeepSeekV3, "<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>"},
      {"Qwen3-Coder.jinja", Family::Qwen3Coder, "<tool_call>", "<|im_end|>"},
      {"GLM-4.6.jinja", Family::Glm45, "<tool_call>", "<|"},
      {"GLM-4.7-Flash.jinja", Family::Glm45, "<tool_call>", "<|"},
      {"meetkai-functionary-medium-v3.2.jinja", Family::FunctionaryV32, "get_weather\n", "<|eot_id|>"},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", Family::CommandR7B, "<|START_ACTION|>", "<|END_OF_TURN_TOKEN|>"},
  };
  int checked = 0;
  for (const TemplateCase& c : cases) {
    const auto path = template_path(c.file);
    if (!std::filesystem::exists(path)) continue;  // copied into tests/data/templates by the parse branch
    SCOPED_TRACE(c.file);
    const std::string call = rendered_call(path, c.trigger, c.end);
    EXPECT_FALSE(call.empty()) << "the template wrote no call";
    ChatFormat format;
    format.family = c.family;
    const ChatPlan p = plan(format, request_with(ToolChoice::Auto), "");
    EXPECT_TRUE(accepts(p.grammar, call)) << call;
    ++checked;
  }
  if (checked == 0) OKAPI_REQUIRE_DATA(template_path(cases[0].file));
}

}  // namespace
}  // namespace okapi::chat
