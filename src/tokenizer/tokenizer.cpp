// The algorithm-independent half of llama.cpp's llama_vocab::impl (c392e509): special-token
// partitioning (tokenizer_st_partition), BOS/EOS, SPM's space prefix, token_to_piece and
// detokenize, plus streaming detokenization.
#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/error.hpp"

namespace okapi::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// A piece of the input: raw text still to be tokenized, or a special token already found.
struct Fragment {
  TokenId token = kNoToken;  // kNoToken: raw text
  size_t offset = 0;
  size_t length = 0;
};

bool is_c_space(char c) {  // isspace() in the "C" locale, as llama.cpp's strip rules use
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Whether [begin, end) touches none of `plain` (sorted, disjoint byte ranges).
bool outside(const Ranges& plain, size_t begin, size_t end) {
  const auto it = std::upper_bound(plain.begin(), plain.end(), begin,
                                   [](size_t b, const std::pair<size_t, size_t>& r) { return b < r.second; });
  return it == plain.end() || it->first >= end;
}

// Splits every raw fragment at each occurrence of one special token's text, left to right,
// applying its lstrip/rstrip attributes to the neighbouring text. An occurrence that touches a
// `plain` range (text in which this token must not be recognised) stays text.
std::vector<Fragment> split_on(std::string_view text, const std::vector<Fragment>& fragments,
                               TokenId id, std::string_view token_text, uint8_t strip, const Ranges* plain) {
  std::vector<Fragment> out;
  out.reserve(fragments.size());
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f);
      continue;
    }
    size_t base = f.offset;
    size_t length = f.length;
    size_t search = base;
    while (true) {
      const size_t match = text.substr(0, base + length).find(token_text, search);
      if (match == std::string_view::npos) {
        if (length > 0) out.push_back(Fragment{kNoToken, base, length});
        break;
      }
      if (plain != nullptr && !outside(*plain, match, match + token_text.size())) {
        search = match + 1;
        continue;
      }
      size_t left_length = match - base;
      if (strip & Vocab::kLstrip) {
        while (left_length > 0 && is_c_space(text[base + left_length - 1])) --left_length;
      }
      if (left_length > 0) out.push_back(Fragment{kNoToken, base, left_length});
      out.push_back(Fragment{id, 0, 0});
      size_t right = match + token_text.size();
      size_t right_length = base + length - right;
      if (strip & Vocab::kRstrip) {
        while (right_length > 0 && is_c_space(text[right])) ++right, --right_length;
      }
      base = right;
      length = right_length;
      search = base;
      if (length == 0) break;
    }
  }
  return out;
}

bool is_control_like(TokenType t) { return t == TokenType::Control || t == TokenType::Unknown; }

// GPT-2's byte-level alphabet backwards: the code point that stands for each byte.
const std::array<uint32_t, 256>& byte_to_codepoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// Decodes one UTF-8 sequence at `i` (advancing it); invalid input yields U+FFFD and one byte.
uint32_t next_codepoint(std::string_view s, size_t& i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? c : (c & (0x7Fu >> n));
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  i += n;
  return cp;
}

std::string codepoint_to_utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// llama.cpp's llama_decode_text: byte-level BPE text back to bytes. A code point outside the
// byte alphabet is spelled "[UNK_BYTE_0x..<text>]" exactly as llama.cpp does.
std::string byte_level_decode(std::string_view text) {
  static const std::vector<int> codepoint_to_byte = [] {
    std::vector<int> t(324, -1);
    for (uint32_t b = 0; b < 256; ++b) t[byte_to_codepoint()[b]] = static_cast<int>(b);
    return t;
  }();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = next_codepoint(text, i);
    if (cp < codepoint_to_byte.size() && codepoint_to_byte[cp] >= 0) {
      out += static_cast<char>(codepoint_to_byte[cp]);
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (unsigned char c : codepoint_to_utf8(cp)) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
    out += text;
    out += ']';
  }
  return out;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpace.size()) == kSpace) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') out += kSpace; else out += c;
  }
  return out;
}

// llama.cpp's clean_spaces passes of detokenize: " ?" " !" " ." " ," lose their space, and so do
// " 's" " 'm" " 're" " 've".
std::string clean_up_spaces(const std::string& text) {
  std::string a;
  a.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char x = text[i];
    if (i > 0 && text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && a[i - 1] == ' ' && x == '\'' && i + 1 < a.size()) {
      const char x1 = a[i + 1];
      const char x2 = i + 2 < a.size() ? a[i + 2] : '\0';
      const bool drop = x1 == 's' || x1 == 'm' ||
                        (i + 2 < a.size() && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')));
      if (drop && !b.empty()) b.pop_back();
    }
    b += x;
  }
  return b;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xNN>" token; a byte-typed token spelled otherwise renders as nothing.
std::string byte_piece(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return {};
  const int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
  if (hi < 0 || lo < 0) return {};
  return std::string(1, static_cast<char>(hi * 16 + lo));
}

// Bytes at the end of `s` that start a UTF-8 character not yet complete.
size_t incomplete_tail(std::string_view s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::make_unique<Vocab>(std::move(vocab))) {
  Vocab& v = *vocab_;
  if (v.token_to_id.size() == 0) v.index();
  switch (v.kind) {
    case ModelKind::SPM: session_ = make_spm_session(v); break;
    case ModelKind::BPE: session_ = make_bpe_session(v); break;
    case ModelKind::WPM: session_ = make_wpm_session(v); break;
  }
  // A token's text is at least as long as the input it covers (SPM writes a space as 3-byte U+2581
  // and a byte as <0xNN>; byte-level BPE maps a byte to 1-2 bytes), unless input is normalized away.
  if (v.kind != ModelKind::WPM && !v.remove_extra_whitespaces && v.strip.empty()) {
    for (const std::string& text : v.tokens) max_bytes_per_token_ = std::max(max_bytes_per_token_, text.size());
    max_bytes_per_token_ = std::max<size_t>(max_bytes_per_token_, 4);  // an unknown character
  }
  // llama.cpp's cache_special_tokens: every control, user-defined and unknown token, longest text
  // first (ties by id; llama.cpp's std::sort leaves them unspecified).
  for (size_t id = 0; id < v.size(); ++id) {
    const TokenType t = v.type(static_cast<TokenId>(id));
    if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
      special_tokens_.push_back(static_cast<TokenId>(id));
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](TokenId a, TokenId b) {
    return v.tokens[static_cast<size_t>(a)].size() > v.tokens[static_cast<size_t>(b)].size();
  });
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  return encode_text(text, nullptr, options);
}

std::vector<TokenId> Tokenizer::encode(std::span<const TextPiece> pieces, const EncodeOptions& options) const {
  std::string text;
  Ranges plain;
  for (const TextPiece& piece : pieces) {
    if (!piece.parse_special && !piece.text.empty()) {
      if (!plain.empty() && plain.back().second == text.size()) {
        plain.back().second += piece.text.size();
      } else {
        plain.emplace_back(text.size(), text.size() + piece.text.size());
      }
    }
    text += piece.text;
  }
  return encode_text(text, &plain, options);
}

std::vector<TokenId> Tokenizer::encode_text(std::string_view text, const std::vector<std::pair<size_t, size_t>>* plain,
                                            const EncodeOptions& options) const {
  const Vocab& v = *vocab_;
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back(Fragment{kNoToken, 0, text.size()});
  for (TokenId id : special_tokens_) {
    // Without parse_special only user-defined tokens are split out (as Hugging Face does); so it is
    // in plain pieces, where user-defined tokens are split out as in any text.
    const bool control = is_control_like(v.type(id));
    if (!options.parse_special && control) continue;
    const std::string& token_text = v.tokens[static_cast<size_t>(id)];
    if (token_text.empty()) continue;  // would match everywhere (llama.cpp loops forever)
    fragments = split_on(text, fragments, id, token_text, v.strip_flags(id), control ? plain : nullptr);
  }

  std::vector<TokenId> out;
  const auto require = [](TokenId id, const char* what) {
    if (id == kNoToken) throw_error("tokenize: the vocabulary has no {} token to add", what);
    return id;
  };
  const bool bos = options.add_special && v.add_bos;
  const bool eos = options.add_special && v.add_eos;
  if (v.kind == ModelKind::WPM) {
    if (options.add_special) out.push_back(require(v.cls != kNoToken ? v.cls : v.bos, "CLS"));
  } else if (bos) {
    out.push_back(require(v.bos, "BOS"));
  }

  bool previous_special = true;  // SPM: the first text fragment gets the space prefix
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      previous_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.offset, f.length);
    if (v.kind == ModelKind::SPM) {
      std::string escaped = (v.add_space_prefix && previous_special) ? std::string(kSpace) : std::string();
      escaped += escape_spaces(raw);
      session_->encode_fragment(escaped, out);
    } else {
      session_->encode_fragment(raw, out);
    }
    previous_special = false;
  }

  if (v.kind == ModelKind::WPM) {
    if (options.add_special) out.push_back(require(v.sep, "SEP"));
  } else if (eos) {
    out.push_back(require(v.eos, "EOS"));
  }
  return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool special) const {
  const Vocab& v = *vocab_;
  if (id < 0 || static_cast<size_t>(id) >= v.size()) return {};
  const TokenType type = v.type(id);
  const bool control_like = is_control_like(type);
  if (!special && control_like) return {};
  const std::string& text = v.tokens[static_cast<size_t>(id)];
  // Unsupported types (unused, undefined) render as nothing, like control tokens.
  if (control_like || type == TokenType::UserDefined) return text;
  if (v.kind == ModelKind::BPE) return type == TokenType::Normal ? byte_level_decode(text) : std::string();
  if (type == TokenType::Normal) return unescape_spaces(text);
  if (type == TokenType::Byte) return byte_piece(text);
  return {};
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool special) const {
  const Vocab& v = *vocab_;
  std::string out;
  bool strip_space = v.add_space_prefix;  // applies to the first piece only
  for (TokenId id : ids) {
    std::string piece = token_to_piece(id, special);
    if (strip_space && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    strip_space = false;
    out += piece;
  }
  return v.clean_spaces ? clean_up_spaces(out) : out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool special) : tokenizer_(tokenizer), special_(special) {}

std::string StreamDecoder::push(TokenId id) {
  pending_ += tokenizer_.token_to_piece(id, special_);
  const size_t keep = incomplete_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace okapi::tokenizer
