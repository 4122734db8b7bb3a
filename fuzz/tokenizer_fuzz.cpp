// libFuzzer target for the tokenizers: encode any bytes with every vocabulary at hand, in every
// mode, then decode. Nothing may crash or read out of bounds, ids must be in range, and for the
// SPM vocabularies (byte fallback) plain-mode decoding must give the input back exactly where
// llama.cpp (c392e509) does so too. What llama.cpp guarantees, and so what is checked:
//  - ' ' and U+2581 both come back as a space, so inputs holding either are not compared.
//  - User-defined tokens are split out even in plain mode, and every raw fragment after one gets
//    its own U+2581 prefix (llama_tokenize_impl's is_prev_special), which detokenize keeps (only
//    the first piece loses its space); phi-3's RSTRIP also drops whitespace after them. Control
//    tokens built by SPM merges render as nothing without `special`. So the exact round trip is
//    required only when every id is a normal or byte token; with user-defined tokens, and no
//    whitespace and no control tokens, the decoded text must be the input plus spaces only.
//
// Input: byte 0 picks the vocabulary, byte 1 the mode (bit 0 add_special, bit 1 parse_special,
// bit 2 decode with special pieces), the rest is the text.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace okapi::tokenizer;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what.c_str());
  std::abort();
}

std::vector<std::unique_ptr<Tokenizer>> load_all() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  const fs::path repo = OKAPI_FUZZ_REPO_DIR;
  std::vector<fs::path> files = {repo / "tests/data/vocab/ggml-vocab-llama-spm.gguf", repo / "models/stories260K.gguf"};
  const fs::path shared = fs::path(OKAPI_DEFAULT_SHARED_DIR) / "vocab";
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-falcon.gguf", "ggml-vocab-deepseek-coder.gguf",
                           "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-bert-bge.gguf", "ggml-vocab-phi-3.gguf"}) {
    if (fs::exists(shared / name)) files.push_back(shared / name);
  }
  for (const auto& path : files) {
    try {
      out.push_back(std::make_unique<Tokenizer>(Vocab::from_gguf(okapi::gguf::File::open(path))));
    } catch (const okapi::Error& e) {
      std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", path.c_str(), e.what());
    }
  }
  if (out.empty()) fail("no vocabulary could be loaded");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizers = load_all();
  if (size < 2) return 0;
  const Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  const uint8_t mode = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const EncodeOptions options{.add_special = (mode & 1) != 0, .parse_special = (mode & 2) != 0};

  std::vector<TokenId> ids;
  try {
    ids = tok.encode(text, options);
  } catch (const okapi::Error&) {
    return 0;  // e.g. a vocabulary without the BOS it asks for
  }
  for (TokenId id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tok.vocab().size()) fail("id out of range");
  }
  const bool special = (mode & 4) != 0;
  const std::string decoded = tok.decode(ids, special);
  StreamDecoder stream(tok, special);
  std::string streamed;
  for (TokenId id : ids) streamed += stream.push(id);
  streamed += stream.flush();

  const bool spm_plain = tok.vocab().kind == ModelKind::SPM && options.add_special == false && !options.parse_special;
  const bool ambiguous = text.find(' ') != std::string_view::npos || text.find("\xE2\x96\x81") != std::string_view::npos;
  if (!spm_plain || ambiguous) return 0;
  const auto all_of_type = [&](std::initializer_list<TokenType> allowed) {
    return std::all_of(ids.begin(), ids.end(), [&](TokenId id) {
      return std::find(allowed.begin(), allowed.end(), tok.vocab().type(id)) != allowed.end();
    });
  };
  if (all_of_type({TokenType::Normal, TokenType::Byte})) {
    if (decoded != text) fail("SPM round trip lost bytes");
  } else if (all_of_type({TokenType::Normal, TokenType::Byte, TokenType::UserDefined}) &&
             text.find_first_of("\t\n\v\f\r") == std::string_view::npos) {
    std::string unspaced = decoded;
    std::erase(unspaced, ' ');
    if (unspaced != text) fail("SPM round trip with user-defined tokens changed more than spaces");
  }
  return 0;
}
