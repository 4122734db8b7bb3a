#include "synth/vocab.hpp"

#include <fmt/format.h>

#include <string>

#include "core/error.hpp"

namespace okapi::synth {
namespace {

// llama_token_type values.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

std::string letters(int64_t k) {  // 0 -> "a", 25 -> "z", 26 -> "aa", ...
  std::string s;
  for (++k; k > 0; k = (k - 1) / 26) s.insert(s.begin(), static_cast<char>('a' + (k - 1) % 26));
  return s;
}

}  // namespace

void set_spm_vocab(gguf::Writer& writer, int64_t n_vocab) {
  if (n_vocab < kMinVocab) throw_error("synth: vocab size {} is below the minimum {}", n_vocab, kMinVocab);
  gguf::Array tokens{gguf::ValueType::STRING, {}}, scores{gguf::ValueType::F32, {}}, types{gguf::ValueType::I32, {}};
  tokens.items.reserve(static_cast<size_t>(n_vocab));
  scores.items.reserve(static_cast<size_t>(n_vocab));
  types.items.reserve(static_cast<size_t>(n_vocab));
  auto add = [&](std::string piece, float score, int32_t type) {
    tokens.items.emplace_back(std::move(piece));
    scores.items.emplace_back(score);
    types.items.emplace_back(type);
  };
  add("<unk>", 0.0f, kUnknown);
  add("<s>", 0.0f, kControl);
  add("</s>", 0.0f, kControl);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, kByte);
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's word-start marker
  add(space, -1.0f, kNormal);
  for (int64_t k = 0; static_cast<int64_t>(tokens.items.size()) < n_vocab; ++k) {
    add((k % 2 == 0 ? space : std::string()) + letters(k), -2.0f - static_cast<float>(k), kNormal);
  }
  writer.set("tokenizer.ggml.model", "llama");
  writer.set("tokenizer.ggml.tokens", std::move(tokens));
  writer.set("tokenizer.ggml.scores", std::move(scores));
  writer.set("tokenizer.ggml.token_type", std::move(types));
  writer.set("tokenizer.ggml.bos_token_id", uint32_t{1});
  writer.set("tokenizer.ggml.eos_token_id", uint32_t{2});
  writer.set("tokenizer.ggml.unknown_token_id", uint32_t{0});
  writer.set("tokenizer.ggml.add_bos_token", true);
  writer.set("tokenizer.ggml.add_eos_token", false);
}

void set_wordpiece_vocab(gguf::Writer& writer, int64_t n_vocab) {
  if (n_vocab < kMinWordPieceVocab)
    throw_error("synth: a WordPiece vocabulary needs at least {} tokens, got {}", kMinWordPieceVocab, n_vocab);
  gguf::Array tokens{gguf::ValueType::STRING, {}}, types{gguf::ValueType::I32, {}};
  tokens.items.reserve(static_cast<size_t>(n_vocab));
  types.items.reserve(static_cast<size_t>(n_vocab));
  auto add = [&](std::string piece, int32_t type) {
    tokens.items.emplace_back(std::move(piece));
    types.items.emplace_back(type);
  };
  add("[PAD]", kControl);
  for (int i = 0; i < 99; ++i) add(fmt::format("[unused{}]", i), kNormal);
  add("[UNK]", kUnknown);
  add("[CLS]", kControl);
  add("[SEP]", kControl);
  add("[MASK]", kControl);
  const std::string word_start = "\xE2\x96\x81";  // U+2581: llama.cpp's marker of a word's first piece
  for (char c = '!'; c <= '~'; ++c) {
    add(word_start + std::string(1, c), kNormal);
    add(std::string(1, c), kNormal);
  }
  for (int64_t k = 26; static_cast<int64_t>(tokens.items.size()) < n_vocab; ++k) {  // from "aa": letters are above
    add(word_start + letters(k), kNormal);
    if (static_cast<int64_t>(tokens.items.size()) < n_vocab) add(letters(k), kNormal);
  }
  writer.set("tokenizer.ggml.model", "bert");
  writer.set("tokenizer.ggml.pre", "bert-bge");
  writer.set("tokenizer.ggml.tokens", std::move(tokens));
  writer.set("tokenizer.ggml.token_type", std::move(types));
  writer.set("tokenizer.ggml.token_type_count", uint32_t{2});
  writer.set("tokenizer.ggml.unknown_token_id", uint32_t{100});
  writer.set("tokenizer.ggml.cls_token_id", uint32_t{101});
  writer.set("tokenizer.ggml.seperator_token_id", uint32_t{102});  // (sic) llama.cpp's key
  writer.set("tokenizer.ggml.padding_token_id", uint32_t{0});
  writer.set("tokenizer.ggml.mask_token_id", uint32_t{103});
}

}  // namespace okapi::synth
