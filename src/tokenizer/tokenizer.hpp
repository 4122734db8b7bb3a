// Text <-> token ids, identical to llama.cpp (llama-vocab.cpp): SentencePiece-style merges with
// byte fallback, byte-level BPE with per-family pre-tokenizer regexes (PCRE2), WordPiece.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/vocab.hpp"

namespace okapi::tokenizer {

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS as the vocabulary's add_bos/add_eos say
  bool parse_special = false;  // recognise control/user-defined token texts (e.g. "<s>") in the input
};

// A piece of text to encode; special-token texts are recognised in it only with parse_special
// (text from a chat template's caller goes in with parse_special off).
struct TextPiece {
  std::string_view text;
  bool parse_special = true;
};

// One algorithm (SPM, BPE, WPM). Each encodes a fragment of raw text that contains no special
// tokens; the Tokenizer splits special tokens out first, as llama.cpp's tokenizer_st_partition.
class Session {
 public:
  virtual ~Session() = default;
  virtual void encode_fragment(std::string_view text, std::vector<TokenId>& out) const = 0;
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const Vocab& vocab() const { return *vocab_; }
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The pieces' text joined, encoded as encode(joined, options) does, except that control (and
  // unknown) token texts are recognised only wholly inside pieces with parse_special set (and only
  // with options.parse_special). User-defined tokens are split out everywhere, as encode() does
  // without parse_special. The text between the special tokens found is encoded as one fragment
  // however the pieces divide it, so when the plain pieces hold no control-token text the tokens
  // are exactly encode(joined, options)'s.
  std::vector<TokenId> encode(std::span<const TextPiece> pieces, const EncodeOptions& options) const;
  // The bytes of one token as llama_token_to_piece renders them (SPM: U+2581 -> space, <0xNN> ->
  // byte; BPE: byte-level unmapping). Control tokens render as their text only if `special`.
  std::string token_to_piece(TokenId id, bool special = false) const;
  // As llama_detokenize(remove_special = false, unparse_special = special): the space prefix of the
  // first piece is dropped (add_space_prefix), BPE/WPM spaces are cleaned (clean_spaces).
  std::string decode(std::span<const TokenId> ids, bool special = false) const;
  // The most input bytes one token can stand for, so that text of B bytes has at least
  // B / max_bytes_per_token() tokens (a cheap refusal of prompts far beyond a context, before
  // tokenizing them); 0 when no such bound holds (WPM normalizes, and whitespace collapsing or
  // stripping drops input bytes).
  size_t max_bytes_per_token() const { return max_bytes_per_token_; }

 private:
  // plain: byte ranges of text (sorted, disjoint) where control tokens are not recognised; null: none.
  std::vector<TokenId> encode_text(std::string_view text, const std::vector<std::pair<size_t, size_t>>* plain,
                                   const EncodeOptions& options) const;

  std::unique_ptr<Vocab> vocab_;  // on the heap: sessions keep a reference across moves
  std::unique_ptr<Session> session_;
  std::vector<TokenId> special_tokens_;  // control / user-defined / unknown, longest text first
  size_t max_bytes_per_token_ = 0;
};

// Streaming detokenization: feed ids one at a time, get back only complete UTF-8 characters;
// bytes of a character split across tokens are held until it is complete.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool special = false);
  std::string push(TokenId id);  // the text that became complete with this token
  std::string flush();           // whatever is pending (possibly an incomplete sequence)

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  std::string pending_;
};

// Factories per algorithm (spm.cpp, bpe.cpp, wpm.cpp).
std::unique_ptr<Session> make_spm_session(const Vocab& vocab);
std::unique_ptr<Session> make_bpe_session(const Vocab& vocab);
std::unique_ptr<Session> make_wpm_session(const Vocab& vocab);

}  // namespace okapi::tokenizer
