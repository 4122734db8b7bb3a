// The API key a request carries, as llama-server reads it: `Authorization: Bearer KEY`, a bare
// `Authorization: KEY`, or Anthropic's `x-api-key: KEY`.
#pragma once
#include <string>
#include <vector>

#include "server/http_server.hpp"

namespace okapi::server {

// True when `keys` is empty (no key needed) or the request's key is one of them. Keys are
// compared in time that does not depend on where they differ.
bool api_key_accepted(const http::Request& req, const std::vector<std::string>& keys);

}  // namespace okapi::server
