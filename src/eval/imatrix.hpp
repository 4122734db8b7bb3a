// Importance matrices as llama-imatrix collects them: the model runs over a text in chunks of
// n_ctx tokens (BOS first in each chunk, as llama-perplexity) behind compress::ObservingOps, and
// for every weight of a block ("blk.*", plus output.weight with process_output) the sums of the
// squared activations of each input column are added up with the number of activations. Dense
// weights count every token of a forward pass of 16 tokens or more (llama-imatrix ignores smaller
// mat-muls; the passes are cut as llama.cpp cuts its micro-batches: 2048-token batches, 512-token
// micro-batches, several chunks per batch when they fit); MoE expert weights (3-D ffn_*_exps) keep
// one row of sums and one count per expert, over the tokens routed to it. The running perplexity
// over the second half of each chunk is reported per chunk, as llama-imatrix prints it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "quantize/imatrix_file.hpp"
#include "runtime/engine.hpp"

namespace okapi::eval {

struct ImatrixOptions {
  int64_t n_ctx = 512;        // tokens per chunk (-c)
  int64_t n_chunks = -1;      // < 0: every chunk the text holds (--chunks)
  int64_t from_chunk = 0;     // chunks of the text skipped first (--chunk)
  bool process_output = false;  // collect output.weight too (--process-output)
  bool compute_ppl = true;      // --no-ppl turns the perplexity off
  std::string dataset;          // the text file's name as recorded in the matrix (imatrix.datasets)
};

struct ImatrixChunkReport {
  int64_t chunk = 0;     // 0-based, of this run
  int64_t n_chunks = 0;
  double running_ppl = 0;  // 0 without compute_ppl
  double seconds = 0;      // since the first chunk started
};

struct ImatrixResult {
  int64_t n_tokens_text = 0;
  int64_t n_chunks = 0;   // chunks run
  double ppl = 0, ppl_stderr = 0;
  bool interrupted = false;
  double seconds = 0;
};

// The chunk count llama-imatrix records: the largest count of any entry over the chunk size.
int64_t imatrix_chunk_count(const quantize::Imatrix& imatrix);

// Runs `engine` over `text` and adds what it sees to `imatrix` (which may hold merged --in-file
// data: raw sums and counts; legacy entries must be converted with quantize::to_raw first).
// `on_chunk` runs after each chunk with `imatrix` up to date (chunk_count, chunk_size and
// datasets set), so the caller may save it. Throws okapi::Error: a text shorter than two chunks
// (llama-imatrix's condition), -c below 2, mismatched entry sizes, non-finite activations.
ImatrixResult collect_imatrix(runtime::Engine& engine, const std::string& text, const ImatrixOptions& options,
                              quantize::Imatrix& imatrix,
                              const std::function<void(const ImatrixChunkReport&)>& on_chunk = {});

}  // namespace okapi::eval
