// Reads test vectors in the layout of llama.cpp's tests/test-tokenizer-0: the .inp file holds the
// input strings, each followed by "\n__ggml_vocab_test__\n"; the .out file has one line of
// space-separated ids per input.
#pragma once
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace okapi::tokenizer::test {

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::vector<std::string> read_inputs(const std::filesystem::path& inp) {
  static const std::string kSeparator = "\n__ggml_vocab_test__\n";
  std::string text = read_bytes(inp);
  std::vector<std::string> inputs;
  size_t start = 0;
  for (size_t pos; (pos = text.find(kSeparator, start)) != std::string::npos; start = pos + kSeparator.size()) {
    inputs.push_back(text.substr(start, pos - start));
  }
  return inputs;
}

inline std::vector<std::vector<TokenId>> read_outputs(const std::filesystem::path& out) {
  std::ifstream in(out, std::ios::binary);
  std::vector<std::vector<TokenId>> outputs;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    std::vector<TokenId> row;
    for (TokenId id; ids >> id;) row.push_back(id);
    outputs.push_back(std::move(row));
  }
  return outputs;
}

}  // namespace okapi::tokenizer::test
