#include "core/error.hpp"

#include <atomic>
#include <cstdio>
#include <string_view>

namespace okapi {
namespace {

void print_warning(const std::string& message, Setting /*setting*/) {
  std::fprintf(stderr, "okapi: warning: %s\n", message.c_str());
}

std::atomic<WarningHandler> warning_handler{nullptr};

}  // namespace

WarningHandler set_warning_handler(WarningHandler handler) { return warning_handler.exchange(handler); }

void warn(const std::string& message, Setting setting) {
  const WarningHandler handler = warning_handler.load();
  (handler != nullptr ? handler : print_warning)(message, setting);
}

std::string_view setting_flag(Setting setting) {
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
    case Setting::Chunks: return "--chunks";
    case Setting::KlDivergence: return "--kl-divergence";
    case Setting::KvEvalTypes: return "--types";
    case Setting::BenchPrompt: return "-p";
    case Setting::BenchGenerate: return "-n";
    case Setting::BenchPromptGenerate: return "-pg";
    case Setting::BenchDepth: return "-d";
    case Setting::Repetitions: return "-r";
    case Setting::DraftSkip: return "--draft-skip";
    case Setting::DraftLength: return "--draft-min/--draft-max";
    case Setting::TrainData: return "--data";
    case Setting::Tokenizer: return "--tokenizer";
    case Setting::InitFrom: return "--init-from";
    case Setting::TrainContext: return "--ctx";
    case Setting::RunDirectory: return "--out";
    case Setting::Resume: return "--resume";
    case Setting::Steps: return "--steps";
    case Setting::TrainBatch: return "--batch";
    case Setting::Sequence: return "--seq";
    case Setting::Accumulation: return "--accum";
    case Setting::Warmup: return "--warmup";
    case Setting::LearningRate: return "--lr";
    case Setting::LearningRateMin: return "--lr-min";
    case Setting::WeightDecay: return "--weight-decay";
    case Setting::GradClip: return "--grad-clip";
    case Setting::TrainThreads: return "--threads";
    case Setting::BenchSteps: return "--bench-steps";
    case Setting::Ratio: return "--ratio";
    case Setting::Ranks: return "--ranks";
    case Setting::CompressMethod: return "--method";
    case Setting::Calibration: return "--calib";
    case Setting::Gauge: return "--gauge";
    case Setting::Pure: return "--pure";
    case Setting::OutputTensorType: return "--output-tensor-type";
    case Setting::TokenEmbeddingType: return "--token-embedding-type";
    case Setting::TensorType: return "--tensor-type";
    case Setting::Imatrix: return "--imatrix";
    case Setting::AllowRequantize: return "--allow-requantize";
    case Setting::Vocab: return "--vocab";
    case Setting::Layers: return "--layers";
  }
  return {};
}

}  // namespace okapi
