#include "kv/sp_codec.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.hpp"
#include "core/half.hpp"

namespace okapi::kv {

namespace {

constexpr std::array<SpSpec, 2> kSpecs = {{{"sp", false}, {"sp-full", true}}};

// The seed's proportions at width 128: 14 skeleton lanes, 60 residual lanes.
constexpr int64_t kSeedWidth = 128, kSeedSkeleton = 14, kSeedResidual = 60;
constexpr int64_t kMaxWidth = 1024;  // the attention tiles' widest head (kv/tile_kernels.hpp)

bool squarefree(int64_t n) {
  for (int64_t p = 2; p * p <= n; ++p) {
    if (n % (p * p) == 0) return false;
  }
  return true;
}

// The `count` lanes of `candidates` with the highest variance, ties to the earlier candidate.
std::vector<int32_t> top_variance(std::vector<int32_t> candidates, const std::vector<double>& variance, int64_t count) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](int32_t a, int32_t b) { return variance[static_cast<size_t>(a)] > variance[static_cast<size_t>(b)]; });
  candidates.resize(static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(candidates.size()))));
  return candidates;
}

// Solves (A + ridge I) X = B in place for symmetric positive definite A (n x n) and B (n x m),
// by Cholesky. X replaces B.
void solve_spd(std::vector<double>& a, std::vector<double>& b, int64_t n, int64_t m) {
  double trace = 0;
  for (int64_t i = 0; i < n; ++i) trace += a[static_cast<size_t>(i * n + i)];
  const double ridge = 1e-4 * trace / static_cast<double>(n) + 1e-12;
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i * n + i)] += ridge;
  for (int64_t j = 0; j < n; ++j) {  // a = L Lᵀ, L in the lower triangle
    double d = a[static_cast<size_t>(j * n + j)];
    for (int64_t k = 0; k < j; ++k) d -= a[static_cast<size_t>(j * n + k)] * a[static_cast<size_t>(j * n + k)];
    const double l = std::sqrt(std::max(d, 1e-300));
    a[static_cast<size_t>(j * n + j)] = l;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[static_cast<size_t>(i * n + j)];
      for (int64_t k = 0; k < j; ++k) s -= a[static_cast<size_t>(i * n + k)] * a[static_cast<size_t>(j * n + k)];
      a[static_cast<size_t>(i * n + j)] = s / l;
    }
  }
  for (int64_t c = 0; c < m; ++c) {
    for (int64_t i = 0; i < n; ++i) {  // L y = b
      double s = b[static_cast<size_t>(i * m + c)];
      for (int64_t k = 0; k < i; ++k) s -= a[static_cast<size_t>(i * n + k)] * b[static_cast<size_t>(k * m + c)];
      b[static_cast<size_t>(i * m + c)] = s / a[static_cast<size_t>(i * n + i)];
    }
    for (int64_t i = n - 1; i >= 0; --i) {  // Lᵀ x = y
      double s = b[static_cast<size_t>(i * m + c)];
      for (int64_t k = i + 1; k < n; ++k) s -= a[static_cast<size_t>(k * n + i)] * b[static_cast<size_t>(k * m + c)];
      b[static_cast<size_t>(i * m + c)] = s / a[static_cast<size_t>(i * n + i)];
    }
  }
}

}  // namespace

std::span<const SpSpec> sp_specs() { return kSpecs; }

const SpSpec* find_sp(std::string_view name) {
  for (const SpSpec& s : kSpecs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

SpLayout sp_layout(const SpSpec& spec, int64_t dim, std::string_view which) {
  if (dim < 8 || dim > kMaxWidth || !std::has_single_bit(static_cast<uint64_t>(dim))) {
    throw_error("KV cache type '{}' (seed 000's VHT2 layout) needs {} heads whose width is a power of two from 8 to 1024; "
                "this model's are {} wide",
                spec.name, which, dim);
  }
  SpLayout l;
  l.dim = dim;
  l.skeleton = std::max<int64_t>(1, (dim * kSeedSkeleton + kSeedWidth / 2) / kSeedWidth);
  l.residual = spec.every_lane ? dim - l.skeleton
                               : std::min(dim - l.skeleton, (dim * kSeedResidual + kSeedWidth / 2) / kSeedWidth);
  l.row_bytes = static_cast<size_t>(2 * l.skeleton + (4 * l.residual + 7) / 8 + 4);
  return l;
}

double sp_metadata_bits(const SpSpec& spec, int64_t dim) {
  const SpLayout l = sp_layout(spec, dim);
  return static_cast<double>(l.residual * l.skeleton * 32 + (l.skeleton + l.residual) * 16);
}

std::vector<int32_t> squarefree_first_order(int64_t dim) {
  std::vector<int32_t> order;
  for (int64_t lane = 0; lane < dim; ++lane) {
    if (squarefree(lane + 1)) order.push_back(static_cast<int32_t>(lane));
  }
  for (int64_t lane = 0; lane < dim; ++lane) {
    if (!squarefree(lane + 1)) order.push_back(static_cast<int32_t>(lane));
  }
  return order;
}

SpHead::SpHead(const SpSpec& spec, int64_t dim) : layout_(sp_layout(spec, dim)) {}

void SpHead::calibrate(const float* rows, int64_t n) {
  const int64_t dim = layout_.dim, s = layout_.skeleton, r = layout_.residual;
  if (n <= 0) throw_error("sp: calibration needs at least one row");
  std::vector<double> mean(static_cast<size_t>(dim), 0.0), variance(static_cast<size_t>(dim), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t d = 0; d < dim; ++d) mean[static_cast<size_t>(d)] += rows[t * dim + d];
  }
  for (double& m : mean) m /= static_cast<double>(n);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      const double c = rows[t * dim + d] - mean[static_cast<size_t>(d)];
      variance[static_cast<size_t>(d)] += c * c;
    }
  }
  const std::vector<int32_t> order = squarefree_first_order(dim);
  std::vector<int32_t> sq, rest;
  for (const int32_t lane : order) (squarefree(lane + 1) ? sq : rest).push_back(lane);
  skeleton_ = top_variance(sq, variance, s);
  // Squarefree lanes the skeleton left join the candidates for the residual, still in Möbius order.
  std::vector<int32_t> candidates;
  for (const int32_t lane : order) {
    if (std::find(skeleton_.begin(), skeleton_.end(), lane) == skeleton_.end()) candidates.push_back(lane);
  }
  residual_ = top_variance(candidates, variance, r);

  // W = (SᵀS + ridge)⁻¹ SᵀR on the skeleton as decoded (fp16).
  std::vector<double> sts(static_cast<size_t>(s * s), 0.0), str(static_cast<size_t>(s * r), 0.0);
  std::vector<double> sk(static_cast<size_t>(s));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = rows + t * dim;
    for (int64_t i = 0; i < s; ++i) sk[static_cast<size_t>(i)] = fp16_to_fp32(fp32_to_fp16(x[skeleton_[static_cast<size_t>(i)]]));
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j < s; ++j) sts[static_cast<size_t>(i * s + j)] += sk[static_cast<size_t>(i)] * sk[static_cast<size_t>(j)];
      for (int64_t j = 0; j < r; ++j) {
        str[static_cast<size_t>(i * r + j)] += sk[static_cast<size_t>(i)] * x[residual_[static_cast<size_t>(j)]];
      }
    }
  }
  solve_spd(sts, str, s, r);
  w_.assign(static_cast<size_t>(r * s), 0.0f);
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t i = 0; i < s; ++i) w_[static_cast<size_t>(j * s + i)] = static_cast<float>(str[static_cast<size_t>(i * r + j)]);
  }
  fitted_ = true;
}

void SpHead::predict(const float* skeleton, float* out) const {
  const int64_t s = layout_.skeleton;
  for (int64_t j = 0; j < layout_.residual; ++j) {
    float acc = 0;
    for (int64_t i = 0; i < s; ++i) acc += w_[static_cast<size_t>(j * s + i)] * skeleton[i];
    out[j] = acc;
  }
}

void SpHead::encode(const float* x, uint8_t* out) const {
  const int64_t s = layout_.skeleton, r = layout_.residual;
  float skeleton[kMaxWidth], error[kMaxWidth];
  uint8_t* residual_bytes = out + 2 * s;
  for (int64_t i = 0; i < s; ++i) {
    const uint16_t h = fp32_to_fp16(x[skeleton_[static_cast<size_t>(i)]]);
    std::memcpy(out + 2 * i, &h, 2);
    skeleton[i] = fp16_to_fp32(h);
  }
  predict(skeleton, error);
  float amax = 0;
  for (int64_t j = 0; j < r; ++j) {
    error[j] = x[residual_[static_cast<size_t>(j)]] - error[j];
    amax = std::max(amax, std::fabs(error[j]));
  }
  std::memset(residual_bytes, 0, static_cast<size_t>((4 * r + 7) / 8));
  const float inv = amax > 0 ? 8.0f / amax : 0.0f;
  for (int64_t j = 0; j < r; ++j) {
    const int magnitude = std::min(7, static_cast<int>(std::fabs(error[j]) * inv));
    const int code = magnitude | (error[j] < 0 ? 8 : 0);
    residual_bytes[j / 2] = static_cast<uint8_t>(residual_bytes[j / 2] | (code << (4 * (j % 2))));
  }
  std::memcpy(residual_bytes + (4 * r + 7) / 8, &amax, 4);
}

void SpHead::decode(const uint8_t* in, float* out) const {
  const int64_t s = layout_.skeleton, r = layout_.residual;
  float skeleton[kMaxWidth], predicted[kMaxWidth];
  std::fill(out, out + layout_.dim, 0.0f);
  for (int64_t i = 0; i < s; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    skeleton[i] = fp16_to_fp32(h);
    out[skeleton_[static_cast<size_t>(i)]] = skeleton[i];
  }
  predict(skeleton, predicted);
  const uint8_t* residual_bytes = in + 2 * s;
  float amax;
  std::memcpy(&amax, residual_bytes + (4 * r + 7) / 8, 4);
  const float step = amax / 8.0f;
  for (int64_t j = 0; j < r; ++j) {
    const int code = (residual_bytes[j / 2] >> (4 * (j % 2))) & 15;
    const float magnitude = (static_cast<float>(code & 7) + 0.5f) * step;
    out[residual_[static_cast<size_t>(j)]] = predicted[j] + ((code & 8) != 0 ? -magnitude : magnitude);
  }
}

}  // namespace okapi::kv
