// Readers for karpathy/llama2.c files: model checkpoints (`model.bin`) and vocabularies
// (`tokenizer.bin`). Everything is validated before use; a malformed file throws okapi::Error
// naming the field, its byte offset and the offending value. Weights are views into the mapped
// file, never copies.
//
// Checkpoint formats (all little-endian, float32 unless noted):
//  * Legacy (llama2.c export "version 0", what run.c reads): 7 int32 header (dim, hidden_dim,
//    n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means an unshared
//    classifier), then token_embedding_table, rms_att_weight, wq, wk, wv, wo, rms_ffn_weight, w1, w2,
//    w3, rms_final_weight, freq_cis_real, freq_cis_imag (seq_len * head_size / 2 each, unused),
//    and wcls when unshared. Each per-layer array holds all layers back to back.
//  * Version 1 (magic "ak42" = 0x616b3432, version 1, 256-byte header: the 7 int32 then a uint8
//    shared_classifier flag): rms_att_weight, rms_ffn_weight, rms_final_weight,
//    token_embedding_table, wq, wk, wv, wo, w1, w2, w3, then wcls when unshared.
//  * BitNet (HKUSTGZ-MICS-LYU/bitllama2.c export_bitmodel.py / runbit.c; the same "ak42" version 1
//    header, told apart by its size): rms_final_weight, token_embedding_table, then wq, wk, wv, wo,
//    w1, w2, w3 as ternary matrices. Each layer's matrix is a float32 scale followed by 2-bit codes,
//    four per byte, first weight in the high bits: 0b01 = +1, 0b11 = -1, 0b00 = 0 (0b10 is
//    invalid). Weight value = scale * code. There are no per-layer norm weights: each BitLinear
//    normalizes its input without a weight (see convert_llama2c.hpp for what that means).
//  * Version 2 ("ak42" version 2, Q8_0 groups) is detected and rejected.
//
// Matrices are row-major [rows = outputs][cols = inputs], which is exactly ggml's layout with
// ne = {cols, rows}.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.hpp"

namespace okapi::llama2c {

inline constexpr uint32_t kMagic = 0x616b3432;  // "ak42" as llama2.c writes it (bytes "24ka")
inline constexpr uint64_t kLegacyHeaderBytes = 28;
inline constexpr uint64_t kVersionedHeaderBytes = 256;

enum class Format { Legacy, Version1, BitNet };
std::string_view format_name(Format format);

struct Config {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;  // always positive here; the legacy sign flag is in shared_classifier
  int32_t seq_len = 0;
  bool shared_classifier = true;

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return head_size() * n_kv_heads; }
};

// The arrays of a checkpoint, named as in llama2.c's TransformerWeights.
enum class Weight {
  TokenEmbedding, RmsAtt, Wq, Wk, Wv, Wo, RmsFfn, W1, W2, W3, RmsFinal, FreqCisReal, FreqCisImag, Wcls,
};
std::string_view weight_name(Weight weight);  // "token_embedding_table", "wq", ...

enum class Encoding { F32, Ternary };

// One array as stored: per-layer arrays hold all layers ({n_layers, rows, cols}).
struct Section {
  Weight weight = Weight::TokenEmbedding;
  Encoding encoding = Encoding::F32;
  bool per_layer = false;
  std::vector<int64_t> shape;  // row-major, outermost first
  uint64_t offset = 0;         // absolute, in the file
  uint64_t nbytes = 0;
};

// One layer's ternary matrix (BitNet format).
struct TernaryMatrix {
  float scale = 0;
  std::span<const uint8_t> codes;  // rows * cols / 4 bytes
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t codes_offset = 0;  // absolute file offset of `codes`, for messages
};

class Checkpoint {
 public:
  // Maps and parses `path`.
  static Checkpoint open(const std::filesystem::path& path);
  // Parses bytes owned by the caller (they must outlive the Checkpoint).
  static Checkpoint parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  Format format() const { return format_; }
  const Config& config() const { return config_; }
  const std::string& name() const { return name_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t header_bytes() const;
  const std::vector<Section>& sections() const { return sections_; }
  const Section* find(Weight weight) const;
  const Section& section(Weight weight) const;  // throws if absent (e.g. wcls when shared)

  // Rows x cols of one matrix (or {n} of a vector) for one layer, as llama2.c uses it.
  std::vector<int64_t> layer_shape(Weight weight) const;
  // The float32 bytes of a weight: one layer's slice for a per-layer array, else the whole
  // array. Throws for a ternary weight.
  std::span<const uint8_t> f32_bytes(Weight weight, int layer = -1) const;
  // One layer's ternary matrix; throws for a float32 weight.
  TernaryMatrix ternary(Weight weight, int layer) const;
  // The values of any weight (one layer's slice), decoding ternary codes; throws on an invalid
  // code or a non-finite scale.
  std::vector<float> values(Weight weight, int layer = -1) const;

 private:
  std::shared_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  std::string name_;
  Format format_ = Format::Legacy;
  Config config_;
  std::vector<Section> sections_;
};

// Decodes `rows * cols` ternary values (scale * {-1, 0, +1}); throws on code 0b10 or a bad scale.
std::vector<float> decode_ternary(const TernaryMatrix& matrix, std::string_view what);

struct Token {
  std::string text;  // raw bytes as stored (llama2.c spells SentencePiece's U+2581 as ' ')
  float score = 0;
  uint64_t offset = 0;  // where the record (score, length, bytes) begins
};

struct Tokenizer {
  std::string name;
  uint32_t max_token_length = 0;
  std::vector<Token> tokens;
  uint64_t file_size = 0;
};

// Reads every record up to the end of the file (the format stores no count). Throws on a
// truncated record, a negative or over-long length, a non-finite score or an empty file.
Tokenizer read_tokenizer(std::span<const uint8_t> bytes, std::string name = "<memory>");
Tokenizer open_tokenizer(const std::filesystem::path& path);
// Throws when the tokenizer does not have exactly `vocab_size` tokens (the wrong tokenizer).
void check_vocab_size(const Tokenizer& tokenizer, int64_t vocab_size);

// For `okapi inspect`: what a llama2.c file holds, in file order.
struct DescribedField {
  std::string name;
  int64_t value = 0;
  uint64_t offset = 0;  // where it is stored
};
struct DescribedEntry {
  std::string name;            // array name, or a token's text
  std::vector<int64_t> shape;  // row-major, outermost first; a token: {length in bytes}
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  std::string detail;  // "f32", "ternary: per layer f32 scale + 2-bit codes", "unused", "score -3.5"
};
struct Description {
  std::string kind;  // "llama2.c checkpoint (legacy)", "llama2.c tokenizer", ...
  uint64_t file_size = 0;
  std::vector<DescribedField> fields;
  std::vector<DescribedEntry> entries;  // arrays of a checkpoint, tokens of a tokenizer
};
Description describe(const Checkpoint& checkpoint);
Description describe(const Tokenizer& tokenizer);
// Opens `path` and describes it as a checkpoint when it is one ("ak42" magic or a legacy header
// whose sizes add up), else as a tokenizer; throws with both reasons when it is neither.
Description describe_file(const std::filesystem::path& path);

}  // namespace okapi::llama2c
