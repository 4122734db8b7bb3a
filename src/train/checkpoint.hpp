// Training checkpoints: everything a resumed run needs to continue bit for bit.
//
// File layout (little-endian), written through AtomicFileWriter (temp file, fsync, rename), so a
// checkpoint on disk is either absent or complete:
//   "OKAPICKP" | u32 version | metadata (config with its low-rank ranks, hyper-parameters, step,
//   RNG, data cursor, data identity, paths, the --init-from model and its carried GGUF keys) | u64 n | f32 params[n] | f32 adam_m[n] | f32 adam_v[n] |
//   64 hex chars: sha256 of every byte before them.
// load_checkpoint() verifies the digest before parsing, so a torn or altered file is reported as
// corrupt rather than half-read.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "train/data.hpp"
#include "train/model.hpp"

namespace okapi::train {

// Version 2 added the low-rank projections of the config, the --init-from model and the metadata
// its export carries over; version 1 files still load (a dense model, no source model).
inline constexpr uint32_t kCheckpointVersion = 2;

// What defines the loss curve: a resume must use the same values to reproduce it exactly.
struct TrainHyper {
  int64_t steps = 1000;  // total (the cosine schedule ends here)
  int64_t batch = 8;
  int64_t seq = 256;
  int64_t accum = 1;
  int64_t warmup = 0;
  float lr = 5e-4f;
  float lr_min = 0.0f;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float adam_eps = 1e-8f;
  float grad_clip = 1.0f;
  uint64_t seed = 1;
  int32_t init = 0;  // train::Init
  double held_out_fraction = 0.1;
};

struct CheckpointMeta {
  ModelConfig config;
  TrainHyper hyper;
  int64_t step = 0;  // updates done
  WindowSampler::State sampler;
  uint64_t tokens_seen = 0;
  double train_seconds = 0;  // training time so far, across resumes
  // Evaluation settings, so a resumed run's eval columns stay comparable unless changed.
  int64_t eval_every = 0;
  int64_t eval_windows = 0;
  int64_t save_every = 0;
  std::string data_sha256;
  std::string tokenizer_sha256;
  std::string tokenizer_path;
  std::vector<std::string> data_files;
  std::string init_from;  // the model a fine-tuning run started from (empty: random init)
  // GGUF keys of that model the export writes again (okapi.compress.*: it stays compressed).
  std::vector<gguf::KeyValue> export_metadata;
};

struct Checkpoint {
  CheckpointMeta meta;
  std::vector<float> params, adam_m, adam_v;
};

// Writes atomically; params, m and v must have the same size.
void save_checkpoint(const std::filesystem::path& path, const CheckpointMeta& meta, std::span<const float> params,
                     std::span<const float> adam_m, std::span<const float> adam_v);
// Throws okapi::Error naming the file: missing, not a checkpoint, wrong version, corrupt (digest
// mismatch), or sizes that do not match the config's parameter layout.
Checkpoint load_checkpoint(const std::filesystem::path& path);

struct ResumePoint {
  std::filesystem::path path;
  Checkpoint checkpoint;
};

// The newest checkpoint of a run directory that loads and verifies. A newer one that does not
// (truncated, altered, not a checkpoint) is reported through `warn` with its path and the reason,
// and renamed to <name>.corrupt so that neither a later resume nor pruning (which keeps the
// newest) mistakes it for progress. Throws okapi::Error when there is none, or when none is good
// (each one's reason in the message; nothing renamed then).
ResumePoint load_newest_good_checkpoint(const std::filesystem::path& run_dir,
                                        const std::function<void(const std::string&)>& warn);

// Checkpoint files of a run directory: <dir>/checkpoints/step-NNNNNNNN.ckpt, oldest first.
std::filesystem::path checkpoint_dir(const std::filesystem::path& run_dir);
std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir, int64_t step);
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& run_dir);
// Deletes all but the newest `keep` checkpoints (keep >= 1), and temp files left by a killed run.
void prune_checkpoints(const std::filesystem::path& run_dir, int64_t keep);

}  // namespace okapi::train
