#include "model/moe.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace okapi::model {

namespace {

// Workspace slots of the MoE block: above Scratch's, below the low-rank projection's (64).
enum Slot : size_t { kLogits = 32, kWeights, kInputs, kGate, kUp, kOutputs, kShared, kSharedGate };

constexpr float kOaiAlpha = 1.702f, kOaiLimit = 7.0f;  // llama.cpp's LLM_FFN_SWIGLU_OAI_MOE

bool plain(const Projection& p) { return !p.bias && !p.scale && !p.in; }

// y = down · act(gate · x, up · x) over n rows of x (an expert, or the shared expert); g and u
// are scratch of n x gate.w.n_out.
void gated_ffn(Ops& ops, const Projection& gate, const Projection& up, const Projection& down, MoeActivation act,
               const float* x, int64_t n, float* g, float* u, float* y) {
  const int64_t n_ff = gate.w.n_out;
  if (act == MoeActivation::SiLU && plain(gate) && plain(up)) {
    ops.matmul_glu(Activation::SiLU, gate.w, up.w, x, n, g, u);
  } else {
    const Projection* gate_up[] = {&gate, &up};
    float* const gate_up_out[] = {g, u};
    project_group(ops, gate_up, gate_up_out, 2, x, n);
    if (act == MoeActivation::SiLU)
      ops.glu(Activation::SiLU, g, u, n, n_ff, g);
    else
      ops.swiglu_oai(g, u, n, n_ff, kOaiAlpha, kOaiLimit, g);
  }
  project(ops, down, g, n, y);
}

}  // namespace

void moe_block(Ops& ops, const HParams& hp, const MoeWeights& w, const MoeConfig& c, Scratch& s) {
  const int64_t T = s.n_tokens, n_embd = hp.n_embd, n_ff = w.n_ff_exp;
  const int64_t n_expert = c.routing.n_expert, k = c.routing.n_used;
  const auto rows = static_cast<size_t>(T * k);
  Workspace& ws = ops.workspace();
  ops.rmsnorm(s.x.data(), w.norm, T, n_embd, hp.norm_eps, s.h.data());

  // Route: each token's k experts and weights.
  float* logits = ws.floats(kLogits, static_cast<size_t>(T * n_expert));
  project(ops, w.router, s.h.data(), T, logits);
  MoeRouting routing = c.routing;
  routing.selection_bias = w.probs_bias ? w.probs_bias.f32() : nullptr;
  std::vector<int32_t> selected(rows);
  float* weights = ws.floats(kWeights, rows);
  ops.route_experts(logits, T, routing, selected.data(), weights);

  // Group the (token, expert) pairs by expert: expert e's inputs are rows [first[e], first[e+1]).
  std::vector<int32_t> first(static_cast<size_t>(n_expert + 1), 0);
  for (const int32_t e : selected) {
    if (e < 0 || e >= n_expert) throw_error("route_experts chose expert {} of {}", e, n_expert);
    ++first[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < n_expert; ++e) first[e + 1] += first[e];
  std::vector<int32_t> next(first.begin(), first.end() - 1), token_of(rows), row_of(rows);
  for (size_t i = 0; i < rows; ++i) {
    const int32_t r = next[static_cast<size_t>(selected[i])]++;
    token_of[static_cast<size_t>(r)] = static_cast<int32_t>(i / static_cast<size_t>(k));
    row_of[i] = r;
  }
  float* inputs = ws.floats(kInputs, rows * static_cast<size_t>(n_embd));
  float* gate = ws.floats(kGate, rows * static_cast<size_t>(n_ff));
  float* up = ws.floats(kUp, rows * static_cast<size_t>(n_ff));
  float* outputs = ws.floats(kOutputs, rows * static_cast<size_t>(n_embd));
  ops.gather_rows(s.h.data(), n_embd, token_of, inputs);

  // Each chosen expert over the tokens that chose it: plain SiLU experts in one Ops::expert_ffns
  // call (the backend may run them as one parallel loop), others one by one.
  const bool plain_experts = c.activation == MoeActivation::SiLU &&
                             std::all_of(w.gate.begin(), w.gate.end(), plain) &&
                             std::all_of(w.up.begin(), w.up.end(), plain) && std::all_of(w.down.begin(), w.down.end(), plain);
  std::vector<ExpertRun> runs;
  for (int64_t e = 0; e < n_expert; ++e) {
    const int64_t begin = first[static_cast<size_t>(e)], count = first[static_cast<size_t>(e) + 1] - begin;
    if (count == 0) continue;
    const auto i = static_cast<size_t>(e);
    if (plain_experts) {
      runs.push_back({&w.gate[i].w, &w.up[i].w, &w.down[i].w, inputs + begin * n_embd, count, gate + begin * n_ff,
                      up + begin * n_ff, outputs + begin * n_embd});
    } else {
      gated_ffn(ops, w.gate[i], w.up[i], w.down[i], c.activation, inputs + begin * n_embd, count, gate + begin * n_ff,
                up + begin * n_ff, outputs + begin * n_embd);
    }
  }
  if (!runs.empty()) ops.expert_ffns(Activation::SiLU, runs);
  ops.combine_experts(outputs, n_embd, row_of, weights, k, T, s.o.data());

  if (w.shared_gate.w) {
    float* shared = ws.floats(kShared, static_cast<size_t>(T * n_embd));
    gated_ffn(ops, w.shared_gate, w.shared_up, w.shared_down, MoeActivation::SiLU, s.h.data(), T, s.gate.data(),
              s.up.data(), shared);
    if (w.shared_router) {
      float* shared_gate = ws.floats(kSharedGate, static_cast<size_t>(T));
      ops.matmul(w.shared_router, s.h.data(), T, shared_gate);
      ops.add_sigmoid_gated(shared, shared_gate, T, n_embd, s.o.data());
    } else {
      ops.add(s.o.data(), shared, T * n_embd, s.o.data());
    }
  }
}

MoeWeights DecoderModel::moe_weights(const std::string& prefix, const MoeParts& parts) {
  const int64_t n_embd = hparams_.n_embd, n_expert = parts.n_expert, n_ff = parts.n_ff_exp;
  const auto part = [](bool required) { return required ? Part::Required : Part::None; };
  MoeWeights w;
  w.n_ff_exp = n_ff;
  w.n_ff_shexp = parts.n_ff_shexp;
  w.norm = tensor(prefix + parts.norm + ".weight", {n_embd});
  w.router = projection(prefix + "ffn_gate_inp", {n_embd, n_expert}, {.bias = part(parts.router_bias)});
  // Expert e of a 3-D [n_in, n_out, n_expert] tensor is its e-th block of n_out rows; a bias
  // [n_out, n_expert] likewise.
  const auto experts = [&](const std::string& name, int64_t n_in, int64_t n_out, std::vector<Projection>& out) {
    const Weight all = tensor(prefix + name + ".weight", {n_in, n_out, n_expert});
    const Weight bias = parts.expert_biases ? tensor(prefix + name + ".bias", {n_out, n_expert}) : Weight{};
    if (bias && bias.type != DType::F32)
      throw_error("{}: '{}' is {}, expert biases must be f32", file_.name(), bias.name, dtype_name(bias.type));
    if (!all) return;  // recorded: check_tensors() reports it
    const std::optional<size_t> row = row_bytes(all.type, n_in);
    if (!row) throw_error("{}: '{}' rows of {} {} values are not whole blocks", file_.name(), all.name, n_in,
                          dtype_name(all.type));
    const size_t expert_bytes = *row * static_cast<size_t>(n_out);
    out.resize(static_cast<size_t>(n_expert));
    for (int64_t e = 0; e < n_expert; ++e) {
      Projection& p = out[static_cast<size_t>(e)];
      p.w = all;
      p.w.data = static_cast<const uint8_t*>(all.data) + static_cast<size_t>(e) * expert_bytes;
      p.w.n_out = n_out;
      p.w.expert = static_cast<int32_t>(e);
      uses_in_matmul(p.w);
      if (bias) {
        p.bias = bias;
        p.bias.data = bias.f32() + e * n_out;
        p.bias.n_in = n_out;
        p.bias.n_out = 1;
      }
    }
  };
  experts("ffn_gate_exps", n_embd, n_ff, w.gate);
  experts("ffn_up_exps", n_embd, n_ff, w.up);
  experts("ffn_down_exps", n_ff, n_embd, w.down);
  if (parts.probs_bias) w.probs_bias = tensor(prefix + "exp_probs_b.bias", {n_expert});
  if (parts.n_ff_shexp > 0) {
    w.shared_gate = projection(prefix + "ffn_gate_shexp", {n_embd, parts.n_ff_shexp}, {});
    w.shared_up = projection(prefix + "ffn_up_shexp", {n_embd, parts.n_ff_shexp}, {});
    w.shared_down = projection(prefix + "ffn_down_shexp", {parts.n_ff_shexp, n_embd}, {});
  }
  if (parts.shared_router) {
    w.shared_router = tensor(prefix + "ffn_gate_inp_shexp.weight", {n_embd});
    uses_in_matmul(w.shared_router);
  }
  return w;
}

}  // namespace okapi::model
