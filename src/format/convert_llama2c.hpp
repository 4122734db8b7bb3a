// llama2.c checkpoint + tokenizer.bin -> GGUF.
//
// llama2.c float checkpoints (legacy and "ak42" version 1) become a `llama` GGUF exactly as
// llama.cpp's examples/convert-llama2c-to-ggml writes it: the same metadata keys, types, values and
// order, the same tensor names, order and values (no permutation of wq/wk: llama2.c and llama.cpp's
// llama graph both use interleaved-pair RoPE), output.weight always present (a copy of the
// embedding when the classifier is shared). Converting stories260K.bin + tok512.bin reproduces
// llama.cpp's stories260K.gguf byte for byte. Two deliberate differences, both no-ops for every
// published llama2.c model: rope.dimension_count is the head size (llama.cpp caps it at 64,
// which would leave part of larger heads unrotated), and --type f16 exists.
//
// bitllama2.c ternary checkpoints become a `bitnet` GGUF, because their block is llama.cpp's
// bitnet block: every BitLinear RMS-normalizes its input without a weight, which gives exactly
// the pre-norms (attn_norm, ffn_norm) and the sub-norms before wo and w2 (attn_sub_norm,
// ffn_sub_norm) of llama.cpp's graph; FFN is SiLU-gated; the embedding is the classifier; the
// final norm has a weight. The conversion:
//  * ternary matrices are expanded to exact float32 scale * {-1, 0, +1} (lossless);
//  * the weightless norm x / (rms(x) * n) becomes a norm weight of constant 1/n;
//  * layer_norm_rms_epsilon is 0: bitllama2.c's BitLinear norm has no epsilon and its inputs are
//    tiny (mean square ~1e-9), so llama.cpp's usual 1e-5 would wipe them out. (Its final norm
//    uses 1e-5; its input has mean square ~1e-2, so 0 instead changes it by < 0.1 %.)
//  * wq and wk rows are permuted within each head so that llama.cpp's NEOX RoPE (bitnet's rope
//    type) rotates the same pairs as bitllama2.c's interleaved RoPE.
// What cannot be represented: bitllama2.c quantizes activations to int8 (absmax per token)
// before each ternary matmul; llama.cpp's bitnet graph does not. On bitnet-1M the logits then
// differ by ~0.1-0.2 (of a range of ~25) with the same argmax.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "format/gguf.hpp"
#include "format/llama2c.hpp"

namespace okapi::llama2c {

// llama.cpp's converter writes its own training default (128) as llama.context_length, not the
// checkpoint's seq_len; pass it as context_length to reproduce that converter's file byte for byte.
inline constexpr uint32_t kLlamaCppContextLength = 128;

struct ConvertOptions {
  DType type = DType::F32;  // F32 or F16, for 2-D weights; norms stay F32
  // nullopt: the checkpoint's seq_len, the context the model was trained for.
  std::optional<uint32_t> context_length;
  std::string name;  // general.name; empty: "llama" (as llama.cpp) / the file's stem (bitnet)
};

// The GGUF token type llama.cpp's converter gives each token, and the text it stores (spaces
// written as U+2581, ids 0/1/2 renamed <unk>, <s>, </s>).
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
struct GgufToken {
  std::string text;
  float score = 0;
  TokenType type = TokenType::Normal;
};
std::vector<GgufToken> gguf_vocabulary(const Tokenizer& tokenizer);
// The tokenizer.ggml.* keys llama.cpp's converter writes: the vocabulary (tokens, scores, types,
// model "llama") and, separately (the converter writes other keys in between), the special ids.
// Also used by the trainer's exporter.
void set_vocabulary(gguf::Writer& writer, const Tokenizer& tokenizer);
void set_special_ids(gguf::Writer& writer);

// Row order that makes NEOX RoPE (pairs i, i + head_size/2) rotate what interleaved RoPE
// (pairs 2i, 2i+1) rotates: new row h*hs + i <- old 2i, new h*hs + hs/2 + i <- old 2i + 1.
std::vector<float> permute_for_neox(const std::vector<float>& rows, int64_t n_rows, int64_t n_cols, int64_t head_size);

// Builds the GGUF. The writer holds views into `checkpoint`, which must outlive it.
gguf::Writer build_gguf(const Checkpoint& checkpoint, const Tokenizer& tokenizer, const ConvertOptions& options);

struct ConvertSummary {
  std::string architecture;
  size_t n_tensors = 0;
  uint64_t file_bytes = 0;
  Format source_format = Format::Legacy;
};
// Reads, validates everything, then writes `output` atomically (it is untouched on failure).
ConvertSummary convert_file(const std::filesystem::path& checkpoint, const std::filesystem::path& tokenizer,
                            const std::filesystem::path& output, const ConvertOptions& options);

}  // namespace okapi::llama2c
