// The scalar reference tile kernels and the choice of tier.
#include "kv/tile_kernels.hpp"

#include "core/cpu.hpp"
#include "core/half.hpp"

namespace okapi::kv::tile {
namespace {

float to_float(float x) { return x; }
float to_float(uint16_t h) { return fp16_to_fp32(h); }
// How a probability meets a V element of this type.
float weight_for(float p, float) { return p; }
float weight_for(float p, uint16_t) { return fp16_to_fp32(fp32_to_fp16(p)); }

template <typename Elem>
void scores_ref(const Queries& qs, Rows<Elem> k, int64_t first, float* scores, int64_t out_stride) {
  for (int r = 0; r < qs.n; ++r) {
    for (int64_t j = qs.begin[r]; j < qs.end[r]; ++j) {
      const Elem* row = k.base + j * k.stride;
      float sum = 0.0f;
      for (int64_t d = 0; d < k.dim; ++d) sum += qs.q[r][d] * to_float(row[d]);
      scores[r * out_stride + (j - first)] = sum;
    }
  }
}

template <typename Elem>
void accumulate_ref(const Queries& qs, Rows<Elem> v, int64_t first, const float* probs, int64_t p_stride,
                    float* acc) {
  for (int r = 0; r < qs.n; ++r) {
    float* out = acc + r * v.dim;
    for (int64_t j = qs.begin[r]; j < qs.end[r]; ++j) {
      const Elem* row = v.base + j * v.stride;
      const float p = weight_for(probs[r * p_stride + (j - first)], Elem{});
      for (int64_t d = 0; d < v.dim; ++d) out[d] += p * to_float(row[d]);
    }
  }
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{scores_ref<float>, scores_ref<uint16_t>, accumulate_ref<float>, accumulate_ref<uint16_t>};
  return k;
}

const Kernels& kernels() {
  static const Kernels& chosen = isa() >= Isa::avx512 ? avx512_kernels()
                                 : isa() >= Isa::avx2 ? avx2_kernels()
                                                      : scalar_kernels();
  return chosen;
}

}  // namespace okapi::kv::tile
