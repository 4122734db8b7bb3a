#include "runtime/slot_file.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>

#include "core/error.hpp"

namespace okapi::runtime {

namespace {

constexpr uint32_t kMagic = 0x4c534b4fu;  // "OKSL" in the file's (little-endian) byte order
constexpr uint32_t kVersion = 1;
constexpr uint32_t kTokenNull = 0xffffffffu;  // llama-server's LLAMA_TOKEN_NULL: the packed form follows
constexpr uint32_t kTokensStateVersion = 1;   // llama-server's SERVER_TOKENS_STATE_VERSION
constexpr std::string_view kKvTag = "okapi-kv";
constexpr uint32_t kKvVersion = 1;

uint64_t fnv1a(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads a slot file's bytes in order; every read is checked against what is left.
class Reader {
 public:
  Reader(std::string_view bytes, const std::filesystem::path& path) : bytes_(bytes), path_(path) {}
  template <typename T>
  T get(std::string_view what) {
    T value{};
    std::memcpy(&value, take(sizeof(T), what).data(), sizeof(T));
    return value;
  }
  std::string_view take(uint64_t n, std::string_view what) {
    if (n > bytes_.size() - at_)
      throw_error("slot file {}: it ends early ({} needs {} bytes, {} are left): truncated or not a slot file",
                  path_.filename().string(), what, n, bytes_.size() - at_);
    const std::string_view out = bytes_.substr(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return out;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  std::string_view bytes_;
  const std::filesystem::path& path_;
  size_t at_ = 0;
};

struct Identity {
  uint64_t fingerprint;
  int64_t n_layer, n_head_kv, head_dim_k, head_dim_v, n_vocab;
};

Identity identity_of(const kv::KvStore& kv, uint64_t fingerprint, int64_t n_vocab) {
  const kv::KvShape& s = kv.shape();
  return {fingerprint, s.n_layer, s.n_head_kv, s.head_dim_k, s.head_dim_v, n_vocab};
}

}  // namespace

uint64_t model_fingerprint(const Engine& engine) {
  const model::HParams& h = engine.hparams();
  std::string key = h.arch;
  for (const int64_t v : {h.n_embd, h.n_layer, h.n_head, h.n_head_kv, h.head_dim_k, h.head_dim_v, h.n_ff, h.n_rot, h.n_vocab})
    put(key, v);
  put(key, engine.parameter_count());
  put(key, engine.file_bytes());
  return fnv1a(key);
}

SlotFileStats write_slot_file(const std::filesystem::path& path, const std::vector<tokenizer::TokenId>& tokens,
                              const kv::KvStore& kv, uint64_t fingerprint, int64_t n_vocab) {
  if (!kv.can_save_cells())
    throw_error("this server's KV cache ({}) cannot be saved: slot files need an f32 or f16 cache (-ctk/-ctv)",
                kv.type_name());
  const auto n = static_cast<int64_t>(tokens.size());
  std::string out;
  put(out, kMagic);
  put(out, kVersion);
  put(out, static_cast<uint32_t>(tokens.size() + 4));  // payload words
  put(out, kTokenNull);
  put(out, kTokensStateVersion);
  put(out, static_cast<uint32_t>(tokens.size()));
  for (const tokenizer::TokenId t : tokens) put(out, static_cast<uint32_t>(t));
  put(out, uint32_t{0});  // no media chunks
  out.append(kKvTag);
  put(out, kKvVersion);
  const Identity id = identity_of(kv, fingerprint, n_vocab);
  put(out, id);
  const std::string_view type = kv.type_name();
  put(out, static_cast<uint32_t>(type.size()));
  out.append(type);
  put(out, static_cast<uint64_t>(n));
  std::string cells;
  kv.save_cells(n, cells);
  put(out, static_cast<uint64_t>(cells.size()));
  out.append(cells);
  put(out, fnv1a(cells));

  std::filesystem::path temporary = path;
  temporary += ".partial";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) throw_error("slot file {}: cannot be written: {}", path.filename().string(), std::strerror(errno));
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    file.flush();
    if (!file) {
      std::remove(temporary.c_str());
      throw_error("slot file {}: writing failed: {}", path.filename().string(), std::strerror(errno));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    throw_error("slot file {}: cannot be written: {}", path.filename().string(), ec.message());
  }
  return {n, static_cast<uint64_t>(out.size())};
}

SlotFileContents read_slot_file(const std::filesystem::path& path, const kv::KvStore& kv, uint64_t fingerprint,
                                int64_t n_vocab) {
  const std::string name = path.filename().string();
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  if (!regular) throw_error("slot file {}: no such file", name);
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw_error("slot file {}: cannot be read: {}", name, ec.message());
  // Nothing larger than the slot's whole cache and a full context of tokens can be a slot file of it.
  const uint64_t most = kv.bytes() + static_cast<uint64_t>(kv.n_ctx()) * 4 + 4096 +
                        static_cast<uint64_t>(kv.shape().n_layer) * 8;
  if (size > most)
    throw_error("slot file {}: {} bytes, more than a slot file of this server's slots can hold ({} bytes)", name, size, most);
  std::string bytes(static_cast<size_t>(size), '\0');
  {
    std::ifstream file(path, std::ios::binary);
    if (!file || !file.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      throw_error("slot file {}: cannot be read", name);
  }
  Reader r(bytes, path);
  const auto magic = r.get<uint32_t>("the header");
  if (magic != kMagic) throw_error("slot file {}: not an okapi slot file (its magic number is 0x{:08x})", name, magic);
  const auto version = r.get<uint32_t>("the header");
  if (version != kVersion) throw_error("slot file {}: version {}, this okapi reads version {}", name, version, kVersion);
  const auto words = r.get<uint32_t>("the header");
  if (static_cast<uint64_t>(words) * 4 > r.left()) throw_error("slot file {}: its token list is cut short: truncated", name);
  Reader payload(r.take(static_cast<uint64_t>(words) * 4, "the token list"), path);
  SlotFileContents contents;
  contents.bytes = size;
  const auto check_count = [&](uint64_t n) {
    if (n > static_cast<uint64_t>(kv.n_ctx()))
      throw_error("slot file {}: it holds {} tokens, more than this slot's context of {}", name, n, kv.n_ctx());
  };
  if (words > 0 && payload.get<uint32_t>("the token list") == kTokenNull) {
    const auto state_version = payload.get<uint32_t>("the token list");
    if (state_version != kTokensStateVersion)
      throw_error("slot file {}: token list version {}, this okapi reads version {}", name, state_version, kTokensStateVersion);
    const auto n = payload.get<uint32_t>("the token list");
    check_count(n);
    for (uint32_t i = 0; i < n; ++i) contents.tokens.push_back(static_cast<tokenizer::TokenId>(payload.get<uint32_t>("a token")));
    const auto media = payload.get<uint32_t>("the token list");
    if (media != 0) throw_error("slot file {}: it holds media (images, audio); okapi's slots hold text only", name);
    if (payload.left() != 0) throw_error("slot file {}: {} unread bytes in its token list", name, payload.left());
  } else {
    check_count(words);  // a plain token list, as older llama-server versions wrote
    Reader plain(std::string_view(bytes).substr(12, static_cast<size_t>(words) * 4), path);
    for (uint32_t i = 0; i < words; ++i) contents.tokens.push_back(static_cast<tokenizer::TokenId>(plain.get<uint32_t>("a token")));
  }
  for (const tokenizer::TokenId t : contents.tokens)
    if (t < 0 || t >= n_vocab) throw_error("slot file {}: token id {} is outside this model's vocabulary of {}", name, t, n_vocab);

  if (r.left() == 0)
    throw_error("slot file {}: it holds tokens but no KV cells (a llama-server file?); okapi restores files it saved", name);
  if (r.take(kKvTag.size(), "the KV section") != kKvTag)
    throw_error("slot file {}: its KV section is not okapi's (a llama-server file?)", name);
  const auto kv_version = r.get<uint32_t>("the KV section");
  if (kv_version != kKvVersion)
    throw_error("slot file {}: KV section version {}, this okapi reads version {}", name, kv_version, kKvVersion);
  const auto saved = r.get<Identity>("the model's identity");
  const Identity here = identity_of(kv, fingerprint, n_vocab);
  if (saved.fingerprint != here.fingerprint || saved.n_layer != here.n_layer || saved.n_head_kv != here.n_head_kv ||
      saved.head_dim_k != here.head_dim_k || saved.head_dim_v != here.head_dim_v || saved.n_vocab != here.n_vocab)
    throw_error("slot file {}: saved by another model ({} layers, {} kv heads, head width {}/{}, vocabulary {}); "
                "this server's model has {} layers, {} kv heads, head width {}/{}, vocabulary {}{}",
                name, saved.n_layer, saved.n_head_kv, saved.head_dim_k, saved.head_dim_v, saved.n_vocab, here.n_layer,
                here.n_head_kv, here.head_dim_k, here.head_dim_v, here.n_vocab,
                saved.fingerprint != here.fingerprint ? " (and another model file)" : "");
  const auto type_size = r.get<uint32_t>("the cache type");
  if (type_size > 256) throw_error("slot file {}: a cache type name of {} bytes: corrupt", name, type_size);
  const std::string_view type = r.take(type_size, "the cache type");
  if (type != kv.type_name())
    throw_error("slot file {}: saved from a {} cache, this server's cache is {}", name, type, kv.type_name());
  const auto positions = r.get<uint64_t>("the KV section");
  if (positions != contents.tokens.size())
    throw_error("slot file {}: {} tokens but KV cells of {} positions: corrupt", name, contents.tokens.size(), positions);
  const auto cell_bytes = r.get<uint64_t>("the KV section");
  if (cell_bytes > r.left()) throw_error("slot file {}: its KV cells are cut short: truncated", name);
  const std::string_view cells = r.take(cell_bytes, "the KV cells");
  const auto checksum = r.get<uint64_t>("the checksum");
  if (checksum != fnv1a(cells)) throw_error("slot file {}: its KV cells do not match their checksum: corrupt", name);
  if (r.left() != 0) throw_error("slot file {}: {} bytes after its end: corrupt", name, r.left());
  contents.cells.assign(cells);
  return contents;
}

}  // namespace okapi::runtime
