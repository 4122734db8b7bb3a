#include "kernels/scalar/kquant_strict_fp.hpp"  // first: no FMA contraction below

#include "kernels/scalar/kquant_search.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace okapi::quant::kquant {
namespace {

// Below this the group counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

int clamp_level(int l, int lo, int hi) { return std::max(lo, std::min(hi, l)); }

// The signed absmax of a group, or nothing (with every level set to 0) for an all-zero group.
std::optional<float> nonzero_group_max(int n, const float* x, int8_t* L) {
  float amax = 0.0f;
  const float max = signed_absmax(n, x, amax);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return std::nullopt;
  }
  return max;
}

}  // namespace

float signed_absmax(int n, const float* x, float& amax) {
  float max = 0.0f;
  amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return max;
}

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  const std::optional<float> group_max = nonzero_group_max(n, x, L);
  if (!group_max) return 0.0f;
  const float max = *group_max;
  // Weighted sums for one candidate inverse scale; the weight of x is qw[i] or x^2.
  auto fit = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = 0.0f;
    suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = qw != nullptr ? qw[i] : x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
  };
  auto store = [&](float iscale) {
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      L[i] = static_cast<int8_t>(l + nmax);
    }
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  fit(iscale, sumlx, suml2);
  store(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, sumlx, suml2);
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  const std::optional<float> group_max = nonzero_group_max(n, x, L);
  if (!group_max) return 0.0f;
  const float max = *group_max;
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_level(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  // Coordinate descent: move one level to its best value given all others, keep it if the
  // optimal-scale objective sumlx^2 / suml2 grows. At most 5 sweeps.
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float old_l = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * old_l;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * old_l * old_l;
        const int new_l = clamp_level(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* weights) {
  float max = 0.0f;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max < kGroupMaxEps) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  // ggml keeps the levels in uint8_t: a negative level (a negative x) wraps, and later reads
  // see the wrapped value; kept as ggml has it.
  auto level = [&](float iscale, int i) { return std::min(nmax, nearest_int(iscale * x[i])); };
  float iscale = fnmax / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
  float scale = 1.0f / iscale;
  float best_mse = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * static_cast<float>(L[i]);
    best_mse += weights[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * static_cast<float>(is) + fnmax) / max;
    const float scale_is = 1.0f / iscale_is;
    float mse = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = x[i] - scale_is * static_cast<float>(level(iscale_is, i));
      mse += weights[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<uint8_t>(l);
    const float w = weights[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      const float old_l = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * old_l;
      float sl2 = suml2 - w * old_l * old_l;
      if (slx > 0.0f && sl2 > 0.0f) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

ScaleMin make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                          uint8_t* aux, const ScaleSearch& search) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    return {0.0f, -min};
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (max - min);
  float scale = 1.0f / iscale;
  auto error_of = [&](float d, float m, const uint8_t* levels) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = d * static_cast<float>(levels[i]) + m - x[i];
      diff = search.use_mad ? std::fabs(diff) : diff * diff;
      err += weights[i] * diff;
    }
    return err;
  };
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax));
  }
  if (search.nstep < 1) return {scale, -min};
  float best_error = error_of(scale, min, L);
  for (int is = 0; is <= search.nstep; ++is) {
    iscale = (search.rmin + search.rdelta * static_cast<float>(is) + fnmax) / (max - min);
    float sum_l = 0.0f;
    float sum_l2 = 0.0f;
    float sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_level(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {  // the offset may only lower values: refit the scale alone
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      const float cur_error = error_of(this_scale, this_min, aux);
      if (cur_error < best_error) {
        std::copy(aux, aux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  return {scale, -min};
}

void pack_scale_min_k4(const uint8_t* scales, const uint8_t* mins, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = scales[j];
    q[j + 4] = mins[j];
  }
  for (int j = 4; j < 8; ++j) {
    q[j + 4] = static_cast<uint8_t>((scales[j] & 0xF) | ((mins[j] & 0xF) << 4));
    q[j - 4] = static_cast<uint8_t>(q[j - 4] | ((scales[j] >> 4) << 6));
    q[j] = static_cast<uint8_t>(q[j] | ((mins[j] >> 4) << 6));
  }
}

}  // namespace okapi::quant::kquant
