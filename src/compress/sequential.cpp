#include "compress/sequential.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "backend/make_backend.hpp"
#include "compress/linalg.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "format/model_file.hpp"
#include "model/blocks.hpp"

namespace okapi::compress {

namespace {

// Input sites in forward order within a layer.
int site_of(const std::string& kind) {
  if (kind == "attn_q" || kind == "attn_k" || kind == "attn_v" || kind == "attn_qkv") return 0;
  if (kind == "attn_output") return 1;
  if (kind == "ffn_gate" || kind == "ffn_up") return 2;
  return 3;  // ffn_down
}

// Keeps the input of the mat-muls of one site during a forward pass.
class SiteCapture : public ObservingOps::Observer {
 public:
  std::vector<std::string> weights;  // the site's weight tensor names
  std::vector<float> rows;
  int64_t n = 0, tokens = 0;

  void matmul_input(std::span<const std::string_view> names, const float* x, int64_t n_tokens, int64_t width) override {
    // (a row range of a fused tensor, phi3's, reads the input of the tensor)
    const bool ours = std::any_of(names.begin(), names.end(), [&](std::string_view name) {
      return std::find(weights.begin(), weights.end(), model::stored_tensor_name(name)) != weights.end();
    });
    if (!ours) return;
    rows.assign(x, x + n_tokens * width);
    n = width;
    tokens = n_tokens;
  }
  void norm_input(std::string_view, const float*, int64_t, int64_t) override {}
};

Factors fit_unit(const Unit& u, const std::vector<double>& cross, std::vector<double> seen) {
  const int64_t n = u.cols, rows = u.stacked_rows, rank = u.rank;
  std::vector<double> w(static_cast<size_t>(rows * n));
  size_t at = 0;
  for (const gguf::TensorInfo* m : u.members) {
    const std::vector<float> values = dequantized_matrix(*m, "compress");
    std::copy(values.begin(), values.end(), w.begin() + static_cast<std::ptrdiff_t>(at));
    at += values.size();
  }
  // P = W E[x x̂ᵀ], then M = P L̂⁻ᵀ.
  std::vector<double> m(w.size());
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(n),
              static_cast<blasint>(n), 1.0, w.data(), static_cast<blasint>(n), cross.data(), static_cast<blasint>(n), 0.0,
              m.data(), static_cast<blasint>(n));
  double damping = 0;
  const std::vector<double> l = cholesky_lower(std::move(seen), n, 1e-6, &damping);
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, static_cast<blasint>(rows),
              static_cast<blasint>(n), 1.0, l.data(), static_cast<blasint>(n), m.data(), static_cast<blasint>(n));
  const ThinSvd svd = thin_svd(std::move(m), rows, n);
  std::vector<double> in = svd_in_factor(svd, rank);
  multiply_by_lower_inverse(l, n, in, rank);
  Factors f;
  f.in.assign(in.begin(), in.end());
  f.outs = svd_out_factors(svd, u, rank);
  return f;
}

}  // namespace

std::vector<Factors> sequential_factors(const CalibrationSource& source, const std::vector<Unit>& units,
                                        const std::function<void(size_t, size_t)>& on_site) {
  std::map<std::pair<int64_t, int>, std::vector<size_t>> sites;  // (layer, site) -> units
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    if (u.rank == 0) continue;
    const auto [layer, kind] = layer_and_kind(u.members.front()->name);
    for (const gguf::TensorInfo* m : u.members) {
      if (layer_and_kind(m->name) .first != layer) throw_error("compress: {} spans layers; it cannot be fitted site by site", m->name);
    }
    sites[{layer, site_of(kind)}].push_back(i);
  }
  std::unique_ptr<model::Model> model = model::Model::load(gguf::open_model(source.model));
  const model::HParams& hp = model->hparams();
  const std::vector<std::vector<int32_t>> chunks = calibration_chunks(*model, source.text, source.options);
  use_single_threaded_blas();
  ThreadPool pool(source.options.threads);
  SiteCapture capture;
  backend::BackendOptions cpu_options;
  cpu_options.pool = &pool;
  const std::unique_ptr<model::Ops> cpu = backend::make_backend(cpu_options);
  ObservingOps ops(*cpu, capture);
  ops.prepare(model->weights());
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, static_cast<int64_t>(chunks.front().size())};
  std::unique_ptr<kv::KvStore> kv = ops.make_kv(shape, model::KvTypes{});

  std::vector<Factors> factors(units.size());
  std::map<std::string, ObservingOps::Replacement> replaced;
  size_t done = 0;
  for (const auto& [site, members] : sites) {
    if (on_site) on_site(done, sites.size());
    capture.weights.clear();
    for (const size_t i : members)
      for (const gguf::TensorInfo* m : units[i].members) capture.weights.push_back(m->name);
    const int64_t n = units[members.front()].cols;
    const auto nn = static_cast<size_t>(n * n);
    std::vector<double> cross(nn, 0.0), seen(nn, 0.0);
    std::vector<float> block(nn);
    int64_t tokens = 0;
    for (const auto& chunk : chunks) {
      ops.set_replacements(nullptr);
      run_chunk(*model, ops, *kv, chunk);
      const std::vector<float> dense = std::move(capture.rows);
      ops.set_replacements(&replaced);
      run_chunk(*model, ops, *kv, chunk);
      const std::vector<float>& compressed = capture.rows;
      if (capture.n != n || dense.size() != compressed.size()) {
        throw_error("compress: the input of {} was not seen in a calibration pass", capture.weights.front());
      }
      const auto t = static_cast<blasint>(capture.tokens);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(n), t, 1.0f,
                  dense.data(), static_cast<blasint>(n), compressed.data(), static_cast<blasint>(n), 0.0f, block.data(),
                  static_cast<blasint>(n));
      for (size_t i = 0; i < nn; ++i) cross[i] += block[i];
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(n), t, 1.0f,
                  compressed.data(), static_cast<blasint>(n), compressed.data(), static_cast<blasint>(n), 0.0f,
                  block.data(), static_cast<blasint>(n));
      for (size_t i = 0; i < nn; ++i) seen[i] += block[i];
      tokens += capture.tokens;
    }
    for (size_t i = 0; i < nn; ++i) {
      cross[i] /= static_cast<double>(tokens);
      seen[i] /= static_cast<double>(tokens);
    }
    for (const size_t i : members) {
      factors[i] = fit_unit(units[i], cross, seen);
      for (size_t j = 0; j < units[i].members.size(); ++j) {
        replaced[units[i].members[j]->name] = {units[i].rank, factors[i].in, factors[i].outs[j]};
      }
    }
    ++done;
  }
  if (on_site) on_site(done, sites.size());
  return factors;
}

}  // namespace okapi::compress
