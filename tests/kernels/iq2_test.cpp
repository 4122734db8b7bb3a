// IQ2_XXS, IQ2_XS, IQ2_S (ggml's 2-bit codebook formats) and the IQ1 quantizers: layouts by hand,
// the Q8_K dot equal to the dequantized dot, round trips on Gaussian rows, zero rows, the grid
// search's neighbour lists, and non-finite input refused with okapi::Error. Byte equality with
// llama-quantize is iq2_peer_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/cpu.hpp"
#include "kernels/blocks.hpp"

#include "core/error.hpp"
#include "core/half.hpp"
#include "kernels/scalar/iq1_quantize.hpp"
#include "kernels/scalar/iq_grid_search.hpp"
#include "kernels/scalar/iq_grids.hpp"
#include "row_checks.hpp"

namespace okapi::test {
namespace {

constexpr DType kTypes[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S};

// Importance weights as an imatrix gives them: positive, uneven per column.
std::vector<float> importance_row(int64_t n, uint32_t seed) {
  auto w = gaussian_row(n, seed);
  for (auto& v : w) v = 0.1f + v * v;
  return w;
}

std::vector<uint8_t> quantize_weighted(DType type, const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<uint8_t> q(*row_bytes(type, static_cast<int64_t>(x.size())));
  quant::format(type).quantize_weighted(x.data(), q.data(), static_cast<int64_t>(x.size()), w.data());
  return q;
}

TEST(Iq2, TableRows) {
  for (const DType t : kTypes) {
    const auto& f = quant::format(t);
    EXPECT_EQ(f.vec_dot_type, DType::Q8_K);
    EXPECT_NE(f.quantize_weighted, nullptr);
    EXPECT_EQ(f.requires_importance, t != DType::IQ2_S) << dtype_name(t);
    EXPECT_EQ(f.quantize_ref == nullptr, t != DType::IQ2_S) << dtype_name(t);
  }
  EXPECT_EQ(*row_bytes(DType::IQ2_XXS, 256), 66u);
  EXPECT_EQ(*row_bytes(DType::IQ2_XS, 256), 74u);
  EXPECT_EQ(*row_bytes(DType::IQ2_S, 256), 82u);
}

// IQ2_XXS by hand: group 0 takes grid point 1 (0x080808080808082b) with sign index 1 (ksigns 129:
// elements 0 and 7 negative), scale nibble 3: values d * 3.5 / 4 * byte * sign.
TEST(Iq2, Iq2XxsLayoutByHand) {
  std::vector<uint8_t> block(66, 0);
  const uint16_t d = fp32_to_fp16(2.0f);
  std::memcpy(block.data(), &d, 2);
  const uint32_t idx = 1, sgn = 1U | 3U << 28;
  std::memcpy(block.data() + 2, &idx, 4);
  std::memcpy(block.data() + 6, &sgn, 4);
  const auto y = dequantize_row(DType::IQ2_XXS, block, 256);
  const float db = 2.0f * 3.5f * 0.25f;
  EXPECT_EQ(y[0], -db * 0x2b);
  for (int j = 1; j < 7; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], db * 8) << j;
  EXPECT_EQ(y[7], -db * 8);
  EXPECT_EQ(y[8], db * 8);  // group 1: grid 0, no signs
  EXPECT_EQ(y[32], 2.0f * 0.5f * 0.25f * 8);  // next 32 values: scale nibble 0
}

// IQ2_S by hand: group 5 takes index 0x2xx from qh, its own sign byte; scales per 16 values.
TEST(Iq2, Iq2SLayoutByHand) {
  std::vector<uint8_t> block(82, 0);
  const uint16_t d = fp32_to_fp16(1.0f);
  std::memcpy(block.data(), &d, 2);
  block[2 + 5] = 7;                  // qs[5]: low 8 bits
  block[2 + 64 + 1] = 2 << 2;        // qh[1], group 5 = 4 + 1: high bits 2 -> index 519
  block[2 + 32 + 5] = 0x81;          // sign byte: elements 0 and 7
  block[2 + 64 + 8 + 1] = 0x05;      // scales[1]: values 32..47 nibble 5
  const auto y = dequantize_row(DType::IQ2_S, block, 256);
  const uint64_t g = quant::iq::kIq2sGrid[519];
  for (int j = 0; j < 8; ++j) {
    const float v = 5.5f * 0.25f * static_cast<float>((g >> (8 * j)) & 0xFF) * (j == 0 || j == 7 ? -1.f : 1.f);
    EXPECT_EQ(y[static_cast<size_t>(40 + j)], v) << j;
  }
}

TEST(Iq2, DotMatchesTheDequantizedDot) {
  for (const DType t : kTypes) {
    for (uint32_t seed = 0; seed < 3; ++seed) {
      const int64_t n = 256 * 6;
      const auto w = gaussian_row(n, seed);
      const auto q = quantize_weighted(t, w, importance_row(n, seed + 50));
      const auto a = gaussian_row(n, seed + 100);
      const auto aq = quantize_row(DType::Q8_K, a);
      const auto wd = dequantize_row(t, q, n);
      const auto ad = dequantize_row(DType::Q8_K, aq, n);
      double ref = 0, mag = 0;
      for (size_t i = 0; i < wd.size(); ++i) {
        ref += static_cast<double>(wd[i]) * ad[i];
        mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
      }
      const float dot = quant::format(t).vec_dot_ref(n, q.data(), aq.data());
      EXPECT_NEAR(dot, ref, 2e-6 * mag) << dtype_name(t) << " seed " << seed;
    }
  }
}

TEST(Iq2, RoundTripErrorIsThatOfTwoBits) {
  const int64_t n = 256 * 32;
  const auto x = gaussian_row(n, 7);
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  double previous = 1.0;
  for (const DType t : kTypes) {  // more bits, less error
    const double e = relative_rms_error(x, dequantize_row(t, quantize_weighted(t, x, ones), n));
    std::printf("%s: relative rms error %.4f\n", dtype_name(t).data(), e);
    EXPECT_LT(e, previous) << dtype_name(t);
    EXPECT_LT(e, 0.45) << dtype_name(t);
    EXPECT_GT(e, 0.1) << dtype_name(t);
    previous = e;
  }
  const double s = relative_rms_error(x, dequantize_row(DType::IQ2_S, quantize_row(DType::IQ2_S, x), n));
  EXPECT_LT(s, 0.45);
}

TEST(Iq2, ZeroRowsStayZero) {
  const std::vector<float> zero(512, 0.0f), ones(512, 1.0f);
  for (const DType t : kTypes) {
    const auto q = quantize_weighted(t, zero, ones);
    EXPECT_EQ(q, std::vector<uint8_t>(q.size(), 0)) << dtype_name(t);
    EXPECT_EQ(dequantize_row(t, q, 512), zero) << dtype_name(t);
  }
}

TEST(Iq2, NonFiniteInputIsAnError) {
  std::vector<float> x = gaussian_row(256, 3);
  const std::vector<float> ones(256, 1.0f);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  for (const DType t : kTypes) {
    std::vector<uint8_t> q(*row_bytes(t, 256));
    EXPECT_THROW(quant::format(t).quantize_weighted(x.data(), q.data(), 256, ones.data()), Error) << dtype_name(t);
  }
  std::vector<uint8_t> q(64);
  EXPECT_THROW(quant::detail::quantize_iq1_s_row(x.data(), q.data(), 256, ones.data()), Error);
  EXPECT_THROW(quant::detail::quantize_iq1_m_row(x.data(), q.data(), 256, ones.data()), Error);
  x[17] = 0;
  std::vector<float> bad_w = ones;
  bad_w[3] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quant::format(DType::IQ2_XXS).quantize_weighted(x.data(), q.data(), 256, bad_w.data()), Error);
}

// Every code with levels 0..2 is on the grid or has neighbours; the lists hold the nearest points.
TEST(Iq2, GridNeighbourhoods) {
  using quant::iq::SearchGrid;
  for (const SearchGrid g : {SearchGrid::iq2_xxs, SearchGrid::iq2_xs, SearchGrid::iq2_s, SearchGrid::iq1}) {
    const auto& grid = quant::iq::grid_neighbourhoods(g);
    int on_grid = 0;
    for (unsigned code = 0; code < 65536; ++code) {
      bool level3 = false;
      for (int j = 0; j < 8; ++j) level3 |= ((code >> (2 * j)) & 3) == 3;
      if (level3) continue;
      const auto u = static_cast<uint16_t>(code);
      if (grid.index_of(u) >= 0) {
        ++on_grid;
        continue;
      }
      const auto list = grid.neighbours(u);
      ASSERT_FALSE(list.empty()) << code;
      // The first neighbour is at the smallest distance of all grid points.
      int best = 1 << 30, first = -1;
      for (int p = 0; p < grid.size(); ++p) {
        int d2 = 0;
        for (int j = 0; j < 8; ++j) {
          const int diff = grid.point(p)[j] - (2 * static_cast<int>((code >> (2 * j)) & 3) + 1);
          d2 += diff * diff;
        }
        if (d2 < best) {
          best = d2;
          first = p;
        }
      }
      ASSERT_EQ(list[0], first) << code;
    }
    EXPECT_EQ(on_grid, grid.size());
  }
}

// Random blocks (any bytes, finite d) and random Q8_K activation levels, -128 included.
std::vector<uint8_t> random_blocks(DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(*row_bytes(type, n));
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const size_t block = layout(type).block_bytes;
  for (size_t b = 0; b < w.size() / block; ++b) {
    const uint16_t d = fp32_to_fp16(std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f, -static_cast<int>(rng() % 8)));
    std::memcpy(w.data() + b * block, &d, 2);
  }
  return w;
}

std::vector<uint8_t> random_q8_k(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<quant::block_q8_K> a(static_cast<size_t>(n / 256));
  for (auto& b : a) {
    b.d = static_cast<float>(rng() % 1000) / 65536.0f;
    for (auto& q : b.qs) q = static_cast<int8_t>(static_cast<uint8_t>(rng()));
    for (auto& s : b.bsums) s = 0;
  }
  std::vector<uint8_t> out(a.size() * sizeof(quant::block_q8_K));
  std::memcpy(out.data(), a.data(), out.size());
  return out;
}

// Every tier's vec_dot is the scalar reference's, bit for bit.
TEST(Iq2, EveryTierDotIsTheReference) {
  for (const Isa tier : available_isas()) {
    for (const DType t : kTypes) {
      const auto& ref = quant::format(t, Isa::scalar);
      const auto& f = quant::format(t, tier);
      if (tier >= Isa::avx2) {
        EXPECT_NE(f.vec_dot, ref.vec_dot_ref) << dtype_name(t) << " " << isa_name(tier);
      }
      for (uint32_t seed = 0; seed < 20; ++seed) {
        const int64_t n = 256 * (1 + seed % 5);
        const auto w = random_blocks(t, n, seed);
        const auto a = random_q8_k(n, seed + 1000);
        const float expect = ref.vec_dot_ref(n, w.data(), a.data());
        const float got = f.vec_dot(n, w.data(), a.data());
        ASSERT_EQ(std::memcmp(&expect, &got, sizeof(float)), 0)
            << dtype_name(t) << " " << isa_name(tier) << " seed " << seed << ": " << got << " vs " << expect;
      }
    }
  }
}

// Multi-token tiles (where a tier has them): every (row, token) the reference dot, bit for bit.
TEST(Iq2, TilesAreTheReferenceDot) {
  for (const Isa tier : available_isas()) {
    for (const DType t : kTypes) {
      const auto& f = quant::format(t, tier);
      if (f.tiles.gemm == nullptr) continue;
      const int64_t n = 512, n_rows = 5, n_tokens = 11;
      const size_t w_row = *row_bytes(t, n), a_row = *row_bytes(DType::Q8_K, n);
      std::vector<uint8_t> w, a;
      for (int64_t r = 0; r < n_rows; ++r) {
        const auto row = random_blocks(t, n, static_cast<uint32_t>(r));
        w.insert(w.end(), row.begin(), row.end());
      }
      for (int64_t k = 0; k < n_tokens; ++k) {
        const auto row = random_q8_k(n, static_cast<uint32_t>(100 + k));
        a.insert(a.end(), row.begin(), row.end());
      }
      std::vector<float> y(static_cast<size_t>(n_rows * n_tokens));
      f.tiles.gemm(n, w.data(), w_row, n_rows, a.data(), a_row, nullptr, n_tokens, 1.0f, y.data(), n_rows);
      for (int64_t k = 0; k < n_tokens; ++k) {
        for (int64_t r = 0; r < n_rows; ++r) {
          const float ref = f.vec_dot_ref(n, w.data() + static_cast<size_t>(r) * w_row, a.data() + static_cast<size_t>(k) * a_row);
          const float got = y[static_cast<size_t>(k * n_rows + r)];
          ASSERT_EQ(std::memcmp(&ref, &got, sizeof(float)), 0) << dtype_name(t) << " " << isa_name(tier) << " row " << r << " token " << k;
        }
      }
    }
  }
}

// Row groups (where a tier has them): every (row, token) near the reference dot of the same Q8_K
// activation, and the same bits for a token alone or in a batch.
TEST(Iq2, RowGroupsMatchTheReferenceAndAreBatchInvariant) {
  for (const Isa tier : available_isas()) {
    for (const DType t : kTypes) {
      const auto& f = quant::format(t, tier);
      const auto& rg = f.row_groups;
      if (rg.rows == 0) continue;
      const int64_t n_in = 512, n_out = 37, n_tokens = 11;
      std::vector<uint8_t> w;
      for (int64_t o = 0; o < n_out; ++o) {
        const auto row = quantize_weighted(t, gaussian_row(n_in, static_cast<uint32_t>(o)), importance_row(n_in, 1));
        w.insert(w.end(), row.begin(), row.end());
      }
      const size_t w_row = *row_bytes(t, n_in);
      const int64_t n_groups = (n_out + rg.rows - 1) / rg.rows;
      std::vector<uint8_t> groups(rg.group_bytes(n_in) * static_cast<size_t>(n_groups));
      for (int64_t g = 0; g < n_groups; ++g) {
        rg.pack(w.data() + static_cast<size_t>(g * rg.rows) * w_row, w_row, std::min(rg.rows, n_out - g * rg.rows), n_in,
                groups.data() + static_cast<size_t>(g) * rg.group_bytes(n_in));
      }
      const auto x = gaussian_row(n_in * n_tokens, 77, 2.0f);
      const size_t a_row = rg.activation_bytes(n_in);
      std::vector<uint8_t> act(a_row * static_cast<size_t>(n_tokens));
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        rg.prepare_activation(x.data() + tok * n_in, n_in, act.data() + static_cast<size_t>(tok) * a_row);
      }
      std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
      rg.gemm(n_in, groups.data(), n_out, act.data(), a_row, n_tokens, y.data(), n_out);
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        std::vector<float> alone(static_cast<size_t>(n_out));
        rg.gemm(n_in, groups.data(), n_out, act.data() + static_cast<size_t>(tok) * a_row, a_row, 1, alone.data(), n_out);
        ASSERT_EQ(std::memcmp(alone.data(), y.data() + tok * n_out, alone.size() * sizeof(float)), 0)
            << dtype_name(t) << " token " << tok;
        const std::vector<float> xt(x.begin() + tok * n_in, x.begin() + (tok + 1) * n_in);
        const auto aq = quantize_row(DType::Q8_K, xt);
        for (int64_t o = 0; o < n_out; ++o) {
          const float ref = f.vec_dot_ref(n_in, w.data() + static_cast<size_t>(o) * w_row, aq.data());
          ASSERT_NEAR(y[static_cast<size_t>(tok * n_out + o)], ref, 1e-5f * (1.0f + std::fabs(ref)))
              << dtype_name(t) << " row " << o << " token " << tok;
        }
      }
    }
  }
}

TEST(Iq1Quantizers, ZeroRowsAndSizes) {
  const std::vector<float> zero(256, 0.0f), ones(256, 1.0f);
  std::vector<uint8_t> s(50, 0xAB), m(56, 0xAB);
  quant::detail::quantize_iq1_s_row(zero.data(), s.data(), 256, ones.data());
  quant::detail::quantize_iq1_m_row(zero.data(), m.data(), 256, ones.data());
  EXPECT_EQ(s, std::vector<uint8_t>(50, 0));
  EXPECT_EQ(m, std::vector<uint8_t>(56, 0));
  const std::vector<float> x = gaussian_row(256, 9);
  EXPECT_THROW(quant::detail::quantize_iq1_s_row(x.data(), s.data(), 256, nullptr), Error);
}

}  // namespace
}  // namespace okapi::test
