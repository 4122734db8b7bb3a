#include "backend/attention_driver.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/exact_islands.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/online_softmax.hpp"
#include "kv/exact_store.hpp"
#include "kv/kv_store.hpp"

namespace okapi::backend {

namespace {

// Prefill tokens whose queries meet a tile together (with the heads of their GQA group).
constexpr int64_t kBlockTokens = 8;

// The cells position `pos` sees: [first_visible, pos + 1).
int64_t first_visible(const model::AttentionConfig& c, int64_t pos) {
  return c.sliding_window > 0 ? std::max<int64_t>(0, pos - c.sliding_window + 1) : 0;
}

// Float operations of the whole call, for the decision to go parallel.
int64_t attention_work(const model::AttentionConfig& c, std::span<const int32_t> positions) {
  int64_t cells = 0;
  for (const int32_t pos : positions) cells += pos + 1 - first_visible(c, pos);
  return cells * c.n_head * (c.head_dim_k + c.head_dim_v) * 2;
}

// 0, n-1, 1, n-2, ...: contiguous chunks of tasks mix long and short causal rows.
int64_t zigzag(int64_t j, int64_t n) { return (j % 2 == 0) ? j / 2 : n - 1 - j / 2; }

// The query rows of one kv head and one block of tokens of one store (token-major, then the heads
// of the group), with the cells each sees and the tiles they touch.
struct QueryRows {
  const kv::KvStore* kv = nullptr;
  int64_t kv_head = 0;
  std::vector<float> prepared;  // the query rows in the store's domain (KvStore::prepare_queries)
  std::vector<const float*> q;
  std::vector<float*> out;
  std::vector<int64_t> first, last;
  int64_t tile_lo = 0, tile_hi = 0;  // tiles [tile_lo, tile_hi)
  int n() const { return static_cast<int>(q.size()); }
};

// Per-thread buffers of one tile: scores / probabilities, the rows' ranges within the tile.
struct TileScratch {
  std::vector<float> scores;
  std::vector<int64_t> begin, end;
};

// The work units of one or more runs (each run: tokens of one store): a unit is one block of
// kBlockTokens tokens of a run with one kv head. Units are numbered run by run.
class TiledAttention {
 public:
  TiledAttention(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c, Isa tier)
      : runs_(runs), c_(c), tier_(tier), group_(c.n_head / c.n_head_kv) {
    if (runs.size() > kSmallRuns) large_.resize(runs.size() + 1);
    int64_t* first = first_unit();
    first[0] = 0;
    int64_t max_tokens = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      const auto n_tokens = static_cast<int64_t>(runs[r].positions.size());
      max_tokens = std::max(max_tokens, n_tokens);
      first[r + 1] = first[r] + (n_tokens + kBlockTokens - 1) / kBlockTokens * c.n_head_kv;
    }
    max_rows_ = static_cast<int>(std::min(kBlockTokens, max_tokens) * group_);
  }
  int64_t n_units() const { return first_unit()[runs_.size()]; }
  int max_rows() const { return max_rows_; }

  // Unit u of its run: block zigzag(u / n_head_kv), kv head u % n_head_kv.
  void rows_of(int64_t unit, QueryRows& rows) const {
    const int64_t* first_of = first_unit();
    const auto r = static_cast<size_t>(std::upper_bound(first_of, first_of + runs_.size() + 1, unit) - first_of - 1);
    const model::AttentionRun& run = runs_[r];
    const int64_t u = unit - first_of[r];
    const auto n_tokens = static_cast<int64_t>(run.positions.size());
    const int64_t n_blocks = (n_tokens + kBlockTokens - 1) / kBlockTokens;
    const int64_t kv_head = u % c_.n_head_kv;
    const int64_t block = zigzag(u / c_.n_head_kv, n_blocks);
    const int64_t t0 = block * kBlockTokens, t1 = std::min(n_tokens, t0 + kBlockTokens);
    rows.kv = run.kv;
    rows.kv_head = kv_head;
    rows.q.clear();
    rows.out.clear();
    rows.first.clear();
    rows.last.clear();
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = run.positions[static_cast<size_t>(t)];
      for (int64_t h = kv_head * group_; h < (kv_head + 1) * group_; ++h) {
        rows.q.push_back(run.q + (t * c_.n_head + h) * c_.head_dim_k);
        rows.out.push_back(run.out + (t * c_.n_head + h) * c_.head_dim_v);
        rows.first.push_back(first_visible(c_, pos));
        rows.last.push_back(pos + 1);
      }
      lo = std::min(lo, first_visible(c_, pos));
      hi = std::max(hi, pos + 1);
    }
    rows.tile_lo = lo / kAttentionTile;
    rows.tile_hi = (hi + kAttentionTile - 1) / kAttentionTile;
    const int64_t dim = c_.head_dim_k;
    rows.prepared.resize(rows.q.size() * static_cast<size_t>(dim));
    for (size_t i = 0; i < rows.q.size(); ++i) {
      std::copy(rows.q[i], rows.q[i] + dim, rows.prepared.data() + static_cast<int64_t>(i) * dim);
      rows.q[i] = rows.prepared.data() + static_cast<int64_t>(i) * dim;
    }
    run.kv->prepare_queries(c_.layer, kv_head, rows.prepared.data(), rows.n());
  }

  // The partial of tile `tile` for every row: max m[r], sum l[r] (-1: the row sees none of the
  // tile), accumulator acc[r * dim_v]. Depends only on each row's own query and range.
  void tile_partial(const QueryRows& rows, int64_t tile, TileScratch& s, float* m, float* l, float* acc) const {
    const int n = rows.n();
    const int64_t c0 = tile * kAttentionTile, c1 = c0 + kAttentionTile;
    s.scores.resize(static_cast<size_t>(n * kAttentionTile));
    s.begin.resize(static_cast<size_t>(n));
    s.end.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<size_t>(r);
      s.begin[i] = std::max(c0, rows.first[i]);
      s.end[i] = std::min(c1, rows.last[i]);
      if (s.begin[i] >= s.end[i]) s.begin[i] = s.end[i] = c0;
    }
    const kv::tile::Queries qs{rows.q.data(), n, s.begin.data(), s.end.data()};
    rows.kv->tile_scores(c_.layer, rows.kv_head, qs, c0, s.scores.data(), kAttentionTile);
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<size_t>(r);
      const int64_t count = s.end[i] - s.begin[i];
      if (count == 0) {
        l[r] = -1.0f;
        continue;
      }
      float* x = s.scores.data() + r * kAttentionTile + (s.begin[i] - c0);
      // As ggml: scale (and soft-cap) the scores before the softmax.
      if (c_.softcap > 0.0f) {
        const float inv = 1.0f / c_.softcap;  // ggml_scale by 1 / cap, tanh, ggml_scale by cap
        for (int64_t j = 0; j < count; ++j) x[j] = std::tanh((x[j] * c_.scale) * inv) * c_.softcap;
      } else {
        for (int64_t j = 0; j < count; ++j) x[j] *= c_.scale;
      }
      m[r] = kernels::softmax_tile(tier_, x, count, &l[r]);
    }
    std::fill(acc, acc + n * c_.head_dim_v, 0.0f);
    rows.kv->tile_accumulate(c_.layer, rows.kv_head, qs, c0, s.scores.data(), kAttentionTile, acc);
  }

  // out row r = acc[r] (normalized already; with sinks, renormalized over the sink's logit too:
  // m[r], l[r] are the row's merged max and sum), mapped back from the store's domain.
  void finish(const QueryRows& rows, const float* m, const float* l, float* acc) const {
    const int64_t dim = c_.head_dim_v;
    if (c_.sinks != nullptr) {
      for (int r = 0; r < rows.n(); ++r) {
        if (l[r] < 0.0f) continue;  // the row saw no cell (never for causal rows)
        const float sink = c_.sinks[rows.kv_head * group_ + r % group_];
        // acc * l / (l + e^(sink - m)), both sides taken against max(m, sink) as ggml does.
        const float top = std::max(m[r], sink);
        const float kept = l[r] * std::exp(m[r] - top);
        const float factor = kept / (kept + std::exp(sink - top));
        for (int64_t d = 0; d < dim; ++d) acc[r * dim + d] *= factor;
      }
    }
    rows.kv->finish_values(c_.layer, rows.kv_head, acc, rows.n());
    for (int r = 0; r < rows.n(); ++r) std::copy(acc + r * dim, acc + (r + 1) * dim, rows.out[static_cast<size_t>(r)]);
  }

 private:
  static constexpr size_t kSmallRuns = 32;  // runs whose unit offsets need no allocation
  int64_t* first_unit() { return large_.empty() ? small_ : large_.data(); }
  const int64_t* first_unit() const { return large_.empty() ? small_ : large_.data(); }

  std::span<const model::AttentionRun> runs_;
  const model::AttentionConfig& c_;
  Isa tier_;
  int64_t group_;
  int max_rows_ = 0;
  int64_t small_[kSmallRuns + 1] = {};
  std::vector<int64_t> large_;  // first unit of each run (and the total) when there are many runs
};

// The running state of every row of a unit, merged from tile partials in tile order.
struct RunningState {
  std::vector<float> m, l, acc;
  void reset(int n, int64_t dim) {
    m.assign(static_cast<size_t>(n), 0.0f);
    l.assign(static_cast<size_t>(n), -1.0f);
    acc.assign(static_cast<size_t>(n * dim), 0.0f);
  }
  void merge(int n, int64_t dim, const float* m_t, const float* l_t, const float* acc_t) {
    for (int r = 0; r < n; ++r)
      if (l_t[r] >= 0.0f)
        kernels::merge_softmax_partial(&m[static_cast<size_t>(r)], &l[static_cast<size_t>(r)], acc.data() + r * dim,
                                       m_t[r], l_t[r], acc_t + r * dim, dim);
  }
};

}  // namespace

void tiled_attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q, std::span<const int32_t> positions,
                     float* out, Isa tier, ThreadPool* pool) {
  const model::AttentionRun run{&kv, q, positions, out};
  tiled_attention(std::span<const model::AttentionRun>(&run, 1), c, tier, pool);
}

void tiled_attention(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c, Isa tier,
                     ThreadPool* pool) {
  int64_t work = 0, max_pos = 0;
  for (const model::AttentionRun& run : runs) {
    work += attention_work(c, run.positions);
    for (const int32_t pos : run.positions) max_pos = std::max<int64_t>(max_pos, pos);
  }
  if (work == 0) return;  // no tokens
  const TiledAttention attn(runs, c, tier);
  const int64_t dim = c.head_dim_v;
  const int rows_max = attn.max_rows();
  const int64_t n_units = attn.n_units();
  const int threads = pool ? pool->size() : 1;

  // Split-K: too few units to keep the threads busy, and long enough rows to split.
  if (threads > 1 && n_units < 4 * threads && max_pos >= kAttentionTile && work >= kMinParallelWork) {
    // Pass 1: one task per (unit, tile), partials kept; pass 2: per unit, merge in tile order.
    std::vector<QueryRows> units(static_cast<size_t>(n_units));
    std::vector<int64_t> task_start(static_cast<size_t>(n_units + 1), 0);
    for (int64_t u = 0; u < n_units; ++u) {
      attn.rows_of(u, units[static_cast<size_t>(u)]);
      const QueryRows& rows = units[static_cast<size_t>(u)];
      task_start[static_cast<size_t>(u + 1)] = task_start[static_cast<size_t>(u)] + rows.tile_hi - rows.tile_lo;
    }
    const int64_t n_tasks = task_start.back();
    const int64_t stride = rows_max * (dim + 2);  // per task: m[rows], l[rows], acc[rows][dim]
    std::vector<float> partials(static_cast<size_t>(n_tasks * stride));
    auto m_of = [&](int64_t task) { return partials.data() + task * stride; };
    auto l_of = [&](int64_t task) { return partials.data() + task * stride + rows_max; };
    auto acc_of = [&](int64_t task) { return partials.data() + task * stride + 2 * rows_max; };
    parallel_for(pool, n_tasks, work, [&](int64_t begin, int64_t end) {
      TileScratch scratch;
      for (int64_t task = begin; task < end; ++task) {
        const int64_t u = std::upper_bound(task_start.begin(), task_start.end(), task) - task_start.begin() - 1;
        const QueryRows& rows = units[static_cast<size_t>(u)];
        const int64_t tile = rows.tile_lo + (task - task_start[static_cast<size_t>(u)]);
        attn.tile_partial(rows, tile, scratch, m_of(task), l_of(task), acc_of(task));
      }
    });
    parallel_for(pool, n_units, n_tasks * stride, [&](int64_t begin, int64_t end) {
      RunningState state;
      for (int64_t u = begin; u < end; ++u) {
        const QueryRows& rows = units[static_cast<size_t>(u)];
        state.reset(rows.n(), dim);
        for (int64_t task = task_start[static_cast<size_t>(u)]; task < task_start[static_cast<size_t>(u + 1)]; ++task)
          state.merge(rows.n(), dim, m_of(task), l_of(task), acc_of(task));
        attn.finish(rows, state.m.data(), state.l.data(), state.acc.data());
      }
    });
    return;
  }

  parallel_for(pool, n_units, work, [&](int64_t begin, int64_t end) {
    QueryRows rows;
    TileScratch scratch;
    RunningState state;
    std::vector<float> m_t(static_cast<size_t>(rows_max)), l_t(static_cast<size_t>(rows_max));
    std::vector<float> acc_t(static_cast<size_t>(rows_max * dim));
    for (int64_t u = begin; u < end; ++u) {
      attn.rows_of(u, rows);
      state.reset(rows.n(), dim);
      for (int64_t tile = rows.tile_lo; tile < rows.tile_hi; ++tile) {
        attn.tile_partial(rows, tile, scratch, m_t.data(), l_t.data(), acc_t.data());
        state.merge(rows.n(), dim, m_t.data(), l_t.data(), acc_t.data());
      }
      attn.finish(rows, state.m.data(), state.l.data(), state.acc.data());
    }
  });
}

void exact_attention(const kv::KvStore& kv, const model::AttentionConfig& c, const float* q, std::span<const int32_t> positions,
                     float* out, Isa tier, ThreadPool* pool) {
  const model::AttentionRun run{&kv, q, positions, out};
  exact_attention(std::span<const model::AttentionRun>(&run, 1), c, tier, pool);
}

void exact_attention(std::span<const model::AttentionRun> runs, const model::AttentionConfig& c, Isa tier,
                     ThreadPool* pool) {
  int64_t n_tasks = 0, work = 0;
  for (const model::AttentionRun& run : runs) {
    if (!kv::is_exact_store(*run.kv))
      throw_error("exact mode: attention needs an exact KV store (exact-ntt or exact-direct), got '{}'",
                  run.kv->type_name());
    n_tasks += static_cast<int64_t>(run.positions.size()) * c.n_head;
    work += attention_work(c, run.positions);
  }
  const int64_t group = c.n_head / c.n_head_kv;
  // One task per (run, token, head), numbered run by run; each output row is computed by exactly
  // one task.
  parallel_for(pool, n_tasks, work, [&](int64_t begin, int64_t end) {
    std::vector<float> probs;
    std::vector<double> scratch;
    size_t r = 0;
    int64_t run_first = 0;  // the first task of run r
    for (int64_t task = begin; task < end; ++task) {
      while (task - run_first >= static_cast<int64_t>(runs[r].positions.size()) * c.n_head) {
        run_first += static_cast<int64_t>(runs[r].positions.size()) * c.n_head;
        ++r;
      }
      const model::AttentionRun& run = runs[r];
      const auto n_tokens = static_cast<int64_t>(run.positions.size());
      const int64_t local = task - run_first;
      const int64_t t = zigzag(local / c.n_head, n_tokens), h = local % c.n_head;
      const int64_t pos = run.positions[static_cast<size_t>(t)];
      const int64_t first = first_visible(c, pos), last = pos + 1;
      probs.resize(static_cast<size_t>(last - first));
      run.kv->scores(c.layer, h / group, run.q + (t * c.n_head + h) * c.head_dim_k, first, last, probs.data());
      exact_islands::softmax_scores(probs.data(), last - first, c.scale, c.softcap, c.sinks ? &c.sinks[h] : nullptr,
                                    scratch, tier);
      run.kv->accumulate_values(c.layer, h / group, probs.data(), first, last,
                                run.out + (t * c.n_head + h) * c.head_dim_v);
    }
  });
}

}  // namespace okapi::backend
