#include "server/api_error.hpp"

#include <string_view>

#include "core/error.hpp"

namespace okapi::server {
namespace {

// The settings an operator gives `okapi serve` (evaluation, training, compression and the like are
// not): their flags are named to API clients.
std::string_view server_flag_of(Setting setting) {
  switch (setting) {
    case Setting::ContextLength:
    case Setting::SlotContext:
    case Setting::BatchSize:
    case Setting::Threads:
    case Setting::Slots:
    case Setting::CacheTypeK:
    case Setting::CacheTypeV:
    case Setting::CacheTypes:
    case Setting::KvRotation:
    case Setting::Exact:
    case Setting::ExactAttention:
    case Setting::ExactRing:
    case Setting::Frobenius:
    case Setting::Model:
    case Setting::DraftSkip:
    case Setting::DraftLength: return setting_flag(setting);
    default: return {};
  }
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

nlohmann::ordered_json ApiError::body() const {
  nlohmann::ordered_json body = error_body(status_, type_, what(), param_, code_);
  for (const auto& [key, value] : extra_.items()) body["error"][key] = value;
  return body;
}

}  // namespace okapi::server
