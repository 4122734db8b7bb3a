// Grammar token masks over a 151,936-token Qwen2 vocabulary with llama.cpp's grammars/json.gbnf.
// BM_GrammarMask/<state>/cold: the first mask of a request (a freshly parsed grammar, nothing
// memoized); /warm: the same state again on the same grammar without the mask cache (the engine's
// memoized steps reused: a cache miss in a running request); BM_GrammarMaskCacheHit: MaskCache.
// The vocabulary: $OKAPI_GRAMMAR_BENCH_VOCAB, else llama.cpp's models/ggml-vocab-qwen2.gguf
// under /tmp/llama.cpp-src/llama.cpp; registers nothing when absent.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.hpp"
#include "grammar/grammar.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace okapi::grammar;

const char* kJsonGbnf = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";

fs::path vocab_path() {
  if (const char* env = std::getenv("OKAPI_GRAMMAR_BENCH_VOCAB"); env != nullptr && *env != '\0') return env;
  return "/tmp/llama.cpp-src/llama.cpp/models/ggml-vocab-qwen2.gguf";
}

const TokenIndex& index() {
  static const auto tokenizer =
      std::make_unique<okapi::tokenizer::Tokenizer>(okapi::tokenizer::Vocab::from_gguf(okapi::gguf::File::open(vocab_path())));
  static const TokenIndex built(*tokenizer);
  return built;
}

size_t count(const std::vector<uint8_t>& mask) {
  size_t n = 0;
  for (uint8_t a : mask) n += a;
  return n;
}

void mask_cold(benchmark::State& state, std::string prefix) {
  const TokenIndex& idx = index();
  std::vector<uint8_t> mask;
  for (auto _ : state) {
    state.PauseTiming();
    Matcher matcher(Grammar::parse(kJsonGbnf));  // a new grammar: a new engine, nothing memoized
    if (!matcher.accept(prefix)) state.SkipWithError("prefix refused");
    state.ResumeTiming();
    idx.allowed(matcher, mask);
    benchmark::DoNotOptimize(mask.data());
  }
  state.counters["allowed"] = static_cast<double>(count(mask));
}

void mask_warm(benchmark::State& state, std::string prefix) {
  const TokenIndex& idx = index();
  Matcher matcher(Grammar::parse(kJsonGbnf));
  if (!matcher.accept(prefix)) state.SkipWithError("prefix refused");
  std::vector<uint8_t> mask;
  idx.allowed(matcher, mask);
  for (auto _ : state) {
    idx.allowed(matcher, mask);
    benchmark::DoNotOptimize(mask.data());
  }
  state.counters["allowed"] = static_cast<double>(count(mask));
}

void mask_cache_hit(benchmark::State& state) {
  const TokenIndex& idx = index();
  Matcher matcher(Grammar::parse(kJsonGbnf));
  matcher.accept("{\"ke");
  MaskCache cache(idx);
  cache.mask(matcher);
  for (auto _ : state) benchmark::DoNotOptimize(cache.mask(matcher).data());
  state.counters["hits"] = static_cast<double>(cache.hits());
}

void build_index(benchmark::State& state) {
  const okapi::tokenizer::Tokenizer tokenizer(okapi::tokenizer::Vocab::from_gguf(okapi::gguf::File::open(vocab_path())));
  for (auto _ : state) {
    TokenIndex built(tokenizer);
    benchmark::DoNotOptimize(&built);
  }
}

const bool registered = [] {
  if (!fs::exists(vocab_path())) return false;
  const std::pair<const char*, const char*> states[] = {
      {"root", ""}, {"in_string", "{\"ke"}, {"after_key", "{\"key\""}, {"in_number", "{\"key\": 12"}};
  for (const auto& [name, prefix] : states) {
    benchmark::RegisterBenchmark((std::string("BM_GrammarMask/") + name + "/cold").c_str(), mask_cold, std::string(prefix))
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_GrammarMask/") + name + "/warm").c_str(), mask_warm, std::string(prefix))
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_GrammarMaskCacheHit", mask_cache_hit)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_GrammarTokenIndexBuild", build_index)->Unit(benchmark::kMillisecond)->Iterations(3);
  return true;
}();

}  // namespace
