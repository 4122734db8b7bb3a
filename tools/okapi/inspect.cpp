// okapi inspect FILE [--json] [--full-arrays]: the metadata and tensor table of a GGUF file
// (like llama.cpp's gguf-dump), or the header and tensor layout of a llama2.c checkpoint /
// tokenizer.bin.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_output.hpp"
#include "format/gguf.hpp"
#include "inspect_llama2c.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

using nlohmann::ordered_json;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? " x " : "", shape[i]);
  return s;
}

ordered_json value_to_json(const gguf::Value& v, bool full_arrays) {
  if (v.is_array()) {
    const auto& arr = v.as_array();
    ordered_json out;
    out["type"] = "array";
    out["element_type"] = std::string(gguf::value_type_name(arr.element_type));
    out["count"] = arr.items.size();
    const size_t n = full_arrays ? arr.items.size() : std::min<size_t>(arr.items.size(), 8);
    ordered_json items = ordered_json::array();
    for (size_t i = 0; i < n; ++i) items.push_back(value_to_json(arr.items[i], full_arrays));
    out[full_arrays ? "items" : "first_items"] = std::move(items);
    return out;
  }
  switch (v.type()) {
    case gguf::ValueType::STRING: return v.as_string();
    case gguf::ValueType::BOOL: return v.as_bool();
    case gguf::ValueType::F32:
    case gguf::ValueType::F64: return v.as_double();
    case gguf::ValueType::U64: return v.as_uint();
    default: return v.as_int();
  }
}

ordered_json gguf_to_json(const gguf::File& file, bool full_arrays) {
  ordered_json out;
  out["file"] = file.name();
  out["format"] = "gguf";
  out["version"] = file.version();
  out["file_size"] = file.file_size();
  out["alignment"] = file.alignment();
  out["data_offset"] = file.data_offset();
  ordered_json meta = ordered_json::array();
  for (const auto& kv : file.metadata()) {
    ordered_json m;
    m["key"] = kv.key;
    m["type"] = std::string(gguf::value_type_name(kv.value.type()));
    m["value"] = value_to_json(kv.value, full_arrays);
    meta.push_back(std::move(m));
  }
  out["metadata"] = std::move(meta);
  ordered_json tensors = ordered_json::array();
  for (const auto& t : file.tensors()) {
    ordered_json j;
    j["name"] = t.name;
    j["type"] = std::string(dtype_name(t.type));
    j["shape"] = t.shape;
    j["n_elements"] = t.n_elements();
    j["offset"] = t.file_offset;
    j["bytes"] = t.nbytes;
    tensors.push_back(std::move(j));
  }
  out["tensors"] = std::move(tensors);
  return out;
}

void print_gguf(const gguf::File& file, bool full_arrays) {
  fmt::print("* File: {}\n", file.name());
  fmt::print("* GGUF v{}, {} bytes, alignment {}, data at offset {}\n", file.version(), file.file_size(),
             file.alignment(), file.data_offset());
  fmt::print("* Metadata: {} key/value pairs\n", file.metadata().size());
  fmt::print("  {:>4}  {:<44} {:<14} {}\n", "#", "key", "type", "value");
  int index = 1;
  for (const auto& kv : file.metadata()) {
    std::string type(gguf::value_type_name(kv.value.type()));
    if (kv.value.is_array()) {
      const auto& arr = kv.value.as_array();
      type = fmt::format("[{}; {}]", gguf::value_type_name(arr.element_type), arr.items.size());
    }
    fmt::print("  {:>4}  {:<44} {:<14} {}\n", index++, kv.key, type, kv.value.to_display(full_arrays ? SIZE_MAX : 8));
  }
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;
  for (const auto& t : file.tensors()) {
    total_bytes += t.nbytes;
    total_elements += t.n_elements();
  }
  fmt::print("* Tensors: {} ({} parameters, {} bytes of data)\n", file.tensors().size(), total_elements,
             total_bytes);
  fmt::print("  {:>4}  {:<36} {:<8} {:<24} {:>12} {:>12}\n", "#", "name", "type", "shape", "offset", "bytes");
  index = 1;
  for (const auto& t : file.tensors()) {
    fmt::print("  {:>4}  {:<36} {:<8} {:<24} {:>12} {:>12}\n", index++, t.name, dtype_name(t.type),
               shape_string(t.shape), t.file_offset, t.nbytes);
  }
}

bool has_gguf_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[4] = {};
  const size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && std::string(magic, 4) == "GGUF";
}

}  // namespace

void register_inspect(CLI::App& app, VerbResult& result) {
  struct InspectArgs {
    std::string path;
    bool json = false;
    bool full_arrays = false;
  };
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Show the metadata and tensor table of a model file");
  auto* positional = cmd->add_option("file", args->path, "GGUF file, llama2.c checkpoint (.bin) or tokenizer.bin");
  auto* model = cmd->add_option("-m,--model", args->path, "the same as FILE (as the other verbs name a model)");
  positional->excludes(model);
  model->excludes(positional);
  cmd->add_flag("--json", args->json, "Print JSON instead of tables");
  cmd->add_flag("--full-arrays", args->full_arrays, "Include every element of array values (JSON and tables)");
  cmd->callback([args, &result] {
    if (args->path.empty()) throw_usage_error("inspect: a file is required: okapi inspect FILE (or -m FILE)");
    if (result.dry_run) return;
    const std::string& path = args->path;
    const bool json = args->json;
    const bool full_arrays = args->full_arrays;
    require_input_file(path, "file");
    if (!has_gguf_magic(path)) {
      inspect_llama2c(path, json);
      return;
    }
    const auto file = gguf::File::open(path);
    if (json) {
      fmt::print("{}\n", dump_json(gguf_to_json(file, full_arrays), 2));
    } else {
      print_gguf(file, full_arrays);
    }
  });
}

}  // namespace okapi::cli
