// IQ3_XXS and IQ3_S (ggml's 3-bit grid formats):
//  * the layouts by hand (grid points, signs, scales);
//  * llama.cpp as the reference (support/iq_peer_files): okapi's quantizers write the bytes
//    llama-quantize writes (with and without an importance matrix, every matrix of a --pure file),
//    okapi's dequantizer gives the floats llama-quantize gives when it requantizes those files to
//    F32 (ggml's dequantize_row_iq3_*), and okapi's logits on llama-quantize's files match
//    llama-dump-logits within the near-tie rule of quantized weights;
//  * the dot product with Q8_K equals the dequantized dot, on every tier, and the fast tiers' dots
//    agree with the reference;
//  * ggml's own quantizers and dequantizers (support/ggml_library) on made-up rows: all-zero
//    groups (ggml's IQ3_S skips them and shifts the later groups' bytes), zero blocks, tiny values,
//    random blocks; NaN inputs (no crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
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

using quant::block_q8_K;
using quant::QK_K;

constexpr DType kTypes[] = {DType::IQ3_XXS, DType::IQ3_S};

std::string peer_name(DType type) { return type == DType::IQ3_XXS ? "IQ3_XXS" : "IQ3_S"; }

TEST(Iq3, LayoutsByHand) {
  // IQ3_XXS: d = 2, group 0 scale 3 -> db = 2 * 3.5 * 0.5 = 3.5; grid point 1 = 0x04040414
  // (magnitudes 20, 4, 4, 4); sign bits 0b0000001 for the first 8 values (bit 7 by parity: set).
  std::vector<uint8_t> xxs(98, 0);
  const uint16_t two = fp32_to_fp16(2.0f);
  std::memcpy(xxs.data(), &two, 2);
  xxs[2 + 0] = 1;  // point of values 0..3
  const uint32_t word = 1u | 3u << 28;
  std::memcpy(xxs.data() + 2 + 64, &word, 4);
  const auto y = dequantize_row(DType::IQ3_XXS, xxs, 256);
  EXPECT_EQ(y[0], -3.5f * 20);
  EXPECT_EQ(y[1], 3.5f * 4);
  EXPECT_EQ(y[4], 3.5f * 4);   // point 0: all 4
  EXPECT_EQ(y[7], -3.5f * 4);  // the parity sign
  EXPECT_EQ(y[8], 3.5f * 4);
  EXPECT_EQ(y[32], 2.0f * 0.5f * 0.5f * 4);  // group 1: scale 0

  // IQ3_S: d = 1, scales 5 (group 0) -> 11; index 256 + 2 via qh bit 0 of group 0.
  std::vector<uint8_t> s(110, 0);
  const uint16_t one = fp32_to_fp16(1.0f);
  std::memcpy(s.data(), &one, 2);
  s[2 + 0] = 2;             // qs[0]
  s[2 + 64] = 1;            // qh[0] bit 0: index 258
  s[2 + 64 + 8] = 0x02;     // signs[0]: value 1 negative
  s[2 + 64 + 8 + 32] = 5;   // scales[0] low nibble
  const auto z = dequantize_row(DType::IQ3_S, s, 256);
  // iq3s_grid[258] = 0x0509070b: magnitudes 11, 7, 9, 5
  EXPECT_EQ(z[0], 11.0f * 11);
  EXPECT_EQ(z[1], -11.0f * 7);
  EXPECT_EQ(z[2], 11.0f * 9);
  EXPECT_EQ(z[3], 11.0f * 5);
  EXPECT_EQ(z[32], 1.0f * 1);  // group 1: scale 0 -> 1, point 0 = 0x01010101
}

TEST(Iq3, RoundTripAndDotOnGaussianRows) {
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto x = gaussian_row(256 * 8, 3);
    const double err = relative_rms_error(x, dequantize_row(type, quantize_row(type, x), 256 * 8));
    EXPECT_LT(err, type == DType::IQ3_XXS ? 0.25 : 0.22);
    EXPECT_GT(err, 0.05);
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const DotCheck c = dot_check(type, gaussian_row(256 * 6, seed), gaussian_row(256 * 6, seed + 50));
      EXPECT_NEAR(c.dot, c.reference, 2e-6 * c.magnitude);
    }
  }
}

// Every tier's vec_dot, and its multi-token tiles where it has them, equal the reference dot bit
// for bit.
TEST(Iq3, FastDotsEqualTheReferenceOnEveryTier) {
  for (Isa tier : available_isas()) {
    for (DType type : kTypes) {
      SCOPED_TRACE(std::string(isa_name(tier)) + " " + std::string(dtype_name(type)));
      const auto& f = quant::format(type, tier);
      const int64_t n = 256 * 5;
      const auto w = quantize_row(type, gaussian_row(n, 9));
      for (uint32_t seed = 0; seed < 4; ++seed) {
        const auto a = quantize_row(DType::Q8_K, gaussian_row(n, seed + 20, 2.0f));
        const float ref = f.vec_dot_ref(n, w.data(), a.data());
        EXPECT_EQ(f.vec_dot(n, w.data(), a.data()), ref);  // exact integer sums, the reference's float steps
      }
      if (f.tiles.gemm == nullptr) continue;
      // The multi-token tiles: 3 rows x 7 tokens, each the reference dot times the scale.
      std::vector<uint8_t> rows;
      for (uint32_t r = 0; r < 3; ++r) {
        const auto row = quantize_row(type, gaussian_row(n, 40 + r));
        rows.insert(rows.end(), row.begin(), row.end());
      }
      std::vector<uint8_t> acts;
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
  }
}

TEST(Iq3, ZeroGroupsAndNonFiniteInputs) {
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto& f = quant::format(type);
    auto x = gaussian_row(512, 4);
    for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // one all-zero group
    std::vector<float> importance(512, 1.0f);
    std::vector<uint8_t> q(*row_bytes(type, 512));
    f.quantize_weighted(x.data(), q.data(), 512, importance.data());
    const auto y = dequantize_row(type, q, 512);
    if (type == DType::IQ3_XXS) {
      for (int i = 32; i < 64; ++i) EXPECT_LT(std::fabs(y[static_cast<size_t>(i)]), 0.2f) << i;
    }
    EXPECT_LT(relative_rms_error(std::vector<float>(x.begin() + 256, x.end()), std::vector<float>(y.begin() + 256, y.end())),
              0.3);
    std::vector<float> zero(256, 0.0f);
    EXPECT_EQ(dequantize_row(type, quantize_row(type, zero), 256), zero);
    // NaN and inf inputs: whatever bytes, but no crash or out-of-bounds read (ASan/UBSan).
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[300] = std::numeric_limits<float>::infinity();
    f.quantize_ref(x.data(), q.data(), 512);
    f.quantize_weighted(x.data(), q.data(), 512, importance.data());
    (void)dequantize_row(type, q, 512);
  }
}

// ---- row groups (the avx512 tier) ----

// A row of random blocks (every index, sign and scale bit random; all are valid) with finite d.
std::vector<uint8_t> random_blocks(DType type, int64_t n, uint32_t seed) {
  std::vector<uint8_t> q(*row_bytes(type, n));
  std::mt19937 gen(seed);
  for (auto& b : q) b = static_cast<uint8_t>(gen());
  for (size_t off = 0; off < q.size(); off += layout(type).block_bytes) {
    const uint16_t d = fp32_to_fp16(0.001f * static_cast<float>(1 + gen() % 50));
    std::memcpy(q.data() + off, &d, 2);  // d is the first field of both blocks
  }
  return q;
}

// The exact integer dot of one super-block (ggml's bsum; IQ3_XXS's in units of d / 4) with Q8_K
// levels: the reference dequantizer on a copy with d = 1 gives the integer values (XXS: / 4).
int64_t block_dot(DType type, const uint8_t* block, const int8_t* q8) {
  const size_t bytes = layout(type).block_bytes;
  std::vector<uint8_t> copy(block, block + bytes);
  const uint16_t one = fp32_to_fp16(1.0f);
  std::memcpy(copy.data(), &one, 2);
  std::vector<float> v(QK_K);
  quant::format(type, Isa::scalar).dequantize_ref(copy.data(), v.data(), QK_K);
  int64_t sum = 0;
  for (int i = 0; i < QK_K; ++i) sum += std::llround(v[static_cast<size_t>(i)] * (type == DType::IQ3_XXS ? 4 : 1)) * q8[i];
  return sum;
}

// The row groups against their scalar model (grid_row_groups_check.hpp), d_a / 4 for IQ3_XXS;
// weights quantized from Gaussian rows, and random blocks (every index, sign and scale).
TEST(Iq3, RowGroupsEqualTheScalarModel) {
  for (Isa tier : available_isas()) {
    for (DType type : kTypes) {
      EXPECT_EQ(quant::format(type, tier).row_groups.rows > 0, tier == Isa::avx512) << isa_name(tier);
      if (quant::format(type, tier).row_groups.rows == 0) continue;
      GridRowModel m;
      m.divisor = type == DType::IQ3_XXS ? 4 : 1;
      m.d = [](const uint8_t* block) {
        uint16_t d;
        std::memcpy(&d, block, 2);
        return d;
      };
      m.bsum = [type](const uint8_t* block, const int8_t* q8) { return block_dot(type, block, q8); };
      m.row = [type](int64_t n_in, uint32_t seed, bool extreme) {
        return extreme ? random_blocks(type, n_in, seed) : quantize_row(type, gaussian_row(n_in, seed));
      };
      expect_row_groups_equal_model(tier, type, m);
    }
  }
}

// ---- against llama.cpp ----

// okapi's quantizers against ggml's own (support/ggml_library) on made-up rows: Gaussian at two
// scales, with an all-zero group (ggml's IQ3_S then shifts the later groups' indices and signs),
// an all-zero super-block, tiny values; with random importance and without.
TEST(Iq3Ggml, QuantizersEqualGgmlOnMadeUpRows) {
  OKAPI_REQUIRE_DATA(GgmlLibrary::path());
  GgmlLibrary& ggml = GgmlLibrary::get();
  std::mt19937 gen(5);
  for (DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const auto& f = quant::format(type, Isa::scalar);
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t n = 512;
      std::vector<float> x = gaussian_row(n, static_cast<uint32_t>(trial), trial % 3 == 0 ? 0.01f : 1.0f);
      std::vector<float> importance(static_cast<size_t>(n));
      for (auto& v : importance) v = std::uniform_real_distribution<float>(0.0f, 3.0f)(gen);
      if (trial % 5 == 1) std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
      if (trial % 7 == 2) std::fill(x.begin(), x.begin() + 256, 0.0f);
      if (trial % 11 == 3) std::fill(x.begin() + 300, x.begin() + 310, 1e-9f);
      const size_t bytes = *row_bytes(type, n);
      for (bool weighted : {false, true}) {
        std::vector<uint8_t> mine(bytes), theirs(bytes);
        ggml.quantize(type, x.data(), theirs.data(), 1, n, weighted ? importance.data() : nullptr);
        if (weighted) {
          f.quantize_weighted(x.data(), mine.data(), n, importance.data());
        } else {
          f.quantize_ref(x.data(), mine.data(), n);
        }
        ASSERT_EQ(mine, theirs) << "trial " << trial << (weighted ? " weighted" : "");
      }
    }
  }
}

// okapi's dequantizers against ggml's dequantize_row_iq3_* on random bytes (every index, sign
// and scale bit; d finite).
TEST(Iq3Ggml, DequantizersEqualGgmlOnRandomBlocks) {
  OKAPI_REQUIRE_DATA(GgmlLibrary::path());
  for (DType type : kTypes) {
    const int64_t n = 256 * 16;
    const auto q = random_blocks(type, n, 3);
    std::vector<float> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    quant::format(type, Isa::scalar).dequantize_ref(q.data(), mine.data(), n);
    GgmlLibrary::get().dequantize(type, q.data(), theirs.data(), n);
    EXPECT_EQ(std::memcmp(mine.data(), theirs.data(), mine.size() * sizeof(float)), 0) << dtype_name(type);
  }
}

class Iq3Peer : public ::testing::TestWithParam<DType> {};

// okapi's quantizer on the F32 model's tensors, row by row, with llama-quantize's importance weights
// (or none), against llama-quantize's bytes.
void expect_quantizer_matches(DType type, bool with_imatrix) {
  IqPeerFiles& files = IqPeerFiles::get();
  const gguf::File source = gguf::File::open(files.f32_model());
  // llama-quantize quantizes IQ3_XXS matrices only with an imatrix; the token embedding without.
  const bool embedding_only = type == DType::IQ3_XXS && !with_imatrix;
  const gguf::File peer = gguf::File::open(embedding_only ? files.embedding_only(peer_name(type))
                                                          : files.quantized(peer_name(type), with_imatrix));
  const auto names = tensors_of_type(peer, type);
  ASSERT_GE(names.size(), embedding_only ? 1u : 14u) << "llama-quantize left too few tensors as " << dtype_name(type);
  const auto& f = quant::format(type, Isa::scalar);
  int64_t weighted = 0;
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const gguf::TensorInfo& src = source.tensor(name);
    const gguf::TensorInfo& dst = peer.tensor(name);
    ASSERT_EQ(src.type, DType::F32);
    const int64_t n = src.shape[0];
    const size_t row = *row_bytes(type, n);
    ASSERT_EQ(dst.nbytes, row * static_cast<size_t>(src.n_rows()));
    const std::vector<float> importance = with_imatrix ? files.importance(name) : std::vector<float>{};
    if (!importance.empty()) {
      ASSERT_EQ(static_cast<int64_t>(importance.size()), n);
      ++weighted;
    }
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<uint8_t> q(row);
    for (int64_t r = 0; r < src.n_rows(); ++r) {
      std::memcpy(x.data(), src.data + static_cast<size_t>(r * n) * sizeof(float), x.size() * sizeof(float));
      if (importance.empty()) {
        f.quantize_ref(x.data(), q.data(), n);
      } else {
        f.quantize_weighted(x.data(), q.data(), n, importance.data());
      }
      const uint8_t* want = dst.data + static_cast<size_t>(r) * row;
      if (std::memcmp(q.data(), want, row) != 0) {
        size_t i = 0;
        while (q[i] == want[i]) ++i;
        FAIL() << "row " << r << " differs first at byte " << i << " (block " << i / layout(type).block_bytes
               << "): okapi " << int{q[i]} << " llama.cpp " << int{want[i]};
      }
    }
  }
  if (with_imatrix) {
    EXPECT_GE(weighted, 14) << "the imatrix covered too few matrices";
  }
}

TEST_P(Iq3Peer, QuantizerWithImportanceMatchesLlamaQuantize) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_quantizer_matches(GetParam(), true);
}

TEST_P(Iq3Peer, QuantizerWithoutImportanceMatchesLlamaQuantize) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_quantizer_matches(GetParam(), false);
}

TEST_P(Iq3Peer, DequantizeMatchesGgml) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_dequantize_matches_ggml(GetParam(), peer_name(GetParam()), 14);
}

TEST_P(Iq3Peer, LogitsMatchLlamaCpp) {
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  expect_logits_match_peer(peer_name(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Types, Iq3Peer, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& param_info) { return peer_name(param_info.param); });

}  // namespace
}  // namespace okapi::test
