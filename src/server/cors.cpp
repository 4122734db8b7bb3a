#include "server/cors.hpp"

#include <algorithm>
#include <cctype>

namespace okapi::server {

std::vector<std::string> default_cors_origins(bool server_tools_enabled) {
  return {server_tools_enabled ? "localhost" : "*"};
}

bool is_localhost_origin(std::string_view origin) {
  std::string_view rest;
  if (origin.starts_with("http://"))
    rest = origin.substr(7);
  else if (origin.starts_with("https://"))
    rest = origin.substr(8);
  else
    return false;
  // An Origin is scheme://host[:port]: no path, user info or query that could hide another host.
  if (rest.find_first_of("/@?#\\ ") != std::string_view::npos) return false;
  std::string_view host, port;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host = rest.substr(1, close - 1);
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    port = rest;
  } else {
    const size_t colon = rest.find(':');
    host = rest.substr(0, colon);
    port = colon == std::string_view::npos ? std::string_view() : rest.substr(colon);
  }
  // `port` is empty or ":digits".
  if (!port.empty()) {
    port.remove_prefix(1);
    if (port.empty()) return false;
  }
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  std::string lower(host);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "localhost" || lower == "127.0.0.1" || lower == "::1";
}

std::optional<std::string> cors_allow_origin(const CorsPolicy& policy, std::string_view origin) {
  if (origin.empty()) return std::nullopt;
  for (const std::string& allowed : policy.origins) {
    if (allowed == "*") return policy.credentials ? std::string(origin) : std::string("*");
    if (allowed == "localhost" ? is_localhost_origin(origin) : allowed == origin) return std::string(origin);
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> cors_headers(const CorsPolicy& policy, std::string_view origin,
                                                              bool preflight) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto allowed = cors_allow_origin(policy, origin);
  if (!allowed) return out;
  out.emplace_back("Access-Control-Allow-Origin", *allowed);
  // The answer depends on the Origin: a cache must not give one origin's answer to another.
  if (*allowed != "*") out.emplace_back("Vary", "Origin");
  if (preflight) {
    out.emplace_back("Access-Control-Allow-Credentials", policy.credentials ? "true" : "false");
    out.emplace_back("Access-Control-Allow-Methods", policy.methods);
    out.emplace_back("Access-Control-Allow-Headers", policy.headers);
  }
  return out;
}

}  // namespace okapi::server
