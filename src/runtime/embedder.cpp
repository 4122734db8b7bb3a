#include "runtime/embedder.hpp"

#include <algorithm>
#include <cmath>
#include <new>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "kv/cache_type.hpp"

namespace okapi::runtime {

void normalize_embedding(std::span<float> values, int mode) {
  // common_embd_normalize, operation for operation: float products summed in a double.
  double sum = 0.0;
  switch (mode) {
    case kNormalizeNone:
      sum = 1.0;
      break;
    case 0:  // max absolute value, scaled to the int16 range
      for (const float v : values)
        if (sum < std::abs(v)) sum = std::abs(v);
      sum /= 32760.0;
      break;
    case kNormalizeEuclidean:
      for (const float v : values) sum += v * v;
      sum = std::sqrt(sum);
      break;
    default:  // p-norm
      if (mode < kNormalizeNone) throw_error("embedding normalization {} is not one of -1, 0, 1, 2 or p > 2", mode);
      for (const float v : values) sum += std::pow(std::abs(v), mode);
      sum = std::pow(sum, 1.0 / mode);
      break;
  }
  const float norm = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
  for (float& v : values) v *= norm;
}

float cosine_similarity(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) throw_error("cosine similarity of vectors of {} and {} values", a.size(), b.size());
  double sum = 0.0, sum_a = 0.0, sum_b = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    sum += a[i] * b[i];
    sum_a += a[i] * a[i];
    sum_b += b[i] * b[i];
  }
  if (sum_a == 0.0 || sum_b == 0.0) return sum_a == 0.0 && sum_b == 0.0 ? 1.0f : 0.0f;
  return static_cast<float>(sum / (std::sqrt(sum_a) * std::sqrt(sum_b)));
}

namespace {

// Stores are allocated in steps of this many cells, so that inputs of similar lengths reuse them.
constexpr int64_t kStoreStep = 64;

int64_t round_up(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// Whether pooling reads the hidden row of token t of an input of n tokens: every row for mean and
// none, the first for cls, the last for last; rank the first and the last (a classifier head reads
// the first, a qwen3 reranker the last; Model::pool picks from the two rows it is given).
bool wants_row(model::Pooling pooling, int64_t t, int64_t n) {
  switch (pooling) {
    case model::Pooling::Cls: return t == 0;
    case model::Pooling::Last: return t == n - 1;
    case model::Pooling::Rank: return t == 0 || t == n - 1;
    case model::Pooling::None:
    case model::Pooling::Mean: break;
  }
  return true;
}

std::vector<std::string_view> split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t end = text.find(separator); end != std::string_view::npos; end = text.find(separator, start)) {
    parts.push_back(text.substr(start, end - start));
    start = end + separator.size();
  }
  parts.push_back(text.substr(start));
  return parts;
}

const std::string* string_key(const gguf::File& file, std::string_view key) {
  const gguf::Value* value = file.find(key);
  return value != nullptr && value->is_string() ? &value->as_string() : nullptr;
}

// llama.cpp's llama_vocab::get_add_sep: true for WordPiece and the roberta-style BPE families,
// unless tokenizer.ggml.add_sep_token says otherwise.
bool vocab_adds_sep(const gguf::File& file, const tokenizer::Vocab& vocab) {
  bool add_sep = vocab.kind == tokenizer::ModelKind::WPM ||
                 (vocab.kind == tokenizer::ModelKind::BPE &&
                  (vocab.pre == "jina-v1-en" || vocab.pre == "jina-v2-code" || vocab.pre == "roberta-bpe"));
  if (const gguf::Value* value = file.find("tokenizer.ggml.add_sep_token")) add_sep = value->as_bool();
  return add_sep;
}

}  // namespace

// A forward pass's share of one input: its tokens [begin, begin + count). An input runs whole in
// one pass unless it is a causal model's input longer than a pass.
struct Embedder::Piece {
  size_t input = 0;
  int64_t begin = 0;
  int64_t count = 0;
};

// What passes reuse: the KV stores (store j serves a pass's j-th longest input; each holds at
// least that input's tokens) and the batch's buffers.
struct Embedder::Stores {
  std::vector<std::unique_ptr<kv::KvStore>> stores;
  std::vector<kv::KvStore*> token_stores;
  std::vector<int32_t> tokens, positions;
  std::vector<uint8_t> want_hidden;
  std::vector<float> hidden;
  std::vector<float> long_rows;  // a long (split) input's wanted rows so far
};

Embedder::Embedder(Engine& engine, const EmbedderOptions& options)
    : engine_(engine), options_(options), stores_(std::make_unique<Stores>()) {
  const model::Model& model = engine_.model();
  const model::HParams& hp = model.hparams();
  pooling_ = options.pooling.value_or(model.file_pooling().value_or(options.default_pooling));
  if (options.batch_tokens < 1)
    throw_error_for(Setting::BatchSize, "the batch must hold at least 1 token, got {}", options.batch_tokens);
  if (options.max_inputs_per_pass < 1)
    throw_error("a forward pass must take at least 1 input, got {}", options.max_inputs_per_pass);
  if (options.max_input_tokens < 0)
    throw_error_for(Setting::ContextLength, "the longest input must be 0 (the model's trained context) or a positive "
                    "number of tokens, got {}", options.max_input_tokens);
  if (pooling_ == model::Pooling::Rank && model.rank_outputs() <= 0)
    throw_error("rank pooling needs a classifier head (cls.weight / cls.output.weight, as cross-encoder rerankers "
                "have); this {} model has none",
                hp.arch);
  max_input_tokens_ = options.max_input_tokens > 0 ? options.max_input_tokens
                                                   : resolve_context(kContextNotGiven, hp);
  if (options.max_input_tokens > 0) warn_beyond_trained_context(max_input_tokens_, hp);
  // A pass's stores hold about batch_tokens cells (a causal model's long input: all of its own),
  // and its scratch batch_tokens rows.
  EngineOptions kv_options = engine_.options();
  if (!model.causal_attention()) kv_options.cache = {kv::CacheType::f32(), kv::CacheType::f32()};
  const int64_t cells = model.causal_attention() ? std::max(options.batch_tokens, max_input_tokens_)
                                                 : options.batch_tokens;
  check_memory(model, kv_options, engine_.threads(), cells, Workload{.batch = options.batch_tokens, .logit_rows = 1},
               /*weights_loaded=*/true);
}

Embedder::~Embedder() = default;

int64_t Embedder::width() const { return engine_.model().pooled_width(pooling_); }

std::vector<int32_t> Embedder::tokenize_with(std::string_view text, bool add_special, bool parse_special) const {
  tokenizer::EncodeOptions options;
  options.add_special = add_special;
  options.parse_special = parse_special;
  return engine_.tokenizer().encode(text, options);
}

std::vector<int32_t> Embedder::tokenize(std::string_view text) const {
  return tokenize_with(text, /*add_special=*/true, /*parse_special=*/true);
}

std::vector<int32_t> Embedder::tokenize_rerank(std::string_view query, std::string_view document) const {
  // llama-server's format_prompt_rerank.
  if (const std::string* rerank = string_key(engine_.model().file(), "tokenizer.chat_template.rerank")) {
    std::string prompt = *rerank;
    replace_all(prompt, "{query}", query);
    replace_all(prompt, "{document}", document);
    return tokenize_with(prompt, /*add_special=*/false, /*parse_special=*/true);
  }
  const tokenizer::Vocab& vocab = engine_.tokenizer().vocab();
  const std::vector<int32_t> query_tokens = tokenize_with(query, false, false);
  const std::vector<int32_t> document_tokens = tokenize_with(document, false, false);
  const int32_t eos = vocab.eos != tokenizer::kNoToken ? vocab.eos : vocab.sep;
  const bool add_sep = vocab_adds_sep(engine_.model().file(), vocab);
  std::vector<int32_t> out;
  const auto push = [&](int32_t id, const char* what) {
    if (id == tokenizer::kNoToken) throw_error("rerank: the vocabulary has no {} token to add", what);
    out.push_back(id);
  };
  if (vocab.add_bos) push(vocab.bos, "BOS");
  out.insert(out.end(), query_tokens.begin(), query_tokens.end());
  if (vocab.add_eos) push(eos, "EOS");
  if (add_sep) push(vocab.sep, "SEP");
  out.insert(out.end(), document_tokens.begin(), document_tokens.end());
  if (vocab.add_eos) push(eos, "EOS");
  return out;
}

std::vector<int32_t> Embedder::tokenize_rank_line(std::string_view line, std::string_view separator) const {
  if (separator.empty() || line.find(separator) == std::string_view::npos) return tokenize(line);
  const std::vector<std::string_view> parts = split(line, separator);
  // llama-embedding's rank input (examples/embedding/embedding.cpp).
  if (const std::string* rerank = string_key(engine_.model().file(), "tokenizer.chat_template.rerank")) {
    std::string prompt = *rerank;
    replace_all(prompt, "{query}", parts[0]);
    replace_all(prompt, "{document}", parts[1]);
    return tokenize(prompt);
  }
  const tokenizer::Tokenizer& tok = engine_.tokenizer();
  const tokenizer::Vocab& vocab = tok.vocab();
  const auto text_of = [&](int32_t id) {
    return id == tokenizer::kNoToken ? std::string() : vocab.tokens[static_cast<size_t>(id)];
  };
  const std::string between = (vocab.add_eos ? text_of(vocab.eos) : std::string()) +
                              (vocab_adds_sep(engine_.model().file(), vocab) ? text_of(vocab.sep) : std::string());
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    joined += parts[i];
    if (i + 1 < parts.size()) joined += between;
  }
  return tokenize(joined);
}

bool Embedder::ends_with_sep_or_eos(std::span<const int32_t> tokens) const {
  const tokenizer::Vocab& vocab = engine_.tokenizer().vocab();
  return !tokens.empty() && (tokens.back() == vocab.sep || tokens.back() == vocab.eos) &&
         tokens.back() != tokenizer::kNoToken;
}

void Embedder::check_input(std::span<const int32_t> tokens, size_t index) const {
  const model::Model& model = engine_.model();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw_error("input {} is empty (no tokens)", index);
  if (n > max_input_tokens_) {
    const int64_t trained = model.hparams().n_ctx_train;
    throw_error_for(Setting::ContextLength, "input {} has {} tokens, more than the {} an input may have{}", index, n,
                    max_input_tokens_,
                    options_.max_input_tokens > 0 || trained <= 0
                        ? std::string()
                        : fmt::format(" (the model's trained context of {}, at most {})", trained, kDefaultContextCap));
  }
  if (!model.causal_attention() && n > options_.batch_tokens)
    throw_error_for(Setting::BatchSize,
                    "input {} has {} tokens but a forward pass holds only {}: input is too large to process "
                    "(a {} model reads each input whole, in one pass); increase the batch size",
                    index, n, options_.batch_tokens, model.hparams().arch);
  const int64_t n_vocab = model.n_vocab();
  for (size_t t = 0; t < tokens.size(); ++t)
    if (tokens[t] < 0 || tokens[t] >= n_vocab)
      throw_error("input {}: token id {} at position {} is out of range (the vocabulary has {} tokens)", index,
                  tokens[t], t, n_vocab);
}

std::vector<EmbeddingOutput> Embedder::embed(std::span<const std::vector<int32_t>> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) check_input(inputs[i], i);
  std::vector<EmbeddingOutput> outputs(inputs.size());
  const int64_t batch = options_.batch_tokens;
  std::vector<Piece> pass;
  int64_t pass_tokens = 0;
  const auto flush = [&] {
    if (pass.empty()) return;
    run_pass(pass, inputs, outputs);
    pass.clear();
    pass_tokens = 0;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n > batch) {  // a causal model's long input: alone, in passes of `batch` tokens
      flush();
      for (int64_t begin = 0; begin < n; begin += batch) {
        const Piece piece{i, begin, std::min(batch, n - begin)};
        run_pass(std::span(&piece, 1), inputs, outputs);
      }
      continue;
    }
    if (pass_tokens + n > batch || static_cast<int64_t>(pass.size()) >= options_.max_inputs_per_pass) flush();
    pass.push_back({i, 0, n});
    pass_tokens += n;
  }
  flush();
  return outputs;
}

void Embedder::run_pass(std::span<const Piece> pieces, std::span<const std::vector<int32_t>> inputs,
                        std::vector<EmbeddingOutput>& outputs) {
  const model::Model& model = engine_.model();
  model::Ops& ops = engine_.ops();
  Stores& s = *stores_;
  const auto length = [&](const Piece& p) { return static_cast<int64_t>(inputs[p.input].size()); };

  // Stores: the j-th longest input gets store j, grown (replaced) when it is too small for it.
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return length(pieces[a]) > length(pieces[b]); });
  if (s.stores.size() < pieces.size()) s.stores.resize(pieces.size());
  std::vector<kv::KvStore*> piece_store(pieces.size());
  for (size_t j = 0; j < order.size(); ++j) {
    const Piece& piece = pieces[order[j]];
    const int64_t need = length(piece);
    std::unique_ptr<kv::KvStore>& store = s.stores[j];
    if (!store || store->n_ctx() < need) {
      store.reset();  // its memory first
      const int64_t cells = round_up(need, kStoreStep);
      // A non-causal model's K and V live only for its pass: f32, llama.cpp's values with -fa off
      // (its flash attention rounds them to f16 and sums V in f16, within ~1e-4 of these).
      model::KvTypes types{engine_.options().cache, engine_.options().exact_attention};
      if (!model.causal_attention()) types.cache = {kv::CacheType::f32(), kv::CacheType::f32()};
      try {
        store = ops.make_kv(model.kv_shape(cells, std::min(cells, options_.batch_tokens)), types);
      } catch (const std::bad_alloc&) {
        throw_error("out of memory allocating a KV store of {} cells for input {}", cells, piece.input);
      }
    }
    if (piece.begin == 0) store->truncate(0);
    piece_store[order[j]] = store.get();
  }

  // The batch, in input order; hidden rows only where pooling reads them.
  s.tokens.clear(), s.positions.clear(), s.want_hidden.clear(), s.token_stores.clear();
  int64_t n_wanted = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& piece = pieces[k];
    const std::vector<int32_t>& input = inputs[piece.input];
    const int64_t n = length(piece);
    for (int64_t t = piece.begin; t < piece.begin + piece.count; ++t) {
      s.tokens.push_back(input[static_cast<size_t>(t)]);
      s.positions.push_back(static_cast<int32_t>(t));
      s.token_stores.push_back(piece_store[k]);
      const bool want = wants_row(pooling_, t, n);
      s.want_hidden.push_back(want ? 1 : 0);
      n_wanted += want ? 1 : 0;
    }
  }
  const int64_t n_embd = model.hparams().n_embd;
  const auto row_values = static_cast<size_t>(n_wanted * n_embd);
  if (s.hidden.size() < row_values) s.hidden.resize(row_values);
  try {
    model.forward_sequences_hidden(ops, s.token_stores, s.tokens, s.positions, s.want_hidden, s.hidden.data());
  } catch (const Error& e) {  // say which inputs the pass held
    const size_t first = pieces.front().input, last = pieces.back().input;
    throw Error(first == last ? fmt::format("input {}: {}", first, e.what())
                              : fmt::format("inputs {} to {}: {}", first, last, e.what()),
                e.setting(), e.remedies());
  }

  // Each input's rows are contiguous in `hidden`, in input order.
  const float* rows = s.hidden.data();
  for (const Piece& piece : pieces) {
    const int64_t n = length(piece);
    int64_t piece_rows = 0;
    for (int64_t t = piece.begin; t < piece.begin + piece.count; ++t) piece_rows += wants_row(pooling_, t, n) ? 1 : 0;
    const float* input_rows = rows;
    int64_t input_row_count = piece_rows;
    rows += piece_rows * n_embd;
    const bool whole = piece.begin == 0 && piece.count == n;
    if (!whole) {  // a long input: gather its rows until its last piece
      if (piece.begin == 0) s.long_rows.clear();
      s.long_rows.insert(s.long_rows.end(), input_rows, input_rows + piece_rows * n_embd);
      if (piece.begin + piece.count < n) continue;
      input_rows = s.long_rows.data();
      input_row_count = static_cast<int64_t>(s.long_rows.size()) / n_embd;
    }
    EmbeddingOutput& out = outputs[piece.input];
    out.n_tokens = n;
    if (pooling_ == model::Pooling::None) {
      out.values.assign(input_rows, input_rows + input_row_count * n_embd);
    } else {
      out.values.resize(static_cast<size_t>(model.pooled_width(pooling_)));
      model.pool(ops, pooling_, input_rows, input_row_count, out.values.data());
    }
  }
}

}  // namespace okapi::runtime
