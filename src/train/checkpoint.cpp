#include "train/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/mapped_file.hpp"
#include "core/sha256.hpp"

namespace okapi::train {
namespace {

constexpr char kMagic[8] = {'O', 'K', 'A', 'P', 'I', 'C', 'K', 'P'};
constexpr size_t kHexDigest = 64;
constexpr uint32_t kMaxStringBytes = 1u << 20;
constexpr uint32_t kMaxDataFiles = 1u << 16;
constexpr uint32_t kMaxLowRank = 1u << 20;

// Streams fields into the atomic file and the digest at once.
class FieldWriter {
 public:
  explicit FieldWriter(AtomicFileWriter& out) : out_(out) {}
  void raw(const void* data, size_t size) {
    hash_.update(data, size);
    out_.write(data, size);
  }
  template <typename T>
  void pod(T value) {
    raw(&value, sizeof(value));
  }
  void str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void finish() {
    const std::string digest = hash_.hex_digest();
    out_.write(digest.data(), digest.size());
  }

 private:
  AtomicFileWriter& out_;
  Sha256 hash_;
};

// Bounds-checked reads of a verified body; a short read names the field.
class FieldReader {
 public:
  FieldReader(std::span<const uint8_t> bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {}
  const uint8_t* take(size_t size, std::string_view field) {
    if (size > bytes_.size() - pos_) {
      throw_error("checkpoint '{}': field {} at byte {} needs {} bytes, only {} remain", name_, field, pos_, size,
                  bytes_.size() - pos_);
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += size;
    return p;
  }
  template <typename T>
  T pod(std::string_view field) {
    T value;
    std::memcpy(&value, take(sizeof(T), field), sizeof(T));
    return value;
  }
  std::string str(std::string_view field) {
    const auto n = pod<uint32_t>(field);
    if (n > kMaxStringBytes) throw_error("checkpoint '{}': field {} has length {} (corrupt)", name_, field, n);
    const uint8_t* p = take(n, field);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  void floats(std::vector<float>& out, size_t n, std::string_view field) {
    out.resize(n);
    std::memcpy(out.data(), take(n * sizeof(float), field), n * sizeof(float));
  }
  size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& name() const { return name_; }

 private:
  std::span<const uint8_t> bytes_;
  std::string name_;
  size_t pos_ = 0;
};

void write_config(FieldWriter& w, const ModelConfig& c) {
  w.str(c.name);
  for (int64_t v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len}) w.pod(v);
  w.pod(c.norm_eps);
  w.pod(c.rope_theta);
  w.pod(static_cast<uint8_t>(c.tied_embeddings));
  w.pod(static_cast<uint8_t>(c.ternary));
  w.pod(static_cast<uint32_t>(c.low_rank.size()));
  for (const LowRankProjection& lr : c.low_rank) {
    w.str(lr.name);
    w.pod(lr.rank);
    w.str(lr.in_factor);
  }
}

ModelConfig read_config(FieldReader& r, uint32_t version) {
  ModelConfig c;
  c.name = r.str("config.name");
  for (int64_t* v : {&c.dim, &c.hidden_dim, &c.n_layers, &c.n_heads, &c.n_kv_heads, &c.vocab_size, &c.seq_len}) {
    *v = r.pod<int64_t>("config");
  }
  c.norm_eps = r.pod<float>("config.norm_eps");
  c.rope_theta = r.pod<float>("config.rope_theta");
  c.tied_embeddings = r.pod<uint8_t>("config.tied_embeddings") != 0;
  c.ternary = r.pod<uint8_t>("config.ternary") != 0;
  if (version < 2) return c;
  const auto n_low_rank = r.pod<uint32_t>("config.low_rank.count");
  if (n_low_rank > kMaxLowRank) throw_error("checkpoint '{}': {} low-rank projections (corrupt)", r.name(), n_low_rank);
  for (uint32_t i = 0; i < n_low_rank; ++i) {
    LowRankProjection lr;
    lr.name = r.str("config.low_rank.name");
    lr.rank = r.pod<int64_t>("config.low_rank.rank");
    lr.in_factor = r.str("config.low_rank.in_factor");
    c.low_rank.push_back(std::move(lr));
  }
  return c;
}

// Keys as a GGUF without tensors: every value type round-trips as the reader knows it.
void write_keys(FieldWriter& w, const std::vector<gguf::KeyValue>& keys) {
  gguf::Writer g;
  for (const gguf::KeyValue& kv : keys) g.set(kv.key, kv.value);
  const std::vector<uint8_t> bytes = g.to_bytes();
  w.pod(static_cast<uint64_t>(bytes.size()));
  w.raw(bytes.data(), bytes.size());
}

std::vector<gguf::KeyValue> read_keys(FieldReader& r, std::string_view field) {
  const auto size = r.pod<uint64_t>(field);
  if (size > kMaxStringBytes) throw_error("checkpoint '{}': field {} has length {} (corrupt)", r.name(), field, size);
  const uint8_t* p = r.take(static_cast<size_t>(size), field);
  try {
    std::vector<gguf::KeyValue> keys = gguf::File::parse({p, static_cast<size_t>(size)}, std::string(field)).metadata();
    for (gguf::KeyValue& kv : keys) kv.file_offset = 0;
    return keys;
  } catch (const Error& e) {
    throw_error("checkpoint '{}': field {} is not readable: {}", r.name(), field, e.what());
  }
}

void write_hyper(FieldWriter& w, const TrainHyper& h) {
  for (int64_t v : {h.steps, h.batch, h.seq, h.accum, h.warmup}) w.pod(v);
  for (float v : {h.lr, h.lr_min, h.weight_decay, h.beta1, h.beta2, h.adam_eps, h.grad_clip}) w.pod(v);
  w.pod(h.seed);
  w.pod(h.init);
  w.pod(h.held_out_fraction);
}

TrainHyper read_hyper(FieldReader& r) {
  TrainHyper h;
  for (int64_t* v : {&h.steps, &h.batch, &h.seq, &h.accum, &h.warmup}) *v = r.pod<int64_t>("hyper");
  for (float* v : {&h.lr, &h.lr_min, &h.weight_decay, &h.beta1, &h.beta2, &h.adam_eps, &h.grad_clip}) {
    *v = r.pod<float>("hyper");
  }
  h.seed = r.pod<uint64_t>("hyper.seed");
  h.init = r.pod<int32_t>("hyper.init");
  h.held_out_fraction = r.pod<double>("hyper.held_out_fraction");
  return h;
}

bool parse_step(const std::filesystem::path& file, int64_t* step) {
  const std::string name = file.filename().string();
  constexpr std::string_view kPrefix = "step-", kSuffix = ".ckpt";
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return false;
  }
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *step = std::stoll(digits);
  return true;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const CheckpointMeta& meta, std::span<const float> params,
                     std::span<const float> adam_m, std::span<const float> adam_v) {
  if (adam_m.size() != params.size() || adam_v.size() != params.size()) {
    throw_error("checkpoint: {} parameters but {} / {} moments", params.size(), adam_m.size(), adam_v.size());
  }
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw_error("cannot create '{}': {}", path.parent_path().string(), ec.message());
  AtomicFileWriter out(path);
  FieldWriter w(out);
  w.raw(kMagic, sizeof(kMagic));
  w.pod(kCheckpointVersion);
  write_config(w, meta.config);
  write_hyper(w, meta.hyper);
  w.pod(meta.step);
  for (uint64_t word : meta.sampler.rng) w.pod(word);
  w.pod(meta.sampler.windows_drawn);
  w.pod(meta.tokens_seen);
  w.pod(meta.train_seconds);
  for (int64_t v : {meta.eval_every, meta.eval_windows, meta.save_every}) w.pod(v);
  w.str(meta.data_sha256);
  w.str(meta.tokenizer_sha256);
  w.str(meta.tokenizer_path);
  w.pod(static_cast<uint32_t>(meta.data_files.size()));
  for (const auto& f : meta.data_files) w.str(f);
  w.str(meta.init_from);
  write_keys(w, meta.export_metadata);
  w.pod(static_cast<uint64_t>(params.size()));
  for (auto values : {params, adam_m, adam_v}) w.raw(values.data(), values.size_bytes());
  w.finish();
  out.commit();
}

Checkpoint load_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw_error("checkpoint '{}' does not exist", path.string());
  const MappedFile file(path);
  const auto bytes = file.bytes();
  const std::string name = path.string();
  if (bytes.size() < sizeof(kMagic) + kHexDigest || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    throw_error("'{}' is not an okapi checkpoint (no OKAPICKP magic, {} bytes)", name, bytes.size());
  }
  const size_t body = bytes.size() - kHexDigest;
  const std::string stored(reinterpret_cast<const char*>(bytes.data() + body), kHexDigest);
  const std::string actual = sha256_hex(bytes.data(), body);
  if (stored != actual) {
    throw_error("checkpoint '{}' is corrupt: sha256 of its {} bytes is {}, the file records {}", name, body, actual,
                stored);
  }
  FieldReader r(bytes.first(body), name);
  r.take(sizeof(kMagic), "magic");
  const auto version = r.pod<uint32_t>("version");
  if (version < 1 || version > kCheckpointVersion) {
    throw_error("checkpoint '{}' has version {}; this okapi reads versions 1 to {}", name, version, kCheckpointVersion);
  }
  Checkpoint ck;
  CheckpointMeta& m = ck.meta;
  m.config = read_config(r, version);
  m.hyper = read_hyper(r);
  m.step = r.pod<int64_t>("step");
  for (auto& word : m.sampler.rng) word = r.pod<uint64_t>("sampler.rng");
  m.sampler.windows_drawn = r.pod<uint64_t>("sampler.windows_drawn");
  m.tokens_seen = r.pod<uint64_t>("tokens_seen");
  m.train_seconds = r.pod<double>("train_seconds");
  for (int64_t* v : {&m.eval_every, &m.eval_windows, &m.save_every}) *v = r.pod<int64_t>("eval settings");
  m.data_sha256 = r.str("data_sha256");
  m.tokenizer_sha256 = r.str("tokenizer_sha256");
  m.tokenizer_path = r.str("tokenizer_path");
  const auto n_files = r.pod<uint32_t>("data_files.count");
  if (n_files > kMaxDataFiles) throw_error("checkpoint '{}': {} data files (corrupt)", name, n_files);
  for (uint32_t i = 0; i < n_files; ++i) m.data_files.push_back(r.str("data_files"));
  if (version >= 2) {
    m.init_from = r.str("init_from");
    m.export_metadata = read_keys(r, "export_metadata");
  }
  size_t expected = 0;
  try {
    expected = ParameterLayout(m.config).total();  // validates the config, low-rank entries too
  } catch (const Error& e) {
    throw_error("checkpoint '{}': bad model config: {}", name, e.what());
  }
  const auto n = r.pod<uint64_t>("parameter count");
  if (n != expected || r.remaining() != 3 * n * sizeof(float)) {
    throw_error("checkpoint '{}': {} parameters stored ({} bytes left), the config needs {}", name, n, r.remaining(),
                expected);
  }
  r.floats(ck.params, n, "params");
  r.floats(ck.adam_m, n, "adam_m");
  r.floats(ck.adam_v, n, "adam_v");
  return ck;
}

ResumePoint load_newest_good_checkpoint(const std::filesystem::path& run_dir,
                                        const std::function<void(const std::string&)>& warn) {
  const auto found = list_checkpoints(run_dir);
  if (found.empty()) {
    throw_error_for(Setting::Resume, "the run '{}' cannot be resumed: no checkpoints in {}", run_dir.string(),
                    checkpoint_dir(run_dir).string());
  }
  std::vector<std::pair<std::filesystem::path, std::string>> bad;  // newest first
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      ResumePoint point{*it, load_checkpoint(*it)};
      for (const auto& [path, reason] : bad) {
        std::filesystem::path aside = path;
        aside += ".corrupt";
        std::error_code ec;
        std::filesystem::rename(path, aside, ec);
        warn(fmt::format("skipping checkpoint '{}': {}; {}", path.string(), reason,
                         ec ? fmt::format("could not move it aside: {}", ec.message())
                            : fmt::format("moved it to '{}'", aside.string())));
      }
      if (!bad.empty()) warn(fmt::format("resuming from the older checkpoint '{}'", it->string()));
      return point;
    } catch (const Error& e) {
      bad.emplace_back(*it, e.what());
    }
  }
  std::string reasons;
  for (const auto& [path, reason] : bad) reasons += fmt::format("\n  {}", reason);
  throw_error("the run '{}' cannot be resumed: none of its {} checkpoints can be used:{}", run_dir.string(), bad.size(),
              reasons);
}

std::filesystem::path checkpoint_dir(const std::filesystem::path& run_dir) { return run_dir / "checkpoints"; }

std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir, int64_t step) {
  return checkpoint_dir(run_dir) / fmt::format("step-{:08d}.ckpt", step);
}

std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& run_dir) {
  std::vector<std::pair<int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint_dir(run_dir), ec)) {
    int64_t step = 0;
    if (entry.is_regular_file(ec) && parse_step(entry.path(), &step)) found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& [step, p] : found) out.push_back(std::move(p));
  return out;
}

void prune_checkpoints(const std::filesystem::path& run_dir, int64_t keep) {
  const auto all = list_checkpoints(run_dir);
  std::error_code ec;
  const auto n_keep = static_cast<size_t>(std::max<int64_t>(keep, 1));
  for (size_t i = 0; i + n_keep < all.size(); ++i) std::filesystem::remove(all[i], ec);
  // AtomicFileWriter's temp names: <file>.tmp.<pid>; only a killed process leaves one behind.
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint_dir(run_dir), ec)) {
    if (entry.path().filename().string().find(".ckpt.tmp.") != std::string::npos) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
}

}  // namespace okapi::train
