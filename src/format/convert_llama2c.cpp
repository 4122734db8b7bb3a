#include "format/convert_llama2c.hpp"

#include <fmt/format.h>

#include <cstring>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/output_paths.hpp"

namespace okapi::llama2c {
namespace {

using gguf::Array;
using gguf::Value;
using gguf::ValueType;

constexpr uint32_t kUnknownId = 0, kBosId = 1, kEosId = 2;
constexpr uint32_t kNoToken = 0xFFFFFFFFu;  // LLAMA_TOKEN_NULL (-1) stored as u32
constexpr float kLlamaRmsEps = 1e-5f;
constexpr float kRopeFreqBase = 10000.0f;  // llama2.c and bitllama2.c hard-code it

bool is_hex_digit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_c_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// True where llama.cpp's sscanf(text, "<0x%02hhX>", &byte) == 1: "<0x", optional white space,
// then (within the 2-character width) an optional sign and at least one hex digit. The closing
// '>' is not checked by sscanf's return value, so neither is it here.
bool looks_like_byte_token(const std::string& text) {
  if (text.rfind("<0x", 0) != 0) return false;
  size_t i = 3;
  while (i < text.size() && is_c_space(text[i])) ++i;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  return i < text.size() && is_hex_digit(text[i]);
}

std::string escape_spaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == ' ') {
      out += "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<uint8_t> f16_bytes(std::span<const uint8_t> f32) {
  const size_t n = f32.size() / sizeof(float);
  std::vector<uint8_t> out(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, f32.data() + i * sizeof(float), sizeof(v));
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(out.data() + i * sizeof(uint16_t), &h, sizeof(h));
  }
  return out;
}

// ggml ne order: a row-major {rows, cols} matrix is ne {cols, rows}.
std::vector<int64_t> ggml_shape(const std::vector<int64_t>& row_major) {
  return {row_major.rbegin(), row_major.rend()};
}

class TensorAdder {
 public:
  TensorAdder(gguf::Writer& writer, DType matrix_type) : writer_(writer), matrix_type_(matrix_type) {}

  // A matrix viewed in place (F32) or converted (F16).
  void matrix(std::string name, std::vector<int64_t> row_major, std::span<const uint8_t> f32) {
    if (matrix_type_ == DType::F32) {
      writer_.add_tensor_view(std::move(name), DType::F32, ggml_shape(row_major), f32);
    } else {
      writer_.add_tensor(std::move(name), DType::F16, ggml_shape(row_major), f16_bytes(f32));
    }
  }
  void matrix(std::string name, std::vector<int64_t> row_major, const std::vector<float>& values) {
    if (matrix_type_ == DType::F32) {
      writer_.add_tensor(std::move(name), DType::F32, ggml_shape(row_major), float_bytes(values));
    } else {
      const auto bytes = float_bytes(values);
      writer_.add_tensor(std::move(name), DType::F16, ggml_shape(row_major), f16_bytes(bytes));
    }
  }
  // Norm weights stay F32 whatever the matrix type (as llama.cpp keeps 1-D tensors).
  void vector(std::string name, std::span<const uint8_t> f32) {
    writer_.add_tensor_view(std::move(name), DType::F32, {static_cast<int64_t>(f32.size() / sizeof(float))}, f32);
  }
  void vector(std::string name, const std::vector<float>& values) {
    writer_.add_tensor(std::move(name), DType::F32, {static_cast<int64_t>(values.size())}, float_bytes(values));
  }

 private:
  gguf::Writer& writer_;
  DType matrix_type_;
};

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// The model-shape keys both architectures write as "<arch>.<key>" (u32).
enum class ShapeKey { Embedding, FeedForward, Blocks, Heads, KvHeads, RopeDims };

std::pair<std::string_view, int64_t> shape_key(ShapeKey key, const Config& c) {
  switch (key) {
    case ShapeKey::Embedding: return {"embedding_length", c.dim};
    case ShapeKey::FeedForward: return {"feed_forward_length", c.hidden_dim};
    case ShapeKey::Blocks: return {"block_count", c.n_layers};
    case ShapeKey::Heads: return {"attention.head_count", c.n_heads};
    case ShapeKey::KvHeads: return {"attention.head_count_kv", c.n_kv_heads};
    case ShapeKey::RopeDims: return {"rope.dimension_count", c.head_size()};
  }
  throw_error("unknown shape key {}", static_cast<int>(key));
}

// Each converter we mirror writes these keys in its own order, which the caller gives.
void set_shape_keys(gguf::Writer& w, std::string_view arch, const Config& c, std::initializer_list<ShapeKey> order) {
  for (ShapeKey k : order) {
    const auto [key, value] = shape_key(k, c);
    w.set(fmt::format("{}.{}", arch, key), u32(value));
  }
}

// Key order, types and values as llama.cpp's convert-llama2c-to-ggml.
void build_llama(gguf::Writer& w, const Checkpoint& ck, const Tokenizer& tokenizer, const ConvertOptions& options) {
  const Config& c = ck.config();
  set_vocabulary(w, tokenizer);
  w.set("general.architecture", "llama");
  w.set("general.name", options.name.empty() ? std::string("llama") : options.name);
  set_special_ids(w);
  w.set("llama.context_length", options.context_length.value_or(u32(c.seq_len)));
  using enum ShapeKey;
  set_shape_keys(w, "llama", c, {Embedding, FeedForward, Heads, KvHeads, Blocks, RopeDims});
  w.set("llama.attention.layer_norm_rms_epsilon", kLlamaRmsEps);
  if (options.type == DType::F16) w.set("general.file_type", uint32_t{1});  // LLAMA_FTYPE_MOSTLY_F16

  TensorAdder add(w, options.type);
  const Weight classifier = c.shared_classifier ? Weight::TokenEmbedding : Weight::Wcls;
  add.matrix("token_embd.weight", ck.layer_shape(Weight::TokenEmbedding), ck.f32_bytes(Weight::TokenEmbedding));
  add.vector("output_norm.weight", ck.f32_bytes(Weight::RmsFinal));
  add.matrix("output.weight", ck.layer_shape(classifier), ck.f32_bytes(classifier));
  for (int l = 0; l < c.n_layers; ++l) {
    const auto name = [l](std::string_view what) { return fmt::format("blk.{}.{}.weight", l, what); };
    const auto matrix = [&](std::string_view what, Weight weight) {
      add.matrix(name(what), ck.layer_shape(weight), ck.f32_bytes(weight, l));
    };
    matrix("attn_q", Weight::Wq);
    matrix("attn_k", Weight::Wk);
    matrix("attn_v", Weight::Wv);
    matrix("attn_output", Weight::Wo);
    add.vector(name("attn_norm"), ck.f32_bytes(Weight::RmsAtt, l));
    matrix("ffn_gate", Weight::W1);
    matrix("ffn_down", Weight::W2);
    matrix("ffn_up", Weight::W3);
    add.vector(name("ffn_norm"), ck.f32_bytes(Weight::RmsFfn, l));
  }
}

constexpr std::string_view kBitnetDescription =
    "converted by okapi from a bitllama2.c ternary checkpoint: ternary weights expanded losslessly to F32 "
    "scale*{-1,0,+1}; weightless BitLinear RMS norms stored as constant 1/n norm weights (epsilon 0); wq/wk rows "
    "permuted for NEOX RoPE; the original runtime's int8 activation quantization is not represented";

void build_bitnet(gguf::Writer& w, const Checkpoint& ck, const Tokenizer& tokenizer, const ConvertOptions& options) {
  const Config& c = ck.config();
  const std::string name =
      options.name.empty() ? std::filesystem::path(ck.name()).stem().string() : options.name;
  w.set("general.architecture", "bitnet");
  w.set("general.name", name);
  w.set("general.description", kBitnetDescription);
  w.set("bitnet.context_length", options.context_length.value_or(u32(c.seq_len)));
  using enum ShapeKey;
  set_shape_keys(w, "bitnet", c, {Embedding, Blocks, FeedForward, Heads, KvHeads, RopeDims});
  w.set("bitnet.rope.freq_base", kRopeFreqBase);
  w.set("bitnet.attention.layer_norm_rms_epsilon", 0.0f);
  w.set("bitnet.vocab_size", u32(c.vocab_size));
  w.set("general.file_type", uint32_t{options.type == DType::F16 ? 1u : 0u});
  set_vocabulary(w, tokenizer);
  set_special_ids(w);

  TensorAdder add(w, options.type);
  const auto constant = [](int64_t n) {
    return std::vector<float>(static_cast<size_t>(n), 1.0f / static_cast<float>(n));
  };
  add.matrix("token_embd.weight", ck.layer_shape(Weight::TokenEmbedding), ck.f32_bytes(Weight::TokenEmbedding));
  for (int l = 0; l < c.n_layers; ++l) {
    const auto name_of = [l](std::string_view what) { return fmt::format("blk.{}.{}.weight", l, what); };
    const auto matrix = [&](std::string_view what, Weight weight, bool permute) {
      const auto shape = ck.layer_shape(weight);
      auto values = ck.values(weight, l);
      if (permute) values = permute_for_neox(values, shape[0], shape[1], c.head_size());
      add.matrix(name_of(what), shape, values);
    };
    add.vector(name_of("attn_norm"), constant(c.dim));
    matrix("attn_q", Weight::Wq, true);
    matrix("attn_k", Weight::Wk, true);
    matrix("attn_v", Weight::Wv, false);
    add.vector(name_of("attn_sub_norm"), constant(c.dim));
    matrix("attn_output", Weight::Wo, false);
    add.vector(name_of("ffn_norm"), constant(c.dim));
    matrix("ffn_gate", Weight::W1, false);
    matrix("ffn_up", Weight::W3, false);
    add.vector(name_of("ffn_sub_norm"), constant(c.hidden_dim));
    matrix("ffn_down", Weight::W2, false);
  }
  add.vector("output_norm.weight", ck.f32_bytes(Weight::RmsFinal));
}

}  // namespace

void set_vocabulary(gguf::Writer& w, const Tokenizer& tokenizer) {
  Array tokens{ValueType::STRING, {}}, scores{ValueType::F32, {}}, types{ValueType::I32, {}};
  for (GgufToken& t : gguf_vocabulary(tokenizer)) {
    tokens.items.emplace_back(std::move(t.text));
    scores.items.emplace_back(t.score);
    types.items.emplace_back(static_cast<int32_t>(t.type));
  }
  w.set("tokenizer.ggml.tokens", std::move(tokens));
  w.set("tokenizer.ggml.scores", std::move(scores));
  w.set("tokenizer.ggml.token_type", std::move(types));
  w.set("tokenizer.ggml.model", "llama");
}

void set_special_ids(gguf::Writer& w) {
  w.set("tokenizer.ggml.unknown_token_id", kUnknownId);
  w.set("tokenizer.ggml.bos_token_id", kBosId);
  w.set("tokenizer.ggml.eos_token_id", kEosId);
  w.set("tokenizer.ggml.seperator_token_id", kNoToken);  // sic: llama.cpp's key name
  w.set("tokenizer.ggml.padding_token_id", kNoToken);
}

std::vector<GgufToken> gguf_vocabulary(const Tokenizer& tokenizer) {
  std::vector<GgufToken> out;
  out.reserve(tokenizer.tokens.size());
  for (size_t id = 0; id < tokenizer.tokens.size(); ++id) {
    const Token& token = tokenizer.tokens[id];
    GgufToken t{token.text, token.score, TokenType::Normal};
    if (id == kUnknownId) {
      t.text = "<unk>";
      t.type = TokenType::Unknown;
    } else if (id == kBosId) {
      t.text = "<s>";
      t.type = TokenType::Control;
    } else if (id == kEosId) {
      t.text = "</s>";
      t.type = TokenType::Control;
    } else if (token.text.empty()) {
      t.type = TokenType::Control;
    } else if (looks_like_byte_token(token.text)) {
      t.type = TokenType::Byte;
    }
    t.text = escape_spaces(t.text);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<float> permute_for_neox(const std::vector<float>& rows, int64_t n_rows, int64_t n_cols, int64_t head_size) {
  if (head_size <= 0 || head_size % 2 != 0 || n_rows % head_size != 0 ||
      static_cast<int64_t>(rows.size()) != n_rows * n_cols) {
    throw_error("cannot permute {} x {} rows ({} values) into heads of {}", n_rows, n_cols, rows.size(), head_size);
  }
  std::vector<float> out(rows.size());
  const int64_t half = head_size / 2;
  const auto copy_row = [&](int64_t to, int64_t from) {
    std::memcpy(out.data() + to * n_cols, rows.data() + from * n_cols, static_cast<size_t>(n_cols) * sizeof(float));
  };
  for (int64_t head = 0; head < n_rows / head_size; ++head) {
    const int64_t base = head * head_size;
    for (int64_t i = 0; i < half; ++i) {
      copy_row(base + i, base + 2 * i);
      copy_row(base + half + i, base + 2 * i + 1);
    }
  }
  return out;
}

gguf::Writer build_gguf(const Checkpoint& checkpoint, const Tokenizer& tokenizer, const ConvertOptions& options) {
  if (options.type != DType::F32 && options.type != DType::F16) {
    throw_error("convert: output type must be f32 or f16, not {}", dtype_name(options.type));
  }
  if (options.context_length && *options.context_length == 0) throw_error("convert: context length must be positive");
  check_vocab_size(tokenizer, checkpoint.config().vocab_size);
  gguf::Writer writer;
  if (checkpoint.format() == Format::BitNet) {
    build_bitnet(writer, checkpoint, tokenizer, options);
  } else {
    build_llama(writer, checkpoint, tokenizer, options);
  }
  return writer;
}

ConvertSummary convert_file(const std::filesystem::path& checkpoint_path, const std::filesystem::path& tokenizer_path,
                            const std::filesystem::path& output, const ConvertOptions& options) {
  check_output_path({output, "the output"}, {{checkpoint_path, "the checkpoint"}, {tokenizer_path, "the tokenizer"}});
  const Checkpoint checkpoint = Checkpoint::open(checkpoint_path);
  const Tokenizer tokenizer = open_tokenizer(tokenizer_path);
  const gguf::Writer writer = build_gguf(checkpoint, tokenizer, options);
  const uint64_t file_bytes = writer.write(output);  // not file_size: the output may be a device or a FIFO
  ConvertSummary summary;
  summary.architecture = checkpoint.format() == Format::BitNet ? "bitnet" : "llama";
  summary.n_tensors = writer.tensor_count();
  summary.file_bytes = file_bytes;
  summary.source_format = checkpoint.format();
  return summary;
}

}  // namespace okapi::llama2c
