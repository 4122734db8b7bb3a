// The check shared by the codebook formats' row-group tests (iq3_test.cpp, iq1_test.cpp): every
// (row, token) lane of a row-group GEMM equals the scalar model of its arithmetic, per super-block
// in order acc = fma(d_w * (d_a / divisor), float(bsum), acc) with bsum the exact integer dot in
// the format's units, for partial row and token groups, random and extreme weights and
// activations (levels +-127); and each lane agrees with the reference vec_dot.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/half.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "row_checks.hpp"

namespace okapi::test {

struct GridRowModel {
  int divisor = 1;                                                 // d_a' = d_a / divisor
  std::function<uint16_t(const uint8_t* block)> d;                 // a block's fp16 d
  std::function<int64_t(const uint8_t* block, const int8_t* q8)> bsum;
  std::function<std::vector<uint8_t>(int64_t n_in, uint32_t seed, bool extreme)> row;  // one weight row
};

inline void expect_row_groups_equal_model(Isa tier, DType type, const GridRowModel& m) {
  const quant::RowGroupKernels& k = quant::format(type, tier).row_groups;
  ASSERT_GT(k.rows, 0);
  for (bool extreme : {false, true}) {
    for (const auto& [nb, n_out, n_tokens] :
         std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {3, 37, 19}, {2, 16, 8}, {2, 5, 2}, {4, 33, 9}}) {
      const int64_t n_in = nb * quant::QK_K;
      SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(type) << " n_in " << n_in << " rows "
                                        << n_out << " tokens " << n_tokens << (extreme ? " extreme" : ""));
      const size_t w_row = *row_bytes(type, n_in);
      std::vector<uint8_t> w;
      for (int64_t o = 0; o < n_out; ++o) {
        const auto row = m.row(n_in, static_cast<uint32_t>(o), extreme);
        w.insert(w.end(), row.begin(), row.end());
      }
      std::vector<float> x = gaussian_row(n_in * n_tokens, 99, 3.0f);
      if (extreme) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -5.0f : 5.0f;
      }
      const size_t g_bytes = k.group_bytes(n_in);
      const int64_t n_groups = (n_out + k.rows - 1) / k.rows;
      std::vector<uint8_t> groups(static_cast<size_t>(n_groups) * g_bytes, 0xa5);
      for (int64_t g = 0; g < n_groups; ++g) {
        k.pack(w.data() + static_cast<size_t>(g * k.rows) * w_row, w_row, std::min(k.rows, n_out - g * k.rows), n_in,
               groups.data() + static_cast<size_t>(g) * g_bytes);
      }
      const size_t a_row = k.activation_bytes(n_in);
      std::vector<uint8_t> acts(a_row * static_cast<size_t>(n_tokens));
      std::vector<quant::block_q8_K> q8(static_cast<size_t>(nb * n_tokens));
      for (int64_t t = 0; t < n_tokens; ++t) {
        k.prepare_activation(x.data() + t * n_in, n_in, acts.data() + static_cast<size_t>(t) * a_row);
        quant::format(DType::Q8_K, Isa::scalar).quantize_ref(x.data() + t * n_in, q8.data() + t * nb, n_in);
      }
      const int64_t y_stride = n_out + 3;  // a wider output row: nothing past n_out is written
      std::vector<float> y(static_cast<size_t>(y_stride * n_tokens), -1.0f);
      k.gemm(n_in, groups.data(), n_out, acts.data(), a_row, n_tokens, y.data(), y_stride);
      for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < n_out; ++o) {
          float acc = 0.0f;
          const uint8_t* row = w.data() + static_cast<size_t>(o) * w_row;
          for (int64_t b = 0; b < nb; ++b) {
            const quant::block_q8_K& a = q8[static_cast<size_t>(t * nb + b)];
            const uint8_t* block = row + static_cast<size_t>(b) * layout(type).block_bytes;
            acc = std::fma(fp16_to_fp32(m.d(block)) * (a.d * (1.0f / static_cast<float>(m.divisor))),
                           static_cast<float>(m.bsum(block, a.qs)), acc);
          }
          ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], acc) << "token " << t << " row " << o;
          const float ref = quant::format(type, Isa::scalar).vec_dot_ref(n_in, row, q8.data() + t * nb);
          EXPECT_NEAR(acc, ref, 1e-5 * (1.0 + std::fabs(ref)));
        }
        for (int64_t o = n_out; o < y_stride; ++o) ASSERT_EQ(y[static_cast<size_t>(t * y_stride + o)], -1.0f);
      }
    }
  }
}

}  // namespace okapi::test
