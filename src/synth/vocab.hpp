// A synthetic SentencePiece-style vocabulary of any size, as tokenizer.ggml.* keys llama.cpp
// accepts: <unk> <s> </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, "▁", then generated
// pieces ("▁a", "b", "▁c", ... in bijective base 26) with decreasing scores.
#pragma once
#include <cstdint>

#include "format/gguf.hpp"

namespace okapi::synth {

inline constexpr int64_t kMinVocab = 260;  // specials + bytes + "▁"

void set_spm_vocab(gguf::Writer& writer, int64_t n_vocab);

}  // namespace okapi::synth
