// Flags several verbs share, spelled as llama.cpp spells them, and the range checks of numeric
// flags. CLI11 runs the checks while parsing, so a bad value is refused before any work or output:
// "--top-p: 2 is out of range [0, 1]" (a usage error, exit code 2).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/cache_type.hpp"

namespace okapi::sample {
struct SamplerConfig;
}
namespace okapi::runtime {
struct DrafterOptions;
}
namespace okapi::grammar {
class Grammar;
}

namespace okapi::cli {

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// Accepts a finite number in [lo, hi] (either bound may be ±kUnbounded).
CLI::Validator in_range(double lo, double hi);
// Accepts a non-empty value (a file name, a list).
CLI::Validator non_empty();
// Every element of a comma-separated list in [lo, hi].
CLI::Validator each_in_range(double lo, double hi);

// -t,--threads N (default: one per core), checked against [1, kMaxThreads].
void add_threads_flag(CLI::App* cmd, int& threads);
// --pipeline: under `mpirun -np N`, the model's layers split into N stages, one per rank
// (runtime/pipeline.hpp).
void add_pipeline_flag(CLI::App* cmd, bool& pipeline);
// After parsing: --pipeline with --draft-skip (layer skipping runs in one process) is a usage error.
void check_pipeline_flags(bool pipeline, const runtime::DrafterOptions& drafting);
// -c,--ctx-size N in [0, 2^31): 0 asks for the model's trained context.
void add_ctx_flag(CLI::App* cmd, int64_t& n_ctx, const std::string& description);
// -b,--batch-size N in [1, 2^31).
void add_batch_flag(CLI::App* cmd, int64_t& batch_size, const std::string& description);
// -s,--seed N in [-1, 2^32): -1 asks for a random seed.
void add_seed_flag(CLI::App* cmd, int64_t& seed);
// --cache-type-k / --cache-type-v (also -ctk / -ctv) and --kv-rotate, parsed into `cache` (an
// unknown name is a usage error listing the types); its values at the call are the defaults shown.
void add_cache_type_flags(CLI::App* cmd, kv::CacheTypes& cache);

// --temp, --top-k, --top-p, --min-p, --typical, --repeat-penalty, --repeat-last-n,
// --frequency-penalty, --presence-penalty (llama.cpp's sampling flags).
void add_sampling_flags(CLI::App* cmd, sample::SamplerConfig& sampling);

// Speculative decoding (run, chat, serve): --lookup N | --draft-model FILE (-md) | --draft-skip
// LIST, one of them, and --draft-max/--draft, --draft-min, --draft-p-min.
void add_drafting_flags(CLI::App* cmd, runtime::DrafterOptions& drafting);
// After parsing: --draft-min above --draft-max is a usage error.
void check_drafting_flags(const runtime::DrafterOptions& drafting);

// Constrained output (run, chat): --grammar GBNF | --grammar-file FILE | --json-schema JSON |
// --json-schema-file FILE, at most one.
struct GrammarFlags {
  std::string grammar, grammar_file, json_schema, json_schema_file;
};
void add_grammar_flags(CLI::App* cmd, GrammarFlags& flags);
// The grammar the flags give (null: none). A grammar that does not parse or a schema that cannot be
// expressed is an okapi::Error naming the flag, the line and column or the keyword.
std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarFlags& flags);

// Where the model comes from besides -m (run, chat, serve, bench, perplexity, embed), as llama.cpp
// takes it: --hf-repo USER/REPO[:QUANT] (-hf, -hfr), --hf-file FILE (-hff), --hf-token TOKEN (-hft;
// default: HF_TOKEN), --model-url URL (-mu) and --offline (src/hub/hub.hpp does the work).
struct ModelSourceFlags {
  std::string hf_repo, hf_file, hf_token, model_url;
  bool offline = false;
};
// `model` is the verb's -m option: it excludes --hf-repo and --model-url.
void add_model_source_flags(CLI::App* cmd, ModelSourceFlags& flags, CLI::Option* model);
// The model file to load: `model` (-m) when given, else the --hf-repo or --model-url download (or
// its cached copy), else "" (the verb's default).
std::string resolve_model_source(const std::string& model, const ModelSourceFlags& flags);
// The usage error of a verb that needs a model, given none of -m, --hf-repo and --model-url
// (checked while parsing, before resolve_model_source downloads anything).
void require_model_source(std::string_view verb, const std::string& model, const ModelSourceFlags& flags);

// The default of every -t: one thread per core, as llama.cpp.
int default_threads();

// The largest thread count a flag accepts (a typo such as -t 10000 should not spawn threads).
inline constexpr int kMaxThreads = 512;

// llama.cpp habits, handled before CLI11 sees the arguments (`args` begins with the verb; main.cpp
// calls this). CLI11 reads a multi-letter single-dash flag as a short flag and its value (-fa as
// -f a, -cnv as -c nv, -no-cnv as -n o-cnv), so these are dealt with here:
// - flags that mean nothing here are taken out, with one note each on stderr: -ngl N (okapi runs
//   on the CPU) and -fa [on|off|auto] (attention is always tiled) in run, chat, serve, bench,
//   perplexity and logits; -no-cnv in run; -cnv and -i in chat (which always converses);
// - -cnv and -i in run, and -no-cnv in chat, are usage errors that name the verb to use;
// - llama-bench's -pg becomes bench's --pg;
// - llama.cpp's -hf / -hfr, -hff, -hft and -mu become --hf-repo, --hf-file, --hf-token and --model-url.
// Returns 0 to go on, or the exit code (2) after printing the usage error.
int accept_llama_habits(std::vector<std::string>& args);

// llama.cpp's -e (string_process_escapes): \n, \r, \t, \', \", \\ and \xHH become the bytes they
// name; any other backslash is kept as it is.
std::string process_escapes(std::string_view text);

}  // namespace okapi::cli
