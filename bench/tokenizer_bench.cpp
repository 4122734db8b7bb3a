// Tokenizer throughput: BM_Tokenize/<vocab> encodes WikiText-2's test split
// (../shared/text/wikitext-2-raw-test.txt, ~1.3 MB) with every ../shared/vocab/ggml-vocab-*.gguf,
// no BOS, no special parsing. Counters: tokens/s and bytes/s. Registers nothing when the shared
// data are absent.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shared_dir.hpp"
#include "format/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace okapi::tokenizer;

const std::string& wikitext() {
  static const std::string text = [] {
    std::ifstream in(okapi::shared_dir() / "text" / "wikitext-2-raw-test.txt", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  return text;
}

void tokenize_wikitext(benchmark::State& state, const fs::path& vocab_path) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(Vocab::from_gguf(okapi::gguf::File::open(vocab_path)));
  } catch (const okapi::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::string& text = wikitext();
  const EncodeOptions options{.add_special = false, .parse_special = false};
  size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tok->encode(text, options);
    tokens += ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.counters["tokens"] = static_cast<double>(tokens / std::max<size_t>(1, state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(text.size() * state.iterations()));
}

const bool registered = [] {
  const fs::path dir = okapi::shared_dir() / "vocab";
  if (!fs::exists(okapi::shared_dir() / "text" / "wikitext-2-raw-test.txt") || !fs::is_directory(dir)) return false;
  std::vector<fs::path> vocabs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("ggml-vocab-") && name.ends_with(".gguf")) vocabs.push_back(entry.path());
  }
  std::sort(vocabs.begin(), vocabs.end());
  for (const auto& path : vocabs) {
    const std::string label = path.stem().string().substr(std::string("ggml-vocab-").size());
    benchmark::RegisterBenchmark(("BM_Tokenize/" + label).c_str(), tokenize_wikitext, path)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5);
  }
  return true;
}();

}  // namespace
