// The scalar reference tile kernels and the choice of tier.
#include "kv/tile_kernels.hpp"

#include "core/cpu.hpp"
#include "core/half.hpp"

#include <climits>

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

namespace decoded_in_chunks {

// The queries of `qs` restricted to cells [c0, c1), renumbered from 0 (empty ranges: 0, 0).
struct ChunkQueries {
  int64_t begin[kMaxChunkQueries], end[kMaxChunkQueries];
};
Queries chunk_view(const Queries& qs, int64_t c0, int64_t c1, ChunkQueries& chunk) {
  for (int r = 0; r < qs.n; ++r) {
    const int64_t b = qs.begin[r] > c0 ? qs.begin[r] : c0, e = qs.end[r] < c1 ? qs.end[r] : c1;
    chunk.begin[r] = b < e ? b - c0 : 0;
    chunk.end[r] = b < e ? e - c0 : 0;
  }
  return {qs.q, qs.n, chunk.begin, chunk.end};
}

void span_of(const Queries& qs, int64_t* lo, int64_t* hi) {
  *lo = INT64_MAX;
  *hi = INT64_MIN;
  for (int r = 0; r < qs.n; ++r) {
    if (qs.begin[r] >= qs.end[r]) continue;
    if (qs.begin[r] < *lo) *lo = qs.begin[r];
    if (qs.end[r] > *hi) *hi = qs.end[r];
  }
}

// fn(chunk queries, decoded rows, c0) for each run of up to 16 cells some query sees, in order.
template <typename Fn>
void for_each_chunk(const Queries& qs, Decoded rows, const Fn& fn) {
  alignas(64) float block[16 * kMaxDim];
  ChunkQueries chunk;
  const int64_t stride = (rows.dim + 15) / 16 * 16;
  int64_t lo = 0, hi = 0;
  span_of(qs, &lo, &hi);
  for (int64_t c0 = lo; c0 < hi; c0 += 16) {
    const int64_t c1 = hi - c0 < 16 ? hi : c0 + 16;
    rows.decode(rows.ctx, c0, c1 - c0, block, stride);
    fn(chunk_view(qs, c0, c1, chunk), Rows<float>{block, stride, rows.dim}, c0);
  }
}

void scores(ScoresF32Fn dense, const Queries& qs, Decoded k, int64_t first, float* out, int64_t out_stride) {
  if (qs.n > kMaxChunkQueries) {  // more queries than a chunk view holds: one at a time
    for (int r = 0; r < qs.n; ++r) scores(dense, {qs.q + r, 1, qs.begin + r, qs.end + r}, k, first, out + r * out_stride, out_stride);
    return;
  }
  for_each_chunk(qs, k, [&](const Queries& chunk, Rows<float> rows, int64_t c0) {
    dense(chunk, rows, 0, out + (c0 - first), out_stride);
  });
}

void accumulate(AccumulateF32Fn dense, const Queries& qs, Decoded v, int64_t first, const float* probs,
                int64_t p_stride, float* acc) {
  if (qs.n > kMaxChunkQueries) {
    for (int r = 0; r < qs.n; ++r) {
      accumulate(dense, {qs.q + r, 1, qs.begin + r, qs.end + r}, v, first, probs + r * p_stride, p_stride, acc + r * v.dim);
    }
    return;
  }
  for_each_chunk(qs, v, [&](const Queries& chunk, Rows<float> rows, int64_t c0) {
    dense(chunk, rows, 0, probs + (c0 - first), p_stride, acc);
  });
}

}  // namespace decoded_in_chunks

namespace {
void scores_decoded_ref(const Queries& qs, Decoded k, int64_t first, float* out, int64_t out_stride) {
  decoded_in_chunks::scores(scores_ref<float>, qs, k, first, out, out_stride);
}
void accumulate_decoded_ref(const Queries& qs, Decoded v, int64_t first, const float* probs, int64_t p_stride,
                            float* acc) {
  decoded_in_chunks::accumulate(accumulate_ref<float>, qs, v, first, probs, p_stride, acc);
}
}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{scores_ref<float>,  scores_ref<uint16_t>, accumulate_ref<float>,
                         accumulate_ref<uint16_t>, scores_decoded_ref, accumulate_decoded_ref};
  return k;
}

const Kernels& kernels(Isa tier) {
  switch (tier) {
    case Isa::avx512: return avx512_kernels();
    case Isa::avx2: return avx2_kernels();
    case Isa::scalar: break;
  }
  return scalar_kernels();
}

}  // namespace okapi::kv::tile
