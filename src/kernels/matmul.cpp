// The threaded matmul. Activations are prepared once per call (quantized to the weight format's
// vec_dot_type with the table's fast quantizer); the output is then cut into tiles of kRowTile
// weight rows x kTokenTile tokens. Inside a tile each weight row stays in cache while it meets
// every token of the tile, and the tile's activations stay in L2 across its rows. Threads take
// contiguous runs of tiles (the pool's chunks). Every y element is computed by one kernel call
// whose arithmetic does not depend on the tiling, so results do not depend on the thread count.
//
// Kernels, fastest first: the tier's row-group kernels over weights repacked once per tensor
// (quant.hpp RowGroupKernels, kernels/weight_packs.hpp: AVX-512 VNNI for Q8_0, Q4_0, Q4_K and
// Q6_K; the float GEMM's panels for F32, F16 and BF16 on AVX2 and AVX-512), which serve one token
// and many alike; AVX2 multi-token tiles (Q4_0/Q5_0/Q8_0 x Q8_0, Q4_1/Q5_1 x Q8_1,
// Q2_K/Q3_K/Q4_K/Q5_K/Q6_K x Q8_K), used for batches, whose
// per-token operations are those of the format's vec_dot; the table's vec_dot per (row, token);
// and for formats without a vec_dot (IQ1_BN, IQ2_BN) dequantized rows dotted with the float
// activations.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "kernels/avx2/gemm_kquant.hpp"
#include "kernels/avx2/gemm_kquant_low.hpp"
#include "kernels/avx2/gemm_legacy.hpp"
#include "kernels/avx2/gemm_q8_0.hpp"
#include "kernels/kernels.hpp"
#include "kernels/matmul_plan.hpp"
#include "kernels/weight_packs.hpp"
#include "quant/blocks.hpp"

namespace okapi::kernels {
namespace {

constexpr int64_t kRowTile = 8;
constexpr int64_t kTokenTile = 64;
// Below this many multiply-adds a call is faster on one thread than waking the pool.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

using TileBody = std::function<void(int64_t o0, int64_t o1, int64_t t0, int64_t t1)>;

struct Job {
  const detail::MatmulPlan& plan;
  const uint8_t* w;
  int64_t n_in, n_out, n_tokens;
  float* y;
  ThreadPool* pool;  // null: run on the calling thread

  void run(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) const {
    if (pool != nullptr) {
      pool->parallel_for(n, fn);
    } else if (n > 0) {
      fn(0, n, 0);
    }
  }

  // Calls body on every tile, tiles split over the threads.
  void for_each_tile(const TileBody& body) const {
    const int64_t row_tiles = (n_out + kRowTile - 1) / kRowTile, token_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
    run(row_tiles * token_tiles, [&](int64_t begin, int64_t end, int) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t o0 = unit / token_tiles * kRowTile, t0 = unit % token_tiles * kTokenTile;
        body(o0, std::min(n_out, o0 + kRowTile), t0, std::min(n_tokens, t0 + kTokenTile));
      }
    });
  }

  const uint8_t* w_row(int64_t o) const { return w + static_cast<size_t>(o) * plan.w_row_bytes; }

  // Activation rows in the dot product's format, in the calling thread's reusable buffer.
  const uint8_t* quantized_activations(const float* x) const {
    thread_local std::vector<uint8_t> buffer;
    const size_t need = plan.a_row_bytes * static_cast<size_t>(n_tokens);
    if (buffer.size() < need) buffer.resize(need);
    uint8_t* out = buffer.data();
    const auto quantize = plan.a_format->quantize;
    const size_t row = plan.a_row_bytes;
    const int64_t n = n_in;
    Job{plan, w, n_in, n_out, n_tokens, y, n_tokens > 1 ? pool : nullptr}.run(
        n_tokens, [&](int64_t begin, int64_t end, int) {
          for (int64_t t = begin; t < end; ++t) quantize(x + t * n, out + static_cast<size_t>(t) * row, n);
        });
    return out;
  }
};

void by_dequantized_rows(const Job& job, const float* x) {
  const auto dequantize = job.plan.format->dequantize;
  const int64_t n = job.n_in;
  job.for_each_tile([&](int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    thread_local std::vector<float> rows;  // this worker's own
    rows.resize(static_cast<size_t>(kRowTile * n));
    for (int64_t o = o0; o < o1; ++o) dequantize(job.w_row(o), rows.data() + (o - o0) * n, n);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t o = o0; o < o1; ++o) {
        job.y[t * job.n_out + o] = dot_f32(rows.data() + (o - o0) * n, x + t * n, n) * job.plan.scale;
      }
    }
  });
}

void by_vec_dot(const Job& job, const uint8_t* a) {
  const auto vec_dot = job.plan.format->vec_dot;
  const size_t a_row = job.plan.a_row_bytes;
  job.for_each_tile([&](int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* y_t = job.y + t * job.n_out;
      for (int64_t o = o0; o < o1; ++o) y_t[o] = vec_dot(job.n_in, job.w_row(o), a + static_cast<size_t>(t) * a_row) * job.plan.scale;
    }
  });
}

void by_q8_0_tiles(const Job& job, const uint8_t* a, avx2::Q8_0TileFn tile) {
  // The activation blocks' scales as floats, converted once instead of once per weight row.
  const int64_t n_blocks = job.n_in / quant::QK8_0;
  const size_t a_row = job.plan.a_row_bytes;
  thread_local std::vector<float> a_scales;
  a_scales.resize(static_cast<size_t>(n_blocks * job.n_tokens));
  for (int64_t t = 0; t < job.n_tokens; ++t) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint16_t d;
      std::memcpy(&d, a + static_cast<size_t>(t) * a_row + static_cast<size_t>(b) * sizeof(quant::block_q8_0), sizeof(d));
      a_scales[static_cast<size_t>(t * n_blocks + b)] = fp16_to_fp32(d);
    }
  }
  const float* scales = a_scales.data();  // a thread_local: the workers must not name it
  job.for_each_tile([&](int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    tile(job.n_in, job.w_row(o0), job.plan.w_row_bytes, o1 - o0, a + static_cast<size_t>(t0) * a_row, a_row,
         scales + t0 * n_blocks, t1 - t0, job.plan.scale, job.y + t0 * job.n_out + o0, job.n_out);
  });
}

// Tiles whose kernel reads the prepared activation rows as they are (scales included).
void by_quantized_tiles(const Job& job, const uint8_t* a, avx2::Q8_KTileFn tile) {
  const size_t a_row = job.plan.a_row_bytes;
  job.for_each_tile([&](int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    tile(job.n_in, job.w_row(o0), job.plan.w_row_bytes, o1 - o0, a + static_cast<size_t>(t0) * a_row, a_row, t1 - t0,
         job.plan.scale, job.y + t0 * job.n_out + o0, job.n_out);
  });
}

// Row-group kernels (quant.hpp RowGroupKernels) over the repacked weights: activations prepared
// once per token, then units of whole row groups x kTokenTile tokens split over the
// threads. One kernel serves every token count, so a batched token equals a lone one.
void by_row_groups(const Job& job, Isa tier, DType w_type, const float* x) {
  const quant::RowGroupKernels& k = job.plan.format->row_groups;
  const detail::PackKey key{job.w, tier, w_type, job.n_in, job.n_out};
  const uint8_t* packed = detail::packed_weight(key, job.plan.w_row_bytes, job.pool);
  const size_t a_row = k.activation_bytes(job.n_in), group_bytes = k.group_bytes(job.n_in);
  thread_local std::vector<uint8_t> buffer;  // the caller's: the workers read it through `a`
  buffer.resize(a_row * static_cast<size_t>(job.n_tokens));
  uint8_t* a = buffer.data();
  Job{job.plan, job.w, job.n_in, job.n_out, job.n_tokens, job.y, job.n_tokens > 1 ? job.pool : nullptr}.run(
      job.n_tokens, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) k.prepare_activation(x + t * job.n_in, job.n_in, a + static_cast<size_t>(t) * a_row);
      });
  // Four groups per unit, but for decode at most 4 groups of 16 rows (the quantized formats)
  // or 2 of the float GEMM's 64 (AVX-512): a 768-row matrix then still makes 6 units for the
  // threads to share, each reading two groups side by side.
  const int64_t groups_per_unit = job.n_tokens > 1 ? 4 : std::clamp<int64_t>(128 / k.rows, 1, 4);
  const int64_t rows_per_unit = groups_per_unit * k.rows;
  const int64_t row_units = (job.n_out + rows_per_unit - 1) / rows_per_unit;
  const int64_t token_tiles = (job.n_tokens + kTokenTile - 1) / kTokenTile;
  job.run(row_units * token_tiles, [&](int64_t begin, int64_t end, int) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t o0 = unit / token_tiles * rows_per_unit, t0 = unit % token_tiles * kTokenTile;
      k.gemm(job.n_in, packed + static_cast<size_t>(o0 / k.rows) * group_bytes, std::min(rows_per_unit, job.n_out - o0),
             a + static_cast<size_t>(t0) * a_row, a_row, std::min(kTokenTile, job.n_tokens - t0), job.y + t0 * job.n_out + o0,
             job.n_out);
    }
  });
}

// The multi-token kernel for a weight format whose activations it reads as prepared, if any.
avx2::Q8_KTileFn quantized_tile(DType w_type, DType a_type) {
  const auto pairs = [&](DType w, DType a) { return w_type == w && a_type == a; };
  if (pairs(DType::Q4_1, DType::Q8_1)) return avx2::tile_q4_1_q8_1;
  if (pairs(DType::Q5_0, DType::Q8_0)) return avx2::tile_q5_0_q8_0;
  if (pairs(DType::Q5_1, DType::Q8_1)) return avx2::tile_q5_1_q8_1;
  if (pairs(DType::Q2_K, DType::Q8_K)) return avx2::tile_q2_K_q8_K;
  if (pairs(DType::Q3_K, DType::Q8_K)) return avx2::tile_q3_K_q8_K;
  if (pairs(DType::Q4_K, DType::Q8_K)) return avx2::tile_q4_K_q8_K;
  if (pairs(DType::Q5_K, DType::Q8_K)) return avx2::tile_q5_K_q8_K;
  if (pairs(DType::Q6_K, DType::Q8_K)) return avx2::tile_q6_K_q8_K;
  return nullptr;
}

}  // namespace

void matmul(DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens, float* y,
            ThreadPool* pool) {
  matmul(isa(), w_type, w, n_in, n_out, x, n_tokens, y, pool);
}

void matmul(Isa tier, DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
            float* y, ThreadPool* pool) {
  const detail::MatmulPlan plan = detail::plan_matmul(tier, w_type, w, n_in, n_out, n_tokens);
  if (n_out == 0 || n_tokens == 0) return;
  if (pool != nullptr && (pool->size() == 1 || n_in * n_out * n_tokens < kMinParallelWork)) pool = nullptr;
  const Job job{plan, static_cast<const uint8_t*>(w), n_in, n_out, n_tokens, y, pool};

  if (plan.dequantize_path) return by_dequantized_rows(job, x);
  if (plan.format->row_groups.rows > 0 && plan.scale == 1.0f) return by_row_groups(job, tier, w_type, x);
  // Tiles only pay off with several tokens; one token (decode) streams each weight row once
  // through the table's vec_dot, whose per-row accumulators suit the hardware prefetcher better.
  if (n_tokens > 1 && tier >= Isa::avx2) {
    if (w_type == DType::Q4_0) return by_q8_0_tiles(job, job.quantized_activations(x), avx2::tile_q4_0_q8_0);
    if (w_type == DType::Q8_0) return by_q8_0_tiles(job, job.quantized_activations(x), avx2::tile_q8_0_q8_0);
    if (const avx2::Q8_KTileFn tile = quantized_tile(w_type, plan.a_type)) {
      return by_quantized_tiles(job, job.quantized_activations(x), tile);
    }
  }
  by_vec_dot(job, plan.float_activations ? reinterpret_cast<const uint8_t*>(x) : job.quantized_activations(x));
}

}  // namespace okapi::kernels
