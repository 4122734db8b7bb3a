#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.hpp"

#include <pcre2.h>

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi::tokenizer {
namespace {

// The regexes below are those of llama.cpp's llm_tokenizer_bpe constructor (commit c392e509). Where
// llama.cpp adapted a tokenizer.json regex for std::regex (no \p{Lu}, no (?i:...)), the adapted
// form is kept because it is what llama.cpp actually runs.
const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kPoro = " ?[^(\\s|.,!?…。，、।۔،)]+";
// Upper/lower case classes written with lookaheads, as llama.cpp does for std::regex.
const char* const kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+"
    "((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL]"
    "[lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV]"
    "[eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kCjk = "[一-龥ࠀ-一가-퟿]+";

struct FamilyEntry {
  std::vector<std::string_view> names;
  PreTokenizerFamily family;
};

const std::vector<FamilyEntry>& families() {
  static const std::vector<FamilyEntry> table = {
      {{"default", ""}, {{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {{kLlama3}, true}},
      {{"dbrx", "smaug-bpe", "chatglm-bpe"}, {{kLlama3}, false}},
      {{"deepseek-llm"},
       {{"[\r\n]",
         "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
         "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", kCjk, "\\p{N}+"},
        false}},
      {{"deepseek-v3"},
       {{"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
         "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+"
         "[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
        false}},
      {{"deepseek-coder"}, {{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}, false}},
      {{"falcon"}, {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {{"\\p{N}", kGpt2}, false}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
        "roberta-bpe", "mpt", "olmo", "jais"},
       {{kGpt2}, false}},
      {{"stablelm2", "qwen2", "deepseek-r1-qwen", "megrez"}, {{kQwen2}, false}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {{kPoro}, false}},
      {{"viking"}, {{kPoro, "\\p{N}"}, false}},
      {{"tekken"}, {{kTekken}, true}},
      {{"chameleon"},
       {{"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
         "[\\p{P}!-/:-@\\[-`{-~]", kGpt2},
        false}},
      {{"gpt-4o"}, {{kGpt4o}, false}},
  };
  return table;
}

// llama.cpp hands std::regex a copy of the text in which every non-ASCII whitespace codepoint is
// U+000B, so \s means exactly its whitespace set (including U+0085, which PCRE2's \s lacks) and an
// explicit class never matches such a codepoint. Surrogates (which llama.cpp decodes as written) are
// not valid UTF-8 for PCRE2; they belong to no category the regexes name, like U+E000.
uint32_t codepoint_for_matching(uint32_t cpt) {
  if (cpt >= 0x80 && is_unicode_whitespace(cpt)) return 0x0B;
  if (cpt >= 0xD800 && cpt <= 0xDFFF) return 0xE000;
  return cpt;
}

}  // namespace

PreTokenizerFamily pre_tokenizer_family(std::string_view pre) {
  for (const auto& entry : families()) {
    if (std::find(entry.names.begin(), entry.names.end(), pre) != entry.names.end()) return entry.family;
  }
  throw_error("tokenizer.ggml.pre: unknown pre-tokenizer type '{}'", pre);
}

std::vector<std::string> known_pre_tokenizers() {
  std::vector<std::string> names;
  for (const auto& entry : families()) names.insert(names.end(), entry.names.begin(), entry.names.end());
  return names;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::vector<std::string> regexes) {
  for (const auto& regex : regexes) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error_code, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      throw_error("pre-tokenizer regex '{}': {} at offset {}", regex, reinterpret_cast<const char*>(message),
                  error_offset);
    }
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
    compiled_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = utf8_to_codepoints(text);
  if (cpts.empty()) return {};

  // The text the regexes see, and where each codepoint starts in it.
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<size_t> starts(cpts.size() + 1);
  for (size_t i = 0; i < cpts.size(); ++i) {
    starts[i] = subject.size();
    append_utf8(subject, codepoint_for_matching(cpts[i]));
  }
  starts[cpts.size()] = subject.size();
  auto cpt_index = [&](size_t byte) {
    return static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), byte) - starts.begin());
  };

  // Pieces as codepoint counts, in order; every regex refines each piece on its own, so lookaheads
  // and anchors see the piece's ends as the text's ends (as std::regex over a sub-range does).
  std::vector<size_t> pieces = {cpts.size()};
  for (const auto& compiled : compiled_) {
    const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
        pcre2_match_data_create_from_pattern(compiled->code, nullptr), &pcre2_match_data_free);
    pcre2_match_data* match = match_data.get();
    if (match == nullptr) throw_error("pre-tokenizer: out of memory for PCRE2 match data");
    std::vector<size_t> refined;
    refined.reserve(pieces.size());
    size_t piece_start = 0;
    for (const size_t piece_length : pieces) {
      const size_t first = starts[piece_start];
      const size_t length = starts[piece_start + piece_length] - first;
      const auto* piece = reinterpret_cast<PCRE2_SPTR>(subject.data() + first);
      size_t done = 0;  // bytes of the piece already emitted
      size_t search = 0;
      uint32_t options = PCRE2_NO_UTF_CHECK;
      while (search <= length) {
        const int rc = pcre2_match(compiled->code, piece, length, search, options, match, nullptr);
        if (rc < 0) {
          if (options & PCRE2_ANCHORED) {  // no non-empty match here: move on one codepoint
            options = PCRE2_NO_UTF_CHECK;
            if (search == length) break;
            search = starts[cpt_index(first + search) + 1] - first;
            continue;
          }
          if (rc != PCRE2_ERROR_NOMATCH) throw_error("pre-tokenizer: PCRE2 match failed with code {}", rc);
          break;
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        // The gap before a match is a piece even when the match is empty (std::regex_iterator
        // reports empty matches; llama.cpp keeps the gaps they delimit and drops empty words).
        if (begin > done) refined.push_back(cpt_index(first + begin) - cpt_index(first + done));
        if (end > begin) refined.push_back(cpt_index(first + end) - cpt_index(first + begin));
        done = end;
        search = end;
        // After an empty match, try a non-empty one at the same place (as std::regex_iterator).
        options = end == begin ? (PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : PCRE2_NO_UTF_CHECK;
      }
      if (done < length) refined.push_back(cpt_index(first + length) - cpt_index(first + done));
      piece_start += piece_length;
    }
    pieces = std::move(refined);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (const size_t length : pieces) {
    words.push_back(codepoints_to_utf8(cpts.data() + start, length));
    start += length;
  }
  return words;
}

}  // namespace okapi::tokenizer
