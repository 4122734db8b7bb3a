// IQ1_S and IQ1_M (ggml's 1.56 / 1.75-bit codebook formats), read side (their quantizers are tested
// with the IQ2 family's):
//  * the layouts by hand (codebook index bits, shift signs, scales, IQ1_M's d in the scales' top
//    nibbles);
//  * the dot product with Q8_K equals the dequantized dot, and every tier's equals the reference;
//  * against llama.cpp (support/iq_peer_files): okapi's dequantizer gives the floats llama-quantize
//    gives when it requantizes its IQ1 files (made with an importance matrix) to F32, and okapi's
//    logits on those files match llama-dump-logits within the near-tie rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "core/cpu.hpp"
#include "core/half.hpp"
#include "format/gguf.hpp"
#include "kernels/blocks.hpp"
#include "kernels/format_table.hpp"
#include "grid_row_groups_check.hpp"
#include "row_checks.hpp"
#include "support/ggml_library.hpp"
#include "support/iq_peer_files.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {
namespace {

constexpr DType kTypes[] = {DType::IQ1_S, DType::IQ1_M};

std::string peer_name(DType type) { return type == DType::IQ1_S ? "IQ1_S" : "IQ1_M"; }

// n values of random IQ1 blocks (every index, shift and scale bit random) with a finite d.
std::vector<uint8_t> random_row(DType type, int64_t n, uint32_t seed) {
  std::vector<uint8_t> q(*row_bytes(type, n));
  std::mt19937 gen(seed);
  for (auto& b : q) b = static_cast<uint8_t>(gen());
  const size_t block = layout(type).block_bytes;
  for (size_t off = 0; off < q.size(); off += block) {
    const uint16_t d = fp32_to_fp16(0.01f + 0.001f * static_cast<float>(gen() % 100));
    if (type == DType::IQ1_S) {
      std::memcpy(q.data() + off, &d, 2);
    } else {  // the top nibble of each of the 4 scale words holds a nibble of d
      uint16_t sc[4];
      std::memcpy(sc, q.data() + off + 48, sizeof(sc));
      for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0fff) | ((d >> (4 * k)) & 0xf) << 12);
      std::memcpy(q.data() + off + 48, sc, sizeof(sc));
    }
  }
  return q;
}

TEST(Iq1, LayoutsByHand) {
  // IQ1_S: d = 1, group 0: scale 2 -> 5, negative shift, index of values 0..7 = 0x100 | 1
  // (iq1s_grid[257] = 0xff00ff0100010001: 1 0 1 0 1 -1 0 -1).
  std::vector<uint8_t> s(50, 0);
  const uint16_t one = fp32_to_fp16(1.0f);
  std::memcpy(s.data(), &one, 2);
  s[2] = 1;
  const uint16_t qh = static_cast<uint16_t>(1 | 2 << 12 | 0x8000);
  std::memcpy(s.data() + 34, &qh, 2);
  const auto y = dequantize_row(DType::IQ1_S, s, 256);
  const int want[8] = {1, 0, 1, 0, 1, -1, 0, -1};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[static_cast<size_t>(j)], 5.0f * (static_cast<float>(want[j]) - 0.125f)) << j;
  // group 1: qh 0 -> scale 1, positive shift, index 0 (all -1)
  EXPECT_EQ(y[32], 1.0f * (-1.0f + 0.125f));

  // IQ1_M: d = 0.5 spread over the scales' top nibbles; unit 1 (values 8..15): index 0x200 | 3
  // with a negative shift (qh[0] high nibble 0b1010); scales of group 0: 1 (-> 3) and 4 (-> 9).
  std::vector<uint8_t> m(56, 0);
  const uint16_t half = fp32_to_fp16(0.5f);
  uint16_t sc[4] = {};
  for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(((half >> (4 * k)) & 0xf) << 12);
  sc[0] = static_cast<uint16_t>(sc[0] | 1 | 4 << 3);
  std::memcpy(m.data() + 48, sc, sizeof(sc));
  m[1] = 3;
  m[32] = 0xa0;
  const auto z = dequantize_row(DType::IQ1_M, m, 256);
  EXPECT_EQ(z[0], 0.5f * 3.0f * (-1.0f + 0.125f));   // unit 0: index 0, positive shift, scale 3
  EXPECT_EQ(z[16], 0.5f * 9.0f * (-1.0f + 0.125f));  // unit 2: the second scale
  const int point[8] = {1, 0, -1, 0, -1, 0, 1, -1};  // iq1s_grid[515] = 0xff0100ff00ff0001
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(z[static_cast<size_t>(8 + j)], 0.5f * 3.0f * (static_cast<float>(point[j]) - 0.125f)) << j;
  }
}

TEST(Iq1, DotEqualsTheDequantizedDot) {
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto& f = quant::format(type, Isa::scalar);
    const int64_t n = 256 * 6;
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const auto w = random_row(type, n, seed);
      const auto a = quantize_row(DType::Q8_K, gaussian_row(n, seed + 10, 2.0f));
      const auto wd = dequantize_row(type, w, n);
      const auto ad = dequantize_row(DType::Q8_K, a, n);
      double ref = 0, mag = 0;
      for (size_t i = 0; i < wd.size(); ++i) {
        ref += static_cast<double>(wd[i]) * ad[i];
        mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
      }
      EXPECT_NEAR(f.vec_dot_ref(n, w.data(), a.data()), ref, 2e-6 * mag);
    }
  }
}

TEST(Iq1, FastDotsEqualTheReferenceOnEveryTier) {
  for (Isa tier : available_isas()) {
    for (DType type : kTypes) {
      SCOPED_TRACE(std::string(isa_name(tier)) + " " + std::string(dtype_name(type)));
      const auto& f = quant::format(type, tier);
      const int64_t n = 256 * 5;
      const auto w = random_row(type, n, 77);
      for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto a = quantize_row(DType::Q8_K, gaussian_row(n, seed + 20, 2.0f));
        const float ref = f.vec_dot_ref(n, w.data(), a.data());
        EXPECT_EQ(f.vec_dot(n, w.data(), a.data()), ref);  // exact integer sums, the reference's float steps
      }
      if (f.tiles.gemm != nullptr) {  // the multi-token tiles: 3 rows x 7 tokens
        std::vector<uint8_t> rows, acts;
        for (uint32_t r = 0; r < 3; ++r) {
          const auto row = random_row(type, n, 40 + r);
          rows.insert(rows.end(), row.begin(), row.end());
        }
        for (uint32_t tok = 0; tok < 7; ++tok) {
          const auto act = quantize_row(DType::Q8_K, gaussian_row(n, 60 + tok, 2.0f));
          acts.insert(acts.end(), act.begin(), act.end());
        }
        const size_t w_row = *row_bytes(type, n), a_row = *row_bytes(DType::Q8_K, n);
        std::vector<float> y(3 * 7);
        f.tiles.gemm(n, rows.data(), w_row, 3, acts.data(), a_row, nullptr, 7, 0.5f, y.data(), 3);
        for (size_t tok = 0; tok < 7; ++tok) {
          for (size_t r = 0; r < 3; ++r) {
            EXPECT_EQ(y[tok * 3 + r], f.vec_dot_ref(n, rows.data() + r * w_row, acts.data() + tok * a_row) * 0.5f)
                << "token " << tok << " row " << r;
          }
        }
      }
      std::vector<float> y(static_cast<size_t>(n)), y_ref(static_cast<size_t>(n));
      f.dequantize(w.data(), y.data(), n);
      f.dequantize_ref(w.data(), y_ref.data(), n);
      EXPECT_EQ(y, y_ref);
    }
  }
}

// The fp16 d of an IQ1 block (IQ1_M: assembled from the top nibbles of its scale words) and a copy
// of the block with d = `d`.
uint16_t block_d(DType type, const uint8_t* block) {
  uint16_t w[4];
  std::memcpy(w, block + (type == DType::IQ1_S ? 0 : 48), sizeof(w));
  if (type == DType::IQ1_S) return w[0];
  return static_cast<uint16_t>((w[0] >> 12) | ((w[1] >> 8) & 0x00f0) | ((w[2] >> 4) & 0x0f00) | (w[3] & 0xf000));
}
void set_block_d(DType type, uint8_t* block, uint16_t d) {
  if (type == DType::IQ1_S) {
    std::memcpy(block, &d, 2);
    return;
  }
  for (int k = 0; k < 4; ++k) {
    uint8_t& top = block[48 + 2 * k + 1];
    top = static_cast<uint8_t>((top & 0x0f) | ((d >> (4 * k)) & 0xf) << 4);
  }
}

// The exact integer dot, in units of d / 8, of one super-block with Q8_K levels: the reference
// dequantizer on a copy with d = 1 gives scale * (grid + delta / 8).
int64_t block_dot(DType type, const uint8_t* block, const int8_t* q8) {
  std::vector<uint8_t> copy(block, block + layout(type).block_bytes);
  set_block_d(type, copy.data(), fp32_to_fp16(1.0f));
  std::vector<float> v(quant::QK_K);
  quant::format(type, Isa::scalar).dequantize_ref(copy.data(), v.data(), quant::QK_K);
  int64_t sum = 0;
  for (int i = 0; i < quant::QK_K; ++i) sum += std::llround(v[static_cast<size_t>(i)] * 8) * q8[i];
  return sum;
}

// The row groups against their scalar model (grid_row_groups_check.hpp), d_a / 8, random blocks.
TEST(Iq1, RowGroupsEqualTheScalarModel) {
  for (Isa tier : available_isas()) {
    for (DType type : kTypes) {
      EXPECT_EQ(quant::format(type, tier).row_groups.rows > 0, tier == Isa::avx512) << isa_name(tier);
      if (quant::format(type, tier).row_groups.rows == 0) continue;
      GridRowModel m;
      m.divisor = 8;
      m.d = [type](const uint8_t* block) { return block_d(type, block); };
      m.bsum = [type](const uint8_t* block, const int8_t* q8) { return block_dot(type, block, q8); };
      m.row = [type](int64_t n_in, uint32_t seed, bool extreme) { return random_row(type, n_in, seed + (extreme ? 1000 : 0)); };
      expect_row_groups_equal_model(tier, type, m);
    }
  }
}

// okapi's dequantizers against ggml's dequantize_row_iq1_* (support/ggml_library) on random
// bytes (every index, shift and scale bit; d finite).
TEST(Iq1Ggml, DequantizersEqualGgmlOnRandomBlocks) {
  OKAPI_REQUIRE_DATA(GgmlLibrary::path());
  for (DType type : kTypes) {
    const int64_t n = 256 * 16;
    const auto q = random_row(type, n, 3);
    std::vector<float> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    quant::format(type, Isa::scalar).dequantize_ref(q.data(), mine.data(), n);
    GgmlLibrary::get().dequantize(type, q.data(), theirs.data(), n);
    EXPECT_EQ(std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)), 0) << dtype_name(type);
  }
}

class Iq1Peer : public ::testing::TestWithParam<DType> {};

TEST_P(Iq1Peer, DequantizeMatchesGgml) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_dequantize_matches_ggml(GetParam(), peer_name(GetParam()), 14);
}

TEST_P(Iq1Peer, LogitsMatchLlamaCpp) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_logits_match_peer(peer_name(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Types, Iq1Peer, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& param_info) { return peer_name(param_info.param); });

}  // namespace
}  // namespace okapi::test
