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
  // Absent: the server's default (-s), as llama-server.
  if (field(body, "seed")) s.seed = seed == -1 ? sample::kRandomSeed : static_cast<uint32_t>(static_cast<uint64_t>(seed) & 0xFFFFFFFFu);
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
        std::string text;
        for (const auto& part : *content) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
              !part["text"].is_string())
            throw_bad_request(where + ".content", "'{}.content' parts must be {{\"type\": \"text\", \"text\": ...}}",
                              where);
          if (!text.empty()) text += "\n";
          text += part["text"].get<std::string>();
        }
        message["content"] = text;
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
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) throw_bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    in.template_kwargs = *kwargs;
  }
  return in;
}

}  // namespace okapi::server
