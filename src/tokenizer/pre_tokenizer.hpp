// Byte-level BPE pre-tokenization: the regex list llama.cpp's llm_tokenizer_bpe chooses for each
// tokenizer.ggml.pre family, run with PCRE2 (UTF + UCP, JIT) the way llama.cpp's
// unicode_regex_split applies them: each regex splits every piece left by the previous one into its
// matches and the gaps between them (gaps are kept as pieces too).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::tokenizer {

struct PreTokenizerFamily {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // llama3: a word that is itself a token skips the merges
};

// The family for a tokenizer.ggml.pre value ("" means "default"). Throws okapi::Error for a value
// llama.cpp does not know.
PreTokenizerFamily pre_tokenizer_family(std::string_view pre);
// Every tokenizer.ggml.pre value pre_tokenizer_family accepts.
std::vector<std::string> known_pre_tokenizers();

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<std::string> regexes);  // throws okapi::Error on a bad regex
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Splits text into words (UTF-8; invalid bytes become U+FFFD as in llama.cpp). The words
  // concatenate back to the decoded text.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> compiled_;
};

}  // namespace okapi::tokenizer
