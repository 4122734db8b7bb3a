#include "compress/low_rank.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "compress/linalg.hpp"
#include "compress/rank_allocation.hpp"
#include "compress/sequential.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "model/blocks.hpp"

namespace okapi::compress {

namespace {

enum class Metric { Plain, Scaled, Whitened };
enum class Stacking { Single, QkvPerLayer, AcrossLayers };

struct MethodSpec {
  const char* name;
  Metric metric;
  Stacking stacking;
  const char* ranks;  // the allocation of --ranks auto
  bool calibration;   // needs --calib
  bool sink_bypass;   // seed 003's sink direction kept in the basis (with calibration)
  bool sequential;    // error-compensating fit, site by site (compress/sequential.hpp)
};

constexpr MethodSpec kMethods[] = {
    {"best", Metric::Whitened, Stacking::Single, "energy", true, false, true},
    {"svd", Metric::Plain, Stacking::Single, "energy", false, false, false},
    {"asvd", Metric::Scaled, Stacking::Single, "energy", true, false, false},
    {"svd-llm", Metric::Whitened, Stacking::Single, "uniform", true, false, false},
    {"basis-sharing", Metric::Whitened, Stacking::AcrossLayers, "uniform", true, false, false},
    {"grc", Metric::Plain, Stacking::QkvPerLayer, "uniform", false, false, false},
    {"gp", Metric::Plain, Stacking::Single, "mcr", false, true, false},
};

const MethodSpec& method_spec(const std::string& name) {
  for (const MethodSpec& m : kMethods)
    if (name == m.name) return m;
  throw_error("compress: unknown method '{}' (built: {})", name, fmt::join(compress_methods(), ", "));
}

constexpr const char* kProjectionKinds[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

bool is_projection(const gguf::TensorInfo& t) {
  if (!is_weight_matrix(t) || !t.name.ends_with(".weight")) return false;
  const auto [layer, kind] = layer_and_kind(t.name);
  return layer >= 0 && std::find(std::begin(kProjectionKinds), std::end(kProjectionKinds), kind) != std::end(kProjectionKinds);
}

std::string prefix_of(const std::string& name) { return name.substr(0, name.size() - 7); }  // drops ".weight"

// Which units a method forms: the projections it factors, grouped by shared basis.
std::vector<Unit> form_units(const gguf::File& file, const MethodSpec& spec, int64_t share_layers) {
  std::map<std::string, Unit> grouped;  // key -> unit, for stacked methods
  std::vector<std::string> order;
  std::vector<Unit> units;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!is_projection(t)) continue;
    const auto [layer, kind] = layer_and_kind(t.name);
    std::string key;
    if (spec.stacking == Stacking::QkvPerLayer) {
      if (kind != "attn_q" && kind != "attn_k" && kind != "attn_v") continue;  // GRC: Q, K, V only
      key = fmt::format("{}", layer);
    } else if (spec.stacking == Stacking::AcrossLayers && kind != "attn_output" && kind != "ffn_down") {
      key = fmt::format("{}/{}", kind, layer / share_layers);
    }
    if (key.empty()) {
      Unit u;
      u.members.push_back(&t);
      u.layer = layer;
      units.push_back(std::move(u));
      continue;
    }
    auto [it, fresh] = grouped.try_emplace(key);
    if (fresh) {
      it->second.layer = layer;
      order.push_back(key);
    }
    it->second.members.push_back(&t);
  }
  for (const std::string& key : order) units.push_back(std::move(grouped[key]));
  for (Unit& u : units) {
    u.cols = u.members.front()->shape[0];
    for (const gguf::TensorInfo* m : u.members) {
      if (m->shape[0] != u.cols) throw_error("compress: {} and {} do not share an input width", u.members.front()->name, m->name);
      u.stacked_rows += m->shape[1];
    }
  }
  return units;
}

// The input transform T of a unit's metric: empty for Plain, the diagonal (cols) for Scaled, the
// lower Cholesky factor (cols x cols) for Whitened.
std::vector<double> input_transform(const Unit& u, Metric metric, const Calibration* calibration) {
  if (metric == Metric::Plain) return {};
  std::vector<const InputStats*> inputs;
  for (const gguf::TensorInfo* m : u.members) {
    const InputStats* s = calibration ? calibration->input_of(m->name) : nullptr;
    if (!s || s->n != u.cols || s->tokens == 0) throw_error("compress: the calibration run never reached {}", m->name);
    if (std::find(inputs.begin(), inputs.end(), s) == inputs.end()) inputs.push_back(s);
  }
  const auto n = static_cast<size_t>(u.cols);
  if (metric == Metric::Scaled) {
    // ASVD's S = diag(E|x_j|)^α with α = 0.5; channels never active get the smallest active scale.
    std::vector<double> s(n);
    double smallest = 0;
    for (size_t j = 0; j < n; ++j) {
      s[j] = std::sqrt(inputs.front()->mean_abs[j]);
      if (s[j] > 0 && (smallest == 0 || s[j] < smallest)) smallest = s[j];
    }
    for (double& v : s) v = v > 0 ? v : (smallest > 0 ? smallest : 1.0);
    return s;
  }
  std::vector<double> c(n * n, 0.0);
  for (const InputStats* s : inputs)
    for (size_t i = 0; i < c.size(); ++i) c[i] += s->second_moment[i];
  double damping = 0;
  return cholesky_lower(std::move(c), u.cols, 1e-6, &damping);
}

// [W_1; …; W_n] · T as doubles.
std::vector<double> transformed_stack(const Unit& u, Metric metric, const std::vector<double>& t) {
  const auto cols = static_cast<size_t>(u.cols);
  std::vector<double> w(static_cast<size_t>(u.stacked_rows) * cols);
  size_t at = 0;
  for (const gguf::TensorInfo* m : u.members) {
    const std::vector<float> values = dequantized_matrix(*m, "compress");
    std::copy(values.begin(), values.end(), w.begin() + static_cast<std::ptrdiff_t>(at));
    at += values.size();
  }
  if (metric == Metric::Plain) return w;
  if (metric == Metric::Scaled) {
    for (size_t r = 0; r < static_cast<size_t>(u.stacked_rows); ++r)
      for (size_t j = 0; j < cols; ++j) w[r * cols + j] *= t[j];
    return w;
  }
  std::vector<double> product(w.size());
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(u.stacked_rows),
              static_cast<blasint>(cols), static_cast<blasint>(cols), 1.0, w.data(), static_cast<blasint>(cols),
              t.data(), static_cast<blasint>(cols), 0.0, product.data(), static_cast<blasint>(cols));
  return product;
}

// The sink direction of a unit's input (unit length), or empty when calibration saw no sink.
std::vector<double> sink_direction(const Unit& u, const Calibration* calibration) {
  const InputStats* s = calibration ? calibration->input_of(u.members.front()->name) : nullptr;
  if (!s || s->sink_tokens == 0 || s->n != u.cols) return {};
  double norm = 0;
  for (const double v : s->sink_mean) norm += v * v;
  if (!(norm > 0)) return {};
  std::vector<double> d(s->sink_mean);
  for (double& v : d) v /= std::sqrt(norm);
  return d;
}

Factors factorize(const Unit& u, int64_t rank, Metric metric, const Calibration* calibration, bool sink_bypass) {
  const std::vector<double> t = input_transform(u, metric, calibration);
  const std::vector<double> stack = transformed_stack(u, metric, t);
  const ThinSvd svd = thin_svd(stack, u.stacked_rows, u.cols);
  const auto r = static_cast<size_t>(rank), cols = static_cast<size_t>(u.cols);
  Factors f;
  // Seed 003's sink bypass (plain metric only): when the top-r right singular vectors cover less
  // than 0.9 of the sink direction ŝ, the last of them gives way to ŝ's uncovered part.
  if (sink_bypass && metric == Metric::Plain && rank >= 2) {
    std::vector<double> s = sink_direction(u, calibration);
    if (!s.empty()) {
      double covered = 0;
      for (size_t i = 0; i < r; ++i) {
        double dot = 0;
        for (size_t j = 0; j < cols; ++j) dot += svd.vt[i * cols + j] * s[j];
        covered += dot * dot;
      }
      if (std::sqrt(covered) < 0.9) {
        std::vector<double> basis(svd.vt.begin(), svd.vt.begin() + static_cast<std::ptrdiff_t>(r * cols));
        for (size_t i = 0; i + 1 < r; ++i) {
          double dot = 0;
          for (size_t j = 0; j < cols; ++j) dot += basis[i * cols + j] * s[j];
          for (size_t j = 0; j < cols; ++j) s[j] -= dot * basis[i * cols + j];
        }
        double norm = 0;
        for (const double v : s) norm += v * v;
        if (norm > 1e-12) {
          for (size_t j = 0; j < cols; ++j) basis[(r - 1) * cols + j] = s[j] / std::sqrt(norm);
          // Orthonormal basis rows B: the best outs for it are W Bᵀ.
          f.in.assign(basis.begin(), basis.end());
          size_t row0 = 0;
          for (const gguf::TensorInfo* m : u.members) {
            const auto rows = static_cast<size_t>(m->shape[1]);
            std::vector<float> out(rows * r);
            for (size_t o = 0; o < rows; ++o)
              for (size_t i = 0; i < r; ++i) {
                double dot = 0;
                for (size_t j = 0; j < cols; ++j) dot += stack[(row0 + o) * cols + j] * basis[i * cols + j];
                out[o * r + i] = static_cast<float>(dot);
              }
            f.outs.push_back(std::move(out));
            row0 += rows;
          }
          f.sink_vector = true;
          return f;
        }
      }
    }
  }
  std::vector<double> in = svd_in_factor(svd, rank);
  if (metric == Metric::Scaled) {
    for (size_t i = 0; i < r; ++i)
      for (size_t j = 0; j < cols; ++j) in[i * cols + j] /= t[j];
  } else if (metric == Metric::Whitened) {
    multiply_by_lower_inverse(t, u.cols, in, rank);
  }
  f.in.assign(in.begin(), in.end());
  f.outs = svd_out_factors(svd, u, rank);
  return f;
}

std::vector<double> cumulative_energy(const Unit& u, Metric metric, const Calibration* calibration) {
  const std::vector<double> t = input_transform(u, metric, calibration);
  const ThinSvd svd = thin_svd(transformed_stack(u, metric, t), u.stacked_rows, u.cols, /*vectors=*/false);
  std::vector<double> energy;
  double total = 0;
  for (const double s : svd.s) total += s * s;
  double kept = 0;
  for (const double s : svd.s) {
    kept += s * s;
    energy.push_back(total > 0 ? kept / total : 1.0);
  }
  return energy;
}

std::vector<uint8_t> stored(const std::vector<float>& values, DType type, std::vector<int64_t> shape) {
  return quant::quantize_tensor(type, values.data(), shape);
}

struct Plan {
  CompressReport report;
  std::vector<Unit> units;
  Metric metric = Metric::Plain;
  bool sink_bypass = false;
  bool sequential = false;
};

Plan make_plan(const gguf::File& file, const CompressOptions& options) {
  const MethodSpec& spec = method_spec(options.method);
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.name.find(".lr_in.") != std::string::npos || t.name.find(".lr_out.") != std::string::npos) {
      throw_error("compress: '{}' is already compressed ({}); compress the dense model instead", file.name(), t.name);
    }
  }
  std::string ranks = options.ranks == "auto" ? spec.ranks : options.ranks;
  const bool ranks_file = ranks != "energy" && ranks != "uniform" && ranks != "mcr";
  if (ranks_file && options.ratio)
    throw_error_for(Setting::Ratio, "compress: the ranks file '{}' sets the ranks; a ratio cannot be given too", ranks);
  if (!ranks_file && !options.ratio)
    throw_error_for(Setting::Ratio, "compress: a ratio is required unless a ranks file gives the ranks");
  if (options.ratio && !(*options.ratio > 0.0 && *options.ratio < 1.0)) {
    throw_error_for(Setting::Ratio, "compress: the ratio is the fraction of the weight bytes to remove, in (0, 1); got {}",
                    *options.ratio);
  }
  if (spec.calibration && (!options.calibration || (spec.sequential && !options.source))) {
    throw_error_for(Setting::Calibration, "compress: method {} needs calibration text", spec.name);
  }
  if (spec.stacking == Stacking::AcrossLayers && options.share_layers < 1) {
    throw_error("compress: layers per shared basis must be at least 1, got {}", options.share_layers);
  }
  Plan plan;
  plan.metric = spec.metric;
  plan.sink_bypass = spec.sink_bypass && options.sink_bypass && options.calibration;
  plan.sequential = spec.sequential;
  CompressReport& report = plan.report;
  report.method = spec.name;
  bool all_f32 = true;
  for (const gguf::TensorInfo& t : file.tensors()) {
    report.bytes_before += static_cast<double>(t.nbytes);
    if (is_projection(t)) all_f32 = all_f32 && t.type == DType::F32;
  }
  plan.units = form_units(file, spec, options.share_layers);
  if (plan.units.empty()) throw_error("compress: '{}' has no attention or FFN projection matrices to factor", file.name());
  report.factor_type = options.factor_type.value_or(all_f32 ? DType::F32 : DType::F16);
  if (report.factor_type != DType::F32 && report.factor_type != DType::F16 &&
      (!quant::find_format(report.factor_type) || !quant::find_format(report.factor_type)->quantize_ref)) {
    throw_error("compress: okapi cannot store factors as {}", dtype_name(report.factor_type));
  }
  for (Unit& u : plan.units) u.energy = cumulative_energy(u, plan.metric, options.calibration);

  RankRequest request;
  request.allocation = ranks;
  request.ratio = options.ratio.value_or(0.0);
  request.factor_type = report.factor_type;
  request.bytes_before = report.bytes_before;
  const double reference = options.reference_bytes.value_or(report.bytes_before);
  request.target_saving = report.bytes_before - (1.0 - request.ratio) * reference;
  request.calibration = options.calibration;
  const Allocation allocation = allocate_ranks(plan.units, request);
  report.ranks = allocation.name;
  report.allocation_parameter = allocation.parameter;
  report.notes = allocation.notes;

  report.bytes_after = report.bytes_before;
  report.bytes_before = reference;
  for (const Unit& u : plan.units) {
    if (u.rank > 0) report.bytes_after += unit_bytes(u, u.rank, report.factor_type) - unit_dense_bytes(u);
    const bool shared = u.members.size() > 1;
    for (const gguf::TensorInfo* m : u.members) {
      FactoredMatrix fm{m->name, m->shape[1], m->shape[0], u.rank, 1.0, {}, false};
      if (u.rank > 0) {
        fm.energy_kept = u.energy[static_cast<size_t>(std::min<int64_t>(u.rank, static_cast<int64_t>(u.energy.size())) - 1)];
        if (shared && m != u.members.front()) fm.basis = prefix_of(u.members.front()->name) + ".lr_in.weight";
      }
      report.matrices.push_back(fm);
    }
  }
  return plan;
}

}  // namespace

std::vector<std::string> compress_methods() {
  std::vector<std::string> names;
  for (const MethodSpec& m : kMethods) names.emplace_back(m.name);
  return names;
}

bool method_needs_calibration(const std::string& method) { return method_spec(method).calibration; }

std::string default_rank_allocation(const std::string& method) { return method_spec(method).ranks; }

CompressReport plan_compression(const gguf::File& file, const CompressOptions& options) {
  return make_plan(file, options).report;
}

CompressReport compress_model(const gguf::File& file, const std::filesystem::path& out, const CompressOptions& options,
                              const std::function<void(const FactoredMatrix&)>& on_matrix) {
  Plan plan = make_plan(file, options);
  CompressReport& report = plan.report;
  gguf::Writer writer;
  writer.copy_metadata(file);
  writer.set("okapi.compress.method", report.method);
  writer.set("okapi.compress.ranks", report.ranks);
  if (options.ratio) writer.set("okapi.compress.ratio", static_cast<float>(*options.ratio));
  writer.set("okapi.compress.allocation_parameter", static_cast<float>(report.allocation_parameter));
  const DType type = report.factor_type;

  // Each unit is factored once, when its first tensor is written; its members' outs wait there.
  struct UnitState {
    const Unit* unit;
    std::optional<Factors> factors;
    size_t outs_left = 0;
  };
  std::vector<Factors> fitted;  // sequential methods fit every unit before writing
  if (plan.sequential) fitted = sequential_factors(*options.source, plan.units, options.on_site);
  std::map<const gguf::TensorInfo*, std::pair<std::shared_ptr<UnitState>, size_t>> member_of;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const Unit& u = plan.units[i];
    if (u.rank == 0) continue;
    auto state = std::make_shared<UnitState>(UnitState{&u, std::nullopt, u.members.size()});
    if (plan.sequential) state->factors = std::move(fitted[i]);
    for (size_t j = 0; j < u.members.size(); ++j) member_of[u.members[j]] = {state, j};
  }
  const Metric metric = plan.metric;
  const Calibration* calibration = options.calibration;
  const bool sink_bypass = plan.sink_bypass;
  auto report_of = [&report](const std::string& name) -> FactoredMatrix& {
    return *std::find_if(report.matrices.begin(), report.matrices.end(), [&](const FactoredMatrix& m) { return m.name == name; });
  };
  for (const gguf::TensorInfo& t : file.tensors()) {
    const auto found = member_of.find(&t);
    if (found == member_of.end()) {
      writer.add_tensor_view(t.name, t.type, t.shape, t.bytes());
      continue;
    }
    // Not a structured binding: clang 14 cannot capture one in the lambdas below.
    const std::shared_ptr<UnitState> state = found->second.first;
    const size_t index = found->second.second;
    const Unit& u = *state->unit;
    const int64_t rank = u.rank;
    FactoredMatrix* row = &report_of(t.name);
    auto ensure = [state, rank, metric, calibration, sink_bypass] {
      if (!state->factors) state->factors = factorize(*state->unit, rank, metric, calibration, sink_bypass);
    };
    const std::string prefix = prefix_of(t.name);
    if (index == 0) {
      writer.add_tensor_producer(prefix + ".lr_in.weight", type, {u.cols, rank}, [state, ensure, type, rank] {
        ensure();
        return stored(state->factors->in, type, {state->unit->cols, rank});
      });
    } else {
      writer.set(std::string(model::kSharedInKeyPrefix) + prefix, prefix_of(u.members.front()->name) + ".lr_in.weight");
    }
    writer.add_tensor_producer(prefix + ".lr_out.weight", type, {rank, t.shape[1]},
                               [state, ensure, index, type, rank, row, on_matrix, rows = t.shape[1]] {
                                 ensure();
                                 row->sink_vector = state->factors->sink_vector;
                                 std::vector<uint8_t> bytes = stored(state->factors->outs[index], type, {rank, rows});
                                 if (--state->outs_left == 0) state->factors.reset();
                                 if (on_matrix) on_matrix(*row);
                                 return bytes;
                               });
  }
  writer.write(out);
  return report;
}

}  // namespace okapi::compress
