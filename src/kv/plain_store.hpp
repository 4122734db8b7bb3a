// A dense KV store: per layer and kv head, n_ctx cells of head_dim keys and values, each kept as
// float32 or fp16. Head-major, so attention streams one head's rows contiguously (cell-major
// rows of one head lie n_head_kv * head_dim apart, which long-context decode reads far slower). The fp16 arithmetic mirrors ggml's non-flash attention with an F16 cache:
// q is rounded to fp16 before K·q, and the softmax probabilities are rounded to fp16 before they
// weight V (ggml converts the f32 operand of an f16 mat-mul to f16).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "kv/kv_store.hpp"

namespace okapi::kv {

template <typename KElem, typename VElem>
class PlainStore final : public KvStore {
 public:
  // The kernels of `tier` (one of available_isas()) serve every call.
  PlainStore(const KvShape& shape, Isa tier);
  std::string_view type_name() const override { return name_; }
  void append(int64_t layer, int64_t position, const float* k, const float* v) override;
  void scores(int64_t layer, int64_t kv_head, const float* q, int64_t first, int64_t last, float* out) const override;
  void accumulate_values(int64_t layer, int64_t kv_head, const float* probs, int64_t first, int64_t last,
                         float* out) const override;
  void tile_scores(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, float* out,
                   int64_t out_stride) const override;
  void tile_accumulate(int64_t layer, int64_t kv_head, const tile::Queries& qs, int64_t first, const float* probs,
                       int64_t p_stride, float* acc) const override;

 protected:
  size_t saved_row_bytes(bool value) const override {
    return value ? static_cast<size_t>(shape_.head_dim_v) * sizeof(VElem) : static_cast<size_t>(shape_.head_dim_k) * sizeof(KElem);
  }
  void copy_row_out(bool value, int64_t row, char* out) const override;
  void copy_row_in(bool value, int64_t row, const char* in) override;

 private:
  // The element offsets of (layer, position, head)'s K and V rows (ring layers: their slot).
  size_t k_offset(int64_t layer, int64_t position, int64_t head) const {
    return static_cast<size_t>(row(layer, head, position) * shape_.head_dim_k);
  }
  size_t v_offset(int64_t layer, int64_t position, int64_t head) const {
    return static_cast<size_t>(row(layer, head, position) * shape_.head_dim_v);
  }
  size_t slot_offset(int64_t layer, int64_t slot, int64_t head, int64_t dim) const {
    return static_cast<size_t>(row_of_slot(layer, head, slot) * dim);
  }
  std::vector<KElem> k_;
  std::vector<VElem> v_;
  std::string name_;
  const tile::Kernels& tiles_;
  const kernels::VectorKernels& vector_;
  const quant::Format& f16_;  // fp16 rows and rounding
};

// fp16 storage is uint16_t holding IEEE half bits.
// The value the other operand is rounded to before meeting an element of this type.
inline float round_like(float x, float) { return x; }
inline float round_like(float x, uint16_t) { return fp16_to_fp32(fp32_to_fp16(x)); }

}  // namespace okapi::kv
