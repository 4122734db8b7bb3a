// The router's pieces that need no process: the HTTP client's response parser (fed in pieces of
// every size, chunked and not, hostile input refused), INI presets, the --models-dir scan and the
// preset's merge with [*] and with the folder's models. The router itself runs in router.test.mjs.
#include "server/http_client.hpp"
#include "server/router.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace okapi::server {
namespace {

namespace fs = std::filesystem;
using http::ResponseParser;

// Feeds `bytes` in pieces of `piece` bytes; returns the body.
std::string feed_in_pieces(ResponseParser& parser, const std::string& bytes, size_t piece, bool close_at_end) {
  std::string body;
  for (size_t i = 0; i < bytes.size(); i += piece) parser.feed(std::string_view(bytes).substr(i, piece), body);
  if (close_at_end) parser.end_of_input();
  return body;
}

TEST(ResponseParser, LengthAndChunkedBodiesSplitAnywhere) {
  const std::string length = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"a\": true}";
  const std::string chunked =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
      "6\r\ndata: \r\n5;ext=1\r\nhello\r\n2\r\n\n\n\r\n0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t piece = 1; piece <= length.size(); ++piece) {
    ResponseParser parser;
    EXPECT_EQ(feed_in_pieces(parser, length, piece, false), "{\"a\": true}");
    ASSERT_EQ(parser.state(), ResponseParser::State::Complete) << piece;
    EXPECT_EQ(parser.head().status, 200);
    EXPECT_EQ(parser.head().header("content-type"), "application/json");
    EXPECT_FALSE(parser.chunked());
  }
  for (size_t piece = 1; piece <= chunked.size(); ++piece) {
    ResponseParser parser;
    EXPECT_EQ(feed_in_pieces(parser, chunked, piece, false), "data: hello\n\n") << piece;
    ASSERT_EQ(parser.state(), ResponseParser::State::Complete) << piece;
    EXPECT_TRUE(parser.chunked());
  }
}

TEST(ResponseParser, BodyUntilCloseAndNoBody) {
  ResponseParser until_close;
  EXPECT_EQ(feed_in_pieces(until_close, "HTTP/1.0 200 OK\r\n\r\nall of it", 3, true), "all of it");
  EXPECT_EQ(until_close.state(), ResponseParser::State::Complete);
  ResponseParser no_content;
  feed_in_pieces(no_content, "HTTP/1.1 204 No Content\r\n\r\n", 100, false);
  EXPECT_EQ(no_content.state(), ResponseParser::State::Complete);
  EXPECT_EQ(no_content.head().status, 204);
}

TEST(ResponseParser, RefusesMalformedAndCutShortResponses) {
  const std::string bad[] = {
      "SMTP 220 hello\r\n\r\n",
      "HTTP/1.1 2x0 OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
  };
  for (const auto& text : bad) {
    ResponseParser parser;
    std::string body;
    parser.feed(text, body);
    EXPECT_EQ(parser.state(), ResponseParser::State::Error) << text;
    EXPECT_FALSE(parser.error().empty());
  }
  ResponseParser cut;
  feed_in_pieces(cut, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 4, true);
  EXPECT_EQ(cut.state(), ResponseParser::State::Error);
  ResponseParser huge_head(1024);
  std::string body;
  huge_head.feed("HTTP/1.1 200 OK\r\nX: " + std::string(2000, 'a'), body);
  EXPECT_EQ(huge_head.state(), ResponseParser::State::Error);
  ResponseParser huge_chunk_line;
  huge_chunk_line.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(5000, '1'), body);
  EXPECT_EQ(huge_chunk_line.state(), ResponseParser::State::Error);
}

TEST(RouterIni, SectionsKeysCommentsAndErrors) {
  const auto sections = parse_ini("version = 1\n; note\n[*]\nc = 8192\n\n[a/b:Q8_0]\n# x\nchat-template = \"chatml\"\n"
                                  "c=4096\nc = 2048\n",
                                  "p.ini");
  ASSERT_EQ(sections.size(), 3u);
  EXPECT_EQ(sections[0].name, "");
  EXPECT_EQ(sections[0].keys[0], (std::pair<std::string, std::string>{"version", "1"}));
  EXPECT_EQ(sections[1].name, "*");
  EXPECT_EQ(sections[2].name, "a/b:Q8_0");
  ASSERT_EQ(sections[2].keys.size(), 2u);  // a repeated key: the last value
  EXPECT_EQ(sections[2].keys[0].second, "chatml");
  EXPECT_EQ(sections[2].keys[1].second, "2048");
  EXPECT_THROW(parse_ini("[unclosed\n", "p.ini"), Error);
  EXPECT_THROW(parse_ini("[ok]\njust words\n", "p.ini"), Error);
  EXPECT_THROW(parse_ini("[ok]\n= value\n", "p.ini"), Error);
}

class RouterFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fs::path("okapi-router-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models" / "big");
    fs::create_directories(dir_ / "models" / "vision");
    fs::create_directories(dir_ / "models" / "empty");
    for (const char* f : {"models/one.gguf", "models/mmproj-x.gguf", "models/notes.txt", "models/big/m-00002-of-00002.gguf",
                          "models/big/m-00001-of-00002.gguf", "models/vision/v-Q4_0.gguf", "models/vision/mmproj-F16.gguf"})
      std::ofstream(dir_ / f) << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RouterFiles, ModelsDirScan) {
  const auto models = scan_models_dir((dir_ / "models").string());
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].id, "big");
  EXPECT_EQ(fs::path(models[0].path).filename(), "m-00001-of-00002.gguf");  // a split model: its first shard
  EXPECT_EQ(models[1].id, "one");
  EXPECT_EQ(models[2].id, "vision");
  EXPECT_EQ(fs::path(models[2].path).filename(), "v-Q4_0.gguf");  // not the mmproj file
  for (const auto& m : models) EXPECT_EQ(m.source, "models_dir");
  EXPECT_THROW(scan_models_dir((dir_ / "missing").string()), Error);
}

TEST_F(RouterFiles, PresetMergesGlobalKeysAndConfiguresFolderModels) {
  const auto preset = dir_ / "p.ini";
  std::ofstream(preset) << "[*]\nc = 1024\ntemp = 0.5\n[one]\nc = 256\nload-on-startup = true\n"
                           "[extra]\nmodel = /m/extra.gguf\nport = 1\nstop-timeout = 3\n";
  RouterOptions options;
  options.models_dir = (dir_ / "models").string();
  options.models_preset = preset.string();
  const auto models = discover_models(options);
  ASSERT_EQ(models.size(), 4u);
  const auto& one = models[1];
  EXPECT_EQ(one.id, "one");
  EXPECT_EQ(one.source, "models_dir");
  EXPECT_EQ(fs::path(one.path).filename(), "one.gguf");
  EXPECT_TRUE(one.load_on_startup);
  EXPECT_EQ(one.options, (std::vector<std::pair<std::string, std::string>>{{"c", "256"}, {"temp", "0.5"}}));
  const auto& extra = models[3];
  EXPECT_EQ(extra.id, "extra");
  EXPECT_EQ(extra.source, "preset");
  EXPECT_EQ(extra.path, "/m/extra.gguf");
  EXPECT_EQ(extra.stop_timeout_s, 3);
  // The router's own keys (port, model, stop-timeout) are not flags of the child.
  EXPECT_EQ(extra.options, (std::vector<std::pair<std::string, std::string>>{{"c", "1024"}, {"temp", "0.5"}}));
  std::ofstream(preset) << "[nothing]\nc = 1\n";
  EXPECT_THROW(discover_models(options), Error);  // a preset that names no model
  std::ofstream(preset) << "[x]\nmodel = a\nstop-timeout = soon\n";
  EXPECT_THROW(discover_models(options), Error);
}

}  // namespace
}  // namespace okapi::server
