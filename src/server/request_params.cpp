#include "server/request_params.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/api_error.hpp"

namespace okapi::server {

namespace {

constexpr int kMaxStopStrings = 16;
// Generated text is matched against every stop string at every token (the held-back suffix costs
// up to length^2 byte compares), so a stop string is bounded.
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxTopLogprobs = 20;

const Json* field(const Json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// How deep arrays and objects nest, strings skipped: checked before parsing, so that a body of
// a million '[' is refused for the cost of one pass instead of a million nested values.
size_t nesting_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string joined_text_parts(const Json& parts, const std::string& where, std::string_view separator) {
  std::string text;
  bool first = true;
  for (const auto& part : parts) {
    const auto type = part.is_object() ? part.find("type") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") || !part["text"].is_string())
      throw_bad_request(where + ".content", "'{}.content' parts must be {{\"type\": \"text\", \"text\": ...}}", where);
    if (!first) text += separator;
    text += part["text"].get<std::string>();
    first = false;
  }
  return text;
}

// continue_final_message and the prefill (a conversation ending with the assistant's message), as
// llama-server reads them: the final message leaves `messages` for `continuation`.
void take_continuation(const Json& body, ChatInput& in) {
  bool continue_final = false;
  if (const Json* given = field(body, "continue_final_message")) {
    if (given->is_boolean())
      continue_final = given->get<bool>();
    else if (given->is_string() && given->get<std::string>() == "content")
      continue_final = true;
    else
      throw_bad_request("continue_final_message", "'continue_final_message' must be true, false or \"content\"");
  }
  Json& messages = in.messages;
  const auto role_at = [&](size_t from_end) {
    return messages.size() >= from_end ? messages[messages.size() - from_end].value("role", "") : std::string();
  };
  if (!continue_final && role_at(1) == "assistant") {
    if (role_at(2) == "assistant")
      throw_bad_request("messages", "Cannot have 2 or more assistant messages at the end of the list.");
    continue_final = true;
    in.add_generation_prompt = false;
  }
  if (!continue_final) return;
  if (in.add_generation_prompt)
    throw_bad_request("continue_final_message",
                      "Cannot set both add_generation_prompt and continue_final_message to true.");
  if (role_at(1) != "assistant")
    throw_bad_request("continue_final_message", "continue_final_message needs a final message of role 'assistant'");
  const Json& last = messages.back();
  if (const auto calls = last.find("tool_calls"); calls != last.end() && calls->is_array() && !calls->empty())
    throw_bad_request("messages", "Cannot continue an assistant message that contains tool calls.");
  // Text parts of the continued message join with a blank line, as llama.cpp's render_content.
  const std::string where = fmt::format("messages[{}]", messages.size() - 1);
  const Json& raw_last = body["messages"].back();  // before its parts were joined
  const auto content = raw_last.find("content");
  if (content != raw_last.end() && content->is_array())
    in.continuation = joined_text_parts(*content, where, "\n\n");
  else if (content != raw_last.end() && content->is_string())
    in.continuation = content->get<std::string>();
  messages.erase(messages.size() - 1);
  // The messages before it end with the generation prompt that opens the assistant's turn.
  in.add_generation_prompt = true;
}

}  // namespace

Json parse_body(std::string_view text) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw_bad_request("", "the request body nests arrays and objects deeper than {} levels", kMaxJsonDepth);
  Json body;
  try {
    body = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999
    throw_bad_request("", "the request body is not valid JSON: {}", e.what());
  }
  if (!body.is_object()) throw_bad_request("", "the request body must be a JSON object");
  return body;
}

double number_field(const Json& body, const char* key, double fallback, double lo, double hi) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) throw_bad_request(key, "'{}' must be a number", key);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) throw_bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

int64_t integer_field(const Json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw_bad_request(key, "'{}' must be an integer", key);
  // Unsigned values beyond int64 read as negative through get<int64_t>: check the sign type first.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw_bad_request(key, "'{}' must be in [{}, {}]", key, lo, hi);
  const auto x = v->get<int64_t>();
  if (x < lo || x > hi) throw_bad_request(key, "'{}' must be in [{}, {}], got {}", key, lo, hi, x);
  return x;
}

bool bool_field(const Json& body, const char* key, bool fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw_bad_request(key, "'{}' must be true or false", key);
  return v->get<bool>();
}

std::string string_field(const Json& body, const char* key, const std::string& fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_string()) throw_bad_request(key, "'{}' must be a string", key);
  return v->get<std::string>();
}

GenerationParams parse_generation_params(const Json& body, bool chat, const sample::SamplerConfig& defaults) {
  GenerationParams p;
  p.sampling = defaults;
  auto& s = p.sampling;
  s.temperature = static_cast<float>(number_field(body, "temperature", s.temperature, 0.0, 100.0));
  s.top_p = static_cast<float>(number_field(body, "top_p", s.top_p, 0.0, 1.0));
  s.min_p = static_cast<float>(number_field(body, "min_p", s.min_p, 0.0, 1.0));
  s.typical_p = static_cast<float>(number_field(body, "typical_p", s.typical_p, 0.0, 1.0));
  s.top_k = static_cast<int32_t>(integer_field(body, "top_k", s.top_k, -1, std::numeric_limits<int32_t>::max()));
  s.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", s.presence_penalty, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", s.frequency_penalty, -2.0, 2.0));
  s.repeat_penalty = static_cast<float>(number_field(body, "repeat_penalty", s.repeat_penalty, 0.0, 100.0));
  s.repeat_last_n =
      static_cast<int32_t>(integer_field(body, "repeat_last_n", s.repeat_last_n, -1, std::numeric_limits<int32_t>::max()));
  const int64_t seed = integer_field(body, "seed", -1, std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max());
  // OpenAI seeds are any integer; the sampler's RNG takes 32 bits (-1: a random seed, as llama.cpp).
  // Without one, the server's (-s), as llama-server.
  if (field(body, "seed"))
    s.seed = seed == -1 ? sample::kRandomSeed : static_cast<uint32_t>(static_cast<uint64_t>(seed) & 0xFFFFFFFFu);
  try {
    s.validate();
  } catch (const std::exception& e) {
    throw_bad_request("", "{}", e.what());
  }

  constexpr int64_t kNoLimit = -1;
  int64_t max_tokens = integer_field(body, "n_predict", kNoLimit, -1, std::numeric_limits<int32_t>::max());
  max_tokens = integer_field(body, "max_tokens", max_tokens, 1, std::numeric_limits<int32_t>::max());
  max_tokens = integer_field(body, "max_completion_tokens", max_tokens, 1, std::numeric_limits<int32_t>::max());
  p.max_tokens = max_tokens;

  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings) throw_bad_request("stop", "'stop' has more than {} strings", kMaxStopStrings);
      for (const auto& s_item : *stop) {
        if (!s_item.is_string()) throw_bad_request("stop", "'stop' must be a string or an array of strings");
        p.stop.push_back(s_item.get<std::string>());
      }
    } else {
      throw_bad_request("stop", "'stop' must be a string or an array of strings");
    }
  }
  for (const auto& item : p.stop)
    if (item.size() > kMaxStopBytes) throw_bad_request("stop", "each 'stop' string may hold at most {} bytes", kMaxStopBytes);
  p.stream = bool_field(body, "stream", false);
  if (const Json* options = field(body, "stream_options")) {
    if (!options->is_object()) throw_bad_request("stream_options", "'stream_options' must be an object");
    p.include_usage = bool_field(*options, "include_usage", false);
  }
  if (integer_field(body, "n", 1, 1, 128) != 1) throw_bad_request("n", "only n = 1 is supported");
  if (chat) {
    const bool logprobs = bool_field(body, "logprobs", false);
    const auto top = integer_field(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    if (field(body, "top_logprobs") && !logprobs)
      throw_bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    p.top_logprobs = logprobs ? static_cast<int>(top) : -1;
  } else {
    p.top_logprobs = static_cast<int>(integer_field(body, "logprobs", -1, 0, kMaxTopLogprobs));
  }
  p.ignore_eos = bool_field(body, "ignore_eos", false);
  p.timings_per_token = bool_field(body, "timings_per_token", false);
  p.return_progress = bool_field(body, "return_progress", false);
  if (field(body, "verbose")) p.verbose = bool_field(body, "verbose", false);
  string_field(body, "model", "");  // any model name is served by the one model; only its type is checked
  string_field(body, "user", "");
  return p;
}

ChatInput parse_chat_input(const Json& body, bool require_messages) {
  ChatInput in;
  const Json* messages = field(body, "messages");
  if (!messages) {
    if (require_messages) throw_bad_request("messages", "'messages' is required");
    in.messages = Json::array();
  } else {
    if (!messages->is_array()) throw_bad_request("messages", "'messages' must be an array");
    if (messages->empty() && require_messages) throw_bad_request("messages", "'messages' must not be empty");
    in.messages = Json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
      const Json& m = (*messages)[i];
      const std::string where = fmt::format("messages[{}]", i);
      if (!m.is_object()) throw_bad_request(where, "'{}' must be an object", where);
      const auto role = m.find("role");
      if (role == m.end() || !role->is_string())
        throw_bad_request(where + ".role", "'{}.role' must be a string", where);
      Json message = m;
      const auto content = m.find("content");
      if (content != m.end() && content->is_array()) {
        // Text parts are joined (as llama-server does); other kinds of content are not supported.
        message["content"] = joined_text_parts(*content, where, "\n");
      } else if (content != m.end() && !content->is_string() && !content->is_null()) {
        throw_bad_request(where + ".content", "'{}.content' must be a string, null or an array of text parts", where);
      }
      in.messages.push_back(std::move(message));
    }
  }
  if (const Json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw_bad_request("tools", "'tools' must be an array");
    in.tools = *tools;
  }
  in.add_generation_prompt = bool_field(body, "add_generation_prompt", true);
  take_continuation(body, in);
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) throw_bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    in.template_kwargs = *kwargs;
  }
  return in;
}

}  // namespace okapi::server
