#include "server/native_shapes.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "server/api_error.hpp"

namespace okapi::server {

namespace {

constexpr const char* kPromptString = "prompt_string";
constexpr const char* kMultimodalData = "multimodal_data";
// Prompts one request may hold, and the alternatives per token it may ask for: each costs a job
// or a list per token, so a request cannot ask for unbounded work.
constexpr size_t kMaxPrompts = 1024;
constexpr int64_t kMaxProbs = 1000;

bool is_token_id(const Json& v) { return v.is_number_integer(); }

TokenId checked_id(const Json& v, int64_t n_vocab) {
  if (v.is_number_unsigned() && v.get<uint64_t>() >= static_cast<uint64_t>(n_vocab))
    throw_bad_request("prompt", "'prompt' token ids must be in [0, {})", n_vocab);
  const auto id = v.get<int64_t>();
  if (id < 0 || id >= n_vocab) throw_bad_request("prompt", "'prompt' token id {} is not in [0, {})", id, n_vocab);
  return static_cast<TokenId>(id);
}

// One prompt: a string, ids, ids and strings mixed, or {"prompt_string": ...}.
std::vector<TokenId> one_prompt(const Json& p, int64_t n_vocab, const NativeTokenize& tokenize) {
  if (p.is_string()) return tokenize(p.get_ref<const std::string&>(), true);
  if (p.is_array()) {
    std::vector<TokenId> tokens;
    bool first = true;
    for (const auto& e : p) {
      if (e.is_string()) {
        const auto part = tokenize(e.get_ref<const std::string&>(), first);
        tokens.insert(tokens.end(), part.begin(), part.end());
      } else if (is_token_id(e)) {
        tokens.push_back(checked_id(e, n_vocab));
      } else {
        throw_bad_request("prompt", "a 'prompt' array holds token ids and strings");
      }
      first = false;
    }
    return tokens;
  }
  if (p.is_object() && p.contains(kPromptString)) {
    if (p.contains(kMultimodalData))
      throw_bad_request("prompt", "Multimodal data provided, but model does not support multimodal requests.");
    const Json& text = p[kPromptString];
    if (!text.is_string() && !text.is_array()) throw_bad_request("prompt", "'prompt_string' must be a string");
    return one_prompt(text, n_vocab, tokenize);
  }
  throw_bad_request("prompt",
                    "\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, "
                    "or a list of mixed strings & tokens.");
}

// The longest prefix of `text` that is whole UTF-8 (a token may end inside a character).
std::string valid_utf8_prefix(const std::string& text) {
  size_t len = text.size();
  // Check the last few bytes for a character cut short.
  for (size_t back = 1; back <= 4 && back <= len; ++back) {
    const auto c = static_cast<unsigned char>(text[len - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    if (need > back) len -= back;
    break;
  }
  return text.substr(0, len);
}

Json bytes_json(const std::string& text) {
  Json out = Json::array();
  for (const unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

float parse_bias_value(const Json& v, bool& ok) {
  ok = true;
  if (v.is_number()) {
    const double b = v.get<double>();
    if (!std::isfinite(b)) ok = false;
    return static_cast<float>(b);
  }
  if (v.is_boolean() && !v.get<bool>()) return -std::numeric_limits<float>::infinity();
  ok = false;
  return 0;
}

}  // namespace

std::vector<std::vector<TokenId>> native_prompts(const Json& prompt, int64_t n_vocab, const NativeTokenize& tokenize) {
  std::vector<std::vector<TokenId>> prompts;
  const bool has_ids = prompt.is_array() && std::any_of(prompt.begin(), prompt.end(), is_token_id);
  if (prompt.is_array() && !has_ids) {
    if (prompt.size() > kMaxPrompts) throw_bad_request("prompt", "'prompt' holds more than {} prompts", kMaxPrompts);
    for (const auto& p : prompt) prompts.push_back(one_prompt(p, n_vocab, tokenize));
  } else {
    prompts.push_back(one_prompt(prompt, n_vocab, tokenize));
  }
  if (prompts.empty()) throw_bad_request("prompt", "\"prompt\" must not be empty");
  for (const auto& p : prompts)
    if (p.empty()) throw_bad_request("prompt", "a prompt has no tokens");
  return prompts;
}

std::vector<std::pair<TokenId, float>> native_logit_bias(const Json& bias, int64_t n_vocab,
                                                         const std::function<std::vector<TokenId>(std::string_view)>& tokenize) {
  std::vector<std::pair<TokenId, float>> out;
  const auto add_text = [&](std::string_view text, float b) {
    for (const TokenId id : tokenize(text)) out.emplace_back(id, b);
  };
  const auto add_id = [&](int64_t id, float b) {
    if (id >= 0 && id < n_vocab) out.emplace_back(static_cast<TokenId>(id), b);
  };
  if (bias.is_array()) {
    for (const auto& e : bias) {
      if (!e.is_array() || e.size() != 2) continue;
      bool ok = false;
      const float b = parse_bias_value(e[1], ok);
      if (!ok) continue;
      if (e[0].is_number_integer() && !(e[0].is_number_unsigned() && e[0].get<uint64_t>() > static_cast<uint64_t>(n_vocab)))
        add_id(e[0].get<int64_t>(), b);
      else if (e[0].is_string())
        add_text(e[0].get_ref<const std::string&>(), b);
    }
  } else if (bias.is_object()) {
    for (const auto& [key, value] : bias.items()) {
      bool ok = false;
      const float b = parse_bias_value(value, ok);
      if (!ok) continue;
      // A key that is all digits is an id, anything else a text (as llama-server's strtol check).
      const bool numeric = !key.empty() && key.size() <= 10 &&
                           std::all_of(key.begin(), key.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (numeric)
        add_id(std::stoll(key), b);
      else
        add_text(key, b);
    }
  } else if (!bias.is_null()) {
    throw_bad_request("logit_bias", "'logit_bias' must be an array of [token, bias] pairs or an object of token: bias");
  }
  return out;
}

Json native_timings(const runtime::GenerationStats& stats) {
  const int64_t n_prompt = stats.prompt_tokens - stats.cached_tokens;
  const double prompt_ms = stats.prompt_seconds * 1e3;
  const double predicted_ms = stats.generation_seconds * 1e3;
  // The first token comes from the prompt's last pass: the rate is over the steps after it.
  const int64_t steps = stats.generated_tokens > 0 ? stats.generated_tokens - 1 : 0;
  Json t;
  t["cache_n"] = stats.cached_tokens;
  t["prompt_n"] = n_prompt;
  t["prompt_ms"] = prompt_ms;
  t["prompt_per_token_ms"] = n_prompt > 0 ? prompt_ms / static_cast<double>(n_prompt) : 0.0;
  t["prompt_per_second"] = prompt_ms > 0 ? 1e3 / prompt_ms * static_cast<double>(n_prompt) : 0.0;
  t["predicted_n"] = stats.generated_tokens;
  t["predicted_ms"] = predicted_ms;
  t["predicted_per_token_ms"] = steps > 0 ? predicted_ms / static_cast<double>(steps) : 0.0;
  t["predicted_per_second"] = predicted_ms > 0 ? 1e3 / predicted_ms * static_cast<double>(steps) : 0.0;
  if (stats.drafted_tokens > 0) {
    t["draft_n"] = stats.drafted_tokens;
    t["draft_n_accepted"] = stats.accepted_tokens;
  }
  return t;
}

Json native_probabilities(const std::vector<runtime::TokenLogprob>& tokens, bool post_sampling) {
  Json out = Json::array();
  const char* value_key = post_sampling ? "prob" : "logprob";
  // JSON has no -infinity: llama-server writes the lowest float for a log of 0.
  const auto value = [&](float logprob) -> float {
    if (post_sampling) return std::exp(logprob);
    return std::isfinite(logprob) ? logprob : std::numeric_limits<float>::lowest();
  };
  for (const auto& t : tokens) {
    Json entry;
    entry["id"] = t.id;
    entry["token"] = valid_utf8_prefix(t.token);
    entry["bytes"] = bytes_json(t.token);
    entry[value_key] = value(t.logprob);
    Json top = Json::array();
    for (size_t i = 0; i < t.top.size(); ++i) {
      Json alt;
      alt["id"] = i < t.top_ids.size() ? t.top_ids[i] : -1;
      alt["token"] = valid_utf8_prefix(t.top[i].first);
      alt["bytes"] = bytes_json(t.top[i].first);
      alt[value_key] = value(t.top[i].second);
      top.push_back(std::move(alt));
    }
    entry[post_sampling ? "top_probs" : "top_logprobs"] = std::move(top);
    out.push_back(std::move(entry));
  }
  return out;
}

Json native_select_fields(const Json& response, const std::vector<std::string>& paths) {
  Json out = Json::object();
  for (const auto& path : paths) {
    const Json* current = &response;
    bool found = true;
    size_t begin = 0;
    while (begin <= path.size()) {
      size_t end = path.find('/', begin);
      if (end == std::string::npos) end = path.size();
      const std::string key = path.substr(begin, end - begin);
      if (!current->is_object() || !current->contains(key)) {
        found = false;
        break;
      }
      current = &(*current)[key];
      begin = end + 1;
    }
    if (found) out[path] = *current;
  }
  return out;
}

NativeParams parse_native_params(const Json& body, int64_t n_vocab, int n_slots, const std::vector<TokenId>& eog,
                                 const std::function<std::vector<TokenId>(std::string_view)>& tokenize) {
  NativeParams p;
  // n_probs, or the legacy name logprobs when n_probs is absent.
  const char* probs_key = body.contains("n_probs") && !body["n_probs"].is_null() ? "n_probs" : "logprobs";
  if (body.contains(probs_key) && body[probs_key].is_boolean()) {
    p.n_probs = 0;  // logprobs: false / true without a count (OpenAI chat's form) ask for no list here
  } else {
    p.n_probs = static_cast<int>(integer_field(body, probs_key, 0, 0, kMaxProbs));
  }
  p.post_sampling_probs = bool_field(body, "post_sampling_probs", false);
  if (const auto it = body.find("logit_bias"); it != body.end())
    p.logit_bias = native_logit_bias(*it, n_vocab, tokenize);
  p.ignore_eos = bool_field(body, "ignore_eos", false);
  if (p.ignore_eos)
    for (const TokenId id : eog) p.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
  p.return_tokens = bool_field(body, "return_tokens", false);
  p.cache_prompt = bool_field(body, "cache_prompt", true);
  p.id_slot = static_cast<int>(integer_field(body, "id_slot", -1, -1, n_slots - 1));
  p.n_keep = integer_field(body, "n_keep", 0, -1, std::numeric_limits<int32_t>::max());
  p.n_discard = integer_field(body, "n_discard", 0, 0, std::numeric_limits<int32_t>::max());
  p.timings_per_token = bool_field(body, "timings_per_token", false);
  p.return_progress = bool_field(body, "return_progress", false);
  if (const auto it = body.find("response_fields"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) throw_bad_request("response_fields", "'response_fields' must be an array of strings");
    for (const auto& f : *it) {
      if (!f.is_string()) throw_bad_request("response_fields", "'response_fields' must be an array of strings");
      p.response_fields.push_back(f.get<std::string>());
    }
  }
  if (const auto it = body.find("samplers"); it != body.end() && !it->is_null()) {
    bool ok = it->is_string();
    if (it->is_array()) ok = std::all_of(it->begin(), it->end(), [](const Json& s) { return s.is_string(); });
    if (!ok) throw_bad_request("samplers", "'samplers' must be an array of sampler names or a string of sampler letters");
    p.samplers = *it;
  }
  return p;
}

Json native_generation_settings(const sample::SamplerConfig& s, int64_t n_predict, const std::vector<std::string>& stop,
                                bool stream, const NativeParams& native, int64_t n_keep) {
  Json g;
  g["seed"] = s.seed;
  g["temperature"] = s.temperature;
  g["dynatemp_range"] = 0.0;
  g["dynatemp_exponent"] = 1.0;
  g["top_k"] = s.top_k;
  g["top_p"] = s.top_p;
  g["min_p"] = s.min_p;
  g["top_n_sigma"] = -1.0;
  g["xtc_probability"] = 0.0;
  g["xtc_threshold"] = 0.1;
  g["typical_p"] = s.typical_p;
  g["repeat_last_n"] = s.repeat_last_n;
  g["repeat_penalty"] = s.repeat_penalty;
  g["presence_penalty"] = s.presence_penalty;
  g["frequency_penalty"] = s.frequency_penalty;
  g["dry_multiplier"] = 0.0;
  g["dry_base"] = 1.75;
  g["dry_allowed_length"] = 2;
  g["dry_penalty_last_n"] = -1;
  g["dry_sequence_breakers"] = Json::array({"\n", ":", "\"", "*"});
  g["mirostat"] = 0;
  g["mirostat_tau"] = 5.0;
  g["mirostat_eta"] = 0.1;
  g["adaptive_target"] = -1.0;
  g["adaptive_decay"] = 0.9;
  g["stop"] = stop;
  g["max_tokens"] = n_predict;
  g["n_predict"] = n_predict;
  g["n_keep"] = n_keep;
  g["n_discard"] = native.n_discard;
  g["ignore_eos"] = native.ignore_eos;
  g["stream"] = stream;
  Json bias = Json::array();
  for (const auto& [id, b] : native.logit_bias) {
    // -infinity (a ban) is null in JSON, as llama-server writes it.
    Json entry;
    entry["bias"] = std::isfinite(b) ? Json(b) : Json();
    entry["token"] = id;
    bias.push_back(std::move(entry));
  }
  g["logit_bias"] = std::move(bias);
  g["n_probs"] = native.n_probs;
  g["min_keep"] = s.min_keep;
  g["samplers"] = native.samplers.is_null()
                      ? Json::array({"penalties", "top_k", "typical_p", "top_p", "min_p", "temperature"})
                      : native.samplers;
  g["timings_per_token"] = native.timings_per_token;
  g["post_sampling_probs"] = native.post_sampling_probs;
  g["backend_sampling"] = false;
  g["lora"] = Json::array();
  return g;
}

std::string gcp_route_alias(std::string_view path) {
  std::string_view s = path;
  if (s.size() > 3 && s.substr(0, 3) == "/v1") s.remove_prefix(3);
  if (!s.empty() && s.front() == '/') s.remove_prefix(1);
  std::string out;
  bool cap = false;
  for (const char c : s) {
    if (c == ':') break;
    if (c == '/' || c == '-' || c == '_') {
      cap = true;
    } else {
      out += cap ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      cap = false;
    }
  }
  return out;
}

}  // namespace okapi::server
