// Attention tile kernels of the dense (f32 / fp16) KV stores: several queries of one kv head (a GQA
// group, and in prefill several tokens) against one tile of cells, each key and value row read
// once for all of them. Each query r sees cells [begin[r], end[r]) (absolute cells; begin == end
// for a query that sees none of the tile).
//
// Bit-identity: the result of a query never depends on the other queries of the call: every
// score is one dot product in a fixed order, and every accumulator row is updated in cell order.
// So a token computes the same bits alone or inside any batch (for a given ISA tier).
#pragma once
#include <cstdint>

#include "core/cpu.hpp"

namespace okapi::kv::tile {

// A head's rows in a store: row `cell` starts at base + cell * stride elements. Rows with more
// than kMaxDim elements are not supported by these kernels (the stores fall back to the per-head
// methods). No member functions: tier folders must share no inline code with baseline files.
constexpr int64_t kMaxDim = 1024;
template <typename Elem>
struct Rows {
  const Elem* base = nullptr;
  int64_t stride = 0;
  int64_t dim = 0;
};

struct Queries {
  const float* const* q = nullptr;  // q[r]: dim values (for an fp16 K already rounded to fp16)
  int n = 0;
  const int64_t* begin = nullptr;
  const int64_t* end = nullptr;
};

// scores[r * out_stride + (j - first)] = q[r] · K[j] for j in [begin[r], end[r]); `first` is the
// tile's first cell (<= every begin). Other entries are left alone.
using ScoresF32Fn = void (*)(const Queries& qs, Rows<float> k, int64_t first, float* scores, int64_t out_stride);
using ScoresF16Fn = void (*)(const Queries& qs, Rows<uint16_t> k, int64_t first, float* scores, int64_t out_stride);
// acc[r * dim + d] += sum_{j in [begin[r], end[r])} probs[r * p_stride + (j - first)] * V[j][d], in
// cell order. For fp16 V each probability is first rounded to fp16 (as ggml converts the f32
// operand of an f16 mat-mul).
using AccumulateF32Fn = void (*)(const Queries& qs, Rows<float> v, int64_t first, const float* probs,
                                 int64_t p_stride, float* acc);
using AccumulateF16Fn = void (*)(const Queries& qs, Rows<uint16_t> v, int64_t first, const float* probs,
                                 int64_t p_stride, float* acc);

// Compressed stores: rows come from a decoder instead of memory. decode(ctx, j0, n, out, stride)
// writes rows [j0, j0 + n) (1 <= n <= 16) as dim floats each, row i at out + i * stride (stride a
// multiple of 16, >= dim; it never writes the lanes past dim). The kernels give the bits of
// scores_f32 / accumulate_f32 on the decoded rows, without a copy of them in between.
struct Decoded {
  void (*decode)(const void* ctx, int64_t j0, int64_t n, float* out, int64_t stride) = nullptr;
  const void* ctx = nullptr;
  int64_t dim = 0;
};
using ScoresDecodedFn = void (*)(const Queries& qs, Decoded k, int64_t first, float* scores, int64_t out_stride);
using AccumulateDecodedFn = void (*)(const Queries& qs, Decoded v, int64_t first, const float* probs,
                                     int64_t p_stride, float* acc);

struct Kernels {
  ScoresF32Fn scores_f32;
  ScoresF16Fn scores_f16;
  AccumulateF32Fn accumulate_f32;
  AccumulateF16Fn accumulate_f16;
  ScoresDecodedFn scores_decoded;
  AccumulateDecodedFn accumulate_decoded;
};

// The decoded kernels of tiers without their own: 16 rows decoded into a buffer, then the tier's
// dense kernel on them, queries renumbered per chunk (calls of more than kMaxChunkQueries queries
// run query by query).
constexpr int kMaxChunkQueries = 256;
namespace decoded_in_chunks {
void scores(ScoresF32Fn dense, const Queries& qs, Decoded k, int64_t first, float* out, int64_t out_stride);
void accumulate(AccumulateF32Fn dense, const Queries& qs, Decoded v, int64_t first, const float* probs,
                int64_t p_stride, float* acc);
}  // namespace decoded_in_chunks

// The kernels of `tier` (one of available_isas(): the stores take it from the backend that makes
// them and keep these once).
const Kernels& kernels(Isa tier);
// The scalar reference (always) and the tier kernels: for tests comparing them.
const Kernels& scalar_kernels();
const Kernels& avx2_kernels();    // only call when isa() >= avx2
const Kernels& avx512_kernels();  // only call when isa() >= avx512

}  // namespace okapi::kv::tile
