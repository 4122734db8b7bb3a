#include "tokenizer/unicode.hpp"

#include <fmt/format.h>

#include <array>

namespace okapi::tokenizer {
namespace {

bool is_continuation(std::string_view text, size_t pos) {
  return pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80;
}

// Decodes the sequence at `pos`; returns its length, or 0 when it is not a complete sequence.
size_t decode_one(std::string_view text, size_t pos, uint32_t& cpt) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  auto cont = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[pos + i]) & 0x3F); };
  if (lead < 0x80) {
    cpt = lead;
    return 1;
  }
  if ((lead & 0xE0) == 0xC0) {
    if (!is_continuation(text, pos + 1)) return 0;
    cpt = ((lead & 0x1Fu) << 6) | cont(1);
    return 2;
  }
  if ((lead & 0xF0) == 0xE0) {
    if (!is_continuation(text, pos + 1) || !is_continuation(text, pos + 2)) return 0;
    cpt = ((lead & 0x0Fu) << 12) | (cont(1) << 6) | cont(2);
    return 3;
  }
  if ((lead & 0xF8) == 0xF0) {
    if (!is_continuation(text, pos + 1) || !is_continuation(text, pos + 2) || !is_continuation(text, pos + 3)) return 0;
    cpt = ((lead & 0x07u) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    return cpt > 0x10FFFF ? 0 : 4;
  }
  return 0;  // a continuation byte or 0xF8..0xFF where a sequence should start
}

// bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in order.
struct ByteMap {
  std::array<uint32_t, 256> byte_to_cpt{};
  std::array<int16_t, 324> cpt_to_byte{};  // every mapped codepoint is below 0x144
  ByteMap() {
    cpt_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cpt[b] = printable ? b : next++;
      cpt_to_byte[byte_to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::vector<uint32_t> utf8_to_codepoints(std::string_view text, std::vector<size_t>& offsets) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  offsets.clear();
  offsets.reserve(text.size() + 1);
  size_t pos = 0;
  while (pos < text.size()) {
    offsets.push_back(pos);
    uint32_t cpt = 0;
    const size_t len = decode_one(text, pos, cpt);
    cpts.push_back(len == 0 ? kReplacementChar : cpt);
    pos += len == 0 ? 1 : len;
  }
  offsets.push_back(pos);
  return cpts;
}

std::vector<uint32_t> utf8_to_codepoints(std::string_view text) {
  std::vector<size_t> offsets;
  return utf8_to_codepoints(text, offsets);
}

void append_utf8(std::string& out, uint32_t cpt) {
  auto put = [&](uint32_t v) { out.push_back(static_cast<char>(static_cast<uint8_t>(v))); };
  if (cpt < 0x80) {
    put(cpt);
  } else if (cpt < 0x800) {
    put(0xC0 | (cpt >> 6));
    put(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    put(0xE0 | (cpt >> 12));
    put(0x80 | ((cpt >> 6) & 0x3F));
    put(0x80 | (cpt & 0x3F));
  } else {
    put(0xF0 | (cpt >> 18));
    put(0x80 | ((cpt >> 12) & 0x3F));
    put(0x80 | ((cpt >> 6) & 0x3F));
    put(0x80 | (cpt & 0x3F));
  }
}

std::string codepoints_to_utf8(const uint32_t* cpts, size_t count) {
  std::string out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) append_utf8(out, cpts[i]);
  return out;
}

size_t utf8_sequence_length(char lead) {
  static constexpr std::array<size_t, 16> kLengths = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[static_cast<uint8_t>(lead) >> 4];
}

bool is_unicode_whitespace(uint32_t cpt) {
  if (cpt < 0x80) return (cpt >= 0x09 && cpt <= 0x0D) || cpt == 0x20;
  switch (cpt) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cpt >= 0x2000 && cpt <= 0x200A;
  }
}

std::string bpe_byte_encode(std::string_view bytes) {
  const auto& map = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, map.byte_to_cpt[static_cast<uint8_t>(c)]);
  return out;
}

std::string bpe_byte_decode(std::string_view token_text) {
  const auto& map = byte_map();
  std::vector<size_t> offsets;
  const auto cpts = utf8_to_codepoints(token_text, offsets);
  std::string out;
  out.reserve(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) {
    const int16_t byte = cpts[i] < map.cpt_to_byte.size() ? map.cpt_to_byte[cpts[i]] : int16_t{-1};
    if (byte >= 0) {
      out.push_back(static_cast<char>(static_cast<uint8_t>(byte)));
      continue;
    }
    // llama.cpp's llama_decode_text marks an unmappable codepoint this way (its bytes in hex,
    // then the whole token text).
    std::string utf8;
    append_utf8(utf8, cpts[i]);
    out += "[UNK_BYTE_0x";
    for (const char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
    out.append(token_text);
    out += "]";
  }
  return out;
}

}  // namespace okapi::tokenizer
