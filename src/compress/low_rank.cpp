#include "compress/low_rank.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "compress/linalg.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "quant/quant.hpp"

namespace okapi::compress {

namespace {

constexpr const char* kProjectionKinds[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

bool is_projection(const gguf::TensorInfo& t) {
  if (!is_weight_matrix(t) || !t.name.ends_with(".weight")) return false;
  const auto [layer, kind] = layer_and_kind(t.name);
  return layer >= 0 && std::find(std::begin(kProjectionKinds), std::end(kProjectionKinds), kind) != std::end(kProjectionKinds);
}

struct Candidate {
  const gguf::TensorInfo* tensor;
  std::vector<double> energy;  // cumulative Σσ² of the first i + 1 values, over the total
};

// The fewest leading singular values holding `e` of the energy.
int64_t rank_for(const Candidate& c, double e) {
  const auto it = std::lower_bound(c.energy.begin(), c.energy.end(), e - 1e-12);
  return std::min<int64_t>(static_cast<int64_t>(it - c.energy.begin()) + 1, static_cast<int64_t>(c.energy.size()));
}

// Bytes of the two factors at rank r.
double factor_bytes(const gguf::TensorInfo& t, int64_t rank, DType type) {
  const double per_value = type == DType::F32 ? 4.0 : 2.0;
  return static_cast<double>(rank) * static_cast<double>(t.shape[0] + t.shape[1]) * per_value;
}

// A matrix is factored only at a rank that is really low (fewer values than the matrix has) and
// saves bytes: f16 factors of a full-rank f32 matrix would only be a change of precision.
bool worth_factoring(const gguf::TensorInfo& t, int64_t rank, DType type) {
  return rank * (t.shape[0] + t.shape[1]) < t.shape[0] * t.shape[1] &&
         factor_bytes(t, rank, type) < static_cast<double>(t.nbytes);
}

std::vector<uint8_t> stored(const std::vector<float>& values, DType type) {
  std::vector<uint8_t> bytes(values.size() * (type == DType::F32 ? 4 : 2));
  quant::format(type).quantize(values.data(), bytes.data(), static_cast<int64_t>(values.size()));
  return bytes;
}

std::string prefix_of(const std::string& name) { return name.substr(0, name.size() - 7); }  // drops ".weight"

}  // namespace

std::vector<std::string> compress_methods() { return {"svd"}; }

CompressReport plan_compression(const gguf::File& file, const CompressOptions& options) {
  const auto methods = compress_methods();
  if (std::find(methods.begin(), methods.end(), options.method) == methods.end()) {
    throw_error("compress: unknown method '{}' (built: {})", options.method, fmt::join(methods, ", "));
  }
  if (!(options.ratio > 0.0 && options.ratio < 1.0)) {
    throw_error("compress: --ratio is the fraction of the weight bytes to remove, in (0, 1); got {}", options.ratio);
  }
  CompressReport report;
  std::vector<Candidate> candidates;
  bool all_f32 = true;
  for (const gguf::TensorInfo& t : file.tensors()) {
    report.bytes_before += static_cast<double>(t.nbytes);
    if (!is_projection(t)) continue;
    all_f32 = all_f32 && t.type == DType::F32;
    const std::vector<double> sigma = singular_values(dequantized_matrix(t, "compress"), t.shape[1], t.shape[0]);
    Candidate c{&t, {}};
    double total = 0;
    for (const double s : sigma) total += s * s;
    double kept = 0;
    for (const double s : sigma) {
      kept += s * s;
      c.energy.push_back(total > 0 ? kept / total : 1.0);
    }
    candidates.push_back(std::move(c));
  }
  if (candidates.empty()) throw_error("compress: '{}' has no attention or FFN projection matrices to factor", file.name());
  report.factor_type = options.factor_type.value_or(all_f32 ? DType::F32 : DType::F16);
  if (report.factor_type != DType::F32 && report.factor_type != DType::F16) {
    throw_error("compress: factors are stored as f32 or f16, not {}", dtype_name(report.factor_type));
  }
  const double target = options.ratio * report.bytes_before;
  const auto savings = [&](double e) {
    double saved = 0;
    for (const Candidate& c : candidates) {
      const double dense = static_cast<double>(c.tensor->nbytes);
      const int64_t r = rank_for(c, e);
      if (worth_factoring(*c.tensor, r, report.factor_type)) saved += dense - factor_bytes(*c.tensor, r, report.factor_type);
    }
    return saved;
  };
  const double most = savings(0.0);
  if (most < target) {
    throw_error("compress: --ratio {} asks to remove {:.0f} bytes of {:.0f}; factoring every projection at rank 1 "
                "removes at most {:.0f} ({:.1f}%)",
                options.ratio, target, report.bytes_before, most, 100.0 * most / report.bytes_before);
  }
  double lo = 0.0, hi = 1.0;  // savings(lo) >= target; find the largest such threshold
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (savings(mid) >= target ? lo : hi) = mid;
  }
  report.energy_threshold = lo;
  report.bytes_after = report.bytes_before;
  for (const Candidate& c : candidates) {
    const gguf::TensorInfo& t = *c.tensor;
    FactoredMatrix m{t.name, t.shape[1], t.shape[0], 0, 1.0};
    const int64_t r = rank_for(c, lo);
    if (worth_factoring(t, r, report.factor_type)) {
      m.rank = r;
      m.energy_kept = c.energy[static_cast<size_t>(r - 1)];
      report.bytes_after += factor_bytes(t, r, report.factor_type) - static_cast<double>(t.nbytes);
    }
    report.matrices.push_back(m);
  }
  return report;
}

CompressReport compress_model(const gguf::File& file, const std::filesystem::path& out, const CompressOptions& options,
                              const std::function<void(const FactoredMatrix&)>& on_matrix) {
  const CompressReport report = plan_compression(file, options);
  gguf::Writer writer;
  writer.copy_metadata(file);
  writer.set("okapi.compress.method", options.method);
  writer.set("okapi.compress.ratio", static_cast<float>(options.ratio));
  writer.set("okapi.compress.energy_kept", static_cast<float>(report.energy_threshold));
  const DType type = report.factor_type;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const auto planned = std::find_if(report.matrices.begin(), report.matrices.end(),
                                      [&](const FactoredMatrix& m) { return m.name == t.name; });
    if (planned == report.matrices.end() || planned->rank == 0) {
      writer.add_tensor_view(t.name, t.type, t.shape, t.bytes());
      continue;
    }
    const FactoredMatrix m = *planned;
    // One SVD serves both tensors: the first producer computes it and leaves `out` for the second.
    auto pending = std::make_shared<std::vector<float>>();
    const gguf::TensorInfo* source = &t;
    writer.add_tensor_producer(prefix_of(t.name) + ".lr_in.weight", type, {m.cols, m.rank},
                               [source, m, type, pending, on_matrix] {
                                 LowRankFactors f = truncated_svd(dequantized_matrix(*source, "compress"), m.rows, m.cols, m.rank);
                                 *pending = std::move(f.out);
                                 if (on_matrix) on_matrix(m);
                                 return stored(f.in, type);
                               });
    writer.add_tensor_producer(prefix_of(t.name) + ".lr_out.weight", type, {m.rank, m.rows}, [pending, type] {
      std::vector<uint8_t> bytes = stored(*pending, type);
      pending->clear();
      pending->shrink_to_fit();
      return bytes;
    });
  }
  writer.write(out);
  return report;
}

}  // namespace okapi::compress
