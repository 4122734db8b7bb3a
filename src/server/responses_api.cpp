#include "server/responses_api.hpp"

#include <chrono>
#include <limits>

#include "core/error.hpp"
#include "server/api_error.hpp"
#include "server/request_params.hpp"
#include "server/server_state.hpp"

namespace okapi::server {

// ---- the store ----

void ResponseStore::put(const std::string& id, Json conversation) {
  const size_t bytes = to_text(conversation).size();
  std::lock_guard lock(mutex_);
  if (const auto it = by_id_.find(id); it != by_id_.end()) {
    bytes_ -= it->second->bytes;
    recent_.erase(it->second);
    by_id_.erase(it);
  }
  if (capacity_ == 0 || bytes > max_bytes_) return;  // one too large to keep is not kept
  recent_.push_front(Entry{id, std::move(conversation), bytes});
  by_id_[id] = recent_.begin();
  bytes_ += bytes;
  while (recent_.size() > capacity_ || bytes_ > max_bytes_) {
    bytes_ -= recent_.back().bytes;
    by_id_.erase(recent_.back().id);
    recent_.pop_back();
  }
}

std::optional<Json> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  recent_.splice(recent_.begin(), recent_, it->second);  // now the most recently used
  return it->second->conversation;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return recent_.size();
}

// ---- requests ----

namespace {

const Json* present(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// A client's string field, "" when absent or not a string (Json::value would throw for a number).
std::string text_of(const Json& object, const char* key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The text of an item's content: a string, or parts of the given kinds ({"type", "text"}), joined.
std::string content_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw_bad_request(where, "'{}' must be a string or an array of content parts", where);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) throw_bad_request(at, "'{}' must be an object", at);
    const std::string type = text_of(part, "type");
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal" &&
        type != "reasoning_text" && type != "summary_text") {
      if (type == "input_image" || type == "input_file" || type == "input_audio")
        throw_bad_request(at, "'{}': {} content is not supported: this server reads text only", at, type);
      throw_bad_request(at, "'{}.type' must be input_text or output_text, got '{}'", at, type);
    }
    const auto value = part.find(key);
    if (value == part.end() || !value->is_string()) throw_bad_request(at, "'{}.{}' must be a string", at, key);
    if (!text.empty()) text += "\n";
    text += value->get<std::string>();
  }
  return text;
}

std::string required_string(const Json& item, const char* key, const std::string& where) {
  const auto it = item.find(key);
  if (it == item.end() || !it->is_string()) throw_bad_request(where, "'{}.{}' must be a string", where, key);
  return it->get<std::string>();
}

// The assistant message that a function call or reasoning item joins: the last message when it is
// the assistant's, else a new one.
Json& assistant_to_join(Json& messages) {
  if (messages.empty() || messages.back().value("role", "") != "assistant")
    messages.push_back({{"role", "assistant"}, {"content", nullptr}});
  return messages.back();
}

// The name of the function a call id belongs to (templates print it with the tool's result).
std::string function_of_call(const Json& messages, const std::string& call_id) {
  for (auto m = messages.rbegin(); m != messages.rend(); ++m) {
    const auto calls = m->find("tool_calls");
    if (calls == m->end() || !calls->is_array()) continue;
    for (const auto& call : *calls)
      if (call.value("id", "") == call_id && call.contains("function") && call["function"].is_object())
        return call["function"].value("name", "");
  }
  return {};
}

void append_item(Json& messages, const Json& item, const std::string& where) {
  if (!item.is_object()) throw_bad_request(where, "'{}' must be an object", where);
  const auto type_it = item.find("type");
  if (type_it != item.end() && !type_it->is_string()) throw_bad_request(where, "'{}.type' must be a string", where);
  const std::string type = type_it == item.end() ? "" : type_it->get<std::string>();
  if ((type.empty() || type == "message") && item.contains("role")) {
    std::string role = required_string(item, "role", where);
    if (role == "developer") role = "system";  // as llama.cpp maps it for templates that lack it
    if (role != "user" && role != "system" && role != "assistant")
      throw_bad_request(where + ".role", "'{}.role' must be user, system, developer or assistant, got '{}'", where, role);
    const auto content = item.find("content");
    if (content == item.end() || content->is_null()) throw_bad_request(where, "'{}.content' is required", where);
    std::string text = content_text(*content, where + ".content");
    if (role == "assistant" && !messages.empty() && messages.back().value("role", "") == "assistant") {
      Json& previous = messages.back();  // an assistant turn given as several items
      const std::string before = previous["content"].is_string() ? previous["content"].get<std::string>() : "";
      previous["content"] = before.empty() ? text : before + "\n" + text;
      return;
    }
    messages.push_back({{"role", role}, {"content", std::move(text)}});
  } else if (type == "function_call") {
    Json call = {{"id", required_string(item, "call_id", where)},
                 {"type", "function"},
                 {"function", {{"name", required_string(item, "name", where)},
                               {"arguments", required_string(item, "arguments", where)}}}};
    Json& assistant = assistant_to_join(messages);
    if (!assistant.contains("tool_calls") || !assistant["tool_calls"].is_array()) assistant["tool_calls"] = Json::array();
    assistant["tool_calls"].push_back(std::move(call));
  } else if (type == "function_call_output") {
    const std::string call_id = required_string(item, "call_id", where);
    const auto output = item.find("output");
    if (output == item.end() || output->is_null()) throw_bad_request(where, "'{}.output' is required", where);
    Json message = {{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*output, where + ".output")}};
    if (std::string name = function_of_call(messages, call_id); !name.empty()) message["name"] = std::move(name);
    messages.push_back(std::move(message));
  } else if (type == "reasoning") {
    // The reasoning text (content), else its summary.
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const Json* parts = present(item, key);
      if (!parts) continue;
      text = content_text(*parts, where + "." + key);
      if (!text.empty()) break;
    }
    Json& assistant = assistant_to_join(messages);
    assistant["reasoning_content"] = std::move(text);
  } else {
    throw_bad_request(where, "'{}' is not an item this server reads (a message, function_call, function_call_output "
                             "or reasoning), got type '{}'",
                      where, type);
  }
}

// Responses function tools ({type, name, description, parameters, strict}) as chat tools.
Json chat_tools(const Json& tools) {
  if (!tools.is_array()) throw_bad_request("tools", "'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object()) throw_bad_request(where, "'{}' must be an object", where);
    if (text_of(tool, "type") != "function")
      throw_bad_request(where, "'{}': only function tools are supported, got type '{}'", where, text_of(tool, "type"));
    Json function = tool;
    function.erase("type");
    if (!function.contains("name")) throw_bad_request(where, "'{}.name' is required", where);
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

Json chat_tool_choice(const Json& choice) {
  if (text_of(choice, "type") == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  return choice;  // "none", "auto", "required"; parse_agent_params checks it
}

// text.format: {"type": "text"} or {"type": "json_schema", name, schema, strict} / {"type": "json_object"}.
Json response_format(const Json& text) {
  if (!text.is_object()) throw_bad_request("text", "'text' must be an object");
  const Json* format = present(text, "format");
  if (!format) return Json();
  if (!format->is_object()) throw_bad_request("text.format", "'text.format' must be an object");
  const std::string type = text_of(*format, "type");
  if (type == "text") return Json();
  if (type == "json_object") return {{"type", "json_object"}};
  if (type == "json_schema") {
    Json schema = *format;
    schema.erase("type");
    return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  throw_bad_request("text.format.type", "'text.format.type' must be text, json_object or json_schema");
}

}  // namespace

ResponsesRequest parse_responses_request(const Json& body, const Json& previous) {
  ResponsesRequest r;
  const Json* input = present(body, "input");
  if (!input) throw_bad_request("input", "'input' is required");
  r.conversation = previous.is_array() ? previous : Json::array();
  if (input->is_string()) {
    r.conversation.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) append_item(r.conversation, (*input)[i], fmt::format("input[{}]", i));
  } else {
    throw_bad_request("input", "'input' must be a string or an array of items");
  }
  if (r.conversation.empty()) throw_bad_request("input", "'input' must not be empty");

  Json& chat = r.chat_body = body;
  for (const char* key : {"input", "instructions", "previous_response_id", "max_output_tokens", "tools", "tool_choice",
                          "text", "reasoning", "store", "metadata", "truncation", "include", "background",
                          "prompt_cache_key", "safety_identifier", "service_tier", "messages"})
    chat.erase(key);
  Json messages = Json::array();
  const std::string instructions = string_field(body, "instructions", "");
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  for (const auto& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (const Json* tools = present(body, "tools")) {
    Json converted = chat_tools(*tools);
    if (!converted.empty()) chat["tools"] = std::move(converted);
  }
  if (const Json* choice = present(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*choice);
  const int64_t max_output =
      integer_field(body, "max_output_tokens", -1, 1, std::numeric_limits<int32_t>::max());
  if (max_output > 0) chat["max_tokens"] = max_output;
  if (const Json* text = present(body, "text")) {
    Json format = response_format(*text);
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  r.previous_response_id = string_field(body, "previous_response_id", "");
  r.store = bool_field(body, "store", true);

  Json& echo = r.echo;
  echo["instructions"] = instructions.empty() ? Json() : Json(instructions);
  echo["max_output_tokens"] = max_output > 0 ? Json(max_output) : Json();
  echo["metadata"] = present(body, "metadata") ? body["metadata"] : Json::object();
  echo["parallel_tool_calls"] = present(body, "parallel_tool_calls") ? body["parallel_tool_calls"] : Json(true);
  echo["previous_response_id"] = r.previous_response_id.empty() ? Json() : Json(r.previous_response_id);
  echo["store"] = r.store;
  echo["temperature"] = present(body, "temperature") ? body["temperature"] : Json(1.0);
  echo["text"] = present(body, "text") ? body["text"] : Json{{"format", {{"type", "text"}}}};
  echo["tool_choice"] = present(body, "tool_choice") ? body["tool_choice"] : Json("auto");
  echo["tools"] = present(body, "tools") ? body["tools"] : Json::array();
  echo["top_p"] = present(body, "top_p") ? body["top_p"] : Json(1.0);
  echo["truncation"] = "disabled";
  return r;
}

Json assistant_message(const chat::ChatMessage& message) { return message.to_json(); }

// ---- responses ----

Json responses_usage_json(const GenerationStats& stats) {
  Json u;
  u["input_tokens"] = stats.prompt_tokens;
  u["input_tokens_details"] = {{"cached_tokens", stats.cached_tokens}};
  u["output_tokens"] = stats.generated_tokens;
  u["output_tokens_details"] = {{"reasoning_tokens", 0}};
  u["total_tokens"] = stats.prompt_tokens + stats.generated_tokens;
  return u;
}

std::string responses_sse(const Json& event) {
  return "event: " + event.value("type", "") + "\ndata: " + to_text(event) + "\n\n";
}

ResponsesWriter::ResponsesWriter(const ResponseHeader& header, Json echo) : header_(header), echo_(std::move(echo)) {}

Json ResponsesWriter::event(const char* type, Json fields) {
  Json e;
  e["type"] = type;
  for (auto& [key, value] : fields.items()) e[key] = std::move(value);
  e["sequence_number"] = sequence_++;
  return e;
}

Json ResponsesWriter::response_shell(const char* status) const {
  Json r;
  r["id"] = header_.id;
  r["object"] = "response";
  r["created_at"] = header_.created;
  r["status"] = status;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  r["model"] = header_.model;
  r["output"] = Json::array();
  for (const auto& [key, value] : echo_.items()) r[key] = value;
  r["usage"] = nullptr;
  return r;
}

Json ResponsesWriter::item_json(const Item& item, const char* status) const {
  if (item.kind == "reasoning") {
    Json content = Json::array();
    if (item.done) content.push_back({{"type", "reasoning_text"}, {"text", item.text}});
    return {{"id", item.id}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", std::move(content)},
            {"status", status}};
  }
  if (item.kind == "message") {
    Json content = Json::array();
    if (item.done)
      content.push_back(
          {{"type", "output_text"}, {"text", item.text}, {"annotations", Json::array()}, {"logprobs", Json::array()}});
    return {{"id", item.id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
  }
  return {{"id", item.id},
          {"type", "function_call"},
          {"status", status},
          {"arguments", item.done ? item.text : std::string()},
          {"call_id", item.call_id},
          {"name", item.name}};
}

size_t ResponsesWriter::open_item(const std::string& kind, std::vector<Json>& events, const Json& call) {
  const size_t call_index = call.value("index", size_t{0});
  if (kind == "function_call" && call_index < call_items_.size()) return call_items_[call_index];
  if (kind != "function_call" && !items_.empty() && items_.back().kind == kind && !items_.back().done)
    return items_.size() - 1;
  // A new item: an open reasoning or message item before it is complete.
  for (size_t i = 0; i < items_.size(); ++i)
    if (!items_[i].done && items_[i].kind != "function_call") close_item(i, events);
  Item item;
  item.kind = kind;
  item.id = make_response_id(kind == "reasoning" ? "rs_" : kind == "message" ? "msg_" : "fc_");
  if (kind == "function_call") {
    item.call_id = call.value("id", "");
    if (const auto fn = call.find("function"); fn != call.end() && fn->is_object()) item.name = fn->value("name", "");
  }
  items_.push_back(std::move(item));
  const size_t index = items_.size() - 1;
  events.push_back(event("response.output_item.added",
                         {{"output_index", index}, {"item", item_json(items_[index], "in_progress")}}));
  if (kind == "message")
    events.push_back(event("response.content_part.added",
                           {{"item_id", items_[index].id},
                            {"output_index", index},
                            {"content_index", 0},
                            {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}}));
  if (kind == "function_call") call_items_.push_back(index);
  return index;
}

void ResponsesWriter::close_item(size_t index, std::vector<Json>& events) {
  Item& item = items_[index];
  if (item.done) return;
  item.done = true;
  if (item.kind == "reasoning") {
    events.push_back(event("response.reasoning_text.done",
                           {{"item_id", item.id}, {"output_index", index}, {"content_index", 0}, {"text", item.text}}));
  } else if (item.kind == "message") {
    events.push_back(event("response.output_text.done", {{"item_id", item.id},
                                                          {"output_index", index},
                                                          {"content_index", 0},
                                                          {"text", item.text},
                                                          {"logprobs", Json::array()}}));
    events.push_back(event("response.content_part.done",
                           {{"item_id", item.id},
                            {"output_index", index},
                            {"content_index", 0},
                            {"part", item_json(item, "completed")["content"][0]}}));
  } else {
    events.push_back(event("response.function_call_arguments.done",
                           {{"item_id", item.id}, {"output_index", index}, {"name", item.name}, {"arguments", item.text}}));
  }
  events.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item_json(item, "completed")}}));
}

std::vector<Json> ResponsesWriter::begin() {
  std::vector<Json> events;
  events.push_back(event("response.created", {{"response", response_shell("in_progress")}}));
  events.push_back(event("response.in_progress", {{"response", response_shell("in_progress")}}));
  return events;
}

Json ResponsesWriter::progress(Json prompt_progress) {
  Json e = event("response.in_progress", {{"response", response_shell("in_progress")}});
  e["prompt_progress"] = std::move(prompt_progress);
  return e;
}

std::vector<Json> ResponsesWriter::deltas(const std::vector<Json>& chat_deltas, const Json& timings) {
  std::vector<Json> events;
  for (const auto& delta : chat_deltas) {
    if (const auto it = delta.find("reasoning_content"); it != delta.end() && it->is_string()) {
      const size_t index = open_item("reasoning", events);
      items_[index].text += it->get<std::string>();
      events.push_back(event("response.reasoning_text.delta",
                             {{"item_id", items_[index].id}, {"output_index", index}, {"content_index", 0}, {"delta", *it}}));
    }
    if (const auto it = delta.find("content"); it != delta.end() && it->is_string()) {
      const size_t index = open_item("message", events);
      items_[index].text += it->get<std::string>();
      events.push_back(event("response.output_text.delta", {{"item_id", items_[index].id},
                                                            {"output_index", index},
                                                            {"content_index", 0},
                                                            {"delta", *it},
                                                            {"logprobs", Json::array()}}));
    }
    if (const auto it = delta.find("tool_calls"); it != delta.end() && it->is_array()) {
      for (const auto& call : *it) {
        if (!call.is_object()) continue;
        const size_t index = open_item("function_call", events, call);
        Item& item = items_[index];
        const auto fn = call.find("function");
        const std::string arguments = fn != call.end() && fn->is_object() ? fn->value("arguments", "") : std::string();
        if (arguments.empty()) continue;
        item.text += arguments;
        events.push_back(event("response.function_call_arguments.delta",
                               {{"item_id", item.id}, {"output_index", index}, {"delta", arguments}}));
      }
    }
  }
  if (!timings.is_null())
    for (auto& e : events) e["timings"] = timings;
  return events;
}

std::vector<Json> ResponsesWriter::finish(const chat::ChatMessage& message, const char* finish_reason,
                                          const GenerationStats& stats) {
  std::vector<Json> events;
  for (size_t i = 0; i < items_.size(); ++i) close_item(i, events);
  events.push_back(event("response.completed", {{"response", response(message, finish_reason, stats)}}));
  return events;
}

Json ResponsesWriter::response(const chat::ChatMessage& message, const char* finish_reason, const GenerationStats& stats) {
  if (items_.empty()) {
    // Not streamed: the items of the whole message.
    std::vector<Json> ignored;
    std::vector<Json> deltas_of_message;
    if (!message.reasoning_content.empty()) deltas_of_message.push_back({{"reasoning_content", message.reasoning_content}});
    if (!message.content.empty()) deltas_of_message.push_back({{"content", message.content}});
    for (size_t i = 0; i < message.tool_calls.size(); ++i) {
      const auto& call = message.tool_calls[i];
      deltas_of_message.push_back({{"tool_calls", Json::array({{{"index", i},
                                                                 {"id", call.id},
                                                                 {"type", "function"},
                                                                 {"function", {{"name", call.name}, {"arguments", call.arguments}}}}})}});
    }
    const int64_t sequence = sequence_;
    deltas(deltas_of_message, Json());
    for (size_t i = 0; i < items_.size(); ++i) close_item(i, ignored);
    sequence_ = sequence;
  }
  Json r = response_shell("completed");
  r["completed_at"] = static_cast<int64_t>(std::time(nullptr));
  // llama-server's status: "completed" also when max_output_tokens cut the output (OpenAI says
  // "incomplete" there); the reason is given as OpenAI gives it.
  if (finish_reason && std::string_view(finish_reason) == "length")
    r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  Json output = Json::array();
  for (const auto& item : items_) output.push_back(item_json(item, "completed"));
  r["output"] = std::move(output);
  r["usage"] = responses_usage_json(stats);
  return r;
}

// ---- the endpoints ----

ResponsesRequest ServerState::responses_request(const Json& body) {
  Json previous;
  if (const std::string id = string_field(body, "previous_response_id", ""); !id.empty()) {
    std::optional<Json> stored = response_store_.get(id);
    if (!stored)
      throw ApiError(400, "invalid_request_error",
                     fmt::format("Previous response with id '{}' not found: this server keeps the last {} responses "
                                 "while it runs",
                                 id, kStoredResponses),
                     "previous_response_id", "previous_response_not_found");
    previous = std::move(*stored);
  }
  return parse_responses_request(body, previous);
}

void ServerState::handle_responses(const Request& req, Response& res) {
  ResponsesRequest request = responses_request(parse_body(req.body));
  StartedGeneration started = start_generation(request.chat_body, true, "resp_");
  const auto job = started.job;
  struct State {
    State(chat::ParseOptions options, const ResponseHeader& header, Json echo)
        : parser(std::move(options)), writer(header, std::move(echo)) {}
    chat::StreamParser parser;
    ResponsesWriter writer;
    std::string text;
    bool begun = false;
    bool done = false;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  };
  auto state = std::make_shared<State>(started.plan.parse, started.header, std::move(request.echo));
  const bool stream = started.params.stream;
  const bool timings_per_token = started.params.timings_per_token;
  ResponseStore* store = request.store ? &response_store_ : nullptr;
  auto conversation = std::make_shared<const Json>(std::move(request.conversation));
  auto provider = [job, state, stream, timings_per_token, store, conversation](http::StreamSink& sink) {
    if (state->done) return true;
    const auto write = [&](const Json& event) { return sink.write(responses_sse(event)); };
    const auto write_all = [&](const std::vector<Json>& events) {
      for (const auto& e : events)
        if (!write(e)) return false;
      return true;
    };
    if (stream && !state->begun) {
      state->begun = true;
      if (!write_all(state->writer.begin())) return false;
    }
    std::vector<runtime::SequenceEvent> events;
    job->take_events(events, std::chrono::milliseconds(100));
    for (auto& event : events) {
      if (event.prompt_done >= 0) {
        if (!stream) continue;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - state->started).count();
        if (!write(state->writer.progress(prompt_progress_json(event, job->stats().cached_tokens, elapsed)))) return false;
        continue;
      }
      if (event.stop && *event.stop == runtime::StopReason::Error) {
        const std::string message = client_message(Error(event.error, event.error_setting));
        if (stream) {
          write({{"type", "error"}, {"code", "server_error"}, {"message", message}, {"param", nullptr}});
        } else {
          const std::string text = to_text(error_body(500, "server_error", message));
          sink.write(text);
        }
        state->done = true;
        sink.done();
        return true;
      }
      state->text += event.text;
      if (stream) {
        std::vector<Json> deltas = state->parser.push(event.text);
        if (event.stop)
          for (auto& d : state->parser.finish()) deltas.push_back(std::move(d));
        if (!write_all(state->writer.deltas(deltas, timings_per_token ? timings_json(job->stats()) : Json()))) return false;
      }
      if (!event.stop) continue;
      const char* finish = finish_reason_name(*event.stop);
      const runtime::GenerationStats stats = job->stats();
      if (!stream) {
        state->parser.push(state->text);
        state->parser.finish();
      }
      const chat::ChatMessage& message = state->parser.message();
      if (store) {
        Json stored = *conversation;
        stored.push_back(assistant_message(message));
        store->put(state->writer.id(), std::move(stored));
      }
      if (stream) {
        std::vector<Json> last = state->writer.finish(message, finish, stats);
        last.back()["timings"] = timings_json(stats);  // llama-server's telemetry beside the response
        if (!write_all(last)) return false;
      } else {
        const std::string text = to_text(state->writer.response(message, finish, stats));
        if (!sink.write(text)) return false;
      }
      state->done = true;
      sink.done();
      return true;
    }
    return true;
  };
  cancel_when_cut(res, started);
  res.status = 200;
  res.stream = std::move(provider);
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.content_type = "text/event-stream";
  }
}

void ServerState::handle_input_tokens(const Request& req, Response& res, bool responses) {
  if (embeddings_mode()) refuse_generation();
  Json body = parse_body(req.body);
  if (responses) body = responses_request(body).chat_body;
  const AgentParams agent = parse_agent_params(body, true, options_.reasoning_format);
  runtime::SequenceRequest counted;
  plan_chat(body, agent, counted);
  send_json(res, 200, {{"object", "response.input_tokens"}, {"input_tokens", counted.prompt.size()}});
}

void ServerState::build_responses_routes() {
  const auto responses = [this](const Request& req, Response& res) { handle_responses(req, res); };
  add_route("POST", "/v1/responses", responses);
  add_route("POST", "/responses", responses);
  const auto chat_tokens = [this](const Request& req, Response& res) { handle_input_tokens(req, res, false); };
  add_route("POST", "/v1/chat/completions/input_tokens", chat_tokens);
  add_route("POST", "/chat/completions/input_tokens", chat_tokens);
  const auto response_tokens = [this](const Request& req, Response& res) { handle_input_tokens(req, res, true); };
  add_route("POST", "/v1/responses/input_tokens", response_tokens);
  add_route("POST", "/responses/input_tokens", response_tokens);
}

}  // namespace okapi::server
