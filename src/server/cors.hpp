// CORS as llama-server answers it (tools/server/server-http.cpp): every response to a request with
// an Origin the policy allows names that origin in Access-Control-Allow-Origin; a preflight
// (OPTIONS) is answered 200 at once with the credentials, methods and headers allowed. An origin
// the policy does not allow gets no CORS headers, so a browser keeps the page from reading the
// response.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::server {

struct CorsPolicy {
  // "*": any origin; "localhost": http(s) origins on localhost, 127.0.0.1 or [::1], any port;
  // anything else: that origin exactly. Empty: no origin.
  std::vector<std::string> origins = {"*"};
  std::string methods = "GET, POST, DELETE, OPTIONS";
  std::string headers = "*";
  bool credentials = true;
};

// The origins okapi serve allows when --cors-origins is not given: any (llama-server's default),
// or only localhost pages while server tools (which touch the host) are on.
std::vector<std::string> default_cors_origins(bool server_tools_enabled);

// True for an Origin whose host is localhost, 127.0.0.1 or ::1 (http or https, any port), as
// llama-server's origin_is_localhost; "http://localhost.evil.com" is not.
bool is_localhost_origin(std::string_view origin);

// What Access-Control-Allow-Origin says to a request from `origin`, or nothing when the policy
// does not allow it. With credentials, "*" reflects the origin (a browser refuses "*" then).
std::optional<std::string> cors_allow_origin(const CorsPolicy& policy, std::string_view origin);

// The headers to add to a response to a request from `origin` (empty: none); `preflight` adds
// the credentials, methods and headers allowed.
std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& policy, std::string_view origin,
                                                              bool preflight);

}  // namespace okapi::server
