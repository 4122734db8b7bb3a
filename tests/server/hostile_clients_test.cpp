// okapi serve against clients that are slow, malformed or greedy, over raw sockets: a port in use
// is refused, slow clients do not stop /health or generation, bad lengths are answered before any
// body arrives, POSTs need a JSON content type, /health says 503 while draining, and hostile
// bodies do not leave the process holding their memory.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "server/server.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::server {
namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the server closes the connection or `timeout` passes.
std::string read_until_close(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  char buffer[65536];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left))) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

// One request on a new connection ("Connection: close" added); the raw response.
std::string round_trip(int port, const std::string& request, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  std::string response;
  if (send_all(fd, request)) response = read_until_close(fd, timeout);
  ::close(fd);
  return response;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string post_request(const std::string& path, const std::string& body, const std::string& content_type) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
  return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The body of a raw response, chunked transfer coding undone.
std::string body_of(const std::string& response) {
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return {};
  std::string rest = response.substr(head_end + 4);
  if (response.substr(0, head_end).find("Transfer-Encoding: chunked") == std::string::npos) return rest;
  std::string body;
  size_t pos = 0;
  while (pos < rest.size()) {
    const size_t line_end = rest.find("\r\n", pos);
    if (line_end == std::string::npos) break;
    const size_t size = std::stoul(rest.substr(pos, line_end - pos), nullptr, 16);
    if (size == 0) break;
    body += rest.substr(line_end + 2, size);
    pos = line_end + 2 + size + 2;
  }
  return body;
}

const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

class HostileClients : public ::testing::Test {
 protected:
  virtual void configure(ServeOptions&) {}
  void SetUp() override {
    ServeOptions o;
    o.model_path = (test::repo_dir() / "models" / "stories260K.gguf").string();
    o.port = 0;
    o.n_slots = 2;
    o.n_ctx = 512;
    o.engine.threads = 1;
    configure(o);
    std::promise<int> port;
    auto port_future = port.get_future();
    o.on_listening = [&port](int p) { port.set_value(p); };
    options_ = o;
    server_ = std::async(std::launch::async, [this] { return serve(options_); });
    port_ = port_future.get();
    for (int i = 0; i < 600; ++i) {
      if (status_of(round_trip(port_, kHealth)) == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "server not ready";
  }
  void TearDown() override {
    std::raise(SIGTERM);
    ASSERT_EQ(server_.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    EXPECT_EQ(server_.get(), 0);
  }

  ServeOptions options_;
  std::future<int> server_;
  int port_ = 0;
};

TEST(ServePort, APortInUseIsAnErrorNamingIt) {
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(holder, 16), 0);
  socklen_t size = sizeof(addr);
  ::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &size);
  const int port = ntohs(addr.sin_port);

  ServeOptions o;
  o.model_path = (test::repo_dir() / "models" / "stories260K.gguf").string();
  o.port = port;
  auto server = std::async(std::launch::async, [&o] {
    try {
      serve(o);
      return std::string("served");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
  if (server.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::raise(SIGTERM);  // it shares the port: stop it before failing
    server.wait();
    ::close(holder);
    FAIL() << "okapi serve started on port " << port << ", which another socket listens on";
  }
  const std::string message = server.get();
  ::close(holder);
  EXPECT_NE(message.find("port " + std::to_string(port) + " is already in use"), std::string::npos) << message;

  // The CLI: the same message, exit 1.
  const int holder2 = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(holder2, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(holder2, 16), 0);
  size = sizeof(addr);
  ::getsockname(holder2, reinterpret_cast<sockaddr*>(&addr), &size);
  const std::string port2 = std::to_string(ntohs(addr.sin_port));
  // (timeout: today's okapi would serve on it until killed)
  const auto cli = test::run_command("timeout 20 " + test::cli_path().string() + " serve --port " + port2 + " -m " +
                                     o.model_path);
  ::close(holder2);
  EXPECT_EQ(cli.exit_code, 1) << cli.output;
  EXPECT_NE(cli.output.find("okapi: error: cannot listen on 127.0.0.1:" + port2 + ": port " + port2 + " is already in use"),
            std::string::npos)
      << cli.output;
}

// The trained-context warning compares each slot's context (-c / -np) with the trained one, not
// -c's total: stories260K was trained on 2048.
TEST(ServeWarnings, SlotContextIsComparedWithTheTrainedContext) {
  const std::string serve = "timeout 4 " + test::cli_path().string() + " serve --port 0 -m " +
                            (test::repo_dir() / "models" / "stories260K.gguf").string();
  const auto shared = test::run_command(serve + " -c 8192 -np 4");  // 2048 each: no warning
  EXPECT_EQ(shared.output.find("beyond the model's trained context"), std::string::npos) << shared.output;
  EXPECT_NE(shared.output.find("serving (4 slots)"), std::string::npos) << shared.output;
  const auto beyond = test::run_command(serve + " -c 8192 -np 2");  // 4096 each
  EXPECT_NE(beyond.output.find("a context of 4096 tokens is beyond the model's trained context (2048); quality will "
                               "degrade (-c/-np)"),
            std::string::npos)
      << beyond.output;
}

// 300 connections each trickling one header byte a second (the issue's slowloris, scaled to the
// test's time): /health answers at once and a completion completes. With a thread per
// connection, /health waited for the trickling ones to time out (40 s and more).
TEST_F(HostileClients, SlowClientsDoNotStopHealthOrGeneration) {
  std::vector<int> slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nX-Slow: "));
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop.load()) {
      for (const int fd : slow) ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<double> latencies_ms;
  for (int i = 0; i < 40; ++i) {
    const auto start = Clock::now();
    const std::string response = round_trip(port_, kHealth, std::chrono::seconds(3));
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    EXPECT_EQ(status_of(response), 200) << "request " << i << " after " << latencies_ms.back() << " ms";
  }
  const std::string completion = round_trip(
      port_, post_request("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8})", "application/json"),
      std::chrono::seconds(20));
  EXPECT_EQ(status_of(completion), 200) << completion.substr(0, 300);
  stop.store(true);
  trickle.join();
  for (const int fd : slow) ::close(fd);
  std::sort(latencies_ms.begin(), latencies_ms.end());
  // A functional bound (sanitizer builds are slow): nothing waits for the slow clients.
  EXPECT_LT(latencies_ms.back(), 2000.0) << "slowest /health";
}

// A bad or oversized Content-Length is answered from the headers: no body is ever sent here.
TEST_F(HostileClients, BadLengthsAreAnsweredBeforeTheBody) {
  for (const auto& [length, status] : std::vector<std::pair<std::string, int>>{
           {"-5", 400}, {"abc", 400}, {"5, 6", 400}, {"99999999999", 413}, {"99999999999999999999999999", 413}}) {
    const auto start = Clock::now();
    const std::string response =
        round_trip(port_,
                 "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                     length + "\r\n\r\n",
                 std::chrono::seconds(3));
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    EXPECT_EQ(status_of(response), status) << "Content-Length: " << length << ": " << response.substr(0, 200);
    EXPECT_LT(ms, 2000.0) << "Content-Length: " << length;
    EXPECT_NE(response.find("\"error\""), std::string::npos) << response;
  }
  // Headers that never end are cut off at the header limit, and the server goes on.
  const std::string huge = "GET /health HTTP/1.1\r\nX: " + std::string(64 * 1024, 'a') + "\r\n\r\n";
  EXPECT_EQ(status_of(round_trip(port_, huge)), 431);
  EXPECT_EQ(status_of(round_trip(port_, kHealth)), 200);
}

// A web page can POST text/plain or a form anywhere without a CORS preflight: only JSON is taken.
TEST_F(HostileClients, PostsNeedAJsonContentType) {
  const std::string body = R"({"prompt": "Once", "max_tokens": 1})";
  for (const std::string type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""}) {
    const std::string response = round_trip(port_, post_request("/v1/completions", body, type));
    EXPECT_EQ(status_of(response), 415) << "'" << type << "': " << response.substr(0, 300);
  }
  EXPECT_EQ(status_of(round_trip(port_, post_request("/v1/completions", body, "Application/JSON; charset=utf-8"))), 200);
  EXPECT_EQ(status_of(round_trip(port_, post_request("/tokenize", R"({"content": "hi"})", "text/plain"))), 415);
}

// A prompt that cannot fit is refused from its size, before it is tokenized.
TEST_F(HostileClients, APromptFarBeyondTheContextIsRefusedFromItsSize) {
  const nlohmann::json completion = {{"prompt", std::string(2 << 20, 'a')}, {"max_tokens", 1}};
  const nlohmann::json chat = {{"messages", {{{"role", "user"}, {"content", std::string(2 << 20, 'a')}}}}, {"max_tokens", 1}};
  for (const auto& [path, body] : {std::pair{"/v1/completions", completion}, std::pair{"/v1/chat/completions", chat}}) {
    const std::string response = round_trip(port_, post_request(path, body.dump(), "application/json"));
    EXPECT_EQ(status_of(response), 400) << path;
    EXPECT_NE(response.find("context_length_exceeded"), std::string::npos) << response.substr(0, 400);
    EXPECT_NE(response.find("resulted in at least"), std::string::npos) << response.substr(0, 400);
  }
}

// HEAD gets the headers of GET, Content-Length included, and no body (the connection stays usable).
TEST_F(HostileClients, HeadHasNoBody) {
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + kHealth));
  const std::string both = read_until_close(fd, std::chrono::seconds(5));
  ::close(fd);
  const size_t second = both.find("HTTP/1.1", 1);
  ASSERT_NE(second, std::string::npos) << both;
  const std::string head = both.substr(0, second);
  EXPECT_EQ(status_of(head), 200) << head;
  EXPECT_NE(head.find("Content-Length: 15"), std::string::npos) << head;
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << head;
  EXPECT_EQ(status_of(both.substr(second)), 200);
  EXPECT_NE(both.find("{\"status\":\"ok\"}"), std::string::npos);
}

TEST_F(HostileClients, DeepJsonIs400) {
  const std::string response =
      round_trip(port_, post_request("/v1/chat/completions", std::string(1'000'000, '['), "application/json"));
  EXPECT_EQ(status_of(response), 400) << response.substr(0, 300);
  EXPECT_NE(response.find("deeper than 128"), std::string::npos);
}

// Hostile bodies (deeply nested, large, many small values) one after another: the memory they
// took goes back, so the process stays within 2x of what it held before them.
TEST_F(HostileClients, HostileBodiesDoNotGrowMemory) {
  // Warm up every path once (first-use allocations are not retention).
  std::string numbers = "{\"prompt\": [";
  for (int i = 0; i < 400'000; ++i) numbers += "1,";
  numbers += "1], \"max_tokens\": 1}";
  const std::vector<std::string> bodies = {
      std::string(1'000'000, '['),
      "{\"prompt\": \"" + std::string(4 << 20, 'a') + "\", \"max_tokens\": 1}",
      numbers,
      "{\"messages\": [" + std::string(100, '{') + "}]}",
  };
  for (const auto& b : bodies) round_trip(port_, post_request("/v1/completions", b, "application/json"));
  const size_t idle = resident_bytes();
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i)
        round_trip(port_, post_request("/v1/completions", bodies[static_cast<size_t>(t + i) % bodies.size()], "application/json"),
                 std::chrono::seconds(30));
    });
  }
  for (auto& c : clients) c.join();
  const size_t after = resident_bytes();
  EXPECT_LT(after, 2 * idle) << "idle " << idle / 1024 << " KiB, after 32 hostile bodies " << after / 1024 << " KiB";
  EXPECT_EQ(status_of(round_trip(port_, kHealth)), 200);
}

// The prompt tokens of a one-message chat with this content.
int64_t prompt_tokens(int port, const std::string& content) {
  const nlohmann::json request = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 1}};
  const std::string response = round_trip(port, post_request("/v1/chat/completions", request.dump(), "application/json"));
  const auto body = nlohmann::json::parse(body_of(response), nullptr, false);
  if (!body.contains("usage")) return -1;
  return body["usage"]["prompt_tokens"].get<int64_t>();
}

// "</s>" typed into a message is text (several tokens), not the end-of-sequence token: a user
// cannot end or forge turns.
TEST_F(HostileClients, ControlTokenTextInMessagesStaysText) {
  const int64_t plain = prompt_tokens(port_, "hi there");
  const int64_t with_eos_text = prompt_tokens(port_, "hi </s> there");
  ASSERT_GT(plain, 0);
  // stories260K: "</s>" as text is 4 pieces (< / s >) after the space; as a control token 1 between two spaces.
  EXPECT_GE(with_eos_text - plain, 5) << "'</s>' in a message became a control token";
}

class SpecialInContentServer : public HostileClients {
 protected:
  void configure(ServeOptions& o) override { o.allow_special_in_content = true; }
};

TEST_F(SpecialInContentServer, AllowSpecialInContentRestoresTheOldReading) {
  const int64_t plain = prompt_tokens(port_, "hi there");
  const int64_t with_eos = prompt_tokens(port_, "hi </s> there");
  ASSERT_GT(plain, 0);
  EXPECT_LE(with_eos - plain, 3) << "'</s>' should be the end-of-sequence token with allow_special_in_content";
}

// While draining after SIGTERM, /health says 503 (a balancer stops sending) and the stream in
// flight goes on until a second signal.
class DrainingServer : public HostileClients {
 protected:
  void configure(ServeOptions& o) override {
    o.n_slots = 1;
    o.n_ctx = 16384;  // a long generation: it is still running when the signal comes
  }
};

TEST_F(DrainingServer, HealthIs503WhileDraining) {
  const int stream = connect_to(port_);
  ASSERT_TRUE(send_all(stream, post_request("/v1/completions",
                                            R"({"prompt": "Once", "max_tokens": 16000, "ignore_eos": true, "stream": true})",
                                            "application/json")));
  // The first event arrives: the job runs.
  std::string seen;
  char buffer[4096];
  while (seen.find("data: ") == std::string::npos) {
    pollfd p{stream, POLLIN, 0};
    ASSERT_GT(::poll(&p, 1, 10000), 0);
    const ssize_t n = ::recv(stream, buffer, sizeof(buffer), 0);
    ASSERT_GT(n, 0);
    seen.append(buffer, static_cast<size_t>(n));
  }
  std::raise(SIGTERM);
  int status = 0;
  for (int i = 0; i < 100 && status != 503; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    status = status_of(round_trip(port_, kHealth));
  }
  EXPECT_EQ(status, 503);
  std::raise(SIGTERM);  // cut the stream short
  read_until_close(stream, std::chrono::seconds(10));
  ::close(stream);
}

}  // namespace
}  // namespace okapi::server
