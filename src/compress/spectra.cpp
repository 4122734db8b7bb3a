#include "compress/spectra.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "compress/linalg.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/svg_chart.hpp"
#include "kernels/format_table.hpp"

namespace okapi::compress {

MatrixSpectrum summarize_spectrum(std::string name, int64_t rows, int64_t cols, std::vector<double> sigma) {
  MatrixSpectrum m;
  std::tie(m.layer, m.kind) = layer_and_kind(name);
  m.name = std::move(name);
  m.rows = rows;
  m.cols = cols;
  m.sigma = std::move(sigma);
  const double sum = std::accumulate(m.sigma.begin(), m.sigma.end(), 0.0);
  double energy = 0;
  for (const double s : m.sigma) energy += s * s;
  if (sum <= 0 || m.sigma.empty()) return m;  // the zero matrix: rank 0 by every measure
  double entropy = 0;
  for (const double s : m.sigma) {
    const double p = s / sum;
    if (p > 0) entropy -= p * std::log(p);
  }
  m.effective_rank = std::exp(entropy);
  m.stable_rank = energy / (m.sigma[0] * m.sigma[0]);
  double kept = 0;
  for (size_t i = 0; i < m.sigma.size(); ++i) {
    kept += m.sigma[i] * m.sigma[i];
    if (m.rank_90 == 0 && kept >= 0.90 * energy) m.rank_90 = static_cast<int64_t>(i + 1);
    if (m.rank_99 == 0 && kept >= 0.99 * energy) m.rank_99 = static_cast<int64_t>(i + 1);
  }
  if (m.rank_99 == 0) m.rank_99 = static_cast<int64_t>(m.sigma.size());  // rounding at the very end
  if (m.rank_90 == 0) m.rank_90 = m.rank_99;
  return m;
}

std::pair<int64_t, std::string> layer_and_kind(const std::string& tensor_name) {
  std::string base = tensor_name;
  if (base.ends_with(".weight")) base.resize(base.size() - 7);
  if (base.starts_with("blk.")) {
    const size_t dot = base.find('.', 4);
    const std::string digits = base.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
    if (dot != std::string::npos && !digits.empty() && digits.size() <= 6 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return {std::stoll(digits), base.substr(dot + 1)};
    }
  }
  return {-1, base};
}

bool is_weight_matrix(const gguf::TensorInfo& t, const std::string& filter) {
  // A 2-D bias is a table of per-expert vectors (gpt-oss's ffn_*_exps.bias), not a projection.
  return t.shape.size() == 2 && t.shape[0] >= 2 && t.shape[1] >= 2 && !t.name.ends_with(".bias") &&
         (filter.empty() || t.name.find(filter) != std::string::npos);
}

std::vector<float> dequantized_matrix(const gguf::TensorInfo& t, const char* who) {
  if (quant::find_format(t.type) == nullptr) {
    throw_error("{}: tensor '{}' is stored as {}, which okapi cannot dequantize", who, t.name, dtype_name(t.type));
  }
  std::vector<float> values(static_cast<size_t>(t.n_elements()));
  quant::dequantize_tensor(t.type, t.bytes(), t.shape, values.data());
  return values;
}

std::vector<MatrixSpectrum> weight_spectra(const gguf::File& file, const std::string& filter,
                                           const std::function<void(const MatrixSpectrum&)>& on_matrix) {
  std::vector<MatrixSpectrum> out;
  bool matched = false;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!is_weight_matrix(t, filter)) continue;
    matched = true;
    const int64_t cols = t.shape[0], rows = t.shape[1];
    MatrixSpectrum m = summarize_spectrum(t.name, rows, cols, singular_values(dequantized_matrix(t, "analyze"), rows, cols));
    m.type = std::string(dtype_name(t.type));
    if (on_matrix) on_matrix(m);
    out.push_back(std::move(m));
  }
  if (!matched) {
    if (filter.empty()) throw_error("analyze: '{}' has no 2-D weight matrices", file.name());
    throw_error("analyze: no 2-D weight matrix of '{}' has '{}' in its name", file.name(), filter);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> spectra_svgs(const std::vector<MatrixSpectrum>& spectra,
                                                              const std::string& model_name) {
  std::map<std::string, std::vector<const MatrixSpectrum*>> by_kind;
  std::vector<std::string> kinds;  // in file order
  for (const MatrixSpectrum& m : spectra) {
    if (by_kind[m.kind].empty()) kinds.push_back(m.kind);
    by_kind[m.kind].push_back(&m);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& kind : kinds) {
    const auto& ms = by_kind[kind];
    svg::Chart chart{fmt::format("{}: singular values of {} ({} x {})", model_name, kind, ms[0]->rows, ms[0]->cols),
                     "i / min(rows, cols)", "sigma_i / sigma_1", {}, true};
    for (size_t i = 0; i < ms.size(); ++i) {
      const MatrixSpectrum& m = *ms[i];
      svg::Series s;
      s.color = svg::ramp_color(i, ms.size());
      if (i == 0 || i + 1 == ms.size()) s.label = m.layer >= 0 ? fmt::format("layer {}", m.layer) : m.name;
      const double n = static_cast<double>(m.sigma.size());
      for (size_t k = 0; k < m.sigma.size(); ++k) {
        if (m.sigma[0] > 0) s.points.emplace_back(static_cast<double>(k + 1) / n, m.sigma[k] / m.sigma[0]);
      }
      chart.series.push_back(std::move(s));
    }
    out.emplace_back(kind, svg::line_chart(chart));
  }
  return out;
}

std::string effective_rank_svg(const std::vector<MatrixSpectrum>& spectra, const std::string& model_name) {
  std::map<std::string, svg::Series> by_kind;
  std::vector<std::string> kinds;
  for (const MatrixSpectrum& m : spectra) {
    if (m.layer < 0) continue;
    auto [it, added] = by_kind.try_emplace(m.kind);
    if (added) kinds.push_back(m.kind);
    it->second.label = m.kind;
    it->second.points.emplace_back(static_cast<double>(m.layer),
                                   m.effective_rank / static_cast<double>(std::min(m.rows, m.cols)));
  }
  svg::Chart chart{fmt::format("{}: effective rank / full rank per layer", model_name), "layer",
                   "effective rank / min(rows, cols)", {}, false};
  for (size_t i = 0; i < kinds.size(); ++i) {
    svg::Series s = by_kind[kinds[i]];
    s.color = svg::ramp_color(i, kinds.size());
    chart.series.push_back(std::move(s));
  }
  return svg::line_chart(chart);
}

}  // namespace okapi::compress
