#include "compress/rank_allocation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.hpp"

namespace okapi::compress {

namespace {

// Ranks of block-quantized factors are whole blocks: the out-factor's rows are `rank` long.
int64_t rank_step(DType type) { return layout(type).quantized ? layout(type).block_size : 1; }

// The largest rank (a multiple of the step) at which the unit's factors hold fewer values and
// fewer bytes than its dense matrices; 0 when there is none.
int64_t break_even_rank(const Unit& u, DType type) {
  const int64_t step = rank_step(type);
  const int64_t values = u.cols * u.stacked_rows;
  int64_t r = (values - 1) / (u.cols + u.stacked_rows);
  r -= r % step;
  const double dense = unit_dense_bytes(u);
  while (r > 0 && !(unit_bytes(u, r, type) < dense)) r -= step;
  return r;
}

std::string strip_weight(std::string name) {
  if (name.ends_with(".weight")) name.resize(name.size() - 7);
  return name;
}

std::map<std::string, int64_t> read_ranks_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw_error_for(Setting::Ranks, "compress: the ranks '{}' are not energy, uniform, mcr or auto, and no such file can "
                    "be read", path);
  }
  std::map<std::string, int64_t> ranks;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string name, extra;
    int64_t rank = -1;
    if (!(fields >> name)) continue;
    if (!(fields >> rank) || rank < 0 || (fields >> extra)) {
      throw_error("compress: {}:{}: expected 'NAME RANK' with RANK >= 0, got '{}'", path, number, line);
    }
    ranks[strip_weight(name)] = rank;
  }
  return ranks;
}

Allocation allocate_from_file(std::vector<Unit>& units, const RankRequest& request) {
  std::map<std::string, int64_t> ranks = read_ranks_file(request.allocation);
  const int64_t step = rank_step(request.factor_type);
  for (Unit& u : units) {
    u.rank = 0;
    bool set = false;
    for (const gguf::TensorInfo* m : u.members) {
      const auto it = ranks.find(strip_weight(m->name));
      if (it == ranks.end()) continue;
      if (set && it->second != u.rank) {
        throw_error("compress: {}: {} shares its basis with {} and so its rank ({} vs {})", request.allocation, m->name,
                    u.members.front()->name, it->second, u.rank);
      }
      u.rank = it->second;
      set = true;
      ranks.erase(it);
    }
    const int64_t most = std::min(u.cols, u.stacked_rows);
    if (u.rank > most || u.rank % step != 0) {
      throw_error("compress: {}: rank {} of {} must be at most {}{}", request.allocation, u.rank,
                  u.members.front()->name, most, step > 1 ? fmt::format(" and a multiple of {}", step) : "");
    }
  }
  if (!ranks.empty()) {
    throw_error("compress: {}: '{}' is not a projection this method factors", request.allocation, ranks.begin()->first);
  }
  return {"file " + request.allocation, 0.0, {}};
}

}  // namespace

double unit_bytes(const Unit& u, int64_t rank, DType type) {
  const std::vector<int64_t> in_shape{u.cols, rank};
  const auto in = tensor_bytes(type, in_shape);
  if (!in) return std::numeric_limits<double>::infinity();
  double total = static_cast<double>(*in);
  for (const gguf::TensorInfo* m : u.members) {
    const std::vector<int64_t> out_shape{rank, m->shape[1]};
    const auto out = tensor_bytes(type, out_shape);
    if (!out) return std::numeric_limits<double>::infinity();
    total += static_cast<double>(*out);
  }
  return total;
}

double unit_dense_bytes(const Unit& u) {
  double total = 0;
  for (const gguf::TensorInfo* m : u.members) total += static_cast<double>(m->nbytes);
  return total;
}

std::vector<double> mcr_layer_scales(const std::vector<LayerActivity>& layers, std::vector<std::string>* phases) {
  const size_t n = layers.size();
  if (n < 3) return {};
  std::vector<double> smooth(n);
  for (size_t l = 0; l < n; ++l) {
    double sum = 0;
    int count = 0;
    for (size_t j = l == 0 ? 0 : l - 1; j <= std::min(n - 1, l + 1); ++j, ++count) sum += layers[j].residual_variance;
    smooth[l] = sum / count;
  }
  const double lowest = *std::min_element(smooth.begin(), smooth.end());
  size_t first = n, last = 0;
  for (size_t l = 0; l < n; ++l) {
    if (smooth[l] <= 1.5 * lowest) {
      first = std::min(first, l);
      last = l;
    }
  }
  if (first == 0 && last == n - 1) return {};  // flat: no mix or refine phase
  std::vector<double> scales(n);
  double mean = 0;
  for (size_t l = 0; l < n; ++l) {
    const char* phase = l < first ? "mix" : l > last ? "refine" : "compress";
    scales[l] = l < first ? 1.5 : l > last ? 1.2 : 0.35;
    mean += scales[l] / static_cast<double>(n);
    if (phases) phases->emplace_back(phase);
  }
  for (double& s : scales) s /= mean;
  return scales;
}

Allocation allocate_ranks(std::vector<Unit>& units, const RankRequest& request) {
  const std::string& mode = request.allocation;
  if (mode != "energy" && mode != "uniform" && mode != "mcr") return allocate_from_file(units, request);
  const DType type = request.factor_type;
  const int64_t step = rank_step(type);
  std::vector<int64_t> break_even;
  for (const Unit& u : units) break_even.push_back(break_even_rank(u, type));

  Allocation allocation{mode, 0.0, {}};
  std::vector<double> scales;
  if (mode == "mcr") {
    if (!request.calibration) throw_error_for(Setting::Calibration, "compress: mcr ranks need calibration text");
    std::vector<std::string> phases;
    scales = mcr_layer_scales(request.calibration->layers, &phases);
    if (scales.empty()) {
      allocation.notes.push_back("mcr: the residual-variance profile has no mix or refine phase; uniform ranks");
    } else {
      allocation.notes.push_back(fmt::format("mcr phases by layer: {}", fmt::join(phases, " ")));
    }
  }
  // The rank of unit i at parameter p; 0 keeps it dense.
  const auto rank_at = [&](size_t i, double p) -> int64_t {
    const Unit& u = units[i];
    const int64_t be = break_even[i];
    if (be <= 0) return 0;
    if (mode == "energy") {
      const auto it = std::lower_bound(u.energy.begin(), u.energy.end(), p - 1e-12);
      int64_t r = std::min<int64_t>(static_cast<int64_t>(it - u.energy.begin()) + 1, static_cast<int64_t>(u.energy.size()));
      r = (r + step - 1) / step * step;
      return r <= be ? r : 0;
    }
    const double scale = scales.empty() || u.layer < 0 || static_cast<size_t>(u.layer) >= scales.size()
                             ? 1.0
                             : scales[static_cast<size_t>(u.layer)];
    auto r = static_cast<int64_t>(std::floor(p * scale * static_cast<double>(be) / static_cast<double>(step))) * step;
    return std::clamp(r, step, be);
  };
  const auto savings = [&](double p) {
    double saved = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      const int64_t r = rank_at(i, p);
      if (r > 0) saved += unit_dense_bytes(units[i]) - unit_bytes(units[i], r, type);
    }
    return saved;
  };
  double hi = 1.0;
  if (!scales.empty()) hi = 1.0 / *std::min_element(scales.begin(), scales.end());
  const double target = request.target_saving;
  const double most = savings(0.0);
  if (most < target) {
    throw_error_for(Setting::Ratio,
                    "compress: a ratio of {} asks to remove {:.0f} of {:.0f} bytes; factoring every matrix this method "
                    "factors at its lowest rank removes at most {:.0f} ({:.1f}%)",
                    request.ratio, target, request.bytes_before, most, 100.0 * most / request.bytes_before);
  }
  double lo = 0.0;  // savings(lo) >= target; the largest such parameter keeps the most
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (savings(mid) >= target ? lo : hi) = mid;
  }
  allocation.parameter = lo;
  for (size_t i = 0; i < units.size(); ++i) units[i].rank = rank_at(i, lo);
  return allocation;
}

}  // namespace okapi::compress
