#include "support/tiny_models.hpp"

#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "model/model.hpp"
#include "synth/presets.hpp"
#include "synth/synth.hpp"
#include "synth/vocab.hpp"

namespace okapi::test {

namespace {

// `width` is n_embd; heads, head sizes and the FFN scale with it.
synth::Preset tiny_preset(const std::string& arch, int64_t width) {
  synth::Preset p{.name = "tiny", .archs = {}, .n_embd = width, .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                  .n_ff = 2 * width, .n_vocab = synth::kMinVocab, .context_length = 128};
  if (arch == "qwen2") p.qkv_bias = true;
  if (arch == "qwen3" || arch == "gemma3") {
    p.qk_norm = true;
    p.head_dim = width / 2;  // != n_embd / n_head: key_length must be read, not derived
  }
  if (arch == "gemma3") {
    p.post_norms = true;
    p.sliding_window = 16;
    p.tied = true;
  }
  // Mixture of experts: 8 experts, top-k below the count, qwen2moe with its gated shared expert.
  if (arch == "qwen3moe" || arch == "qwen2moe") {
    p.n_expert = 8;
    p.n_expert_used = arch == "qwen3moe" ? 4 : 2;
    p.n_ff_exp = width;
  }
  if (arch == "qwen3moe") {
    p.qk_norm = true;
    p.head_dim = width / 2;
  }
  if (arch == "qwen2moe") {
    p.qkv_bias = true;
    p.n_ff_shexp = 2 * width;
  }
  if (arch == "gemma2") {  // windows shorter than a test prompt, caps that bite
    p.post_norms = true;
    p.sliding_window = 8;
    p.attn_softcap = 1.5f;
    p.final_softcap = 2.0f;
    p.tied = true;
  }
  if (arch == "bitnet" || arch == "bitnet-25") {
    p.sub_norms = true;
    p.ternary = true;
    p.tied = true;
  }
  if (arch == "gpt-oss") {  // 2 of 4 experts, even layers windowed, YaRN
    p.gpt_oss = true;
    p.sliding_window = 16;
    p.n_expert = 4;
    p.n_expert_used = 2;
    p.n_ff_exp = p.n_ff;
    p.yarn_factor = 32.0f;
    p.yarn_orig_ctx = 4096;
  }
  // phi3, granite, smollm3 (smollm3's rope-less layer is the fourth: 2 blocks have none)
  if (arch == "phi3") {
    p.fused_qkv_up = true;
    p.rope_dims = p.key_length() / 2;  // partial rotary
    p.rope_orig_context = 64;          // LongRoPE factors
  }
  if (arch == "granite") {
    p.embedding_scale = 12.0f;
    p.residual_scale = 0.22f;
    p.attention_scale = 0.125f;
    p.logit_scale = 8.0f;
  }
  return p;
}

std::vector<uint8_t> model_of_width(const std::string& arch, int64_t width) {
  const synth::Preset preset = tiny_preset(arch, width);
  gguf::Writer w;
  synth::set_metadata(w, preset, arch, preset.n_layer, /*file_type=*/0, /*seed=*/1);
  for (const synth::TensorPlan& t : synth::plan_tensors(preset, preset.n_layer)) {
    int64_t n = 1;
    for (const int64_t d : t.shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    synth::fill_values(t, 1, values.data(), 0, n);
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    w.add_tensor(t.name, DType::F32, t.shape, std::move(bytes));
  }
  return w.to_bytes();
}

// A fuzzer seed: the model without its tokenizer and with an 8-row embedding (and output), so that
// most mutations land in the metadata and tensor table rather than in weights.
std::vector<uint8_t> compact(const gguf::File& file) {
  constexpr int64_t kRows = 8;
  gguf::Writer w;
  for (const gguf::KeyValue& kv : file.metadata())
    if (kv.key.rfind("tokenizer.", 0) != 0) w.set(kv.key, kv.value);
  for (const auto& t : file.tensors()) {
    if (t.name == "token_embd.weight" || t.name == "output.weight") {
      const auto row_bytes = static_cast<size_t>(t.shape[0]) * sizeof(float);
      w.add_tensor_view(t.name, t.type, {t.shape[0], kRows}, t.bytes().subspan(0, row_bytes * kRows));
    } else {
      w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
    }
  }
  return w.to_bytes();
}

}  // namespace

std::vector<std::string> tiny_model_archs() {
  return {"llama", "qwen2", "qwen3", "gemma3", "bitnet", "bitnet-25", "qwen3moe", "qwen2moe", "gpt-oss",
          // phi3, granite, smollm3
          "phi3", "granite", "smollm3",
          // gemma2
          "gemma2"};
}

std::vector<uint8_t> tiny_model(const std::string& arch) { return model_of_width(arch, 32); }

std::vector<uint8_t> with_metadata(const gguf::File& src, const std::string& key, const gguf::Value& value) {
  gguf::Writer w;
  w.copy_metadata(src);
  w.set(key, value);
  for (const auto& t : src.tensors()) w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  return w.to_bytes();
}

std::vector<uint8_t> without_metadata(const gguf::File& src, const std::string& key) {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : src.metadata())
    if (kv.key != key) w.set(kv.key, kv.value);
  for (const auto& t : src.tensors()) w.add_tensor_view(t.name, t.type, t.shape, t.bytes());
  return w.to_bytes();
}

std::string load_error(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    (void)model::Model::load(gguf::File::parse(bytes, name));
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

std::vector<HParamMutation> hparam_mutations(const gguf::File& file) {
  const std::string a = file.architecture() + ".";
  const auto int_or = [&](const std::string& key, int64_t fallback) {
    const gguf::Value* v = file.find(key);
    return v ? v->as_int() : fallback;
  };
  const int64_t n_embd = int_or(a + "embedding_length", 0), n_head = int_or(a + "attention.head_count", 1);
  const int64_t head_dim = n_embd / n_head;
  struct Field {
    std::string name;
    int64_t value;        // the valid value (derived when the key is absent)
    bool metadata_only;   // no tensor pins it: only negative (and string) values are invalid
  };
  const std::vector<Field> fields = {
      {"embedding_length", n_embd, false},
      {"block_count", int_or(a + "block_count", 0), false},
      {"attention.head_count", n_head, false},
      {"attention.head_count_kv", int_or(a + "attention.head_count_kv", n_head), false},
      {"attention.key_length", int_or(a + "attention.key_length", head_dim), false},
      {"attention.value_length", int_or(a + "attention.value_length", head_dim), false},
      // A mixture of experts with expert_feed_forward_length uses feed_forward_length for nothing.
      {"feed_forward_length", int_or(a + "feed_forward_length", 0), file.find(a + "expert_feed_forward_length") != nullptr},
      {"rope.dimension_count", int_or(a + "rope.dimension_count", head_dim), false},
      {"context_length", int_or(a + "context_length", 0), true},
  };
  std::vector<HParamMutation> out;
  const auto add = [&](const std::string& key, gguf::Value value, bool loads) {
    std::string label = key + " = " + value.to_display();
    out.push_back({key, std::move(value), std::move(label), loads});
  };
  for (const Field& f : fields) {
    const std::string key = a + f.name;
    // feed_forward_length 0 means "absent": the width is read from the FFN tensors.
    const bool zero_loads = f.metadata_only || f.name == "feed_forward_length";
    add(key, uint64_t{1} << 40, f.metadata_only);
    add(key, std::numeric_limits<uint32_t>::max(), f.metadata_only);
    add(key, uint32_t{0}, zero_loads);
    add(key, int32_t{-1}, false);
    add(key, static_cast<uint32_t>(2 * f.value), f.metadata_only);
    add(key, static_cast<uint32_t>(f.value + 1), f.metadata_only);
    if (f.value > 1) add(key, static_cast<uint32_t>(f.value - 1), f.metadata_only);
    add(key, "many", false);
  }
  if (const int64_t n_expert = int_or(a + "expert_count", 0); n_expert == 0) {
    add(a + "expert_count", uint32_t{8}, false);  // a dense model has no expert tensors
  } else {  // mixture of experts: the router pins expert_count; 1 <= expert_used_count <= expert_count
    const std::string count = a + "expert_count", used = a + "expert_used_count";
    add(count, uint64_t{1} << 40, false);
    add(count, uint32_t{0}, false);
    add(count, static_cast<uint32_t>(2 * n_expert), false);
    add(count, int32_t{-1}, false);
    add(used, uint32_t{0}, false);
    add(used, static_cast<uint32_t>(n_expert + 1), false);
    add(used, std::numeric_limits<uint32_t>::max(), false);
    add(used, uint32_t{1}, true);
    add(used, static_cast<uint32_t>(n_expert), true);
    // The widths the expert tensors pin (0 is "absent": a fallback width, not this key's error).
    for (const std::string name : {"expert_feed_forward_length", "expert_shared_feed_forward_length"}) {
      const int64_t width = int_or(a + name, 0);
      if (width == 0) continue;
      add(a + name, uint64_t{1} << 40, false);
      add(a + name, static_cast<uint32_t>(2 * width), false);
      add(a + name, static_cast<uint32_t>(width + 1), false);
      add(a + name, int32_t{-1}, false);
      add(a + name, "many", false);
    }
  }
  return out;
}

void write_hparams_corpus(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw_error("cannot write {}", (dir / name).string());
  };
  for (const std::string& arch : tiny_model_archs()) {
    const std::vector<uint8_t> full = model_of_width(arch, 8);
    const std::vector<uint8_t> valid = compact(gguf::File::parse(full, arch));
    write(arch + ".gguf", valid);
    const gguf::File file = gguf::File::parse(valid, arch);
    size_t n = 0;
    for (const HParamMutation& m : hparam_mutations(file))
      write(arch + "-" + std::to_string(n++) + ".gguf", with_metadata(file, m.key, m.value));
  }
}

}  // namespace okapi::test
