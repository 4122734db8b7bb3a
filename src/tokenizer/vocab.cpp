// Vocabulary loading with llama.cpp's defaults (llama_vocab::impl::load at c392e509): the model
// kind decides the default special ids and flags, the GGUF keys override them, and a few
// name-based quirks (EOT/FIM texts forced to control, phi-3 rstrip) are applied the same way.
#include "tokenizer/vocab.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>

#include "core/error.hpp"
#include "format/gguf.hpp"
#include "format/llama2c.hpp"

namespace okapi::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Flags that depend on the BPE pre-tokenizer family (the rest keep the BPE defaults).
void apply_bpe_pre_defaults(Vocab& v) {
  v.add_space_prefix = false;
  v.clean_spaces = true;
  const std::string& pre = v.pre;
  auto is = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), pre) != names.end();
  };
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
    v.add_bos = true;
  } else if (is({"tekken", "chameleon"})) {
    v.add_bos = true;
    v.clean_spaces = false;
  } else if (is({"deepseek-llm", "deepseek-coder", "deepseek-v3", "command-r", "qwen2", "poro-chat",
                 "viking", "smollm", "megrez"})) {
    v.clean_spaces = false;
  } else if (pre == "chatglm-bpe") {
    v.bos = kNoToken;
  }
}

void set_defaults_for_kind(Vocab& v) {
  if (v.model_name == "llama") {
    v.kind = ModelKind::SPM;
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = true, v.clean_spaces = false, v.add_bos = true, v.add_eos = false;
  } else if (v.model_name == "gpt2") {
    v.kind = ModelKind::BPE;
    v.bos = 11, v.eos = 11;
    apply_bpe_pre_defaults(v);
  } else if (v.model_name == "bert") {
    v.kind = ModelKind::WPM;
    v.bos = 101, v.unk = 100, v.sep = 102, v.pad = 0, v.mask = 103;
    v.add_space_prefix = false, v.clean_spaces = true, v.add_bos = true, v.add_eos = false;
  } else {
    throw_error("tokenizer.ggml.model: unsupported tokenizer model '{}' (expected llama, gpt2 or bert)",
                v.model_name);
  }
}

// tokenizer.ggml.merges: "left right", split at the first space (llama.cpp does the same; the
// byte-level alphabet has no plain spaces, so the split is unambiguous).
std::pair<std::string, std::string> parse_merge(const std::string& line, size_t index) {
  const size_t space = line.find(' ', 1);
  if (space == std::string::npos) {
    throw_error("tokenizer.ggml.merges[{}]: '{}' is not of the form 'left right'", index, line);
  }
  return {line.substr(0, space), line.substr(space + 1)};
}

void read_special_id(const gguf::File& file, std::string_view key, size_t n_tokens, TokenId& id) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) return;
  const int64_t v = value->as_int();
  // llama.cpp warns and keeps the default for an id outside the vocabulary.
  if (v >= 0 && static_cast<uint64_t>(v) < n_tokens) id = static_cast<TokenId>(v);
}

void read_flag(const gguf::File& file, std::string_view key, bool& flag) {
  if (const gguf::Value* value = file.find(key)) flag = value->as_bool();
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// llama.cpp finds EOT/EOM/FIM tokens by their text when no id is given, and forces them to be
// control tokens (so they are matched only with parse_special).
void force_control_by_text(Vocab& v) {
  auto force = [&](TokenId& id, std::initializer_list<std::string_view> texts) {
    if (id != kNoToken) return;
    for (std::string_view text : texts) {
      const TokenId found = v.find(text);
      if (found == kNoToken) continue;
      id = found;
      v.types[static_cast<size_t>(found)] = TokenType::Control;
      return;
    }
  };
  force(v.eot, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
                "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"});
}

void apply_name_quirks(Vocab& v, const std::string& general_name) {
  const std::string name = lowercase(general_name);
  auto set_strip = [&](TokenId id, uint8_t flag, bool on) {
    if (id == kNoToken) return;
    if (v.strip.empty()) v.strip.assign(v.size(), 0);
    auto& s = v.strip[static_cast<size_t>(id)];
    s = static_cast<uint8_t>(on ? (s | flag) : (s & ~flag));
  };
  if (v.pre == "jina-v2-de" || v.pre == "jina-v2-es" || v.pre == "jina-v2-code") {
    set_strip(v.find("<mask>"), Vocab::kLstrip, true);
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (size_t id = 0; id < v.size(); ++id) {
      const TokenType t = v.types[id];
      if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) {
        set_strip(static_cast<TokenId>(id), Vocab::kRstrip, true);
      }
    }
    set_strip(v.find("</s>"), Vocab::kRstrip, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      set_strip(v.find(text), Vocab::kRstrip, false);
    }
  }
}

TokenId first_token_of(const Vocab& v, std::initializer_list<std::string_view> texts) {
  for (std::string_view t : texts) {
    if (TokenId id = v.find(t); id != kNoToken) return id;
  }
  return kNoToken;
}

}  // namespace

TokenType Vocab::type(TokenId id) const {
  return types.empty() ? TokenType::Normal : types[static_cast<size_t>(id)];
}

float Vocab::score(TokenId id) const { return scores.empty() ? 0.0f : scores[static_cast<size_t>(id)]; }

TokenId Vocab::find(std::string_view text) const {
  const auto it = token_to_id.find(std::string(text));
  return it == token_to_id.end() ? kNoToken : it->second;
}

void Vocab::index() {
  if (tokens.empty()) throw_error("tokenizer.ggml.tokens: the vocabulary is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw_error("tokenizer.ggml.tokens: {} tokens is more than token ids can hold", tokens.size());
  }
  if (!scores.empty() && scores.size() != tokens.size()) {
    throw_error("tokenizer.ggml.scores: {} scores for {} tokens", scores.size(), tokens.size());
  }
  if (!types.empty() && types.size() != tokens.size()) {
    throw_error("tokenizer.ggml.token_type: {} types for {} tokens", types.size(), tokens.size());
  }
  if (!strip.empty() && strip.size() != tokens.size()) {
    throw_error("token strip flags: {} entries for {} tokens", strip.size(), tokens.size());
  }
  const std::pair<const char*, TokenId> ids[] = {
      {"bos", bos}, {"eos", eos}, {"eot", eot}, {"unk", unk}, {"pad", pad},
      {"sep", sep}, {"cls", cls}, {"mask", mask}, {"linefeed", linefeed},
  };
  for (const auto& [name, id] : ids) {
    if (id != kNoToken && (id < 0 || static_cast<size_t>(id) >= tokens.size())) {
      throw_error("special token {}: id {} is outside the vocabulary of {} tokens", name, id, tokens.size());
    }
  }
  token_to_id.clear();
  token_to_id.reserve(tokens.size());
  // Duplicate texts: the last one wins, as in llama.cpp (token_to_id[text] = id in order).
  for (size_t i = 0; i < tokens.size(); ++i) token_to_id[tokens[i]] = static_cast<TokenId>(i);
}

Vocab Vocab::from_gguf(const gguf::File& file) {
  Vocab v;
  v.model_name = file.at("tokenizer.ggml.model").as_string();
  if (const gguf::Value* pre = file.find("tokenizer.ggml.pre")) v.pre = pre->as_string();
  if (v.pre.empty()) v.pre = "default";
  set_defaults_for_kind(v);
  read_flag(file, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  read_flag(file, "tokenizer.ggml.remove_extra_whitespaces", v.remove_extra_whitespaces);

  v.tokens = file.at("tokenizer.ggml.tokens").as_string_array();
  const size_t n = v.tokens.size();
  if (const gguf::Value* scores = file.find("tokenizer.ggml.scores")) {
    v.scores = scores->as_float_array();
    if (v.scores.size() != n) {
      throw_error("tokenizer.ggml.scores: {} scores for {} tokens", v.scores.size(), n);
    }
  }
  v.types.assign(n, TokenType::Normal);
  if (const gguf::Value* types = file.find("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> raw = types->as_int_array();
    if (raw.size() != n) throw_error("tokenizer.ggml.token_type: {} types for {} tokens", raw.size(), n);
    for (size_t i = 0; i < n; ++i) {
      // Unknown type values are treated as normal tokens, as llama.cpp does.
      v.types[i] = (raw[i] >= 0 && raw[i] <= 6) ? static_cast<TokenType>(raw[i]) : TokenType::Normal;
    }
  }
  if (v.kind == ModelKind::BPE) {
    const gguf::Value* merges = file.find("tokenizer.ggml.merges");
    if (merges == nullptr) throw_error("tokenizer.ggml.merges: missing (required for a gpt2 tokenizer)");
    const std::vector<std::string> lines = merges->as_string_array();
    v.merges.reserve(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) v.merges.push_back(parse_merge(lines[i], i));
  }

  read_special_id(file, "tokenizer.ggml.bos_token_id", n, v.bos);
  read_special_id(file, "tokenizer.ggml.eos_token_id", n, v.eos);
  read_special_id(file, "tokenizer.ggml.eot_token_id", n, v.eot);
  read_special_id(file, "tokenizer.ggml.unknown_token_id", n, v.unk);
  read_special_id(file, "tokenizer.ggml.seperator_token_id", n, v.sep);
  read_special_id(file, "tokenizer.ggml.padding_token_id", n, v.pad);
  read_special_id(file, "tokenizer.ggml.cls_token_id", n, v.cls);
  read_special_id(file, "tokenizer.ggml.mask_token_id", n, v.mask);
  // Defaults that point outside a small vocabulary are dropped rather than rejected.
  for (TokenId* id : {&v.bos, &v.eos, &v.unk, &v.sep, &v.pad, &v.mask}) {
    if (*id != kNoToken && static_cast<size_t>(*id) >= n) *id = kNoToken;
  }
  read_flag(file, "tokenizer.ggml.add_bos_token", v.add_bos);
  read_flag(file, "tokenizer.ggml.add_eos_token", v.add_eos);

  v.index();
  force_control_by_text(v);
  if (v.kind == ModelKind::SPM) v.linefeed = first_token_of(v, {"<0x0A>", "\n"});
  std::string general_name;
  if (const gguf::Value* name = file.find("general.name"); name != nullptr && name->is_string()) {
    general_name = name->as_string();
  }
  apply_name_quirks(v, general_name);
  return v;
}

Vocab Vocab::from_llama2c(const std::filesystem::path& tokenizer_bin) {
  const llama2c::Tokenizer bin = llama2c::open_tokenizer(tokenizer_bin);
  Vocab v;
  v.model_name = "llama";
  v.pre = "default";
  set_defaults_for_kind(v);
  v.tokens.reserve(bin.tokens.size());
  v.scores.reserve(bin.tokens.size());
  v.types.reserve(bin.tokens.size());
  for (size_t i = 0; i < bin.tokens.size(); ++i) {
    // llama2.c stores SentencePiece's U+2581 as a plain space; convert_llama2c_to_ggml maps it back
    // and types the tokens as below.
    std::string text;
    for (char c : bin.tokens[i].text) {
      if (c == ' ') text += kSpace; else text += c;
    }
    // llama2.c spells <s> and </s> as "\n<s>\n" and "\n</s>\n"; llama.cpp's converter renames
    // the first three tokens.
    TokenType type = TokenType::Normal;
    if (i == 0) type = TokenType::Unknown, text = "<unk>";
    else if (i == 1) type = TokenType::Control, text = "<s>";
    else if (i == 2) type = TokenType::Control, text = "</s>";
    else if (text.empty()) type = TokenType::Control;
    else if (text.size() == 6 && text.starts_with("<0x") && text.ends_with(">")) type = TokenType::Byte;
    v.tokens.push_back(std::move(text));
    v.scores.push_back(bin.tokens[i].score);
    v.types.push_back(type);
  }
  if (v.tokens.size() < 3) throw_error("{}: a llama2.c tokenizer needs at least 3 tokens, found {}",
                                       tokenizer_bin.string(), v.tokens.size());
  v.index();
  v.linefeed = first_token_of(v, {"<0x0A>", "\n"});
  return v;
}

}  // namespace okapi::tokenizer
