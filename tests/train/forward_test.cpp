// The trainable model's forward (Transformer::forward_logits) against (1) okapi's inference
// engine on llama2.c's trained stories260K (.bin weights loaded into the training layout, the
// engine reading the .gguf that llama.cpp's converter made of the same checkpoint), (2) the
// engine on tiny random untied GQA models written to GGUF here, and (3) an independent
// plain-loop double reference written below from the Llama-2 definition.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.hpp"
#include "format/gguf.hpp"
#include "format/llama2c.hpp"
#include "backend/cpu_ops.hpp"
#include "kv/cache_type.hpp"
#include "kv/kv_store.hpp"
#include "model/evaluate.hpp"
#include "model/model.hpp"
#include "support/paths.hpp"
#include "train/model.hpp"

namespace okapi::test {
namespace {

using namespace okapi::train;

std::vector<int32_t> some_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::vector<float> engine_logits(const gguf::File& file, const std::vector<int32_t>& tokens) {
  auto model = model::Model::load(file);
  const model::HParams& hp = model->hparams();
  ThreadPool pool(2);
  backend::CpuOps ops(&pool);
  auto kv = kv::make_store({hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v,
                            static_cast<int64_t>(tokens.size())}, kv::CacheTypes{}, isa());
  return model::evaluate_all(*model, ops, *kv, tokens, 512);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

TEST(TrainForward, MatchesEngineOnStories260K) {
  const auto ckpt = llama2c::Checkpoint::open(repo_dir() / "models/stories260K.bin");
  const llama2c::Config& h = ckpt.config();
  ModelConfig config = config_by_name("stories260K", h.vocab_size);
  // the named config is llama2.c's shape
  EXPECT_EQ(config.dim, h.dim);
  EXPECT_EQ(config.hidden_dim, h.hidden_dim);
  EXPECT_EQ(config.n_layers, h.n_layers);
  EXPECT_EQ(config.n_heads, h.n_heads);
  EXPECT_EQ(config.n_kv_heads, h.n_kv_heads);
  EXPECT_EQ(config.seq_len, h.seq_len);
  EXPECT_TRUE(h.shared_classifier);
  ThreadPool pool(2);
  Transformer model(config, &pool);
  const ParameterLayout& layout = model.layout();
  std::vector<float> params(layout.total(), 0.0f);
  const auto put = [&](const std::string& name, llama2c::Weight w, int layer) {
    const TensorSlot& slot = layout.find(name);
    const std::vector<float> values = ckpt.values(w, layer);
    ASSERT_EQ(values.size(), slot.size()) << name;
    std::copy(values.begin(), values.end(), params.begin() + static_cast<std::ptrdiff_t>(slot.offset));
  };
  using W = llama2c::Weight;
  put("token_embd.weight", W::TokenEmbedding, -1);
  put("output_norm.weight", W::RmsFinal, -1);
  for (int l = 0; l < h.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    put(b + "attn_norm.weight", W::RmsAtt, l);
    put(b + "attn_q.weight", W::Wq, l);
    put(b + "attn_k.weight", W::Wk, l);
    put(b + "attn_v.weight", W::Wv, l);
    put(b + "attn_output.weight", W::Wo, l);
    put(b + "ffn_norm.weight", W::RmsFfn, l);
    put(b + "ffn_gate.weight", W::W1, l);
    put(b + "ffn_down.weight", W::W2, l);
    put(b + "ffn_up.weight", W::W3, l);
  }
  const std::vector<int32_t> tokens = some_tokens(96, config.vocab_size, 1);
  std::vector<float> ours(tokens.size() * static_cast<size_t>(config.vocab_size));
  model.forward_logits(params, tokens, ours);
  const std::vector<float> engine = engine_logits(gguf::File::open(repo_dir() / "models/stories260K.gguf"), tokens);
  const double diff = max_abs_diff(ours, engine);
  std::printf("  stories260K, 96 tokens: max|logit diff| vs engine %.3g\n", diff);
  EXPECT_LE(diff, 1e-4);
}

ModelConfig tiny_config(bool tied, int64_t n_kv_heads) {
  ModelConfig c;
  c.name = "tiny";
  c.dim = 32;
  c.hidden_dim = 72;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = n_kv_heads;
  c.vocab_size = 40;
  c.seq_len = 24;
  c.tied_embeddings = tied;
  return c;
}

std::vector<float> random_params(const ParameterLayout& layout, uint64_t seed) {
  std::vector<float> p(layout.total());
  initialize(layout, Init::Llama2c, seed, p);
  for (float& x : p) x *= 10.0f;  // larger than 0.02 so that attention is not uniform
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> norm(0.5f, 1.5f);
  for (const TensorSlot& s : layout.slots()) {
    if (s.role != TensorRole::Norm) continue;
    for (size_t i = s.offset; i < s.offset + s.size(); ++i) p[i] = norm(rng);
  }
  return p;
}

// The model written as a llama GGUF (F32; ggml shape [cols, rows]).
std::vector<uint8_t> to_gguf(const ModelConfig& c, const ParameterLayout& layout, const std::vector<float>& params) {
  gguf::Writer w;
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set("general.architecture", "llama");
  w.set("llama.context_length", u32(c.seq_len));
  w.set("llama.embedding_length", u32(c.dim));
  w.set("llama.block_count", u32(c.n_layers));
  w.set("llama.feed_forward_length", u32(c.hidden_dim));
  w.set("llama.attention.head_count", u32(c.n_heads));
  w.set("llama.attention.head_count_kv", u32(c.n_kv_heads));
  w.set("llama.rope.dimension_count", u32(c.head_dim()));
  w.set("llama.rope.freq_base", c.rope_theta);
  w.set("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  for (const TensorSlot& s : layout.slots()) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(params.data() + s.offset);
    std::vector<int64_t> shape = s.rows == 1 ? std::vector<int64_t>{s.cols} : std::vector<int64_t>{s.cols, s.rows};
    w.add_tensor(s.name, DType::F32, shape, std::vector<uint8_t>(bytes, bytes + s.size() * sizeof(float)));
  }
  return w.to_bytes();
}

TEST(TrainForward, MatchesEngineOnRandomModels) {
  for (const bool tied : {true, false}) {
    for (const int64_t kv_heads : {4, 2, 1}) {
      const ModelConfig config = tiny_config(tied, kv_heads);
      ThreadPool pool(2);
      Transformer model(config, &pool);
      const std::vector<float> params = random_params(model.layout(), 7 + static_cast<uint64_t>(kv_heads));
      const std::vector<int32_t> tokens = some_tokens(config.seq_len, config.vocab_size, 2);
      std::vector<float> ours(tokens.size() * static_cast<size_t>(config.vocab_size));
      model.forward_logits(params, tokens, ours);
      const std::vector<uint8_t> bytes = to_gguf(config, model.layout(), params);
      const double diff = max_abs_diff(ours, engine_logits(gguf::File::parse(bytes), tokens));
      std::printf("  tiny %s, %lld kv heads: max|logit diff| vs engine %.3g\n", tied ? "tied" : "untied",
                  static_cast<long long>(kv_heads), diff);
      EXPECT_LE(diff, 1e-4);
    }
  }
}

// ---- an independent reference: plain loops in double, straight from the definition ----
using Matrix = std::vector<double>;

std::vector<double> ref_rmsnorm(const std::vector<double>& x, const float* g, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
  return y;
}

std::vector<double> ref_matvec(const float* w, int64_t rows, int64_t cols, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) y[r] += double(w[r * cols + c]) * x[c];
  }
  return y;
}

// llama2.c's rope: rotate adjacent pairs of each head by pos * theta^(-i/head_dim), i even.
void ref_rope(std::vector<double>& v, int64_t head_dim, int64_t pos, double theta) {
  for (size_t i = 0; i < v.size(); i += 2) {
    const auto j = static_cast<int64_t>(i) % head_dim;
    const double angle = double(pos) / std::pow(theta, double(j) / double(head_dim));
    const double a = v[i], b = v[i + 1];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + 1] = a * std::sin(angle) + b * std::cos(angle);
  }
}

std::vector<double> reference_logits(const ModelConfig& c, const ParameterLayout& layout,
                                     const std::vector<float>& p, const std::vector<int32_t>& tokens) {
  const auto at = [&](const std::string& name) { return p.data() + layout.find(name).offset; };
  const int64_t d = c.dim, hd = c.head_dim(), kvd = c.kv_dim(), T = static_cast<int64_t>(tokens.size());
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) x[t].assign(at("token_embd.weight") + tokens[t] * d, at("token_embd.weight") + (tokens[t] + 1) * d);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const auto h = ref_rmsnorm(x[t], at(b + "attn_norm.weight"), c.norm_eps);
      q[t] = ref_matvec(at(b + "attn_q.weight"), d, d, h);
      k[t] = ref_matvec(at(b + "attn_k.weight"), kvd, d, h);
      v[t] = ref_matvec(at(b + "attn_v.weight"), kvd, d, h);
      ref_rope(q[t], hd, t, c.rope_theta);
      ref_rope(k[t], hd, t, c.rope_theta);
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<size_t>(d), 0.0);
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const int64_t kh = h / (c.n_heads / c.n_kv_heads);
        std::vector<double> score(static_cast<size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          double dotp = 0;
          for (int64_t i = 0; i < hd; ++i) dotp += q[t][h * hd + i] * k[s][kh * hd + i];
          score[s] = dotp / std::sqrt(double(hd));
          mx = std::max(mx, score[s]);
        }
        for (auto& sc : score) sum += (sc = std::exp(sc - mx));
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t i = 0; i < hd; ++i) att[h * hd + i] += score[s] / sum * v[s][kh * hd + i];
        }
      }
      const auto o = ref_matvec(at(b + "attn_output.weight"), d, d, att);
      for (int64_t i = 0; i < d; ++i) x[t][i] += o[i];
      const auto h = ref_rmsnorm(x[t], at(b + "ffn_norm.weight"), c.norm_eps);
      auto g = ref_matvec(at(b + "ffn_gate.weight"), c.hidden_dim, d, h);
      const auto u = ref_matvec(at(b + "ffn_up.weight"), c.hidden_dim, d, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto down = ref_matvec(at(b + "ffn_down.weight"), d, c.hidden_dim, g);
      for (int64_t i = 0; i < d; ++i) x[t][i] += down[i];
    }
  }
  const float* out = at(c.tied_embeddings ? "token_embd.weight" : "output.weight");
  std::vector<double> logits;
  for (int64_t t = 0; t < T; ++t) {
    const auto y = ref_matvec(out, c.vocab_size, d, ref_rmsnorm(x[t], at("output_norm.weight"), c.norm_eps));
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

TEST(TrainForward, MatchesPlainLoopReference) {
  for (const bool tied : {true, false}) {
    for (const int64_t kv_heads : {4, 2}) {
      const ModelConfig config = tiny_config(tied, kv_heads);
      Transformer model(config, nullptr);
      const std::vector<float> params = random_params(model.layout(), 3);
      const std::vector<int32_t> tokens = some_tokens(17, config.vocab_size, 4);
      std::vector<float> ours(tokens.size() * static_cast<size_t>(config.vocab_size));
      model.forward_logits(params, tokens, ours);
      const std::vector<double> ref = reference_logits(config, model.layout(), params, tokens);
      double diff = 0, mag = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        diff = std::max(diff, std::fabs(ref[i] - double(ours[i])));
        mag = std::max(mag, std::fabs(ref[i]));
      }
      std::printf("  %s, %lld kv heads: max|logit diff| vs double reference %.3g (max|logit| %.3g)\n",
                  tied ? "tied" : "untied", static_cast<long long>(kv_heads), diff, mag);
      EXPECT_LE(diff, 1e-4 * std::max(1.0, mag));
    }
  }
}

}  // namespace
}  // namespace okapi::test
