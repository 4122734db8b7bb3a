// What a chat template implies about the model's output, and how okapi reads it back: the
// tool-call syntax of the model's family, its reasoning markers, the grammar that constrains a
// request's answer (tools, JSON schema), and the parser that turns generated text into an OpenAI
// assistant message (content, reasoning_content, tool_calls), all at once or while it streams.
//
// The family is detected from the template (its markers, and renderings of probe conversations),
// never from a model's file name. One request goes:
//   detect_format(template) once -> plan(format, request, rendered prompt) -> generation with the
//   plan's grammar -> StreamParser over the generated text -> deltas / the final message.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja/chat_template.hpp"

namespace okapi::chat {

using Json = nlohmann::ordered_json;

// Tool-call syntaxes.
enum class Family {
  ContentOnly,     // no tool syntax known and no tools in the request: the output is content
  Generic,         // a template with no native tool format: JSON {"tool_call": ...} / {"response": ...}
  Hermes,          // Hermes 2/3, Qwen 2.5, Qwen 3: <tool_call>{"name": ..., "arguments": ...}</tool_call>
  Llama3,          // Llama 3.1-3.3: {"name": ..., "parameters": ...} and <|python_tag|>
  Mistral,         // [TOOL_CALLS][{"name": ..., "arguments": ..., "id": ...}] (Nemo)
  MistralArgs,     // [TOOL_CALLS]name[ARGS]{...} (Mistral Small 3.2, Devstral, Ministral 3)
  GptOss,          // harmony: <|channel|>commentary to=functions.name ... <|message|>{...}<|call|>
  DeepSeekR1,      // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```...
  DeepSeekV3,      // DeepSeek V3.1/V3.2: <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
  Qwen3Coder,      // <tool_call><function=name><parameter=p>value</parameter></function></tool_call>
  Glm45,           // <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
  FunctionaryV32,  // >>>name\n{...} / all\ncontent
  CommandR7B,      // <|START_ACTION|>[{"tool_call_id": ..., "tool_name": ..., "parameters": ...}]<|END_ACTION|>
};
std::string_view family_name(Family family);

// Where reasoning text goes (llama-server's --reasoning-format / reasoning_format).
enum class ReasoningFormat {
  None,      // left in content as the model wrote it
  Deepseek,  // extracted into reasoning_content
  Auto,      // as Deepseek (the default)
};
// "none", "deepseek", "auto" (also "deepseek-legacy", read as deepseek). Throws okapi::Error otherwise.
ReasoningFormat parse_reasoning_format(std::string_view name);
std::string_view reasoning_format_name(ReasoningFormat format);

// A template's output conventions, detected once per template.
struct ChatFormat {
  Family family = Family::ContentOnly;  // with tools; Generic when the template has no native syntax
  std::string reasoning_start;  // "<think>" and "</think>" (or the family's own); empty: no reasoning
  std::string reasoning_end;
  bool supports_tools = false;         // the template renders `tools`
  bool supports_enable_thinking = false;  // the template reads enable_thinking
};
ChatFormat detect_format(const jinja::ChatTemplate& chat_template);

enum class ToolChoice { None, Auto, Required, Named };

// What one request asks for.
struct ChatRequest {
  Json tools;  // OpenAI tools array ([{type: function, function: {name, description, parameters}}]); null: none
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;  // Named: the function
  bool parallel_tool_calls = false;
  ReasoningFormat reasoning_format = ReasoningFormat::Auto;
  bool enable_thinking = true;
  Json json_schema;     // response_format json_schema / json_schema field; null: none
  bool json_object = false;  // response_format {"type": "json_object"}
  std::string grammar;  // the client's GBNF; empty: none
};

// How a parse reads the output.
struct ParseOptions {
  Family family = Family::ContentOnly;
  ReasoningFormat reasoning_format = ReasoningFormat::Auto;
  std::string reasoning_start, reasoning_end;
  bool thinking_forced_open = false;  // the prompt ends inside the reasoning block: the output starts in it
  bool parse_tool_calls = true;       // false: call syntax stays content (no tools, or tool_choice none)
  // XML-argument families (Qwen3-Coder, GLM-4.5): {tool name: [parameter, ...]} for the parameters
  // whose schema is a plain string, written raw between the tags; their values stay strings even
  // where they read as JSON ("42", "true"). Null: every value that parses as JSON is JSON.
  Json string_arguments;
};

// How to constrain and read one request.
struct ChatPlan {
  std::string grammar;  // GBNF, empty: unconstrained
  // Lazy: unconstrained until the output contains one of the triggers; the grammar then matches the
  // output from the trigger's first byte on.
  bool grammar_lazy = false;
  std::vector<std::string> grammar_triggers;
  // Lazy too: triggers that count only where the answer starts (after the reasoning block and blank
  // space): a call that is the whole answer (Llama 3's bare JSON, Functionary's first call), whose
  // text inside content is not a call for the parser.
  std::vector<std::string> grammar_start_triggers;
  // The grammar (lazy or not) applies only after the reasoning block has ended (reasoning_end seen,
  // or no reasoning started); the reasoning itself is never constrained.
  bool grammar_after_reasoning = false;
  std::vector<std::string> preserved_tokens;  // control-token texts the parser must see in the output
  std::vector<std::string> additional_stops;
  Json extra_messages;  // Generic: a system instruction to merge in front (null: none)
  ParseOptions parse;
};
// `rendered`: the prompt the template produced for this request (forced-open thinking is read off
// its end). Throws grammar::SchemaError (a schema it cannot express) or okapi::Error.
ChatPlan plan(const ChatFormat& format, const ChatRequest& request, std::string_view rendered);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text
  std::string id;
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ChatMessage&) const = default;
  // OpenAI's assistant message: role, content (null when empty and there are tool calls),
  // reasoning_content when non-empty, tool_calls when any.
  Json to_json() const;
};

// Parses an assistant's output. `partial`: the text is a prefix of output still being generated,
// so a marker or call that may be unfinished is held back rather than reported as content, and a
// call's arguments are reported only as far as they are final. Malformed calls stay content.
// Call ids are the model's own where the family writes them (Mistral's 9-character ids, Command
// R7B's tool_call_id), else empty (StreamParser assigns them).
ChatMessage parse_output(std::string_view text, bool partial, const ParseOptions& options);

// The streaming side: feeds generated text, returns OpenAI chat.completion.chunk `delta` objects
// (content / reasoning_content appended; a new call with index, id, type and function.name first,
// then its function.arguments in pieces). The deltas of a stream concatenate to the message that
// finish() returns, which equals parse_output(text, false) with the stream's ids.
class StreamParser {
 public:
  explicit StreamParser(ParseOptions options, std::string id_prefix = "call_");
  std::vector<Json> push(std::string_view text);
  std::vector<Json> finish();
  const ChatMessage& message() const { return message_; }

 private:
  ParseOptions options_;
  std::string id_prefix_;
  std::string text_;
  ChatMessage message_;  // as far as reported
  std::vector<std::string> ids_;
};

}  // namespace okapi::chat
