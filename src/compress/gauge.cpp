#include "compress/gauge.hpp"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compress/linalg.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "kernels/format_table.hpp"

namespace okapi::compress {

namespace {

// An error of the gauge transform, tagged with its setting.
template <typename... Args>
[[noreturn]] void gauge_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), Setting::Gauge);
}

// Q (d x d, row-major, column i the i-th eigenvector, eigenvalues descending) and the fraction of
// the trace in the first 10% of the directions.
std::vector<double> pca_basis(std::span<const double> moment, int64_t d, double* top_energy) {
  std::vector<double> a(moment.begin(), moment.end()), w(static_cast<size_t>(d));
  const lapack_int info =
      LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', static_cast<lapack_int>(d), a.data(), static_cast<lapack_int>(d), w.data());
  if (info != 0) throw_error("compress: the eigendecomposition of the residual second moment failed (info {})", info);
  // dsyevd sorts ascending; reverse the columns.
  std::vector<double> q(a.size());
  for (int64_t r = 0; r < d; ++r)
    for (int64_t c = 0; c < d; ++c) q[static_cast<size_t>(r * d + c)] = a[static_cast<size_t>(r * d + (d - 1 - c))];
  double total = 0, top = 0;
  for (int64_t i = 0; i < d; ++i) total += std::max(0.0, w[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < std::max<int64_t>(1, d / 10); ++i) top += std::max(0.0, w[static_cast<size_t>(d - 1 - i)]);
  *top_energy = total > 0 ? top / total : 0.0;
  return q;
}

std::vector<double> as_doubles(const gguf::TensorInfo& t) {
  const std::vector<float> v = dequantized_matrix(t, "the gauge transform");
  return {v.begin(), v.end()};
}

// The type a transformed tensor is written in: its own when okapi can write it, else F16.
DType output_type(DType type) {
  if (type == DType::F32 || type == DType::F16) return type;
  const quant::Format* f = quant::find_format(type);
  return f && f->quantize_ref ? type : DType::F16;
}

std::vector<uint8_t> encode(const std::vector<double>& values, DType type, std::vector<int64_t> shape) {
  const std::vector<float> f(values.begin(), values.end());
  return quant::quantize_tensor(type, f.data(), shape);
}

// rows x d (row-major) times diag(g) (optional) times Q.
std::vector<double> times_q(std::vector<double> a, int64_t rows, int64_t d, const std::vector<double>& q,
                            const std::vector<double>* g) {
  if (g)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) a[static_cast<size_t>(r * d + c)] *= (*g)[static_cast<size_t>(c)];
  std::vector<double> out(a.size());
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), static_cast<blasint>(d),
              static_cast<blasint>(d), 1.0, a.data(), static_cast<blasint>(d), q.data(), static_cast<blasint>(d), 0.0,
              out.data(), static_cast<blasint>(d));
  return out;
}

// Qᵀ times a (d x cols, row-major).
std::vector<double> qt_times(const std::vector<double>& a, int64_t d, int64_t cols, const std::vector<double>& q) {
  std::vector<double> out(a.size());
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(d), static_cast<blasint>(cols),
              static_cast<blasint>(d), 1.0, q.data(), static_cast<blasint>(d), a.data(), static_cast<blasint>(cols), 0.0,
              out.data(), static_cast<blasint>(cols));
  return out;
}

}  // namespace

GaugeReport write_orthogonal_gauge(const gguf::File& file, std::span<const double> residual_second_moment,
                                   const std::filesystem::path& out) {
  use_single_threaded_blas();
  if (file.architecture() != "llama") {
    gauge_error("compress: gauge transform: only llama-architecture models are supported, '{}' is {}", file.name(),
                file.architecture().empty() ? "unnamed" : file.architecture());
  }
  const gguf::TensorInfo& embd = file.tensor("token_embd.weight");
  const int64_t d = embd.shape[0];
  if (residual_second_moment.size() != static_cast<size_t>(d * d)) {
    gauge_error("compress: gauge transform: the residual second moment is not {} x {}", d, d);
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    const auto [layer, kind] = layer_and_kind(t.name);
    const bool known = t.name == "token_embd.weight" || t.name == "output_norm.weight" || t.name == "output.weight" ||
                       t.name == "rope_freqs.weight" ||
                       (layer >= 0 && t.name.ends_with(".weight") &&
                        (kind == "attn_norm" || kind == "ffn_norm" || kind == "attn_q" || kind == "attn_k" ||
                         kind == "attn_v" || kind == "attn_output" || kind == "ffn_gate" || kind == "ffn_up" ||
                         kind == "ffn_down"));
    if (!known) gauge_error("compress: tensor '{}' has no place in the gauge transform (biases, extra norms?)", t.name);
  }
  GaugeReport report;
  const std::vector<double> q = pca_basis(residual_second_moment, d, &report.top_energy);
  const auto norm_of = [&](const std::string& name) {
    const std::vector<float> g = dequantized_matrix(file.tensor(name), "the gauge transform");
    return std::vector<double>(g.begin(), g.end());
  };
  gguf::Writer writer;
  writer.copy_metadata(file);
  writer.set("okapi.compress.gauge", "orthogonal-pca");
  const std::vector<float> ones(static_cast<size_t>(d), 1.0f);
  std::vector<uint8_t> ones_bytes(ones.size() * sizeof(float));
  std::memcpy(ones_bytes.data(), ones.data(), ones_bytes.size());
  for (const gguf::TensorInfo& t : file.tensors()) {
    const auto [layer, kind] = layer_and_kind(t.name);
    const DType type = output_type(t.type);
    const int64_t cols = t.shape[0], rows = t.shape.size() > 1 ? t.shape[1] : 1;
    const gguf::TensorInfo* source = &t;
    const std::vector<double>* none = nullptr;
    if (kind == "attn_norm" || kind == "ffn_norm" || t.name == "output_norm.weight") {
      writer.add_tensor(t.name, DType::F32, {d}, ones_bytes);
    } else if (t.name == "token_embd.weight") {
      writer.add_tensor_producer(t.name, type, t.shape, [source, q, d, rows, type, none] {
        return encode(times_q(as_doubles(*source), rows, d, q, none), type, source->shape);
      });
    } else if (kind == "attn_q" || kind == "attn_k" || kind == "attn_v" || kind == "ffn_gate" || kind == "ffn_up") {
      const std::string norm = "blk." + std::to_string(layer) + (kind.starts_with("attn") ? ".attn_norm.weight" : ".ffn_norm.weight");
      writer.add_tensor_producer(t.name, type, t.shape, [source, q, d, rows, type, g = norm_of(norm)] {
        return encode(times_q(as_doubles(*source), rows, d, q, &g), type, source->shape);
      });
    } else if (kind == "attn_output" || kind == "ffn_down") {
      writer.add_tensor_producer(t.name, type, t.shape, [source, q, d, cols, type] {
        return encode(qt_times(as_doubles(*source), d, cols, q), type, source->shape);
      });
    } else if (t.name == "output.weight") {
      writer.add_tensor_producer(t.name, type, t.shape, [source, q, d, rows, type, g = norm_of("output_norm.weight")] {
        return encode(times_q(as_doubles(*source), rows, d, q, &g), type, source->shape);
      });
    } else {
      writer.add_tensor_view(t.name, t.type, t.shape, t.bytes());
    }
  }
  if (!file.find_tensor("output.weight")) {  // tied: the head folds output_norm, the embedding does not
    report.untied_output = true;
    const DType type = output_type(embd.type);
    writer.add_tensor_producer("output.weight", type, embd.shape, [source = &embd, q, d, type, g = norm_of("output_norm.weight")] {
      return encode(times_q(as_doubles(*source), source->shape[1], d, q, &g), type, source->shape);
    });
  }
  writer.write(out);
  return report;
}

}  // namespace okapi::compress
