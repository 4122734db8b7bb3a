// Pipeline-parallel inference over MPI (docs/scale-out.md): `mpirun -np N okapi VERB
// --pipeline` splits the model's layers into N contiguous stages, one per rank. Each rank maps the
// file but repacks (and so reads) only its stage's weights. Rank 0 embeds the tokens, runs its
// layers and sends each batch's hidden states on; the last rank applies the output norm and LM head
// and returns the wanted logits to rank 0. Rank 0 runs the verb as in one process: its Model
// routes every forward batch through a PipelineDriver (model::ForwardRoute), so run, perplexity and
// serve are unchanged. A large batch is cut into micro-batches, each sent as soon as rank 0's stage
// is done with it, so the ranks work on different micro-batches at once; a token's logits are the
// same bits alone or inside any batch, so they equal one process's.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace okapi::dist {
class Communicator;
}

namespace okapi::runtime {

struct EngineOptions;

// The layer boundaries of `n_stages` contiguous stages: stage r runs layers [bounds[r],
// bounds[r + 1]), bounds has n_stages + 1 entries from 0 to n_layer. Balanced by the bytes of
// the weights each stage multiplies by (the LM head counted in the last stage: it is that stage's
// work for every wanted row), each stage at least one layer: the split whose largest stage is
// smallest. Throws okapi::Error when there are more stages than layers.
std::vector<int64_t> plan_stages(std::span<const uint64_t> layer_bytes, uint64_t head_bytes, int n_stages);
std::vector<int64_t> plan_stages(const model::Model& model, int n_stages);

// How many tokens each micro-batch of a batch of `n_tokens` holds with `n_stages` stages: about
// 4 micro-batches per stage (the pipeline's fill and drain then cost ~1/4 stage of idle per rank),
// but no fewer than 16 tokens (smaller matmuls lose more than the overlap gains).
int64_t micro_batch_tokens(int64_t n_tokens, int n_stages);

// Rank 0 of a pipeline: its model is stage 0, and every forward batch goes through forward_batch
// here. Destroying it tells the other ranks to stop.
class PipelineDriver final : public model::ForwardRoute {
 public:
  PipelineDriver(dist::Communicator& comm, const model::Model& model, std::vector<int64_t> bounds);
  ~PipelineDriver() override;
  PipelineDriver(const PipelineDriver&) = delete;
  PipelineDriver& operator=(const PipelineDriver&) = delete;

  void forward_batch(model::Ops& ops, const model::KvBinding& kv, std::span<const int32_t> tokens,
                     std::span<const int32_t> positions, const model::LogitSelection& rows, float* out,
                     bool hidden_output) override;
  // Sends the stop command down the pipeline (once; the destructor's is then a no-op).
  void stop();
  std::span<const int64_t> bounds() const { return bounds_; }
  // Activation bytes sent between two adjacent ranks per token (its hidden state, n_embd floats).
  int64_t activation_bytes_per_token() const;
  // "pipeline: 2 ranks: layers [0, 3) on rank 0, [3, 6) on rank 1; n_embd 256: 1024 activation
  // bytes per token between ranks", what the verbs print on stderr after loading.
  std::string describe() const;
  // Bytes of messages rank 0 has sent and received since it started (headers, hidden states,
  // logits): the traffic that a network between machines would carry.
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  dist::Communicator& comm_;
  const model::Model& model_;
  std::vector<int64_t> bounds_;
  bool stopped_ = false;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
  std::vector<std::vector<std::byte>> messages_;  // one per micro-batch in flight, reused
};

// Sets up `model` as this rank's stage when options.pipeline is set and the job has several ranks
// (MPI started here: without MPI built in, the "built without MPI" error): set_stage before the
// backend prepares. On rank 0 returns the driver to route the model through (the caller installs
// it after preparing); elsewhere, and for one rank, null.
std::unique_ptr<PipelineDriver> plan_pipeline(const EngineOptions& options, model::Model& model);

// Whether this process is a worker rank (rank > 0) of a pipeline (options.pipeline); if so, loads
// its stage of `model_path`, serves forward passes from the previous rank until rank 0 says stop,
// and returns true: the verb then ends, printing nothing (rank 0 reports). Otherwise (rank 0, no
// --pipeline) it returns false at once. Throws okapi::Error as Engine::load does, for a KV store
// rank 0 describes that this rank cannot make, and for an MPI failure.
bool serve_if_pipeline_worker(const std::filesystem::path& model_path, const EngineOptions& options);

}  // namespace okapi::runtime
