// How tokenizer time grows with the input (the timing half of tests that used to assert on wall
// clock): BM_SpmScaling / BM_BpeScaling encode n bytes of repeated text with ../shared's llama-spm
// and gpt-2 vocabularies, BM_BpeOneWord one pre-token of n 'a's (the merge loop must not be
// quadratic), BM_PreTokenizerScaling splits n bytes with the llama-bpe regexes. Each reports the
// fitted complexity (expect O(N)). The vocab benchmarks register nothing when ../shared is absent.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/shared_dir.hpp"
#include "format/gguf.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace okapi::tokenizer;

std::string repeated(const std::string& unit, int64_t bytes) {
  std::string text;
  while (static_cast<int64_t>(text.size()) < bytes) text += unit;
  text.resize(static_cast<size_t>(bytes));
  return text;
}

const std::string kProse = "The Tower of London, founded in 1066, is a castle. \xC3\x9C\xE6\x9D\xB1 \n\n  ";

void encode_scaling(benchmark::State& state, const fs::path& vocab_path, const std::string& unit) {
  const Tokenizer tok(Vocab::from_gguf(okapi::gguf::File::open(vocab_path)));
  const std::string text = repeated(unit, state.range(0));
  const EncodeOptions options{.add_special = false, .parse_special = false};
  for (auto _ : state) benchmark::DoNotOptimize(tok.encode(text, options).data());
  state.SetComplexityN(state.range(0));
  state.SetBytesProcessed(state.range(0) * static_cast<int64_t>(state.iterations()));
}

void BM_PreTokenizerScaling(benchmark::State& state) {
  const PreTokenizer pre(pre_tokenizer_family("llama-bpe").regexes);
  const std::string text =
      repeated("The quick brown fox, 12345 times!   \n\n\t\xC3\x9C" "ber caf\xC3\xA9 'll ", state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(pre.split(text).data());
  state.SetComplexityN(state.range(0));
  state.SetBytesProcessed(state.range(0) * static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_PreTokenizerScaling)->RangeMultiplier(4)->Range(64 << 10, 4 << 20)->Unit(benchmark::kMillisecond)->Complexity();

const bool registered = [] {
  const fs::path spm = okapi::shared_dir() / "vocab" / "ggml-vocab-llama-spm.gguf";
  const fs::path gpt2 = okapi::shared_dir() / "vocab" / "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(spm) || !fs::exists(gpt2)) return false;
  benchmark::RegisterBenchmark("BM_SpmScaling", encode_scaling, spm, kProse)
      ->RangeMultiplier(4)->Range(64 << 10, 1 << 20)->Unit(benchmark::kMillisecond)->Complexity();
  benchmark::RegisterBenchmark("BM_BpeScaling", encode_scaling, gpt2, kProse)
      ->RangeMultiplier(4)->Range(64 << 10, 1 << 20)->Unit(benchmark::kMillisecond)->Complexity();
  benchmark::RegisterBenchmark("BM_BpeOneWord", encode_scaling, gpt2, std::string("a"))
      ->RangeMultiplier(4)->Range(16 << 10, 256 << 10)->Unit(benchmark::kMillisecond)->Complexity();
  return true;
}();

}  // namespace
