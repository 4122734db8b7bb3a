#include "lab/online_basis.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>

#include "compress/linalg.hpp"
#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "model/blocks.hpp"

namespace okapi::lab {
namespace {

constexpr std::string_view kOutSuffix = ".lr_out.weight";

std::vector<float> dequantized(const gguf::TensorInfo& t) {
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  quant::dequantize_tensor(t.type, t.bytes(), t.shape, values.data());
  return values;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void orthonormalize_rows(std::span<float> rows, int64_t count, int64_t n) {
  if (count > n) throw_error("orthonormalize: {} rows of length {} cannot be orthonormal", count, n);
  if (count == 0) return;
  // The rows (count x n, row-major) are the columns of an n x count column-major matrix: its
  // Householder QR gives orthonormal columns Q, the Gram-Schmidt of the rows in order up to
  // signs, which follow R's diagonal. A dependent row still gets an orthonormal column.
  std::vector<double> a(rows.begin(), rows.end());
  std::vector<double> tau(static_cast<size_t>(count));
  const auto m = static_cast<lapack_int>(n), k = static_cast<lapack_int>(count);
  if (LAPACKE_dgeqrf(LAPACK_COL_MAJOR, m, k, a.data(), m, tau.data()) != 0)
    throw_error("orthonormalize: LAPACK dgeqrf failed on {} rows of {}", count, n);
  std::vector<double> sign(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) sign[static_cast<size_t>(j)] = a[static_cast<size_t>(j * n + j)] < 0 ? -1.0 : 1.0;
  if (LAPACKE_dorgqr(LAPACK_COL_MAJOR, m, k, k, a.data(), m, tau.data()) != 0)
    throw_error("orthonormalize: LAPACK dorgqr failed on {} rows of {}", count, n);
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t c = 0; c < n; ++c)
      rows[static_cast<size_t>(j * n + c)] = static_cast<float>(sign[static_cast<size_t>(j)] * a[static_cast<size_t>(j * n + c)]);
  }
}

void oja_steps(std::span<float> basis, int64_t rank, int64_t n, std::span<const std::span<const float>> samples,
               std::span<const double> etas) {
  if (samples.size() != etas.size()) throw_error("oja: {} samples with {} learning rates", samples.size(), etas.size());
  std::vector<double> dots(static_cast<size_t>(rank));
  std::vector<double> moved(basis.begin(), basis.end());
  bool any_step = false;
  for (size_t s = 0; s < samples.size(); ++s) {
    const std::span<const float> x = samples[s];
    if (static_cast<int64_t>(x.size()) != n) throw_error("oja: a sample of {} values for a basis of width {}", x.size(), n);
    // Projections onto the basis before the batch: the rank-1 steps of one batch are summed and
    // orthonormalized once (to first order in eta the same as one after each).
    for (int64_t i = 0; i < rank; ++i) {
      double d = 0;
      for (int64_t c = 0; c < n; ++c) d += double{basis[static_cast<size_t>(i * n + c)]} * x[static_cast<size_t>(c)];
      dots[static_cast<size_t>(i)] = d;
    }
    for (int64_t i = 0; i < rank; ++i) {
      const double step = etas[s] * dots[static_cast<size_t>(i)];
      if (step == 0) continue;
      any_step = true;
      for (int64_t c = 0; c < n; ++c) moved[static_cast<size_t>(i * n + c)] += step * x[static_cast<size_t>(c)];
    }
  }
  if (!any_step) return;  // samples orthogonal to the basis move nothing
  for (size_t k = 0; k < moved.size(); ++k) basis[k] = static_cast<float>(moved[k]);
  orthonormalize_rows(basis, rank, n);
}

void oja_step(std::span<float> basis, int64_t rank, int64_t n, std::span<const float> x, double eta) {
  const std::span<const float> samples[] = {x};
  const double etas[] = {eta};
  oja_steps(basis, rank, n, samples, etas);
}

OnlineBasis::OnlineBasis(std::vector<OnlineBasisUnit> units, OnlineBasisOptions options)
    : units_(std::move(units)), options_(options) {
  if (units_.empty()) throw_error("online basis: no low-rank projection to update");
  if (!(options_.eta0 > 0) || options_.min_rejections < 1 || options_.queue_capacity < 1)
    throw_error("online basis: eta0 must be > 0, min_rejections and queue_capacity >= 1");
  for (size_t u = 0; u < units_.size(); ++u) {
    OnlineBasisUnit& unit = units_[u];
    if (unit.weights.empty() || unit.weights.size() != unit.dense.size() || unit.rank < 1 ||
        static_cast<int64_t>(unit.basis.size()) != unit.rank * unit.n_in)
      throw_error("online basis: unit {} is malformed", u);
    for (const auto& w : unit.dense) {
      if (w.empty() || static_cast<int64_t>(w.size()) % unit.n_in != 0)
        throw_error("online basis: a weight of unit {} is not n_out x {}", u, unit.n_in);
    }
    orthonormalize_rows(unit.basis, unit.rank, unit.n_in);
    rebuild(u);
  }
}

OnlineBasis::OnlineBasis(const gguf::File& compressed, const model::Model& dense, OnlineBasisOptions options)
    : OnlineBasis(
          [&] {
            // Units by in-factor tensor (a shared basis is stored once and named by the others).
            std::vector<OnlineBasisUnit> units;
            std::map<std::string, size_t> unit_of;
            for (const gguf::TensorInfo& t : compressed.tensors()) {
              if (!t.name.ends_with(kOutSuffix)) continue;
              const std::string prefix = t.name.substr(0, t.name.size() - kOutSuffix.size());
              std::string in_name = prefix + ".lr_in.weight";
              if (const gguf::Value* shared = compressed.find(std::string(model::kSharedInKeyPrefix) + prefix);
                  shared && shared->is_string())
                in_name = shared->as_string();
              const gguf::TensorInfo* in = compressed.find_tensor(in_name);
              const std::string weight = prefix + ".weight";
              const gguf::TensorInfo* w = dense.file().find_tensor(weight);
              if (in == nullptr || in->shape.size() != 2)
                throw_error("online basis: {} has no in-factor {}", compressed.name(), in_name);
              if (w == nullptr || w->shape.size() != 2)
                throw_error("online basis: {} has no dense {} for {}'s factors", dense.file().name(), weight,
                            compressed.name());
              if (w->shape[0] != in->shape[0])
                throw_error("online basis: {} takes {} inputs in {} but its factor {} takes {}", weight, w->shape[0],
                            dense.file().name(), in_name, in->shape[0]);
              auto [it, added] = unit_of.try_emplace(in_name, units.size());
              if (added) {
                OnlineBasisUnit unit;
                unit.n_in = in->shape[0];
                unit.rank = in->shape[1];
                unit.basis = dequantized(*in);
                units.push_back(std::move(unit));
              }
              units[it->second].weights.push_back(weight);
              units[it->second].dense.push_back(dequantized(*w));
            }
            return units;
          }(),
          options) {}

void OnlineBasis::rebuild(size_t u) {
  const OnlineBasisUnit& unit = units_[u];
  compress::use_blas_threads_for(0);
  for (size_t k = 0; k < unit.weights.size(); ++k) {
    compress::ObservingOps::Replacement& r = replacements_[unit.weights[k]];
    const int64_t n_out = static_cast<int64_t>(unit.dense[k].size()) / unit.n_in;
    r.rank = unit.rank;
    r.in = unit.basis;
    r.out.assign(static_cast<size_t>(n_out * unit.rank), 0.0f);
    // out = W · Vᵀ: (n_out x n_in) · (n_in x rank).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(n_out), static_cast<blasint>(unit.rank),
                static_cast<blasint>(unit.n_in), 1.0f, unit.dense[k].data(), static_cast<blasint>(unit.n_in),
                unit.basis.data(), static_cast<blasint>(unit.n_in), 0.0f, r.out.data(), static_cast<blasint>(unit.rank));
  }
}

void OnlineBasis::queue_rejection(std::vector<std::vector<float>> samples) {
  if (samples.size() != units_.size())
    throw_error("online basis: a rejection with {} samples for {} bases", samples.size(), units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    if (static_cast<int64_t>(samples[u].size()) != units_[u].n_in)
      throw_error("online basis: a sample of {} values for basis {} of width {}", samples[u].size(), u, units_[u].n_in);
  }
  if (queue_.size() == options_.queue_capacity) {
    queue_.pop_front();
    ++stats_.dropped;
  }
  queue_.push_back(std::move(samples));
  ++stats_.rejections;
}

size_t OnlineBasis::apply_pending() {
  if (queue_.size() < static_cast<size_t>(options_.min_rejections)) return 0;
  const auto start = std::chrono::steady_clock::now();
  const size_t n = queue_.size();
  for (size_t u = 0; u < units_.size(); ++u) {
    OnlineBasisUnit& unit = units_[u];
    std::vector<std::span<const float>> xs;
    std::vector<double> etas;
    for (const auto& samples : queue_) {
      xs.emplace_back(samples[u]);
      ++unit.samples;
      etas.push_back(options_.eta0 / std::sqrt(static_cast<double>(unit.samples)));
    }
    oja_steps(unit.basis, unit.rank, unit.n_in, xs, etas);
    ++unit.version;
    rebuild(u);
  }
  queue_.clear();
  stats_.applied += n;
  ++stats_.batches;
  stats_.update_seconds += seconds_since(start);
  return n;
}

}  // namespace okapi::lab
