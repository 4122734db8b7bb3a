// The opt-in host tools' pieces: glob matching (as llama-server's, without its exponential
// backtracking), the MCP servers config (every malformed shape a clear error), and child
// processes (a command that cannot run is an error; killing one kills what it started; none is
// left a zombie).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "server/mcp.hpp"
#include "server/subprocess.hpp"
#include "server/tools_builtin.hpp"

namespace okapi::server {
namespace {

TEST(ToolsGlob, MatchesAsLlamaServer) {
  EXPECT_TRUE(glob_match("*.cpp", "main.cpp"));
  EXPECT_FALSE(glob_match("*.cpp", "src/main.cpp"));  // '*' stops at '/'
  EXPECT_TRUE(glob_match("**/*.cpp", "src/a/main.cpp"));
  EXPECT_TRUE(glob_match("**", "a/b/c"));
  EXPECT_TRUE(glob_match("**/x", "x"));  // "**/" may match nothing
  EXPECT_TRUE(glob_match("src/**/*.c", "src/a.c"));
  EXPECT_TRUE(glob_match("src/**/*.c", "src/a/b/a.c"));
  EXPECT_FALSE(glob_match("src/**/*.c", "srcx/a.c"));
  EXPECT_TRUE(glob_match("src/**", "src/a/b"));
  EXPECT_TRUE(glob_match("?.txt", "a.txt"));
  EXPECT_FALSE(glob_match("?.txt", "/.txt"));
  EXPECT_TRUE(glob_match("[a-c]x", "bx"));
  EXPECT_FALSE(glob_match("[a-c]x", "dx"));
  EXPECT_TRUE(glob_match("[!a-c]x", "dx"));
  EXPECT_TRUE(glob_match("[]]x", "]x"));
  EXPECT_TRUE(glob_match("a[", "a["));  // an unclosed class is a literal '['
  EXPECT_TRUE(glob_match("*proj*", "project-alpha"));
  EXPECT_FALSE(glob_match("", "a"));
  EXPECT_TRUE(glob_match("", ""));
}

TEST(ToolsGlob, HostilePatternIsFast) {
  std::string pattern;
  for (int i = 0; i < 200; ++i) pattern += "*a";
  pattern += "b";
  const std::string text(2000, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(glob_match(pattern, text));
  EXPECT_FALSE(glob_match(std::string(400, '*') + "**b", std::string(3000, '/')));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

std::string config_error(const std::string& text) {
  try {
    parse_mcp_config(text, "test");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(McpConfig, ParsesCursorShape) {
  const auto servers = parse_mcp_config(
      R"({"mcpServers": {"fs": {"command": "node", "args": ["a", "b"], "env": {"K": "v"}, "cwd": "/tmp",
          "timeout_ms": 500}, "nocommand": {"args": []}}})",
      "test");
  ASSERT_EQ(servers.size(), 1u);  // an entry without a command is skipped
  EXPECT_EQ(servers[0].name, "fs");
  EXPECT_EQ(servers[0].command, "node");
  EXPECT_EQ(servers[0].args, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(servers[0].env.size(), 1u);
  EXPECT_EQ(servers[0].env[0].second, "v");
  EXPECT_EQ(servers[0].cwd, "/tmp");
  EXPECT_EQ(servers[0].timeout_ms, 500);
  EXPECT_TRUE(parse_mcp_config("{}", "test").empty());
}

TEST(McpConfig, MalformedIsAClearError) {
  EXPECT_NE(config_error("not valid json").find("test: the MCP servers config is not JSON"), std::string::npos);
  EXPECT_NE(config_error("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": []})").find("\"mcpServers\" must be an object"), std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": 1}})").find("MCP server 'a' must be an object"), std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": {"command": 5}}})").find("\"command\" must be a string"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": {"command": "x", "args": "y"}}})").find("\"args\""), std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": {"command": "x", "env": {"A=B": "c"}}}})").find("\"env\""),
            std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": {"command": "x", "timeout_ms": 0}}})").find("timeout_ms"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"mcpServers": {"a": {"command": "x", "timeout_ms": 1.5}}})").find("timeout_ms"),
            std::string::npos);
}

TEST(ChildProcess, ACommandThatCannotRunIsAnError) {
  SpawnOptions options;
  options.argv = {"okapi-no-such-command-12345"};
  try {
    ChildProcess child(options);
    FAIL() << "spawned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run 'okapi-no-such-command-12345'"), std::string::npos);
  }
  options.argv = {"true"};
  options.cwd = "/nonexistent-okapi-dir";
  EXPECT_THROW(ChildProcess{options}, Error);
}

TEST(ChildProcess, OutputEnvironmentAndExitStatus) {
  SpawnOptions options;
  options.argv = {"sh", "-c", "echo \"$OKAPI_TOOLS_TEST\"; echo err >&2; exit 7"};
  options.env = {{"OKAPI_TOOLS_TEST", "value"}};
  options.combine_stderr = true;
  ChildProcess child(options);
  child.close_stdin();
  std::string out;
  while (ChildProcess::read_some(child.stdout_fd(), out, std::chrono::milliseconds(100))) {
  }
  EXPECT_EQ(out, "value\nerr\n");
  while (child.running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(child.finish(), 7);
}

TEST(ChildProcess, KillingTheGroupKillsGrandchildrenAndReaps) {
  const std::string pidfile = ::testing::TempDir() + "okapi_tools_test_grandchild.pid";
  SpawnOptions options;
  options.argv = {"sh", "-c", "sleep 60 & echo $! > '" + pidfile + "'; sleep 60"};
  pid_t pid = -1;
  {
    ChildProcess child(options);
    pid = child.pid();
    for (int i = 0; i < 200 && !std::ifstream(pidfile).good(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(child.running());
    EXPECT_EQ(child.finish(), 128 + SIGKILL);
  }
  // Reaped: no zombie of ours is left to wait for.
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  pid_t grandchild = 0;
  std::ifstream(pidfile) >> grandchild;
  ASSERT_GT(grandchild, 0);
  // Killed (a zombie until whoever adopted it reaps it).
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
    std::string pid_text, name, state;
    gone = !(stat >> pid_text >> name >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  std::remove(pidfile.c_str());
}

}  // namespace
}  // namespace okapi::server
