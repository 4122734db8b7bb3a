#include "train/data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/mapped_file.hpp"
#include "core/sha256.hpp"

namespace okapi::train {
namespace {

constexpr char kShardMagic[8] = {'O', 'K', 'T', 'O', 'K', 'S', 'H', '1'};
constexpr size_t kHexDigest = 64;
// Part of every cache key: bump it when tokenization or the document rule changes.
constexpr std::string_view kShardFormatTag = "okapi-train-shard-v1;doc=file;bos=vocab";

std::string file_sha256(const std::filesystem::path& path) {
  const MappedFile file(path);
  return sha256_hex(file.data(), file.size());
}

bool starts_with_gguf_magic(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

// The tokens of a verified shard, or nothing when the file is absent, short or fails its check.
std::optional<std::vector<int32_t>> read_shard(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  const MappedFile file(path);
  const auto bytes = file.bytes();
  constexpr size_t kHead = sizeof(kShardMagic) + sizeof(uint64_t);
  if (bytes.size() < kHead + kHexDigest || std::memcmp(bytes.data(), kShardMagic, sizeof(kShardMagic)) != 0) {
    return std::nullopt;
  }
  uint64_t count = 0;
  std::memcpy(&count, bytes.data() + sizeof(kShardMagic), sizeof(count));
  if (count > (bytes.size() - kHead - kHexDigest) / sizeof(int32_t) ||
      kHead + count * sizeof(int32_t) + kHexDigest != bytes.size()) {
    return std::nullopt;
  }
  const size_t body = bytes.size() - kHexDigest;
  const std::string stored(reinterpret_cast<const char*>(bytes.data() + body), kHexDigest);
  if (sha256_hex(bytes.data(), body) != stored) return std::nullopt;
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::memcpy(tokens.data(), bytes.data() + kHead, tokens.size() * sizeof(int32_t));
  return tokens;
}

void write_shard(const std::filesystem::path& path, const std::vector<int32_t>& tokens) {
  Sha256 hash;
  AtomicFileWriter out(path);
  const auto put = [&](const void* data, size_t size) {
    hash.update(data, size);
    out.write(data, size);
  };
  const uint64_t count = tokens.size();
  put(kShardMagic, sizeof(kShardMagic));
  put(&count, sizeof(count));
  put(tokens.data(), tokens.size() * sizeof(int32_t));
  const std::string digest = hash.hex_digest();
  out.write(digest.data(), digest.size());
  out.commit();
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

TrainingTokenizer load_training_tokenizer(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw_error("tokenizer '{}' is not a readable file", path.string());
  const std::string sha = file_sha256(path);
  if (starts_with_gguf_magic(path)) {
    const gguf::File file = gguf::File::open(path);
    tokenizer::Vocab vocab = tokenizer::Vocab::from_gguf(file);
    TrainingTokenizer t{path, sha, tokenizer::Tokenizer(std::move(vocab)), std::nullopt, {}};
    for (const gguf::KeyValue& kv : file.metadata()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) t.gguf_keys.push_back(kv);
    }
    return t;
  }
  tokenizer::Vocab vocab = tokenizer::Vocab::from_llama2c(path);
  return TrainingTokenizer{path, sha, tokenizer::Tokenizer(std::move(vocab)), llama2c::open_tokenizer(path), {}};
}

std::vector<int32_t> tokenize_cached(const std::filesystem::path& text_file, const TrainingTokenizer& tok,
                                     const std::filesystem::path& cache_dir, bool* cache_hit) {
  const std::string text = okapi::read_text_file(text_file);
  Sha256 key;
  key.update(kShardFormatTag.data(), kShardFormatTag.size());
  key.update(tok.file_sha256.data(), tok.file_sha256.size());
  key.update(text.data(), text.size());
  const std::filesystem::path shard = cache_dir / (key.hex_digest() + ".tok");
  if (auto cached = read_shard(shard)) {
    if (cache_hit) *cache_hit = true;
    return std::move(*cached);
  }
  if (cache_hit) *cache_hit = false;
  tokenizer::EncodeOptions options;
  options.add_special = true;
  options.parse_special = false;
  std::vector<int32_t> tokens = tok.tokenizer.encode(text, options);
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) throw_error("cannot create the token cache directory '{}': {}", cache_dir.string(), ec.message());
  write_shard(shard, tokens);
  return tokens;
}

Dataset build_dataset(std::span<const std::filesystem::path> files, const TrainingTokenizer& tok,
                      const std::filesystem::path& cache_dir, double held_out_fraction, int64_t seq) {
  if (files.empty()) throw_error_for(Setting::TrainData, "no training data given");
  if (!(held_out_fraction > 0.0 && held_out_fraction < 1.0)) {
    throw_error("held-out fraction must be in (0, 1), not {}", held_out_fraction);
  }
  std::vector<int32_t> all;
  Dataset data;
  for (const auto& file : files) {
    bool hit = false;
    const auto tokens = tokenize_cached(file, tok, cache_dir, &hit);
    data.cache_hits += hit ? 1 : 0;
    all.insert(all.end(), tokens.begin(), tokens.end());
  }
  const auto n = static_cast<int64_t>(all.size());
  const auto n_held = static_cast<int64_t>(std::ceil(static_cast<double>(n) * held_out_fraction));
  const int64_t n_train = n - n_held;
  if (n_train < seq + 1 || n_held < seq + 1) {
    throw Error(fmt::format("the data hold {} tokens: {} for training and {} held out, but each split needs at least "
                            "seq + 1 = {} tokens",
                            n, n_train, n_held, seq + 1),
                Setting::None, {{Setting::TrainData, "more text in {}"}, {Setting::Sequence, "a shorter {}"}});
  }
  data.sha256 = sha256_hex(all.data(), all.size() * sizeof(int32_t));
  data.train.assign(all.begin(), all.begin() + n_train);
  data.held_out.assign(all.begin() + n_train, all.end());
  return data;
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& word : state_) word = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  if (n == 0) throw_error("Rng::below(0)");
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x = next();
  while (x >= limit) x = next();
  return x % n;
}

WindowSampler::WindowSampler(std::span<const int32_t> train, int64_t seq, uint64_t seed)
    : train_(train), seq_(seq), rng_(seed) {
  if (seq <= 0 || static_cast<int64_t>(train.size()) < seq + 1) {
    throw_error("training split of {} tokens is too short for windows of {} tokens", train.size(), seq + 1);
  }
}

void WindowSampler::next_batch(int64_t batch, std::span<int32_t> tokens, std::span<int32_t> targets) {
  const auto s = static_cast<size_t>(seq_);
  if (tokens.size() != static_cast<size_t>(batch) * s || targets.size() != tokens.size()) {
    throw_error("window batch buffers hold {} / {} ids, expected {} x {}", tokens.size(), targets.size(), batch, seq_);
  }
  const uint64_t starts = train_.size() - s;  // windows of seq + 1 tokens fit at [0, starts)
  for (int64_t b = 0; b < batch; ++b) {
    const auto start = static_cast<size_t>(rng_.below(starts));
    const size_t row = static_cast<size_t>(b) * s;
    std::copy_n(train_.begin() + static_cast<std::ptrdiff_t>(start), s, tokens.begin() + static_cast<std::ptrdiff_t>(row));
    std::copy_n(train_.begin() + static_cast<std::ptrdiff_t>(start + 1), s,
                targets.begin() + static_cast<std::ptrdiff_t>(row));
    ++windows_drawn_;
  }
}

void WindowSampler::restore(const State& state) {
  rng_.set_state(state.rng);
  windows_drawn_ = state.windows_drawn;
}

EvalWindows make_eval_windows(std::span<const int32_t> held_out, int64_t seq, int64_t max_windows) {
  EvalWindows w;
  w.seq = seq;
  const auto n = static_cast<int64_t>(held_out.size());
  w.count = seq > 0 ? (n - 1) / seq : 0;
  if (max_windows > 0) w.count = std::min(w.count, max_windows);
  if (w.count <= 0) throw_error("held-out split of {} tokens holds no window of {} tokens", n, seq + 1);
  const auto total = static_cast<size_t>(w.count * seq);
  w.tokens.assign(held_out.begin(), held_out.begin() + static_cast<std::ptrdiff_t>(total));
  w.targets.assign(held_out.begin() + 1, held_out.begin() + 1 + static_cast<std::ptrdiff_t>(total));
  return w;
}

}  // namespace okapi::train
