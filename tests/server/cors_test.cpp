// CORS as llama-server answers it: which origins are reflected under each policy, the localhost
// keyword (any port, http or https; not a look-alike host), and the preflight's headers.
#include <gtest/gtest.h>

#include "server/cors.hpp"

namespace okapi::server {
namespace {

std::string header(const std::vector<std::pair<std::string, std::string>>& headers, const std::string& name) {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return "<none>";
}

TEST(Cors, LocalhostOriginsAreThoseOnTheLoopbackHostsAtAnyPort) {
  for (const char* origin : {"http://localhost", "http://localhost:8080", "https://localhost", "http://127.0.0.1",
                             "http://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000", "http://LocalHost:1"})
    EXPECT_TRUE(is_localhost_origin(origin)) << origin;
  for (const char* origin :
       {"http://web.mydomain.fr", "http://evil.com", "http://notlocalhost", "http://localhost.evil.com",
        "http://localhost@evil.com", "http://evil.com@localhost", "http://localhost/path", "http://localhost:80a",
        "http://localhost:", "ftp://localhost", "localhost", "http://[::1", "http://[::1]x", "http://127.0.0.1.evil.com",
        "http://localhost:123456", "", "null"})
    EXPECT_FALSE(is_localhost_origin(origin)) << origin;
}

TEST(Cors, TheDefaultReflectsAnyOriginWithCredentialsAsLlamaServer) {
  const CorsPolicy policy;  // llama-server's defaults
  EXPECT_EQ(cors_allow_origin(policy, "web.mydomain.fr"), "web.mydomain.fr");
  EXPECT_EQ(cors_allow_origin(policy, "localhost"), "localhost");
  EXPECT_EQ(cors_allow_origin(policy, ""), std::nullopt);  // no Origin: not a CORS request
  const auto preflight = cors_headers(policy, "http://a.example", true);
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Methods"), "GET, POST, DELETE, OPTIONS");
  EXPECT_EQ(header(preflight, "Access-Control-Allow-Headers"), "*");
  EXPECT_EQ(header(preflight, "Vary"), "Origin");
  // A plain request gets the origin only.
  const auto plain = cors_headers(policy, "http://a.example", false);
  EXPECT_EQ(header(plain, "Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(header(plain, "Access-Control-Allow-Credentials"), "<none>");

  CorsPolicy no_credentials;
  no_credentials.credentials = false;
  EXPECT_EQ(cors_allow_origin(no_credentials, "http://a.example"), "*");
  EXPECT_EQ(header(cors_headers(no_credentials, "http://a.example", true), "Access-Control-Allow-Credentials"), "false");
}

TEST(Cors, AListAllowsItsOriginsAndTheLocalhostKeywordOnly) {
  CorsPolicy policy;
  policy.origins = {"localhost", "https://app.example"};
  EXPECT_EQ(cors_allow_origin(policy, "http://127.0.0.1:3000"), "http://127.0.0.1:3000");
  EXPECT_EQ(cors_allow_origin(policy, "https://app.example"), "https://app.example");
  EXPECT_EQ(cors_allow_origin(policy, "https://app.example.evil"), std::nullopt);
  EXPECT_EQ(cors_allow_origin(policy, "http://localhost.evil.com"), std::nullopt);
  // A refused origin gets no CORS header at all, preflight or not.
  EXPECT_TRUE(cors_headers(policy, "http://evil.com", true).empty());
  EXPECT_TRUE(cors_headers(policy, "http://evil.com", false).empty());

  policy.origins.clear();
  EXPECT_EQ(cors_allow_origin(policy, "http://localhost"), std::nullopt);
}

TEST(Cors, ServerToolsMakeTheDefaultLocalhost) {
  EXPECT_EQ(default_cors_origins(false), std::vector<std::string>{"*"});
  EXPECT_EQ(default_cors_origins(true), std::vector<std::string>{"localhost"});
}

}  // namespace
}  // namespace okapi::server
