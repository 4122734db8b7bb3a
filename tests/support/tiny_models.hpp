// Tiny valid models of every architecture okapi runs (okapi synth's tensors and metadata with
// small shapes, F32), and copies of them with one hyper-parameter changed: the inputs of the
// hyper-parameter tests and the seeds of the hparams fuzzer.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "format/gguf.hpp"

namespace okapi::test {

// "llama", "qwen2", "qwen3", "gemma3", "bitnet", "bitnet-25", "qwen3moe", "qwen2moe" (8 experts,
// top-4 / top-2, expert width n_embd; qwen2moe with a shared expert of 2 n_embd), "gpt-oss" (4
// experts, top-2, biases, sinks, windowed even layers, YaRN), "phi3", "granite", "smollm3".
std::vector<std::string> tiny_model_archs();
// A valid GGUF of `arch` with 2 blocks, n_embd 32, 4 heads (2 KV heads), n_ff 64, 260 tokens and a
// trained context of 128 (qwen3 and gemma3 with key_length 16 != n_embd / n_head).
std::vector<uint8_t> tiny_model(const std::string& arch);

// `src` with metadata `key` set to `value` (added when absent), tensors unchanged.
std::vector<uint8_t> with_metadata(const gguf::File& src, const std::string& key, const gguf::Value& value);
// `src` without metadata `key`, tensors unchanged.
std::vector<uint8_t> without_metadata(const gguf::File& src, const std::string& key);
// The message Model::load throws for the GGUF `bytes` (called `name`), or "" when it loads.
std::string load_error(const std::vector<uint8_t>& bytes, const std::string& name = "tiny.gguf");

struct HParamMutation {
  std::string key;    // the full metadata key, e.g. "llama.block_count"
  gguf::Value value;  // what it is set to
  std::string label;  // "llama.block_count = 4294967295"
  bool loads = false;  // the model is still valid (e.g. feed_forward_length 0: read from the tensors)
};

// For each shape hyper-parameter of `file` (block count, widths, heads, head sizes, FFN width, rope
// dimensions, contexts, expert count): huge, zero, negative, doubled, off-by-one and string values.
std::vector<HParamMutation> hparam_mutations(const gguf::File& file);

// Writes a still smaller model of each architecture (n_embd 8, no tokenizer, 8-token embedding)
// and every mutation of it as <arch>-<n>.gguf: fuzzer seeds.
void write_hparams_corpus(const std::filesystem::path& dir);

}  // namespace okapi::test
