// The output parsers: a model's generated text -> content, reasoning_content and tool_calls, for
// every family, complete or while it streams.
//
// One rule makes streaming work: a parse of a prefix (partial) reports only what a parse of any
// longer text reports too. So a possibly-unfinished marker at the end is held back, content that
// is only whitespace is not reported until something follows it, reasoning's trailing whitespace
// waits, and a call's arguments are reported as a prefix of their final text: JSON arguments are
// the model's JSON with the whitespace outside strings removed (a streaming transformation), and
// XML-style arguments grow by whole parameters.
#include <algorithm>
#include <array>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_format.hpp"

namespace okapi::chat {
namespace {

constexpr int kMaxJsonDepth = 64;         // hostile output: nesting beyond this is not a call
constexpr size_t kMaxNameBytes = 256;      // a function name longer than this is not one

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size() && is_space(s[pos])) ++pos;
  return pos;
}

std::string_view strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string_view lstrip(std::string_view s) { return s.substr(std::min(skip_space(s, 0), s.size())); }

std::string_view rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && is_space(s[e - 1])) --e;
  return s.substr(0, e);
}

bool all_space(std::string_view s) { return std::all_of(s.begin(), s.end(), is_space); }

// The longest suffix of `s` that is a proper, non-empty prefix of one of `markers`: what a partial
// parse holds back because the next bytes may complete a marker.
size_t partial_marker_suffix(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t longest = 0;
  for (const auto marker : markers) {
    for (size_t n = std::min(s.size(), marker.size() - 1); n > longest; --n) {
      if (s.substr(s.size() - n) == marker.substr(0, n)) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

struct Found {
  size_t pos = std::string_view::npos;
  std::string_view marker;
};
Found find_first(std::string_view s, size_t from, std::initializer_list<std::string_view> markers) {
  Found best;
  for (const auto marker : markers) {
    const size_t at = s.find(marker, from);
    if (at < best.pos || (at == best.pos && at != std::string_view::npos && marker.size() > best.marker.size())) {
      best = {at, marker};
    }
  }
  return best;
}

// ---- JSON scanning: complete, a valid prefix, or invalid; depth-bounded --------------------------

enum class Scan { Complete, Prefix, Invalid };
struct ScanResult {
  Scan status = Scan::Invalid;
  size_t end = 0;  // one past the value when Complete
};

ScanResult scan_string(std::string_view s, size_t pos) {  // s[pos] == '"'
  for (size_t i = pos + 1; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') return {Scan::Complete, i + 1};
    if (c < 0x20) return {Scan::Invalid, i};
    if (c == '\\') {
      if (++i >= s.size()) return {Scan::Prefix, s.size()};
      const char e = s[i];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k) {
          if (++i >= s.size()) return {Scan::Prefix, s.size()};
          if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return {Scan::Invalid, i};
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return {Scan::Invalid, i};
      }
    }
  }
  return {Scan::Prefix, s.size()};
}

ScanResult scan_value(std::string_view s, size_t pos, int depth);

ScanResult scan_container(std::string_view s, size_t pos, int depth, bool object) {
  if (depth > kMaxJsonDepth) return {Scan::Invalid, pos};
  const char close = object ? '}' : ']';
  size_t i = skip_space(s, pos + 1);
  if (i >= s.size()) return {Scan::Prefix, s.size()};
  if (s[i] == close) return {Scan::Complete, i + 1};
  while (true) {
    if (object) {
      if (s[i] != '"') return {Scan::Invalid, i};
      const auto key = scan_string(s, i);
      if (key.status != Scan::Complete) return key;
      i = skip_space(s, key.end);
      if (i >= s.size()) return {Scan::Prefix, s.size()};
      if (s[i] != ':') return {Scan::Invalid, i};
      i = skip_space(s, i + 1);
    }
    const auto value = scan_value(s, i, depth + 1);
    if (value.status != Scan::Complete) return value;
    i = skip_space(s, value.end);
    if (i >= s.size()) return {Scan::Prefix, s.size()};
    if (s[i] == close) return {Scan::Complete, i + 1};
    if (s[i] != ',') return {Scan::Invalid, i};
    i = skip_space(s, i + 1);
    if (i >= s.size()) return {Scan::Prefix, s.size()};
  }
}

ScanResult scan_value(std::string_view s, size_t pos, int depth) {
  pos = skip_space(s, pos);
  if (pos >= s.size()) return {Scan::Prefix, s.size()};
  const char c = s[pos];
  if (c == '{' || c == '[') return scan_container(s, pos, depth, c == '{');
  if (c == '"') return scan_string(s, pos);
  for (const std::string_view literal : {"true", "false", "null"}) {
    if (c != literal[0]) continue;
    const auto have = s.substr(pos, literal.size());
    if (have == literal) return {Scan::Complete, pos + literal.size()};
    return {literal.starts_with(have) ? Scan::Prefix : Scan::Invalid, s.size()};
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    size_t i = pos + 1;
    while (i < s.size() && std::string_view("0123456789.eE+-").find(s[i]) != std::string_view::npos) ++i;
    // A number that reaches the end of the text may go on; nlohmann checks its form later.
    return {i >= s.size() ? Scan::Prefix : Scan::Complete, i};
  }
  return {Scan::Invalid, pos};
}

// A whole text that is one JSON value (surrounding whitespace allowed), parsed within the depth bound.
std::optional<Json> parse_json(std::string_view s) {
  const std::string spaced = std::string(s) + ' ';  // a number at the very end is complete here
  const auto scanned = scan_value(spaced, 0, 0);
  if (scanned.status != Scan::Complete || skip_space(spaced, scanned.end) != spaced.size()) return std::nullopt;
  try {
    return Json::parse(s);
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The JSON text without the whitespace outside strings: a prefix of the raw text gives a prefix
// of the result, so a streamed call's arguments only ever grow.
std::string minify(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  bool in_string = false, escaped = false;
  for (const char c : raw) {
    if (in_string) {
      out += c;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (!is_space(c)) {
      out += c;
      if (c == '"') in_string = true;
    }
  }
  return out;
}

// JSON string escaping that maps a prefix to a prefix (bytes >= 0x80 pass through).
std::string escape_json(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

// ---- call objects -------------------------------------------------------------------------------

struct CallShape {
  std::array<std::string_view, 2> name_keys;  // empty entries unused
  std::array<std::string_view, 2> argument_keys;
  std::string_view id_key;   // empty: the family gives no ids
  bool strict_keys = false;  // any other key: not a call (bare JSON that may be an answer instead)
};
constexpr CallShape kNameArguments{{"name", ""}, {"arguments", "parameters"}, {}, false};
constexpr CallShape kLlamaCall{{"name", ""}, {"parameters", "arguments"}, {}, true};
constexpr CallShape kMistralCall{{"name", ""}, {"arguments", "parameters"}, "id", false};
constexpr CallShape kCommandCall{{"tool_name", "name"}, {"parameters", "arguments"}, "tool_call_id", false};

bool is_one_of(std::string_view key, const std::array<std::string_view, 2>& keys) {
  return !key.empty() && std::find(keys.begin(), keys.end(), key) != keys.end();
}

struct CallRead {
  Scan status = Scan::Invalid;
  size_t end = 0;
  ToolCall call;
  bool reportable = false;  // partial: the name (and id, where the family gives one) is known
};

// One call object at `pos`: {"name": ..., "arguments": {...} or "...", ...}.
CallRead read_call_object(std::string_view s, size_t pos, const CallShape& shape) {
  CallRead out;
  size_t i = skip_space(s, pos);
  if (i >= s.size()) return {Scan::Prefix, s.size(), {}, false};
  if (s[i] != '{') return {Scan::Invalid, i, {}, false};
  bool have_name = false, have_id = false, have_arguments = false;
  auto finish_prefix = [&](Scan status) {
    out.status = status;
    out.end = s.size();
    out.reportable = status == Scan::Prefix && have_name && (shape.id_key.empty() || have_id);
    return out;
  };
  i = skip_space(s, i + 1);
  if (i < s.size() && s[i] == '}') return {Scan::Invalid, i + 1, {}, false};  // {}: no name
  while (true) {
    if (i >= s.size()) return finish_prefix(Scan::Prefix);
    if (s[i] != '"') return finish_prefix(Scan::Invalid);
    const auto key_scan = scan_string(s, i);
    if (key_scan.status != Scan::Complete) return finish_prefix(key_scan.status);
    const auto key_json = parse_json(s.substr(i, key_scan.end - i));
    if (!key_json) return finish_prefix(Scan::Invalid);
    const std::string key = key_json->get<std::string>();
    const bool known = is_one_of(key, shape.name_keys) || is_one_of(key, shape.argument_keys) ||
                       (!shape.id_key.empty() && key == shape.id_key) || key == "type";
    if (shape.strict_keys && !known) return finish_prefix(Scan::Invalid);
    i = skip_space(s, key_scan.end);
    if (i >= s.size()) return finish_prefix(Scan::Prefix);
    if (s[i] != ':') return finish_prefix(Scan::Invalid);
    const size_t value_begin = skip_space(s, i + 1);
    const auto value = scan_value(s, value_begin, 1);
    if (value.status == Scan::Invalid) return finish_prefix(Scan::Invalid);
    const std::string_view raw = s.substr(value_begin, value.end - value_begin);
    const bool complete = value.status == Scan::Complete;
    if (is_one_of(key, shape.argument_keys) && !have_arguments) {
      have_arguments = true;
      if (!raw.empty() && raw[0] == '{') {
        out.call.arguments = minify(raw);
      } else if (!raw.empty() && raw[0] == '"') {
        // Arguments given as a JSON string holding JSON: reported once whole.
        if (complete) {
          const auto text = parse_json(raw);
          if (!text) return finish_prefix(Scan::Invalid);
          out.call.arguments = text->get<std::string>();
        }
      } else if (!raw.empty()) {
        return finish_prefix(Scan::Invalid);
      }
    } else if (is_one_of(key, shape.name_keys) && complete && !have_name) {
      const auto name = parse_json(raw);
      if (!name || !name->is_string() || name->get<std::string>().empty()) return finish_prefix(Scan::Invalid);
      out.call.name = name->get<std::string>();
      have_name = true;
    } else if (!shape.id_key.empty() && key == shape.id_key && complete) {
      const auto id = parse_json(raw);
      if (!id) return finish_prefix(Scan::Invalid);
      out.call.id = id->is_string() ? id->get<std::string>() : dump(*id);
      have_id = true;
    } else if (key == "type" && complete) {
      const auto type = parse_json(raw);
      if (!type || *type != "function") return finish_prefix(Scan::Invalid);
    }
    if (!complete) return finish_prefix(Scan::Prefix);
    i = skip_space(s, value.end);
    if (i >= s.size()) return finish_prefix(Scan::Prefix);
    if (s[i] == '}') {
      if (!have_name) return finish_prefix(Scan::Invalid);
      if (!have_arguments) out.call.arguments = "{}";
      out.status = Scan::Complete;
      out.end = i + 1;
      out.reportable = true;
      return out;
    }
    if (s[i] != ',') return finish_prefix(Scan::Invalid);
    i = skip_space(s, i + 1);
  }
}

struct CallsRead {
  Scan status = Scan::Invalid;
  size_t end = 0;
  std::vector<ToolCall> calls;  // complete ones, then a reportable partial one
};

// A JSON array of call objects at `pos`.
CallsRead read_call_array(std::string_view s, size_t pos, const CallShape& shape) {
  CallsRead out;
  size_t i = skip_space(s, pos);
  if (i >= s.size()) return {Scan::Prefix, s.size(), {}};
  if (s[i] != '[') return {Scan::Invalid, i, {}};
  i = skip_space(s, i + 1);
  while (true) {
    if (i >= s.size()) return {Scan::Prefix, s.size(), std::move(out.calls)};
    if (s[i] == ']' && out.calls.empty()) return {Scan::Invalid, i, {}};  // no calls at all
    auto call = read_call_object(s, i, shape);
    if (call.status == Scan::Invalid) return {Scan::Invalid, call.end, {}};
    if (call.status == Scan::Prefix) {
      if (call.reportable) out.calls.push_back(std::move(call.call));
      return {Scan::Prefix, s.size(), std::move(out.calls)};
    }
    out.calls.push_back(std::move(call.call));
    i = skip_space(s, call.end);
    if (i >= s.size()) return {Scan::Prefix, s.size(), std::move(out.calls)};
    if (s[i] == ']') return {Scan::Complete, i + 1, std::move(out.calls)};
    if (s[i] != ',') return {Scan::Invalid, i, {}};
    i = skip_space(s, i + 1);
  }
}

// XML-style arguments: {"key":value,...} built parameter by parameter; values that parse as JSON
// are JSON, others strings. Without the closing brace while the call is unfinished.
struct XmlArguments {
  std::string text = "{";
  void add(std::string_view key, std::string_view value, bool raw_string) {
    if (text.size() > 1) text += ',';
    text += dump(Json(std::string(key)));
    text += ':';
    const auto parsed = raw_string ? std::nullopt : parse_json(value);
    text += parsed ? dump(*parsed) : dump(Json(std::string(value)));
  }
  std::string closed() const { return text + "}"; }
};

// Whether the plan says `key` of `tool` is a plain string written raw (ParseOptions::string_arguments).
bool is_raw_string_argument(const Json& string_arguments, const std::string& tool, std::string_view key) {
  if (!string_arguments.is_object()) return false;
  const auto names = string_arguments.find(tool);
  if (names == string_arguments.end() || !names->is_array()) return false;
  return std::any_of(names->begin(), names->end(), [&](const Json& name) { return name.is_string() && name == key; });
}

// Where an XML argument's value (from `from`) ends: at the first `terminator`, except that a JSON
// value is read whole first (its strings may hold the terminator). npos: not known yet (partial).
size_t xml_value_end(std::string_view s, size_t from, std::string_view terminator, bool raw_string, bool partial) {
  if (!raw_string) {
    const size_t j = skip_space(s, from);
    if (j < s.size() && std::string_view("{[\"").find(s[j]) != std::string_view::npos) {
      const auto value = scan_value(s, j, 0);
      if (value.status == Scan::Complete) {
        const size_t after = skip_space(s, value.end);
        if (s.substr(after).starts_with(terminator)) return after;
      } else if (value.status == Scan::Prefix && partial) {
        return std::string_view::npos;
      }
    }
  }
  return s.find(terminator, from);
}

// ---- the text being parsed ----------------------------------------------------------------------

enum class Block { Calls, Incomplete, Malformed };
struct BlockResult {
  Block kind = Block::Malformed;
  size_t end = 0;  // Calls / Malformed: where the block ends
  std::vector<ToolCall> calls;
  std::string content;  // content the block yields (Command R7B's response)
};

class Parser {
 public:
  Parser(std::string_view text, bool partial, const ParseOptions& options)
      : text_(text), partial_(partial), options_(options) {}

  ChatMessage run(bool unterminated_reasoning_is_reasoning);

 private:
  void add_content(std::string_view segment) {
    if (after_structure_) segment = lstrip(segment);
    if (all_space(segment)) return;
    message_.content += segment;
  }
  void add_calls(std::vector<ToolCall> calls) {
    for (auto& call : calls) message_.tool_calls.push_back(std::move(call));
    after_structure_ = true;
  }
  size_t hold(std::string_view s, std::initializer_list<std::string_view> markers) const {
    return partial_ ? partial_marker_suffix(s, markers) : 0;
  }

  void body(std::string_view s);
  template <typename BlockParser>
  void marked_blocks(std::string_view s, std::initializer_list<std::string_view> markers, BlockParser&& block);
  BlockResult malformed(std::string_view s, size_t from, std::string_view end_marker) const {
    const size_t at = s.find(end_marker, from);
    return {Block::Malformed, at == std::string_view::npos ? s.size() : at + end_marker.size(), {}, {}};
  }

  BlockResult hermes_block(std::string_view s, size_t after);
  BlockResult qwen3_coder_block(std::string_view s, size_t after);
  BlockResult glm_block(std::string_view s, size_t after);
  BlockResult mistral_block(std::string_view s, size_t after);
  BlockResult mistral_args_block(std::string_view s, size_t after);
  BlockResult deepseek_block(std::string_view s, size_t after, bool section, bool r1);
  BlockResult command_action_block(std::string_view s, size_t after);
  BlockResult command_response_block(std::string_view s, size_t after);
  BlockResult python_tag_block(std::string_view s, size_t after);
  void llama3(std::string_view s);
  void functionary(std::string_view s);
  void gpt_oss(std::string_view s);
  void generic(std::string_view s);

  std::string_view text_;
  bool partial_;
  const ParseOptions& options_;
  ChatMessage message_;
  bool after_structure_ = false;  // content that follows a call or reasoning loses its leading space
};

ChatMessage Parser::run(bool unterminated_reasoning_is_reasoning) {
  const auto& start = options_.reasoning_start;
  const auto& end = options_.reasoning_end;
  if (options_.family == Family::GptOss || end.empty()) {
    body(text_);
    return std::move(message_);
  }
  const bool keep_raw = options_.reasoning_format == ReasoningFormat::None;
  const size_t first = skip_space(text_, 0);
  size_t reasoning_begin = 0;
  if (!start.empty() && text_.substr(first).starts_with(start)) {
    reasoning_begin = first + start.size();
  } else if (!options_.thinking_forced_open) {
    if (partial_ && first < text_.size() && std::string_view(start).starts_with(text_.substr(first))) {
      return {};  // maybe the start of the reasoning marker
    }
    body(text_);
    return std::move(message_);
  }
  const size_t end_at = text_.find(end, reasoning_begin);
  if (end_at != std::string_view::npos) {
    const size_t after = end_at + end.size();
    if (keep_raw) {
      message_.content += text_.substr(0, after);
    } else {
      message_.reasoning_content = strip(text_.substr(reasoning_begin, end_at - reasoning_begin));
      after_structure_ = true;
    }
    body(text_.substr(after));
    return std::move(message_);
  }
  // The reasoning has not ended.
  if (partial_) {
    const size_t held = text_.size() - partial_marker_suffix(text_.substr(reasoning_begin), {end});
    if (keep_raw) {
      message_.content = text_.substr(0, held);
    } else {
      message_.reasoning_content = lstrip(rstrip(text_.substr(reasoning_begin, held - reasoning_begin)));
    }
  } else if (keep_raw) {
    message_.content = text_;
  } else if (options_.thinking_forced_open || unterminated_reasoning_is_reasoning) {
    message_.reasoning_content = strip(text_.substr(reasoning_begin));
  } else {
    message_.content = text_;  // a <think> that never closed was not reasoning after all
  }
  return std::move(message_);
}

void Parser::body(std::string_view s) {
  const bool calls = options_.parse_tool_calls;
  if (!calls && options_.family != Family::GptOss) {
    add_content(s);
    return;
  }
  switch (options_.family) {
    case Family::ContentOnly: add_content(s); return;
    case Family::Generic: generic(s); return;
    case Family::Hermes:
      marked_blocks(s, {"<tool_call>"}, [&](std::string_view, size_t after) { return hermes_block(s, after); });
      return;
    case Family::Qwen3Coder:
      marked_blocks(s, {"<tool_call>"}, [&](std::string_view, size_t after) { return qwen3_coder_block(s, after); });
      return;
    case Family::Glm45:
      marked_blocks(s, {"<tool_call>"}, [&](std::string_view, size_t after) { return glm_block(s, after); });
      return;
    case Family::Mistral:
      marked_blocks(s, {"[TOOL_CALLS]"}, [&](std::string_view, size_t after) { return mistral_block(s, after); });
      return;
    case Family::MistralArgs:
      marked_blocks(s, {"[TOOL_CALLS]"}, [&](std::string_view, size_t after) { return mistral_args_block(s, after); });
      return;
    case Family::DeepSeekR1:
    case Family::DeepSeekV3: {
      const bool r1 = options_.family == Family::DeepSeekR1;
      marked_blocks(s, {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"}, [&](std::string_view marker, size_t after) {
        return deepseek_block(s, after, marker == "<｜tool▁calls▁begin｜>", r1);
      });
      return;
    }
    case Family::CommandR7B:
      marked_blocks(s, {"<|START_ACTION|>", "<|START_RESPONSE|>"}, [&](std::string_view marker, size_t after) {
        return marker == "<|START_ACTION|>" ? command_action_block(s, after) : command_response_block(s, after);
      });
      return;
    case Family::Llama3: llama3(s); return;
    case Family::FunctionaryV32: functionary(s); return;
    case Family::GptOss: gpt_oss(s); return;
  }
}

// Content up to each marker, then the block the family reads from it; a block that is not a
// valid call stays content, marker and all.
template <typename BlockParser>
void Parser::marked_blocks(std::string_view s, std::initializer_list<std::string_view> markers, BlockParser&& block) {
  size_t pos = 0;
  while (true) {
    const Found found = find_first(s, pos, markers);
    if (found.pos == std::string_view::npos) {
      const auto rest = s.substr(pos);
      add_content(rest.substr(0, rest.size() - hold(rest, markers)));
      return;
    }
    add_content(s.substr(pos, found.pos - pos));
    BlockResult result = block(found.marker, found.pos + found.marker.size());
    if (!result.content.empty()) {
      const bool was_after = after_structure_;
      after_structure_ = false;
      add_content(result.content);
      after_structure_ = was_after;
    }
    if (result.kind == Block::Incomplete && !partial_) result.kind = Block::Malformed, result.end = s.size();
    switch (result.kind) {
      case Block::Calls:
        add_calls(std::move(result.calls));
        pos = result.end;
        break;
      case Block::Incomplete:
        add_calls(std::move(result.calls));
        return;
      case Block::Malformed: {
        const bool was_after = after_structure_;
        after_structure_ = false;
        add_content(s.substr(found.pos, result.end - found.pos));
        after_structure_ = was_after;
        pos = result.end;
        break;
      }
    }
    if (pos >= s.size()) return;
  }
}

// A fixed literal at `pos`: matched, absent, or (partial) the text ends inside it.
enum class Lit { Yes, No, AtEnd };
Lit literal_at(std::string_view s, size_t pos, std::string_view literal, bool partial) {
  const auto have = s.substr(std::min(pos, s.size()));
  if (have.starts_with(literal)) return Lit::Yes;
  if (partial && literal.starts_with(have)) return Lit::AtEnd;
  return Lit::No;
}

BlockResult Parser::hermes_block(std::string_view s, size_t after) {
  constexpr std::string_view kEnd = "</tool_call>";
  auto read = read_call_object(s, after, kNameArguments);
  if (read.status == Scan::Invalid) return malformed(s, after, kEnd);
  if (read.status == Scan::Prefix) {
    BlockResult r{Block::Incomplete, s.size(), {}, {}};
    if (read.reportable) r.calls.push_back(std::move(read.call));
    return r;
  }
  const size_t i = skip_space(s, read.end);
  switch (literal_at(s, i, kEnd, partial_)) {
    case Lit::Yes: return {Block::Calls, i + kEnd.size(), {std::move(read.call)}, {}};
    case Lit::AtEnd: return {Block::Incomplete, s.size(), {std::move(read.call)}, {}};
    case Lit::No: break;
  }
  if (i >= s.size()) return {Block::Calls, s.size(), {std::move(read.call)}, {}};  // ended without </tool_call>
  return malformed(s, after, kEnd);
}

BlockResult Parser::qwen3_coder_block(std::string_view s, size_t after) {
  constexpr std::string_view kEnd = "</tool_call>";
  BlockResult incomplete{Block::Incomplete, s.size(), {}, {}};
  size_t i = skip_space(s, after);
  switch (literal_at(s, i, "<function=", partial_)) {
    case Lit::Yes: break;
    case Lit::AtEnd: return incomplete;
    case Lit::No: return malformed(s, after, kEnd);
  }
  i += std::string_view("<function=").size();
  const size_t name_end = s.find('>', i);
  if (name_end == std::string_view::npos) {
    return s.size() - i <= kMaxNameBytes && s.find_first_of("<\n", i) == std::string_view::npos ? incomplete
                                                                                              : malformed(s, after, kEnd);
  }
  ToolCall call;
  call.name = strip(s.substr(i, name_end - i));
  if (call.name.empty() || call.name.size() > kMaxNameBytes || call.name.find_first_of("<\n") != std::string::npos) {
    return malformed(s, after, kEnd);
  }
  XmlArguments arguments;
  auto unfinished = [&]() {
    call.arguments = arguments.text;
    incomplete.calls.push_back(call);
    return incomplete;
  };
  i = name_end + 1;
  while (true) {
    i = skip_space(s, i);
    if (i >= s.size()) return unfinished();
    if (const auto lit = literal_at(s, i, "<parameter=", partial_); lit != Lit::No) {
      if (lit == Lit::AtEnd) return unfinished();
      const size_t key_begin = i + std::string_view("<parameter=").size();
      const size_t key_end = s.find('>', key_begin);
      if (key_end == std::string_view::npos) return unfinished();
      const std::string_view key = strip(s.substr(key_begin, key_end - key_begin));
      const bool raw_string = is_raw_string_argument(options_.string_arguments, call.name, key);
      const size_t value_end = xml_value_end(s, key_end + 1, "</parameter>", raw_string, partial_);
      if (value_end == std::string_view::npos) return unfinished();
      std::string_view value = s.substr(key_end + 1, value_end - key_end - 1);
      // The template writes "<parameter=k>\nvalue\n</parameter>": one newline each side is syntax.
      if (value.starts_with('\n')) value.remove_prefix(1);
      if (value.ends_with('\n')) value.remove_suffix(1);
      arguments.add(key, value, raw_string);
      i = value_end + std::string_view("</parameter>").size();
      continue;
    }
    switch (literal_at(s, i, "</function>", partial_)) {
      case Lit::Yes: break;
      case Lit::AtEnd: return unfinished();
      case Lit::No: return malformed(s, after, kEnd);
    }
    i = skip_space(s, i + std::string_view("</function>").size());
    call.arguments = arguments.closed();
    switch (literal_at(s, i, kEnd, partial_)) {
      case Lit::Yes: return {Block::Calls, i + kEnd.size(), {std::move(call)}, {}};
      case Lit::AtEnd: return {Block::Incomplete, s.size(), {std::move(call)}, {}};
      case Lit::No: break;
    }
    if (i >= s.size()) return {Block::Calls, s.size(), {std::move(call)}, {}};
    return malformed(s, after, kEnd);
  }
}

BlockResult Parser::glm_block(std::string_view s, size_t after) {
  constexpr std::string_view kEnd = "</tool_call>";
  BlockResult incomplete{Block::Incomplete, s.size(), {}, {}};
  const Found name_end = find_first(s, after, {"<arg_key>", kEnd, "\n"});
  if (name_end.pos == std::string_view::npos) {
    const auto rest = s.substr(after);
    if (rest.size() <= kMaxNameBytes && rest.find_first_of("<{") == std::string_view::npos) return incomplete;
    if (partial_ && hold(rest, {"<arg_key>", kEnd}) > 0) return incomplete;
    return malformed(s, after, kEnd);
  }
  ToolCall call;
  call.name = strip(s.substr(after, name_end.pos - after));
  if (call.name.empty() || call.name.size() > kMaxNameBytes || call.name.find_first_of("<>{}\"") != std::string::npos) {
    return malformed(s, after, kEnd);
  }
  XmlArguments arguments;
  auto unfinished = [&]() {
    call.arguments = arguments.text;
    incomplete.calls.push_back(call);
    return incomplete;
  };
  size_t i = name_end.pos;
  while (true) {
    i = skip_space(s, i);
    if (i >= s.size()) return unfinished();
    if (const auto lit = literal_at(s, i, "<arg_key>", partial_); lit != Lit::No) {
      if (lit == Lit::AtEnd) return unfinished();
      const size_t key_begin = i + std::string_view("<arg_key>").size();
      const size_t key_end = s.find("</arg_key>", key_begin);
      if (key_end == std::string_view::npos) return unfinished();
      size_t v = skip_space(s, key_end + std::string_view("</arg_key>").size());
      switch (literal_at(s, v, "<arg_value>", partial_)) {
        case Lit::Yes: break;
        case Lit::AtEnd: return unfinished();
        case Lit::No:
          if (v >= s.size()) return unfinished();
          return malformed(s, after, kEnd);
      }
      v += std::string_view("<arg_value>").size();
      const std::string_view key = strip(s.substr(key_begin, key_end - key_begin));
      const bool raw_string = is_raw_string_argument(options_.string_arguments, call.name, key);
      const size_t value_end = xml_value_end(s, v, "</arg_value>", raw_string, partial_);
      if (value_end == std::string_view::npos) return unfinished();
      arguments.add(key, s.substr(v, value_end - v), raw_string);
      i = value_end + std::string_view("</arg_value>").size();
      continue;
    }
    call.arguments = arguments.closed();
    switch (literal_at(s, i, kEnd, partial_)) {
      case Lit::Yes: return {Block::Calls, i + kEnd.size(), {std::move(call)}, {}};
      case Lit::AtEnd: return {Block::Incomplete, s.size(), {std::move(call)}, {}};
      case Lit::No: return malformed(s, after, kEnd);
    }
  }
}

BlockResult Parser::mistral_block(std::string_view s, size_t after) {
  auto read = read_call_array(s, after, kMistralCall);
  if (read.status == Scan::Invalid) return {Block::Malformed, std::max(read.end, after), {}, {}};
  if (read.status == Scan::Prefix) return {Block::Incomplete, s.size(), std::move(read.calls), {}};
  return {Block::Calls, read.end, std::move(read.calls), {}};
}

BlockResult Parser::mistral_args_block(std::string_view s, size_t after) {
  constexpr std::string_view kArgs = "[ARGS]";
  size_t i = after;
  while (i < s.size() && i - after <= kMaxNameBytes &&
         (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '-' || s[i] == '.')) {
    ++i;
  }
  if (i - after > kMaxNameBytes) return {Block::Malformed, i, {}, {}};
  if (i >= s.size()) return {Block::Incomplete, s.size(), {}, {}};
  if (i == after) return {Block::Malformed, i, {}, {}};
  ToolCall call;
  call.name = s.substr(after, i - after);
  // Mistral Small 3.2 writes "name[CALL_ID]id[ARGS]{...}": the id is the model's own.
  constexpr std::string_view kCallId = "[CALL_ID]";
  if (const auto id_lit = literal_at(s, i, kCallId, partial_); id_lit != Lit::No) {
    if (id_lit == Lit::AtEnd) return {Block::Incomplete, s.size(), {}, {}};
    const size_t id_begin = i + kCallId.size();
    size_t id_end = id_begin;
    while (id_end < s.size() && id_end - id_begin <= kMaxNameBytes && std::isalnum(static_cast<unsigned char>(s[id_end]))) {
      ++id_end;
    }
    if (id_end - id_begin > kMaxNameBytes) return {Block::Malformed, id_end, {}, {}};
    if (id_end >= s.size()) return {Block::Incomplete, s.size(), {}, {}};
    if (id_end == id_begin) return {Block::Malformed, id_end, {}, {}};
    call.id = s.substr(id_begin, id_end - id_begin);
    i = id_end;
  }
  const auto lit = literal_at(s, i, kArgs, partial_);
  if (lit == Lit::AtEnd) return {Block::Incomplete, s.size(), {}, {}};
  if (lit == Lit::No) return {Block::Malformed, i, {}, {}};
  const size_t value_begin = skip_space(s, i + kArgs.size());
  if (value_begin >= s.size()) return {Block::Incomplete, s.size(), {}, {}};  // the arguments have not begun
  if (s[value_begin] != '{') return {Block::Malformed, value_begin, {}, {}};
  const auto value = scan_value(s, value_begin, 0);
  if (value.status == Scan::Invalid) return {Block::Malformed, std::min(value.end + 1, s.size()), {}, {}};
  call.arguments = minify(s.substr(value_begin, value.end - value_begin));
  if (value.status == Scan::Prefix) return {Block::Incomplete, s.size(), {std::move(call)}, {}};
  return {Block::Calls, value.end, {std::move(call)}, {}};
}

// R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>
// V3: <｜tool▁call▁begin｜>name<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
// inside <｜tool▁calls▁begin｜> ... <｜tool▁calls▁end｜> (`section`), or one call alone.
BlockResult Parser::deepseek_block(std::string_view s, size_t after, bool section, bool r1) {
  constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>", kSep = "<｜tool▁sep｜>";
  constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>", kSectionEnd = "<｜tool▁calls▁end｜>";
  const std::string_view end_marker = section ? kSectionEnd : kCallEnd;
  BlockResult result{Block::Incomplete, s.size(), {}, {}};
  auto incomplete = [&](std::optional<ToolCall> call) {
    result.kind = Block::Incomplete;
    result.end = s.size();
    if (call) result.calls.push_back(std::move(*call));
    return result;
  };
  size_t i = after;
  bool first = true;
  while (true) {
    if (section || !first) {
      i = skip_space(s, i);
      if (i >= s.size()) {
        if (!partial_ && !result.calls.empty()) return {Block::Calls, s.size(), std::move(result.calls), {}};
        return incomplete(std::nullopt);
      }
      if (!first || section) {
        if (const auto end_lit = literal_at(s, i, kSectionEnd, partial_); end_lit != Lit::No && !result.calls.empty()) {
          if (end_lit == Lit::AtEnd) return incomplete(std::nullopt);
          return {Block::Calls, i + kSectionEnd.size(), std::move(result.calls), {}};
        }
        if (!section) return {Block::Calls, i, std::move(result.calls), {}};
        const auto lit = literal_at(s, i, kCallBegin, partial_);
        if (lit == Lit::AtEnd) return incomplete(std::nullopt);
        if (lit == Lit::No) return malformed(s, after, end_marker);
        i += kCallBegin.size();
      }
    }
    first = false;
    const size_t sep = s.find(kSep, i);
    ToolCall call;
    size_t json_begin = 0;
    if (r1) {
      if (sep == std::string_view::npos) {
        return s.size() - i <= kMaxNameBytes || partial_ ? incomplete(std::nullopt) : malformed(s, after, end_marker);
      }
      const size_t name_begin = sep + kSep.size();
      const size_t newline = s.find('\n', name_begin);
      if (newline == std::string_view::npos) {
        return s.size() - name_begin <= kMaxNameBytes ? incomplete(std::nullopt) : malformed(s, after, end_marker);
      }
      call.name = strip(s.substr(name_begin, newline - name_begin));
      size_t j = newline + 1;
      switch (literal_at(s, j, "```json", partial_)) {
        case Lit::Yes: j += std::string_view("```json").size(); break;
        case Lit::AtEnd: return incomplete(std::nullopt);
        case Lit::No: return malformed(s, after, end_marker);
      }
      json_begin = skip_space(s, j);
    } else {
      if (sep == std::string_view::npos) {
        return s.size() - i <= kMaxNameBytes ? incomplete(std::nullopt) : malformed(s, after, end_marker);
      }
      call.name = strip(s.substr(i, sep - i));
      json_begin = skip_space(s, sep + kSep.size());
    }
    if (call.name.empty() || call.name.size() > kMaxNameBytes || call.name.find_first_of("<>{}\n") != std::string::npos) {
      return malformed(s, after, end_marker);
    }
    if (json_begin >= s.size()) return incomplete(std::nullopt);  // the arguments have not begun
    if (s[json_begin] != '{') return malformed(s, after, end_marker);
    const auto value = scan_value(s, json_begin, 0);
    if (value.status == Scan::Invalid) return malformed(s, after, end_marker);
    call.arguments = minify(s.substr(json_begin, value.end - json_begin));
    if (value.status == Scan::Prefix) return incomplete(std::move(call));
    i = skip_space(s, value.end);
    if (r1) {
      switch (literal_at(s, i, "```", partial_)) {
        case Lit::Yes: i = skip_space(s, i + 3); break;
        case Lit::AtEnd: return incomplete(std::move(call));
        case Lit::No:
          if (i >= s.size() && !partial_) break;
          return malformed(s, after, end_marker);
      }
    }
    switch (literal_at(s, i, kCallEnd, partial_)) {
      case Lit::Yes: i += kCallEnd.size(); break;
      case Lit::AtEnd: return incomplete(std::move(call));
      case Lit::No:
        if (i >= s.size() && !partial_) {
          result.calls.push_back(std::move(call));
          return {Block::Calls, s.size(), std::move(result.calls), {}};
        }
        return malformed(s, after, end_marker);
    }
    result.calls.push_back(std::move(call));
  }
}

BlockResult Parser::command_action_block(std::string_view s, size_t after) {
  constexpr std::string_view kEnd = "<|END_ACTION|>";
  auto read = read_call_array(s, after, kCommandCall);
  if (read.status == Scan::Invalid) return malformed(s, after, kEnd);
  if (read.status == Scan::Prefix) return {Block::Incomplete, s.size(), std::move(read.calls), {}};
  const size_t i = skip_space(s, read.end);
  switch (literal_at(s, i, kEnd, partial_)) {
    case Lit::Yes: return {Block::Calls, i + kEnd.size(), std::move(read.calls), {}};
    case Lit::AtEnd: return {Block::Incomplete, s.size(), std::move(read.calls), {}};
    case Lit::No: break;
  }
  if (i >= s.size()) return {Block::Calls, s.size(), std::move(read.calls), {}};
  return malformed(s, after, kEnd);
}

BlockResult Parser::command_response_block(std::string_view s, size_t after) {
  constexpr std::string_view kEnd = "<|END_RESPONSE|>";
  const size_t end = s.find(kEnd, after);
  if (end == std::string_view::npos) {
    const auto rest = s.substr(after);
    return {partial_ ? Block::Incomplete : Block::Calls, s.size(), {}, std::string(rest.substr(0, rest.size() - hold(rest, {kEnd})))};
  }
  return {Block::Calls, end + kEnd.size(), {}, std::string(s.substr(after, end - after))};
}

// <|python_tag|>: a JSON call, or code for the built-in python tool.
BlockResult Parser::python_tag_block(std::string_view s, size_t after) {
  const size_t i = skip_space(s, after);
  if (i < s.size() && s[i] == '{') {
    auto read = read_call_object(s, i, kNameArguments);
    if (read.status == Scan::Complete) {
      BlockResult r{Block::Calls, read.end, {std::move(read.call)}, {}};
      // Parallel calls: more call objects may follow the first, as at the output's start.
      while (true) {
        size_t j = skip_space(s, r.end);
        const bool separated = j < s.size() && s[j] == ';';
        if (separated) j = skip_space(s, j + 1);
        if (j >= s.size() && separated && partial_) return {Block::Incomplete, s.size(), std::move(r.calls), {}};
        if (j >= s.size() || s[j] != '{') return r;
        auto next = read_call_object(s, j, kLlamaCall);
        if (next.status == Scan::Complete) {
          r.calls.push_back(std::move(next.call));
          r.end = next.end;
          continue;
        }
        if (next.status == Scan::Prefix && partial_) {
          if (next.reportable) r.calls.push_back(std::move(next.call));
          return {Block::Incomplete, s.size(), std::move(r.calls), {}};
        }
        return r;  // not a call: content from here
      }
    }
    if (read.status == Scan::Prefix) {
      BlockResult r{Block::Incomplete, s.size(), {}, {}};
      if (read.reportable) r.calls.push_back(std::move(read.call));
      return r;
    }
  }
  if (i >= s.size()) return {Block::Incomplete, s.size(), {}, {}};
  if (partial_ && s[i] == '{') return {Block::Incomplete, s.size(), {}, {}};
  ToolCall call{"python", "{\"code\":\"" + escape_json(s.substr(after)), {}};
  if (!partial_) call.arguments += "\"}";
  return {partial_ ? Block::Incomplete : Block::Calls, s.size(), {std::move(call)}, {}};
}

// Llama 3.x: bare JSON calls at the start ({"name": ..., "parameters": ...}, ";"-separated), or
// <|python_tag|> anywhere.
void Parser::llama3(std::string_view s) {
  size_t i = skip_space(s, 0);
  size_t content_from = 0;
  if (i < s.size() && s[i] == '{') {
    std::vector<ToolCall> calls;
    while (true) {
      auto read = read_call_object(s, i, kLlamaCall);
      if (read.status == Scan::Invalid) {
        if (!calls.empty()) content_from = i;
        break;
      }
      if (read.status == Scan::Prefix) {
        if (!partial_) {
          if (calls.empty()) break;  // content from the start
          add_calls(std::move(calls));
          add_content(s.substr(i));
          return;
        }
        if (read.reportable) calls.push_back(std::move(read.call));
        add_calls(std::move(calls));
        return;
      }
      calls.push_back(std::move(read.call));
      i = skip_space(s, read.end);
      if (i < s.size() && s[i] == ';') i = skip_space(s, i + 1);
      content_from = i;
      if (i >= s.size() || s[i] != '{') break;
    }
    if (!calls.empty()) add_calls(std::move(calls));
  } else if (partial_ && i >= s.size()) {
    return;
  }
  marked_blocks(s.substr(content_from), {"<|python_tag|>"},
                [&, rest = s.substr(content_from)](std::string_view, size_t after) { return python_tag_block(rest, after); });
}

// Functionary v3.2: "name\n{...}" segments after ">>>" (the prompt ends with the first ">>>");
// "all\n" starts content.
void Parser::functionary(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (s.substr(pos).starts_with(">>>")) pos += 3;
    const size_t newline = s.find('\n', pos);
    const std::string_view head = s.substr(pos, newline == std::string_view::npos ? s.size() - pos : newline - pos);
    const bool name_like = !head.empty() && head.size() <= kMaxNameBytes &&
                           std::all_of(head.begin(), head.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
                           });
    if (newline == std::string_view::npos) {
      if (partial_ && (head.empty() || name_like || std::string_view(">>>").starts_with(head))) return;
      add_content(s.substr(pos));
      return;
    }
    if (!name_like) {
      add_content(s.substr(pos));
      return;
    }
    const size_t body_begin = newline + 1;
    if (head == "all") {
      const size_t next = s.find(">>>", body_begin);
      if (next == std::string_view::npos) {
        const auto rest = s.substr(body_begin);
        add_content(rest.substr(0, rest.size() - hold(rest, {">>>"})));
        return;
      }
      add_content(s.substr(body_begin, next - body_begin));
      pos = next;
      continue;
    }
    const size_t json_begin = skip_space(s, body_begin);
    if (json_begin >= s.size()) {
      if (!partial_) add_content(s.substr(pos));
      return;
    }
    if (s[json_begin] != '{') {
      const size_t next = s.find(">>>", body_begin);
      if (head == "python") {  // raw code for the built-in python tool
        const size_t code_end = next == std::string_view::npos ? s.size() - hold(s.substr(body_begin), {">>>"}) : next;
        ToolCall call{"python", "{\"code\":\"" + escape_json(s.substr(body_begin, code_end - body_begin)), {}};
        if (next == std::string_view::npos && partial_) {
          add_calls({std::move(call)});
          return;
        }
        call.arguments += "\"}";
        add_calls({std::move(call)});
        if (next == std::string_view::npos) return;
        pos = next;
        continue;
      }
      add_content(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
      if (next == std::string_view::npos) return;
      pos = next;
      continue;
    }
    const auto value = scan_value(s, json_begin, 0);
    if (value.status == Scan::Invalid) {
      const size_t next = s.find(">>>", body_begin);
      add_content(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
      if (next == std::string_view::npos) return;
      pos = next;
      continue;
    }
    ToolCall call{std::string(head), minify(s.substr(json_begin, value.end - json_begin)), {}};
    if (value.status == Scan::Prefix) {
      if (partial_) add_calls({std::move(call)});
      else add_content(s.substr(pos));
      return;
    }
    add_calls({std::move(call)});
    pos = skip_space(s, value.end);
    if (pos < s.size() && !s.substr(pos).starts_with(">>>")) {
      if (partial_ && std::string_view(">>>").starts_with(s.substr(pos))) return;
      const size_t next = s.find(">>>", pos);
      add_content(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
      if (next == std::string_view::npos) return;
      pos = next;
    }
  }
}

// gpt-oss (harmony): messages "<|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>BODY"
// ended by <|end|>, <|call|> or <|return|>, later ones opened by "<|start|>assistant[ to=...]".
void Parser::gpt_oss(std::string_view s) {
  constexpr std::string_view kMessage = "<|message|>";
  const std::initializer_list<std::string_view> kEnds = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>"};
  const bool keep_raw = options_.reasoning_format == ReasoningFormat::None;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t header_begin = pos;
    const size_t message_at = s.find(kMessage, pos);
    const auto ahead = lstrip(s.substr(pos));
    const bool looks_like_header = ahead.starts_with("<|") || ahead.starts_with("to=") ||
                                   (partial_ && (std::string_view("<|").starts_with(ahead) ||
                                                 std::string_view("to=").starts_with(ahead)));
    if (!looks_like_header || message_at == std::string_view::npos) {
      if (looks_like_header && partial_) return;  // a header still arriving
      // Text outside any message: content up to the next header.
      const Found next = find_first(s, pos, {"<|start|>", "<|channel|>"});
      if (next.pos == std::string_view::npos || next.pos == pos) {
        const auto rest = s.substr(pos);
        add_content(rest.substr(0, rest.size() - hold(rest, kEnds)));
        return;
      }
      add_content(s.substr(pos, next.pos - pos));
      pos = next.pos;
      continue;
    }
    const std::string_view header = s.substr(pos, message_at - pos);
    std::string channel, recipient;
    if (const size_t c = header.find("<|channel|>"); c != std::string_view::npos) {
      const auto rest = header.substr(c + std::string_view("<|channel|>").size());
      channel = rest.substr(0, std::min(rest.find_first_of(" <"), rest.size()));
    }
    if (const size_t t = header.find("to="); t != std::string_view::npos) {
      const auto rest = header.substr(t + 3);
      recipient = rest.substr(0, std::min(rest.find_first_of(" <"), rest.size()));
    }
    const size_t body_begin = message_at + kMessage.size();
    Found end = find_first(s, body_begin, kEnds);
    if (recipient.starts_with("functions.") && options_.parse_tool_calls) {
      // A call's JSON is read whole first: its strings may hold marker text.
      const size_t json_begin = skip_space(s, body_begin);
      if (json_begin < s.size() && s[json_begin] == '{') {
        const auto value = scan_value(s, json_begin, 0);
        if (value.status == Scan::Complete) {
          end = find_first(s, value.end, kEnds);
        } else if (value.status == Scan::Prefix) {
          end = {};  // the arguments run to the end of the text
        }
      }
    }
    const bool open = end.pos == std::string_view::npos;
    const size_t body_end = open ? s.size() - hold(s.substr(body_begin), kEnds) : end.pos;
    const std::string_view body = s.substr(body_begin, body_end - body_begin);
    const bool consumes_end = !open && end.marker != "<|start|>" && end.marker != "<|channel|>";
    const size_t next = open ? s.size() : end.pos + (consumes_end ? end.marker.size() : 0);
    if (recipient.starts_with("functions.") && options_.parse_tool_calls) {
      ToolCall call{recipient.substr(10), {}, {}};
      const size_t json_begin = skip_space(body, 0);
      const auto value = scan_value(body, json_begin, 0);
      const bool json_ok = value.status == Scan::Complete ? skip_space(body, value.end) == body.size()
                                                          : value.status == Scan::Prefix && open && partial_;
      if (json_begin >= body.size() && open && partial_) return;  // the arguments have not begun
      if (!call.name.empty() && json_ok && json_begin < body.size() && body[json_begin] == '{') {
        call.arguments = minify(body);
        if (open && !partial_ && value.status != Scan::Complete) {
          add_content(s.substr(header_begin));
          return;
        }
        add_calls({std::move(call)});
      } else if (!open || !partial_) {
        add_content(s.substr(header_begin, next - header_begin));  // not a call after all
      } else {
        return;  // hold: the body may still become valid
      }
    } else if (channel == "analysis") {
      if (keep_raw) {
        const bool was_after = after_structure_;
        after_structure_ = false;
        add_content(s.substr(header_begin, (open ? body_end : next) - header_begin));
        after_structure_ = was_after;
      } else {
        message_.reasoning_content += open && partial_ ? rstrip(body) : body;
      }
    } else {
      const bool was_after = after_structure_;
      after_structure_ = false;
      add_content(body);
      after_structure_ = was_after;
    }
    if (open) return;
    pos = next;
  }
}

// Templates without native syntax: the plan has the model answer {"tool_call": {...}},
// {"tool_calls": [...]} or {"response": ...}; anything else is content.
void Parser::generic(std::string_view s) {
  const size_t i = skip_space(s, 0);
  if (i >= s.size() || s[i] != '{') {
    if (partial_ && i >= s.size()) return;
    add_content(s);
    return;
  }
  const auto scanned = scan_value(s, i, 0);
  if (scanned.status == Scan::Prefix && partial_) {
    // Report a call's name once known; a response is reported when whole.
    const size_t key = skip_space(s, i + 1);
    for (const std::string_view wrapper : {"\"tool_call\"", "\"tool_calls\""}) {
      if (!s.substr(key).starts_with(wrapper)) continue;
      size_t v = skip_space(s, key + wrapper.size());
      if (v >= s.size() || s[v] != ':') return;
      v = skip_space(s, v + 1);
      if (wrapper == "\"tool_call\"") {
        auto read = read_call_object(s, v, kNameArguments);
        if (read.status != Scan::Invalid && read.reportable) add_calls({std::move(read.call)});
      } else {
        auto read = read_call_array(s, v, kNameArguments);
        if (read.status != Scan::Invalid) add_calls(std::move(read.calls));
      }
    }
    return;
  }
  const auto value = scanned.status == Scan::Complete && skip_space(s, scanned.end) == s.size()
                         ? parse_json(s)
                         : std::nullopt;
  if (!value || !value->is_object() || value->size() != 1) {
    add_content(s);
    return;
  }
  auto call_of = [](const Json& j) -> std::optional<ToolCall> {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
    const Json arguments = j.contains("arguments") ? j["arguments"] : Json::object();
    if (!arguments.is_object()) return std::nullopt;
    return ToolCall{j["name"].get<std::string>(), dump(arguments), {}};
  };
  // The wrapper's one value, where the text writes it: calls' arguments are read from the text as
  // a streamed parse reads them (the model's JSON minified, escapes as written).
  size_t wrapped = skip_space(s, i + 1);
  wrapped = skip_space(s, scan_string(s, wrapped).end);
  wrapped = skip_space(s, wrapped + 1);  // past ':'
  if (value->contains("response")) {
    const Json& response = (*value)["response"];
    add_content(response.is_string() ? response.get<std::string>() : dump(response));
  } else if (value->contains("tool_call")) {
    auto read = read_call_object(s, wrapped, kNameArguments);
    if (call_of((*value)["tool_call"]) && read.status == Scan::Complete) add_calls({std::move(read.call)});
    else add_content(s);
  } else if (value->contains("tool_calls") && (*value)["tool_calls"].is_array()) {
    for (const auto& j : (*value)["tool_calls"]) {
      if (!call_of(j)) {
        add_content(s);
        return;
      }
    }
    auto read = read_call_array(s, wrapped, kNameArguments);
    if (read.status != Scan::Complete) {
      add_content(s);
      return;
    }
    add_calls(std::move(read.calls));
  } else {
    add_content(s);
  }
}

ChatMessage parse(std::string_view text, bool partial, const ParseOptions& options, bool unterminated_is_reasoning) {
  return Parser(text, partial, options).run(unterminated_is_reasoning);
}

// The longest prefix of `s` that does not end inside a UTF-8 sequence (a delta must be valid UTF-8).
size_t utf8_complete_prefix(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    if (c < 0x80) return n;
    const size_t length = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back < length ? n - back : n;
  }
  return n;
}

std::string random_id(std::string_view prefix) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace

Json ChatMessage::to_json() const {
  Json j = {{"role", "assistant"}};
  j["content"] = content.empty() && !tool_calls.empty() ? Json(nullptr) : Json(content);
  if (!reasoning_content.empty()) j["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& call : tool_calls) {
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  return j;
}

ChatMessage parse_output(std::string_view text, bool partial, const ParseOptions& options) {
  return parse(text, partial, options, false);
}

StreamParser::StreamParser(ParseOptions options, std::string id_prefix)
    : options_(std::move(options)), id_prefix_(std::move(id_prefix)) {}

namespace {

// What `now` adds to what was reported; empty when nothing (or when it contradicts, which the
// parse rules prevent except for a call that turns out malformed after its name was sent).
std::string_view growth(const std::string& reported, const std::string& now, bool final) {
  if (now.size() <= reported.size() || !now.starts_with(reported)) return {};
  std::string_view added = std::string_view(now).substr(reported.size());
  return final ? added : added.substr(0, utf8_complete_prefix(added));
}

std::vector<Json> report(ChatMessage& reported, const ChatMessage& now, std::vector<std::string>& ids,
                         const std::string& id_prefix, bool final) {
  std::vector<Json> deltas;
  if (const auto added = growth(reported.reasoning_content, now.reasoning_content, final); !added.empty()) {
    reported.reasoning_content += added;
    deltas.push_back({{"reasoning_content", std::string(added)}});
  }
  if (const auto added = growth(reported.content, now.content, final); !added.empty()) {
    reported.content += added;
    deltas.push_back({{"content", std::string(added)}});
  }
  for (size_t i = 0; i < now.tool_calls.size(); ++i) {
    const ToolCall& call = now.tool_calls[i];
    if (i >= reported.tool_calls.size()) {
      if (ids.size() <= i) ids.push_back(call.id.empty() ? random_id(id_prefix) : call.id);
      reported.tool_calls.push_back({call.name, "", ids[i]});
      deltas.push_back({{"tool_calls", Json::array({{{"index", i},
                                                     {"id", ids[i]},
                                                     {"type", "function"},
                                                     {"function", {{"name", call.name}, {"arguments", ""}}}}})}});
    }
    ToolCall& sent = reported.tool_calls[i];
    if (const auto added = growth(sent.arguments, call.arguments, final); !added.empty()) {
      sent.arguments += added;
      deltas.push_back({{"tool_calls", Json::array({{{"index", i}, {"function", {{"arguments", std::string(added)}}}}})}});
    }
  }
  return deltas;
}

}  // namespace

std::vector<Json> StreamParser::push(std::string_view text) {
  text_ += text;
  return report(message_, parse(text_, true, options_, false), ids_, id_prefix_, false);
}

std::vector<Json> StreamParser::finish() {
  ChatMessage last = parse(text_, false, options_, false);
  // Reasoning that never closed was streamed as reasoning; it stays reasoning rather than being
  // taken back into content.
  if (!last.reasoning_content.starts_with(message_.reasoning_content)) last = parse(text_, false, options_, true);
  return report(message_, last, ids_, id_prefix_, true);
}

}  // namespace okapi::chat
