// CPU kernels used by the forward pass (through a backend's Ops). Each has a plain scalar
// reference (namespace okapi::kernels::ref) and versions per ISA tier, chosen by the tier the
// caller passes (a backend's own) or, for the free element-wise functions, the tier in use.
// Layouts: row-major; "rows" are tokens; a weight W is a GGUF tensor of ggml shape [n_in, n_out]
// (n_out rows of n_in elements, any quant format).
#pragma once
#include <cstdint>
#include <span>

#include "core/cpu.hpp"
#include "core/dtype.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::kernels {

class PackedWeight;  // weight_packs.hpp

// y[t][o] = sum_i W[o][i] * x[t][i], t < n_tokens, o < n_out, with the kernels of ISA tier `tier`
// (one of available_isas(), else okapi::Error). Activations are quantized to the weight format's
// vec_dot_type first (Q8_0 / Q8_K / F16 ...) exactly as ggml does, then the format's vec_dot is
// used, so results match llama.cpp's CPU backend up to summation order.
// Formats without a vec_dot (IQ1_BN, IQ2_BN) dequantize each weight row and dot it with x.
// `w` is the whole tensor as stored (for I2_S including its trailing per-tensor scale, which is
// applied here). Threads (pool may be null) split output rows, and tokens for large batches; the
// result does not depend on the thread count. A batch (n_tokens > 1) may use multi-token kernels;
// for the quantized formats they share their block code and summation order with the
// single-token path, so a token's row is the same bits alone or in any batch (F32 / F16 / BF16
// agree up to summation order). Formats with row-group kernels on this tier use `packed` when it
// holds this weight packed for this tier (pack_weight), else are repacked per call.
// Throws okapi::Error when n_in is not a multiple of the formats' block sizes.
void matmul(Isa tier, DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
            float* y, ThreadPool* pool, const PackedWeight* packed = nullptr);

// One weight of matmul_group: y[t][o] = W[o] · x[t] for o < n_out.
struct MatmulOutput {
  DType w_type = DType::F32;
  const void* w = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
  const PackedWeight* packed = nullptr;  // as matmul()'s
};
// matmul() of one x ([n_tokens x n_in]) by several weights. When they all go through row-group
// kernels that take the same activation layout (Q/K/V or gate/up of one format family), x is
// prepared once and all their row groups run as one parallel loop: two barriers for the group
// instead of two per weight. Every y is the same bits as matmul() gives it.
void matmul_group(Isa tier, std::span<const MatmulOutput> outputs, int64_t n_in, const float* x, int64_t n_tokens,
                  ThreadPool* pool);

// out[i] = act(gate[i]) * up[i] for n values (VectorKernels' swiglu, geglu_tanh, relu2_glu).
using GluKernel = void (*)(const float* gate, const float* up, int64_t n, float* out);
// matmul_group({gate, up}) and then out = glu(gate.y, up.y) in the same parallel loop: each task
// computes the gate and up rows of its tile and applies glu to them while they are in cache (a
// gated FFN's input side in one pass; out may be gate.y). Every value is the bits of
// matmul_group followed by one glu() over the whole buffers. Returns false, having done nothing,
// when the pair cannot be fused this way (not both on row-group kernels sharing activations,
// packed, with the same number of rows, a multiple of 8); the caller then runs the two steps.
bool matmul_glu(Isa tier, const MatmulOutput& gate, const MatmulOutput& up, int64_t n_in, const float* x,
                int64_t n_tokens, GluKernel glu, float* out, ThreadPool* pool);
// Mixture of experts: each expert's own input rows x [n_tokens x n_in] through its weight w
// (w.y = w·x), or with `glu`, through its gate w and up (w.y = glu(w·x, up·x), up.y scratch).
// All the experts' activations are prepared at once and all their row groups run as one parallel
// loop (a decode step's k experts: two barriers instead of two per expert). Every value is the
// bits of matmul() / matmul_glu() of that expert alone. Returns false, having done nothing, when
// some expert is not on packed row-group kernels of experts[0]'s activation layout (or, with
// glu, cannot be fused as matmul_glu fuses); the caller then runs them one by one.
struct ExpertMatmul {
  MatmulOutput w;   // the weight, or the gate
  MatmulOutput up;  // with glu only
  const float* x = nullptr;
  int64_t n_tokens = 0;
};
bool matmul_experts(Isa tier, std::span<const ExpertMatmul> experts, int64_t n_in, GluKernel glu, ThreadPool* pool);

struct RopeConfig {
  bool neox = false;         // NEOX: pairs (i, i + n_rot/2); normal: adjacent pairs (2i, 2i+1)
  int64_t n_rot = 0;         // rotated dims per head (<= head_dim); the rest pass through
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // linear scaling: position * freq_scale
  const float* freq_factors = nullptr;  // optional per-pair divisors (llama-3 rope_freqs), n_rot/2 entries
  // YaRN / extrapolation parameters as ggml_rope_ext; defaults = plain RoPE.
  float ext_factor = 0.0f, attn_factor = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f;
  int64_t n_ctx_orig = 0;
};
// Rotates x[n_heads][head_dim] in place for one token at `position` (ggml_rope_ext semantics).
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const RopeConfig& config);

// The element-wise kernels of one ISA tier: AVX2 from the avx2 tier up, the scalar references
// below it. The scalar steps between the SIMD loops (mean, 1/sqrt, 1/sum) round exactly like the
// reference and ggml. A backend keeps its tier's table (vector_kernels); the free functions below
// use the tier in use (isa()).
struct VectorKernels {
  // y = x / sqrt(mean(x^2) + eps) * weight (weight may be null: no scaling). One row of n.
  // As ggml: squares summed in double, then (x * scale) * weight in float. x and y may be the
  // same row (each y[i] is written from x[i] after the sum).
  void (*rmsnorm)(const float* x, const float* weight, int64_t n, float eps, float* y);
  void (*softmax)(float* x, int64_t n);  // in place, max-subtracted, sum in double, as ggml_soft_max
  // Gated FFN activations, out[i] = act(gate[i]) * up[i]: silu; gelu (tanh approx) as ggml-cpu
  // computes it for f32: gate rounded to fp16, looked up in a table of fp16 results
  // (GGML_GELU_FP16, see gelu_table.hpp); relu(x)^2.
  GluKernel swiglu;
  GluKernel geglu_tanh;
  GluKernel relu2_glu;
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, int64_t n, float* y);          // y += a * x
  void (*axpy_f16)(float a, const uint16_t* x, int64_t n, float* y);   // y += a * x, x fp16 (IEEE half bits)
};
const VectorKernels& vector_kernels(Isa tier);

// VectorKernels' functions on the tier in use (isa()).
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* y);
void softmax(float* x, int64_t n);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu_tanh(const float* gate, const float* up, int64_t n, float* out);
void relu2_glu(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, int64_t n, float* y);
void axpy_f16(float a, const uint16_t* x, int64_t n, float* y);

namespace ref {
void matmul(DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens, float* y);
void rmsnorm(const float* x, const float* weight, int64_t n, float eps, float* y);
void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t position, const RopeConfig& config);
void softmax(float* x, int64_t n);
// softmax() that also returns the max it subtracted and the sum of the exponentials (n > 0).
float softmax(float* x, int64_t n, double* sum);
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void geglu_tanh(const float* gate, const float* up, int64_t n, float* out);
void relu2_glu(const float* gate, const float* up, int64_t n, float* out);
float dot_f32(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, int64_t n, float* y);
void axpy_f16(float a, const uint16_t* x, int64_t n, float* y);
}  // namespace ref

}  // namespace okapi::kernels
