#include "compress/calibration.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/make_backend.hpp"
#include "compress/linalg.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/model_file.hpp"
#include "model/blocks.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::compress {

const InputStats* Calibration::input_of(const std::string& weight_name) const {
  const auto it = inputs.find(weight_name);
  return it == inputs.end() ? nullptr : it->second.get();
}

const ObservingOps::Replacement* ObservingOps::replacement(const model::Weight& w) const {
  if (!replacements_) return nullptr;
  const auto it = replacements_->find(std::string(w.name));
  return it == replacements_->end() ? nullptr : &it->second;
}

void ObservingOps::replaced_matmul(const model::Weight& w, const Replacement& r, const float* x, int64_t n_tokens, float* y) {
  model::Weight in{w.name, DType::F32, r.in.data(), w.n_in, r.rank};
  model::Weight out{w.name, DType::F32, r.out.data(), r.rank, w.n_out};
  mid_.resize(static_cast<size_t>(n_tokens * r.rank));
  inner_.matmul(in, x, n_tokens, mid_.data());
  inner_.matmul(out, mid_.data(), n_tokens, y);
}

void ObservingOps::observe(std::span<const std::string_view> names, const model::Weight& w, const float* x,
                           int64_t n_tokens) {
  if (w.expert >= 0) {
    observer_.expert_input(names, w.expert, x, n_tokens, w.n_in);
  } else {
    observer_.matmul_input(names, x, n_tokens, w.n_in);
  }
}

void ObservingOps::matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) {
  const std::string_view names[] = {w.name};
  observe(names, w, x, n_tokens);
  if (const Replacement* r = replacement(w)) return replaced_matmul(w, *r, x, n_tokens, y);
  inner_.matmul(w, x, n_tokens, y);
}

void ObservingOps::matmul_group(std::span<const model::MatmulTarget> targets, const float* x, int64_t n_tokens) {
  std::vector<std::string_view> names;
  for (const model::MatmulTarget& t : targets) names.push_back(t.w->name);
  if (!targets.empty()) observe(names, *targets.front().w, x, n_tokens);
  if (std::none_of(targets.begin(), targets.end(), [&](const model::MatmulTarget& t) { return replacement(*t.w); })) {
    return inner_.matmul_group(targets, x, n_tokens);
  }
  for (const model::MatmulTarget& t : targets) {
    if (const Replacement* r = replacement(*t.w)) {
      replaced_matmul(*t.w, *r, x, n_tokens, t.y);
    } else {
      inner_.matmul(*t.w, x, n_tokens, t.y);
    }
  }
}

void ObservingOps::matmul_glu(model::Activation act, const model::Weight& gate, const model::Weight& up, const float* x,
                              int64_t n_tokens, float* gate_y, float* up_y) {
  const std::string_view names[] = {gate.name, up.name};
  observe(names, gate, x, n_tokens);
  if (!replacement(gate) && !replacement(up)) return inner_.matmul_glu(act, gate, up, x, n_tokens, gate_y, up_y);
  for (const auto& [w, y] : {std::pair{&gate, gate_y}, std::pair{&up, up_y}}) {
    if (const Replacement* r = replacement(*w)) {
      replaced_matmul(*w, *r, x, n_tokens, y);
    } else {
      inner_.matmul(*w, x, n_tokens, y);
    }
  }
  inner_.glu(act, gate_y, up_y, n_tokens, gate.n_out, gate_y);
}

void ObservingOps::expert_ffns(model::Activation act, std::span<const model::ExpertRun> runs) {
  const bool replaced = std::any_of(runs.begin(), runs.end(), [&](const model::ExpertRun& r) {
    return replacement(*r.gate) || replacement(*r.up) || replacement(*r.down);
  });
  // With a replacement, run by run through this backend's own matmul_glu / matmul (they observe).
  if (replaced) return model::Ops::expert_ffns(act, runs);
  for (const model::ExpertRun& r : runs) {
    const std::string_view names[] = {r.gate->name, r.up->name};
    observe(names, *r.gate, r.x, r.n_tokens);
  }
  inner_.expert_ffns(act, runs);
  for (const model::ExpertRun& r : runs) {
    const std::string_view names[] = {r.down->name};
    observe(names, *r.down, r.g, r.n_tokens);
  }
}

void ObservingOps::rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) {
  observer_.norm_input(weight.name, x, n_rows, n);
  inner_.rmsnorm(x, weight, n_rows, n, eps, y);
}

namespace {

// Accumulates the statistics; finish() turns the sums into means.
class StatsRecorder : public ObservingOps::Observer {
 public:
  explicit StatsRecorder(int64_t n_layer) : layers_(static_cast<size_t>(n_layer)) {}

  void norm_input(std::string_view weight, const float* x, int64_t n_rows, int64_t n) override {
    const auto [layer, kind] = layer_and_kind(std::string(weight));
    if (layer < 0 || static_cast<size_t>(layer) >= layers_.size()) return;
    if (kind != "attn_norm" && kind != "ffn_norm") return;
    // Sink tokens: residual norms above mean + 3 sd within this batch.
    std::vector<double> norms(static_cast<size_t>(n_rows));
    double sum = 0, sum2 = 0;
    for (int64_t t = 0; t < n_rows; ++t) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[t * n + i]) * x[t * n + i];
      norms[static_cast<size_t>(t)] = std::sqrt(s);
      sum += norms[static_cast<size_t>(t)];
      sum2 += norms[static_cast<size_t>(t)] * norms[static_cast<size_t>(t)];
    }
    const double mean = sum / static_cast<double>(n_rows);
    const double sd = std::sqrt(std::max(0.0, sum2 / static_cast<double>(n_rows) - mean * mean));
    if (residual_.empty()) residual_.assign(static_cast<size_t>(n * n), 0.0);
    if (residual_.size() == static_cast<size_t>(n * n)) {
      block_.assign(static_cast<size_t>(n * n), 0.0f);
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<blasint>(n), static_cast<blasint>(n_rows), 1.0f, x,
                  static_cast<blasint>(n), 0.0f, block_.data(), static_cast<blasint>(n));
      for (size_t i = 0; i < block_.size(); ++i) residual_[i] += block_[i];
      residual_rows_ += n_rows;
    }
    sink_mask_.assign(static_cast<size_t>(n_rows), 0);
    for (int64_t t = 0; t < n_rows; ++t) sink_mask_[static_cast<size_t>(t)] = n_rows > 1 && norms[static_cast<size_t>(t)] > mean + 3 * sd;
    if (kind != "attn_norm") return;
    Residual& r = layers_[static_cast<size_t>(layer)];
    if (r.sum.empty()) r.sum.assign(static_cast<size_t>(n), 0.0);
    for (int64_t t = 0; t < n_rows; ++t) {
      for (int64_t i = 0; i < n; ++i) r.sum[static_cast<size_t>(i)] += x[t * n + i];
      r.sum_squares += norms[static_cast<size_t>(t)] * norms[static_cast<size_t>(t)];
      r.sinks += sink_mask_[static_cast<size_t>(t)];
    }
    r.rows += n_rows;
  }

  void matmul_input(std::span<const std::string_view> weights, const float* x, int64_t n_tokens, int64_t n) override {
    if (weights.empty() || !weights.front().starts_with("blk.")) return;
    const std::string key(weights.front());
    std::shared_ptr<InputStats>& stats = inputs_[key];
    if (!stats) {
      stats = std::make_shared<InputStats>();
      stats->n = n;
      stats->second_moment.assign(static_cast<size_t>(n * n), 0.0);
      stats->mean_abs.assign(static_cast<size_t>(n), 0.0);
      stats->sink_mean.assign(static_cast<size_t>(n), 0.0);
    }
    for (const std::string_view w : weights.subspan(1)) inputs_[std::string(w)] = stats;
    // The row ranges of a fused tensor (phi3) read the same input: so does the stored tensor.
    for (const std::string_view w : weights) {
      if (const std::string_view stored = model::stored_tensor_name(w); stored != w) inputs_[std::string(stored)] = stats;
    }
    if (stats->n != n) return;
    // xᵀx of this batch in float (OpenBLAS), summed into doubles: batches are at most a few
    // hundred rows, so float holds each batch's sum well.
    block_.assign(static_cast<size_t>(n * n), 0.0f);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<blasint>(n), static_cast<blasint>(n_tokens), 1.0f, x,
                static_cast<blasint>(n), 0.0f, block_.data(), static_cast<blasint>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) stats->second_moment[static_cast<size_t>(i * n + j)] += block_[static_cast<size_t>(i * n + j)];
    const bool masked = static_cast<int64_t>(sink_mask_.size()) == n_tokens;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* row = x + t * n;
      for (int64_t i = 0; i < n; ++i) stats->mean_abs[static_cast<size_t>(i)] += std::fabs(row[i]);
      if (masked && sink_mask_[static_cast<size_t>(t)]) {
        for (int64_t i = 0; i < n; ++i) stats->sink_mean[static_cast<size_t>(i)] += row[i];
        ++stats->sink_tokens;
      }
    }
    stats->tokens += n_tokens;
  }

  Calibration finish(int64_t tokens) {
    Calibration c;
    c.tokens = tokens;
    std::vector<InputStats*> done;
    for (auto& [name, stats] : inputs_) {
      c.inputs[name] = stats;
      if (std::find(done.begin(), done.end(), stats.get()) != done.end()) continue;
      done.push_back(stats.get());
      const int64_t n = stats->n;
      const double inv = stats->tokens > 0 ? 1.0 / static_cast<double>(stats->tokens) : 0.0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = i; j < n; ++j) {
          const double v = stats->second_moment[static_cast<size_t>(i * n + j)] * inv;
          stats->second_moment[static_cast<size_t>(i * n + j)] = v;
          stats->second_moment[static_cast<size_t>(j * n + i)] = v;
        }
        stats->mean_abs[static_cast<size_t>(i)] *= inv;
        if (stats->sink_tokens > 0) stats->sink_mean[static_cast<size_t>(i)] /= static_cast<double>(stats->sink_tokens);
      }
    }
    if (residual_rows_ > 0) {
      const auto n = static_cast<int64_t>(std::sqrt(static_cast<double>(residual_.size())));
      c.residual_second_moment.resize(residual_.size());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) {
          const double v = residual_[static_cast<size_t>(i * n + j)] / static_cast<double>(residual_rows_);
          c.residual_second_moment[static_cast<size_t>(i * n + j)] = v;
          c.residual_second_moment[static_cast<size_t>(j * n + i)] = v;
        }
    }
    for (const Residual& r : layers_) {
      LayerActivity a;
      if (r.rows > 0) {
        double mean_norm2 = 0;
        for (const double s : r.sum) mean_norm2 += (s / static_cast<double>(r.rows)) * (s / static_cast<double>(r.rows));
        a.residual_variance = (r.sum_squares / static_cast<double>(r.rows) - mean_norm2) / static_cast<double>(r.sum.size());
      }
      a.sink_tokens = r.sinks;
      c.layers.push_back(a);
    }
    return c;
  }

 private:
  struct Residual {
    std::vector<double> sum;
    double sum_squares = 0;
    int64_t rows = 0, sinks = 0;
  };
  std::vector<Residual> layers_;
  std::map<std::string, std::shared_ptr<InputStats>> inputs_;
  std::vector<float> block_;
  std::vector<uint8_t> sink_mask_;
  std::vector<double> residual_;  // upper triangle of Σ h hᵀ
  int64_t residual_rows_ = 0;
};

}  // namespace

std::vector<std::vector<int32_t>> calibration_chunks(const model::Model& model, const std::string& text,
                                                     const CalibrationOptions& options) {
  const tokenizer::Tokenizer tokenizer(tokenizer::Vocab::from_gguf(model.file()));
  tokenizer::EncodeOptions encode;
  encode.add_special = true;
  encode.parse_special = false;
  const std::vector<int32_t> tokens = tokenizer.encode(text, encode);
  const int64_t trained = model.hparams().n_ctx_train > 0 ? model.hparams().n_ctx_train : options.n_ctx;
  const int64_t n_ctx = std::min<int64_t>({options.n_ctx, trained, static_cast<int64_t>(tokens.size())});
  if (n_ctx < 64 || static_cast<int64_t>(tokens.size()) < 128) {
    throw_error("compress: the calibration text holds {} tokens; at least 128 are needed", tokens.size());
  }
  const int64_t n_chunks = std::max<int64_t>(1, std::min<int64_t>(static_cast<int64_t>(tokens.size()), options.max_tokens) / n_ctx);
  const tokenizer::TokenId bos = tokenizer.vocab().bos;
  std::vector<std::vector<int32_t>> chunks;
  for (int64_t c = 0; c < n_chunks; ++c) {
    chunks.emplace_back(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    if (tokenizer.vocab().add_bos && bos != tokenizer::kNoToken) chunks.back()[0] = bos;
  }
  return chunks;
}

void run_chunk(const model::Model& model, model::Ops& ops, kv::KvStore& kv, const std::vector<int32_t>& chunk) {
  std::vector<int32_t> positions(chunk.size());
  for (size_t i = 0; i < chunk.size(); ++i) positions[i] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(model.n_vocab()));
  model.forward(ops, kv, chunk, positions, model::LogitRows::Last, logits.data());
}

Calibration calibrate(const std::filesystem::path& model_path, const std::string& text, const CalibrationOptions& options) {
  std::unique_ptr<model::Model> model = model::Model::load(gguf::open_model(model_path));
  const model::HParams& hp = model->hparams();
  const std::vector<std::vector<int32_t>> chunks = calibration_chunks(*model, text, options);
  use_single_threaded_blas();
  ThreadPool pool(options.threads);
  StatsRecorder recorder(hp.n_layer);
  backend::BackendOptions cpu_options;
  cpu_options.pool = &pool;
  const std::unique_ptr<model::Ops> cpu = backend::make_backend(cpu_options);
  ObservingOps ops(*cpu, recorder);
  ops.prepare(model->weights());
  const auto n_ctx = static_cast<int64_t>(chunks.front().size());
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
  std::unique_ptr<kv::KvStore> kv = ops.make_kv(shape, model::KvTypes{});
  for (const auto& chunk : chunks) run_chunk(*model, ops, *kv, chunk);
  return recorder.finish(static_cast<int64_t>(chunks.size()) * n_ctx);
}

}  // namespace okapi::compress
