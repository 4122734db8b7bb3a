// Ops for exact mode (seed 000): bit-identical logits on any x86-64, thread count, kernel set
// (scalar or AVX2), compiler and optimisation level.
//
// - matmul: each weight is re-encoded by prepare() (or on first use, cached by tensor) as int16
//   with one scale per row, w_int = round(w / s_w), s_w = max|row| / 32767, from the scalar reference dequantizer;
//   each activation row likewise (s_x per token). y = (float)((double)sum_i w_int x_int * (double)
//   (s_w * s_x)): the sum is an exact int64 (|sum| <= n * 32767^2 < 2^63 for n < 2^33), so the order
//   of summation, the thread split and the SIMD width cannot change it.
// - fp32 islands (rmsnorm, rope, softmax, glu, add/mul/scale, bias, get_rows): fixed sequential
//   reduction order in double, elementwise work per element, exact/detmath.hpp for exp, rsqrt,
//   sin, cos, tanh, pow (backend/exact_islands.hpp).
// - attention: scores and value sums through an exact KV store (kv/exact_store.hpp, what make_kv
//   makes); any other store is refused with an okapi::Error.
#pragma once
#include <memory>
#include <string_view>

#include "core/cpu.hpp"
#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::backend {

// The ring the weight products run in. integer: the int16 kernels above. zomega (seed 000): each
// encoded weight row is an element row of Z[w] (w^2 = w - 41) with zero w parts, shimmed at load
// by the Frobenius element pi = w raised to `frobenius` (W <- W pi^K, exact/frobenius.hpp); every
// matvec runs over Z[w] (exact/matvec.hpp, int64 or Int128 accumulators chosen by the overflow
// analysis) and is divided exactly by pi^K. Z[w] is an integral domain, so the quotient is the
// integer dot product with a zero w part: the logits are bit-identical to `integer` (Theorem 4 of
// seed 000, tested); a w part left over would be an error, never a silent change. K is bounded by
// the shimmed weights fitting int64 (|parts| grow by up to 42^K): an unreachable K is refused.
struct ExactRing {
  bool zomega = false;
  unsigned frobenius = 0;
};

class ExactOps : public model::Ops {
 public:
  // `tier` picks the int16 matmul kernel: AVX2 from the avx2 tier up, else scalar (tests compare
  // them in one process; the result is the same integer either way). A tier this CPU does not
  // allow is an okapi::Error, and so is a Frobenius shim outside Z[w].
  explicit ExactOps(ThreadPool* pool = nullptr, Isa tier = isa(), ExactRing ring = {});
  ~ExactOps() override;

  void prepare(const model::WeightSet& weights) override;
  std::unique_ptr<kv::KvStore> make_kv(const kv::KvShape& shape, const model::KvTypes& types) override;

  void matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) override;
  void add_bias(const model::Weight& bias, float* x, int64_t n_tokens) override;
  void rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
            const kernels::RopeConfig& config) override;
  void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                std::span<const int32_t> positions) override;
  void attention(const kv::KvStore& kv, const model::AttentionConfig& config, const float* q,
                 std::span<const int32_t> positions, float* out) override;
  void attention_runs(std::span<const model::AttentionRun> runs, const model::AttentionConfig& config) override;
  void glu(model::Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* a, float s, int64_t n, float* out) override;
  void softcap(float* x, int64_t n, float cap) override;  // det::tanh in double
  void get_rows(const model::Weight& table, std::span<const int32_t> ids, float* out) override;

 private:
  void matmul_zomega(const void* encoded_weight, int64_t n_tokens, float* y);  // after the activations are encoded
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace okapi::backend
