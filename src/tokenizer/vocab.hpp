// A tokenizer vocabulary as llama.cpp reads it from GGUF metadata (tokenizer.ggml.*), or from a
// llama2.c tokenizer.bin. Pure data: the algorithms live in tokenizer.hpp.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace okapi::gguf {
class File;
}

namespace okapi::tokenizer {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

enum class ModelKind { SPM, BPE, WPM };  // tokenizer.ggml.model: llama, gpt2, bert

struct Vocab {
  ModelKind kind = ModelKind::SPM;
  std::string model_name;  // tokenizer.ggml.model as stored
  std::string pre;         // tokenizer.ggml.pre (pre-tokenizer family), "default" if absent
  std::vector<std::string> tokens;
  std::vector<float> scores;     // empty -> all 0
  std::vector<TokenType> types;  // empty -> all Normal
  std::vector<std::pair<std::string, std::string>> merges;  // BPE, in rank order
  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, unk = kNoToken, pad = kNoToken;
  TokenId sep = kNoToken, cls = kNoToken, mask = kNoToken, linefeed = kNoToken;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool remove_extra_whitespaces = false;
  bool clean_spaces = false;  // clean up tokenization spaces on decode (BPE/WPM)
  // Per token, llama.cpp's LSTRIP / RSTRIP attributes (whitespace next to a special token is
  // dropped when it is split out). Empty -> none. Set by name-based quirks (phi-3, jina).
  static constexpr uint8_t kLstrip = 1, kRstrip = 2;
  std::vector<uint8_t> strip;

  std::unordered_map<std::string, TokenId> token_to_id;  // filled by index()

  size_t size() const { return tokens.size(); }
  TokenType type(TokenId id) const;
  float score(TokenId id) const;
  uint8_t strip_flags(TokenId id) const { return strip.empty() ? 0 : strip[static_cast<size_t>(id)]; }
  TokenId find(std::string_view text) const;  // kNoToken when absent
  void index();  // builds token_to_id; validates ids (throws okapi::Error naming the key)

  // Reads tokenizer.ggml.* with llama.cpp's defaults per model kind. Throws okapi::Error.
  static Vocab from_gguf(const gguf::File& file);
  // llama2.c tokenizer.bin: SPM with scores; <unk>=0, <s>=1, </s>=2, <0xNN> byte tokens.
  static Vocab from_llama2c(const std::filesystem::path& tokenizer_bin);
};

}  // namespace okapi::tokenizer
