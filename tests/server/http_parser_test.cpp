// The HTTP/1.1 request parser: requests split anywhere parse the same; lengths, codings and header
// blocks are checked strictly (no two readings of one request) and refused as early as possible.
#include "server/http_parser.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace okapi::server::http {
namespace {

using namespace std::string_literals;

struct Outcome {
  std::vector<Request> requests;
  int error = 0;  // the status of the error that ended parsing, or 0
  size_t consumed = 0;
};

// Feeds `bytes` in pieces of `piece` bytes (0: all at once), taking every complete request.
Outcome parse(const std::string& bytes, size_t piece = 0, ParseLimits limits = {}) {
  RequestParser parser(limits);
  Outcome out;
  std::string pending;
  size_t offset = 0;
  while (offset < bytes.size() || !pending.empty()) {
    if (offset < bytes.size()) {
      const size_t n = piece == 0 ? bytes.size() - offset : std::min(piece, bytes.size() - offset);
      pending += bytes.substr(offset, n);
      offset += n;
    }
    const size_t used = parser.feed(pending);
    out.consumed += used;
    pending.erase(0, used);
    if (parser.state() == RequestParser::State::Error) {
      out.error = parser.error_status();
      return out;
    }
    if (parser.state() == RequestParser::State::Complete) {
      out.requests.push_back(parser.take());
      continue;
    }
    if (used == 0 && offset >= bytes.size()) break;
  }
  return out;
}

TEST(HttpParser, GetWithHeaders) {
  const auto out = parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \t\r\n\r\n");
  ASSERT_EQ(out.requests.size(), 1u);
  const Request& r = out.requests[0];
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "x=1");
  EXPECT_EQ(r.header("host"), "a");
  EXPECT_EQ(r.header("x-thing"), "spaced value");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_TRUE(r.body.empty());
}

TEST(HttpParser, KeepAliveRules) {
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").requests.at(0).keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").requests.at(0).keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").requests.at(0).keep_alive);
  // Bare LF line endings are read as CRLF (RFC 9112 allows it).
  EXPECT_EQ(parse("GET /a HTTP/1.1\nHost: x\n\n").requests.at(0).path, "/a");
}

TEST(HttpParser, SplitAnywhereParsesTheSame) {
  const std::string two =
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 12\r\nContent-Type: application/json\r\n\r\n{\"prompt\":1}"
      "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n2\r\nef\r\n0\r\nTrailer: t\r\n\r\n";
  const auto whole = parse(two);
  ASSERT_EQ(whole.error, 0);
  ASSERT_EQ(whole.requests.size(), 2u);
  EXPECT_EQ(whole.requests[0].body, "{\"prompt\":1}");
  EXPECT_EQ(whole.requests[1].body, "abcdef");
  for (const size_t piece : {1, 2, 3, 7, 13}) {
    const auto split = parse(two, piece);
    ASSERT_EQ(split.requests.size(), 2u) << piece;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(split.requests[i].path, whole.requests[i].path);
      EXPECT_EQ(split.requests[i].body, whole.requests[i].body);
    }
  }
}

TEST(HttpParser, ContentLengthMustBeOneDecimalNumber) {
  const auto status_of = [](const std::string& value) {
    return parse("POST / HTTP/1.1\r\nContent-Length: " + value + "\r\n\r\nabcdef").error;
  };
  EXPECT_EQ(status_of("-5"), 400);
  EXPECT_EQ(status_of("+5"), 400);
  EXPECT_EQ(status_of("5x"), 400);
  EXPECT_EQ(status_of("0x10"), 400);
  EXPECT_EQ(status_of(""), 400);
  EXPECT_EQ(status_of("5, 6"), 400);
  EXPECT_EQ(status_of("3, 3"), 0);
  EXPECT_EQ(status_of("99999999999999999999999"), 413);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd").error, 400);
}

TEST(HttpParser, OversizedBodyIsRefusedBeforeItArrives) {
  ParseLimits limits;
  limits.max_body_bytes = 100;
  RequestParser parser(limits);
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
  EXPECT_EQ(parser.feed(head), head.size());
  EXPECT_EQ(parser.state(), RequestParser::State::Error);
  EXPECT_EQ(parser.error_status(), 413);
  // Chunked bodies are counted as they come.
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'a') + "\r\n40\r\n",
                  0, limits)
                .error,
            413);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", 0, limits).error, 413);
}

TEST(HttpParser, AmbiguousFramingIsRefused) {
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").error, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").error, 501);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n").error, 501);
  EXPECT_EQ(parse("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").error, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").error, 400);
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost : a\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nNoColon\r\n\r\n").error, 400);
}

TEST(HttpParser, RequestLines) {
  EXPECT_EQ(parse("GET / HTTP/2.0\r\n\r\n").error, 505);
  EXPECT_EQ(parse("GET / HTTX/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET  / HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET /a b HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("G(T / HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET nopath HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET /\x01 HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GARBAGE \x00\x01\x02 nonsense\r\n\r\n"s).error, 400);
  EXPECT_EQ(parse("GET /a%2Fb%20c HTTP/1.1\r\n\r\n").requests.at(0).path, "/a/b c");
  EXPECT_EQ(parse("GET /a%2 HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET /a%00 HTTP/1.1\r\n\r\n").error, 400);
  EXPECT_EQ(parse("GET http://host:8080/health?x HTTP/1.1\r\n\r\n").requests.at(0).path, "/health");
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\n\r\n").requests.at(0).path, "*");
  // Empty lines before a request are skipped.
  EXPECT_EQ(parse("\r\n\r\nGET /x HTTP/1.1\r\n\r\n").requests.at(0).path, "/x");
}

TEST(HttpParser, HeaderBlockLimits) {
  ParseLimits limits;
  limits.max_header_bytes = 256;
  limits.max_headers = 4;
  EXPECT_EQ(parse("GET /" + std::string(300, 'a') + " HTTP/1.1\r\n\r\n", 0, limits).error, 414);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 0, limits).error, 431);
  // Refused as soon as the limit is passed, even without a line end (a client trickling one
  // endless header).
  RequestParser parser(limits);
  parser.feed("GET / HTTP/1.1\r\nX: ");
  for (int i = 0; i < 300 && parser.state() != RequestParser::State::Error; ++i) parser.feed("a");
  EXPECT_EQ(parser.error_status(), 431);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ne: 5\r\n\r\n", 0, limits).error, 431);
}

TEST(HttpParser, ExpectContinue) {
  RequestParser parser;
  parser.feed("POST / HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(parser.state(), RequestParser::State::Body);
  EXPECT_TRUE(parser.expects_continue());
  parser.feed("hi");
  EXPECT_EQ(parser.state(), RequestParser::State::Complete);
  EXPECT_FALSE(parser.expects_continue());
  EXPECT_EQ(parser.take().body, "hi");
  EXPECT_FALSE(parser.started());
}

}  // namespace
}  // namespace okapi::server::http
