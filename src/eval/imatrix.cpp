#include "eval/imatrix.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "compress/calibration.hpp"
#include "core/error.hpp"
#include "eval/chunk_pass.hpp"
#include "runtime/cancel.hpp"

namespace okapi::eval {
namespace {

// llama-imatrix's batch geometry (common_params' defaults): -b 2048, -ub 512.
constexpr int64_t kBatch = 2048;
constexpr int64_t kMicroBatch = 512;
// llama-imatrix skips dense mat-muls of fewer rows.
constexpr int64_t kMinDenseRows = 16;

// Which positions of chunk `chunk` llama-imatrix counts for dense weights: those not in a
// micro-batch of fewer than 16 tokens. Chunks run n_seq at a time (n_seq = 2048 / n_ctx); with
// one sequence per batch the batch is cut into micro-batches of 512 tokens (split_simple), with
// several, each micro-batch takes the same positions of every sequence of the batch
// (split_equal): floor(512 / sequences) positions each.
std::vector<uint8_t> dense_counted(int64_t n_ctx, int64_t n_chunk, int64_t chunk) {
  std::vector<uint8_t> counted(static_cast<size_t>(n_ctx), 1);
  const int64_t n_seq = std::max<int64_t>(1, kBatch / n_ctx);
  auto mark = [&](int64_t begin, int64_t length, int64_t tokens) {
    if (tokens < kMinDenseRows) std::fill_n(counted.begin() + begin, length, uint8_t{0});
  };
  if (n_seq == 1) {
    for (int64_t batch = 0; batch < n_ctx; batch += kBatch) {
      const int64_t end = std::min(n_ctx, batch + kBatch);
      for (int64_t p = batch; p < end; p += kMicroBatch) {
        const int64_t length = std::min(kMicroBatch, end - p);
        mark(p, length, length);
      }
    }
  } else {
    const int64_t group = chunk / n_seq;
    const int64_t sequences = std::min(n_seq, n_chunk - group * n_seq);
    const int64_t step = std::max<int64_t>(1, kMicroBatch / sequences);
    for (int64_t p = 0; p < n_ctx; p += step) {
      const int64_t length = std::min(step, n_ctx - p);
      mark(p, length, length * sequences);
    }
  }
  return counted;
}

bool collected(std::string_view name, bool process_output) {
  return name.starts_with("blk.") || (process_output && name == "output.weight");
}

void add_squares(float* acc, const float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += x[j] * x[j];
}

void check_finite(const std::string& name, const float* v, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(v[j])) throw_error("imatrix: non-finite activation sums in '{}' (column {})", name, j);
}

// The observer: adds each watched input's squares to its entries, as llama-imatrix's
// collect_imatrix does for MUL_MAT (dense) and MUL_MAT_ID (experts).
class Collector : public compress::ObservingOps::Observer {
 public:
  Collector(quantize::Imatrix& imatrix, const gguf::File& file, bool process_output)
      : imatrix_(imatrix), file_(file), process_output_(process_output) {}

  // Rows of the coming forward pass that dense weights count (one flag per token).
  void set_counted(std::span<const uint8_t> counted) { counted_ = counted; }

  void matmul_input(std::span<const std::string_view> weights, const float* x, int64_t n_tokens, int64_t n) override {
    const bool all = counted_.size() != static_cast<size_t>(n_tokens);
    int64_t rows = 0;
    for (int64_t t = 0; t < n_tokens; ++t) rows += all || counted_[static_cast<size_t>(t)] ? 1 : 0;
    if (rows == 0) return;
    for (const std::string_view name : weights) {
      if (!collected(name, process_output_)) continue;
      quantize::ImatrixEntry& e = dense_entry(name, n);
      for (int64_t t = 0; t < n_tokens; ++t)
        if (all || counted_[static_cast<size_t>(t)]) add_squares(e.sums.data(), x + t * n, n);
      check_finite(std::string(name), e.sums.data(), n);
      for (int64_t& c : e.counts) c += rows;
    }
  }

  void norm_input(std::string_view, const float*, int64_t, int64_t) override {}

  void expert_input(std::span<const std::string_view> weights, int64_t expert, const float* x, int64_t n_tokens,
                    int64_t n) override {
    for (const std::string_view name : weights) {
      if (!collected(name, process_output_)) continue;
      quantize::ImatrixEntry& e = expert_entry(name, n);
      if (expert < 0 || expert >= e.n_mat)
        throw_error("imatrix: expert {} of '{}', which has {} experts", expert, name, e.n_mat);
      float* acc = e.sums.data() + expert * n;
      for (int64_t t = 0; t < n_tokens; ++t) add_squares(acc, x + t * n, n);
      check_finite(std::string(name), acc, n);
      e.counts[static_cast<size_t>(expert)] += n_tokens;
    }
  }

 private:
  quantize::ImatrixEntry& dense_entry(std::string_view name, int64_t n) {
    quantize::ImatrixEntry& e = imatrix_.entries[std::string(name)];
    // One count per dense weight: equal counts of a merged file collapse to one (llama-imatrix).
    if (e.counts.size() > 1 &&
        std::all_of(e.counts.begin(), e.counts.end(), [&](int64_t c) { return c == e.counts.front(); }))
      e.counts.erase(e.counts.begin() + 1, e.counts.end());
    if (e.sums.empty()) {
      e.n_per_row = n;
      e.n_mat = 1;
      e.sums.assign(static_cast<size_t>(n), 0.0f);
      e.counts.assign(1, 0);
    } else if (e.sums.size() != static_cast<size_t>(n)) {
      throw_error("imatrix: inconsistent size for '{}' ({} values merged, {} columns here)", name, e.sums.size(), n);
    } else if (e.counts.size() != 1) {
      throw_error("imatrix: '{}' has {} counts merged, its weight is one matrix", name, e.counts.size());
    }
    e.n_per_row = n;
    e.n_mat = 1;
    return e;
  }

  quantize::ImatrixEntry& expert_entry(std::string_view name, int64_t n) {
    quantize::ImatrixEntry& e = imatrix_.entries[std::string(name)];
    const gguf::TensorInfo* info = file_.find_tensor(name);
    if (info == nullptr || info->shape.size() < 3) throw_error("imatrix: expert weight '{}' is not a 3-D tensor", name);
    const int64_t n_as = info->shape[2];
    if (e.counts.size() == 1 && n_as > 1) {
      const int64_t merged = e.counts.front();  // broadcast a merged file's one count
      e.counts = std::vector<int64_t>(static_cast<size_t>(n_as), merged);
    }
    if (e.sums.empty()) {
      e.sums.assign(static_cast<size_t>(n * n_as), 0.0f);
      e.counts.assign(static_cast<size_t>(n_as), 0);
    } else if (e.sums.size() != static_cast<size_t>(n * n_as)) {
      throw_error("imatrix: inconsistent size for '{}' ({} values merged, {} x {} here)", name, e.sums.size(), n, n_as);
    } else if (e.counts.size() != static_cast<size_t>(n_as)) {
      throw_error("imatrix: inconsistent expert count for '{}' ({} merged, {} here)", name, e.counts.size(), n_as);
    }
    e.n_per_row = n;
    e.n_mat = n_as;
    return e;
  }

  quantize::Imatrix& imatrix_;
  const gguf::File& file_;
  bool process_output_;
  std::span<const uint8_t> counted_;
};

// -log p(token) from one row of logits, as llama-imatrix's log_softmax: float max, double sum of
// expf, log of the sum in double.
double negative_log_prob(const float* logits, int64_t n_vocab, int32_t token) {
  const float max_logit = *std::max_element(logits, logits + n_vocab);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(static_cast<double>(logits[token] - max_logit) - std::log(sum_exp));
}

}  // namespace

int64_t imatrix_chunk_count(const quantize::Imatrix& imatrix) {
  if (imatrix.chunk_size < 1) return imatrix.chunk_count;
  int64_t max_count = 0;
  for (const auto& [name, e] : imatrix.entries)
    for (const int64_t c : e.counts) max_count = std::max(max_count, c);
  return max_count / imatrix.chunk_size;
}

ImatrixResult collect_imatrix(runtime::Engine& engine, const std::string& text, const ImatrixOptions& options,
                              quantize::Imatrix& imatrix, const std::function<void(const ImatrixChunkReport&)>& on_chunk) {
  const int64_t n_ctx = options.n_ctx;
  if (n_ctx < 2) throw_error_for(Setting::ContextLength, "imatrix: a chunk needs at least 2 tokens, got -c {}", n_ctx);
  for (const auto& [name, e] : imatrix.entries)
    if (e.legacy) throw_error("imatrix: entry '{}' holds legacy .dat values; convert them before collecting", name);
  tokenizer::EncodeOptions encode;
  encode.add_special = true;
  encode.parse_special = false;
  std::vector<int32_t> tokens = engine.tokenizer().encode(text, encode);

  ImatrixResult result;
  result.n_tokens_text = static_cast<int64_t>(tokens.size());
  if (options.from_chunk > 0) {
    if ((options.from_chunk + 2) * n_ctx >= static_cast<int64_t>(tokens.size()))
      throw_error_for(Setting::Chunks, "imatrix: the text has {} tokens; none would be left after skipping {} chunks",
                      tokens.size(), options.from_chunk);
    tokens.erase(tokens.begin(), tokens.begin() + options.from_chunk * n_ctx);
  }
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * n_ctx)
    throw_error_for(Setting::ContextLength,
                    "imatrix: you need at least {} tokens for a context of {} tokens; the text tokenizes to only {} "
                    "tokens",
                    2 * n_ctx, n_ctx, n_tokens);
  const int64_t n_chunk_max = n_tokens / n_ctx;
  const int64_t n_chunk = options.n_chunks < 0 ? n_chunk_max : std::min(options.n_chunks, n_chunk_max);
  if (n_chunk < 1) throw_error_for(Setting::Chunks, "imatrix: the chunk count must be at least 1, got {}", options.n_chunks);

  imatrix.chunk_size = n_ctx;
  if (!options.dataset.empty()) imatrix.datasets.push_back(options.dataset);
  Collector collector(imatrix, engine.model().file(), options.process_output);
  compress::ObservingOps ops(engine.ops(), collector);

  const int64_t n_batch = std::min(kMicroBatch, n_ctx);
  const int64_t n_vocab = engine.model().n_vocab();
  const int64_t first = n_ctx / 2;
  const auto kv = engine.make_kv(n_ctx, {.batch = n_batch, .logit_rows = n_ctx});
  std::vector<float> logits(static_cast<size_t>(n_ctx * n_vocab));
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;
  const double start = runtime::now_seconds();
  for (int64_t c = 0; c < n_chunk; ++c) {
    if (runtime::interrupt_requested()) {
      result.interrupted = true;
      break;
    }
    const std::vector<uint8_t> counted = dense_counted(n_ctx, n_chunk, c);
    run_chunk_all_logits(engine, ops, *kv,
                         std::span<const int32_t>(tokens).subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx)),
                         n_batch, logits.data(), [&](int64_t begin, int64_t size) {
                           collector.set_counted(std::span<const uint8_t>(counted).subspan(static_cast<size_t>(begin),
                                                                                           static_cast<size_t>(size)));
                         });
    if (options.compute_ppl) {
      for (int64_t i = first; i < n_ctx - 1; ++i) {
        const double v = negative_log_prob(logits.data() + i * n_vocab, n_vocab,
                                           tokens[static_cast<size_t>(c * n_ctx + i + 1)]);
        nll += v;
        nll2 += v * v;
      }
      count += n_ctx - 1 - first;
    }
    imatrix.chunk_count = imatrix_chunk_count(imatrix);
    result.n_chunks = c + 1;
    if (on_chunk)
      on_chunk({c, n_chunk, count > 0 ? std::exp(nll / static_cast<double>(count)) : 0.0,
                runtime::now_seconds() - start});
  }
  result.seconds = runtime::now_seconds() - start;
  imatrix.chunk_count = imatrix_chunk_count(imatrix);
  if (count > 0) {
    const double mean = nll / static_cast<double>(count);
    result.ppl = std::exp(mean);
    const double var = nll2 / static_cast<double>(count) - mean * mean;
    result.ppl_stderr = var > 0 && count > 1 ? std::sqrt(var / static_cast<double>(count - 1)) * result.ppl : 0.0;
  }
  return result;
}

}  // namespace okapi::eval
