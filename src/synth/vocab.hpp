// A synthetic SentencePiece-style vocabulary of any size, as tokenizer.ggml.* keys llama.cpp
// accepts: <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, "▁", then generated
// pieces ("▁a", "b", "▁c", ... in bijective base 26) with decreasing scores.
#pragma once
#include <cstdint>

#include "format/gguf.hpp"

namespace okapi::synth {

inline constexpr int64_t kMinVocab = 260;  // specials + bytes + "▁"

void set_spm_vocab(gguf::Writer& writer, int64_t n_vocab);

// A synthetic WordPiece vocabulary as llama.cpp's BERT converter writes one (tokenizer.ggml.model
// "bert"): [PAD], [unused0..98], [UNK] (100), [CLS] (101), [SEP] (102), [MASK] (103), then each
// printable ASCII character as a word start ("▁c") and as a continuation ("c"), then generated
// pieces likewise; tokenizer.ggml.token_type_count 2 (bert's token types).
inline constexpr int64_t kMinWordPieceVocab = 104 + 2 * 94;
void set_wordpiece_vocab(gguf::Writer& writer, int64_t n_vocab);

}  // namespace okapi::synth
