// inspect for files without GGUF magic: llama2.c checkpoints (legacy and "ak42" bitllama2.c)
// and tokenizer.bin vocabularies, described by format/llama2c.hpp.
#include "inspect_llama2c.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/json_output.hpp"
#include "format/llama2c.hpp"

namespace okapi::cli {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? " x " : "", shape[i]);
  return s;
}

// Token texts can hold newlines and raw bytes: show them escaped so the table stays a table.
std::string escape_for_table(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void print_json(const llama2c::Description& d, const std::string& path) {
  nlohmann::ordered_json out;
  out["file"] = path;
  out["format"] = d.kind;
  out["file_size"] = d.file_size;
  nlohmann::ordered_json fields = nlohmann::ordered_json::array();
  for (const auto& f : d.fields) fields.push_back({{"name", f.name}, {"value", f.value}, {"offset", f.offset}});
  out["header"] = std::move(fields);
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const auto& e : d.entries) {
    entries.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}, {"bytes", e.nbytes},
                       {"detail", e.detail}});
  }
  out["entries"] = std::move(entries);
  // Token texts may hold bytes that are not UTF-8: dump_json repairs them and says which.
  fmt::print("{}\n", dump_json(std::move(out), 2));
}

void print_table(const llama2c::Description& d, const std::string& path) {
  fmt::print("* File: {}\n* Format: {}, {} bytes\n", path, d.kind, d.file_size);
  fmt::print("* Header:\n");
  for (const auto& f : d.fields) fmt::print("  {:<24} {:>12}   (offset {})\n", f.name, f.value, f.offset);
  fmt::print("* Entries: {}\n", d.entries.size());
  fmt::print("  {:>5}  {:<36} {:<16} {:>12} {:>12}  {}\n", "#", "name", "shape", "offset", "bytes", "detail");
  int index = 1;
  for (const auto& e : d.entries) {
    fmt::print("  {:>5}  {:<36} {:<16} {:>12} {:>12}  {}\n", index++, escape_for_table(e.name), shape_string(e.shape), e.offset,
               e.nbytes, e.detail);
  }
}

}  // namespace

void inspect_llama2c(const std::string& path, bool json) {
  const auto description = llama2c::describe_file(path);
  if (json) {
    print_json(description, path);
  } else {
    print_table(description, path);
  }
}

}  // namespace okapi::cli
