// The threaded matmul. Activations are prepared once per call (quantized to the weight format's
// vec_dot_type with the table's fast quantizer); the output is then cut into tiles of kRowTile
// weight rows x kTokenTile tokens. Inside a tile each weight row stays in cache while it meets
// every token of the tile, and the tile's activations stay in L2 across its rows. Threads take
// contiguous runs of tiles (the pool's chunks). Every y element is computed by one kernel call
// whose arithmetic does not depend on the tiling, so results do not depend on the thread count.
//
// Kernels, fastest first, all from the format table of the caller's tier: the row-group kernels
// over weights repacked once per tensor (quant.hpp RowGroupKernels, kernels/weight_packs.hpp:
// AVX-512 VNNI for Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K; the float GEMM's panels for F32, F16
// and BF16 on AVX2 and AVX-512), which serve one token and many alike; the multi-token tiles
// (quant.hpp TileKernels: AVX2 for Q4_0/Q5_0/Q8_0 x Q8_0, Q4_1/Q5_1 x Q8_1,
// Q2_K/Q3_K/Q4_K/Q5_K/Q6_K x Q8_K), used for batches, whose per-token operations are those of
// the format's vec_dot; the table's vec_dot per (row, token); and for formats without a vec_dot
// (IQ1_BN, IQ2_BN) dequantized rows dotted with the float activations.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "kernels/blocks.hpp"
#include "kernels/kernels.hpp"
#include "kernels/matmul_plan.hpp"
#include "kernels/weight_packs.hpp"

namespace okapi::kernels {
namespace {

constexpr int64_t kRowTile = 8;
constexpr int64_t kTokenTile = 64;
// Below this many multiply-adds a call is faster on one thread than waking the pool.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;
constexpr size_t kMaxGroup = 8;  // Q/K/V, gate/up: groups are small (and kept off the heap)

// fn(begin, end, thread) over [0, n) on `pool`, or on the calling thread without one. The pool's
// std::function holds only a reference to fn (no allocation per call).
template <typename Fn>
void run_on(ThreadPool* pool, int64_t n, const Fn& fn) {
  if (pool != nullptr) {
    pool->parallel_for(n, [&fn](int64_t begin, int64_t end, int thread) { fn(begin, end, thread); });
  } else if (n > 0) {
    fn(int64_t{0}, n, 0);
  }
}

struct Job {
  Isa tier;
  const detail::MatmulPlan& plan;
  const uint8_t* w;
  int64_t n_in, n_out, n_tokens;
  float* y;
  ThreadPool* pool;  // null: run on the calling thread

  template <typename Fn>
  void run(int64_t n, const Fn& fn) const {
    run_on(pool, n, fn);
  }

  // Calls body(o0, o1, t0, t1) on every tile, tiles split over the threads.
  template <typename Body>
  void for_each_tile(const Body& body) const {
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
    Job{tier, plan, w, n_in, n_out, n_tokens, y, n_tokens > 1 ? pool : nullptr}.run(
        n_tokens, [&](int64_t begin, int64_t end, int) {
          for (int64_t t = begin; t < end; ++t) quantize(x + t * n, out + static_cast<size_t>(t) * row, n);
        });
    return out;
  }
};

void by_dequantized_rows(const Job& job, const float* x) {
  const auto dequantize = job.plan.format->dequantize;
  const auto dot_f32 = vector_kernels(job.tier).dot_f32;
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

// The format's multi-token tiles over the prepared activation rows (with, where the tiles want
// them, the Q8_0 blocks' scales as floats, converted once instead of once per weight row).
void by_tiles(const Job& job, const uint8_t* a) {
  const quant::TileKernels& tiles = job.plan.format->tiles;
  const size_t a_row = job.plan.a_row_bytes;
  const int64_t n_blocks = tiles.float_scales ? job.n_in / quant::QK8_0 : 0;
  thread_local std::vector<float> a_scales;
  a_scales.resize(static_cast<size_t>(n_blocks * job.n_tokens));
  for (int64_t t = 0; t < job.n_tokens && n_blocks > 0; ++t) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint16_t d;
      std::memcpy(&d, a + static_cast<size_t>(t) * a_row + static_cast<size_t>(b) * sizeof(quant::block_q8_0), sizeof(d));
      a_scales[static_cast<size_t>(t * n_blocks + b)] = fp16_to_fp32(d);
    }
  }
  const float* scales = tiles.float_scales ? a_scales.data() : nullptr;  // a thread_local: the workers must not name it
  job.for_each_tile([&](int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    tiles.gemm(job.n_in, job.w_row(o0), job.plan.w_row_bytes, o1 - o0, a + static_cast<size_t>(t0) * a_row, a_row,
               scales == nullptr ? nullptr : scales + t0 * n_blocks, t1 - t0, job.plan.scale,
               job.y + t0 * job.n_out + o0, job.n_out);
  });
}

// Row-group kernels (quant.hpp RowGroupKernels) over the repacked weights: activations prepared
// once per token, then units of a few row groups x kTokenTile tokens split over the threads. One
// kernel serves every token count, so a batched token equals a lone one. A group of weights with
// the same activation layout shares the prepared activations and one loop over all their units
// (matmul_group).
struct RowGroupWeight {
  const quant::RowGroupKernels* k = nullptr;
  const uint8_t* packed = nullptr;
  int64_t n_out = 0;
  float* y = nullptr;
  float scale = 1.0f;  // the per-tensor factor (I2_S), applied to each result as the other paths do
  int64_t rows_per_unit(int64_t n_tokens) const { return groups_per_unit(n_tokens) * k->rows; }
  int64_t row_units(int64_t n_tokens) const { return (n_out + rows_per_unit(n_tokens) - 1) / rows_per_unit(n_tokens); }

 private:
  // Four groups per unit for prefill, but for decode and small batches (a speculative draft under
  // verification) at most 4 groups of 16 rows (the quantized formats) or 2 of the float GEMM's 64
  // (AVX-512): a 768-row matrix then still makes 6 units for the threads to share, each reading
  // two groups side by side. (Four groups made a batch of 2-16 tokens run on one thread for the
  // narrow matrices: 2.2x the time of one token on a 9.6M F32 model, now 1.3-1.7x.)
  int64_t groups_per_unit(int64_t n_tokens) const {
    return n_tokens > 16 ? 4 : std::clamp<int64_t>(128 / k->rows, 1, 4);
  }
};

const uint8_t* prepared_activations(const quant::RowGroupKernels& k, int64_t n_in, const float* x, int64_t n_tokens,
                                    ThreadPool* pool) {
  const size_t a_row = k.activation_bytes(n_in);
  thread_local std::vector<uint8_t> buffer;  // the caller's: the workers read it through `a`
  if (buffer.size() < a_row * static_cast<size_t>(n_tokens)) buffer.resize(a_row * static_cast<size_t>(n_tokens));
  uint8_t* a = buffer.data();
  const auto body = [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) k.prepare_activation(x + t * n_in, n_in, a + static_cast<size_t>(t) * a_row);
  };
  run_on(n_tokens > 1 ? pool : nullptr, n_tokens, body);
  return a;
}

// One unit's kernel call: rows [o0, o0 + n_rows) of w for tokens [t0, t0 + n_t).
void run_unit(const RowGroupWeight& w, int64_t n_in, const uint8_t* a, size_t a_row, int64_t o0, int64_t t0,
              int64_t n_rows, int64_t n_t) {
  const quant::RowGroupKernels& k = *w.k;
  float* y = w.y + t0 * w.n_out + o0;
  k.gemm(n_in, w.packed + static_cast<size_t>(o0 / k.rows) * k.group_bytes(n_in), n_rows,
         a + static_cast<size_t>(t0) * a_row, a_row, n_t, y, w.n_out);
  if (w.scale != 1.0f) {
    for (int64_t t = 0; t < n_t; ++t)
      for (int64_t o = 0; o < n_rows; ++o) y[t * w.n_out + o] *= w.scale;
  }
}

void run_row_groups(std::span<const RowGroupWeight> weights, int64_t n_in, const uint8_t* a, int64_t n_tokens,
                    ThreadPool* pool) {
  const size_t a_row = weights.front().k->activation_bytes(n_in);
  const int64_t token_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
  int64_t units = 0;
  for (const RowGroupWeight& w : weights) units += w.row_units(n_tokens) * token_tiles;
  const auto body = [&](int64_t begin, int64_t end, int) {
    size_t i = 0;
    int64_t first = 0;  // the first unit of weights[i]
    for (int64_t unit = begin; unit < end; ++unit) {
      while (unit >= first + weights[i].row_units(n_tokens) * token_tiles) {
        first += weights[i++].row_units(n_tokens) * token_tiles;
      }
      const RowGroupWeight& w = weights[i];
      const int64_t rows_per_unit = w.rows_per_unit(n_tokens), local = unit - first;
      const int64_t o0 = local / token_tiles * rows_per_unit, t0 = local % token_tiles * kTokenTile;
      run_unit(w, n_in, a, a_row, o0, t0, std::min(rows_per_unit, w.n_out - o0), std::min(kTokenTile, n_tokens - t0));
    }
  };
  run_on(pool, units, body);
}

// Gate and up units of the same rows in one task, then out = glu(gate, up) on that tile while
// it is in cache.
void run_glu_row_groups(const RowGroupWeight& gate, const RowGroupWeight& up, int64_t n_in, const uint8_t* a,
                        int64_t n_tokens, GluKernel glu, float* out, ThreadPool* pool) {
  const size_t a_row = gate.k->activation_bytes(n_in);
  const int64_t token_tiles = (n_tokens + kTokenTile - 1) / kTokenTile, n_out = gate.n_out;
  const int64_t rows_per_unit = gate.rows_per_unit(n_tokens);
  run_on(pool, gate.row_units(n_tokens) * token_tiles, [&](int64_t begin, int64_t end, int) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t o0 = unit / token_tiles * rows_per_unit, t0 = unit % token_tiles * kTokenTile;
      const int64_t n_rows = std::min(rows_per_unit, n_out - o0), n_t = std::min(kTokenTile, n_tokens - t0);
      run_unit(gate, n_in, a, a_row, o0, t0, n_rows, n_t);
      run_unit(up, n_in, a, a_row, o0, t0, n_rows, n_t);
      for (int64_t t = t0; t < t0 + n_t; ++t) {
        const int64_t at = t * n_out + o0;
        glu(gate.y + at, up.y + at, n_rows, out + at);
      }
    }
  });
}

void by_row_groups(const Job& job, DType w_type, const PackedWeight* packed, const float* x) {
  const quant::RowGroupKernels& k = job.plan.format->row_groups;
  const RowGroupWeight weight{
      &k, detail::packed_groups(packed, job.tier, w_type, job.w, job.n_in, job.n_out, job.plan.w_row_bytes, job.pool),
      job.n_out, job.y, job.plan.scale};
  const uint8_t* a = prepared_activations(k, job.n_in, x, job.n_tokens, job.pool);
  run_row_groups(std::span<const RowGroupWeight>(&weight, 1), job.n_in, a, job.n_tokens, job.pool);
}

bool uses_row_groups(const detail::MatmulPlan& plan) {
  return !plan.dequantize_path && plan.format->row_groups.rows > 0;
}

}  // namespace

void matmul(Isa tier, DType w_type, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
            float* y, ThreadPool* pool, const PackedWeight* packed) {
  const detail::MatmulPlan plan = detail::plan_matmul(tier, w_type, w, n_in, n_out, n_tokens);
  if (n_out == 0 || n_tokens == 0) return;
  if (pool != nullptr && (pool->size() == 1 || n_in * n_out * n_tokens < kMinParallelWork)) pool = nullptr;
  const Job job{tier, plan, static_cast<const uint8_t*>(w), n_in, n_out, n_tokens, y, pool};

  if (plan.dequantize_path) return by_dequantized_rows(job, x);
  if (uses_row_groups(plan)) return by_row_groups(job, w_type, packed, x);
  // Tiles only pay off with several tokens; one token (decode) streams each weight row once
  // through the table's vec_dot, whose per-row accumulators suit the hardware prefetcher better.
  if (n_tokens > 1 && plan.format->tiles.gemm != nullptr) return by_tiles(job, job.quantized_activations(x));
  by_vec_dot(job, plan.float_activations ? reinterpret_cast<const uint8_t*>(x) : job.quantized_activations(x));
}

namespace {

// The row-group weights of a group that can share one activation preparation and one parallel
// loop: every weight on row-group kernels of the same activation layout, packed for this tier.
// False (weights unusable) otherwise. `pool` becomes null when the work is too small for threads.
// For the weights of one call: at most kMaxGroup.
bool group_row_groups(std::span<const MatmulOutput> outputs, int64_t n_in, int64_t n_tokens, Isa tier,
                      ThreadPool*& pool, RowGroupWeight* weights) {
  int64_t work = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const MatmulOutput& out = outputs[i];
    const detail::MatmulPlan plan = detail::plan_matmul(tier, out.w_type, out.w, n_in, out.n_out, n_tokens);
    const quant::RowGroupKernels& k = plan.format->row_groups;
    const quant::RowGroupKernels& k0 = i == 0 ? k : *weights[0].k;
    if (!uses_row_groups(plan) || out.n_out == 0 || k.prepare_activation != k0.prepare_activation ||
        k.activation_bytes(n_in) != k0.activation_bytes(n_in))
      return false;
    // Weights packed per call share one scratch buffer, so only packed copies can be grouped.
    if (out.packed == nullptr || !out.packed->holds(tier, out.w_type, out.w, n_in, out.n_out)) return false;
    weights[i] = {&k, out.packed->groups(), out.n_out, out.y, plan.scale};
    work += n_in * out.n_out * n_tokens;
  }
  if (pool != nullptr && (pool->size() == 1 || work < kMinParallelWork)) pool = nullptr;
  return true;
}

}  // namespace

void matmul_group(Isa tier, std::span<const MatmulOutput> outputs, int64_t n_in, const float* x, int64_t n_tokens,
                  ThreadPool* pool) {
  if (outputs.empty() || n_tokens == 0) return;
  RowGroupWeight weights[kMaxGroup];
  ThreadPool* group_pool = pool;
  if (outputs.size() > kMaxGroup || !group_row_groups(outputs, n_in, n_tokens, tier, group_pool, weights)) {
    for (const MatmulOutput& o : outputs) matmul(tier, o.w_type, o.w, n_in, o.n_out, x, n_tokens, o.y, pool, o.packed);
    return;
  }
  const uint8_t* a = prepared_activations(*weights[0].k, n_in, x, n_tokens, group_pool);
  run_row_groups(std::span<const RowGroupWeight>(weights, outputs.size()), n_in, a, n_tokens, group_pool);
}

bool matmul_glu(Isa tier, const MatmulOutput& gate, const MatmulOutput& up, int64_t n_in, const float* x,
                int64_t n_tokens, GluKernel glu, float* out, ThreadPool* pool) {
  // The GLU kernels work in runs of 8 lanes and a scalar tail: tiles that start and end on runs
  // of 8 counted from the row's start (n_out and every unit's rows multiples of 8) give each
  // element the bits of one glu() call over the whole buffer.
  if (n_tokens == 0 || gate.n_out != up.n_out || gate.n_out % 8 != 0) return false;
  const MatmulOutput pair[] = {gate, up};
  RowGroupWeight weights[2];
  if (!group_row_groups(pair, n_in, n_tokens, tier, pool, weights)) return false;
  if (weights[0].k->rows != weights[1].k->rows || weights[0].rows_per_unit(n_tokens) % 8 != 0) return false;
  const uint8_t* a = prepared_activations(*weights[0].k, n_in, x, n_tokens, pool);
  run_glu_row_groups(weights[0], weights[1], n_in, a, n_tokens, glu, out, pool);
  return true;
}

bool matmul_experts(Isa tier, std::span<const ExpertMatmul> experts, int64_t n_in, GluKernel glu, ThreadPool* pool) {
  if (experts.empty()) return true;
  // The row-group weights, two per expert (gate, up) with glu, else one.
  const size_t per = glu != nullptr ? 2 : 1;
  thread_local std::vector<RowGroupWeight> weights;
  thread_local std::vector<int64_t> first_unit, first_token;  // per expert, then the totals
  weights.resize(experts.size() * per);
  first_unit.assign(experts.size() + 1, 0);
  first_token.assign(experts.size() + 1, 0);
  const quant::RowGroupKernels* k0 = nullptr;
  int64_t work = 0;
  for (size_t e = 0; e < experts.size(); ++e) {
    const ExpertMatmul& ex = experts[e];
    for (size_t j = 0; j < per; ++j) {
      const MatmulOutput& out = j == 0 ? ex.w : ex.up;
      const detail::MatmulPlan plan = detail::plan_matmul(tier, out.w_type, out.w, n_in, out.n_out, ex.n_tokens);
      const quant::RowGroupKernels& k = plan.format->row_groups;
      if (k0 == nullptr) k0 = &k;
      if (!uses_row_groups(plan) || out.n_out == 0 || k.prepare_activation != k0->prepare_activation ||
          k.activation_bytes(n_in) != k0->activation_bytes(n_in))
        return false;
      if (out.packed == nullptr || !out.packed->holds(tier, out.w_type, out.w, n_in, out.n_out)) return false;
      weights[e * per + j] = {&k, out.packed->groups(), out.n_out, out.y, plan.scale};
      work += n_in * out.n_out * ex.n_tokens;
    }
    const RowGroupWeight& w = weights[e * per];
    if (glu != nullptr) {  // as matmul_glu
      const RowGroupWeight& up = weights[e * per + 1];
      if (w.n_out != up.n_out || w.n_out % 8 != 0 || w.k->rows != up.k->rows || w.rows_per_unit(ex.n_tokens) % 8 != 0)
        return false;
    }
    const int64_t token_tiles = (ex.n_tokens + kTokenTile - 1) / kTokenTile;
    first_unit[e + 1] = first_unit[e] + w.row_units(ex.n_tokens) * token_tiles;
    first_token[e + 1] = first_token[e] + ex.n_tokens;
  }
  if (pool != nullptr && (pool->size() == 1 || work < kMinParallelWork)) pool = nullptr;

  // Every expert's activation rows, one after another.
  const size_t a_row = k0->activation_bytes(n_in);
  const int64_t n_rows = first_token.back();
  thread_local std::vector<uint8_t> buffer;  // the caller's: the workers read it through `a`
  if (buffer.size() < a_row * static_cast<size_t>(n_rows)) buffer.resize(a_row * static_cast<size_t>(n_rows));
  uint8_t* const a = buffer.data();
  const int64_t* const token_start = first_token.data();
  const auto expert_of = [&](const int64_t* starts, int64_t i) {  // the expert whose range holds i
    return static_cast<size_t>(std::upper_bound(starts, starts + experts.size() + 1, i) - starts - 1);
  };
  run_on(n_rows > 1 ? pool : nullptr, n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const size_t e = expert_of(token_start, r);
      k0->prepare_activation(experts[e].x + (r - token_start[e]) * n_in, n_in, a + static_cast<size_t>(r) * a_row);
    }
  });

  const int64_t* const unit_start = first_unit.data();
  const RowGroupWeight* const ws = weights.data();
  run_on(pool, first_unit.back(), [&](int64_t begin, int64_t end, int) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const size_t e = expert_of(unit_start, unit);
      const int64_t n_tokens = experts[e].n_tokens, token_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
      const RowGroupWeight& w = ws[e * per];
      const int64_t rows_per_unit = w.rows_per_unit(n_tokens), local = unit - unit_start[e];
      const int64_t o0 = local / token_tiles * rows_per_unit, t0 = local % token_tiles * kTokenTile;
      const int64_t n_out_rows = std::min(rows_per_unit, w.n_out - o0), n_t = std::min(kTokenTile, n_tokens - t0);
      const uint8_t* a_e = a + static_cast<size_t>(token_start[e]) * a_row;
      run_unit(w, n_in, a_e, a_row, o0, t0, n_out_rows, n_t);
      if (glu == nullptr) continue;
      const RowGroupWeight& up = ws[e * per + 1];
      run_unit(up, n_in, a_e, a_row, o0, t0, n_out_rows, n_t);
      for (int64_t t = t0; t < t0 + n_t; ++t) {
        const int64_t at = t * w.n_out + o0;
        glu(w.y + at, up.y + at, n_out_rows, w.y + at);
      }
    }
  });
  return true;
}

}  // namespace okapi::kernels
