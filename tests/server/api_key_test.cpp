// The API key a request may carry: Bearer, a bare Authorization value, x-api-key (as llama-server).
#include <gtest/gtest.h>

#include "server/api_key.hpp"

namespace okapi::server {
namespace {

http::Request with_header(std::string name, std::string value) {
  http::Request req;
  req.headers.emplace_back(std::move(name), std::move(value));
  return req;
}

TEST(ApiKey, NoKeysAcceptsEveryRequest) { EXPECT_TRUE(api_key_accepted(http::Request{}, {})); }

TEST(ApiKey, BearerBareAndAnthropicHeadersCarryTheKey) {
  const std::vector<std::string> keys{"first", "sekrit"};
  EXPECT_TRUE(api_key_accepted(with_header("authorization", "Bearer sekrit"), keys));
  EXPECT_TRUE(api_key_accepted(with_header("authorization", "sekrit"), keys));
  EXPECT_TRUE(api_key_accepted(with_header("x-api-key", "first"), keys));
}

TEST(ApiKey, WrongMissingOrPartialKeysAreRefused) {
  const std::vector<std::string> keys{"sekrit"};
  EXPECT_FALSE(api_key_accepted(http::Request{}, keys));
  EXPECT_FALSE(api_key_accepted(with_header("authorization", "Bearer "), keys));
  EXPECT_FALSE(api_key_accepted(with_header("authorization", "Bearer sekri"), keys));
  EXPECT_FALSE(api_key_accepted(with_header("authorization", "Bearer sekrit2"), keys));
  EXPECT_FALSE(api_key_accepted(with_header("authorization", "bearer sekrit"), keys));
  EXPECT_FALSE(api_key_accepted(with_header("x-api-key", "SEKRIT"), keys));
  // A wrong Authorization is not rescued by a right x-api-key (Authorization is read first, as llama-server).
  http::Request both = with_header("authorization", "Bearer nope");
  both.headers.emplace_back("x-api-key", "sekrit");
  EXPECT_FALSE(api_key_accepted(both, keys));
}

}  // namespace
}  // namespace okapi::server
