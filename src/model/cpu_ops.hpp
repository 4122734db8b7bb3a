// Ops on the CPU: float32 activations, the kernels of kernels/kernels.hpp (the ISA tier in use)
// and a thread pool for the mat-muls and attention. prepare() repacks the weights with row-group
// kernels on this tier into memory this object owns (kernels::WeightPacks), dropping the file's
// pages as it goes; make_kv makes the plain f32 / f16 stores.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/weight_packs.hpp"
#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::model {

class CpuOps : public Ops {
 public:
  explicit CpuOps(ThreadPool* pool = nullptr) : pool_(pool) {}

  void prepare(const WeightSet& weights) override;
  std::unique_ptr<kv::KvStore> make_kv(const kv::KvShape& shape, const KvTypes& types) override;
  size_t prepared_bytes() const;  // the repacked copies prepare() made

  void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) override;
  void matmul_group(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens) override;
  void matmul_glu(Activation act, const Weight& gate, const Weight& up, const float* x, int64_t n_tokens,
                  float* gate_y, float* up_y) override;
  void add_bias(const Weight& bias, float* x, int64_t n_tokens) override;
  void rmsnorm(const float* x, const Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, std::span<const int32_t> positions,
            const kernels::RopeConfig& config) override;
  void store_kv(kv::KvStore& kv, int64_t layer, const float* k, const float* v,
                std::span<const int32_t> positions) override;
  void attention(const kv::KvStore& kv, const AttentionConfig& config, const float* q,
                 std::span<const int32_t> positions, float* out) override;
  void attention_runs(std::span<const AttentionRun> runs, const AttentionConfig& config) override;
  void glu(Activation act, const float* gate, const float* up, int64_t n_rows, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* a, float s, int64_t n, float* out) override;
  void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) override;

 private:
  template <typename Fn>
  void parallel(int64_t n, int64_t work, Fn&& fn) {
    parallel_for(pool_, n, work, std::forward<Fn>(fn));
  }
  ThreadPool* pool_;
  std::vector<std::unique_ptr<kernels::WeightPacks>> packs_;  // one per prepared weight set
};

}  // namespace okapi::model
