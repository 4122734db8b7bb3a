// libFuzzer target for okapi serve's request parsing (src/server/request_params): any bytes as a
// chat or completions request body. Bodies come from HTTP clients, so the only allowed outcomes
// are parsed parameters or a server::ApiError with a 4xx status: a crash, a sanitizer report or
// any other exception is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "server/api_error.hpp"
#include "server/request_params.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const okapi::server::Json body = okapi::server::parse_body(text);
    for (const bool chat : {true, false}) {
      try {
        okapi::server::parse_generation_params(body, chat, {});
        if (chat) okapi::server::parse_chat_input(body);
      } catch (const okapi::server::ApiError& e) {
        if (e.status() < 400 || e.status() >= 500) std::abort();
      }
    }
  } catch (const okapi::server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
