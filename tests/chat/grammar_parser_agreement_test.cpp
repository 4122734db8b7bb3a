// The tool-call grammars and the output parsers agree, family by family: random strings drawn
// FROM each plan's grammar (a random walk over the GBNF matcher) parse back to exactly the calls
// the walk wrote, with arguments that validate against the tool's schema, no marker text in
// content, the reasoning in reasoning_content, and streamed deltas that reassemble to the same
// message. Each family's real template decides the family (detect_format) and the prompt
// (forced-open thinking); tools have bounded parameters so that every walk ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_format.hpp"
#include "core/shared_dir.hpp"
#include "grammar/grammar.hpp"
#include "jinja/chat_template.hpp"
#include "support/paths.hpp"

namespace okapi::chat {
namespace {

constexpr int kWalksPerCase = 12;

const Json& tools() {
  static const Json value = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a place",
      "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
      "required": ["location"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add_numbers", "description": "The sum of two integers",
      "parameters": {"type": "object", "properties": {
        "a": {"type": "integer", "minimum": -50, "maximum": 50},
        "b": {"type": "integer", "minimum": 0, "maximum": 999}},
      "required": ["a", "b"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "plan_trip", "description": "A trip through a few stops",
      "parameters": {"type": "object", "properties": {
        "stops": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "options": {"type": "object", "properties": {
            "fast": {"type": "boolean"},
            "level": {"type": "integer", "minimum": 1, "maximum": 5}},
          "required": ["fast"], "additionalProperties": false}},
      "required": ["stops"], "additionalProperties": false}}}
  ])");
  return value;
}

const Json* schema_of(const std::string& name) {
  for (const Json& tool : tools()) {
    if (tool["function"]["name"] == name) return &tool["function"]["parameters"];
  }
  return nullptr;
}

// ---- a small JSON Schema checker for the keywords the tools use ---------------------------------

size_t code_points(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool validates(const Json& value, const Json& schema, std::string& why, const std::string& at = "$") {
  auto fail = [&](const std::string& message) {
    why = at + ": " + message + " (" + value.dump() + ")";
    return false;
  };
  if (auto e = schema.find("enum"); e != schema.end() && std::find(e->begin(), e->end(), value) == e->end()) {
    return fail("not in enum");
  }
  const std::string type = schema.value("type", "");
  if (type == "string") {
    if (!value.is_string()) return fail("not a string");
    const size_t n = code_points(value.get<std::string>());
    if (n > schema.value("maxLength", size_t{1} << 30) || n < schema.value("minLength", size_t{0})) return fail("length");
  } else if (type == "integer") {
    if (!value.is_number_integer()) return fail("not an integer");
    const auto n = value.get<int64_t>();
    if (schema.contains("minimum") && n < schema["minimum"].get<int64_t>()) return fail("below minimum");
    if (schema.contains("maximum") && n > schema["maximum"].get<int64_t>()) return fail("above maximum");
  } else if (type == "boolean") {
    if (!value.is_boolean()) return fail("not a boolean");
  } else if (type == "array") {
    if (!value.is_array()) return fail("not an array");
    if (value.size() > schema.value("maxItems", size_t{1} << 30) || value.size() < schema.value("minItems", size_t{0})) {
      return fail("item count");
    }
    for (size_t i = 0; i < value.size(); ++i) {
      if (!validates(value[i], schema["items"], why, at + "[" + std::to_string(i) + "]")) return false;
    }
  } else if (type == "object") {
    if (!value.is_object()) return fail("not an object");
    const Json properties = schema.value("properties", Json::object());
    for (const Json& name : schema.value("required", Json::array())) {
      if (!value.contains(name.get<std::string>())) return fail("missing " + name.get<std::string>());
    }
    for (const auto& [key, member] : value.items()) {
      if (!properties.contains(key)) {
        if (schema.value("additionalProperties", true) == false) return fail("unexpected key " + key);
        continue;
      }
      if (!validates(member, properties[key], why, at + "." + key)) return false;
    }
  }
  return true;
}

// ---- random walks through a grammar -------------------------------------------------------------

// A string of the grammar: at each step one of the steps the matcher allows. Uniformly among
// the steps at first; the longer the walk, the more often uniformly among the distinct states the
// steps lead to (so that free text, where nearly every step keeps the same state, reaches its
// terminator), and the more it ends where it may. Empty `error` when the walk ended well.
struct Walk {
  std::string text;
  std::string error;
};

Walk random_walk(const std::shared_ptr<const grammar::Grammar>& grammar, const std::vector<std::string>& alphabet,
                 std::mt19937& rng, const std::string& start = "") {
  grammar::Matcher matcher(grammar);
  Walk walk;
  if (!matcher.accept(start)) {
    walk.error = "the grammar does not start with its trigger '" + start + "'";
    return walk;
  }
  walk.text = start;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<const std::string*> allowed;
  std::map<uint64_t, std::vector<const std::string*>> by_state;
  for (int step = 0; step < 3000; ++step) {
    allowed.clear();
    for (const std::string& candidate : alphabet) {
      if (matcher.allows(candidate)) allowed.push_back(&candidate);
    }
    const double length = static_cast<double>(walk.text.size());
    if (matcher.can_end() && (allowed.empty() || coin(rng) < 0.08 + length / 800.0)) return walk;
    if (allowed.empty()) {
      walk.error = "dead end: the grammar allows none of the alphabet and cannot end";
      return walk;
    }
    const std::string* chosen = allowed[rng() % allowed.size()];
    if (coin(rng) < std::min(0.9, 0.2 + length / 150.0)) {
      by_state.clear();
      for (const std::string* candidate : allowed) {
        grammar::Matcher next = matcher;
        next.accept(*candidate);
        by_state[next.state_hash()].push_back(candidate);
      }
      auto group = by_state.begin();
      std::advance(group, static_cast<long>(rng() % by_state.size()));
      chosen = group->second[rng() % group->second.size()];
    }
    if (!matcher.accept(*chosen)) {
      walk.error = "the matcher refused what it allowed: " + *chosen;
      return walk;
    }
    walk.text += *chosen;
  }
  walk.error = "the walk did not end";
  return walk;
}

std::vector<std::string> base_alphabet() {
  std::vector<std::string> alphabet;
  for (char c = 0x20; c < 0x7f; ++c) alphabet.emplace_back(1, c);
  for (const char* extra : {"\n", "\t", "é", "日本", "🙂", "｜", "▁"}) alphabet.emplace_back(extra);
  // Syntax the families write that a tokenizer has as (control) tokens or common pieces.
  for (const char* extra : {"<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
                            "<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>",
                            " to=functions.", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                            "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "```json", "```", "<function=", "</function>",
                            "<parameter=", "</parameter>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                            ">>>", "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
                            "<think>", "</think>"}) {
    alphabet.emplace_back(extra);
  }
  return alphabet;
}

// The tool names in the order the text writes them: one per call in every family's syntax (the
// walk's random text cannot spell a whole name by chance: names are not single steps).
std::vector<std::string> names_in(const std::string& text) {
  std::vector<std::pair<size_t, std::string>> found;
  for (const Json& tool : tools()) {
    const std::string name = tool["function"]["name"];
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) found.emplace_back(at, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& [at, name] : found) names.push_back(std::move(name));
  return names;
}

std::string strip(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Plain words, for content before a call and for reasoning: no markers, no triggers.
std::string random_words(std::mt19937& rng, size_t count) {
  static const std::vector<std::string> words = {"Let", "me", "check", "that", "for", "you.", "Voilà", "日本",
                                                 "the", "weather", "is", "fine", "(maybe)", "42", "then,", "sum"};
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out += rng() % 5 == 0 ? "\n" : " ";
    out += words[rng() % words.size()];
  }
  return out;
}

// Harmony: the content and reasoning a gpt-oss output holds (message bodies by channel; calls,
// with a recipient, hold neither and end the output). Bodies hold no "<|" (the grammar's harmony
// text cannot).
struct Harmony {
  std::string content, reasoning;
};
Harmony harmony_messages(const std::string& text) {
  Harmony out;
  size_t header = 0;
  for (size_t at = text.find("<|message|>"); at != std::string::npos; at = text.find("<|message|>", header)) {
    const std::string head = text.substr(header, at - header);
    if (head.find("to=") != std::string::npos) break;  // a call ends the output (its JSON may hold anything)
    const size_t body_begin = at + std::string_view("<|message|>").size();
    const size_t body_end = std::min(text.find("<|", body_begin), text.size());
    const std::string body = text.substr(body_begin, body_end - body_begin);
    if (head.find("<|channel|>analysis") != std::string::npos) {
      out.reasoning += body;
    } else if (!strip(body).empty()) {
      out.content += body;
    }
    header = body_end;
    if (header >= text.size()) break;
  }
  return out;
}

// ---- streaming ----------------------------------------------------------------------------------

// Applies deltas as an OpenAI client does.
void apply_deltas(const std::vector<Json>& deltas, ChatMessage& message) {
  for (const Json& d : deltas) {
    if (d.contains("content")) {
      message.content += d["content"].get<std::string>();
    } else if (d.contains("reasoning_content")) {
      message.reasoning_content += d["reasoning_content"].get<std::string>();
    } else {
      const Json& t = d.at("tool_calls").at(0);
      const size_t index = t["index"].get<size_t>();
      if (t.contains("id")) {
        ASSERT_EQ(index, message.tool_calls.size()) << "calls arrive in order";
        message.tool_calls.push_back({t["function"]["name"], t["function"]["arguments"], t["id"]});
      } else {
        ASSERT_LT(index, message.tool_calls.size()) << "arguments before the call";
        message.tool_calls[index].arguments += t["function"]["arguments"].get<std::string>();
      }
    }
  }
}

ChatMessage streamed(const std::string& text, const ParseOptions& options, std::mt19937& rng) {
  StreamParser stream(options);
  ChatMessage message;
  for (size_t at = 0; at < text.size();) {
    const size_t piece = 1 + rng() % 9;
    apply_deltas(stream.push(std::string_view(text).substr(at, piece)), message);
    at += piece;
  }
  apply_deltas(stream.finish(), message);
  for (auto& call : message.tool_calls) call.id.clear();
  return message;
}

// ---- the cases ----------------------------------------------------------------------------------

std::filesystem::path template_path(const std::string& file) {
  const std::filesystem::path shared = okapi::shared_dir() / "templates" / file;
  if (std::filesystem::exists(shared)) return shared;
  return okapi::test::repo_dir() / "tests" / "data" / "templates" / file;
}

struct TemplateCase {
  std::string file;
  Family family;  // what detect_format must say
  Json kwargs;
};

void PrintTo(const TemplateCase& c, std::ostream* os) { *os << c.file; }

std::vector<TemplateCase> template_cases() {
  return {
      {"Qwen-Qwen3-0.6B.jinja", Family::Hermes, Json::object()},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", Family::Llama3, Json::object()},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", Family::Mistral, Json::object()},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", Family::MistralArgs, Json::object()},
      {"openai-gpt-oss-120b.jinja", Family::GptOss, Json::object()},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", Family::DeepSeekR1, Json::object()},
      {"deepseek-ai-DeepSeek-V3.1.jinja", Family::DeepSeekV3, Json{{"thinking", true}}},
      {"Qwen3-Coder.jinja", Family::Qwen3Coder, Json::object()},
      {"GLM-4.6.jinja", Family::Glm45, Json::object()},
      {"GLM-4.7-Flash.jinja", Family::Glm45, Json::object()},  // thinking forced open
      {"meetkai-functionary-medium-v3.2.jinja", Family::FunctionaryV32, Json::object()},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", Family::CommandR7B, Json::object()},
      {"google-gemma-2-2b-it.jinja", Family::Generic, Json::object()},
  };
}

std::string case_name(const testing::TestParamInfo<TemplateCase>& info) {
  std::string name = info.param.file.substr(0, info.param.file.find(".jinja"));
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

struct Mode {
  std::string name;
  ToolChoice choice;
  bool parallel;
  std::string tool_name;
};

// What comes before a lazy grammar's trigger.
struct Prefix {
  std::string text;             // written before the walk
  std::string expected_content;  // what the parse reports as content
};

// What a model writes before a call that starts at `trigger` (plain content where the family
// allows content before a call; harmony headers for gpt-oss).
Prefix prefix_for(Family family, std::mt19937& rng) {
  if (family == Family::GptOss) {
    const std::string analysis = "<|channel|>analysis<|message|>" + random_words(rng, 4) + "<|end|><|start|>assistant";
    switch (rng() % 4) {
      case 0: return {"<|channel|>commentary", ""};
      case 1: return {"", ""};
      case 2: return {analysis, ""};
      default: return {analysis + "<|channel|>commentary", ""};
    }
  }
  if (family == Family::FunctionaryV32) {  // later calls (">>>NAME\n") after content ("all\n...")
    const std::string words = random_words(rng, 1 + rng() % 6);
    return {"all\n" + words, words};
  }
  if (rng() % 4 == 0) return {"", ""};
  const std::string words = random_words(rng, 1 + rng() % 6);
  return {words + (rng() % 2 ? "\n" : " "), words};
}

class AgreementTest : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(AgreementTest, WalksThroughTheGrammarParseToTheirCalls) {
  const TemplateCase& c = GetParam();
  const auto path = template_path(c.file);
  OKAPI_REQUIRE_DATA(path);
  const auto chat_template = jinja::ChatTemplate::parse(okapi::test::read_file(path), path.filename().string());
  const ChatFormat format = detect_format(chat_template);
  ASSERT_EQ(format.family, c.family) << family_name(format.family);

  jinja::RenderInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
  inputs.tools = tools();
  inputs.add_generation_prompt = true;
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.extra = c.kwargs;
  inputs.now = 0;
  const std::string prompt = chat_template.render(inputs);

  const std::vector<Mode> modes = {{"required", ToolChoice::Required, false, ""},
                                   {"required-parallel", ToolChoice::Required, true, ""},
                                   {"named", ToolChoice::Named, false, "plan_trip"},
                                   {"auto", ToolChoice::Auto, false, ""},
                                   {"auto-parallel", ToolChoice::Auto, true, ""}};
  const std::vector<std::string> alphabet = base_alphabet();
  std::mt19937 rng(2029);
  for (const Mode& mode : modes) {
    ChatRequest request;
    request.tools = tools();
    request.tool_choice = mode.choice;
    request.parallel_tool_calls = mode.parallel;
    request.tool_name = mode.tool_name;
    const ChatPlan p = plan(format, request, prompt);
    ASSERT_FALSE(p.grammar.empty()) << mode.name;
    const auto grammar = grammar::Grammar::parse(p.grammar);
    const bool reasoning = !p.parse.reasoning_end.empty() && p.parse.family != Family::GptOss;
    std::vector<std::string> triggers = p.grammar_triggers;
    triggers.insert(triggers.end(), p.grammar_start_triggers.begin(), p.grammar_start_triggers.end());
    ASSERT_EQ(p.grammar_lazy, !triggers.empty()) << mode.name;
    for (int n = 0; n < kWalksPerCase; ++n) {
      // A lazy grammar matches the output from a trigger on.
      const std::string trigger = triggers.empty() ? "" : triggers[rng() % triggers.size()];
      const bool at_start = std::find(p.grammar_start_triggers.begin(), p.grammar_start_triggers.end(), trigger) !=
                            p.grammar_start_triggers.end();
      const Walk walk = random_walk(grammar, alphabet, rng, trigger);
      const std::string where = c.file + " " + mode.name + " walk " + std::to_string(n) + ": " + walk.text;
      ASSERT_TRUE(walk.error.empty()) << where << "\n" << walk.error;
      const std::vector<std::string> names = names_in(walk.text);

      std::string text, expected_content, expected_reasoning;
      if (reasoning && (p.parse.thinking_forced_open || rng() % 2 == 0)) {
        expected_reasoning = random_words(rng, 1 + rng() % 8);
        text = (p.parse.thinking_forced_open ? "" : p.parse.reasoning_start) + expected_reasoning + p.parse.reasoning_end +
               "\n\n";
      }
      if (p.grammar_lazy) {
        // Content may come before a trigger that is not anchored at the answer's start; it holds
        // no trigger itself.
        const Prefix prefix = at_start ? Prefix{} : prefix_for(p.parse.family, rng);
        for (const std::string& t : p.grammar_triggers) {
          ASSERT_EQ((text + prefix.text).find(t), std::string::npos) << where;
        }
        text += prefix.text;
        expected_content = prefix.expected_content;
      }
      text += walk.text;
      const std::string full = "text: " + text;

      const ChatMessage message = parse_output(text, false, p.parse);
      const bool generic_response = p.parse.family == Family::Generic && names.empty();
      ASSERT_EQ(message.tool_calls.size(), names.size()) << where << "\n" << full << "\n" << message.to_json().dump();
      if (mode.choice != ToolChoice::Auto || p.parse.family == Family::Generic) {
        if (!generic_response) {
          ASSERT_FALSE(names.empty()) << where;
        }
      }
      if (!mode.parallel) {
        ASSERT_LE(names.size(), 1u) << where;
      }
      for (size_t i = 0; i < names.size(); ++i) {
        const ToolCall& call = message.tool_calls[i];
        ASSERT_EQ(call.name, names[i]) << where;
        if (mode.choice == ToolChoice::Named) {
          ASSERT_EQ(call.name, mode.tool_name) << where;
        }
        Json arguments;
        ASSERT_NO_THROW(arguments = Json::parse(call.arguments)) << where << "\narguments: " << call.arguments;
        std::string why;
        ASSERT_TRUE(validates(arguments, *schema_of(call.name), why)) << where << "\narguments: " << call.arguments << "\n" << why;
      }
      if (p.parse.family == Family::GptOss) {
        const Harmony harmony = harmony_messages(text);
        expected_content = harmony.content;
        ASSERT_EQ(strip(message.reasoning_content), strip(harmony.reasoning)) << where << "\n" << full;
      }
      if (!generic_response) {
        ASSERT_EQ(strip(message.content), strip(expected_content)) << where << "\n" << full;
      }
      for (const std::string& marker : p.preserved_tokens) {
        ASSERT_EQ(message.content.find(marker), std::string::npos) << where << "\nmarker in content: " << marker;
      }
      if (reasoning) {
        ASSERT_EQ(message.reasoning_content, strip(expected_reasoning)) << where << "\n" << full;
      }

      ChatMessage expected = message;
      for (auto& call : expected.tool_calls) call.id.clear();
      ChatMessage from_stream;
      ASSERT_NO_FATAL_FAILURE(from_stream = streamed(text, p.parse, rng)) << where;
      ASSERT_EQ(from_stream, expected) << where << "\n" << full << "\nstreamed: " << from_stream.to_json().dump()
                                       << "\nwhole: " << expected.to_json().dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, AgreementTest, ::testing::ValuesIn(template_cases()), case_name);

}  // namespace
}  // namespace okapi::chat
