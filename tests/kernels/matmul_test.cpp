// matmul for every weight format in the quant table and every ISA tier this CPU runs: the scalar
// reference and the threaded kernel against a float64 product of the dequantized weights and the
// dequantized (quantized) activations (tight), against the plain float product (format-dependent
// NMSE), against each other (NMSE <= 1e-7, as test-backend-ops), and bit-identical across thread
// counts and between a token alone and the same token inside a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/thread_pool.hpp"
#include "kernels/format_table.hpp"
#include "kernels/kernels.hpp"
#include "support/random_data.hpp"

namespace okapi::kernels {
namespace {

using test::gaussian;

bool is_ternary(DType t) {
  return t == DType::TQ1_0 || t == DType::TQ2_0 || t == DType::I2_S || t == DType::IQ1_BN || t == DType::IQ2_BN;
}

struct Weights {
  std::vector<uint8_t> data;
  std::vector<float> original;     // what was quantized (the "plain float" weights)
  std::vector<float> dequantized;  // what the data decodes to
};

// Ternary formats get ternary weights (what they are made for); formats okapi cannot quantize
// get random bytes with a valid row scale.
Weights make_weights(DType type, int64_t n_in, int64_t n_out, uint32_t seed) {
  const std::array<int64_t, 2> shape{n_in, n_out};
  const size_t count = static_cast<size_t>(n_in * n_out);
  Weights w;
  w.original = gaussian(count, seed);
  const quant::Format& f = quant::format(type);
  if (is_ternary(type)) {
    for (auto& v : w.original) v = v > 0.5f ? 0.75f : (v < -0.5f ? -0.75f : 0.0f);
  }
  if (f.quantize_ref != nullptr) {
    w.data = quant::quantize_tensor(type, w.original.data(), shape, true);
  } else if (type == DType::IQ2_XXS || type == DType::IQ2_XS) {  // they need importance weights: unit ones
    const size_t row = *row_bytes(type, n_in);
    const std::vector<float> ones(static_cast<size_t>(n_in), 1.0f);
    w.data.resize(*tensor_bytes(type, shape));
    for (int64_t o = 0; o < n_out; ++o) {
      f.quantize_weighted(w.original.data() + o * n_in, w.data.data() + static_cast<size_t>(o) * row, n_in, ones.data());
    }
  } else {
    w.data.resize(*tensor_bytes(type, shape));
    std::mt19937 gen(seed);
    for (auto& b : w.data) b = static_cast<uint8_t>(gen());
    // IQ1_S / IQ1_M (quantizer needs importance): every bit random but a finite d per block (IQ1_S:
    // its first field; IQ1_M: the top nibbles of its 4 scale words).
    for (size_t off = 0; (type == DType::IQ1_S || type == DType::IQ1_M) && off < w.data.size();
         off += layout(type).block_bytes) {
      const uint16_t d = fp32_to_fp16(0.01f);
      if (type == DType::IQ1_S) std::memcpy(w.data.data() + off, &d, 2);
      for (int k = 0; type == DType::IQ1_M && k < 4; ++k) {
        uint8_t& top = w.data[off + 48 + 2 * static_cast<size_t>(k) + 1];
        top = static_cast<uint8_t>((top & 0x0f) | ((d >> (4 * k)) & 0xf) << 4);
      }
    }
    const size_t row = *row_bytes(type, n_in), prefix = layout(type).row_prefix_bytes;
    for (int64_t o = 0; o < n_out; ++o) {
      uint8_t* p = w.data.data() + static_cast<size_t>(o) * row;
      if (prefix == 2) {
        const uint16_t h = fp32_to_fp16(0.5f);
        std::memcpy(p, &h, 2);
      } else if (prefix == 4) {
        const float s = 0.5f;
        std::memcpy(p, &s, 4);
      }
    }
  }
  w.dequantized.resize(count);
  quant::dequantize_tensor(type, w.data, shape, w.dequantized.data(), true);
  if (f.quantize_ref == nullptr && type != DType::IQ2_XXS && type != DType::IQ2_XS) w.original = w.dequantized;
  return w;
}

// x as the dot product sees it: quantized to vec_dot_type and back (x itself for F32 pairs).
std::vector<float> activations_as_seen(DType type, const std::vector<float>& x, int64_t n_in) {
  const quant::Format& f = quant::format(type);
  if (f.vec_dot == nullptr || f.vec_dot_type == DType::F32) return x;
  const quant::Format& a = quant::format(f.vec_dot_type);
  std::vector<uint8_t> row(*row_bytes(f.vec_dot_type, n_in));
  std::vector<float> out(x.size());
  for (size_t t = 0; t < x.size() / static_cast<size_t>(n_in); ++t) {
    a.quantize_ref(x.data() + t * static_cast<size_t>(n_in), row.data(), n_in);
    a.dequantize_ref(row.data(), out.data() + t * static_cast<size_t>(n_in), n_in);
  }
  return out;
}

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return err / norm;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Expected NMSE of the quantized product against the float one on N(0,1) data (ternary formats
// get exactly representable weights, so only activation rounding remains); ~3x measured values.
double float_tolerance(DType type) {
  static const std::map<DType, double> by_type{
      {DType::F32, 1e-12}, {DType::F16, 1e-6},  {DType::BF16, 1e-4}, {DType::Q8_0, 1e-4}, {DType::Q8_1, 1e-4},
      {DType::Q8_K, 1e-4}, {DType::Q6_K, 1e-3}, {DType::Q5_0, 4e-3}, {DType::Q5_1, 4e-3}, {DType::Q5_K, 4e-3},
      {DType::Q4_0, 1.5e-2}, {DType::Q4_1, 1.5e-2}, {DType::Q4_K, 1.5e-2}, {DType::IQ4_NL, 1.5e-2}, {DType::IQ4_XS, 2.5e-2},
      {DType::MXFP4, 6e-2}, {DType::Q3_K, 5e-2},
      {DType::Q2_K, 0.2}, {DType::IQ2_S, 0.2}, {DType::IQ2_XS, 0.25}, {DType::IQ2_XXS, 0.35},
      {DType::IQ3_S, 0.1}, {DType::IQ3_XXS, 0.2}};
  const auto it = by_type.find(type);
  return it != by_type.end() ? it->second : 1e-4;
}

struct Case {
  DType type;
  int64_t n_in, n_out, n_tokens;
};

void check_case(Isa tier, const Case& c, ThreadPool* pool) {
  SCOPED_TRACE(::testing::Message() << isa_name(tier) << " " << dtype_name(c.type) << " n_in " << c.n_in << " n_out "
                                    << c.n_out << " n_tokens " << c.n_tokens);
  const Weights w = make_weights(c.type, c.n_in, c.n_out, 7);
  const std::vector<float> x = gaussian(static_cast<size_t>(c.n_in * c.n_tokens), 11);
  const std::vector<float> xq = activations_as_seen(c.type, x, c.n_in);

  // Q8_1 activations carry their block sum d*sum(q) rounded to fp16, which Q4_1/Q5_1 dots use
  // for the min term: that rounding (2^-11 relative) is not in the dequantized activations.
  const bool q8_1_sums = quant::format(c.type).vec_dot_type == DType::Q8_1 && c.type != DType::Q8_1;
  const size_t n_y = static_cast<size_t>(c.n_out * c.n_tokens);
  std::vector<double> exact(n_y), plain(n_y), bound(n_y);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int64_t o = 0; o < c.n_out; ++o) {
      double sum = 0.0, abs_sum = 0.0, sum_plain = 0.0;
      for (int64_t i = 0; i < c.n_in; ++i) {
        const double p = static_cast<double>(w.dequantized[o * c.n_in + i]) * xq[t * c.n_in + i];
        sum += p;
        abs_sum += std::fabs(p);
        sum_plain += static_cast<double>(w.original[o * c.n_in + i]) * x[t * c.n_in + i];
      }
      double sums_rounding = 0.0;  // |min| <= max|w| per block; |s| = |sum of the block's xq|
      for (int64_t b = 0; q8_1_sums && b < c.n_in; b += 32) {
        double max_w = 0.0, block_sum = 0.0;
        for (int64_t i = b; i < b + 32; ++i) {
          max_w = std::max(max_w, std::fabs(static_cast<double>(w.dequantized[o * c.n_in + i])));
          block_sum += xq[t * c.n_in + i];
        }
        sums_rounding += max_w * std::fabs(block_sum) * 0x1p-11;
      }
      const size_t k = static_cast<size_t>(t * c.n_out + o);
      exact[k] = sum;
      plain[k] = sum_plain;
      bound[k] = 1e-5 * abs_sum + sums_rounding + 1e-6;
    }
  }

  std::vector<float> y_ref(n_y), y_fast(n_y);
  ref::matmul(c.type, w.data.data(), c.n_in, c.n_out, x.data(), c.n_tokens, y_ref.data());
  matmul(tier, c.type, w.data.data(), c.n_in, c.n_out, x.data(), c.n_tokens, y_fast.data(), pool);
  for (size_t k = 0; k < n_y; ++k) {
    ASSERT_NEAR(y_ref[k], exact[k], bound[k]) << "reference, element " << k;
    ASSERT_NEAR(y_fast[k], exact[k], bound[k]) << "fast, element " << k;
  }
  EXPECT_LE(nmse(y_fast, to_double(y_ref)), 1e-7);
  EXPECT_LE(nmse(y_ref, plain), float_tolerance(c.type));
}

class MatmulFormat : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulFormat, MatchesFloat64AndReference) {
  const DType type = GetParam();
  const int64_t n_in = 512;  // a multiple of every block size (256 for K-quants / Q8_K)
  ThreadPool pool(2);
  for (Isa tier : available_isas()) {
    for (int64_t n_tokens : {1, 3, 17}) check_case(tier, {type, n_in, 37, n_tokens}, &pool);
    check_case(tier, {type, n_in, 19, 70}, nullptr);  // two token tiles, one thread
  }
}

TEST_P(MatmulFormat, IndependentOfThreadCount) {
  const DType type = GetParam();
  const int64_t n_in = 256, n_out = 67;
  const Weights w = make_weights(type, n_in, n_out, 3);
  const std::vector<float> x = gaussian(static_cast<size_t>(n_in * 70), 5);
  for (Isa tier : available_isas()) {
    SCOPED_TRACE(isa_name(tier));
    std::vector<float> single_token;
    for (int64_t n_tokens : {1, 2, 5, 70}) {
      std::vector<float> first;
      for (int threads : {0, 1, 2, 3}) {
        std::vector<float> y(static_cast<size_t>(n_out * n_tokens));
        if (threads == 0) {
          matmul(tier, type, w.data.data(), n_in, n_out, x.data(), n_tokens, y.data(), nullptr);
        } else {
          ThreadPool pool(threads);
          matmul(tier, type, w.data.data(), n_in, n_out, x.data(), n_tokens, y.data(), &pool);
        }
        if (first.empty()) first = y;
        ASSERT_EQ(first, y) << n_tokens << " tokens, " << threads << " threads";
      }
      if (n_tokens == 1) single_token = first;
      // A batch may use another kernel than a single token (tiles): equal up to summation order.
      const std::vector<float> batch_row0(first.begin(), first.begin() + n_out);
      EXPECT_LE(nmse(batch_row0, to_double(single_token)), 1e-12) << n_tokens << " tokens";
    }
  }
}

std::vector<DType> matmul_types() {
  std::vector<DType> out;
  for (DType t : quant::supported_types()) {
    if (row_bytes(t, 256).has_value()) out.push_back(t);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, MatmulFormat, ::testing::ValuesIn(matmul_types()),
                         [](const ::testing::TestParamInfo<DType>& param_info) {
                           return std::string(dtype_name(param_info.param));
                         });

// Every format with a dot product (quantized activations Q8_0 / Q8_1 / Q8_K, or float ones for
// F32 / F16 / BF16): its batched and single-token kernels share their code on every tier
// (kernels/avx2/legacy_unpack.hpp, kquant_unpack.hpp, kquant_low_unpack.hpp, gemm_q8_0.cpp's
// operations, the row-group kernels of kernels/avx512/ and of the float GEMM), so every token of a batch, whatever its place in the token groups and tiles,
// equals that token alone (decode) bit for bit. On the scalar tier both paths are the
// reference vec_dot, which holds trivially. Speculative decoding's verification relies on it.
TEST(Matmul, BatchedTokensEqualTheSameTokenAlone) {
  const int64_t n_out = 37, n_tokens = 71;
  for (DType type : quant::supported_types()) {
    const quant::Format& f = quant::format(type, Isa::scalar);
    if (f.vec_dot_ref == nullptr) continue;
    // An odd number of 32-element blocks exercises the kernels' tail after the block pairs;
    // float rows get an odd width.
    const int64_t block = layout(type).block_size;
    const int64_t n_in = block == 1 ? 301 : block == 32 ? 544 : 512;
    const std::vector<float> x = gaussian(static_cast<size_t>(n_in * n_tokens), 13);
    const Weights w = make_weights(type, n_in, n_out, 17);
    for (Isa tier : available_isas()) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " " << isa_name(tier));
      ThreadPool pool(2);
      std::vector<float> batch(static_cast<size_t>(n_out * n_tokens));
      matmul(tier, type, w.data.data(), n_in, n_out, x.data(), n_tokens, batch.data(), &pool);
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> single(static_cast<size_t>(n_out));
        matmul(tier, type, w.data.data(), n_in, n_out, x.data() + t * n_in, 1, single.data(), nullptr);
        for (int64_t o = 0; o < n_out; ++o) {
          ASSERT_EQ(batch[static_cast<size_t>(t * n_out + o)], single[static_cast<size_t>(o)])
              << "token " << t << " row " << o;
        }
      }
    }
  }
}

TEST(Matmul, SmallBlockFormatsWithOddWidth) {
  ThreadPool pool(3);
  for (Isa tier : available_isas()) {
    for (DType type : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
      for (int64_t n_tokens : {1, 3, 17}) check_case(tier, {type, 96, 13, n_tokens}, &pool);
    }
    check_case(tier, {DType::F32, 7, 5, 3}, &pool);
    check_case(tier, {DType::F32, 100, 9, 6}, &pool);  // SIMD body plus a scalar tail
    check_case(tier, {DType::F16, 100, 9, 6}, &pool);
  }
}

TEST(Matmul, RejectsWidthsOffTheBlockGrid) {
  const std::vector<uint8_t> w(4096);
  const std::vector<float> x(300);
  std::vector<float> y(4);
  EXPECT_THROW(matmul(isa(), DType::Q4_0, w.data(), 48, 2, x.data(), 1, y.data(), nullptr), Error);
  EXPECT_THROW(ref::matmul(DType::Q4_K, w.data(), 128, 2, x.data(), 1, y.data()), Error);
  EXPECT_THROW(matmul(isa(), DType::F32, w.data(), 0, 2, x.data(), 1, y.data(), nullptr), Error);
}

TEST(Matmul, EmptyOutputsAreNoOps) {
  const std::vector<float> w(64), x(64);
  std::vector<float> y(1, 42.0f);
  matmul(isa(), DType::F32, w.data(), 64, 0, x.data(), 1, y.data(), nullptr);
  matmul(isa(), DType::F32, w.data(), 64, 1, x.data(), 0, y.data(), nullptr);
  EXPECT_EQ(y[0], 42.0f);
}

}  // namespace
}  // namespace okapi::kernels
