// Anthropic's Messages API on okapi serve: POST /v1/messages (a message, or its event stream) and
// POST /v1/messages/count_tokens. A request is converted (anthropic_api.hpp) to the OpenAI body
// that start_generation reads; the job's text is read back by chat::StreamParser (thinking, text,
// tool calls) and written in Anthropic's shapes. Errors are Anthropic's shape too (dispatch()).
#include <algorithm>
#include <chrono>

#include "chat/chat_format.hpp"
#include "core/error.hpp"
#include "server/anthropic_api.hpp"
#include "server/server_state.hpp"

namespace okapi::server {
namespace {

void send_anthropic_error(Response& res, int status, const std::string& message) {
  if (status == 503) res.set_header("Retry-After", "1");
  send_json(res, status, anthropic::error_body(status, message));
}

// The request's Messages body as an OpenAI chat body (400s for its faults; 500 for an image, as
// llama-server answers without a projector).
Json converted_body(const Request& req, bool count_tokens) {
  Json body = anthropic::to_openai_chat(parse_body(req.body), count_tokens);
  if (anthropic::has_image(body)) throw ApiError(500, "api_error", anthropic::kNoImageInput);
  return body;
}

// A stream with nothing to say for this long gets a ping, so that clients and proxies that time
// out idle connections wait for a long prompt.
constexpr auto kPingInterval = std::chrono::seconds(10);

}  // namespace

// Errors thrown here are answered in Anthropic's shape by dispatch() (the /v1/messages paths).
void ServerState::add_anthropic_routes() {
  add_route("POST", "/v1/messages", [this](const Request& req, Response& res) { handle_anthropic_messages(req, res); });
  add_route("POST", "/v1/messages/count_tokens",
            [this](const Request& req, Response& res) { handle_anthropic_count_tokens(req, res); });
}

void ServerState::handle_anthropic_count_tokens(const Request& req, Response& res) {
  if (embeddings_mode()) refuse_generation();
  const Json body = converted_body(req, true);
  const AgentParams agent = parse_agent_params(body, true, options_.reasoning_format);
  ChatInput input = chat_input(body, agent);
  // The prompt a generation would run: with the plan's tool instruction where the family has one.
  AgentParams planned = agent;
  if (const auto it = input.template_kwargs.find("enable_thinking"); it != input.template_kwargs.end() && it->is_boolean())
    planned.chat.enable_thinking = it->get<bool>();
  runtime::SequenceRequest unused;
  add_plan_messages(input, plan_request(planned, true, render_chat(input), unused));
  send_json(res, 200, {{"input_tokens", chat_tokens(input).size()}});
}

void ServerState::handle_anthropic_messages(const Request& req, Response& res) {
  const Json body = converted_body(req, false);
  StartedGeneration started = start_generation(body, true, "msg_");
  const auto job = started.job;
  const std::vector<std::string> stop_sequences = started.params.stop;
  // The matched stop string when it is one of the request's (not a template's own stop).
  const auto stop_sequence_of = [stop_sequences](const runtime::SequenceEvent& event) {
    if (event.stop != runtime::StopReason::StopString) return std::string();
    return std::find(stop_sequences.begin(), stop_sequences.end(), event.stop_string) != stop_sequences.end()
               ? event.stop_string
               : std::string();
  };
  struct Progress {
    Progress(chat::ParseOptions options, ResponseHeader header)
        : parser(std::move(options), "toolu_"), stream(std::move(header)) {}
    chat::StreamParser parser;
    anthropic::MessageStream stream;
    std::string text;  // non-streaming: the whole output
    bool started = false;
    bool done = false;
    std::chrono::steady_clock::time_point last_write;
  };
  auto progress = std::make_shared<Progress>(started.plan.parse, started.header);
  cancel_when_cut(res, started);

  if (!started.params.stream) {
    // The whole message once the job has finished; the status can still say an error.
    res.await = [job, progress, header = started.header, stop_sequence_of](Response& r) {
      std::vector<runtime::SequenceEvent> events;
      job->take_events(events, std::chrono::milliseconds(100));
      for (const auto& event : events) {
        progress->text += event.text;
        if (!event.stop) continue;
        if (*event.stop == runtime::StopReason::Error) {
          send_anthropic_error(r, 500, client_message(Error(event.error, event.error_setting)));
          return true;
        }
        progress->parser.push(progress->text);
        progress->parser.finish();
        const chat::ChatMessage& message = progress->parser.message();
        const std::string stop_sequence = stop_sequence_of(event);
        send_json(r, 200,
                  anthropic::message_json(header, message,
                                          anthropic::stop_reason(*event.stop, !message.tool_calls.empty(), stop_sequence),
                                          stop_sequence, job->stats()));
        return true;
      }
      return false;
    };
    return;
  }

  const int64_t prompt_tokens = static_cast<int64_t>(job->request().prompt.size());
  auto provider = [job, progress, prompt_tokens, stop_sequence_of](http::StreamSink& sink) {
    if (progress->done) return true;
    const auto write = [&](const std::vector<anthropic::Event>& events) {
      std::string text;
      for (const auto& event : events) text += anthropic::sse(event);
      if (text.empty()) return true;
      progress->last_write = std::chrono::steady_clock::now();
      return sink.write(text);
    };
    if (!progress->started) {
      progress->started = true;
      return write(progress->stream.start(prompt_tokens));
    }
    std::vector<runtime::SequenceEvent> events;
    job->take_events(events, std::chrono::milliseconds(100));
    if (events.empty() && std::chrono::steady_clock::now() - progress->last_write > kPingInterval)
      return write({anthropic::ping_event()});
    for (const auto& event : events) {
      if (event.stop && *event.stop == runtime::StopReason::Error) {
        write({anthropic::error_event(500, client_message(Error(event.error, event.error_setting)))});
        progress->done = true;
        sink.done();
        return true;
      }
      std::vector<Json> deltas = progress->parser.push(event.text);
      if (event.stop)
        for (auto& d : progress->parser.finish()) deltas.push_back(std::move(d));
      if (!write(progress->stream.push(deltas))) return false;
      if (!event.stop) continue;
      const chat::ChatMessage& message = progress->parser.message();
      const std::string stop_sequence = stop_sequence_of(event);
      if (!write(progress->stream.finish(
              anthropic::stop_reason(*event.stop, !message.tool_calls.empty(), stop_sequence), stop_sequence,
              job->stats())))
        return false;
      progress->done = true;
      sink.done();
      return true;
    }
    return true;
  };
  res.status = 200;
  res.stream = std::move(provider);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.content_type = "text/event-stream";
}

}  // namespace okapi::server
