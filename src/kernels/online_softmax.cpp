#include "kernels/online_softmax.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/avx2/vector_ops.hpp"
#include "kernels/kernels.hpp"

namespace okapi::kernels {

float softmax_tile(Isa tier, float* x, int64_t n, float* sum) {
  if (tier >= Isa::avx2) {
    const float max = avx2::max(x, n);
    const double total = avx2::exp_minus_max(x, n, max);
    avx2::scale_in_place(x, n, static_cast<float>(1.0 / total));
    *sum = static_cast<float>(total);
    return max;
  }
  double total = 0.0;
  const float max = ref::softmax(x, n, &total);
  *sum = static_cast<float>(total);
  return max;
}

void merge_softmax_partial(float* m, float* l, float* acc, float m_t, float l_t, const float* acc_t, int64_t dim) {
  if (*l < 0.0f) {  // empty: take the partial as it is
    *m = m_t;
    *l = l_t;
    std::copy(acc_t, acc_t + dim, acc);
    return;
  }
  const float m_new = std::max(*m, m_t);
  const float wa = *l * std::exp(*m - m_new), wb = l_t * std::exp(m_t - m_new);
  *m = m_new;
  *l = wa + wb;
  const float a = wa / *l, b = wb / *l;
  for (int64_t i = 0; i < dim; ++i) acc[i] = acc[i] * a + acc_t[i] * b;
}

}  // namespace okapi::kernels
