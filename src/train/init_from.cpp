#include "train/init_from.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "model/hparams.hpp"

namespace okapi::train {
namespace {

// An error about the model a run starts from, tagged with its setting.
template <typename... Args>
[[noreturn]] void source_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), Setting::InitFrom);
}

// ggml ne of a layout slot.
std::vector<int64_t> expected_shape(const TensorSlot& s) {
  if (s.role == TensorRole::Norm) return {s.cols};
  return {s.cols, s.rows};
}

// The projection's storage in the file: dense (nullopt) or its low-rank factors.
std::optional<LowRankProjection> low_rank_in_file(const gguf::File& file, const std::string& name) {
  if (file.find_tensor(name + ".weight") != nullptr) return std::nullopt;
  LowRankProjection lr;
  lr.name = name;
  lr.in_factor = name + ".lr_in.weight";
  if (file.find_tensor(lr.in_factor) == nullptr) {
    const gguf::Value* shared = file.find("okapi.lr_in." + name);
    if (shared == nullptr) {
      source_error("source model '{}': tensor '{}.weight' is missing (and there are no low-rank factors '{}' / "
                  "'{}.lr_out.weight')",
                  file.name(), name, lr.in_factor, name);
    }
    if (!shared->is_string()) source_error("source model '{}': metadata key 'okapi.lr_in.{}' is not a string", file.name(), name);
    lr.in_factor = shared->as_string();
  }
  const gguf::TensorInfo* in = file.find_tensor(lr.in_factor);
  if (in == nullptr) {
    source_error("source model '{}': {}'s in-factor '{}' (from okapi.lr_in.{}) is not a tensor of the file", file.name(),
                name, lr.in_factor, name);
  }
  if (in->shape.size() != 2) {
    source_error("source model '{}': low-rank in-factor '{}' has {} dimensions, not 2 ([n_in, rank])", file.name(),
                lr.in_factor, in->shape.size());
  }
  lr.rank = in->shape[1];
  return lr;
}

}  // namespace

SourceModel load_source_model(const std::filesystem::path& path, int64_t context_length) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) source_error("source model '{}' is not a readable file", path.string());
  const gguf::File file = gguf::File::open(path);
  const std::string where = fmt::format("source model '{}'", path.string());
  const std::string arch = file.architecture();
  if (arch != "llama") {
    source_error("{}: architecture '{}' is not one the trainer can fine-tune (it represents the llama architecture: "
                "pre-norm blocks, SwiGLU, no biases, float weights)",
                where, arch.empty() ? "(none)" : arch);
  }
  model::HParams hp;
  try {
    hp = model::HParams::from_gguf(file);
  } catch (const Error& e) {
    source_error("{}: {}", where, e.what());
  }
  const int64_t head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  if (hp.head_dim_k != head_dim || hp.head_dim_v != head_dim) {
    source_error("{}: head sizes k {} / v {} differ from embedding_length / head_count = {}; the trainer's attention "
                "has one head size",
                where, hp.head_dim_k, hp.head_dim_v, head_dim);
  }
  if (hp.n_rot != head_dim) {
    source_error("{}: RoPE rotates {} of {} head dimensions; the trainer rotates all of them", where, hp.n_rot, head_dim);
  }
  if (hp.rope_scaling_type != "none" || hp.rope_freq_scale != 1.0f) {
    source_error("{}: RoPE scaling '{}' (factor {}) is not represented by the trainer", where, hp.rope_scaling_type,
                hp.rope_scaling_factor);
  }

  ModelConfig c;
  const gguf::Value* name = file.find("general.name");
  c.name = name != nullptr && name->is_string() && !name->as_string().empty() ? name->as_string()
                                                                                : path.stem().string();
  c.dim = hp.n_embd;
  c.n_layers = hp.n_layer;
  c.n_heads = hp.n_head;
  c.n_kv_heads = hp.n_head_kv;
  c.vocab_size = hp.n_vocab;
  c.norm_eps = hp.norm_eps;
  c.rope_theta = hp.rope_freq_base;
  c.tied_embeddings = file.find_tensor("output.weight") == nullptr;
  c.seq_len = context_length > 0 ? context_length : hp.n_ctx_train;
  if (c.seq_len <= 0) {
    throw_error_for(Setting::TrainContext, "{}: the file records no context length (llama.context_length)", where);
  }
  c.hidden_dim = hp.n_ff;
  if (c.hidden_dim == 0) {  // the width of the first gate, dense or factored
    for (const char* t : {"blk.0.ffn_gate.weight", "blk.0.ffn_gate.lr_out.weight"}) {
      const gguf::TensorInfo* gate = file.find_tensor(t);
      if (gate != nullptr && gate->shape.size() == 2) c.hidden_dim = gate->shape[1];
    }
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const std::string_view kind : projection_kinds()) {
      if (auto lr = low_rank_in_file(file, fmt::format("blk.{}.{}", l, kind))) c.low_rank.push_back(std::move(*lr));
    }
  }
  SourceModel source;
  try {
    c.validate();
  } catch (const Error& e) {
    source_error("{}: {}", where, e.what());
  }
  const ParameterLayout layout(c);
  source.params.resize(layout.total());
  std::set<std::string_view> used;
  for (const TensorSlot& slot : layout.slots()) {
    const gguf::TensorInfo* t = file.find_tensor(slot.name);
    if (t == nullptr) source_error("{}: tensor '{}' is missing", where, slot.name);
    const std::vector<int64_t> shape = expected_shape(slot);
    if (t->shape != shape) {
      source_error("{}: tensor '{}' has shape [{}], the model's hyper-parameters need [{}]", where, slot.name,
                  fmt::join(t->shape, ", "), fmt::join(shape, ", "));
    }
    if (quant::find_format(t->type) == nullptr) {
      source_error("{}: tensor '{}' is stored as {}, which okapi cannot dequantize", where, slot.name, dtype_name(t->type));
    }
    quant::dequantize_tensor(t->type, t->bytes(), t->shape, source.params.data() + slot.offset);
    used.insert(t->name);
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (!used.contains(t.name)) {
      source_error("{}: tensor '{}' has no place in the trainer's llama model (it holds no biases, q/k norms, RoPE "
                  "frequency factors or extra tensors)",
                  where, t.name);
    }
  }
  for (const gguf::KeyValue& kv : file.metadata()) {
    if (kv.key.starts_with("okapi.compress.")) source.export_metadata.push_back(kv);
  }
  source.config = std::move(c);
  return source;
}

}  // namespace okapi::train
