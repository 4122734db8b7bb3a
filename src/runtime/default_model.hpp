// The model `okapi run` uses when no -m is given: the repository's models/stories260K.gguf,
// found from $OKAPI_MODEL, or by walking up from the executable's folder (build-*/okapi -> repo).
#pragma once
#include <filesystem>

namespace okapi::runtime {

// Throws okapi::Error listing where it looked when no default model is found.
std::filesystem::path default_model_path();

}  // namespace okapi::runtime
