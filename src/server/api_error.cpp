#include "server/api_error.hpp"

namespace okapi::server {

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
