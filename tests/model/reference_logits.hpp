// Checks shared by the gemma3 / bitnet / bitnet-25 fidelity tests: okapi's logits against an
// independent float64 forward pass (ik golden ref_logits, every position, no JSON of its own: the
// token ids come from the matching golden JSON), and incremental decode against one batch.
#pragma once
#include "golden_logits.hpp"

namespace okapi::test {

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// okapi with an F32 KV cache, batch and token by token, against <ref_dir>/<prompt>.ref.logits.f32.
inline void check_reference_logits(const std::filesystem::path& model, const std::filesystem::path& golden_dir,
                                   const std::filesystem::path& ref_dir, double bound) {
  LoadedModel m(model);
  double batch_max = 0, incr_max = 0;
  for (const std::string& prompt : golden_prompts()) {
    std::ifstream in(golden_dir / (prompt + ".json"));
    const auto tokens = nlohmann::json::parse(in).at("tokens").get<std::vector<int32_t>>();
    const std::vector<float> ref = read_f32(ref_dir / (prompt + ".ref.logits.f32"));
    batch_max = std::max(batch_max, max_abs_diff(m.logits(tokens, 512), ref));
    incr_max = std::max(incr_max, max_abs_diff(m.logits(tokens, 1), ref));
  }
  std::printf("  %-44s vs float64 reference: batch max|d| %.3g, token-by-token max|d| %.3g\n",
              model.filename().string().c_str(), batch_max, incr_max);
  EXPECT_LE(batch_max, bound) << model;
  EXPECT_LE(incr_max, bound) << model;
}

// The ik golden F32 model `name` (e.g. "golden-gemma3-F32") against its float64 reference.
inline void check_ik_float64_reference(const std::string& name, double bound) {
  check_reference_logits(ik_models() / (name + ".gguf"), ik_logits() / name, ik_ref_logits() / name, bound);
}

// KV-cache validation: F32 KV, decoding token by token (and in uneven batches) equals one batch
// over the whole sequence within `bound` at every position.
inline void check_incremental_matches_batch(const std::filesystem::path& model, const std::vector<int32_t>& tokens,
                                            double bound = 1e-4) {
  LoadedModel m(model);
  const std::vector<float> batch = m.logits(tokens, 512);
  const double one = max_abs_diff(m.logits(tokens, 1), batch);
  const double seven = max_abs_diff(m.logits(tokens, 7), batch);
  std::printf("  %-44s incremental vs batch: 1-token max|d| %.3g, 7-token batches max|d| %.3g\n",
              model.filename().string().c_str(), one, seven);
  EXPECT_LE(one, bound) << model;
  EXPECT_LE(seven, bound) << model;
}

// The token ids of a golden prompt (all golden models of one vocabulary share them).
inline std::vector<int32_t> golden_tokens(const std::filesystem::path& json) {
  std::ifstream in(json);
  return nlohmann::json::parse(in).at("tokens").get<std::vector<int32_t>>();
}

// check_incremental_matches_batch on models/<name>.gguf over the tokens of its A3 golden prompt
// (103 tokens of wikitext).
inline void check_incremental_on_wikitext(const std::filesystem::path& models, const std::filesystem::path& logits,
                                          const std::string& name) {
  check_incremental_matches_batch(models / (name + ".gguf"), golden_tokens(logits / name / "A3_wikitext.json"));
}

}  // namespace okapi::test
