#include "server/api_error.hpp"

#include <string_view>

#include "core/error.hpp"

namespace okapi::server {
namespace {

std::string_view server_flag_of(Setting setting) {
  switch (setting) {
    case Setting::None: return {};
    case Setting::ContextLength: return "-c";
    case Setting::SlotContext: return "-c/-np";
    case Setting::BatchSize: return "-b";
    case Setting::Threads: return "-t";
    case Setting::Slots: return "-np";
    case Setting::CacheTypeK: return "-ctk";
    case Setting::CacheTypeV: return "-ctv";
    case Setting::CacheTypes: return "-ctk/-ctv";
    case Setting::KvRotation: return "--kv-rotate";
    case Setting::Exact: return "--exact";
    case Setting::ExactAttention: return "--exact-attention";
    case Setting::ExactRing: return "--exact-ring";
    case Setting::Frobenius: return "--frobenius";
    case Setting::Model: return "-m";
    case Setting::DraftSkip: return "--draft-skip";
    case Setting::DraftLength: return "--draft-min/--draft-max";
    // Not server settings: evaluation, training, compression, quantization, synthetic models.
    case Setting::Chunks:
    case Setting::KlDivergence:
    case Setting::KvEvalTypes:
    case Setting::BenchPrompt:
    case Setting::BenchGenerate:
    case Setting::BenchPromptGenerate:
    case Setting::BenchDepth:
    case Setting::Repetitions:
    case Setting::TrainData:
    case Setting::Tokenizer:
    case Setting::InitFrom:
    case Setting::TrainContext:
    case Setting::RunDirectory:
    case Setting::Resume:
    case Setting::Steps:
    case Setting::TrainBatch:
    case Setting::Sequence:
    case Setting::Accumulation:
    case Setting::Warmup:
    case Setting::LearningRate:
    case Setting::LearningRateMin:
    case Setting::WeightDecay:
    case Setting::GradClip:
    case Setting::TrainThreads:
    case Setting::BenchSteps:
    case Setting::Ratio:
    case Setting::Ranks:
    case Setting::CompressMethod:
    case Setting::Calibration:
    case Setting::Gauge:
    case Setting::Pure:
    case Setting::OutputTensorType:
    case Setting::TokenEmbeddingType:
    case Setting::Vocab:
    case Setting::Layers: return {};
  }
  return {};
}

}  // namespace

std::string client_message(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return e.what();
  const std::string_view flag = server_flag_of(error->setting());
  std::string text = flag.empty() ? std::string(e.what()) : fmt::format("{} (the server's {})", e.what(), flag);
  return text + remedy_advice(error->remedies(), [](Setting setting) {
           const std::string_view name = server_flag_of(setting);
           return name.empty() ? std::string() : fmt::format("the server's {}", name);
         });
}

nlohmann::ordered_json error_body(int status, const std::string& type, const std::string& message,
                                  const std::string& param, const std::string& code) {
  nlohmann::ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  error["code"] = code.empty() ? nlohmann::ordered_json(status) : nlohmann::ordered_json(code);
  nlohmann::ordered_json body;
  body["error"] = std::move(error);
  return body;
}

nlohmann::ordered_json ApiError::body() const { return error_body(status_, type_, what(), param_, code_); }

}  // namespace okapi::server
