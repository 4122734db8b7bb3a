// llama.cpp's quantizer and importance-matrix tool as references for okapi's formats: files
// quantized by ../shared/peers/llama-quantize (optionally with an importance matrix from
// ../shared/peers/llama-imatrix) are what okapi must read, and the bytes okapi's quantizer must write.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace okapi::test {

std::filesystem::path peer_quantize_tool();  // ../shared/peers/llama-quantize
std::filesystem::path peer_imatrix_tool();   // ../shared/peers/llama-imatrix

// llama-quantize [extra_args...] [--imatrix imatrix] input output type 1 (one thread, so the output
// does not depend on the machine). `type` is a mix or type name as llama-quantize takes it
// ("IQ2_XXS", "Q4_K_M", "MXFP4_MOE"). Throws std::runtime_error with the tool's output on failure.
void peer_quantize(const std::filesystem::path& input, const std::filesystem::path& output, const std::string& type,
                   const std::filesystem::path& imatrix = {}, const std::vector<std::string>& extra_args = {});

// llama-imatrix -m model -f text -o output -c ctx [extra_args...] (2 threads). Throws
// std::runtime_error with the tool's output on failure.
void peer_imatrix(const std::filesystem::path& model, const std::filesystem::path& text,
                  const std::filesystem::path& output, int ctx = 128, const std::vector<std::string>& extra_args = {});

// A text of `n_words` ordinary words (deterministic) written to `path` for imatrix runs; returns path.
std::filesystem::path write_calibration_text(const std::filesystem::path& path, int n_words = 2000);

}  // namespace okapi::test
