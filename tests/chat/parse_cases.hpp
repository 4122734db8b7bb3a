// Recorded model outputs in each family's real syntax (many from llama.cpp's tests/test-chat.cpp)
// and the assistant messages they parse to; shared by parser_test and stream_test.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "chat/chat_format.hpp"

namespace okapi::chat::test_cases {

struct Case {
  std::string name;
  ParseOptions options;
  std::string text;
  ChatMessage expected;
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline ParseOptions options_for(Family family, bool think = false, bool forced = false,
                                ReasoningFormat format = ReasoningFormat::Auto) {
  ParseOptions o;
  o.family = family;
  o.reasoning_format = format;
  if (think) {
    o.reasoning_start = "<think>";
    o.reasoning_end = "</think>";
  }
  o.thinking_forced_open = forced;
  return o;
}

inline ToolCall call(std::string name, std::string arguments, std::string id = {}) {
  return {std::move(name), std::move(arguments), std::move(id)};
}

inline ChatMessage content(std::string text) { return {std::move(text), {}, {}}; }

inline std::vector<Case> all_cases() {
  const std::string kHello = "Hello, world!\nWhat's up?";
  const ToolCall kSpecial = call("special_function", R"({"arg1":1})");
  std::vector<Case> cases;
  auto add = [&](std::string name, ParseOptions o, std::string text, ChatMessage expected) {
    cases.push_back({std::move(name), std::move(o), std::move(text), std::move(expected)});
  };

  // ---- Hermes / Qwen 2.5 / Qwen 3 ----
  const auto hermes = options_for(Family::Hermes, true);
  add("hermes_content", hermes, kHello, content(kHello));
  add("hermes_one_call", hermes, "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>",
      {"", "", {kSpecial}});
  add("hermes_two_calls", hermes,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\", \"utc\": false}}\n</tool_call>",
      {"", "", {call("get_weather", R"({"city":"Paris"})"), call("get_time", R"({"zone":"CET","utc":false})")}});
  add("hermes_call_after_reasoning", hermes,
      "<think>\nI should call the weather tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Z\\u00fcrich\"}}\n</tool_call>",
      {"", "I should call the weather tool.", {call("get_weather", R"({"city":"Z\u00fcrich"})")}});
  add("hermes_content_before_call", hermes,
      "Let me check that for you.\n<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>",
      {"Let me check that for you.\n", "", {kSpecial}});
  add("hermes_bad_json_stays_content", hermes, "<tool_call>\n{\"name\": special_function}\n</tool_call>",
      content("<tool_call>\n{\"name\": special_function}\n</tool_call>"));
  add("hermes_unknown_shape_stays_content", hermes, "<tool_call>\n{\"function\": \"x\", \"args\": {}}\n</tool_call>",
      content("<tool_call>\n{\"function\": \"x\", \"args\": {}}\n</tool_call>"));
  add("hermes_unicode", hermes,
      "<think>考え中… 🤔</think>Résumé: 日本語 ✓\n<tool_call>\n{\"name\": \"translate\", \"arguments\": {\"text\": \"héllo 🌍\"}}\n</tool_call>",
      {"Résumé: 日本語 ✓\n", "考え中… 🤔", {call("translate", R"({"text":"héllo 🌍"})")}});
  add("hermes_reasoning_none_keeps_think", options_for(Family::Hermes, true, false, ReasoningFormat::None),
      "<think>\nhmm\n</think>\n\nHi there", content("<think>\nhmm\n</think>\n\nHi there"));
  add("hermes_forced_open", options_for(Family::Hermes, true, true), "I'm\nthinking\n</think>\n\nHello", {"Hello", "I'm\nthinking", {}});
  add("hermes_forced_open_unterminated", options_for(Family::Hermes, true, true), "still thinking", {"", "still thinking", {}});
  add("hermes_arguments_as_string", hermes,
      "<tool_call>\n{\"name\": \"special_function\", \"arguments\": \"{\\\"arg1\\\": 1}\"}\n</tool_call>",
      {"", "", {call("special_function", "{\"arg1\": 1}")}});
  {
    auto off = hermes;
    off.parse_tool_calls = false;
    add("hermes_calls_off_are_content", off, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        content("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"));
  }

  // ---- Llama 3.x ----
  const auto llama = options_for(Family::Llama3);
  add("llama3_content", llama, kHello, content(kHello));
  add("llama3_one_call", llama, "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}", {"", "", {kSpecial}});
  add("llama3_typed_call", llama, "{\"type\": \"function\", \"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
      {"", "", {kSpecial}});
  add("llama3_two_calls", llama,
      "{\"name\": \"a\", \"parameters\": {\"x\": [1, 2]}}; {\"name\": \"b\", \"parameters\": {}}",
      {"", "", {call("a", R"({"x":[1,2]})"), call("b", "{}")}});
  add("llama3_python_tag_code", llama, "<|python_tag|>print('hi')\nprint(\"x\")",
      {"", "", {call("python", R"j({"code":"print('hi')\nprint(\"x\")"})j")}});
  add("llama3_python_tag_json", llama, "<|python_tag|>{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
      {"", "", {kSpecial}});
  add("llama3_json_answer_stays_content", llama, "{\"answer\": 42}", content("{\"answer\": 42}"));
  add("llama3_unicode", llama, "Ça va? 😀 ünïcödé", content("Ça va? 😀 ünïcödé"));

  // ---- Mistral Nemo ----
  const auto mistral = options_for(Family::Mistral);
  add("mistral_content", mistral, kHello, content(kHello));
  add("mistral_one_call", mistral,
      "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}]",
      {"", "", {call("special_function", R"({"arg1":1})", "123456789")}});
  add("mistral_two_calls_after_content", mistral,
      "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x y\"}, \"id\": \"abcdefghi\"}, "
      "{\"name\": \"b\", \"arguments\": {}, \"id\": \"jklmnopqr\"}]",
      {"Sure.", "", {call("a", R"({"q":"x y"})", "abcdefghi"), call("b", "{}", "jklmnopqr")}});
  add("mistral_malformed", mistral, "[TOOL_CALLS] I cannot call tools.", content("[TOOL_CALLS] I cannot call tools."));

  // ---- Mistral Small 3.2 / Devstral / Ministral ----
  const auto margs = options_for(Family::MistralArgs);
  add("mistral_args_content", margs, kHello, content(kHello));
  add("mistral_args_one_call", margs, "[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}", {"", "", {kSpecial}});
  add("mistral_args_two_calls", margs,
      "Checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lyon\"}[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CET\"}",
      {"Checking both.", "", {call("get_weather", R"({"city":"Lyon"})"), call("get_time", R"({"zone":"CET"})")}});
  add("mistral_args_malformed", margs, "[TOOL_CALLS]bad name[ARGS]{}", content("[TOOL_CALLS]bad name[ARGS]{}"));

  // ---- gpt-oss ----
  const auto oss = options_for(Family::GptOss);
  add("gpt_oss_final", oss, "<|channel|>final<|message|>" + kHello, content(kHello));
  add("gpt_oss_reasoning_then_final", oss,
      "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>" + kHello,
      {kHello, "I'm\nthinking", {}});
  add("gpt_oss_reasoning_none", options_for(Family::GptOss, false, false, ReasoningFormat::None),
      "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>" + kHello,
      content("<|channel|>analysis<|message|>I'm\nthinking<|end|>" + kHello));
  add("gpt_oss_call", oss,
      "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.special_function "
      "<|constrain|>json<|message|>{\"arg1\": 1}<|call|>",
      {"", "Need the tool.", {kSpecial}});
  add("gpt_oss_recipient_in_role", oss, " to=functions.special_function<|channel|>commentary<|message|>{\"arg1\": 1}",
      {"", "", {kSpecial}});
  add("gpt_oss_bad_call_stays_content", oss, "<|channel|>commentary to=functions.f<|message|>not json<|call|>",
      content("<|channel|>commentary to=functions.f<|message|>not json<|call|>"));

  // ---- DeepSeek R1 ----
  const auto r1 = options_for(Family::DeepSeekR1, true);
  add("deepseek_r1_content", r1, kHello, content(kHello));
  add("deepseek_r1_call_after_reasoning", r1,
      "<think>I need the weather.</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      {"", "I need the weather.", {call("get_weather", R"({"city":"Oslo"})")}});
  add("deepseek_r1_two_calls", r1,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{\"x\": 1}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      {"", "", {call("a", R"({"x":1})"), call("b", "{}")}});
  add("deepseek_r1_forced_open", options_for(Family::DeepSeekR1, true, true), "thinking hard</think>The answer is 4.",
      {"The answer is 4.", "thinking hard", {}});

  // ---- DeepSeek V3.1 ----
  const auto v3 = options_for(Family::DeepSeekV3, true, true);
  add("deepseek_v3_content", v3, "ok</think>" + kHello, {kHello, "ok", {}});
  add("deepseek_v3_call", v3,
      "Let me look.</think>Looking it up.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>special_function<｜tool▁sep｜>{\"arg1\": 1}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      {"Looking it up.", "Let me look.", {kSpecial}});
  add("deepseek_v3_malformed", options_for(Family::DeepSeekV3),
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1, 2]<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      content("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1, 2]<｜tool▁call▁end｜><｜tool▁calls▁end｜>"));

  // ---- Qwen3-Coder ----
  const auto coder = options_for(Family::Qwen3Coder);
  add("qwen3_coder_content", coder, kHello, content(kHello));
  add("qwen3_coder_call", coder,
      "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
      {"", "", {kSpecial}});
  add("qwen3_coder_mixed_values", coder,
      "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a b.txt\n</parameter>\n"
      "<parameter=content>\nline 1\nline \"2\"\n</parameter>\n<parameter=options>\n{\"mode\": 644, \"sync\": true}\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=list>\n</function>\n</tool_call>",
      {"I'll write it.\n", "",
       {call("write_file", R"({"path":"/tmp/a b.txt","content":"line 1\nline \"2\"","options":{"mode":644,"sync":true}})"),
        call("list", "{}")}});
  add("qwen3_coder_malformed", coder, "<tool_call>\nnot a function\n</tool_call>", content("<tool_call>\nnot a function\n</tool_call>"));

  // ---- GLM-4.5 / 4.6 / 4.7 ----
  const auto glm = options_for(Family::Glm45, true);
  add("glm_content", glm, kHello, content(kHello));
  add("glm_call_after_reasoning", glm,
      "<think>Use the tool.</think>\n<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
      {"", "Use the tool.", {kSpecial}});
  add("glm_two_calls_no_newlines", glm,
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>São Paulo</arg_value><arg_key>days</arg_key>"
      "<arg_value>3</arg_value></tool_call><tool_call>ping</tool_call>",
      {"", "", {call("get_weather", R"({"city":"São Paulo","days":3})"), call("ping", "{}")}});
  add("glm_malformed", glm, "<tool_call>{\"name\": \"x\"}</tool_call>", content("<tool_call>{\"name\": \"x\"}</tool_call>"));

  // ---- Functionary v3.2 ----
  const auto fn = options_for(Family::FunctionaryV32);
  add("functionary_content", fn, "all\n" + kHello, content(kHello));
  add("functionary_call", fn, "special_function\n{\"arg1\": 1}", {"", "", {kSpecial}});
  add("functionary_content_then_calls", fn,
      "all\nOne moment.>>>get_weather\n{\"city\": \"Rome\"}>>>get_time\n{\"zone\": \"CET\"}",
      {"One moment.", "", {call("get_weather", R"({"city":"Rome"})"), call("get_time", R"({"zone":"CET"})")}});
  add("functionary_malformed", fn, "special_function\nnot json", content("special_function\nnot json"));

  // ---- Command R7B ----
  auto command = options_for(Family::CommandR7B);
  command.reasoning_start = "<|START_THINKING|>";
  command.reasoning_end = "<|END_THINKING|>";
  add("command_r7b_response", command, "<|START_RESPONSE|>" + kHello + "<|END_RESPONSE|>", content(kHello));
  add("command_r7b_call_after_reasoning", command,
      "<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
      "    {\"tool_call_id\": \"0\", \"tool_name\": \"special_function\", \"parameters\": {\"arg1\": 1}}\n"
      "]<|END_ACTION|>",
      {"", "I'm\nthinking", {call("special_function", R"({"arg1":1})", "0")}});
  add("command_r7b_two_calls", command,
      "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"a\", \"parameters\": {}}, "
      "{\"tool_call_id\": \"1\", \"tool_name\": \"b\", \"parameters\": {\"k\": \"v\"}}]<|END_ACTION|>",
      {"", "", {call("a", "{}", "0"), call("b", R"({"k":"v"})", "1")}});
  add("command_r7b_malformed", command, "<|START_ACTION|>oops<|END_ACTION|>", content("<|START_ACTION|>oops<|END_ACTION|>"));

  // ---- Generic ----
  const auto generic = options_for(Family::Generic);
  add("generic_plain", generic, kHello, content(kHello));
  add("generic_response", generic, "{\"response\": \"Hello, world!\\nWhat's up?\"}", content(kHello));
  add("generic_call", generic, "{\"tool_call\": {\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}}",
      {"", "", {kSpecial}});
  add("generic_calls", generic,
      "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]}",
      {"", "", {call("a", R"({"x":1})"), call("b", "{}")}});
  add("generic_other_json_is_content", generic, "{\"tool_call\": 5}", content("{\"tool_call\": 5}"));

  // ---- content only ----
  add("content_only", options_for(Family::ContentOnly), "<tool_call>{}</tool_call> é", content("<tool_call>{}</tool_call> é"));
  return cases;
}

}  // namespace okapi::chat::test_cases
