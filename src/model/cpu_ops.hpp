// Ops on the CPU: float32 activations, the kernels of kernels/kernels.hpp (AVX2 when available)
// and a thread pool for the mat-muls and attention.
#pragma once
#include <functional>

#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::model {

class CpuOps : public Ops {
 public:
  explicit CpuOps(ThreadPool* pool = nullptr) : pool_(pool) {}

  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) override;
  void add_bias(const Weight& bias, float* x, int64_t n_tokens) override;
  void rmsnorm(const float* x, const Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
            const kernels::RopeConfig& config) override;
  void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                std::span<const int32_t> positions) override;
  void attention(const kv::KvStore& kv, const AttentionConfig& config, const float* q,
                 std::span<const int32_t> positions, float* out) override;
  void glu(Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* a, float s, int64_t n, float* out) override;
  void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) override;

 private:
  // Runs fn(begin, end) over [0, n) on the pool, or inline without one or when `work` (float
  // operations, roughly) is too small to repay the hand-off.
  void parallel(int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn);
  ThreadPool* pool_;
};

}  // namespace okapi::model
