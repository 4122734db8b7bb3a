// okapi serve over loopback with cpp-httplib's client: endpoints, OpenAI shapes, streaming,
// malformed requests, API keys, a client that disconnects mid-stream, and the drain on SIGTERM.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <csignal>
#include <future>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"
#include "server/server.hpp"
#include "support/paths.hpp"

namespace okapi::server {
namespace {

using Json = nlohmann::ordered_json;

class HttpTest : public ::testing::Test {
 protected:
  virtual void configure(ServeOptions&) {}
  void SetUp() override {
    ServeOptions o;
    o.model_path = (test::repo_dir() / "models" / "stories260K.gguf").string();
    o.port = 0;
    o.n_slots = 2;
    o.n_ctx = 512;
    o.engine.threads = 2;
    o.api_keys = {"secret"};
    o.metrics = true;
    o.alias = "stories";
    configure(o);
    std::promise<int> port;
    auto port_future = port.get_future();
    o.on_listening = [&port](int p) { port.set_value(p); };
    options_ = o;
    server_ = std::async(std::launch::async, [this] { return serve(options_); });
    port_ = port_future.get();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_bearer_token_auth("secret");
    client_->set_read_timeout(60, 0);
    for (int i = 0; i < 600; ++i) {
      auto r = client_->Get("/health");
      if (r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "server not ready";
  }
  void TearDown() override {
    std::raise(SIGTERM);
    ASSERT_EQ(server_.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    EXPECT_EQ(server_.get(), 0);
  }
  Json post(const std::string& path, const std::string& body, int expected_status) {
    auto r = client_->Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return {};
    EXPECT_EQ(r->status, expected_status) << path << ": " << r->body;
    return Json::parse(r->body, nullptr, false);
  }
  void expect_all_slots_idle() {
    for (int i = 0; i < 200; ++i) {
      auto r = client_->Get("/slots");
      ASSERT_TRUE(r);
      const Json slots = Json::parse(r->body);
      bool idle = true;
      for (const auto& s : slots) idle = idle && !s["is_processing"].get<bool>();
      if (idle) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    FAIL() << "a slot stayed busy";
  }

  ServeOptions options_;
  std::future<int> server_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpTest, ChatAndCompletionShapes) {
  const Json chat = post("/v1/chat/completions",
                         R"({"model": "x", "messages": [{"role": "user", "content": "Once upon a time"}],
                             "max_tokens": 8, "temperature": 0, "logprobs": true, "top_logprobs": 2})",
                         200);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["model"], "stories");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat["usage"]["completion_tokens"], 8);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"].size(), 8u);
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);

  const Json text = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0})", 200);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["usage"]["completion_tokens"], 6);
  // The same request again reuses its prompt from the slot.
  const Json again = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0})", 200);
  EXPECT_EQ(again["choices"][0]["text"], text["choices"][0]["text"]);
  EXPECT_GT(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);

  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "stories");
  const Json tokens = post("/tokenize", R"({"content": "Once upon a time"})", 200);
  const Json detok = post("/detokenize", Json({{"tokens", tokens["tokens"]}}).dump(), 200);
  EXPECT_EQ(detok["content"], "Once upon a time");
  const Json prompt = post("/apply-template", R"({"messages": [{"role": "user", "content": "hi"}]})", 200);
  EXPECT_EQ(prompt["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("okapi:tokens_predicted_total"), std::string::npos);
}

TEST_F(HttpTest, StreamingEndsWithDone) {
  std::string body;
  httplib::Headers headers;
  auto r = client_->Post(
      "/v1/chat/completions", headers,
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": true,
          "stream_options": {"include_usage": true}})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::string& s = r->body;
  EXPECT_EQ(s.rfind("data: [DONE]\n\n"), s.size() - 14);
  EXPECT_NE(s.find(R"("role":"assistant")"), std::string::npos);
  EXPECT_NE(s.find(R"("finish_reason":"length")"), std::string::npos);
  EXPECT_NE(s.find(R"("choices":[],"usage")"), std::string::npos);
}

TEST_F(HttpTest, MalformedRequestsGetOpenAiErrors) {
  EXPECT_EQ(post("/v1/chat/completions", "{", 400)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}", 400)["error"]["type"],
            "invalid_request_error");
  EXPECT_EQ(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "x"})", 400)
                ["error"]["param"],
            "max_tokens");
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "whatever": [1, 2]})", 200)["object"], "text_completion");
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "Once upon a time ";
  EXPECT_EQ(post("/v1/completions", Json({{"prompt", long_prompt}}).dump(), 400)["error"]["code"],
            "context_length_exceeded");
  EXPECT_EQ(post("/v1/nothing", "{}", 404)["error"]["code"], 404);
  EXPECT_EQ(post("/v1/chat/completions", std::string(9 << 20, ' '), 413)["error"]["code"], 413);
  httplib::Client anonymous("127.0.0.1", port_);
  auto r = anonymous.Post("/v1/completions", R"({"prompt": "hi"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "invalid_api_key");
  auto health = anonymous.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto page = anonymous.Get("/");
  ASSERT_TRUE(page);
  EXPECT_NE(page->body.find("<html"), std::string::npos);
  expect_all_slots_idle();
}

TEST_F(HttpTest, ClientThatDisconnectsFreesItsSlot) {
  {
    httplib::Client quitter("127.0.0.1", port_);
    quitter.set_bearer_token_auth("secret");
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt": "Once upon a time", "max_tokens": 100000, "ignore_eos": true, "stream": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    quitter.send(req);
    EXPECT_GE(chunks, 3);
  }
  expect_all_slots_idle();
  // And the server keeps serving.
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})", 200)["usage"]["completion_tokens"], 2);
}

// --draft-model: every slot drafts with the model (here stories260K itself); the text is the
// plain server's, and the timings count drafts.
class SpeculativeHttpTest : public HttpTest {
 protected:
  void configure(ServeOptions& o) override {
    o.drafting.draft_model = o.model_path;
    o.drafting.draft_max = 4;
  }
};

TEST_F(SpeculativeHttpTest, DraftModelServesTheSameText) {
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0})";
  const Json drafted = post("/v1/completions", body, 200);
  EXPECT_GT(drafted["timings"]["draft_n"].get<int>(), 0);
  EXPECT_GT(drafted["timings"]["draft_n_accepted"].get<int>(), 0);
  const Json props = Json::parse(client_->Get("/props")->body);
  EXPECT_EQ(props["speculative"], "draft model");
  // The scheduler's plain path on the same prompt, through the library (no drafter).
  runtime::EngineOptions eo;
  eo.threads = 1;
  auto engine = runtime::Engine::load(options_.model_path, eo);
  runtime::SchedulerOptions so;
  so.n_ctx_per_slot = 256;
  runtime::Scheduler plain(*engine, so);
  runtime::SequenceRequest r;
  tokenizer::EncodeOptions encode;
  encode.parse_special = true;
  r.prompt = engine->tokenizer().encode("Once upon a time", encode);
  r.sampling.temperature = 0;
  r.max_tokens = 32;
  auto job = plain.submit(r);
  std::string text;
  std::vector<runtime::SequenceEvent> events;
  while (job->take_events(events, std::chrono::milliseconds(50))) {
    for (const auto& e : events) text += e.text;
    events.clear();
  }
  EXPECT_EQ(drafted["choices"][0]["text"], text);
}

}  // namespace
}  // namespace okapi::server
