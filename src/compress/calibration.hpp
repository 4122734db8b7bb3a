// Calibration for the data-aware compression methods: the model runs over a text on the CPU
// while an observing backend records, for every projection's input x, the second moment
// E[x xᵀ] (SVD-LLM's and Basis Sharing's whitening), the mean |x| per channel (ASVD's scaling)
// and the mean of the inputs of attention-sink tokens (seed 003's sink bypass); and for every
// layer, the residual stream's per-feature variance (seed 003's MCR phases).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.hpp"
#include "model/ops.hpp"

namespace okapi::compress {

// What one projection input saw. Projections fed the same x (Q/K/V, gate/up) share one.
struct InputStats {
  int64_t n = 0;        // input width
  int64_t tokens = 0;   // rows accumulated
  std::vector<double> second_moment;  // n x n, E[x xᵀ] (both triangles filled by finish())
  std::vector<double> mean_abs;       // n, E|x_j|
  std::vector<double> sink_mean;      // n, mean x over sink tokens (zeros when none)
  int64_t sink_tokens = 0;
};

struct LayerActivity {
  double residual_variance = 0;  // E‖h − h̄‖² / d of the residual entering the layer
  int64_t sink_tokens = 0;       // tokens whose residual norm is above mean + 3 sd of their batch
};

struct Calibration {
  int64_t tokens = 0;
  std::map<std::string, std::shared_ptr<InputStats>> inputs;  // by weight tensor name
  std::vector<LayerActivity> layers;
  // E[h hᵀ] of the residual stream (d x d), pooled over every attention and FFN norm's input:
  // the orthogonal gauge's PCA basis (compress/gauge.hpp).
  std::vector<double> residual_second_moment;
  const InputStats* input_of(const std::string& weight_name) const;  // nullptr when not seen
};

struct CalibrationOptions {
  int64_t max_tokens = 8192;  // tokens of the text run (whole chunks of n_ctx)
  int64_t n_ctx = 512;        // capped at the model's trained context
  int threads = 1;
};

// The token chunks a calibration runs: the text tokenized with BOS, cut into whole chunks of
// n_ctx (capped by the model's trained context), each starting with BOS when the vocab adds one.
std::vector<std::vector<int32_t>> calibration_chunks(const model::Model& model, const std::string& text,
                                                     const CalibrationOptions& options);

// One forward pass of a chunk at positions 0.. (logits of the last token only).
void run_chunk(const model::Model& model, model::Ops& ops, kv::KvStore& kv, const std::vector<int32_t>& chunk);

// Runs `model_path` over `text` (tokenized with BOS, cut into chunks of n_ctx) and returns the
// statistics. Throws okapi::Error when the text holds fewer than 2 * 64 tokens.
Calibration calibrate(const std::filesystem::path& model_path, const std::string& text, const CalibrationOptions& options);

// A backend that wraps another (CpuOps, ExactOps, ...) and shows every mat-mul input and every
// RMSNorm input to a callback, by the name of the weight involved, before the wrapped backend
// computes it; every other operation is passed through unchanged. Grouped mat-muls (Q/K/V,
// gate/up) are shown once, with the names of all their weights. Weights may be replaced by
// low-rank factors held in memory (out · (in · x), two mat-muls of the wrapped backend on
// unprepared f32 weights), so a partly compressed model runs without a file.
class ObservingOps : public model::Ops {
 public:
  struct Replacement {
    int64_t rank = 0;
    std::vector<float> in, out;  // rank x n_in, n_out x rank, row-major
  };
  struct Observer {
    virtual ~Observer() = default;
    virtual void matmul_input(std::span<const std::string_view> weights, const float* x, int64_t n_tokens, int64_t n) = 0;
    virtual void norm_input(std::string_view weight, const float* x, int64_t n_rows, int64_t n) = 0;
    // The input of expert `expert` of 3-D MoE weights (model::Weight::expert; `weights` name the
    // whole tensors): only the rows routed to that expert. By default shown as a matmul input.
    virtual void expert_input(std::span<const std::string_view> weights, int64_t expert, const float* x,
                              int64_t n_tokens, int64_t n) {
      (void)expert;
      matmul_input(weights, x, n_tokens, n);
    }
  };
  // `inner` and `observer` must outlive this object.
  ObservingOps(model::Ops& inner, Observer& observer) : inner_(inner), observer_(observer) {}

  void prepare(const model::WeightSet& weights) override { inner_.prepare(weights); }
  std::unique_ptr<kv::KvStore> make_kv(const kv::KvShape& shape, const model::KvTypes& types) override {
    return inner_.make_kv(shape, types);
  }

  void matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) override;
  void matmul_group(std::span<const model::MatmulTarget> targets, const float* x, int64_t n_tokens) override;
  void matmul_glu(model::Activation act, const model::Weight& gate, const model::Weight& up, const float* x,
                  int64_t n_tokens, float* gate_y, float* up_y) override;
  void rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) override;
  // Each run's gate/up input and down input (the activation) shown as expert inputs; the wrapped
  // backend runs the experts (its one parallel loop) unless a replacement applies.
  void expert_ffns(model::Activation act, std::span<const model::ExpertRun> runs) override;
  void route_experts(const float* logits, int64_t n_tokens, const model::MoeRouting& routing, int32_t* selected,
                     float* weights) override {
    inner_.route_experts(logits, n_tokens, routing, selected, weights);
  }
  void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) override {
    inner_.gather_rows(x, n, rows, out);
  }
  void combine_experts(const float* y, int64_t n, std::span<const int32_t> rows, const float* weights, int64_t n_used,
                       int64_t n_tokens, float* out) override {
    inner_.combine_experts(y, n, rows, weights, n_used, n_tokens, out);
  }
  void add_sigmoid_gated(const float* y, const float* gate, int64_t n_tokens, int64_t n, float* out) override {
    inner_.add_sigmoid_gated(y, gate, n_tokens, n, out);
  }
  void swiglu_oai(const float* gate, const float* up, int64_t n_rows, int64_t n, float alpha, float limit,
                  float* out) override {
    inner_.swiglu_oai(gate, up, n_rows, n, alpha, limit, out);
  }

  void add_bias(const model::Weight& bias, float* x, int64_t n_tokens) override { inner_.add_bias(bias, x, n_tokens); }
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
            const kernels::RopeConfig& config) override {
    inner_.rope(x, n_tokens, n_heads, head_dim, positions, config);
  }
  void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                std::span<const int32_t> positions) override {
    inner_.store_kv(kv, layer, k, v, positions);
  }
  void attention(const kv::KvStore& kv, const model::AttentionConfig& config, const float* q,
                 std::span<const int32_t> positions, float* out) override {
    inner_.attention(kv, config, q, positions, out);
  }
  void attention_runs(std::span<const model::AttentionRun> runs, const model::AttentionConfig& config) override {
    inner_.attention_runs(runs, config);
  }
  void glu(model::Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) override {
    inner_.glu(act, gate, up, n_rows, n, out);
  }
  void add(const float* a, const float* b, int64_t n, float* out) override { inner_.add(a, b, n, out); }
  void mul(const float* a, const float* b, int64_t n, float* out) override { inner_.mul(a, b, n, out); }
  void scale(const float* a, float s, int64_t n, float* out) override { inner_.scale(a, s, n, out); }
  void softcap(float* x, int64_t n, float cap) override { inner_.softcap(x, n, cap); }
  void get_rows(const model::Weight& table, std::span<const int32_t> ids, float* out) override {
    inner_.get_rows(table, ids, out);
  }

  // Replacements apply while enabled; `replacements` is owned by the caller.
  void set_replacements(const std::map<std::string, Replacement>* replacements) { replacements_ = replacements; }

 private:
  const Replacement* replacement(const model::Weight& w) const;
  void observe(std::span<const std::string_view> names, const model::Weight& w, const float* x, int64_t n_tokens);
  void replaced_matmul(const model::Weight& w, const Replacement& r, const float* x, int64_t n_tokens, float* y);
  model::Ops& inner_;
  Observer& observer_;
  std::vector<float> mid_;
  const std::map<std::string, Replacement>* replacements_ = nullptr;
};

}  // namespace okapi::compress
