// The mixture-of-experts FFN block, as llama.cpp's build_moe_ffn computes it:
//   h = rms(x, norm); logits = router · h (+ router bias)
//   per token: the top-k experts and their weights (Ops::route_experts: softmax or sigmoid gating,
//   optional selection bias, normalization, scale)
//   y_e = down_e · act(gate_e · h + b, up_e · h + b) + b   for each chosen expert e
//   o = sum over the token's experts, in top-k order, of weight_e * y_e
//   (+ shared expert: o += [sigmoid(shared_router · h)] * down_s · silu(gate_s · h) * (up_s · h))
// Each expert is its own set of Weights sliced from the 3-D ffn_{gate,up,down}_exps tensors, so
// a backend packs it like any other weight. A batch is grouped by expert: every expert runs one
// matmul over the tokens that chose it (decode: only the chosen experts' rows are read). Token
// rows of a matmul do not depend on each other and each token's sum has a fixed order, so a
// token's output is the same bits alone or in any batch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/blocks.hpp"

namespace okapi::model {

enum class MoeActivation {
  SiLU,       // silu(gate) * up
  SwigluOai,  // gpt-oss: Ops::swiglu_oai with alpha 1.702, limit 7
};

struct MoeConfig {
  MoeRouting routing;  // n_expert, n_used, gating, normalize_weights, weights_scale (ops.hpp)
  MoeActivation activation = MoeActivation::SiLU;
};

struct MoeWeights {
  Weight norm;                        // ffn_norm (MoeParts::norm)
  Projection router;                  // ffn_gate_inp [n_embd, n_expert] (+ gpt-oss's .bias [n_expert])
  std::vector<Projection> gate, up, down;  // one per expert, sliced from ffn_*_exps (+ .bias [n, n_expert])
  Weight probs_bias;                  // exp_probs_b [n_expert] (deepseek2); may be empty
  Projection shared_gate, shared_up, shared_down;  // ffn_*_shexp; may be empty
  Weight shared_router;               // ffn_gate_inp_shexp [n_embd] (qwen2moe's sigmoid gate); may be empty
  int64_t n_ff_exp = 0;               // width of one expert
  int64_t n_ff_shexp = 0;             // width of the shared expert (0: none)
};

// What DecoderModel::moe_weights looks up for a layer.
struct MoeParts {
  int64_t n_expert = 0;
  int64_t n_ff_exp = 0;            // rows of one expert's gate / up
  bool router_bias = false;        // required ffn_gate_inp.bias
  bool expert_biases = false;      // required ffn_{gate,up,down}_exps.bias
  bool probs_bias = false;         // required exp_probs_b.bias
  int64_t n_ff_shexp = 0;          // > 0: required shared expert ffn_{gate,up,down}_shexp of this width
  bool shared_router = false;      // required ffn_gate_inp_shexp
  std::string norm = "ffn_norm";   // the FFN input norm's tensor (gpt-oss: post_attention_norm)
};

// The MoE block on s.x (normed into s.h); writes s.o. Uses s.gate / s.up for the shared expert
// (the Scratch must be made with n_ff >= n_ff_shexp) and workspace slots 32 and up.
void moe_block(Ops& ops, const HParams& hp, const MoeWeights& w, const MoeConfig& c, Scratch& s);

}  // namespace okapi::model
