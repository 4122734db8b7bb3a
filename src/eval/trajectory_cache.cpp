#include "eval/trajectory_cache.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "eval/intrinsic_dim.hpp"
#include "model/hparams.hpp"

namespace okapi::eval {

std::string_view predictor_name(Predictor p) {
  switch (p) {
    case Predictor::Skip: return "skip";
    case Predictor::Linear: return "linear";
    case Predictor::Nearest: return "nearest";
    case Predictor::NearestDelta: return "nearest+delta";
    case Predictor::NearestJacobi: return "nearest+J";
    case Predictor::NearestLocalJacobi: return "nearest+localJ";
  }
  return "?";
}

namespace {

// y ≈ mean_y + (x − mean_x) · b over the library rows (b is d x d, row-major, applied to row
// vectors), by ridge least squares: (XᵀX + λI) b = XᵀY on the centred rows.
struct AffineMap {
  int64_t d = 0;
  std::vector<double> mean_x, mean_y, b;

  // out = b applied to the row vector delta (J · δ in column-vector notation).
  void apply_linear(const double* delta, double* out) const {
    cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(d), static_cast<blasint>(d), 1.0, b.data(),
                static_cast<blasint>(d), delta, 1, 0.0, out, 1);
  }
};

std::vector<double> centred_rows(const float* rows, int64_t n, int64_t d, std::vector<double>& mean) {
  mean.assign(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mean[static_cast<size_t>(j)] += rows[i * d + j];
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<double> c(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) c[static_cast<size_t>(i * d + j)] = rows[i * d + j] - mean[static_cast<size_t>(j)];
  return c;
}

// Adds lambda I to the n x n Gram matrix, lambda = ridge x its mean eigenvalue, so the damping
// means the same at any scale; a floor keeps a library of identical points (trace 0) solvable.
void add_relative_ridge(std::vector<double>& gram, int64_t n, double ridge) {
  double trace = 0;
  for (int64_t i = 0; i < n; ++i) trace += gram[static_cast<size_t>(i * n + i)];
  const double lambda = std::max(ridge * trace / static_cast<double>(n), 1e-12);
  for (int64_t i = 0; i < n; ++i) gram[static_cast<size_t>(i * n + i)] += lambda;
}

AffineMap fit_affine(const float* x_rows, const float* y_rows, int64_t n, int64_t d, double ridge) {
  AffineMap m;
  m.d = d;
  const std::vector<double> x = centred_rows(x_rows, n, d, m.mean_x);
  const std::vector<double> y = centred_rows(y_rows, n, d, m.mean_y);
  std::vector<double> gram(static_cast<size_t>(d * d), 0.0);
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<blasint>(d), static_cast<blasint>(n), 1.0, x.data(),
              static_cast<blasint>(d), 0.0, gram.data(), static_cast<blasint>(d));
  add_relative_ridge(gram, d, ridge);
  m.b.assign(static_cast<size_t>(d * d), 0.0);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(d), static_cast<blasint>(d),
              static_cast<blasint>(n), 1.0, x.data(), static_cast<blasint>(d), y.data(), static_cast<blasint>(d), 0.0,
              m.b.data(), static_cast<blasint>(d));
  const lapack_int info = LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', static_cast<lapack_int>(d), static_cast<lapack_int>(d),
                                        gram.data(), static_cast<lapack_int>(d), m.b.data(), static_cast<lapack_int>(d));
  if (info != 0) throw_error("analyze: fitting the linear correction failed (LAPACK dposv info {})", info);
  return m;
}

// The local first-order correction at stored anchor `s`: with ΔX, ΔY the offsets of its stored
// neighbours from it at layers a and b (k x d each), ΔYᵀ (ΔX ΔXᵀ + λI)⁻¹ ΔX δ — the ridge
// least-squares linear map from ΔX to ΔY applied to δ, in its k x k (kernel) form.
void local_correction(const float* from_rows, const float* to_rows, int64_t d, int64_t s, const int64_t* neighbours,
                      int64_t k, double ridge, const double* delta, double* out) {
  std::vector<double> dx(static_cast<size_t>(k * d)), dy(static_cast<size_t>(k * d)), gram(static_cast<size_t>(k * k));
  std::vector<double> alpha(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = neighbours[j];
    for (int64_t i = 0; i < d; ++i) {
      dx[static_cast<size_t>(j * d + i)] = static_cast<double>(from_rows[n * d + i]) - from_rows[s * d + i];
      dy[static_cast<size_t>(j * d + i)] = static_cast<double>(to_rows[n * d + i]) - to_rows[s * d + i];
    }
  }
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, static_cast<blasint>(k), static_cast<blasint>(d), 1.0, dx.data(),
              static_cast<blasint>(d), 0.0, gram.data(), static_cast<blasint>(k));
  add_relative_ridge(gram, k, ridge);
  cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(k), static_cast<blasint>(d), 1.0, dx.data(),
              static_cast<blasint>(d), delta, 1, 0.0, alpha.data(), 1);
  const lapack_int info = LAPACKE_dposv(LAPACK_ROW_MAJOR, 'U', static_cast<lapack_int>(k), 1, gram.data(),
                                        static_cast<lapack_int>(k), alpha.data(), 1);
  if (info != 0) throw_error("analyze: fitting the local linear correction failed (LAPACK dposv info {})", info);
  cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(d), 1.0, dy.data(),
              static_cast<blasint>(d), alpha.data(), 1, 0.0, out, 1);
}

double norm(const double* v, int64_t d) {
  double s = 0;
  for (int64_t i = 0; i < d; ++i) s += v[i] * v[i];
  return std::sqrt(s);
}

// log-softmax of `logits` into `out`.
void log_softmax(const float* logits, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double top = logits[0];
  for (int64_t i = 1; i < n; ++i) top = std::max(top, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - top);
  const double log_sum = top + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = logits[i] - log_sum;
}

int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

struct Split {
  int64_t stored = 0, queries = 0;
};

// The true final logits of every query (log-softmax) and their top-1 token, computed once.
struct TrueLogits {
  std::vector<std::vector<double>> log_probs;
  std::vector<int64_t> top1;
};

// `nearest`: each query's nearest stored row at layer `from`; `local`: each stored row's nearest
// other stored rows there.
Transition score_transition(const HiddenStates& states, const Split& split, int64_t from, int64_t to,
                            const Neighbours& nearest, const Neighbours& local, const OutputHead* head,
                            const TrueLogits* truth, const GtcOptions& options) {
  const int64_t d = states.n_embd;
  const float* stored_from = states.row(from, 0);
  const float* stored_to = states.row(to, 0);
  const AffineMap map = fit_affine(stored_from, stored_to, split.stored, d, options.ridge);

  Transition t;
  t.from = from;
  t.to = to;
  std::array<std::vector<double>, kPredictors> errors;
  std::array<double, kPredictors> top1{}, kl{};
  std::vector<double> x(static_cast<size_t>(d)), truth_row(static_cast<size_t>(d)), delta(static_cast<size_t>(d)),
      correction(static_cast<size_t>(d)), diff(static_cast<size_t>(d));
  std::array<std::vector<double>, kPredictors> pred;
  for (auto& p : pred) p.resize(static_cast<size_t>(d));
  std::vector<float> pred_f(static_cast<size_t>(d)), logits(static_cast<size_t>(head ? head->n_vocab() : 0));
  std::vector<double> log_probs;
  double anchor_sum = 0;
  int64_t covered = 0;
  for (int64_t q = 0; q < split.queries; ++q) {
    const int64_t row = split.stored + q;
    const int64_t s = nearest.index[static_cast<size_t>(q)];
    const float* hq_from = states.row(from, row);
    const float* hq_to = states.row(to, row);
    const float* hs_from = stored_from + s * d;
    const float* hs_to = stored_to + s * d;
    for (int64_t i = 0; i < d; ++i) {
      x[static_cast<size_t>(i)] = hq_from[i];
      truth_row[static_cast<size_t>(i)] = hq_to[i];
      delta[static_cast<size_t>(i)] = static_cast<double>(hq_from[i]) - hs_from[i];
      diff[static_cast<size_t>(i)] = hq_from[i] - map.mean_x[static_cast<size_t>(i)];
    }
    const double x_norm = norm(x.data(), d);
    const double anchor = x_norm > 0 ? norm(delta.data(), d) / x_norm : 0.0;
    anchor_sum += anchor;
    covered += anchor < options.tolerance;

    map.apply_linear(diff.data(), correction.data());
    for (int64_t i = 0; i < d; ++i) {
      const size_t k = static_cast<size_t>(i);
      pred[static_cast<size_t>(Predictor::Skip)][k] = x[k];
      pred[static_cast<size_t>(Predictor::Linear)][k] = map.mean_y[k] + correction[k];
      pred[static_cast<size_t>(Predictor::Nearest)][k] = hs_to[i];
      pred[static_cast<size_t>(Predictor::NearestDelta)][k] = hs_to[i] + delta[k];
    }
    map.apply_linear(delta.data(), correction.data());
    for (int64_t i = 0; i < d; ++i) {
      pred[static_cast<size_t>(Predictor::NearestJacobi)][static_cast<size_t>(i)] = hs_to[i] + correction[static_cast<size_t>(i)];
    }
    local_correction(stored_from, stored_to, d, s, local.index.data() + s * local.k, local.k, options.ridge, delta.data(),
                     correction.data());
    for (int64_t i = 0; i < d; ++i) {
      pred[static_cast<size_t>(Predictor::NearestLocalJacobi)][static_cast<size_t>(i)] = hs_to[i] + correction[static_cast<size_t>(i)];
    }

    const double truth_norm = norm(truth_row.data(), d);
    for (int p = 0; p < kPredictors; ++p) {
      for (int64_t i = 0; i < d; ++i) diff[static_cast<size_t>(i)] = pred[static_cast<size_t>(p)][static_cast<size_t>(i)] - truth_row[static_cast<size_t>(i)];
      const double err = norm(diff.data(), d);
      errors[static_cast<size_t>(p)].push_back(truth_norm > 0 ? err / truth_norm : (err > 0 ? INFINITY : 0.0));
      if (head == nullptr) continue;
      for (int64_t i = 0; i < d; ++i) pred_f[static_cast<size_t>(i)] = static_cast<float>(pred[static_cast<size_t>(p)][static_cast<size_t>(i)]);
      head->logits(pred_f.data(), logits.data());
      top1[static_cast<size_t>(p)] += argmax(logits.data(), head->n_vocab()) == truth->top1[static_cast<size_t>(q)];
      log_softmax(logits.data(), head->n_vocab(), log_probs);
      const std::vector<double>& true_lp = truth->log_probs[static_cast<size_t>(q)];
      double divergence = 0;
      for (size_t v = 0; v < log_probs.size(); ++v) divergence += std::exp(true_lp[v]) * (true_lp[v] - log_probs[v]);
      kl[static_cast<size_t>(p)] += std::max(0.0, divergence);
    }
  }
  const double nq = static_cast<double>(split.queries);
  t.coverage = static_cast<double>(covered) / nq;
  t.mean_anchor_distance = anchor_sum / nq;
  for (int p = 0; p < kPredictors; ++p) {
    PredictionScore& sc = t.scores[static_cast<size_t>(p)];
    const std::vector<double>& e = errors[static_cast<size_t>(p)];
    double sum = 0;
    int64_t hits = 0;
    for (const double v : e) {
      sum += v;
      hits += v < options.tolerance;
    }
    sc.hit_rate = static_cast<double>(hits) / nq;
    sc.mean_relative_error = sum / nq;
    sc.median_relative_error = median(e);
    if (head != nullptr) {
      sc.top1 = top1[static_cast<size_t>(p)] / nq;
      sc.kl = kl[static_cast<size_t>(p)] / nq;
    }
  }
  return t;
}

}  // namespace

GtcReport measure_trajectory_cache(const HiddenStates& states, const OutputHead* head, const GtcOptions& options) {
  if (!(options.tolerance > 0) || !std::isfinite(options.tolerance)) {
    throw_error("analyze: the GTC tolerance must be a positive number, not {}", options.tolerance);
  }
  if (!(options.stored_fraction > 0 && options.stored_fraction < 1)) {
    throw_error("analyze: the stored fraction must be in (0, 1), not {}", options.stored_fraction);
  }
  if (states.n_layer < 1 || static_cast<int64_t>(states.layers.size()) != states.n_layer + 1) {
    throw_error("analyze: GTC needs the hidden states of at least one layer");
  }
  Split split;
  split.stored = static_cast<int64_t>(std::llround(options.stored_fraction * static_cast<double>(states.n_tokens)));
  split.queries = states.n_tokens - split.stored;
  if (split.stored < 2 || split.queries < 2) {
    throw_error("analyze: {} tokens split {} stored / {} queries; GTC needs at least 2 of each", states.n_tokens,
                split.stored, split.queries);
  }
  if (options.local_neighbours < 1) throw_error("analyze: the local J needs at least 1 neighbour, not {}", options.local_neighbours);
  if (head != nullptr && head->n_embd() != states.n_embd) {
    throw_error("analyze: the output head is {} wide, the hidden states {}", head->n_embd(), states.n_embd);
  }
  const int64_t d = states.n_embd, L = states.n_layer;
  GtcReport report;
  report.stored = split.stored;
  report.queries = split.queries;
  report.n_layer = L;
  report.n_embd = d;
  report.tolerance = options.tolerance;
  report.lookup_flops = 2.0 * static_cast<double>(split.stored) * static_cast<double>(d);
  report.jacobi_flops = 2.0 * static_cast<double>(d) * static_cast<double>(d);

  TrueLogits truth;
  if (head != nullptr) {
    std::vector<float> logits(static_cast<size_t>(head->n_vocab()));
    for (int64_t q = 0; q < split.queries; ++q) {
      head->logits(states.row(L, split.stored + q), logits.data());
      truth.top1.push_back(argmax(logits.data(), head->n_vocab()));
      truth.log_probs.emplace_back();
      log_softmax(logits.data(), head->n_vocab(), truth.log_probs.back());
    }
  }
  for (int64_t a = 0; a < L; ++a) {
    const std::span<const float> layer = states.layer(a);
    const std::span<const float> stored = layer.first(static_cast<size_t>(split.stored * d));
    const Neighbours nearest = nearest_neighbours(layer.subspan(static_cast<size_t>(split.stored * d)), split.queries,
                                                  stored, split.stored, d, 1, false);
    const Neighbours local = nearest_neighbours(stored, split.stored, stored, split.stored, d,
                                                std::min(options.local_neighbours, split.stored - 1), true);
    // The last block's step ends at the final state, so its logits are measured there too.
    report.steps.push_back(score_transition(states, split, a, a + 1, nearest, local, a + 1 == L ? head : nullptr,
                                            a + 1 == L ? &truth : nullptr, options));
    if (head != nullptr) {
      report.logits.push_back(a + 1 == L ? report.steps.back()
                                         : score_transition(states, split, a, L, nearest, local, head, &truth, options));
    }
  }
  return report;
}

double block_flops_per_token(const model::HParams& hp, int64_t context) {
  const double d = static_cast<double>(hp.n_embd);
  const double q = static_cast<double>(hp.n_head * hp.head_dim_k);
  const double kv = static_cast<double>(hp.n_head_kv * (hp.head_dim_k + hp.head_dim_v));
  const double o = static_cast<double>(hp.n_head * hp.head_dim_v);
  const double projections = d * (q + kv) + o * d;
  const double ffn = 3.0 * d * static_cast<double>(hp.n_ff);  // gate, up, down
  const double attention = static_cast<double>(hp.n_head * (hp.head_dim_k + hp.head_dim_v)) * static_cast<double>(context);
  return 2.0 * (projections + ffn + attention);
}

}  // namespace okapi::eval
