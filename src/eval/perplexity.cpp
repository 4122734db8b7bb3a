#include "eval/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <utility>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/system_memory.hpp"
#include "eval/chunk_pass.hpp"
#include "exact/detmath.hpp"
#include "runtime/cancel.hpp"

namespace okapi::eval {
namespace {

constexpr char kMagic[8] = {'O', 'K', 'A', 'P', 'I', 'P', 'P', 'L'};
constexpr uint32_t kVersion = 1;

struct LogitsHeader {
  uint32_t n_ctx = 0, n_vocab = 0, n_chunk = 0, first = 0;
};

// exp for the statistics: libm's in float mode (as llama.cpp), det::exp in exact mode so that the
// printed numbers are the same bits on every build (docs/exact-mode.md).
double stat_exp(double x, bool exact) { return exact ? exact::det::exp(x) : std::exp(x); }

// log_softmax of one row as llama.cpp's perplexity: float max, double sum of expf. Exact mode:
// the same sum with det::exp / det::log (the differences logits[i] - max are exact float ops).
void log_softmax(const float* logits, int64_t n_vocab, float* out, bool exact) {
  const float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum_exp = 0.0;
  if (exact) {
    for (int64_t i = 0; i < n_vocab; ++i) sum_exp += exact::det::exp(static_cast<double>(logits[i] - max_logit));
  } else {
    for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  }
  const double log_sum = exact ? exact::det::log(sum_exp) : std::log(sum_exp);
  for (int64_t i = 0; i < n_vocab; ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i] - max_logit) - log_sum);
}

double mean_of(double sum, double count) { return count > 0 ? sum / count : 0.0; }
// Standard error of a mean from running sums (llama.cpp's formula: population variance / (n - 1)).
double stderr_of(double sum, double sum2, double count) {
  if (count < 2) return 0.0;
  const double mean = sum / count;
  const double var = sum2 / count - mean * mean;
  return var > 0 ? std::sqrt(var / (count - 1)) : 0.0;
}

double percentile(std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  const double index = fraction * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(index));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double t = index - static_cast<double>(lo);
  return sorted[lo] * (1 - t) + sorted[hi] * t;
}

// An error about the saved log-probs compared with, tagged with its setting.
template <typename... Args>
[[noreturn]] void saved_logits_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), Setting::KlDivergence);
}

class BaseReader {
 public:
  BaseReader(const std::filesystem::path& path, const LogitsHeader& expected, std::span<const int32_t> tokens)
      : in_(path, std::ios::binary), path_(path) {
    if (!in_) saved_logits_error("the saved log-probs: cannot open {}", path.string());
    char magic[8] = {};
    uint32_t version = 0;
    LogitsHeader h;
    in_.read(magic, 8);
    read(&version, 4);
    read(&h, sizeof h);
    if (std::memcmp(magic, kMagic, 8) != 0 || version != kVersion)
      saved_logits_error("the saved log-probs: {} is not an okapi logits file (version {})", path.string(), kVersion);
    if (h.n_ctx != expected.n_ctx || h.n_vocab != expected.n_vocab || h.first != expected.first)
      saved_logits_error("the saved log-probs: {} has n_ctx {} / n_vocab {}, this run has n_ctx {} / n_vocab {}",
                         path.string(),
                  h.n_ctx, h.n_vocab, expected.n_ctx, expected.n_vocab);
    if (h.n_chunk < expected.n_chunk)
      saved_logits_error("the saved log-probs: {} holds {} chunks, this run needs {}", path.string(), h.n_chunk,
                  expected.n_chunk);
    std::vector<int32_t> saved(static_cast<size_t>(h.n_chunk) * h.n_ctx);
    read(saved.data(), saved.size() * sizeof(int32_t));
    for (size_t i = 0; i < tokens.size(); ++i)
      if (saved[i] != tokens[i])
        saved_logits_error("the saved log-probs: token {} differs ({} in {}, {} here): not the same text/tokenizer", i,
                           saved[i],
                    path.string(), tokens[i]);
  }
  void next_row(float* out, int64_t n_vocab) { read(out, static_cast<size_t>(n_vocab) * sizeof(float)); }

 private:
  void read(void* data, size_t size) {
    in_.read(static_cast<char*>(data), static_cast<std::streamsize>(size));
    if (!in_) saved_logits_error("the saved log-probs: {} is truncated", path_.string());
  }
  std::ifstream in_;
  std::filesystem::path path_;
};

struct KlAccumulator {
  std::vector<double> kld, dp;
  double sum_nll = 0, sum_nll2 = 0, sum_base = 0, sum_base2 = 0, sum_cross = 0;
  double sum_ratio = 0, sum_ratio2 = 0;
  int64_t same_top = 0;
  bool exact = false;

  void add(const float* logp_q, const float* logp_b, int64_t n_vocab, int32_t token) {
    double kl = 0.0;
    int64_t top_q = 0, top_b = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double pb = stat_exp(static_cast<double>(logp_b[i]), exact);
      kl += pb * (static_cast<double>(logp_b[i]) - static_cast<double>(logp_q[i]));
      if (logp_q[i] > logp_q[top_q]) top_q = i;
      if (logp_b[i] > logp_b[top_b]) top_b = i;
    }
    kld.push_back(kl);
    dp.push_back(stat_exp(static_cast<double>(logp_q[token]), exact) - stat_exp(static_cast<double>(logp_b[token]), exact));
    const double nll = -static_cast<double>(logp_q[token]);
    const double base = -static_cast<double>(logp_b[token]);
    sum_nll += nll;
    sum_nll2 += nll * nll;
    sum_base += base;
    sum_base2 += base * base;
    sum_cross += nll * base;
    sum_ratio += nll - base;
    sum_ratio2 += (nll - base) * (nll - base);
    if (top_q == top_b) ++same_top;
  }

  KlStats finish() {
    KlStats s;
    const auto n = static_cast<double>(kld.size());
    const double mean_base = mean_of(sum_base, n);
    s.ppl_base = stat_exp(mean_base, exact);
    s.ppl_base_err = stderr_of(sum_base, sum_base2, n) * s.ppl_base;
    s.mean_ln_ppl_ratio = mean_of(sum_ratio, n);
    s.mean_ln_ppl_ratio_err = stderr_of(sum_ratio, sum_ratio2, n);
    const double mean_q = mean_of(sum_nll, n);
    const double var_q = sum_nll2 / n - mean_q * mean_q;
    const double var_b = sum_base2 / n - mean_base * mean_base;
    s.cor_ln_ppl = var_q > 0 && var_b > 0 ? (sum_cross / n - mean_q * mean_base) / std::sqrt(var_q * var_b) : 1.0;
    double sum = 0, sum2 = 0;
    for (const double v : kld) sum += v, sum2 += v * v;
    s.kld_mean = mean_of(sum, n);
    s.kld_err = stderr_of(sum, sum2, n);
    sum = sum2 = 0;
    for (const double v : dp) sum += v, sum2 += v * v;
    s.dp_mean = mean_of(sum, n);
    s.dp_err = stderr_of(sum, sum2, n);
    s.dp_rms = std::sqrt(mean_of(sum2, n));
    std::sort(kld.begin(), kld.end());
    std::sort(dp.begin(), dp.end());
    s.kld_max = kld.empty() ? 0 : kld.back();
    s.kld_min = kld.empty() ? 0 : kld.front();
    s.kld_p999 = percentile(kld, 0.999);
    s.kld_p99 = percentile(kld, 0.99);
    s.kld_median = percentile(kld, 0.5);
    s.kld_p10 = percentile(kld, 0.10);
    s.kld_p5 = percentile(kld, 0.05);
    s.kld_p1 = percentile(kld, 0.01);
    const std::pair<const char*, double> points[] = {{"Maximum", 1.0}, {"99.9%", 0.999}, {"99.0%", 0.99},
                                                     {"95.0%", 0.95},  {"90.0%", 0.90},  {"75.0%", 0.75},
                                                     {"Median", 0.5},  {"25.0%", 0.25},  {"10.0%", 0.10},
                                                     {"5.0%", 0.05},   {"1.0%", 0.01},   {"0.1%", 0.001},
                                                     {"Minimum", 0.0}};
    for (const auto& [name, fraction] : points) s.dp_percentiles.emplace_back(name, percentile(dp, fraction));
    s.same_top_fraction = mean_of(static_cast<double>(same_top), n);
    const double p = s.same_top_fraction;
    s.same_top_err = n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : 0.0;
    return s;
  }
};

}  // namespace

namespace {

PerplexityResult perplexity_of(runtime::Engine& engine, const std::string& text, const PerplexityOptions& options,
                               const std::function<void(const ChunkReport&)>& on_chunk) {
  tokenizer::EncodeOptions encode;
  encode.add_special = true;
  encode.parse_special = false;  // as llama-perplexity's common_tokenize(ctx, text, true)
  const std::vector<int32_t> tokens = engine.tokenizer().encode(text, encode);

  PerplexityResult result;
  const int64_t n_ctx = engine.resolve_ctx(options.n_ctx);
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  result.n_ctx = n_ctx;
  result.n_tokens_text = n_tokens;
  if (n_ctx < 4) throw_error_for(Setting::ContextLength, "perplexity: the context must hold at least 4 tokens, got {}", n_ctx);
  if (n_tokens < 2 * n_ctx)
    throw_error_for(Setting::ContextLength,
                    "perplexity: the text has {} tokens; a context of {} needs at least {}; use a smaller context",
                    n_tokens, n_ctx, 2 * n_ctx);
  if (options.batch_size < 1)
    throw_error_for(Setting::BatchSize, "perplexity: the batch size must be at least 1, got {}", options.batch_size);
  const int64_t n_chunk_max = n_tokens / n_ctx;
  const int64_t n_chunk = options.n_chunks < 0 ? n_chunk_max : std::min(options.n_chunks, n_chunk_max);
  if (n_chunk < 1) throw_error_for(Setting::Chunks, "perplexity: the chunk count must be at least 1, got {}", options.n_chunks);
  const int64_t n_batch = std::min(options.batch_size, n_ctx);
  const int64_t first = n_ctx / 2;
  const int64_t n_vocab = engine.model().n_vocab();
  const int64_t rows = n_ctx - 1 - first;  // scored rows per chunk
  result.n_chunks = n_chunk;

  const LogitsHeader header{static_cast<uint32_t>(n_ctx), static_cast<uint32_t>(n_vocab),
                            static_cast<uint32_t>(n_chunk), static_cast<uint32_t>(first)};
  const std::span<const int32_t> scored_text(tokens.data(), static_cast<size_t>(n_chunk * n_ctx));
  std::unique_ptr<AtomicFileWriter> saver;
  if (!options.save_logits.empty()) {
    saver = std::make_unique<AtomicFileWriter>(options.save_logits);
    saver->write(kMagic, sizeof kMagic);
    saver->write(&kVersion, sizeof kVersion);
    saver->write(&header, sizeof header);
    saver->write(scored_text.data(), scored_text.size_bytes());
  }
  std::unique_ptr<BaseReader> base;
  if (!options.kl_divergence.empty())
    base = std::make_unique<BaseReader>(options.kl_divergence, header, scored_text);
  const bool exact = engine.exact();
  KlAccumulator kl;
  kl.exact = exact;

  // Every row of a chunk's logits is kept (n_ctx x n_vocab floats): the memory check counts them.
  const auto kv = engine.make_kv(n_ctx, {.batch = n_batch, .logit_rows = n_ctx});
  std::vector<float> logits(static_cast<size_t>(n_ctx * n_vocab));
  std::vector<float> logp(static_cast<size_t>(n_vocab)), logp_base(static_cast<size_t>(n_vocab));
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;
  const double start = runtime::now_seconds();
  for (int64_t c = 0; c < n_chunk; ++c) {
    if (runtime::interrupt_requested()) {
      result.interrupted = true;
      break;
    }
    run_chunk_all_logits(engine, engine.ops(), *kv,
                         std::span<const int32_t>(tokens).subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx)),
                         n_batch, logits.data());
    double chunk_nll = 0.0;
    for (int64_t i = first; i < n_ctx - 1; ++i) {
      const int32_t target = tokens[static_cast<size_t>(c * n_ctx + i + 1)];
      log_softmax(logits.data() + i * n_vocab, n_vocab, logp.data(), exact);
      const double v = -static_cast<double>(logp[static_cast<size_t>(target)]);
      nll += v;
      nll2 += v * v;
      chunk_nll += v;
      if (saver) saver->write(logp.data(), logp.size() * sizeof(float));
      if (base) {
        base->next_row(logp_base.data(), n_vocab);
        kl.add(logp.data(), logp_base.data(), n_vocab, target);
      }
    }
    count += rows;
    result.chunk_mean_nll.push_back(chunk_nll / static_cast<double>(rows));
    result.running_ppl.push_back(stat_exp(nll / static_cast<double>(count), exact));
    if (on_chunk) on_chunk({c, n_chunk, result.running_ppl.back(), runtime::now_seconds() - start});
  }
  result.seconds = runtime::now_seconds() - start;
  result.scored = count;
  if (count > 0) {
    const double mean = nll / static_cast<double>(count);
    result.mean_nll = mean;
    result.ppl = stat_exp(mean, exact);
    result.ppl_stderr = stderr_of(nll, nll2, static_cast<double>(count)) * result.ppl;
  }
  if (saver && !result.interrupted) saver->commit();
  if (base && count > 0) result.kl = kl.finish();
  return result;
}

}  // namespace

PerplexityResult compute_perplexity(runtime::Engine& engine, const std::string& text, const PerplexityOptions& options,
                                    const std::function<void(const ChunkReport&)>& on_chunk) {
  return out_of_memory_as_error("computing perplexity", [&] { return perplexity_of(engine, text, options, on_chunk); });
}

}  // namespace okapi::eval
