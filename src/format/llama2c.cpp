#include "format/llama2c.hpp"

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"

namespace okapi::llama2c {
namespace {

static_assert(std::endian::native == std::endian::little, "llama2.c files are little-endian");

// Sanity limits: far above any real model, low enough that no size computation can overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 20;       // dim, hidden_dim
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

int32_t read_i32(std::span<const uint8_t> bytes, uint64_t offset) {
  int32_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

uint32_t read_u32(std::span<const uint8_t> bytes, uint64_t offset) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

float read_f32(std::span<const uint8_t> bytes, uint64_t offset) {
  float v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  return v;
}

uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_error("size of '{}' overflows ({} x {})", what, a, b);
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, std::string_view what) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw_error("offset of '{}' overflows ({} + {})", what, a, b);
  return r;
}

constexpr std::string_view kFieldNames[7] = {"dim", "hidden_dim", "n_layers", "n_heads",
                                             "n_kv_heads", "vocab_size", "seq_len"};

// The 7 int32 of the header start at `base`; the values are checked one by one so the message
// names the first bad field.
Config read_config(std::span<const uint8_t> bytes, uint64_t base, const std::string& name, bool legacy) {
  int32_t raw[7];
  for (int i = 0; i < 7; ++i) raw[i] = read_i32(bytes, base + 4 * static_cast<uint64_t>(i));
  const auto field_error = [&](int i, std::string_view why) {
    throw_error("{}: llama2.c header field {} at offset {} is {}: {}", name, kFieldNames[i],
                base + 4 * static_cast<uint64_t>(i), raw[i], why);
  };
  constexpr int64_t limits[7] = {kMaxWidth, kMaxWidth, kMaxLayers, kMaxWidth, kMaxWidth, kMaxVocab, kMaxSeqLen};
  for (int i = 0; i < 7; ++i) {
    int64_t v = raw[i];
    if (i == 5 && legacy) v = v < 0 ? -v : v;  // the legacy sign flag
    if (v <= 0) field_error(i, i == 5 && legacy ? "it must not be 0" : "it must be positive");
    if (v > limits[i]) field_error(i, fmt::format("larger than the sanity limit {}", limits[i]));
  }
  Config c;
  c.dim = raw[0];
  c.hidden_dim = raw[1];
  c.n_layers = raw[2];
  c.n_heads = raw[3];
  c.n_kv_heads = raw[4];
  c.vocab_size = raw[5] < 0 ? -raw[5] : raw[5];
  c.shared_classifier = raw[5] > 0;
  c.seq_len = raw[6];
  if (c.dim % c.n_heads != 0) {
    throw_error("{}: llama2.c header: n_heads {} (offset {}) does not divide dim {}", name, c.n_heads, base + 12,
                c.dim);
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    throw_error("{}: llama2.c header: n_kv_heads {} (offset {}) does not divide n_heads {}", name, c.n_kv_heads,
                base + 16, c.n_heads);
  }
  if (c.head_size() % 2 != 0) {
    throw_error("{}: llama2.c header: head size dim/n_heads = {}/{} = {} must be even for RoPE", name, c.dim,
                c.n_heads, c.head_size());
  }
  return c;
}

// Lays the arrays out one after another from `start`, with checked arithmetic.
class Layout {
 public:
  Layout(const Config& config, uint64_t start) : config_(config), cursor_(start) {}

  void f32(Weight weight, std::vector<int64_t> shape, bool per_layer) {
    uint64_t count = 4;
    for (int64_t d : shape) count = checked_mul(count, static_cast<uint64_t>(d), weight_name(weight));
    add(Section{weight, Encoding::F32, per_layer, std::move(shape), cursor_, count});
  }

  void ternary(Weight weight, int64_t rows, int64_t cols) {
    const uint64_t n = checked_mul(static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), weight_name(weight));
    if (n % 4 != 0) {
      throw_error("ternary matrix '{}' has {} x {} weights, not a multiple of 4 (2-bit codes pack 4 per byte)",
                  weight_name(weight), rows, cols);
    }
    const uint64_t per_layer = 4 + n / 4;  // float scale + codes
    const uint64_t total = checked_mul(per_layer, static_cast<uint64_t>(config_.n_layers), weight_name(weight));
    add(Section{weight, Encoding::Ternary, true, {config_.n_layers, rows, cols}, cursor_, total});
  }

  // Per-layer matrices {n_layers, rows, cols}, in the order given, and a per-layer vector {n_layers, n}.
  struct Matrix {
    Weight weight;
    int64_t rows;
    int64_t cols;
  };
  void layers_f32(std::span<const Matrix> matrices) {
    for (const Matrix& m : matrices) f32(m.weight, {config_.n_layers, m.rows, m.cols}, true);
  }
  void layers_ternary(std::span<const Matrix> matrices) {
    for (const Matrix& m : matrices) ternary(m.weight, m.rows, m.cols);
  }
  void layers_vec(Weight weight, int64_t n) { f32(weight, {config_.n_layers, n}, true); }

  uint64_t end() const { return cursor_; }
  std::vector<Section> take() { return std::move(sections_); }

 private:
  void add(Section s) {
    cursor_ = checked_add(cursor_, s.nbytes, weight_name(s.weight));
    sections_.push_back(std::move(s));
  }
  Config config_;
  uint64_t cursor_;
  std::vector<Section> sections_;
};

Layout plan(Format format, const Config& c, uint64_t start) {
  const int64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
  // The projections of a layer, rows x cols, in the order every format stores them.
  const std::array<Layout::Matrix, 4> attention = {
      {{Weight::Wq, dim, dim}, {Weight::Wk, kv, dim}, {Weight::Wv, kv, dim}, {Weight::Wo, dim, dim}}};
  const std::array<Layout::Matrix, 3> ffn = {
      {{Weight::W1, hidden, dim}, {Weight::W2, dim, hidden}, {Weight::W3, hidden, dim}}};
  Layout l(c, start);
  switch (format) {
    case Format::Legacy:
      l.f32(Weight::TokenEmbedding, {vocab, dim}, false);
      l.layers_vec(Weight::RmsAtt, dim);
      l.layers_f32(attention);
      l.layers_vec(Weight::RmsFfn, dim);
      l.layers_f32(ffn);
      l.f32(Weight::RmsFinal, {dim}, false);
      l.f32(Weight::FreqCisReal, {c.seq_len, c.head_size() / 2}, false);
      l.f32(Weight::FreqCisImag, {c.seq_len, c.head_size() / 2}, false);
      if (!c.shared_classifier) l.f32(Weight::Wcls, {vocab, dim}, false);
      break;
    case Format::Version1:
      l.layers_vec(Weight::RmsAtt, dim);
      l.layers_vec(Weight::RmsFfn, dim);
      l.f32(Weight::RmsFinal, {dim}, false);
      l.f32(Weight::TokenEmbedding, {vocab, dim}, false);
      l.layers_f32(attention);
      l.layers_f32(ffn);
      if (!c.shared_classifier) l.f32(Weight::Wcls, {vocab, dim}, false);
      break;
    case Format::BitNet:
      l.f32(Weight::RmsFinal, {dim}, false);
      l.f32(Weight::TokenEmbedding, {vocab, dim}, false);
      l.layers_ternary(attention);
      l.layers_ternary(ffn);
      break;
  }
  return l;
}

std::string describe_config(const Config& c) {
  return fmt::format("dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}, seq_len {}, {}",
                     c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len,
                     c.shared_classifier ? "shared classifier" : "separate classifier");
}

// The sizes must add up to the file size exactly; say where they stop agreeing.
[[noreturn]] void size_mismatch(const std::string& name, Format format, const Config& c,
                                const std::vector<Section>& sections, uint64_t expected, uint64_t actual) {
  std::string where;
  if (actual < expected) {
    for (const Section& s : sections) {
      if (s.offset + s.nbytes > actual) {
        where = fmt::format("array '{}' at offset {} needs {} bytes but only {} remain (truncated?)",
                            weight_name(s.weight), s.offset, s.nbytes, actual > s.offset ? actual - s.offset : 0);
        break;
      }
    }
  } else {
    where = fmt::format("{} unexpected bytes after the last array, which ends at offset {}", actual - expected,
                        expected);
  }
  throw_error("{}: {} checkpoint ({}) should be {} bytes, the file has {}: {}", name, format_name(format),
              describe_config(c), expected, actual, where);
}

}  // namespace

std::string_view format_name(Format format) {
  switch (format) {
    case Format::Legacy: return "llama2.c legacy";
    case Format::Version1: return "llama2.c ak42 version 1 (fp32)";
    case Format::BitNet: return "bitllama2.c ak42 version 1 (ternary)";
  }
  return "?";
}

std::string_view weight_name(Weight weight) {
  switch (weight) {
    case Weight::TokenEmbedding: return "token_embedding_table";
    case Weight::RmsAtt: return "rms_att_weight";
    case Weight::Wq: return "wq";
    case Weight::Wk: return "wk";
    case Weight::Wv: return "wv";
    case Weight::Wo: return "wo";
    case Weight::RmsFfn: return "rms_ffn_weight";
    case Weight::W1: return "w1";
    case Weight::W2: return "w2";
    case Weight::W3: return "w3";
    case Weight::RmsFinal: return "rms_final_weight";
    case Weight::FreqCisReal: return "freq_cis_real";
    case Weight::FreqCisImag: return "freq_cis_imag";
    case Weight::Wcls: return "wcls";
  }
  return "?";
}

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  Checkpoint c = parse(mapping->bytes(), path.string());
  c.mapping_ = std::move(mapping);
  return c;
}

Checkpoint Checkpoint::parse(std::span<const uint8_t> bytes, std::string name) {
  Checkpoint c;
  c.bytes_ = bytes;
  c.name_ = std::move(name);
  const uint64_t size = bytes.size();
  if (size >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) {
    throw_error("{}: this is a GGUF file, not a llama2.c checkpoint", c.name_);
  }
  if (size >= 4 && read_u32(bytes, 0) == kMagic) {
    if (size < kVersionedHeaderBytes) {
      throw_error("{}: 'ak42' file is {} bytes, shorter than its {}-byte header (truncated)", c.name_, size,
                  kVersionedHeaderBytes);
    }
    const int32_t version = read_i32(bytes, 4);
    if (version == 2) {
      throw_error("{}: llama2.c 'ak42' version 2 (int8 Q8_0 export) is not supported; export with --version 0 or 1",
                  c.name_);
    }
    if (version != 1) throw_error("{}: unknown llama2.c 'ak42' version {} at offset 4 (expected 1)", c.name_, version);
    c.config_ = read_config(bytes, 8, c.name_, false);
    const uint8_t flag = bytes[36];
    if (flag > 1) throw_error("{}: shared_classifier flag at offset 36 is {}, expected 0 or 1", c.name_, flag);
    c.config_.shared_classifier = flag == 1;
    // fp32 (llama2.c) and ternary (bitllama2.c) files share magic and version: the size decides.
    Layout fp32 = plan(Format::Version1, c.config_, kVersionedHeaderBytes);
    std::optional<Layout> ternary;
    if (c.config_.shared_classifier) ternary = plan(Format::BitNet, c.config_, kVersionedHeaderBytes);
    if (fp32.end() == size) {
      c.format_ = Format::Version1;
      c.sections_ = fp32.take();
    } else if (ternary && ternary->end() == size) {
      c.format_ = Format::BitNet;
      c.sections_ = ternary->take();
    } else {
      throw_error("{}: 'ak42' version 1 checkpoint ({}) is {} bytes; expected {} (llama2.c fp32){}", c.name_,
                  describe_config(c.config_), size, fp32.end(),
                  ternary ? fmt::format(" or {} (bitllama2.c ternary)", ternary->end()) : std::string());
    }
    return c;
  }
  if (size < kLegacyHeaderBytes) {
    throw_error("{}: file is {} bytes, shorter than the {}-byte llama2.c header", c.name_, size, kLegacyHeaderBytes);
  }
  c.format_ = Format::Legacy;
  c.config_ = read_config(bytes, 0, c.name_, true);
  Layout layout = plan(Format::Legacy, c.config_, kLegacyHeaderBytes);
  const uint64_t expected = layout.end();
  c.sections_ = layout.take();
  if (expected != size) size_mismatch(c.name_, c.format_, c.config_, c.sections_, expected, size);
  return c;
}

uint64_t Checkpoint::header_bytes() const {
  return format_ == Format::Legacy ? kLegacyHeaderBytes : kVersionedHeaderBytes;
}

const Section* Checkpoint::find(Weight weight) const {
  for (const Section& s : sections_) {
    if (s.weight == weight) return &s;
  }
  return nullptr;
}

const Section& Checkpoint::section(Weight weight) const {
  const Section* s = find(weight);
  if (s == nullptr) throw_error("{}: {} checkpoint has no '{}'", name_, format_name(format_), weight_name(weight));
  return *s;
}

std::vector<int64_t> Checkpoint::layer_shape(Weight weight) const {
  const Section& s = section(weight);
  if (!s.per_layer) return s.shape;
  return {s.shape.begin() + 1, s.shape.end()};
}

std::span<const uint8_t> Checkpoint::f32_bytes(Weight weight, int layer) const {
  const Section& s = section(weight);
  if (s.encoding != Encoding::F32) throw_error("{}: '{}' is ternary, not float32", name_, weight_name(weight));
  if (!s.per_layer) return bytes_.subspan(s.offset, s.nbytes);
  if (layer < 0 || layer >= config_.n_layers) {
    throw_error("{}: layer {} of '{}' out of range (n_layers {})", name_, layer, weight_name(weight), config_.n_layers);
  }
  const uint64_t per_layer = s.nbytes / static_cast<uint64_t>(config_.n_layers);
  return bytes_.subspan(s.offset + per_layer * static_cast<uint64_t>(layer), per_layer);
}

TernaryMatrix Checkpoint::ternary(Weight weight, int layer) const {
  const Section& s = section(weight);
  if (s.encoding != Encoding::Ternary) throw_error("{}: '{}' is float32, not ternary", name_, weight_name(weight));
  if (layer < 0 || layer >= config_.n_layers) {
    throw_error("{}: layer {} of '{}' out of range (n_layers {})", name_, layer, weight_name(weight), config_.n_layers);
  }
  const uint64_t per_layer = s.nbytes / static_cast<uint64_t>(config_.n_layers);
  const uint64_t at = s.offset + per_layer * static_cast<uint64_t>(layer);
  TernaryMatrix m;
  m.scale = read_f32(bytes_, at);
  m.codes = bytes_.subspan(at + 4, per_layer - 4);
  m.rows = s.shape[1];
  m.cols = s.shape[2];
  m.codes_offset = at + 4;
  return m;
}

std::vector<float> Checkpoint::values(Weight weight, int layer) const {
  const Section& s = section(weight);
  if (s.encoding == Encoding::Ternary) {
    return decode_ternary(ternary(weight, layer), fmt::format("{}: {}[{}]", name_, weight_name(weight), layer));
  }
  const auto raw = f32_bytes(weight, layer);
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::vector<float> decode_ternary(const TernaryMatrix& m, std::string_view what) {
  if (!std::isfinite(m.scale)) {
    throw_error("{}: ternary scale at offset {} is {}, not a finite number", what, m.codes_offset - 4, m.scale);
  }
  const size_t n = static_cast<size_t>(m.rows * m.cols);
  if (m.codes.size() * 4 != n) throw_error("{}: {} code bytes for {} weights", what, m.codes.size(), n);
  // bitllama2.c packs the flattened row-major matrix, 4 weights per byte, first in bits 7..6.
  const float table[4] = {0.0f, m.scale, 0.0f, -m.scale};
  std::vector<float> out(n);
  for (size_t k = 0; k < n; ++k) {
    const unsigned code = (m.codes[k >> 2] >> (6 - 2 * (k & 3))) & 3u;
    if (code == 2) {
      throw_error("{}: invalid ternary code 0b10 for weight {} (row {}, col {}) in byte at offset {}", what, k,
                  static_cast<int64_t>(k) / m.cols, static_cast<int64_t>(k) % m.cols, m.codes_offset + k / 4);
    }
    out[k] = table[code];
  }
  return out;
}

Tokenizer read_tokenizer(std::span<const uint8_t> bytes, std::string name) {
  Tokenizer t;
  t.name = std::move(name);
  t.file_size = bytes.size();
  if (bytes.size() < 4) {
    throw_error("{}: tokenizer file is {} bytes, shorter than its 4-byte max_token_length header", t.name,
                bytes.size());
  }
  const int32_t max_len = read_i32(bytes, 0);
  if (max_len <= 0) throw_error("{}: tokenizer max_token_length at offset 0 is {}, must be positive", t.name, max_len);
  t.max_token_length = static_cast<uint32_t>(max_len);
  uint64_t at = 4;
  while (at < bytes.size()) {
    const size_t id = t.tokens.size();
    const uint64_t left = bytes.size() - at;
    if (left < 8) {
      throw_error("{}: token {} at offset {}: record truncated ({} bytes left, need 8 for score and length)", t.name,
                  id, at, left);
    }
    Token token;
    token.offset = at;
    token.score = read_f32(bytes, at);
    const int32_t len = read_i32(bytes, at + 4);
    if (!std::isfinite(token.score)) {
      throw_error("{}: token {} score at offset {} is {}, not a finite number", t.name, id, at, token.score);
    }
    if (len < 0) throw_error("{}: token {} length at offset {} is {}, negative", t.name, id, at + 4, len);
    if (len > max_len) {
      throw_error("{}: token {} length at offset {} is {}, longer than max_token_length {}", t.name, id, at + 4, len,
                  max_len);
    }
    if (static_cast<uint64_t>(len) > left - 8) {
      throw_error("{}: token {} at offset {}: length {} but only {} bytes remain (truncated)", t.name, id, at, len,
                  left - 8);
    }
    token.text.assign(reinterpret_cast<const char*>(bytes.data() + at + 8), static_cast<size_t>(len));
    t.tokens.push_back(std::move(token));
    at += 8 + static_cast<uint64_t>(len);
  }
  if (t.tokens.empty()) throw_error("{}: tokenizer holds no tokens", t.name);
  return t;
}

Tokenizer open_tokenizer(const std::filesystem::path& path) {
  const MappedFile mapping(path);
  return read_tokenizer(mapping.bytes(), path.string());
}

void check_vocab_size(const Tokenizer& tokenizer, int64_t vocab_size) {
  if (static_cast<int64_t>(tokenizer.tokens.size()) != vocab_size) {
    throw_error("{}: tokenizer has {} tokens but the checkpoint's vocab_size is {} (wrong tokenizer?)", tokenizer.name,
                tokenizer.tokens.size(), vocab_size);
  }
}

Description describe(const Checkpoint& checkpoint) {
  Description d;
  d.kind = fmt::format("{} checkpoint", format_name(checkpoint.format()));
  d.file_size = checkpoint.file_size();
  const Config& c = checkpoint.config();
  const bool legacy = checkpoint.format() == Format::Legacy;
  const uint64_t base = legacy ? 0 : 8;
  if (!legacy) {
    d.fields.push_back({"magic", kMagic, 0});
    d.fields.push_back({"version", 1, 4});
  }
  const int64_t stored_vocab = legacy && !c.shared_classifier ? -int64_t{c.vocab_size} : c.vocab_size;
  const int64_t values[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, stored_vocab, c.seq_len};
  for (int i = 0; i < 7; ++i) {
    d.fields.push_back({std::string(kFieldNames[i]), values[i], base + 4 * static_cast<uint64_t>(i)});
  }
  if (!legacy) d.fields.push_back({"shared_classifier", c.shared_classifier ? 1 : 0, 36});
  for (const Section& s : checkpoint.sections()) {
    std::string detail = "f32";
    if (s.encoding == Encoding::Ternary) detail = "ternary: per layer f32 scale + 2-bit codes";
    if (s.weight == Weight::FreqCisReal || s.weight == Weight::FreqCisImag) detail = "f32, unused (legacy RoPE table)";
    d.entries.push_back({std::string(weight_name(s.weight)), s.shape, s.offset, s.nbytes, std::move(detail)});
  }
  return d;
}

Description describe(const Tokenizer& tokenizer) {
  Description d;
  d.kind = "llama2.c tokenizer";
  d.file_size = tokenizer.file_size;
  d.fields.push_back({"max_token_length", tokenizer.max_token_length, 0});
  d.fields.push_back({"n_tokens", static_cast<int64_t>(tokenizer.tokens.size()), 0});
  for (const Token& t : tokenizer.tokens) {
    d.entries.push_back({t.text, {static_cast<int64_t>(t.text.size())}, t.offset, 8 + t.text.size(),
                         fmt::format("score {}", t.score)});
  }
  return d;
}

Description describe_file(const std::filesystem::path& path) {
  const MappedFile mapping(path);
  const auto bytes = mapping.bytes();
  const std::string name = path.string();
  if (bytes.size() >= 4 && read_u32(bytes, 0) == kMagic) return describe(Checkpoint::parse(bytes, name));
  std::string as_checkpoint;
  try {
    return describe(Checkpoint::parse(bytes, name));
  } catch (const Error& e) {
    as_checkpoint = e.what();
  }
  try {
    return describe(read_tokenizer(bytes, name));
  } catch (const Error& e) {
    throw_error("'{}' is neither a llama2.c checkpoint nor a tokenizer.bin. As a checkpoint: {}. As a tokenizer: {}",
                name, as_checkpoint, e.what());
  }
}

}  // namespace okapi::llama2c
