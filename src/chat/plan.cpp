// Request plans: what a request's tools, tool_choice, response format and reasoning mean for the
// generation (the grammar, lazy or not, its triggers, the control tokens kept as text, extra stop
// strings) and for reading the output back (ParseOptions). Per family the grammar matches the call
// syntax that family's parser reads, as llama.cpp's chat.cpp writes it per format: the call
// wrapper is written here by hand, each tool's arguments come from its `parameters` schema.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/chat_format.hpp"
#include "core/error.hpp"
#include "grammar/json_schema.hpp"

namespace okapi::chat {
namespace {

using grammar::GrammarBuilder;

// Requests come from clients: bound what one request can make us build.
constexpr size_t kMaxTools = 1024;
constexpr size_t kMaxToolNameBytes = 256;
constexpr size_t kMaxToolArguments = 256;  // XML-argument families: one rule per argument
// XML-argument families: models do not always keep the schema's order, so up to this many required
// arguments are accepted in any order (n! alternatives); beyond it, in the schema's order.
constexpr size_t kMaxPermutedArguments = 3;

struct Tool {
  std::string name;
  Json parameters;
};

std::string_view json_type_name(const Json& value) { return value.type_name(); }

// Names end up inside call syntax (after "[TOOL_CALLS]", in "<function=...>", "functions.NAME");
// refuse bytes that would let a name end that syntax early or forge a marker.
void check_tool_name(const std::string& name, size_t index) {
  if (name.empty()) throw_error("tools[{}].function.name is empty", index);
  if (name.size() > kMaxToolNameBytes) {
    throw_error("tools[{}].function.name is {} bytes long, more than the {} allowed", index, name.size(),
                kMaxToolNameBytes);
  }
  for (unsigned char c : name) {
    if (c <= 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '[' || c == ']' ||
        c == '{' || c == '}') {
      throw_error("tools[{}].function.name '{}' contains the character 0x{:02x}, which a tool name cannot hold",
                  index, name, c);
    }
  }
}

// XML-argument families write argument names raw inside tags.
void check_argument_name(const Tool& tool, const std::string& name) {
  if (name.empty() || name.size() > kMaxToolNameBytes) {
    throw_error("tool '{}': a parameter name must be 1 to {} bytes long, got {} bytes", tool.name, kMaxToolNameBytes,
                name.size());
  }
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '<' || c == '>') {
      throw_error("tool '{}': parameter name '{}' contains the character 0x{:02x}, which cannot be written in a tag",
                  tool.name, name, c);
    }
  }
}

std::vector<Tool> read_tools(const Json& tools) {
  std::vector<Tool> result;
  if (tools.is_null()) return result;
  if (!tools.is_array()) throw_error("tools: expected an array of tools, got {}", json_type_name(tools));
  if (tools.size() > kMaxTools) throw_error("tools: {} tools given, at most {} are accepted", tools.size(), kMaxTools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    if (!tool.is_object()) throw_error("tools[{}]: expected an object, got {}", i, json_type_name(tool));
    if (auto type = tool.find("type"); type != tool.end() && !(type->is_string() && *type == "function")) {
      throw_error("tools[{}].type: only \"function\" tools are supported, got {}", i, type->dump());
    }
    auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) throw_error("tools[{}].function: expected an object", i);
    auto name = function->find("name");
    if (name == function->end() || !name->is_string()) throw_error("tools[{}].function.name: expected a string", i);
    Tool t;
    t.name = name->get<std::string>();
    check_tool_name(t.name, i);
    auto parameters = function->find("parameters");
    if (parameters == function->end() || parameters->is_null()) {
      t.parameters = Json{{"type", "object"}, {"properties", Json::object()}};
    } else if (parameters->is_object()) {
      t.parameters = *parameters;
    } else {
      throw_error("tools[{}].function.parameters: expected a JSON schema object, got {}", i, json_type_name(*parameters));
    }
    result.push_back(std::move(t));
  }
  return result;
}

// A GBNF string literal matching `text` exactly.
std::string literal(std::string_view text) { return grammar::gbnf_literal(text); }

// A GBNF literal matching the JSON string `text` (quotes included), as a model writes a name.
std::string json_string_literal(const std::string& text) { return literal(Json(text).dump()); }

// A rule-name hint from a tool name: GBNF rule names are [a-zA-Z0-9-]+.
std::string rule_hint(std::string_view name, std::string_view suffix) {
  std::string hint;
  for (char c : name.substr(0, 48)) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    hint += plain ? c : '-';
  }
  if (hint.empty()) hint = "tool";
  hint += '-';
  hint += suffix;
  return hint;
}

// A character class body excluding the characters of `chars` ("[^...]" without brackets).
std::string class_escape(char c) {
  switch (c) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\\': return "\\\\";
    case ']': return "\\]";
    case '^': return "\\^";
    case '-': return "\\-";
    default: return std::string(1, c);
  }
}

bool is_string_only_schema(const Json& schema) {
  if (!schema.is_object()) return false;
  auto type = schema.find("type");
  if (type == schema.end()) return false;
  if (type->is_string()) return *type == "string";
  return false;
}

// The grammar being written for one request: the builder, and the rules every family shares.
class Rules {
 public:
  Rules() {
    // Whitespace between tokens, bounded as the JSON schema rules' `space` is (a model cannot spin
    // in whitespace forever).
    ws_ = builder_.add_rule("ws", R"(( " " | "\n"{1,2} [ \t]{0,20} )?)");
  }
  GrammarBuilder& builder() { return builder_; }
  const std::string& ws() const { return ws_; }

  // The rule for one tool's arguments (a JSON value of its `parameters` schema, trailing space included).
  std::string arguments(const Tool& tool) { return builder_.add_schema(rule_hint(tool.name, "args"), tool.parameters); }

  // `"key": value` inside a JSON object, with the whitespace allowed after the value.
  std::string member(std::string_view key, const std::string& value) const {
    return literal(Json(std::string(key)).dump()) + " " + ws_ + " \":\" " + ws_ + " " + value + " " + ws_;
  }
  // A JSON object of `members` in this order, with no trailing space.
  std::string object(const std::vector<std::string>& members) const {
    std::string body = "\"{\" " + ws_;
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) body += " \",\" " + ws_;
      body += " " + members[i];
    }
    return body + " \"}\"";
  }
  // The JSON string `text` as a value.
  std::string json_value_literal(const std::string& text) const { return json_string_literal(text); }

  // Text that does not contain `terminator` (whose first character occurs nowhere else in it, so
  // that a mismatch after any partial match can only restart at that character). The rule can be
  // followed by the terminator itself: no earlier occurrence can straddle the boundary.
  std::string text_without(const std::string& hint, std::string_view terminator) {
    if (terminator.size() < 2 || terminator.find(terminator[0], 1) != std::string_view::npos) {
      throw_error("internal: text_without needs a terminator whose first character is unique, got '{}'", terminator);
    }
    const std::string key(terminator);
    for (const auto& [known, rule] : text_rules_) {
      if (known == key) return rule;
    }
    const std::string first = class_escape(terminator[0]);
    const std::string first_literal = literal(terminator.substr(0, 1));
    const size_t m = terminator.size();
    // exit_k: in the state where the terminator's first k characters matched, a character that
    // neither continues the match nor restarts it (back to no match), possibly after continuing it.
    std::string exit = "[^" + first + class_escape(terminator[m - 1]) + "]";
    for (size_t k = m - 2; k >= 1; --k) {
      exit = "[^" + first + class_escape(terminator[k]) + "] | " + literal(terminator.substr(k, 1)) + " ( " + exit + " )";
    }
    // pre: characters continuing a partial match from state 1, short of the whole terminator.
    std::string pre;
    for (size_t k = m - 2; k >= 1; --k) {
      pre = literal(terminator.substr(k, 1)) + (pre.empty() ? "" : " ( " + pre + " )?");
    }
    const std::string pre_opt = pre.empty() ? "" : builder_.add_rule(hint + "-partial", pre) + "? ";
    // loop: the first character, then any partial matches each restarted by the first character.
    const std::string loop = first_literal + " ( " + pre_opt + first_literal + " )*";
    const std::string excursion = builder_.add_rule(hint + "-escape", loop + " ( " + exit + " )");
    const std::string tail = builder_.add_rule(hint + "-tail", loop + (pre_opt.empty() ? "" : " " + pre_opt));
    std::string rule = builder_.add_rule(hint, "( [^" + first + "] | " + excursion + " )* " + tail + "?");
    text_rules_.emplace_back(key, rule);
    return rule;
  }

 private:
  GrammarBuilder builder_;
  std::string ws_;
  std::vector<std::pair<std::string, std::string>> text_rules_;  // terminator -> text_without rule
};

// Where one family's calls start and how they are written, from the trigger's first byte on.
struct CallSyntax {
  std::string calls;  // the rule matching the call(s) (no surrounding whitespace)
  std::vector<std::string> triggers;
  std::vector<std::string> start_triggers = {};  // only at the answer's start (ChatPlan::grammar_start_triggers)
};

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

// One or more (parallel) or exactly one of `call`, separated by `separator` (a GBNF expression).
std::string repeated(const std::string& call, bool parallel, const std::string& separator) {
  if (!parallel) return call;
  return call + " ( " + separator + " " + call + " )*";
}

// The alternatives of `items` in every order (n! of them; n is small).
void permutations(std::vector<std::string> items, std::vector<std::string>& out) {
  std::sort(items.begin(), items.end());
  do {
    out.push_back(join(items, " "));
  } while (std::next_permutation(items.begin(), items.end()));
}

// A plain string argument written raw up to `value_end` (a closing tag starting with '<'): its
// enum / const as literals, its length bounds over characters other than '<' (so that the value
// cannot hold the closing tag), else any text without the closing tag. `pattern` and `format`
// are not expressed raw: such values are only kept from the closing tag.
std::string raw_string_value(Rules& rules, const Tool& tool, const std::string& name, const Json& schema,
                             const std::string& value_end) {
  std::vector<std::string> choices;
  if (auto values = schema.find("enum"); values != schema.end() && values->is_array()) {
    for (const Json& v : *values) {
      if (v.is_string() && v.get<std::string>().find(value_end) == std::string::npos) choices.push_back(literal(v.get<std::string>()));
    }
    if (choices.empty()) {
      throw grammar::SchemaError(fmt::format("tool '{}': parameter '{}' has no string enum value that can be written", tool.name, name),
                                 "enum");
    }
  } else if (auto value = schema.find("const"); value != schema.end() && value->is_string() &&
                                                 value->get<std::string>().find(value_end) == std::string::npos) {
    choices.push_back(literal(value->get<std::string>()));
  }
  if (!choices.empty()) return rules.builder().add_rule(rule_hint(tool.name + "-" + name, "value"), "( " + join(choices, " | ") + " )");
  const auto bound = [&](const char* key) -> std::optional<uint64_t> {
    auto it = schema.find(key);
    if (it == schema.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<uint64_t>();
  };
  const auto min_length = bound("minLength"), max_length = bound("maxLength");
  if (min_length || max_length) {
    constexpr uint64_t kMaxBound = 4096;  // a bounded repetition is unrolled by the matcher
    const uint64_t low = std::min(min_length.value_or(0), kMaxBound);
    const std::string high = max_length ? std::to_string(std::max(low, std::min(*max_length, kMaxBound))) : "";
    return rules.builder().add_rule(rule_hint(tool.name + "-" + name, "value"),
                                    "[^<]{" + std::to_string(low) + "," + high + "}");
  }
  return rules.text_without(value_end == "</arg_value>" ? "xml-arg-value" : "xml-parameter-value", value_end);
}

// XML-argument families (Qwen3-Coder, GLM-4.5): one rule per argument, written by `argument`
// (name, value rule); required arguments first (any order when few), then optional ones.
template <typename WriteArgument>
std::string xml_arguments(Rules& rules, const Tool& tool, const std::string& value_end, WriteArgument argument) {
  const Json& parameters = tool.parameters;
  auto properties = parameters.find("properties");
  if (properties == parameters.end() || !properties->is_object() || properties->empty()) return "";
  if (properties->size() > kMaxToolArguments) {
    throw_error("tool '{}' has {} parameters, at most {} are accepted", tool.name, properties->size(), kMaxToolArguments);
  }
  std::vector<std::string> required_names;
  if (auto required = parameters.find("required"); required != parameters.end() && required->is_array()) {
    for (const Json& r : *required) {
      if (r.is_string()) required_names.push_back(r.get<std::string>());
    }
  }
  std::vector<std::string> required_rules, optional_rules;
  for (const auto& [name, schema] : properties->items()) {
    check_argument_name(tool, name);
    std::string value;
    if (is_string_only_schema(schema)) {
      // Strings are written raw, up to the closing tag (the parser keeps them strings).
      value = raw_string_value(rules, tool, name, schema, value_end);
    } else {
      Json with_definitions = schema;
      for (const char* key : {"$defs", "definitions"}) {
        if (parameters.contains(key) && with_definitions.is_object() && !with_definitions.contains(key)) {
          with_definitions[key] = parameters[key];
        }
      }
      value = rules.builder().add_schema(rule_hint(tool.name + "-" + name, "value"), with_definitions);
    }
    const std::string rule = rules.builder().add_rule(rule_hint(tool.name + "-" + name, "arg"), argument(name, value));
    const bool is_required = std::find(required_names.begin(), required_names.end(), name) != required_names.end();
    (is_required ? required_rules : optional_rules).push_back(rule);
  }
  std::string body;
  if (required_rules.size() > 1 && required_rules.size() <= kMaxPermutedArguments) {
    std::vector<std::string> orders;
    permutations(required_rules, orders);
    body = "( " + join(orders, " | ") + " )";
  } else {
    body = join(required_rules, " ");
  }
  if (!optional_rules.empty()) body += (body.empty() ? "" : " ") + std::string("( ") + join(optional_rules, " | ") + " )*";
  return body;
}

CallSyntax hermes_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    const std::string object = rules.object({rules.member("name", rules.json_value_literal(tool.name)),
                                             rules.member("arguments", rules.arguments(tool))});
    alternatives.push_back(rules.builder().add_rule(rule_hint(tool.name, "call"), object));
  }
  const std::string call = rules.builder().add_rule(
      "tool-call", "\"<tool_call>\" " + rules.ws() + " ( " + join(alternatives, " | ") + " ) " + rules.ws() + " \"</tool_call>\"");
  return {rules.builder().add_rule("tool-calls", repeated(call, parallel, rules.ws())), {"<tool_call>"}};
}

CallSyntax llama3_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    const std::string object = rules.object({rules.member("name", rules.json_value_literal(tool.name)),
                                             rules.member("parameters", rules.arguments(tool))});
    alternatives.push_back(rules.builder().add_rule(rule_hint(tool.name, "call"), object));
  }
  const std::string call =
      rules.builder().add_rule("tool-call", "\"<|python_tag|>\"? ( " + join(alternatives, " | ") + " )");
  // A bare JSON call is the whole answer (the parser reads it at the start only); <|python_tag|>
  // may follow content.
  return {rules.builder().add_rule("tool-calls", repeated(call, parallel, rules.ws())),
          {"<|python_tag|>"},
          {"{\"name\"", "{ \"name\"", "{\n\"name\""}};
}

CallSyntax mistral_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  // Mistral Nemo's ids are 9 alphanumerics; the template refuses others, a model may omit them.
  const std::string id = rules.builder().add_rule("tool-call-id", R"("\"" [a-zA-Z0-9]{9} "\"")");
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    std::string object = rules.object({rules.member("name", rules.json_value_literal(tool.name)),
                                       rules.member("arguments", rules.arguments(tool))});
    // The optional id goes before the closing brace.
    object.insert(object.size() - std::string(" \"}\"").size(),
                  " ( \",\" " + rules.ws() + " " + rules.member("id", id) + " )?");
    alternatives.push_back(rules.builder().add_rule(rule_hint(tool.name, "call"), object));
  }
  const std::string call = rules.builder().add_rule("tool-call", "( " + join(alternatives, " | ") + " )");
  const std::string list = "\"[\" " + rules.ws() + " " + repeated(call, parallel, "\",\" " + rules.ws()) + " \"]\"";
  return {rules.builder().add_rule("tool-calls", "\"[TOOL_CALLS]\" " + list), {"[TOOL_CALLS]"}};
}

CallSyntax mistral_args_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  // Mistral Small 3.2's template writes "[CALL_ID]id" between the name and [ARGS]; others do not.
  const std::string call_id = rules.builder().add_rule("tool-call-id", R"("[CALL_ID]" [a-zA-Z0-9]{1,64})");
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    alternatives.push_back(rules.builder().add_rule(rule_hint(tool.name, "call"),
                                                    literal(tool.name) + " " + call_id + "? \"[ARGS]\" " + rules.arguments(tool) + " " + rules.ws()));
  }
  const std::string call =
      rules.builder().add_rule("tool-call", "\"[TOOL_CALLS]\" ( " + join(alternatives, " | ") + " )");
  // Each call's arguments already take the whitespace after them.
  return {rules.builder().add_rule("tool-calls", repeated(call, parallel, "")), {"[TOOL_CALLS]"}};
}

// Harmony: a call is either "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS"
// or, with the recipient in the role header, " to=functions.NAME<|channel|>commentary json<|message|>ARGS",
// ended by <|call|> (an end-of-generation token). The trigger " to=functions." is common to both.
CallSyntax gpt_oss_calls(Rules& rules, const std::vector<Tool>& tools) {
  const std::string channel = rules.builder().add_rule("harmony-channel", R"("<|channel|>" ( "commentary" | "analysis" ))");
  const std::string constrain = rules.builder().add_rule("harmony-constrain", R"(( " " "<|constrain|>"? "json" | "<|constrain|>json" )?)");
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    alternatives.push_back(rules.builder().add_rule(
        rule_hint(tool.name, "call"),
        literal(tool.name) + " " + channel + "? " + constrain + " \"<|message|>\" " + rules.arguments(tool) + " " + rules.ws()));
  }
  const std::string call = rules.builder().add_rule(
      "tool-call", "\" to=functions.\" ( " + join(alternatives, " | ") + " ) \"<|call|>\"?");
  // One call per message in harmony: the call ends the turn.
  return {call, {" to=functions."}};
}

CallSyntax deepseek_r1_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    alternatives.push_back(rules.builder().add_rule(
        rule_hint(tool.name, "call"), literal("function<｜tool▁sep｜>" + tool.name + "\n```json\n") + " " +
                                          rules.arguments(tool) + " " + rules.ws() + " \"```\" " + rules.ws() + " \"<｜tool▁call▁end｜>\""));
  }
  const std::string call =
      rules.builder().add_rule("tool-call", "\"<｜tool▁call▁begin｜>\" ( " + join(alternatives, " | ") + " )");
  // The distills' template closes the block only after a second call: the end marker may be missing.
  return {rules.builder().add_rule("tool-calls", "\"<｜tool▁calls▁begin｜>\" " + repeated(call, parallel, rules.ws()) +
                                                     " ( " + rules.ws() + " \"<｜tool▁calls▁end｜>\" )?"),
          {"<｜tool▁calls▁begin｜>"}};
}

CallSyntax deepseek_v3_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    alternatives.push_back(rules.builder().add_rule(
        rule_hint(tool.name, "call"),
        literal(tool.name + "<｜tool▁sep｜>") + " " + rules.arguments(tool) + " " + rules.ws() + " \"<｜tool▁call▁end｜>\""));
  }
  const std::string call =
      rules.builder().add_rule("tool-call", "\"<｜tool▁call▁begin｜>\" ( " + join(alternatives, " | ") + " )");
  return {rules.builder().add_rule("tool-calls", "\"<｜tool▁calls▁begin｜>\" " + repeated(call, parallel, rules.ws()) +
                                                     " " + rules.ws() + " \"<｜tool▁calls▁end｜>\""),
          {"<｜tool▁calls▁begin｜>"}};
}

// <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
CallSyntax qwen3_coder_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    const std::string arguments =
        xml_arguments(rules, tool, "</parameter>", [](const std::string& name, const std::string& value) {
          return literal("<parameter=" + name + ">\n") + " " + value + " " + literal("\n</parameter>\n");
        });
    alternatives.push_back(rules.builder().add_rule(
        rule_hint(tool.name, "call"),
        literal("<function=" + tool.name + ">\n") + " " + arguments + " " + literal("</function>\n")));
  }
  const std::string call = rules.builder().add_rule(
      "tool-call", "\"<tool_call>\\n\" ( " + join(alternatives, " | ") + " ) \"</tool_call>\"");
  return {rules.builder().add_rule("tool-calls", repeated(call, parallel, rules.ws())), {"<tool_call>"}};
}

// <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call> (GLM-4.5/4.6 put the
// newlines, GLM-4.7 does not).
CallSyntax glm45_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    const std::string arguments =
        xml_arguments(rules, tool, "</arg_value>", [](const std::string& name, const std::string& value) {
          return literal("<arg_key>" + name + "</arg_key>") + " \"\\n\"? \"<arg_value>\" " + value +
                 " \"</arg_value>\" \"\\n\"?";
        });
    alternatives.push_back(
        rules.builder().add_rule(rule_hint(tool.name, "call"), literal(tool.name) + " \"\\n\"? " + arguments));
  }
  const std::string call = rules.builder().add_rule(
      "tool-call", "\"<tool_call>\" ( " + join(alternatives, " | ") + " ) \"</tool_call>\"");
  return {rules.builder().add_rule("tool-calls", repeated(call, parallel, rules.ws())), {"<tool_call>"}};
}

// The prompt ends with ">>>": the first call is "NAME\n{...}", the next ones ">>>NAME\n{...}".
CallSyntax functionary_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel, bool lazy) {
  std::vector<std::string> alternatives;
  CallSyntax syntax;
  for (const Tool& tool : tools) {
    alternatives.push_back(
        rules.builder().add_rule(rule_hint(tool.name, "call"), literal(tool.name + "\n") + " " + rules.arguments(tool) + " " + rules.ws()));
    // The first call starts the answer (the prompt ends with ">>>"); later ones follow ">>>".
    syntax.start_triggers.push_back(tool.name + "\n");
    syntax.triggers.push_back(">>>" + tool.name + "\n");
  }
  const std::string first = rules.builder().add_rule("tool-call", "( " + join(alternatives, " | ") + " )");
  const std::string next = rules.builder().add_rule("tool-call-next", "\">>>\" " + first);
  // Lazily, the grammar may start at a later call (">>>NAME" after ">>>all\n" content).
  const std::string start = lazy ? "( " + first + " | " + next + " )" : first;
  syntax.calls = rules.builder().add_rule("tool-calls", parallel ? start + " " + next + "*" : start);
  return syntax;
}

// <|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME, "parameters": {...}}, ...]<|END_ACTION|>
CallSyntax command_r7b_calls(Rules& rules, const std::vector<Tool>& tools, bool parallel) {
  const std::string id = rules.builder().add_rule("tool-call-id", R"("\"" [0-9]{1,10} "\"")");
  std::vector<std::string> alternatives;
  for (const Tool& tool : tools) {
    const std::string object = rules.object({rules.member("tool_call_id", id),
                                             rules.member("tool_name", rules.json_value_literal(tool.name)),
                                             rules.member("parameters", rules.arguments(tool))});
    alternatives.push_back(rules.builder().add_rule(rule_hint(tool.name, "call"), object));
  }
  const std::string call = rules.builder().add_rule("tool-call", "( " + join(alternatives, " | ") + " ) " + rules.ws());
  const std::string list = "\"[\" " + rules.ws() + " " + repeated(call, parallel, "\",\" " + rules.ws()) + " \"]\"";
  return {rules.builder().add_rule("tool-calls", "\"<|START_ACTION|>\" " + list + " " + rules.ws() + " \"<|END_ACTION|>\""),
          {"<|START_ACTION|>"}};
}

// The control-token texts a family's calls are written in (kept as text for the parser).
std::vector<std::string> family_markers(Family family) {
  switch (family) {
    case Family::Hermes: return {"<tool_call>", "</tool_call>"};
    case Family::Llama3: return {"<|python_tag|>"};
    case Family::Mistral: return {"[TOOL_CALLS]"};
    case Family::MistralArgs: return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
    case Family::GptOss: return {"<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>", "<|call|>"};
    case Family::DeepSeekR1:
    case Family::DeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
              "<｜tool▁calls▁end｜>"};
    case Family::Qwen3Coder: return {"<tool_call>", "</tool_call>"};
    case Family::Glm45: return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
    case Family::CommandR7B:
      return {"<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"};
    case Family::ContentOnly:
    case Family::Generic:
    case Family::FunctionaryV32: return {};
  }
  return {};
}

// Harmony: the channels a model writes before its answer (analysis, preambles), each ended by
// <|end|> and followed by a new assistant header. Unconstrained text: never constrain reasoning.
std::string gpt_oss_prelude(Rules& rules) {
  // Message text holds no "<|": every harmony marker (<|end|>, <|start|>, <|channel|>, ...) ends a
  // message for the parser.
  const std::string text = rules.builder().add_rule("harmony-text", R"(( [^<] | "<"+ [^<|] )* "<"*)");
  const std::string block = rules.builder().add_rule(
      "harmony-block", "\"<|channel|>\" ( \"analysis\" | \"commentary\" ) \"<|message|>\" " + text +
                           " \"<|end|>\" \"<|start|>assistant\"");
  // The grammar may start at the output's start (just after the prompt's "<|start|>assistant") or
  // after a reasoning block ended at <|end|>.
  return "\"<|start|>assistant\"? " + block + "*";
}

// The answer as content constrained by a response schema, written the way the family writes content.
std::string content_rule(Rules& rules, Family family, const Json& response_schema) {
  const std::string value = rules.builder().add_schema("response", response_schema);
  switch (family) {
    case Family::FunctionaryV32: return "\"all\\n\" " + value;  // after the prompt's ">>>"
    case Family::CommandR7B: return "\"<|START_RESPONSE|>\" " + value + " \"<|END_RESPONSE|>\"";
    case Family::GptOss:
      return "\"<|channel|>final\" ( \" \" \"<|constrain|>\"? \"json\" | \"<|constrain|>json\" )? \"<|message|>\" " + value;
    default: return value;
  }
}

// The Generic family: the whole answer is one JSON object, a call or a response, and the system
// prompt says so (the template knows no tool syntax), as llama.cpp's generic format does.
void plan_generic(ChatPlan& p, const std::vector<Tool>& tools, const ChatRequest& request, const Json& response_schema) {
  const bool required = request.tool_choice == ToolChoice::Required || request.tool_choice == ToolChoice::Named;
  Json call_schemas = Json::array();
  for (const Tool& tool : tools) {
    Json schema = {{"type", "object"},
                   {"properties", {{"name", {{"type", "string"}, {"const", tool.name}}}, {"arguments", tool.parameters}}},
                   {"required", Json::array({"name", "arguments"})}};
    if (request.parallel_tool_calls) {
      schema["properties"]["id"] = {{"type", "string"}, {"minLength", 4}};
      schema["required"].push_back("id");
    }
    call_schemas.push_back(std::move(schema));
  }
  const Json one_call = call_schemas.size() == 1 ? call_schemas[0] : Json{{"anyOf", call_schemas}};
  const Json call = request.parallel_tool_calls
                        ? Json{{"type", "object"},
                               {"properties", {{"tool_calls", {{"type", "array"}, {"items", one_call}, {"minItems", 1}}}}},
                               {"required", Json::array({"tool_calls"})}}
                        : Json{{"type", "object"},
                               {"properties", {{"tool_call", one_call}}},
                               {"required", Json::array({"tool_call"})}};
  const std::string key = request.parallel_tool_calls ? "tool_calls" : "tool_call";
  Json schema;
  std::string instruction;
  if (required) {
    schema = call;
    instruction = "Respond in JSON format with `" + key + "` (a request to call tools)";
  } else {
    const Json response = response_schema.is_null() ? Json{{"type", "string"}} : response_schema;
    schema = {{"anyOf", Json::array({call, Json{{"type", "object"},
                                                {"properties", {{"response", response}}},
                                                {"required", Json::array({"response"})}}})}};
    instruction = "Respond in JSON format, either with `" + key +
                  "` (a request to call tools) or with `response` reply to the user's request";
  }
  GrammarBuilder builder;
  builder.add_schema("root", schema);
  p.grammar = builder.text();
  p.grammar_lazy = false;
  p.extra_messages = Json::array({Json{{"role", "system"}, {"content", instruction}}});
}

void plan_tools(ChatPlan& p, Family family, const std::vector<Tool>& tools, const ChatRequest& request,
                const Json& response_schema) {
  if (family == Family::Generic) {
    plan_generic(p, tools, request, response_schema);
    return;
  }
  const bool required = request.tool_choice == ToolChoice::Required || request.tool_choice == ToolChoice::Named;
  // A content schema with tools: the answer is either constrained content or calls, from its start.
  const bool lazy = !required && response_schema.is_null();
  const bool parallel = request.parallel_tool_calls;
  Rules rules;
  CallSyntax syntax;
  switch (family) {
    case Family::Hermes: syntax = hermes_calls(rules, tools, parallel); break;
    case Family::Llama3:
      syntax = llama3_calls(rules, tools, parallel);
      p.additional_stops.push_back("<|eom_id|>");  // ends a <|python_tag|> call
      break;
    case Family::Mistral: syntax = mistral_calls(rules, tools, parallel); break;
    case Family::MistralArgs: syntax = mistral_args_calls(rules, tools, parallel); break;
    case Family::GptOss:
      syntax = gpt_oss_calls(rules, tools);
      p.additional_stops.push_back("<|call|>");
      break;
    case Family::DeepSeekR1: syntax = deepseek_r1_calls(rules, tools, parallel); break;
    case Family::DeepSeekV3: syntax = deepseek_v3_calls(rules, tools, parallel); break;
    case Family::Qwen3Coder: syntax = qwen3_coder_calls(rules, tools, parallel); break;
    case Family::Glm45: syntax = glm45_calls(rules, tools, parallel); break;
    case Family::FunctionaryV32: syntax = functionary_calls(rules, tools, parallel, lazy); break;
    case Family::CommandR7B: syntax = command_r7b_calls(rules, tools, parallel); break;
    case Family::ContentOnly:
    case Family::Generic: break;  // handled above
  }
  const std::string& ws = rules.ws();
  std::string body;
  if (family == Family::GptOss) {
    // Harmony is one grammar for the whole output unless lazy: the channels before the answer,
    // then the call (or the final channel's constrained content).
    const std::string prelude = gpt_oss_prelude(rules);
    const std::string call_first = "( \"<|channel|>\" ( \"commentary\" | \"analysis\" ) )? " + syntax.calls;
    if (lazy) {
      body = syntax.calls;
    } else if (required) {
      body = prelude + " " + call_first;
    } else {
      body = prelude + " ( " + call_first + " | " + content_rule(rules, family, response_schema) + " )";
    }
  } else if (lazy) {
    body = syntax.calls + " " + ws;
  } else if (required) {
    body = (family == Family::FunctionaryV32 ? "" : ws + " ") + syntax.calls + " " + ws;
  } else {
    body = (family == Family::FunctionaryV32 ? "" : ws + " ") + "( " + content_rule(rules, family, response_schema) +
           " | " + syntax.calls + " ) " + ws;
  }
  rules.builder().add_rule("root", body);
  p.grammar = rules.builder().text();
  p.grammar_lazy = lazy;
  if (lazy) {
    p.grammar_triggers = syntax.triggers;
    p.grammar_start_triggers = syntax.start_triggers;
  }
}

// A response schema without tools, wrapped as the family writes content where it must be.
std::string schema_grammar(Family family, const Json& response_schema, bool json_object) {
  if (family != Family::FunctionaryV32 && family != Family::CommandR7B && family != Family::GptOss) {
    return json_object ? grammar::json_object_gbnf() : grammar::json_schema_to_gbnf(response_schema);
  }
  Rules rules;
  std::string body = content_rule(rules, family, response_schema);
  if (family == Family::GptOss) body = gpt_oss_prelude(rules) + " " + body;
  rules.builder().add_rule("root", body + " " + rules.ws());
  return rules.builder().text();
}

bool ends_with_marker(std::string_view rendered, std::string_view marker) {
  if (marker.empty()) return false;
  while (!rendered.empty() && (rendered.back() == ' ' || rendered.back() == '\n' || rendered.back() == '\t' ||
                               rendered.back() == '\r')) {
    rendered.remove_suffix(1);
  }
  return rendered.size() >= marker.size() && rendered.substr(rendered.size() - marker.size()) == marker;
}

void add_unique(std::vector<std::string>& list, const std::string& item) {
  if (!item.empty() && std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

}  // namespace

ChatPlan plan(const ChatFormat& format, const ChatRequest& request, std::string_view rendered) {
  ChatPlan p;
  std::vector<Tool> tools = read_tools(request.tools);
  const bool has_tools = !tools.empty();

  if (request.tool_choice == ToolChoice::Required && !has_tools) {
    throw_error("tool_choice \"required\" needs at least one tool in `tools`");
  }
  if (request.tool_choice == ToolChoice::Named) {
    auto named = std::find_if(tools.begin(), tools.end(), [&](const Tool& t) { return t.name == request.tool_name; });
    if (named == tools.end()) {
      throw_error("tool_choice names the function '{}', which is not among the request's tools", request.tool_name);
    }
    tools = {*named};
  }
  const bool use_tools = has_tools && request.tool_choice != ToolChoice::None;

  // A template without native call syntax gets the generic JSON format when tools are asked for.
  Family family = format.family;
  if (has_tools && family == Family::ContentOnly) family = Family::Generic;

  p.parse.family = family;
  p.parse.reasoning_format = request.reasoning_format;
  p.parse.reasoning_start = format.reasoning_start;
  p.parse.reasoning_end = format.reasoning_end;
  p.parse.parse_tool_calls = use_tools;
  p.parse.thinking_forced_open = ends_with_marker(rendered, format.reasoning_start);

  const bool has_schema = !request.json_schema.is_null();
  if (!request.grammar.empty() && (has_schema || request.json_object)) {
    throw_error("a request gives both a grammar and a JSON schema (response_format / json_schema): only one can constrain the answer");
  }
  if (has_schema && request.json_object) {
    throw_error("a request gives both response_format json_object and a JSON schema: only one can constrain the answer");
  }
  if (use_tools && !request.grammar.empty()) {
    throw_error("a grammar cannot be combined with tools (tool_choice is not \"none\"): the tool calls have their own grammar");
  }
  Json response_schema = request.json_schema;
  if (request.json_object) response_schema = Json{{"type", "object"}};

  if (use_tools) {
    plan_tools(p, family, tools, request, response_schema);
    if (family == Family::Qwen3Coder || family == Family::Glm45) {
      // Raw string values stay strings for the parser ("42" is the text 42, not a number).
      p.parse.string_arguments = Json::object();
      for (const Tool& tool : tools) {
        Json names = Json::array();
        if (auto properties = tool.parameters.find("properties"); properties != tool.parameters.end() && properties->is_object()) {
          for (const auto& [name, schema] : properties->items()) {
            if (is_string_only_schema(schema)) names.push_back(name);
          }
        }
        p.parse.string_arguments[tool.name] = std::move(names);
      }
    }
  } else if (!request.grammar.empty()) {
    p.grammar = request.grammar;
  } else if (has_schema || request.json_object) {
    p.grammar = schema_grammar(family, response_schema, request.json_object);
  }

  // Harmony's grammars cover the reasoning channels themselves; elsewhere the reasoning block
  // stays unconstrained by starting the grammar after it.
  p.grammar_after_reasoning = !p.grammar.empty() && !format.reasoning_start.empty() && family != Family::GptOss;

  if (use_tools || family == Family::GptOss) {
    for (const std::string& marker : family_markers(family)) add_unique(p.preserved_tokens, marker);
  }
  add_unique(p.preserved_tokens, format.reasoning_start);
  add_unique(p.preserved_tokens, format.reasoning_end);
  return p;
}

}  // namespace okapi::chat
