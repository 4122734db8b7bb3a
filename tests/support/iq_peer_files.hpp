// Files llama.cpp's tools write for the i-quant tests (IQ3_*, IQ1_*): a tiny llama model whose
// matrices have rows of 256 and 512 values (the i-quants' super-block is 256), an importance
// matrix llama-imatrix computed over calibration text, llama-quantize's outputs in a type (--pure
// so that every matrix is that type), and those dequantized back to F32 by llama-quantize (ggml's
// own dequantizer). Made once per test binary in a temporary directory, each on first use.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "format/gguf.hpp"

namespace okapi::test {

class IqPeerFiles {
 public:
  static IqPeerFiles& get();  // the binary's one set (removed at exit)

  const std::filesystem::path& f32_model();
  const std::filesystem::path& imatrix();
  // llama-quantize --pure f32_model -> `type` (with the imatrix or without): the 14 matrices of the
  // 2 layers; token_embd as Q8_0 (ggml asserts an imatrix for IQ1_S, and the imatrix has none for
  // the embedding).
  const std::filesystem::path& quantized(const std::string& type, bool with_imatrix);
  // llama-quantize f32_model -> Q8_0 with token_embd as `type`, without an imatrix (llama-quantize
  // refuses IQ3_XXS / IQ2_* / IQ1_* matrices without one, but not the token embedding).
  const std::filesystem::path& embedding_only(const std::string& type);
  // llama-quantize --allow-requantize of quantized(type, with_imatrix) back to F32.
  const std::filesystem::path& dequantized(const std::string& type, bool with_imatrix);
  // llama-quantize's importance weights of one tensor (in_sum2 / counts), or empty without an entry.
  std::vector<float> importance(const std::string& tensor);

  ~IqPeerFiles();

 private:
  IqPeerFiles();
  std::filesystem::path dir_, model_, imatrix_;
  std::map<std::string, std::filesystem::path> files_;
};

// The names of the tensors of `file` stored as `type`.
std::vector<std::string> tensors_of_type(const gguf::File& file, DType type);

// okapi's dequantizers (reference and fast) on every `type` tensor of llama-quantize's file
// (peer_type, with the imatrix; at least min_tensors of them) give ggml's floats bit for bit.
void expect_dequantize_matches_ggml(DType type, const std::string& peer_type, size_t min_tensors);
// okapi's logits on that file against llama-dump-logits': within 5% of the largest logit (Q8_K
// activations of slightly different floats round differently) and the same top-1 up to near ties.
void expect_logits_match_peer(const std::string& peer_type);

}  // namespace okapi::test
