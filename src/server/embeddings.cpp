#include "server/embeddings.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "server/api_error.hpp"
#include "server/request_params.hpp"

namespace okapi::server {
namespace {

const Json* present(const Json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// Cuts `tokens` to `limit`, keeping a last end token (EOS, SEP) last.
void truncate_tokens(std::vector<int32_t>& tokens, int64_t limit, const std::vector<int32_t>& end_tokens) {
  const auto n = static_cast<size_t>(limit);
  if (tokens.size() <= n) return;
  const int32_t last = tokens.back();
  const bool keep_last = n >= 2 && std::find(end_tokens.begin(), end_tokens.end(), last) != end_tokens.end();
  tokens.resize(n);
  if (keep_last) tokens.back() = last;
}

// Checks an input's tokens (already tokenized, or given as ids): not empty, ids in range, no
// longer than the limit unless `truncate`.
void check_input(std::vector<int32_t>& tokens, const std::string& where, const char* param, bool truncate,
                 const EmbeddingLimits& limits) {
  if (tokens.empty()) throw_bad_request(param, "{} has no tokens: inputs cannot be empty", where);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n > limits.max_input_tokens) {
    if (!truncate)
      throw ApiError(400, "invalid_request_error",
                     fmt::format("{} has {} tokens, more than the {} this server takes per input ({}); shorten it, "
                                 "or send \"truncate\": true to cut it to {} tokens",
                                 where, n, limits.max_input_tokens, limits.max_input_reason, limits.max_input_tokens),
                     param, "context_length_exceeded");
    truncate_tokens(tokens, limits.max_input_tokens, limits.end_tokens);
  }
}

// A text input too long to fit however it tokenizes is refused before it is tokenized.
void precheck_text(std::string_view text, const std::string& where, const char* param, bool truncate,
                   const EmbeddingLimits& limits) {
  if (truncate || limits.max_bytes_per_token == 0) return;
  const size_t at_least = text.size() / limits.max_bytes_per_token;
  if (static_cast<int64_t>(at_least) > limits.max_input_tokens)
    throw ApiError(400, "invalid_request_error",
                   fmt::format("{} has at least {} tokens, more than the {} this server takes per input ({}); "
                               "shorten it, or send \"truncate\": true to cut it to {} tokens",
                               where, at_least, limits.max_input_tokens, limits.max_input_reason,
                               limits.max_input_tokens),
                   param, "context_length_exceeded");
}

std::vector<int32_t> token_ids(const Json& array, const std::string& where, const char* param,
                               const EmbeddingLimits& limits) {
  std::vector<int32_t> tokens;
  tokens.reserve(array.size());
  for (size_t j = 0; j < array.size(); ++j) {
    const Json& t = array[j];
    const bool in_range = t.is_number_integer() && !(t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX) &&
                          t.get<int64_t>() >= 0 && t.get<int64_t>() < limits.n_vocab;
    if (!in_range)
      throw_bad_request(param, "{}[{}] = {} is not a token id of this model: ids are integers in [0, {})", where, j,
                        t.dump(), limits.n_vocab);
    tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return tokens;
}

bool is_token_array(const Json& j) {
  return j.is_array() && !j.empty() && std::all_of(j.begin(), j.end(), [](const Json& t) { return t.is_number(); });
}

bool bool_param(const Json& body, const char* key, bool fallback) {
  const Json* v = present(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw_bad_request(key, "'{}' must be true or false", key);
  return v->get<bool>();
}

std::string model_param(const Json& body) {
  const Json* v = present(body, "model");
  if (!v) return {};
  if (!v->is_string()) throw_bad_request("model", "'model' must be a string");
  return v->get<std::string>();
}

void append_float(std::string& out, float value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

void append_vector(std::string& out, std::span<const float> values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    append_float(out, values[i]);
  }
  out += ']';
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(const Json& body, bool openai_route, const EmbeddingLimits& limits,
                                           const TextTokenizer& tokenize) {
  EmbeddingsRequest request;
  request.shape = openai_route ? EmbeddingsShape::OpenAI : EmbeddingsShape::Native;
  const char* param = "input";
  const Json* input = present(body, "input");
  if (!input) {
    // llama-server's native field; its answer is always the native shape.
    input = present(body, "content");
    param = "content";
    request.shape = EmbeddingsShape::Native;
  }
  if (!input)
    throw_bad_request("input",
                      "'input' is required: a string, an array of strings, an array of token ids or an array of "
                      "token-id arrays");
  if (request.shape == EmbeddingsShape::OpenAI && limits.per_token)
    throw_bad_request("", "Pooling type 'none' is not OAI compatible. Please use a different pooling type (this "
                          "server's --pooling none gives per-token vectors at /embeddings)");

  if (const Json* format = present(body, "encoding_format")) {
    if (!format->is_string() || (*format != "float" && *format != "base64"))
      throw_bad_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\", got {}", format->dump());
    request.base64 = *format == "base64";
  }
  if (const Json* dimensions = present(body, "dimensions")) {
    if (!dimensions->is_number_integer() || dimensions->get<int64_t>() != limits.width)
      throw_bad_request("dimensions",
                        "'dimensions' = {}: this model's embeddings have {} dimensions and cannot be shortened; "
                        "leave 'dimensions' out or send {}",
                        dimensions->dump(), limits.width, limits.width);
  }
  request.normalize = static_cast<int>(
      integer_field(body, "embd_normalize", limits.default_normalize, runtime::kNormalizeNone, 1000));
  request.model = model_param(body);
  const bool truncate = bool_param(body, "truncate", false);

  // The inputs as JSON values, each a string or an array of token ids.
  std::vector<const Json*> items;
  if (input->is_string() || is_token_array(*input)) {
    items.push_back(input);
  } else if (input->is_array()) {
    if (input->empty()) throw_bad_request(param, "'{}' must not be an empty array", param);
    if (input->size() > limits.max_inputs)
      throw_bad_request(param,
                        "'{}' has {} inputs; this server takes at most {} per request (its --embd-max-inputs): send "
                        "them in several requests",
                        param, input->size(), limits.max_inputs);
    for (size_t i = 0; i < input->size(); ++i) {
      const Json& item = (*input)[i];
      if (item.is_string() || (item.is_array() && std::all_of(item.begin(), item.end(), [](const Json& t) {
                                 return t.is_number();
                               }))) {
        items.push_back(&item);
      } else {
        throw_bad_request(param,
                          "{}[{}] must be a string or an array of token ids: '{}' is a string, an array of strings, an "
                          "array of token ids or an array of token-id arrays",
                          param, i, param);
      }
    }
  } else {
    throw_bad_request(param,
                      "'{}' must be a string, an array of strings, an array of token ids or an array of token-id "
                      "arrays",
                      param);
  }

  const bool single = items.size() == 1 && items[0] == input;
  request.inputs.reserve(items.size());
  int64_t total_tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string where = single ? std::string(param) : fmt::format("{}[{}]", param, i);
    const Json& item = *items[i];
    std::vector<int32_t> tokens;
    if (item.is_string()) {
      const auto& text = item.get_ref<const std::string&>();
      // OpenAI refuses an empty string; llama-server embeds [CLS][SEP] where the vocabulary adds them.
      if (text.empty()) throw_bad_request(param, "{} is an empty string: inputs cannot be empty", where);
      precheck_text(text, where, param, truncate, limits);
      tokens = tokenize(text);
    } else {
      tokens = token_ids(item, where, param, limits);
    }
    check_input(tokens, where, param, truncate, limits);
    total_tokens += static_cast<int64_t>(tokens.size());
    if (limits.per_token && total_tokens * limits.width > limits.max_output_values)
      throw_bad_request(param,
                        "per-token embeddings of {} tokens (through {}) with {} values each are more than the {} "
                        "values a response may hold; send fewer or shorter inputs",
                        total_tokens, where, limits.width, limits.max_output_values);
    request.inputs.push_back(std::move(tokens));
  }
  request.prompt_tokens = total_tokens;
  return request;
}

RerankRequest parse_rerank_request(const Json& body, const EmbeddingLimits& limits, const PairTokenizer& tokenize) {
  RerankRequest request;
  const Json* query = present(body, "query");
  if (!query) throw_bad_request("query", "'query' is required: the text the documents are ranked against");
  if (!query->is_string()) throw_bad_request("query", "'query' must be a string");
  const char* param = "documents";
  const Json* documents = present(body, "documents");
  if (!documents) {
    documents = present(body, "texts");  // TEI
    if (documents) {
      param = "texts";
      request.tei = true;
    }
  }
  if (!documents || !documents->is_array() || documents->empty())
    throw_bad_request("documents", "'documents' must be a non-empty array of strings");
  if (documents->size() > limits.max_inputs)
    throw_bad_request(param,
                      "'{}' has {} documents; this server takes at most {} per request (its --embd-max-inputs): send "
                      "them in several requests",
                      param, documents->size(), limits.max_inputs);
  request.model = model_param(body);
  const bool truncate = bool_param(body, "truncate", false);
  request.return_documents = bool_param(body, "return_documents", false);
  request.return_text = bool_param(body, "return_text", false);
  request.top_n = static_cast<size_t>(integer_field(body, "top_n", static_cast<int64_t>(documents->size()), 0,
                                                    std::numeric_limits<int32_t>::max()));

  const auto& query_text = query->get_ref<const std::string&>();
  request.inputs.reserve(documents->size());
  request.documents.reserve(documents->size());
  for (size_t i = 0; i < documents->size(); ++i) {
    const Json& document = (*documents)[i];
    const std::string where = fmt::format("{}[{}]", param, i);
    const Json* text = &document;
    if (document.is_object()) text = present(document, "text");
    if (!text || !text->is_string())
      throw_bad_request(param, "{} must be a string (or an object with a string 'text')", where);
    const auto& document_text = text->get_ref<const std::string&>();
    precheck_text(document_text, where, param, truncate, limits);
    std::vector<int32_t> tokens = tokenize(query_text, document_text);
    check_input(tokens, fmt::format("the query with {}", where), param, truncate, limits);
    request.prompt_tokens += static_cast<int64_t>(tokens.size());
    request.inputs.push_back(std::move(tokens));
    request.documents.push_back(document_text);
  }
  return request;
}

std::string base64_floats(std::span<const float> values) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static_assert(std::endian::native == std::endian::little, "float32 bytes are written as stored");
  std::vector<unsigned char> bytes(values.size() * sizeof(float));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (rest == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string embeddings_response(const EmbeddingsRequest& request, std::span<const runtime::EmbeddingOutput> outputs,
                                bool per_token, const std::string& model_id) {
  std::string out;
  size_t values = 0;
  for (const auto& o : outputs) values += o.values.size();
  out.reserve(64 + values * (request.base64 ? 6 : 12) + outputs.size() * 64);
  if (request.shape == EmbeddingsShape::Native) {
    // [{"index": i, "embedding": [[...]]}]: one row pooled, a row per token with pooling none.
    out += '[';
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (i) out += ',';
      out += fmt::format("{{\"index\":{},\"embedding\":[", i);
      const auto& o = outputs[i];
      const size_t rows = per_token ? static_cast<size_t>(o.n_tokens) : 1;
      const size_t width = rows ? o.values.size() / rows : 0;
      for (size_t r = 0; r < rows; ++r) {
        if (r) out += ',';
        append_vector(out, std::span<const float>(o.values).subspan(r * width, width));
      }
      out += "]}";
    }
    out += ']';
    return out;
  }
  const std::string model = request.model.empty() ? model_id : request.model;
  out += "{\"model\":";
  out += Json(model).dump(-1, ' ', false, Json::error_handler_t::replace);
  out += fmt::format(",\"object\":\"list\",\"usage\":{{\"prompt_tokens\":{},\"total_tokens\":{}}},\"data\":[",
                     request.prompt_tokens, request.prompt_tokens);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (i) out += ',';
    out += "{\"embedding\":";
    if (request.base64) {
      out += '"';
      out += base64_floats(outputs[i].values);
      out += '"';
    } else {
      append_vector(out, outputs[i].values);
    }
    out += fmt::format(",\"index\":{},\"object\":\"embedding\"", i);
    if (request.base64) out += ",\"encoding_format\":\"base64\"";
    out += '}';
  }
  out += "]}";
  return out;
}

Json rerank_response(const RerankRequest& request, std::span<const runtime::EmbeddingOutput> outputs,
                     const std::string& model_id) {
  std::vector<size_t> order(outputs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto score = [&](size_t i) {
    return outputs[i].values.empty() ? -1e6f : outputs[i].values[0];  // llama-server's score of a missing output
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score(a) > score(b); });
  order.resize(std::min(order.size(), request.top_n));
  const char* label = request.tei ? "score" : "relevance_score";
  Json results = Json::array();
  for (const size_t i : order) {
    Json r;
    r["index"] = i;
    r[label] = score(i);
    if (request.tei && request.return_text) r["text"] = request.documents[i];
    if (!request.tei && request.return_documents) r["document"] = {{"text", request.documents[i]}};
    results.push_back(std::move(r));
  }
  if (request.tei) return results;
  Json body;
  body["model"] = request.model.empty() ? model_id : request.model;
  body["object"] = "list";
  body["usage"] = {{"prompt_tokens", request.prompt_tokens}, {"total_tokens", request.prompt_tokens}};
  body["results"] = std::move(results);
  return body;
}

}  // namespace okapi::server
