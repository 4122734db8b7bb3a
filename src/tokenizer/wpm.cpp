// WordPiece (BERT) as llama.cpp's llm_tokenizer_wpm_session: normalize and split the text into
// words, then cover each word ("▁" + word) greedily with the longest vocabulary entries; a word
// that cannot be covered completely becomes [UNK].
//
// llama.cpp's normalization is not full NFD: each codepoint is replaced by the first codepoint of
// its NFD decomposition (which drops the accent of a precomposed letter but keeps a separate
// combining mark), then lowercased with the simple case mapping. Character properties come from
// ICU here, where llama.cpp uses tables generated from Python's unicodedata.
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi::tokenizer {
namespace {

// BERT's "Chinese character" ranges as llama.cpp (and HF) list them, including HF's 0x2B920 start.
bool is_chinese_char(uint32_t cpt) {
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) || (cpt >= 0x20000 && cpt <= 0x2A6DF) ||
         (cpt >= 0x2A700 && cpt <= 0x2B73F) || (cpt >= 0x2B740 && cpt <= 0x2B81F) ||
         (cpt >= 0x2B920 && cpt <= 0x2CEAF) || (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

class WpmSession final : public Session {
 public:
  explicit WpmSession(const Vocab& vocab) : token_to_id_(vocab.token_to_id), unk_(vocab.unk) {
    for (const auto& token : vocab.tokens) max_token_length_ = std::max(max_token_length_, token.size());
    UErrorCode status = U_ZERO_ERROR;
    nfd_ = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status) || nfd_ == nullptr) throw_error("WordPiece: ICU NFD normalizer unavailable ({})", u_errorName(status));
  }

  void encode_fragment(std::string_view text, std::vector<TokenId>& out) const override {
    for (const std::string& word : split_words(text)) encode_word(word, out);
  }

 private:
  // The first codepoint of the NFD decomposition (the codepoint itself when it has none).
  uint32_t nfd_first(uint32_t cpt) const {
    if (cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return cpt;
    icu::UnicodeString decomposition;
    if (!nfd_->getDecomposition(static_cast<UChar32>(cpt), decomposition)) return cpt;
    return static_cast<uint32_t>(decomposition.char32At(0));
  }

  // llama.cpp's preprocess: whitespace ends a word; NUL, U+FFFD and control characters vanish;
  // punctuation, ASCII symbols and CJK ideographs are words of their own.
  std::vector<std::string> split_words(std::string_view text) const {
    std::vector<std::string> words(1);
    for (const uint32_t raw : utf8_to_codepoints(text)) {
      const uint32_t cpt = nfd_first(raw);
      if (is_unicode_whitespace(cpt)) {
        if (!words.back().empty()) words.emplace_back();
        continue;
      }
      const auto category = static_cast<UCharCategory>(u_charType(static_cast<UChar32>(cpt)));
      const bool control = category == U_CONTROL_CHAR || category == U_FORMAT_CHAR ||
                           category == U_PRIVATE_USE_CHAR || category == U_SURROGATE;
      if (cpt == 0 || cpt == kReplacementChar || control) continue;
      const uint32_t lower = static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cpt)));
      const bool punctuation = (U_GET_GC_MASK(static_cast<UChar32>(cpt)) & U_GC_P_MASK) != 0;
      const bool ascii_symbol = cpt < 0x7F && (U_GET_GC_MASK(static_cast<UChar32>(cpt)) & U_GC_S_MASK) != 0;
      if (punctuation || ascii_symbol || is_chinese_char(cpt)) {
        if (!words.back().empty()) words.emplace_back();
        append_utf8(words.back(), lower);
        words.emplace_back();
      } else {
        append_utf8(words.back(), lower);
      }
    }
    if (words.back().empty()) words.pop_back();
    return words;
  }

  void encode_word(const std::string& word, std::vector<TokenId>& out) const {
    if (word.empty()) return;
    const std::string text = "\xE2\x96\x81" + word;  // the phantom space the converter put on word starts
    const size_t first_token = out.size();
    for (size_t i = 0; i < text.size(); ++i) {
      bool matched = false;
      for (size_t j = std::min(text.size(), i + max_token_length_ + 1); j > i; --j) {
        const auto it = token_to_id_.find(text.substr(i, j - i));
        if (it != token_to_id_.end()) {
          out.push_back(it->second);
          matched = true;
          i = j - 1;
          break;
        }
      }
      if (!matched) {  // one uncovered position discards the whole word
        out.resize(first_token);
        break;
      }
    }
    // llama.cpp would push LLAMA_TOKEN_NULL without an unknown token; nothing is pushed here.
    if (out.size() == first_token && unk_ != kNoToken) out.push_back(unk_);
  }

  std::unordered_map<std::string, TokenId> token_to_id_;  // a copy: the owning Tokenizer may move
  TokenId unk_;
  size_t max_token_length_ = 0;
  const icu::Normalizer2* nfd_ = nullptr;  // owned by ICU
};

}  // namespace

std::unique_ptr<Session> make_wpm_session(const Vocab& vocab) { return std::make_unique<WpmSession>(vocab); }

}  // namespace okapi::tokenizer
