#include "server/api_error.hpp"

#include <string_view>

#include "core/error.hpp"

namespace okapi::server {
namespace {

std::string_view server_flag_of(Setting setting) {
  switch (setting) {
    case Setting::None: return {};
    case Setting::ContextLength: return "-c";
    case Setting::BatchSize: return "-b";
    case Setting::Threads: return "-t";
    case Setting::Slots: return "-np";
    case Setting::CacheTypeK: return "-ctk";
    case Setting::CacheTypeV: return "-ctv";
    case Setting::KvRotation: return "--kv-rotate";
    case Setting::ExactAttention: return "--exact-attention";
    case Setting::ExactRing: return "--exact-ring";
    case Setting::Frobenius: return "--frobenius";
    case Setting::Chunks:  // not server settings
    case Setting::BenchDepth:
    case Setting::Repetitions: return {};
    case Setting::DraftSkip: return "--draft-skip";
    case Setting::DraftLength: return "--draft-min/--draft-max";
  }
  return {};
}

}  // namespace

std::string client_message(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  const std::string_view flag = error != nullptr ? server_flag_of(error->setting()) : std::string_view{};
  if (flag.empty()) return e.what();
  return fmt::format("{} (the server's {})", e.what(), flag);
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
