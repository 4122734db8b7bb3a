// Central finite differences in double for the gradient checks.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace okapi::test {

inline std::vector<double> random_vector(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// The largest relative error between `analytic` and the central difference (L(x+h) - L(x-h)) / 2h
// over every element of `x`, relative to max(|analytic|, |numeric|, floor), floor being 1e-3 of the
// largest numeric gradient (so components that are ~0 compare by absolute error at that scale).
inline double max_fd_relative_error(std::vector<double>& x, const std::vector<double>& analytic,
                                    const std::function<double()>& loss, double h = 1e-6) {
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    numeric[i] = (plus - minus) / (2.0 * h);
  }
  double scale = 0;
  for (const double v : numeric) scale = std::max(scale, std::fabs(v));
  const double floor = std::max(1e-3 * scale, 1e-12);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double denom = std::max({std::fabs(analytic[i]), std::fabs(numeric[i]), floor});
    worst = std::max(worst, std::fabs(analytic[i] - numeric[i]) / denom);
  }
  return worst;
}

// Prints and checks one input's gradient.
inline void expect_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                            const std::function<double()>& loss, double tolerance = 1e-4) {
  const double err = max_fd_relative_error(x, analytic, loss);
  const std::string label = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + " " + what;
  std::printf("  %-44s max relative error %.2e (%zu elements)\n", label.c_str(), err, x.size());
  EXPECT_LE(err, tolerance) << what;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace okapi::test
