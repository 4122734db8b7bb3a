// The IQ2 family and the IQ1 quantizers against llama.cpp: a synth llama model of n_embd 256 /
// n_ff 512 (i-quant rows must be multiples of 256), an importance matrix from llama-imatrix, and
// llama-quantize --pure files of IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M. Every tensor of the type in
// the peer's file must come out of okapi's quantizer byte for byte from the F32 rows and the
// imatrix's weights (in_sum2 / counts, as llama-quantize reads them); okapi's logits on the peer's
// IQ2 files must match llama-dump-logits within a 2-bit model's bound.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "core/dtype.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "kernels/scalar/iq1_quantize.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::test {
namespace {

// The model, calibration text and imatrix, made once; removed at exit (the tests share them).
struct PeerFiles {
  std::filesystem::path dir, f32, imatrix;
  PeerFiles() : dir(make_temp_dir("iq2_peer")) {
    synth::Preset p = tiny_preset("smollm2-135m");
    p.n_embd = 256;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 512;
    f32 = write_synth_model(p, "", "F32", 2, dir / "f32.gguf");
    const auto text = write_calibration_text(dir / "calibration.txt", 1500);
    imatrix = dir / "imatrix.gguf";
    peer_imatrix(f32, text, imatrix, 128);
  }
  PeerFiles(const PeerFiles&) = delete;
  PeerFiles& operator=(const PeerFiles&) = delete;
  ~PeerFiles() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const PeerFiles& peer_files() {
  static const PeerFiles files;
  return files;
}

// Per tensor name: llama-quantize's importance weights (in_sum2 / count, one count per expert).
std::map<std::string, std::vector<float>> read_importance(const std::filesystem::path& path) {
  const auto file = gguf::File::open(path);
  std::map<std::string, std::vector<float>> out;
  const std::string suffix = ".in_sum2";
  for (const auto& t : file.tensors()) {
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string name = t.name.substr(0, t.name.size() - suffix.size());
    const auto& counts_t = file.tensor(name + ".counts");
    EXPECT_EQ(t.type, DType::F32);
    std::vector<float> sums(static_cast<size_t>(t.n_elements())), counts(static_cast<size_t>(counts_t.n_elements()));
    std::memcpy(sums.data(), t.data, sums.size() * sizeof(float));
    std::memcpy(counts.data(), counts_t.data, counts.size() * sizeof(float));
    const size_t ne0 = sums.size() / counts.size();
    for (size_t j = 0; j < counts.size(); ++j) {
      for (size_t i = 0; i < ne0; ++i) sums[j * ne0 + i] = counts[j] > 0 ? sums[j * ne0 + i] / counts[j] : 1.0f;
    }
    out[name] = std::move(sums);
  }
  return out;
}

using RowQuantizer = void (*)(const float*, void*, int64_t, const float*);

RowQuantizer quantizer_of(DType type) {
  if (type == DType::IQ1_S) return quant::detail::quantize_iq1_s_row;
  if (type == DType::IQ1_M) return quant::detail::quantize_iq1_m_row;
  return quant::format(type).quantize_weighted;
}

std::filesystem::path peer_file(const std::string& type_name) {
  const auto& f = peer_files();
  const auto out = f.dir / (type_name + ".gguf");
  if (!std::filesystem::exists(out)) {
    peer_quantize(f.f32, out, type_name, f.imatrix,
                  {"--pure", "--token-embedding-type", "q8_0", "--output-tensor-type", "q8_0"});
  }
  return out;
}

// Quantizes every tensor the peer wrote as `type` and counts differing blocks.
void expect_bytes_match_peer(DType type, const std::string& type_name) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const auto peer = gguf::File::open(peer_file(type_name));
  const auto source = gguf::File::open(peer_files().f32);
  const auto importance = read_importance(peer_files().imatrix);
  const RowQuantizer quantize = quantizer_of(type);
  const size_t block_bytes = *row_bytes(type, 256);
  int tensors = 0;
  int64_t blocks = 0, differing = 0;
  for (const auto& t : peer.tensors()) {
    if (t.type != type) continue;
    ++tensors;
    const auto& src = source.tensor(t.name);
    ASSERT_EQ(src.type, DType::F32) << t.name;
    const auto it = importance.find(t.name);
    ASSERT_NE(it, importance.end()) << t.name;
    const int64_t n = t.shape[0];
    ASSERT_EQ(static_cast<int64_t>(it->second.size()), n) << t.name;
    const size_t row = *row_bytes(type, n);
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<uint8_t> q(row);
    for (int64_t r = 0; r < t.n_rows(); ++r) {
      std::memcpy(x.data(), src.data + static_cast<size_t>(r) * static_cast<size_t>(n) * sizeof(float),
                  x.size() * sizeof(float));
      quantize(x.data(), q.data(), n, it->second.data());
      const uint8_t* expect = t.data + static_cast<size_t>(r) * row;
      for (size_t b = 0; b < row / block_bytes; ++b) {
        ++blocks;
        if (std::memcmp(q.data() + b * block_bytes, expect + b * block_bytes, block_bytes) != 0) {
          if (differing == 0) ADD_FAILURE() << t.name << " row " << r << " block " << b << " differs";
          ++differing;
        }
      }
    }
  }
  std::printf("%s: %d tensors, %lld blocks, %lld differ\n", type_name.c_str(), tensors,
              static_cast<long long>(blocks), static_cast<long long>(differing));
  EXPECT_GE(tensors, 14) << "llama-quantize wrote too few " << type_name << " tensors";
  EXPECT_EQ(differing, 0);
}

TEST(Iq2Peer, Iq2XxsQuantizerIsLlamaQuantize) { expect_bytes_match_peer(DType::IQ2_XXS, "IQ2_XXS"); }
TEST(Iq2Peer, Iq2XsQuantizerIsLlamaQuantize) { expect_bytes_match_peer(DType::IQ2_XS, "IQ2_XS"); }
// (llama-quantize's IQ2_S mix is IQ2_XS tensors; its IQ2_M mix is IQ2_S.)
TEST(Iq2Peer, Iq2SQuantizerIsLlamaQuantize) { expect_bytes_match_peer(DType::IQ2_S, "IQ2_M"); }
TEST(Iq2Peer, Iq1SQuantizerIsLlamaQuantize) { expect_bytes_match_peer(DType::IQ1_S, "IQ1_S"); }
TEST(Iq2Peer, Iq1MQuantizerIsLlamaQuantize) { expect_bytes_match_peer(DType::IQ1_M, "IQ1_M"); }

// ggml's dequantize_row_* on the peer's file (llama-quantize --allow-requantize to F32) equals
// okapi's reference dequantize bit for bit.
void expect_dequantize_matches_peer(DType type, const std::string& type_name) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_PEERS();
  const auto quantized = peer_file(type_name);
  const auto f32 = peer_files().dir / (type_name + "-dequantized.gguf");
  if (!std::filesystem::exists(f32)) peer_quantize(quantized, f32, "F32", {}, {"--allow-requantize"});
  const auto q = gguf::File::open(quantized);
  const auto d = gguf::File::open(f32);
  int tensors = 0;
  for (const auto& t : q.tensors()) {
    if (t.type != type) continue;
    ++tensors;
    const auto& ref = d.tensor(t.name);
    ASSERT_EQ(ref.type, DType::F32);
    std::vector<float> mine(static_cast<size_t>(t.n_elements()));
    quant::dequantize_tensor(type, t.bytes(), t.shape, mine.data(), true);
    ASSERT_EQ(std::memcmp(mine.data(), ref.data, mine.size() * sizeof(float)), 0) << t.name;
  }
  EXPECT_GE(tensors, 14);
}

TEST(Iq2Peer, Iq2XxsDequantizeIsGgml) { expect_dequantize_matches_peer(DType::IQ2_XXS, "IQ2_XXS"); }
TEST(Iq2Peer, Iq2XsDequantizeIsGgml) { expect_dequantize_matches_peer(DType::IQ2_XS, "IQ2_XS"); }
TEST(Iq2Peer, Iq2SDequantizeIsGgml) { expect_dequantize_matches_peer(DType::IQ2_S, "IQ2_M"); }

// okapi's dequantize / Q8_K dot on the peer's IQ2 files: logits as llama.cpp's (whose AVX2 dots
// sum in another order), in one batch and token by token. Measured: the IQ2_M file agrees to
// 2.3e-7 at every position; on the IQ2_XXS / IQ2_XS files the first ~130 positions agree to 1e-6,
// then single positions move by up to 1.9% / 1.4%: past 128 keys the attention sums differ in
// their last bits (2e-6 on the dequantized F32 model) and at 2 bits a Q8_K activation that lands
// on the other side of a rounding step moves a random tiny model's logits visibly.
void expect_logits_match_peer(const std::string& type_name, double max_rel) {
  OKAPI_REQUIRE_SHARED();
  OKAPI_REQUIRE_DATA(peer_dump_logits_tool());
  const auto model = peer_file(type_name);
  PeerCheck c;
  c.max_rel = max_rel;
  c.near_tie = 0.12f;  // golden_logits.hpp's kNearTie
  c.min_top1 = 0.95;
  expect_matches_peer(model, peer_test_prompt(), c);
  c.token_by_token = true;
  expect_matches_peer(model, peer_test_prompt(), c);
}

TEST(Iq2Peer, Iq2XxsLogitsMatchLlamaCpp) { expect_logits_match_peer("IQ2_XXS", 0.04); }
TEST(Iq2Peer, Iq2XsLogitsMatchLlamaCpp) { expect_logits_match_peer("IQ2_XS", 0.04); }
TEST(Iq2Peer, Iq2SLogitsMatchLlamaCpp) { expect_logits_match_peer("IQ2_M", 1e-4); }

}  // namespace
}  // namespace okapi::test
