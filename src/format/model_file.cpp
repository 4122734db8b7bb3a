#include "format/model_file.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/mapped_file.hpp"
#include "format/llama2c.hpp"

namespace okapi::gguf {
namespace {

bool parses_as_checkpoint(std::span<const uint8_t> bytes) {
  try {
    (void)llama2c::Checkpoint::parse(bytes);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool parses_as_tokenizer(std::span<const uint8_t> bytes) {
  try {
    return !llama2c::read_tokenizer(bytes).tokens.empty();
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

File open_model(const std::filesystem::path& path) {
  require_input_file(path, "model");
  const std::string name = path.string();
  {
    const MappedFile probe(path);
    const std::span<const uint8_t> bytes = probe.bytes();
    if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0) {
      if (parses_as_checkpoint(bytes))
        throw_error("'{}' is a llama2.c checkpoint, not a GGUF model; convert it first: "
                    "okapi convert {} --tokenizer tokenizer.bin -o model.gguf",
                    name, name);
      if (parses_as_tokenizer(bytes))
        throw_error("'{}' is a llama2.c tokenizer.bin, not a model; give a GGUF model (okapi convert makes one "
                    "from a llama2.c checkpoint and this tokenizer)",
                    name);
      if (bytes.empty()) throw_error("model '{}' is empty (0 bytes), not a GGUF model", name);
      throw_error("'{}' is not a GGUF model (it does not start with \"GGUF\"); okapi runs GGUF files, and "
                  "okapi convert turns llama2.c checkpoints into GGUF",
                  name);
    }
  }
  return File::open(path);
}

}  // namespace okapi::gguf
