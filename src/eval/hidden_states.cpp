#include "eval/hidden_states.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "backend/make_backend.hpp"
#include "compress/calibration.hpp"
#include "compress/spectra.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/kernels.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::eval {

namespace {

constexpr int64_t kMinRows = 64;  // below this neither TwoNN nor a stored / query split means much

// Copies the residual rows the forward pass shows into HiddenStates: rows [skip, n_rows) of the
// current chunk, at the row offset set before each chunk.
class ResidualRecorder : public compress::ObservingOps::Observer {
 public:
  explicit ResidualRecorder(HiddenStates& states) : states_(states), seen_(static_cast<size_t>(states.n_layer + 1)) {}

  void start_chunk(int64_t first_row, int64_t skip) {
    first_row_ = first_row;
    skip_ = skip;
    std::fill(seen_.begin(), seen_.end(), 0);
  }
  // The first layer whose residual this chunk did not show, or -1 when all were shown.
  int64_t missing_layer() const {
    const auto it = std::find(seen_.begin(), seen_.end(), 0);
    return it == seen_.end() ? -1 : static_cast<int64_t>(it - seen_.begin());
  }

  void norm_input(std::string_view weight, const float* x, int64_t n_rows, int64_t n) override {
    int64_t l = -1;
    if (weight == "output_norm.weight") {
      l = states_.n_layer;
    } else {
      const auto [layer, kind] = compress::layer_and_kind(std::string(weight));
      if (kind != "attn_norm" || layer < 0 || layer >= states_.n_layer) return;
      l = layer;
    }
    if (n != states_.n_embd || n_rows <= skip_) return;
    const int64_t rows = std::min(n_rows - skip_, states_.n_tokens - first_row_);
    std::memcpy(states_.layers[static_cast<size_t>(l)].data() + first_row_ * n, x + skip_ * n,
                static_cast<size_t>(rows * n) * sizeof(float));
    seen_[static_cast<size_t>(l)] = 1;
  }

  void matmul_input(std::span<const std::string_view>, const float*, int64_t, int64_t) override {}

 private:
  HiddenStates& states_;
  std::vector<uint8_t> seen_;
  int64_t first_row_ = 0, skip_ = 0;
};

}  // namespace

uint64_t hidden_state_bytes(int64_t tokens, int64_t n_layer, int64_t n_embd) {
  return static_cast<uint64_t>(tokens) * static_cast<uint64_t>(n_layer + 1) * static_cast<uint64_t>(n_embd) * sizeof(float);
}

HiddenStates capture_hidden_states(const model::Model& model, const std::string& text, const HiddenStateOptions& options) {
  const model::HParams& hp = model.hparams();
  if (hp.n_layer < 1) throw_error("analyze: the model has no layers");
  const tokenizer::Tokenizer tokenizer(tokenizer::Vocab::from_gguf(model.file()));
  tokenizer::EncodeOptions encode;
  encode.add_special = true;
  encode.parse_special = false;
  const std::vector<int32_t> tokens = tokenizer.encode(text, encode);

  const int64_t trained = hp.n_ctx_train > 0 ? hp.n_ctx_train : (options.n_ctx > 0 ? options.n_ctx : 512);
  const int64_t n_ctx = std::max<int64_t>(2, std::min(options.n_ctx > 0 ? options.n_ctx : trained, trained));
  // Every chunk of n_ctx tokens gives n_ctx - 1 rows; a last short chunk gives what it holds.
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t available = total / n_ctx * (n_ctx - 1) + std::max<int64_t>(0, total % n_ctx - 1);
  if (available < kMinRows) {
    throw_error("analyze: the text holds {} tokens, {} usable at context {}; at least {} are needed", total, available,
                n_ctx, kMinRows);
  }
  HiddenStates states;
  states.n_tokens = std::min(available, options.max_tokens);
  states.n_layer = hp.n_layer;
  states.n_embd = hp.n_embd;
  states.n_ctx = n_ctx;
  const uint64_t bytes = hidden_state_bytes(states.n_tokens, hp.n_layer, hp.n_embd);
  if (bytes > options.max_bytes) {
    throw_error("analyze: the hidden states of {} tokens ({} states of {} floats each) take {:.1f} GiB, more than the "
                "{:.1f} GiB allowed; ask for fewer tokens",
                states.n_tokens, hp.n_layer + 1, hp.n_embd, static_cast<double>(bytes) / (1 << 30),
                static_cast<double>(options.max_bytes) / (1 << 30));
  }
  states.layers.assign(static_cast<size_t>(hp.n_layer + 1), std::vector<float>(static_cast<size_t>(states.n_tokens * hp.n_embd)));

  ThreadPool pool(options.threads);
  ResidualRecorder recorder(states);
  backend::BackendOptions cpu_options;
  cpu_options.pool = &pool;
  const std::unique_ptr<model::Ops> cpu = backend::make_backend(cpu_options);
  compress::ObservingOps ops(*cpu, recorder);
  ops.prepare(model.weights());
  const kv::KvShape shape{hp.n_layer, hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, n_ctx};
  std::unique_ptr<kv::KvStore> kv = ops.make_kv(shape, model::KvTypes{});
  std::vector<int32_t> positions;
  std::vector<float> logits;
  const tokenizer::TokenId bos = tokenizer.vocab().bos;
  for (int64_t start = 0, row = 0; row < states.n_tokens; start += n_ctx) {
    // Only as much of the last chunk as the rows still wanted (+1 for the skipped first row).
    const int64_t length = std::min({n_ctx, total - start, states.n_tokens - row + 1});
    std::vector<int32_t> chunk(tokens.begin() + start, tokens.begin() + start + length);
    if (tokenizer.vocab().add_bos && bos != tokenizer::kNoToken) chunk[0] = bos;
    positions.resize(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    logits.resize(static_cast<size_t>(length * model.n_vocab()));
    recorder.start_chunk(row, 1);
    // All rows: output_logits norms only the rows whose logits are wanted.
    model.forward(ops, *kv, chunk, positions, model::LogitRows::All, logits.data());
    if (const int64_t missing = recorder.missing_layer(); missing >= 0) {
      throw_error("analyze: the {} forward pass did not show the residual entering {} (no rmsnorm by {})", hp.arch,
                  missing == hp.n_layer ? std::string("the output norm") : fmt::format("layer {}", missing),
                  missing == hp.n_layer ? std::string("output_norm.weight") : fmt::format("blk.{}.attn_norm.weight", missing));
    }
    for (int64_t i = 1; i < length; ++i) {
      states.token_ids.push_back(chunk[static_cast<size_t>(i)]);
      states.positions.push_back(static_cast<int32_t>(i));
    }
    row += length - 1;
    if (row >= states.n_tokens) {
      const float* last = logits.data() + (length - 1) * model.n_vocab();
      states.last_row_logits.assign(last, last + model.n_vocab());
    }
  }
  return states;
}

OutputHead::OutputHead(const model::Model& model) {
  const model::HParams& hp = model.hparams();
  const gguf::File& file = model.file();
  n_embd_ = hp.n_embd;
  n_vocab_ = hp.n_vocab;
  eps_ = hp.norm_eps;
  const gguf::TensorInfo* norm = file.find_tensor("output_norm.weight");
  const gguf::TensorInfo* matrix = file.find_tensor("output.weight");
  if (matrix == nullptr) matrix = file.find_tensor("token_embd.weight");
  if (norm == nullptr || matrix == nullptr || norm->n_elements() != n_embd_ || matrix->n_elements() != n_embd_ * n_vocab_) {
    throw_error("analyze: the model has no output_norm.weight of {} and output (or token_embd) matrix of {} x {}",
                n_embd_, n_vocab_, n_embd_);
  }
  norm_ = compress::dequantized_matrix(*norm, "analyze");
  matrix_ = compress::dequantized_matrix(*matrix, "analyze");
}

void OutputHead::logits(const float* h, float* out) const {
  std::vector<float> normed(static_cast<size_t>(n_embd_));
  kernels::rmsnorm(h, norm_.data(), n_embd_, eps_, normed.data());
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n_vocab_), static_cast<blasint>(n_embd_), 1.0f,
              matrix_.data(), static_cast<blasint>(n_embd_), normed.data(), 1, 0.0f, out, 1);
}

}  // namespace okapi::eval
