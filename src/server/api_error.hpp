// Errors as the OpenAI API shapes them: an HTTP status and
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Every request handler throws ApiError for what the client got wrong; the server turns it (and
// any other exception, as a 500) into that body.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace okapi::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // A further field of the error object (llama-server's n_prompt_tokens / n_ctx).
  ApiError& with(const std::string& key, nlohmann::ordered_json value) {
    extra_[key] = std::move(value);
    return *this;
  }
  nlohmann::ordered_json body() const;

 private:
  int status_;
  std::string type_, param_, code_;
  nlohmann::ordered_json extra_ = nlohmann::ordered_json::object();
};

// 400 invalid_request_error naming the offending parameter.
template <typename... Args>
[[noreturn]] void throw_bad_request(const std::string& param, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(400, "invalid_request_error", fmt::format(format, std::forward<Args>(args)...), param);
}

// What an API client is told of a library error (core/error.hpp): the fact, and the server flag
// behind the setting it blames, which the client cannot change but the operator can.
std::string client_message(const std::exception& e);

nlohmann::ordered_json error_body(int status, const std::string& type, const std::string& message,
                                  const std::string& param = {}, const std::string& code = {});

}  // namespace okapi::server
