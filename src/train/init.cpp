// Seedable initialisation. Bit-reproducible on every IEEE-754 machine: splitmix64 streams, and
// normals from Marsaglia's polar method with our own log (frexp + atanh series, plain double
// arithmetic; sqrt is correctly rounded by IEEE), so no libm transcendental is involved.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "train/model.hpp"

namespace okapi::train {
namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Natural log of x > 0 (finite, normal) to ~1 ulp: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172, series to t^31 (< 1e-24).
double deterministic_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
  double sum = 0.0;
  for (int k = 31; k >= 1; k -= 2) sum = sum * t2 + 1.0 / static_cast<double>(k);
  return 2.0 * t * sum + static_cast<double>(e) * 0.69314718055994530942;
}

// One standard normal (polar method, the second value of each pair discarded for simplicity).
double standard_normal(SplitMix64& rng) {
  for (;;) {
    const double u = 2.0 * rng.uniform() - 1.0, v = 2.0 * rng.uniform() - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    return u * std::sqrt(-2.0 * deterministic_log(s) / s);
  }
}

// Each tensor has its own stream, so its values depend only on (seed, its index in the layout).
uint64_t stream_seed(uint64_t seed, size_t slot_index) {
  SplitMix64 mix(seed ^ (0xd1b54a32d192ed03ULL * (static_cast<uint64_t>(slot_index) + 1)));
  return mix.next();
}

bool is_residual_projection(const std::string& name) {
  const auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("attn_output.weight") || ends_with("ffn_down.weight");
}

}  // namespace

void initialize(const ParameterLayout& layout, Init init, uint64_t seed, std::span<float> params) {
  if (params.size() != layout.total()) {
    throw_error("initialize: parameter buffer has {} floats, the layout needs {}", params.size(), layout.total());
  }
  int64_t n_layers = 0;
  for (const TensorSlot& s : layout.slots()) {
    if (s.name.ends_with("attn_norm.weight")) ++n_layers;
  }
  const auto& slots = layout.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSlot& s = slots[i];
    float* out = params.data() + s.offset;
    const size_t n = s.size();
    if (s.role == TensorRole::Norm) {
      for (size_t j = 0; j < n; ++j) out[j] = 1.0f;
      continue;
    }
    SplitMix64 rng(stream_seed(seed, i));
    if (init == Init::Xavier) {
      // fan_in = cols (inputs), fan_out = rows (outputs); the embedding is treated alike.
      const double bound = std::sqrt(6.0 / static_cast<double>(s.rows + s.cols));
      for (size_t j = 0; j < n; ++j) out[j] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    } else {
      // llama2.c: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layers)) (GPT-2's rule;
      // llama2.c's model.py applies it to wo and w3, we apply it to wo and W2 = ffn_down, the
      // projections that write into the residual stream).
      const double std_dev = is_residual_projection(s.name)
                                 ? 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(n_layers, 1)))
                                 : 0.02;
      for (size_t j = 0; j < n; ++j) out[j] = static_cast<float>(std_dev * standard_normal(rng));
    }
  }
}

}  // namespace okapi::train
