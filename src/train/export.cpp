#include "train/export.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"
#include "format/convert_llama2c.hpp"
#include "format/gguf.hpp"
#include "kernels/format_table.hpp"
#include "runtime/engine.hpp"

namespace okapi::train {
namespace {

constexpr int64_t kTernaryBlock = 256;  // TQ1_0 / TQ2_0 elements per block

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

std::vector<uint8_t> f32_bytes(std::span<const float> values) {
  std::vector<uint8_t> out(values.size_bytes());
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<uint8_t> f16_bytes(std::span<const float> values) {
  std::vector<uint8_t> out(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = fp32_to_fp16(values[i]);
    std::memcpy(out.data() + i * sizeof(h), &h, sizeof(h));
  }
  return out;
}

// ggml ne of a row-major [rows][cols] slot.
std::vector<int64_t> ne_of(const TensorSlot& s) {
  if (s.role == TensorRole::Norm) return {s.cols};
  return {s.cols, s.rows};
}

void write_tokenizer(gguf::Writer& w, const TrainingTokenizer& tok) {
  if (tok.llama2c) {
    llama2c::set_vocabulary(w, *tok.llama2c);
    llama2c::set_special_ids(w);
    return;
  }
  for (const gguf::KeyValue& kv : tok.gguf_keys) w.set(kv.key, kv.value);
}

void write_shape_keys(gguf::Writer& w, const std::string& arch, const ModelConfig& c) {
  w.set(arch + ".context_length", u32(c.seq_len));
  w.set(arch + ".embedding_length", u32(c.dim));
  w.set(arch + ".feed_forward_length", u32(c.hidden_dim));
  w.set(arch + ".block_count", u32(c.n_layers));
  w.set(arch + ".attention.head_count", u32(c.n_heads));
  w.set(arch + ".attention.head_count_kv", u32(c.n_kv_heads));
  w.set(arch + ".rope.dimension_count", u32(c.head_dim()));
  w.set(arch + ".rope.freq_base", c.rope_theta);
  w.set(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  w.set(arch + ".vocab_size", u32(c.vocab_size));
}

bool is_projection(const TensorSlot& s) { return s.role == TensorRole::Matrix; }

}  // namespace

DType default_export_type(const ModelConfig& config) { return config.ternary ? DType::TQ2_0 : DType::F32; }

ExportSummary export_gguf(const ModelConfig& config, std::span<const float> params, const TrainingTokenizer& tok,
                          const std::filesystem::path& path, const ExportOptions& options) {
  const ParameterLayout layout(config);
  if (params.size() != layout.total()) {
    throw_error("export: {} parameters given, the config needs {}", params.size(), layout.total());
  }
  const DType type = options.type;
  if (config.ternary ? (type != DType::TQ2_0 && type != DType::TQ1_0 && type != DType::F32)
                     : (type != DType::F32 && type != DType::F16)) {
    throw_error("export: a {} model exports as {}, not {}", config.ternary ? "ternary" : "float",
                config.ternary ? "tq2_0, tq1_0 or f32" : "f32 or f16", dtype_name(type));
  }
  ExportSummary summary;
  summary.architecture = config.ternary ? "bitnet" : "llama";
  gguf::Writer w;
  w.set("general.architecture", summary.architecture);
  w.set("general.name", options.name.empty() ? config.name : options.name);
  w.set("general.description", fmt::format("trained by okapi train{}", config.ternary ? " (b1.58 ternary QAT)" : ""));
  if (type == DType::F16) w.set("general.file_type", uint32_t{1});  // LLAMA_FTYPE_MOSTLY_F16
  write_shape_keys(w, summary.architecture, config);
  write_tokenizer(w, tok);
  for (const gguf::KeyValue& kv : options.metadata) w.set(kv.key, kv.value);
  for (const LowRankProjection& lr : config.low_rank) {
    if (lr.shares_in_factor()) w.set("okapi.lr_in." + lr.name, lr.in_factor);
  }

  for (const TensorSlot& slot : layout.slots()) {
    const auto values = params.subspan(slot.offset, slot.size());
    const auto ne = ne_of(slot);
    if (slot.role == TensorRole::Norm) {
      w.add_tensor(slot.name, DType::F32, ne, f32_bytes(values));
    } else if (!config.ternary || !is_projection(slot)) {
      // Float model matrices, or a ternary model's embedding / untied output (not ternarized).
      const bool half = type == DType::F16;
      w.add_tensor(slot.name, half ? DType::F16 : DType::F32, ne, half ? f16_bytes(values) : f32_bytes(values));
    } else {
      std::vector<int8_t> codes(slot.size());
      const float scale = ternarize(values, codes);
      std::vector<float> code_values(codes.begin(), codes.end());
      const bool packed = type != DType::F32 && slot.cols % kTernaryBlock == 0;
      const DType stored = packed ? type : DType::F32;
      (packed ? summary.ternary_packed : summary.ternary_fallback) += 1;
      w.add_tensor(slot.name, stored, ne,
                   packed ? quant::quantize_tensor(stored, code_values.data(), ne, /*use_reference=*/true)
                          : f32_bytes(code_values));
      const std::string base = slot.name.substr(0, slot.name.size() - std::string_view(".weight").size());
      w.add_tensor(base + ".scale", DType::F32, {1}, f32_bytes(std::span<const float>(&scale, 1)));
    }
  }
  summary.n_tensors = w.tensor_count();
  summary.file_bytes = w.write(path);  // not file_size: the output may be a device or a FIFO
  return summary;
}

EngineEval evaluate_gguf(const std::filesystem::path& model, const EvalWindows& windows, int threads) {
  runtime::EngineOptions options;  // F32 KV cache: the trainer's attention is float32 throughout
  options.threads = threads;
  const auto engine = runtime::Engine::load(model, options);
  const int64_t n_vocab = engine->hparams().n_vocab;
  const int64_t seq = windows.seq;
  std::vector<int32_t> positions(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<float> logits(static_cast<size_t>(seq * n_vocab));
  double total = 0;
  EngineEval result;
  for (int64_t w = 0; w < windows.count; ++w) {
    const auto offset = static_cast<size_t>(w * seq);
    const std::span<const int32_t> tokens(windows.tokens.data() + offset, static_cast<size_t>(seq));
    auto kv = engine->make_kv(seq, {.batch = seq, .logit_rows = seq});  // every position's logits are kept
    engine->model().forward(engine->ops(), *kv, tokens, positions, model::LogitRows::All, logits.data());
    for (int64_t t = 0; t < seq; ++t) {
      const float* row = logits.data() + t * n_vocab;
      double max = row[0];
      for (int64_t j = 1; j < n_vocab; ++j) max = std::max(max, static_cast<double>(row[j]));
      double sum = 0;
      for (int64_t j = 0; j < n_vocab; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
      const int32_t target = windows.targets[offset + static_cast<size_t>(t)];
      total += std::log(sum) + max - static_cast<double>(row[target]);
      ++result.scored;
    }
  }
  result.mean_loss = total / static_cast<double>(result.scored);
  return result;
}

}  // namespace okapi::train
