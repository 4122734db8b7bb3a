// Ops on the CPU: float32 activations, the kernels of kernels/kernels.hpp for the ISA tier this
// backend was made for, and a thread pool for the mat-muls and attention. prepare() repacks the
// weights with row-group kernels on this tier into memory this object owns (kernels::PackedWeight,
// handed to the matmul with its weight), dropping the file's pages as it goes; make_kv makes the
// plain f32 / f16 stores.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "core/cpu.hpp"
#include "core/thread_pool.hpp"
#include "kernels/kernels.hpp"
#include "kernels/weight_packs.hpp"
#include "model/ops.hpp"

namespace okapi {
class ThreadPool;
}

namespace okapi::backend {

class CpuOps : public model::Ops {
 public:
  // `tier` must be one of available_isas() (else okapi::Error).
  explicit CpuOps(ThreadPool* pool = nullptr, Isa tier = isa());

  Isa tier() const { return tier_; }

  void prepare(const model::WeightSet& weights) override;
  std::unique_ptr<kv::KvStore> make_kv(const kv::KvShape& shape, const model::KvTypes& types) override;
  size_t prepared_bytes() const;  // the repacked copies prepare() made

  void matmul(const model::Weight& w, const float* x, int64_t n_tokens, float* y) override;
  void matmul_group(std::span<const model::MatmulTarget> targets, const float* x, int64_t n_tokens) override;
  void matmul_glu(model::Activation act, const model::Weight& gate, const model::Weight& up, const float* x, int64_t n_tokens,
                  float* gate_y, float* up_y) override;
  void add_bias(const model::Weight& bias, float* x, int64_t n_tokens) override;
  void rmsnorm(const float* x, const model::Weight& weight, int64_t n_rows, int64_t n, float eps, float* y) override;
  // LayerNorm and plain activations: Ops' element- and row-wise code spread over the threads (the
  // same bits: each row / element is computed alone).
  void layernorm(const float* x, const model::Weight& weight, const model::Weight& bias, int64_t n_rows, int64_t n,
                 float eps, float* y) override;
  void activation(model::Activation act, const float* x, int64_t n, float* out) override;
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
  void get_rows(const model::Weight& table, std::span<const int32_t> ids, float* out) override;
  void expert_ffns(model::Activation act, std::span<const model::ExpertRun> runs) override;

 private:
  template <typename Fn>
  void parallel(int64_t n, int64_t work, Fn&& fn) {
    parallel_for(pool_, n, work, std::forward<Fn>(fn));
  }
  // The copy prepare() made of `w`, if any (by its matmul_index; a weight of another set with
  // the same index is told apart by its address).
  const kernels::PackedWeight* packed(const model::Weight& w) const {
    const auto i = static_cast<size_t>(w.matmul_index);
    return w.matmul_index >= 0 && i < packed_.size() && packed_[i].original() == w.data ? &packed_[i] : nullptr;
  }
  kernels::MatmulOutput output(const model::Weight& w, float* y) const { return {w.type, w.data, w.n_out, y, packed(w)}; }
  kernels::GluKernel glu_kernel(model::Activation act) const;

  ThreadPool* pool_;
  Isa tier_;
  const kernels::VectorKernels& vector_;  // tier_'s
  std::vector<kernels::PackedWeight> packed_;  // by matmul_index of the prepared set
  std::vector<kernels::ExpertMatmul> expert_jobs_;  // expert_ffns' list, kept between calls
};

}  // namespace okapi::backend
