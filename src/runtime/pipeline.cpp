#include "runtime/pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <cstdlib>
#include <chrono>
#include <limits>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "runtime/engine.hpp"

namespace okapi::runtime {

namespace {

constexpr int kTagBatch = 3101;   // rank r to r + 1: a micro-batch (header, then hidden states) or stop
constexpr int kTagOutput = 3102;  // the last rank to rank 0: a micro-batch's wanted rows, packed

enum class Command : uint32_t { Stop = 0, Forward = 1 };

// A message's fixed part. Then: n_stores StoreInfo, n_tokens tokens, positions and store indices
// (int32 each), n_tokens want flags (uint8), padding to 8 bytes, and for every rank but the first
// the hidden states [n_tokens x n_embd] floats.
struct Header {
  uint32_t command = 0;
  uint32_t reserved = 0;
  int64_t n_tokens = 0;
  int64_t n_stores = 0;
  int64_t n_embd = 0;
};

// A KV store as rank 0 sees it: every rank keeps its own store of the same shape under `id`.
struct StoreInfo {
  uint64_t id = 0;
  int64_t n_ctx = 0;
  int64_t batch = 0;
  char type[24] = {};  // its type_name(), for the check that the ranks made the same kind
};

struct Layout {
  size_t stores, tokens, positions, store_index, want, hidden, total;
};

Layout layout_of(int64_t n_tokens, int64_t n_stores, int64_t n_embd) {
  const auto T = static_cast<size_t>(n_tokens);
  Layout l{};
  l.stores = sizeof(Header);
  l.tokens = l.stores + static_cast<size_t>(n_stores) * sizeof(StoreInfo);
  l.positions = l.tokens + T * sizeof(int32_t);
  l.store_index = l.positions + T * sizeof(int32_t);
  l.want = l.store_index + T * sizeof(int32_t);
  l.hidden = (l.want + T + 7) / 8 * 8;
  l.total = l.hidden + T * static_cast<size_t>(n_embd) * sizeof(float);
  return l;
}

template <typename T>
void put(std::vector<std::byte>& message, size_t offset, std::span<const T> values) {
  if (!values.empty()) std::memcpy(message.data() + offset, values.data(), values.size_bytes());
}

template <typename T>
void get(std::span<const std::byte> message, size_t offset, std::span<T> values) {
  if (!values.empty()) std::memcpy(values.data(), message.data() + offset, values.size_bytes());
}

// A received micro-batch.
struct Batch {
  Header header;
  std::vector<StoreInfo> stores;
  std::vector<int32_t> tokens, positions, store_index;
  std::vector<uint8_t> want;
  std::vector<float> hidden;
};

Batch decode(std::span<const std::byte> message) {
  Batch b;
  if (message.size() < sizeof(Header)) throw_error("pipeline: a message of {} bytes has no header", message.size());
  std::memcpy(&b.header, message.data(), sizeof(Header));
  if (b.header.command == static_cast<uint32_t>(Command::Stop)) return b;
  const Header& h = b.header;
  if (h.n_tokens <= 0 || h.n_stores <= 0 || h.n_stores > h.n_tokens || h.n_embd <= 0)
    throw_error("pipeline: a batch header of {} tokens, {} stores, width {} is not valid", h.n_tokens, h.n_stores,
                h.n_embd);
  const Layout l = layout_of(h.n_tokens, h.n_stores, h.n_embd);
  if (message.size() != l.total)
    throw_error("pipeline: a batch of {} tokens came in {} bytes, expected {}", h.n_tokens, message.size(), l.total);
  const auto T = static_cast<size_t>(h.n_tokens);
  b.stores.resize(static_cast<size_t>(h.n_stores));
  b.tokens.resize(T);
  b.positions.resize(T);
  b.store_index.resize(T);
  b.want.resize(T);
  b.hidden.resize(T * static_cast<size_t>(h.n_embd));
  get(message, l.stores, std::span(b.stores));
  get(message, l.tokens, std::span(b.tokens));
  get(message, l.positions, std::span(b.positions));
  get(message, l.store_index, std::span(b.store_index));
  get(message, l.want, std::span(b.want));
  get(message, l.hidden, std::span(b.hidden));
  for (const int32_t s : b.store_index)
    if (s < 0 || s >= h.n_stores) throw_error("pipeline: store index {} of {} stores", s, h.n_stores);
  return b;
}

// Waits until ready() (which calls into MPI, so it also moves messages along) without holding a
// core: MPI's own waits spin, and a rank spinning while it waits for another takes the core that
// the other needs whenever ranks outnumber free cores (a shared or oversubscribed machine). A few
// quick tries first (a decode step's reply is often microseconds away), then short sleeps, then
// longer ones for a rank idle between requests.
template <typename Ready>
void wait_until(Ready&& ready) {
  for (int tries = 0; !ready(); ++tries) {
    if (tries < 64) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(tries < 4096 ? 20 : 500));
  }
}

void finish(dist::Request& request) {
  wait_until([&] { return request.test(); });
}

std::span<const std::byte> bytes_of(const std::vector<std::byte>& message) { return {message.data(), message.size()}; }

// A worker rank: its stage of the model, its own KV stores, served until rank 0 says stop.
class StageWorker {
 public:
  StageWorker(dist::Communicator& comm, const model::Model& model, model::Ops& ops, const EngineOptions& options)
      : comm_(comm), model_(model), ops_(ops), options_(options) {}

  void run() {
    const int previous = comm_.rank() - 1;
    const bool last = comm_.rank() == comm_.size() - 1;
    for (;;) {
      wait_until([&] { return comm_.message_waiting(previous, kTagBatch); });
      std::vector<std::byte> message = comm_.recv_any_size(previous, kTagBatch);
      Batch b = decode(bytes_of(message));
      if (b.header.command == static_cast<uint32_t>(Command::Stop)) {
        if (!last) comm_.send(comm_.rank() + 1, kTagBatch, bytes_of(message));
        for (Pending& p : pending_) finish(p.request);
        pending_.clear();
        return;
      }
      if (b.header.command != static_cast<uint32_t>(Command::Forward))
        throw_error("pipeline: unknown command {} from rank {}", b.header.command, previous);
      run_batch(b, message, last);
    }
  }

 private:
  struct WorkerStore {
    std::unique_ptr<kv::KvStore> kv;
    int64_t next_position = 0;  // one past the last position written
  };

  // The store rank 0 calls info.id, made (or remade, when rank 0's store of that id changed shape)
  // as rank 0's, and rolled back to `first_position` when it holds more: rank 0's store holds
  // positions [0, first_position) when it sends a batch starting there (it truncated the rest).
  kv::KvStore& store_for(const StoreInfo& info, int32_t first_position) {
    WorkerStore& s = stores_[info.id];
    if (!s.kv || s.kv->n_ctx() != info.n_ctx || s.kv->shape().batch != info.batch) {
      s.kv.reset();  // the old one's memory first
      s.kv = ops_.make_kv(model_.kv_shape(info.n_ctx, info.batch),
                          model::KvTypes{options_.cache, options_.exact_attention});
      s.next_position = 0;
      const std::string_view type(info.type, strnlen(info.type, sizeof info.type));
      if (s.kv->type_name() != type)
        throw_error("pipeline: rank 0's KV store is {} but rank {} makes {}; every rank must be given the same cache "
                    "settings",
                    type, comm_.rank(), s.kv->type_name());
    }
    if (first_position < s.next_position) {
      s.kv->truncate(first_position);
      s.next_position = first_position;
    }
    return *s.kv;
  }

  void run_batch(const Batch& b, const std::vector<std::byte>& message, bool last) {
    const Header& h = b.header;
    const auto T = static_cast<size_t>(h.n_tokens);
    // Each store's first token in the batch is its lowest position (positions increase per store).
    std::vector<kv::KvStore*> by_index(b.stores.size(), nullptr);
    std::vector<kv::KvStore*> per_token(T);
    for (size_t t = 0; t < T; ++t) {
      const auto s = static_cast<size_t>(b.store_index[t]);
      if (!by_index[s]) by_index[s] = &store_for(b.stores[s], b.positions[t]);
      per_token[t] = by_index[s];
    }
    size_t n_out_rows = T;
    if (last) n_out_rows = static_cast<size_t>(std::count_if(b.want.begin(), b.want.end(), [](uint8_t w) { return w != 0; }));
    const int64_t width = last ? model_.n_vocab() : h.n_embd;
    std::vector<std::byte> reply;
    size_t out_offset = 0;
    if (!last) {
      const Layout l = layout_of(h.n_tokens, h.n_stores, h.n_embd);
      reply.assign(message.begin(), message.end());  // the same header, this stage's hidden states
      out_offset = l.hidden;
    }
    out_.resize(n_out_rows * static_cast<size_t>(width));
    // With no row wanted (a prompt's earlier micro-batches) the last stage still writes its K/V.
    model_.forward_stage(ops_, model::KvBinding(std::span<kv::KvStore* const>(per_token)), b.tokens, b.positions,
                         model::LogitSelection(std::span<const uint8_t>(b.want)), b.hidden.data(),
                         n_out_rows > 0 ? out_.data() : nullptr, /*hidden_output=*/false);
    for (size_t t = 0; t < T; ++t) {
      WorkerStore& s = stores_[b.stores[static_cast<size_t>(b.store_index[t])].id];
      s.next_position = std::max<int64_t>(s.next_position, b.positions[t] + 1);
    }
    if (last && n_out_rows == 0) return;
    // Older sends done first when many are in flight (they complete as the next rank reads them).
    while (!pending_.empty() && (pending_.size() >= kMaxInFlight || pending_.front().request.test())) {
      finish(pending_.front().request);
      pending_.pop_front();
    }
    pending_.emplace_back();
    Pending& p = pending_.back();
    if (last) {
      // The logits go as they are (no copy: a chunk's logits are the largest buffer here).
      p.values = std::move(out_);
      out_ = {};
      p.request = comm_.isend(0, kTagOutput, std::as_bytes(std::span<const float>(p.values)));
    } else {
      std::memcpy(reply.data() + out_offset, out_.data(), out_.size() * sizeof(float));
      p.message = std::move(reply);
      p.request = comm_.isend(comm_.rank() + 1, kTagBatch, bytes_of(p.message));
    }
  }

  struct Pending {
    std::vector<std::byte> message;  // to the next rank
    std::vector<float> values;       // the last rank's logits, to rank 0
    dist::Request request;  // declared after the message: destroyed (waited for) first
  };
  static constexpr size_t kMaxInFlight = 32;

  dist::Communicator& comm_;
  const model::Model& model_;
  model::Ops& ops_;
  const EngineOptions& options_;
  std::unordered_map<uint64_t, WorkerStore> stores_;
  std::vector<float> out_;
  std::deque<Pending> pending_;
};

}  // namespace

std::vector<int64_t> plan_stages(std::span<const uint64_t> layer_bytes, uint64_t head_bytes, int n_stages) {
  const auto L = static_cast<int64_t>(layer_bytes.size());
  if (n_stages < 1) throw_error("pipeline: {} stages", n_stages);
  if (n_stages > L)
    throw_error("pipeline: {} ranks but the model has {} layers; each rank needs at least one layer", n_stages, L);
  // prefix[i]: bytes of layers [0, i); stage cost = its layers' bytes (+ the head for the last).
  std::vector<uint64_t> prefix(static_cast<size_t>(L) + 1, 0);
  for (int64_t i = 0; i < L; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + layer_bytes[static_cast<size_t>(i)];
  const auto cost = [&](int64_t first, int64_t end) {
    return prefix[static_cast<size_t>(end)] - prefix[static_cast<size_t>(first)] + (end == L ? head_bytes : 0);
  };
  // best[s][e]: the smallest largest-stage cost of layers [0, e) in s stages; choice: where the
  // last of them starts. Models have at most a few hundred layers: O(S L^2) is nothing.
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  const auto S = static_cast<size_t>(n_stages);
  std::vector<std::vector<uint64_t>> best(S + 1, std::vector<uint64_t>(static_cast<size_t>(L) + 1, kNone));
  std::vector<std::vector<int64_t>> choice(S + 1, std::vector<int64_t>(static_cast<size_t>(L) + 1, 0));
  best[0][0] = 0;
  for (size_t s = 1; s <= S; ++s)
    for (int64_t e = static_cast<int64_t>(s); e <= L; ++e)
      for (int64_t f = static_cast<int64_t>(s) - 1; f < e; ++f) {
        const uint64_t before = best[s - 1][static_cast<size_t>(f)];
        if (before == kNone) continue;
        const uint64_t worst = std::max(before, cost(f, e));
        // Ties: the later start, so earlier stages (rank 0 also runs the verb) take fewer layers.
        if (worst <= best[s][static_cast<size_t>(e)]) {
          best[s][static_cast<size_t>(e)] = worst;
          choice[s][static_cast<size_t>(e)] = f;
        }
      }
  std::vector<int64_t> bounds(S + 1);
  bounds[S] = L;
  for (size_t s = S; s > 0; --s) bounds[s - 1] = choice[s][static_cast<size_t>(bounds[s])];
  return bounds;
}

std::vector<int64_t> plan_stages(const model::Model& model, int n_stages) {
  std::vector<uint64_t> layer_bytes(static_cast<size_t>(model.hparams().n_layer));
  for (size_t il = 0; il < layer_bytes.size(); ++il) layer_bytes[il] = model.layer_weight_bytes(static_cast<int64_t>(il));
  return plan_stages(layer_bytes, model.head_weight_bytes(), n_stages);
}

int64_t micro_batch_tokens(int64_t n_tokens, int n_stages) {
  constexpr int64_t kMinTokens = 16;
  const int64_t pieces = 4 * static_cast<int64_t>(n_stages);
  return std::max<int64_t>(kMinTokens, (n_tokens + pieces - 1) / pieces);
}

PipelineDriver::PipelineDriver(dist::Communicator& comm, const model::Model& model, std::vector<int64_t> bounds)
    : comm_(comm), model_(model), bounds_(std::move(bounds)) {}

PipelineDriver::~PipelineDriver() {
  try {
    stop();
  } catch (const std::exception&) {
    // Rank 0 is ending anyway; a rank that cannot be told ends with the job.
  }
}

void PipelineDriver::stop() {
  if (stopped_) return;
  stopped_ = true;
  Header h;
  h.command = static_cast<uint32_t>(Command::Stop);
  std::vector<std::byte> message(sizeof(Header));
  std::memcpy(message.data(), &h, sizeof h);
  comm_.send(1, kTagBatch, bytes_of(message));
}

int64_t PipelineDriver::activation_bytes_per_token() const {
  return model_.hparams().n_embd * static_cast<int64_t>(sizeof(float));
}

std::string PipelineDriver::describe() const {
  std::string text = fmt::format("pipeline: {} ranks: layers", bounds_.size() - 1);
  for (size_t r = 0; r + 1 < bounds_.size(); ++r)
    text += fmt::format("{} [{}, {}) on rank {}", r == 0 ? "" : ",", bounds_[r], bounds_[r + 1], r);
  return text + fmt::format("; n_embd {}: {} activation bytes per token between ranks", model_.hparams().n_embd,
                            activation_bytes_per_token());
}

void PipelineDriver::forward_batch(model::Ops& ops, const model::KvBinding& kv, std::span<const int32_t> tokens,
                                   std::span<const int32_t> positions, const model::LogitSelection& rows, float* out,
                                   bool hidden_output) {
  if (stopped_) throw_error("pipeline: a forward pass after the pipeline was stopped");
  // The other ranks make their stores with the verb's cache types; an embedding pass's stores are
  // F32 whatever those are, so the ranks could not agree on them.
  if (hidden_output)
    throw_error("embeddings (hidden states) are not computed across pipeline ranks; compute them in one process");
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t n_embd = model_.hparams().n_embd;
  const int64_t width = model_.n_vocab();
  std::vector<uint8_t> want(static_cast<size_t>(T), 0);
  rows.for_each_run(T, [&](int64_t begin, int64_t count) {
    std::fill_n(want.begin() + begin, count, uint8_t{1});
  });
  std::vector<kv::KvStore*> stores(static_cast<size_t>(T));
  for (size_t t = 0; t < stores.size(); ++t) stores[t] = &kv.store(t);

  const int last = comm_.size() - 1;
  const int64_t piece = micro_batch_tokens(T, comm_.size());
  const auto n_pieces = static_cast<size_t>((T + piece - 1) / piece);
  if (messages_.size() < n_pieces) messages_.resize(n_pieces);
  std::vector<float> hidden;
  std::vector<dist::Request> sends, receives;
  int64_t packed = 0;  // wanted rows before this micro-batch: where its rows go in `out`
  for (size_t i = 0; i < n_pieces; ++i) {
    const int64_t begin = static_cast<int64_t>(i) * piece, n = std::min(piece, T - begin);
    const auto part = [&](auto span) { return span.subspan(static_cast<size_t>(begin), static_cast<size_t>(n)); };
    // The micro-batch's stores, each once, in order of first appearance.
    std::vector<StoreInfo> infos;
    std::vector<int32_t> store_index(static_cast<size_t>(n));
    std::vector<const kv::KvStore*> seen;
    for (int64_t t = 0; t < n; ++t) {
      const kv::KvStore* s = stores[static_cast<size_t>(begin + t)];
      auto it = std::find(seen.begin(), seen.end(), s);
      if (it == seen.end()) {
        seen.push_back(s);
        StoreInfo info;
        info.id = reinterpret_cast<uintptr_t>(s);
        info.n_ctx = s->n_ctx();
        info.batch = s->shape().batch;
        const std::string_view type = s->type_name();
        std::memcpy(info.type, type.data(), std::min(type.size(), sizeof info.type - 1));
        infos.push_back(info);
        it = seen.end() - 1;
      }
      store_index[static_cast<size_t>(t)] = static_cast<int32_t>(it - seen.begin());
    }
    Header h;
    h.command = static_cast<uint32_t>(Command::Forward);
    h.n_tokens = n;
    h.n_stores = static_cast<int64_t>(infos.size());
    h.n_embd = n_embd;
    const Layout l = layout_of(n, h.n_stores, n_embd);
    std::vector<std::byte>& message = messages_[i];
    message.assign(l.total, std::byte{0});
    std::memcpy(message.data(), &h, sizeof h);
    put(message, l.stores, std::span<const StoreInfo>(infos));
    put(message, l.tokens, part(tokens));
    put(message, l.positions, part(positions));
    put(message, l.store_index, std::span<const int32_t>(store_index));
    put(message, l.want, part(std::span<const uint8_t>(want)));
    // Stage 0 on this micro-batch; a single store stays one (forward()'s attention path).
    hidden.resize(static_cast<size_t>(n * n_embd));
    const std::span<kv::KvStore* const> part_stores = part(std::span<kv::KvStore* const>(stores));
    const model::KvBinding binding = kv.single() ? model::KvBinding(kv.store(0)) : model::KvBinding(part_stores);
    model_.forward_stage(ops, binding, part(tokens), part(positions), model::LogitRows::All, nullptr, hidden.data(),
                         false);
    put(message, l.hidden, std::span<const float>(hidden));
    sends.push_back(comm_.isend(1, kTagBatch, bytes_of(message)));
    bytes_sent_ += message.size();
    // Its rows come back from the last rank once every stage has run it.
    const auto wanted = std::count(want.begin() + begin, want.begin() + begin + n, uint8_t{1});
    if (wanted > 0) {
      const auto count = static_cast<size_t>(wanted * width);
      receives.push_back(comm_.irecv(last, kTagOutput, std::as_writable_bytes(std::span<float>(out + packed * width, count))));
      bytes_received_ += count * sizeof(float);
      packed += wanted;
    }
  }
  for (dist::Request& r : receives) finish(r);
  for (dist::Request& s : sends) finish(s);
}

std::unique_ptr<PipelineDriver> plan_pipeline(const EngineOptions& options, model::Model& model) {
  if (!options.pipeline) return nullptr;
  dist::Communicator& comm = dist::Communicator::world();
  if (comm.size() == 1) return nullptr;
  std::vector<int64_t> bounds = plan_stages(model, comm.size());
  const auto r = static_cast<size_t>(comm.rank());
  model.set_stage(bounds[r], bounds[r + 1]);
  if (comm.rank() != 0) return nullptr;
  return std::make_unique<PipelineDriver>(comm, model, std::move(bounds));
}

bool serve_if_pipeline_worker(const std::filesystem::path& model_path, const EngineOptions& options) {
  if (!options.pipeline) return false;
  dist::Communicator& comm = dist::Communicator::world();
  if (comm.rank() == 0) return false;
  const auto engine = Engine::load(model_path, options);
  StageWorker(comm, engine->model(), engine->ops(), options).run();
  return true;
}

}  // namespace okapi::runtime
