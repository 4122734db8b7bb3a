// The schema corpus (tests/data/schemas, real-world-shaped tool signatures and structured outputs):
// every schema converts, and random strings drawn from its grammar are JSON that Python's
// jsonschema (python3-jsonschema, tests/grammar/schema_oracle.py) accepts. The draw is a random
// walk through the Matcher: at each step a character the grammar allows, chosen uniformly, with a
// growing preference for closing characters so that the walk ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/json_schema.hpp"
#include "support/paths.hpp"

namespace okapi::grammar {
namespace {

constexpr int kInstancesPerSchema = 3;
constexpr size_t kMaxWalk = 20000;  // bytes; a walk that long means the bias failed to end it

std::vector<std::filesystem::path> corpus_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(test::repo_dir() / "tests/data/schemas"))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Printable ASCII, tab and newline, a few multi-byte characters, and every non-ASCII character
// of the schema (enum values and patterns may need them).
std::vector<std::string> alphabet_for(const std::string& schema_text) {
  std::vector<std::string> alphabet;
  for (char c = 0x20; c < 0x7F; ++c) alphabet.emplace_back(1, c);
  alphabet.insert(alphabet.end(), {"\t", "\n", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80"});
  std::set<std::string> seen(alphabet.begin(), alphabet.end());
  for (size_t i = 0; i < schema_text.size();) {
    const auto byte = static_cast<unsigned char>(schema_text[i]);
    const size_t len = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2;
    if (len > 1 && seen.insert(schema_text.substr(i, len)).second) alphabet.push_back(schema_text.substr(i, len));
    i += len;
  }
  return alphabet;
}

// One random string of the grammar; `error` says why there is none.
std::string random_walk(const std::shared_ptr<const Grammar>& grammar, const std::vector<std::string>& alphabet, std::mt19937_64& rng,
                        std::string& error) {
  static const std::array<std::string, 3> closers = {"\"", "}", "]"};
  Matcher matcher(grammar);
  std::string text;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<size_t> order(alphabet.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  while (text.size() < kMaxWalk) {
    const double length_bias = std::min(0.95, 0.05 + static_cast<double>(text.size()) / 300.0);
    if (matcher.can_end() && unit(rng) < 0.3 + length_bias) return text;
    std::string chosen;
    if (unit(rng) < length_bias) {
      std::array<std::string, 3> shuffled = closers;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (const std::string& c : shuffled)
        if (matcher.allows(c)) {
          chosen = c;
          break;
        }
    }
    if (chosen.empty()) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t index : order)
        if (matcher.allows(alphabet[index])) {
          chosen = alphabet[index];
          break;
        }
    }
    if (chosen.empty()) {
      if (matcher.can_end()) return text;
      error = "dead end after: " + text;
      return "";
    }
    if (!matcher.accept(chosen)) {
      error = "accept() refused what allows() allowed after: " + text;
      return "";
    }
    text += chosen;
  }
  error = "the walk did not end within " + std::to_string(kMaxWalk) + " bytes";
  return "";
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(SchemaCorpus, RandomInstancesValidateWithJsonschema) {
  const auto files = corpus_files();
  ASSERT_GE(files.size(), 110u);
  Json cases = Json::array();
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    const std::string schema_text = read_text(file);
    const Json schema = Json::parse(schema_text);
    std::string gbnf;
    ASSERT_NO_THROW(gbnf = json_schema_to_gbnf(schema));
    std::shared_ptr<const Grammar> grammar;
    ASSERT_NO_THROW(grammar = Grammar::parse(gbnf)) << gbnf;
    const auto alphabet = alphabet_for(schema_text);
    std::mt19937_64 rng(std::hash<std::string>{}(file.filename().string()));
    for (int n = 0; n < kInstancesPerSchema; ++n) {
      std::string error;
      const std::string instance = random_walk(grammar, alphabet, rng, error);
      ASSERT_TRUE(error.empty()) << error << "\n" << gbnf;
      // Strict JSON for nlohmann too (the server parses tool arguments with it).
      EXPECT_TRUE(Json::accept(instance)) << instance;
      cases.push_back({{"schema", file.string()}, {"instance", instance}});
    }
  }
  const auto dir = test::make_temp_dir("schema_corpus");
  const auto input = dir / "instances.json";
  std::ofstream(input) << cases.dump(1);
  const std::string command = "python3 " + (test::repo_dir() / "tests/grammar/schema_oracle.py").string() + " " + input.string() + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("checked " + std::to_string(cases.size())), std::string::npos) << output;
}

// Each corpus schema's grammar rejects a few strings that are not instances: the grammar is not
// trivially permissive (a schema that is `true` or `{}` accepts anything and is skipped).
TEST(SchemaCorpus, GrammarsRejectNonInstances) {
  for (const auto& file : corpus_files()) {
    const Json schema = Json::parse(read_text(file));
    if (schema == true || schema == Json::object() || schema.contains("$ref") || schema.contains("allOf")) continue;
    const auto grammar = Grammar::parse(json_schema_to_gbnf(schema));
    for (const char* text : {"", "{\"", "[1, 2", "nul", "\"unterminated"}) {
      Matcher matcher(grammar);
      EXPECT_FALSE(matcher.accept(text) && matcher.can_end()) << file.filename() << ": " << text;
    }
    if (schema.value("type", "") == "object" && schema.contains("additionalProperties") && schema["additionalProperties"] == false) {
      Matcher matcher(grammar);
      EXPECT_FALSE(matcher.accept(R"({"surely_not_a_declared_property": 1})") && matcher.can_end()) << file.filename();
    }
  }
}

}  // namespace
}  // namespace okapi::grammar
