#include "support/iq_peer_files.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "kernels/format_table.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"
#include "support/peer_quantize.hpp"

namespace okapi::test {

IqPeerFiles& IqPeerFiles::get() {
  static IqPeerFiles files;
  return files;
}

IqPeerFiles::IqPeerFiles() : dir_(make_temp_dir("iq-peer")) {}
IqPeerFiles::~IqPeerFiles() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

const std::filesystem::path& IqPeerFiles::f32_model() {
  if (model_.empty()) {
    synth::Preset p = tiny_preset("smollm2-135m");
    p.n_embd = 256;  // rows of 256 (attention, gate, up) and 512 (down): the i-quants' super-block
    p.n_head = 4;
    p.n_head_kv = 2;
    if (p.head_dim > 0) p.head_dim = 64;
    p.n_ff = 512;
    model_ = write_synth_model(p, "", "F32", 2, dir_ / "f32.gguf");
  }
  return model_;
}

const std::filesystem::path& IqPeerFiles::imatrix() {
  if (imatrix_.empty()) {
    const auto text = write_calibration_text(dir_ / "calibration.txt", 1500);
    peer_imatrix(f32_model(), text, dir_ / "imatrix.gguf", 128);
    imatrix_ = dir_ / "imatrix.gguf";
  }
  return imatrix_;
}

const std::filesystem::path& IqPeerFiles::quantized(const std::string& type, bool with_imatrix) {
  const std::string key = type + (with_imatrix ? "-imatrix" : "");
  auto it = files_.find(key);
  if (it == files_.end()) {
    const auto out = dir_ / (key + ".gguf");
    peer_quantize(f32_model(), out, type, with_imatrix ? imatrix() : std::filesystem::path{},
                  {"--pure", "--token-embedding-type", "q8_0"});
    it = files_.emplace(key, out).first;
  }
  return it->second;
}

const std::filesystem::path& IqPeerFiles::embedding_only(const std::string& type) {
  const std::string key = type + "-embedding";
  auto it = files_.find(key);
  if (it == files_.end()) {
    const auto out = dir_ / (key + ".gguf");
    peer_quantize(f32_model(), out, "Q8_0", {}, {"--token-embedding-type", type});
    it = files_.emplace(key, out).first;
  }
  return it->second;
}

const std::filesystem::path& IqPeerFiles::dequantized(const std::string& type, bool with_imatrix) {
  const std::string key = type + (with_imatrix ? "-imatrix" : "") + "-f32";
  auto it = files_.find(key);
  if (it == files_.end()) {
    const auto out = dir_ / (key + ".gguf");
    peer_quantize(quantized(type, with_imatrix), out, "F32", {}, {"--allow-requantize", "--pure"});
    it = files_.emplace(key, out).first;
  }
  return it->second;
}

std::vector<float> IqPeerFiles::importance(const std::string& tensor) {
  const gguf::File file = gguf::File::open(imatrix());
  const gguf::TensorInfo* sums = file.find_tensor(tensor + ".in_sum2");
  const gguf::TensorInfo* counts = file.find_tensor(tensor + ".counts");
  if (sums == nullptr || counts == nullptr) return {};
  if (sums->type != DType::F32 || counts->type != DType::F32 || counts->n_elements() != 1) {
    throw std::runtime_error("unexpected imatrix entry for " + tensor);
  }
  std::vector<float> out(static_cast<size_t>(sums->n_elements()));
  std::memcpy(out.data(), sums->data, out.size() * sizeof(float));
  float count;
  std::memcpy(&count, counts->data, sizeof(count));
  for (float& v : out) v = count > 0.0f ? v / count : 1.0f;  // llama-quantize's load_imatrix
  return out;
}

std::vector<std::string> tensors_of_type(const gguf::File& file, DType type) {
  std::vector<std::string> out;
  for (const auto& t : file.tensors()) {
    if (t.type == type) out.push_back(t.name);
  }
  return out;
}

void expect_dequantize_matches_ggml(DType type, const std::string& peer_type, size_t min_tensors) {
  IqPeerFiles& files = IqPeerFiles::get();
  const gguf::File quantized = gguf::File::open(files.quantized(peer_type, true));
  const gguf::File dequantized = gguf::File::open(files.dequantized(peer_type, true));
  const auto names = tensors_of_type(quantized, type);
  ASSERT_GE(names.size(), min_tensors) << "llama-quantize left too few tensors as " << dtype_name(type);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const gguf::TensorInfo& q = quantized.tensor(name);
    const gguf::TensorInfo& ref = dequantized.tensor(name);
    ASSERT_EQ(ref.type, DType::F32);
    std::vector<float> mine(static_cast<size_t>(q.n_elements()));
    quant::dequantize_tensor(type, q.bytes(), q.shape, mine.data(), true);
    ASSERT_EQ(std::memcmp(mine.data(), ref.data, mine.size() * sizeof(float)), 0);
    quant::dequantize_tensor(type, q.bytes(), q.shape, mine.data(), false);
    ASSERT_EQ(std::memcmp(mine.data(), ref.data, mine.size() * sizeof(float)), 0) << "the fast dequantizer";
  }
}

void expect_logits_match_peer(const std::string& peer_type) {
  PeerCheck check;
  check.max_rel = 0.05;
  check.near_tie = 0.12f;
  check.min_top1 = 0.95;
  expect_matches_peer(IqPeerFiles::get().quantized(peer_type, true), peer_test_prompt(), check);
}

}  // namespace okapi::test
