#include "server/anthropic_api.hpp"

#include <string_view>

#include <fmt/format.h>

namespace okapi::server::anthropic {
namespace {

const Json* present(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string string_at(const Json& object, const char* key, const std::string& where, bool required) {
  const Json* value = present(object, key);
  if (!value) {
    if (required) throw_bad_request(where + "." + key, "'{}.{}' is required", where, key);
    return {};
  }
  if (!value->is_string()) throw_bad_request(where + "." + key, "'{}.{}' must be a string", where, key);
  return value->get<std::string>();
}

// Claude Code's system prompt starts with a billing header whose cch= stamp changes on every
// request, which would keep the prompt cache from reaching past it: the stamp is blanked (as
// llama-server does). Any other prompt is left alone.
void normalize_billing_header(std::string& text) {
  static constexpr std::string_view kHeader = "x-anthropic-billing-header:";
  if (!text.starts_with(kHeader)) return;
  const size_t stamp = text.find("cch=", kHeader.size());
  constexpr size_t kStampLength = 5;
  if (stamp == std::string::npos) return;
  const size_t begin = stamp + 4;
  if (begin + kStampLength < text.size() && text[begin + kStampLength] == ';')
    for (size_t i = 0; i < kStampLength; ++i) text[begin + i] = 'f';
}

std::string system_text(const Json& system) {
  std::string text;
  if (system.is_string()) {
    text = system.get<std::string>();
    normalize_billing_header(text);
    return text;
  }
  if (!system.is_array()) throw_bad_request("system", "'system' must be a string or an array of text blocks");
  for (size_t i = 0; i < system.size(); ++i) {
    const Json& block = system[i];
    const std::string where = fmt::format("system[{}]", i);
    if (!block.is_object() || block.value("type", "") != "text")
      throw_bad_request(where, "'{}' must be a text block: {{\"type\": \"text\", \"text\": ...}}", where);
    std::string part = string_at(block, "text", where, true);
    normalize_billing_header(part);
    text += part;
  }
  return text;
}

// An image block's source as an OpenAI image_url part.
Json image_part(const Json& block, const std::string& where) {
  const Json* source = present(block, "source");
  if (!source || !source->is_object()) throw_bad_request(where + ".source", "'{}.source' must be an object", where);
  const std::string type = string_at(*source, "type", where + ".source", true);
  std::string url;
  if (type == "base64") {
    std::string media_type = string_at(*source, "media_type", where + ".source", false);
    if (media_type.empty()) media_type = "image/jpeg";
    url = fmt::format("data:{};base64,{}", media_type, string_at(*source, "data", where + ".source", true));
  } else if (type == "url") {
    url = string_at(*source, "url", where + ".source", true);
  } else {
    throw_bad_request(where + ".source.type", "'{}.source.type' must be \"base64\" or \"url\", got \"{}\"", where, type);
  }
  return {{"type", "image_url"}, {"image_url", {{"url", std::move(url)}}}};
}

// A document block: plain-text sources are read as text; okapi reads no PDFs.
Json document_part(const Json& block, const std::string& where) {
  const Json* source = present(block, "source");
  if (!source || !source->is_object()) throw_bad_request(where + ".source", "'{}.source' must be an object", where);
  if (string_at(*source, "type", where + ".source", true) != "text")
    throw_bad_request(where + ".source.type", "'{}': only plain-text documents (source type \"text\") can be read", where);
  return {{"type", "text"}, {"text", string_at(*source, "data", where + ".source", true)}};
}

// A tool_result's content: a string, or text and image blocks (text only: their text joined, as
// llama-server; with an image: OpenAI parts).
Json tool_result_content(const Json& block, const std::string& where) {
  const Json* content = present(block, "content");
  if (!content) return "";
  if (content->is_string()) return *content;
  if (!content->is_array())
    throw_bad_request(where + ".content", "'{}.content' must be a string or an array of text and image blocks", where);
  std::string text;
  Json parts = Json::array();
  bool images = false;
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& item = (*content)[i];
    const std::string item_where = fmt::format("{}.content[{}]", where, i);
    const std::string type = item.is_object() ? item.value("type", "") : "";
    if (type == "text") {
      const std::string part = string_at(item, "text", item_where, true);
      text += part;
      parts.push_back({{"type", "text"}, {"text", part}});
    } else if (type == "image") {
      images = true;
      parts.push_back(image_part(item, item_where));
    } else {
      throw_bad_request(item_where, "'{}' must be a text or image block", item_where);
    }
  }
  return images ? parts : Json(text);
}

// One Anthropic message as OpenAI messages, appended to `out`.
void convert_message(const Json& message, size_t i, Json& out) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!message.is_object()) throw_bad_request(where, "'{}' must be an object", where);
  const std::string role = string_at(message, "role", where, true);
  if (role != "user" && role != "assistant")
    throw_bad_request(where + ".role", "'{}.role' must be \"user\" or \"assistant\" (the system prompt is the top-level 'system')",
                      where);
  const Json* content = present(message, "content");
  if (!content) {
    if (role == "assistant") return;  // nothing said (llama-server skips it too)
    throw_bad_request(where + ".content", "'{}.content' is required", where);
  }
  if (content->is_string()) {
    out.push_back({{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) throw_bad_request(where + ".content", "'{}.content' must be a string or an array of content blocks", where);
  const bool assistant = role == "assistant";
  Json parts = Json::array();
  Json tool_calls = Json::array();
  Json tool_results = Json::array();
  std::string reasoning;
  for (size_t b = 0; b < content->size(); ++b) {
    const Json& block = (*content)[b];
    const std::string block_where = fmt::format("{}.content[{}]", where, b);
    if (!block.is_object()) throw_bad_request(block_where, "'{}' must be a content block object", block_where);
    const std::string type = string_at(block, "type", block_where, true);
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", string_at(block, "text", block_where, true)}});
    } else if (type == "image") {
      parts.push_back(image_part(block, block_where));
    } else if (type == "document") {
      parts.push_back(document_part(block, block_where));
    } else if (type == "thinking") {
      reasoning += string_at(block, "thinking", block_where, false);
    } else if (type == "redacted_thinking") {
      // Encrypted by Anthropic for its own models: nothing a local model can read.
    } else if (type == "tool_use") {
      if (!assistant) throw_bad_request(block_where, "'{}': tool_use blocks belong in assistant messages", block_where);
      const std::string name = string_at(block, "name", block_where, true);
      if (name.empty()) throw_bad_request(block_where + ".name", "'{}.name' must not be empty", block_where);
      const Json* input = present(block, "input");
      if (input && !input->is_object()) throw_bad_request(block_where + ".input", "'{}.input' must be an object", block_where);
      tool_calls.push_back({{"id", string_at(block, "id", block_where, false)},
                            {"type", "function"},
                            {"function", {{"name", name}, {"arguments", input ? input->dump() : std::string("{}")}}}});
    } else if (type == "tool_result") {
      if (assistant) throw_bad_request(block_where, "'{}': tool_result blocks belong in user messages", block_where);
      if (const Json* is_error = present(block, "is_error"); is_error && !is_error->is_boolean())
        throw_bad_request(block_where + ".is_error", "'{}.is_error' must be a boolean", block_where);
      tool_results.push_back({{"role", "tool"},
                              {"tool_call_id", string_at(block, "tool_use_id", block_where, true)},
                              {"content", tool_result_content(block, block_where)}});
    } else {
      throw_bad_request(block_where + ".type",
                        "'{}.type' \"{}\" is not supported (text, image, document, thinking, tool_use, tool_result)",
                        block_where, type);
    }
  }
  // Tool results answer the previous assistant turn's calls, so they come first (Anthropic asks
  // clients to put them first too); the user's own words follow.
  for (auto& result : tool_results) out.push_back(std::move(result));
  if (parts.empty() && tool_calls.empty() && reasoning.empty()) return;
  Json converted = {{"role", role}};
  converted["content"] = parts.empty() ? Json("") : std::move(parts);
  if (!tool_calls.empty()) converted["tool_calls"] = std::move(tool_calls);
  if (!reasoning.empty()) converted["reasoning_content"] = std::move(reasoning);
  out.push_back(std::move(converted));
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) throw_bad_request("tools", "'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object()) throw_bad_request(where, "'{}' must be an object", where);
    const std::string type = string_at(tool, "type", where, false);
    if (!type.empty() && type != "custom")
      throw_bad_request(where + ".type", "'{}': \"{}\" is one of Anthropic's server tools, which okapi does not run; "
                        "give client tools (name, description, input_schema)", where, type);
    const std::string name = string_at(tool, "name", where, true);
    if (name.empty()) throw_bad_request(where + ".name", "'{}.name' must not be empty", where);
    Json schema = {{"type", "object"}, {"properties", Json::object()}};
    if (const Json* given = present(tool, "input_schema")) {
      if (!given->is_object()) throw_bad_request(where + ".input_schema", "'{}.input_schema' must be a JSON Schema object", where);
      schema = *given;
    }
    out.push_back({{"type", "function"},
                   {"function", {{"name", name}, {"description", string_at(tool, "description", where, false)},
                                 {"parameters", std::move(schema)}}}});
  }
  return out;
}

void convert_tool_choice(const Json& choice, Json& out) {
  if (!choice.is_object()) throw_bad_request("tool_choice", "'tool_choice' must be an object: {{\"type\": \"auto\"}}");
  const std::string type = string_at(choice, "type", "tool_choice", true);
  if (type == "auto") {
    out["tool_choice"] = "auto";
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "none") {
    out["tool_choice"] = "none";
  } else if (type == "tool") {
    out["tool_choice"] = {{"type", "function"}, {"function", {{"name", string_at(choice, "name", "tool_choice", true)}}}};
  } else {
    throw_bad_request("tool_choice.type", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", got \"{}\"", type);
  }
  if (const Json* serial = present(choice, "disable_parallel_tool_use")) {
    if (!serial->is_boolean())
      throw_bad_request("tool_choice.disable_parallel_tool_use", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    out["parallel_tool_calls"] = !serial->get<bool>();
  }
}

void convert_thinking(const Json& thinking, Json& out) {
  if (!thinking.is_object()) throw_bad_request("thinking", "'thinking' must be an object: {{\"type\": \"enabled\", \"budget_tokens\": ...}}");
  const std::string type = string_at(thinking, "type", "thinking", true);
  if (type == "enabled") {
    if (const Json* budget = present(thinking, "budget_tokens")) {
      if (!budget->is_number_integer() || budget->get<int64_t>() < 0)
        throw_bad_request("thinking.budget_tokens", "'thinking.budget_tokens' must be a non-negative integer");
      out["thinking_budget_tokens"] = *budget;
    }
  } else if (type == "disabled") {
    out["thinking_budget_tokens"] = 0;
  } else if (type != "adaptive") {
    throw_bad_request("thinking.type", "'thinking.type' must be \"enabled\", \"disabled\" or \"adaptive\", got \"{}\"", type);
  }
}

}  // namespace

Json to_openai_chat(const Json& body, bool count_tokens) {
  Json out = Json::object();
  Json messages = Json::array();
  if (const Json* system = present(body, "system")) messages.push_back({{"role", "system"}, {"content", system_text(*system)}});
  const Json* given = present(body, "messages");
  if (!given) throw_bad_request("messages", "'messages' is required");
  if (!given->is_array()) throw_bad_request("messages", "'messages' must be an array");
  for (size_t i = 0; i < given->size(); ++i) convert_message((*given)[i], i, messages);
  // A template needs a turn to render a prompt from.
  if (given->empty()) messages.push_back({{"role", "user"}, {"content", ""}});
  out["messages"] = std::move(messages);

  if (const Json* tools = present(body, "tools")) {
    out["tools"] = convert_tools(*tools);
    // Anthropic's models may call several tools at once unless told not to.
    if (!out["tools"].empty()) out["parallel_tool_calls"] = true;
  }
  if (const Json* choice = present(body, "tool_choice")) convert_tool_choice(*choice, out);
  if (const Json* thinking = present(body, "thinking")) convert_thinking(*thinking, out);
  if (const Json* kwargs = present(body, "chat_template_kwargs")) out["chat_template_kwargs"] = *kwargs;
  if (const Json* metadata = present(body, "metadata")) {
    if (!metadata->is_object()) throw_bad_request("metadata", "'metadata' must be an object");
    string_at(*metadata, "user_id", "metadata", false);  // read for its type; nothing uses it
  }
  if (const Json* model = present(body, "model"); model && !model->is_string())
    throw_bad_request("model", "'model' must be a string");
  if (count_tokens) return out;

  if (const Json* stops = present(body, "stop_sequences")) {
    if (!stops->is_array()) throw_bad_request("stop_sequences", "'stop_sequences' must be an array of strings");
    for (const auto& stop : *stops)
      if (!stop.is_string()) throw_bad_request("stop_sequences", "'stop_sequences' must be an array of strings");
    out["stop"] = *stops;
  }
  // Required by Anthropic; llama-server fills in 4096.
  const Json* max_tokens = present(body, "max_tokens");
  out["max_tokens"] = max_tokens ? *max_tokens : Json(4096);
  for (const char* key : {"temperature", "top_p", "top_k", "stream"})
    if (const Json* value = present(body, key)) out[key] = *value;
  return out;
}

bool has_image(const Json& openai_body) {
  const auto messages = openai_body.find("messages");
  if (messages == openai_body.end() || !messages->is_array()) return false;
  for (const auto& message : *messages) {
    const auto content = message.find("content");
    if (content == message.end() || !content->is_array()) continue;
    for (const auto& part : *content)
      if (part.is_object() && part.value("type", "") == "image_url") return true;
  }
  return false;
}

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

Json error_body(int status, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", error_type(status)}, {"message", message}}}};
}

const char* stop_reason(runtime::StopReason reason, bool has_tool_calls, const std::string& stop_sequence) {
  switch (reason) {
    case runtime::StopReason::TokenLimit:
    case runtime::StopReason::ContextFull: return "max_tokens";
    case runtime::StopReason::StopString:
      if (has_tool_calls) return "tool_use";
      return stop_sequence.empty() ? "end_turn" : "stop_sequence";
    default: return has_tool_calls ? "tool_use" : "end_turn";
  }
}

Json usage_json(const runtime::GenerationStats& stats) {
  return {{"input_tokens", stats.prompt_tokens - stats.cached_tokens},
          {"cache_read_input_tokens", stats.cached_tokens},
          {"output_tokens", stats.generated_tokens}};
}

namespace {

Json tool_use_block(const chat::ToolCall& call) {
  Json input = Json::parse(call.arguments, nullptr, false);
  if (input.is_discarded() || !input.is_object()) input = Json::object();
  return {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}};
}

Json stop_sequence_json(const std::string& stop_sequence) {
  return stop_sequence.empty() ? Json() : Json(stop_sequence);
}

}  // namespace

Json message_json(const ResponseHeader& header, const chat::ChatMessage& message, const char* stop_reason,
                  const std::string& stop_sequence, const runtime::GenerationStats& stats) {
  Json content = Json::array();
  if (!message.reasoning_content.empty())
    content.push_back({{"type", "thinking"}, {"thinking", message.reasoning_content}, {"signature", ""}});
  if (!message.content.empty()) content.push_back({{"type", "text"}, {"text", message.content}});
  for (const auto& call : message.tool_calls) content.push_back(tool_use_block(call));
  Json j;
  j["id"] = header.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = header.model;
  j["content"] = std::move(content);
  j["stop_reason"] = stop_reason;
  j["stop_sequence"] = stop_sequence_json(stop_sequence);
  j["usage"] = usage_json(stats);
  return j;
}

std::string sse(const Event& event) { return fmt::format("event: {}\ndata: {}\n\n", event.name, to_text(event.data)); }

Event ping_event() { return {"ping", {{"type", "ping"}}}; }

Event error_event(int status, const std::string& message) { return {"error", error_body(status, message)}; }

std::vector<Event> MessageStream::start(int64_t prompt_tokens) const {
  Json message;
  message["id"] = header_.id;
  message["type"] = "message";
  message["role"] = "assistant";
  message["model"] = header_.model;
  message["content"] = Json::array();
  message["stop_reason"] = nullptr;
  message["stop_sequence"] = nullptr;
  message["usage"] = {{"input_tokens", prompt_tokens}, {"cache_read_input_tokens", 0}, {"output_tokens", 0}};
  return {{"message_start", {{"type", "message_start"}, {"message", std::move(message)}}}, ping_event()};
}

Event MessageStream::delta(Json delta) const {
  return {"content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}}};
}

void MessageStream::open(Block kind, Json content_block, std::vector<Event>& out) {
  close(out);
  open_ = kind;
  ++index_;
  out.push_back({"content_block_start",
                 {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}}});
}

void MessageStream::close(std::vector<Event>& out) {
  if (open_ == Block::None) return;
  // Anthropic's clients expect a thinking block's signature before it stops; a local model's
  // thinking has none.
  if (open_ == Block::Thinking) out.push_back(delta({{"type", "signature_delta"}, {"signature", ""}}));
  out.push_back({"content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}});
  open_ = Block::None;
  open_call_ = -1;
}

std::vector<Event> MessageStream::push(const std::vector<Json>& deltas) {
  std::vector<Event> out;
  for (const auto& d : deltas) {
    if (const auto it = d.find("reasoning_content"); it != d.end() && it->is_string()) {
      if (open_ != Block::Thinking) open(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}}, out);
      out.push_back(delta({{"type", "thinking_delta"}, {"thinking", *it}}));
    }
    if (const auto it = d.find("content"); it != d.end() && it->is_string()) {
      if (open_ != Block::Text) open(Block::Text, {{"type", "text"}, {"text", ""}}, out);
      out.push_back(delta({{"type", "text_delta"}, {"text", *it}}));
    }
    const auto calls = d.find("tool_calls");
    if (calls == d.end() || !calls->is_array()) continue;
    for (const auto& call : *calls) {
      const int64_t call_index = call.value("index", int64_t{0});
      const Json& function = call.contains("function") ? call["function"] : Json::object();
      if (call.contains("id")) {  // a new call: its id and name come first
        open(Block::ToolUse,
             {{"type", "tool_use"}, {"id", call["id"]}, {"name", function.value("name", "")}, {"input", Json::object()}},
             out);
        open_call_ = call_index;
      }
      const std::string arguments = function.value("arguments", "");
      if (!arguments.empty() && open_ == Block::ToolUse && open_call_ == call_index)
        out.push_back(delta({{"type", "input_json_delta"}, {"partial_json", arguments}}));
    }
  }
  return out;
}

std::vector<Event> MessageStream::finish(const char* stop_reason, const std::string& stop_sequence,
                                         const runtime::GenerationStats& stats) {
  std::vector<Event> out;
  close(out);
  out.push_back({"message_delta",
                 {{"type", "message_delta"},
                  {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence_json(stop_sequence)}}},
                  {"usage", usage_json(stats)}}});
  out.push_back({"message_stop", {{"type", "message_stop"}}});
  return out;
}

}  // namespace okapi::server::anthropic
