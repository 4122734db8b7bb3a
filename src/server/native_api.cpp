// llama-server's native completion API: POST /completion and /completions (its shape, not
// OpenAI's, which /v1/completions keeps), /infill for models with fill-in-the-middle tokens, and
// Vertex AI's POST /predict (AIP_MODE=PREDICTION). Each prompt is one job started through
// start_generation; native_shapes.hpp reads the fields and writes the shapes.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>

#include "server/metrics.hpp"
#include "server/native_shapes.hpp"
#include "server/server_state.hpp"

namespace okapi::server {

namespace {

const char* stop_type_name(std::optional<runtime::StopReason> stop) {
  if (!stop) return "none";
  switch (*stop) {
    case runtime::StopReason::EndOfGeneration: return "eos";
    case runtime::StopReason::StopString: return "word";
    case runtime::StopReason::TokenLimit:
    case runtime::StopReason::ContextFull: return "limit";
    default: return "none";
  }
}

// llama-server's error for a prompt that does not fit a slot.
[[noreturn]] void throw_exceeds_context(const std::string& tokens, int64_t n_ctx) {
  throw ApiError(400, "exceed_context_size_error",
                 fmt::format("request ({} tokens) exceeds the available context size ({} tokens), try increasing it",
                             tokens, n_ctx),
                 "prompt");
}

// One prompt's generation as it goes.
struct NativeJob {
  std::shared_ptr<runtime::Job> job;
  std::shared_ptr<void> in_flight;
  std::vector<TokenId> prompt;
  std::string text;                 // generated so far (non-streaming: all of it)
  std::string pending_text;         // streaming: text that came without a token, sent with the next
  std::vector<TokenId> tokens;      // generated ids
  std::vector<runtime::TokenLogprob> probs;
  std::optional<runtime::StopReason> stop;
  std::string stop_word;
  std::string error;
  Setting error_setting = Setting::None;
  bool finished = false;
};

// What every job of a request shares.
struct NativeRequest {
  NativeParams native;
  GenerationParams params;
  bool stream = false;
  int64_t n_keep = 0;
  std::string model;
  std::vector<NativeJob> jobs;
  std::function<std::string(const std::vector<TokenId>&)> detokenize;
};

Json final_json(const NativeRequest& r, size_t index, const runtime::GenerationStats& stats, bool stream) {
  const NativeJob& j = r.jobs[index];
  Json res;
  res["index"] = index;
  res["content"] = stream ? j.pending_text : j.text;
  res["tokens"] = r.native.return_tokens && !stream ? Json(j.tokens) : Json::array();
  res["id_slot"] = stats.slot;
  res["stop"] = true;
  res["model"] = r.model;
  res["tokens_predicted"] = stats.generated_tokens;
  res["tokens_evaluated"] = stats.prompt_tokens;
  res["generation_settings"] =
      native_generation_settings(r.params.sampling, r.params.max_tokens, r.params.stop, r.stream, r.native, r.n_keep);
  res["prompt"] = r.detokenize(j.prompt);
  res["has_new_line"] = j.text.find('\n') != std::string::npos;
  res["truncated"] = stats.shifted_out > 0 || j.stop == runtime::StopReason::ContextFull;
  res["stop_type"] = stop_type_name(j.stop);
  res["stopping_word"] = j.stop_word;
  res["tokens_cached"] = stats.cache_tokens;
  res["timings"] = native_timings(stats);
  if (!stream && r.native.n_probs > 0 && !j.probs.empty())
    res["completion_probabilities"] = native_probabilities(j.probs, r.native.post_sampling_probs);
  return r.native.response_fields.empty() ? res : native_select_fields(res, r.native.response_fields);
}

Json partial_json(const NativeRequest& r, size_t index, const runtime::GenerationStats& stats, std::string content,
                  const std::vector<TokenId>& tokens, const std::vector<runtime::TokenLogprob>& probs) {
  Json res;
  res["index"] = index;
  res["content"] = std::move(content);
  res["tokens"] = tokens;
  res["stop"] = false;
  res["id_slot"] = stats.slot;
  res["tokens_predicted"] = stats.generated_tokens;
  res["tokens_evaluated"] = stats.prompt_tokens;
  if (r.native.timings_per_token) res["timings"] = native_timings(stats);
  if (r.native.n_probs > 0 && !probs.empty())
    res["completion_probabilities"] = native_probabilities(probs, r.native.post_sampling_probs);
  return res;
}

std::string sse(const Json& j) { return "data: " + to_text(j) + "\n\n"; }

// The fill-in-the-middle tokens of a vocabulary, found by their texts (the spellings of the
// families llama.cpp knows); kNoToken where absent.
struct FimTokens {
  TokenId pre = tokenizer::kNoToken, suf = tokenizer::kNoToken, mid = tokenizer::kNoToken;
  TokenId rep = tokenizer::kNoToken, sep = tokenizer::kNoToken;
};

FimTokens find_fim_tokens(const tokenizer::Vocab& vocab) {
  const auto first = [&](std::initializer_list<const char*> texts) {
    for (const char* t : texts)
      if (const TokenId id = vocab.find(t); id != tokenizer::kNoToken) return id;
    return tokenizer::kNoToken;
  };
  FimTokens f;
  f.pre = first({"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<|fim▁begin|>", "<PRE>", "▁<PRE>", "[PREFIX]"});
  f.suf = first({"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<|fim▁hole|>", "<SUF>", "▁<SUF>", "[SUFFIX]"});
  f.mid = first({"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<|fim▁end|>", "<MID>", "▁<MID>", "[MIDDLE]"});
  f.rep = first({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  f.sep = first({"<|file_sep|>", "<|fim_sep|>", "<fim-sep>", "<file_sep>"});
  return f;
}

}  // namespace

void ServerState::add_native_routes() {
  const auto completion = [this](const Request& req, Response& res) { handle_native_completion(req, res, false); };
  add_route("POST", "/completion", completion);
  add_route("POST", "/completions", completion);
  add_route("POST", "/infill", [this](const Request& req, Response& res) { handle_native_completion(req, res, true); });
  // Vertex AI custom containers (https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements).
  const char* mode = std::getenv("AIP_MODE");
  if (mode && std::string_view(mode) == "PREDICTION") {
    const auto route = [](const char* name, const char* fallback) {
      const char* v = std::getenv(name);
      std::string path = v && *v ? v : fallback;
      if (!path.empty() && path.front() != '/') path.insert(path.begin(), '/');
      return path;
    };
    add_route("POST", route("AIP_PREDICT_ROUTE", "/predict"),
              [this](const Request& req, Response& res) { handle_gcp_predict(req, res); });
    if (const std::string health = route("AIP_HEALTH_ROUTE", ""); !health.empty())
      add_route("GET", health, [this](const Request&, Response& res) { this->health(res); });
  }
}

void ServerState::handle_native_completion(const Request& req, Response& res, bool infill) {
  if (embeddings_mode()) refuse_generation();
  if (draining()) throw ApiError(503, "unavailable_error", "the server is shutting down");
  Json body = parse_body(req.body);
  const tokenizer::Tokenizer& tok = engine_->tokenizer();
  const tokenizer::Vocab& vocab = tok.vocab();
  const int64_t n_vocab = engine_->model().n_vocab();
  const int64_t n_ctx = scheduler_->options().n_ctx_per_slot;
  const auto plain_tokens = [&tok](std::string_view text) {
    tokenizer::EncodeOptions o;
    o.add_special = false;
    o.parse_special = false;
    return tok.encode(text, o);
  };
  // A text far longer than a slot's context is refused before it is tokenized.
  const auto precheck = [&](const Json& j) {
    if (!j.is_string() || tok.max_bytes_per_token() == 0) return;
    const size_t at_least = j.get_ref<const std::string&>().size() / tok.max_bytes_per_token();
    if (static_cast<int64_t>(at_least) >= n_ctx) throw_exceeds_context(fmt::format("at least {}", at_least), n_ctx);
  };

  std::vector<std::vector<TokenId>> prompts;
  if (infill) {
    const FimTokens fim = find_fim_tokens(vocab);
    std::string missing;
    if (fim.pre == tokenizer::kNoToken) missing += "prefix token is missing. ";
    if (fim.suf == tokenizer::kNoToken) missing += "suffix token is missing. ";
    if (fim.mid == tokenizer::kNoToken) missing += "middle token is missing. ";
    if (!missing.empty())
      throw ApiError(501, "not_supported_error", "Infill is not supported by this model: " + missing);
    const std::string prefix = string_field(body, "input_prefix", "");
    const std::string suffix = string_field(body, "input_suffix", "");
    if (!body.contains("input_prefix")) throw_bad_request("input_prefix", "\"input_prefix\" is required");
    if (!body.contains("input_suffix")) throw_bad_request("input_suffix", "\"input_suffix\" is required");
    const std::string prompt_text = string_field(body, "prompt", "");
    Json extra = body.value("input_extra", Json::array());
    if (!extra.is_array())
      throw_bad_request("input_extra", "\"input_extra\" must be an array of {{\"filename\": string, \"text\": string}}");
    for (const Json* j : {&body["input_prefix"], &body["input_suffix"]}) precheck(*j);
    // llama-server's repo-level FIM layout: [REP]project [SEP]file text ... [PRE]prefix[SUF]suffix[MID].
    std::vector<TokenId> extra_tokens;
    if (fim.rep != tokenizer::kNoToken) {
      extra_tokens.push_back(fim.rep);
      for (const TokenId id : plain_tokens("myproject\n")) extra_tokens.push_back(id);
    }
    for (const auto& chunk : extra) {
      if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string())
        throw_bad_request("input_extra", "extra_context chunk must contain a \"text\" field with a string value");
      if (chunk.contains("filename") && !chunk["filename"].is_string())
        throw_bad_request("input_extra", "extra_context chunk's \"filename\" field must be a string");
      const std::string filename = chunk.value("filename", std::string("tmp"));
      precheck(chunk["text"]);
      if (fim.sep != tokenizer::kNoToken) {
        extra_tokens.push_back(fim.sep);
        for (const TokenId id : plain_tokens(filename + "\n")) extra_tokens.push_back(id);
      } else {
        for (const TokenId id : plain_tokens("\n\n--- snippet ---\n\n")) extra_tokens.push_back(id);
      }
      for (const TokenId id : plain_tokens(chunk["text"].get_ref<const std::string&>())) extra_tokens.push_back(id);
    }
    if (fim.sep != tokenizer::kNoToken) {
      extra_tokens.push_back(fim.sep);
      for (const TokenId id : plain_tokens("filename\n")) extra_tokens.push_back(id);
    }
    tokenizer::EncodeOptions po;
    po.add_special = false;
    po.parse_special = true;
    const std::vector<TokenId> prompt_tokens = tok.encode(prompt_text, po);
    std::vector<TokenId> pre = plain_tokens(prefix), suf = plain_tokens(suffix);
    const int64_t n_batch = options_.batch_size;
    const auto n_prefix_take = std::min<int64_t>(static_cast<int64_t>(pre.size()), 3 * (n_batch / 4));
    const auto n_suffix_take = std::min<int64_t>(
        static_cast<int64_t>(suf.size()), std::max<int64_t>(0, n_batch / 4 - (2 + static_cast<int64_t>(prompt_tokens.size()))));
    const int64_t n_predict = options_.n_predict > 0 ? options_.n_predict : 0;
    const auto n_extra_take = std::min<int64_t>(std::max<int64_t>(0, n_ctx - n_batch - 2 * n_predict),
                                                static_cast<int64_t>(extra_tokens.size()));
    pre.erase(pre.begin(), pre.end() - n_prefix_take);
    suf.resize(static_cast<size_t>(n_suffix_take));
    std::vector<TokenId> input;
    input.insert(input.end(), extra_tokens.end() - n_extra_take, extra_tokens.end());
    if (vocab.add_bos && vocab.bos != tokenizer::kNoToken) input.push_back(vocab.bos);
    input.push_back(fim.pre);
    input.insert(input.end(), pre.begin(), pre.end());
    input.insert(input.end(), prompt_tokens.begin(), prompt_tokens.end());
    input.push_back(fim.suf);
    input.insert(input.end(), suf.begin(), suf.end());
    input.push_back(fim.mid);
    prompts.push_back(std::move(input));
  } else {
    const auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) throw_bad_request("prompt", "\"prompt\" is required");
    if (it->is_array()) {
      for (const auto& p : *it) precheck(p);
    } else {
      precheck(*it);
    }
    prompts = native_prompts(*it, n_vocab, [&tok](std::string_view text, bool first) {
      tokenizer::EncodeOptions o;
      o.add_special = first;
      o.parse_special = true;
      return tok.encode(text, o);
    });
  }
  for (const auto& p : prompts)
    if (static_cast<int64_t>(p.size()) >= n_ctx) throw_exceeds_context(fmt::format("{}", p.size()), n_ctx);

  std::vector<TokenId> eog;
  for (const TokenId id : {vocab.eos, vocab.eot})
    if (id != tokenizer::kNoToken && std::find(eog.begin(), eog.end(), id) == eog.end()) eog.push_back(id);
  auto request = std::make_shared<NativeRequest>();
  request->native = parse_native_params(body, n_vocab, options_.n_slots, eog, plain_tokens);
  request->stream = bool_field(body, "stream", false);
  request->model = model_id_;
  request->detokenize = [this](const std::vector<TokenId>& ids) { return engine_->tokenizer().decode(ids, true); };
  const int64_t bos = vocab.add_bos ? 1 : 0;

  // The OpenAI-shaped body start_generation reads: the native-only fields (and logprobs, a count
  // here) are handled below; empty stop strings are dropped, as llama-server drops them.
  Json openai = body;
  for (const char* key : {"n_probs", "logprobs", "logit_bias", "prompt", "input_prefix", "input_suffix", "input_extra"})
    openai.erase(key);
  if (auto stop = openai.find("stop"); stop != openai.end() && stop->is_array()) {
    Json kept = Json::array();
    for (const auto& s : *stop)
      if (!s.is_string() || !s.get_ref<const std::string&>().empty()) kept.push_back(s);
    *stop = std::move(kept);
  }
  const NativeParams& native = request->native;
  request->jobs.resize(prompts.size());
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      openai["prompt"] = prompts[i];
      const int64_t keep = native.n_keep < 0 ? static_cast<int64_t>(prompts[i].size()) : native.n_keep + bos;
      StartedGeneration started = start_generation(openai, false, "cmpl-", [&](runtime::SequenceRequest& job) {
        job.prompt = prompts[i];
        job.sampling.logit_bias = native.logit_bias;
        job.top_logprobs = native.n_probs > 0 ? native.n_probs : -1;
        job.post_sampling_probs = native.post_sampling_probs;
        job.context_reserve = 1;  // llama-server stops (or shifts) one token before the end
        job.shift_keep = keep;
        job.shift_discard = native.n_discard;
        job.reuse_cache = native.cache_prompt;
        job.slot = native.id_slot;
        job.report_progress = request->stream && native.return_progress;
      });
      request->params = started.params;
      request->n_keep = native.n_keep;
      NativeJob& j = request->jobs[i];
      j.job = started.job;
      j.in_flight = started.in_flight;
      j.prompt = prompts[i];
    }
  } catch (...) {
    for (auto& j : request->jobs)
      if (j.job) j.job->cancel();
    throw;
  }
  res.on_stream_end = [request](bool completed) {
    if (completed) return;
    for (auto& j : request->jobs)
      if (j.job) j.job->cancel();
  };

  // Takes each job's new events into its NativeJob; `on_event` sees each (streaming writes it).
  const auto collect = [request](const std::function<bool(size_t, runtime::SequenceEvent&)>& on_event) {
    bool waited = false;
    for (size_t i = 0; i < request->jobs.size(); ++i) {
      NativeJob& j = request->jobs[i];
      if (j.finished) continue;
      std::vector<runtime::SequenceEvent> events;
      // One wait per call (the first unfinished job's); the others are only looked at.
      j.job->take_events(events, std::chrono::milliseconds(waited ? 0 : 100));
      waited = true;
      for (auto& e : events) {
        if (!e.tokens.empty()) j.tokens.insert(j.tokens.end(), e.tokens.begin(), e.tokens.end());
        if (e.stop) {
          j.stop = e.stop;
          j.stop_word = e.stop_string;
          j.error = e.error;
          j.error_setting = e.error_setting;
          j.finished = true;
        }
        if (!on_event(i, e)) return false;
      }
    }
    return true;
  };
  const auto all_finished = [request] {
    return std::all_of(request->jobs.begin(), request->jobs.end(), [](const NativeJob& j) { return j.finished; });
  };

  if (!request->stream) {
    res.await = [request, collect, all_finished](Response& r) {
      collect([&](size_t i, runtime::SequenceEvent& e) {
        NativeJob& j = request->jobs[i];
        j.text += e.text;
        for (auto& lp : e.logprobs) j.probs.push_back(std::move(lp));
        return true;
      });
      if (!all_finished()) return false;
      for (const auto& j : request->jobs)
        if (j.stop == runtime::StopReason::Error) {
          send_error(r, ApiError(500, "server_error", client_message(Error(j.error, j.error_setting))));
          return true;
        }
      Json out = Json::array();
      for (size_t i = 0; i < request->jobs.size(); ++i)
        out.push_back(final_json(*request, i, request->jobs[i].job->stats(), false));
      send_json(r, 200, out.size() == 1 ? out[0] : out);
      return true;
    };
    return;
  }

  // Streaming: a chunk per token, the final object last, per prompt (with its index).
  struct StreamState {
    bool started = false;
    bool done = false;
  };
  auto state = std::make_shared<StreamState>();
  res.status = 200;
  res.content_type = "text/event-stream";
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.stream = [request, state, collect, all_finished](http::StreamSink& sink) {
    if (state->done) return true;
    if (!state->started && request->native.return_progress) {
      // A first progress event before any prompt token runs (timings all zero).
      for (size_t i = 0; i < request->jobs.size(); ++i) {
        runtime::GenerationStats zero;
        const auto total = static_cast<int64_t>(request->jobs[i].prompt.size());
        Json chunk = partial_json(*request, i, zero, "", {}, {});
        chunk["tokens_evaluated"] = total;
        chunk["timings"] = native_timings(zero);
        chunk["prompt_progress"] = {{"total", total}, {"cache", 0}, {"processed", 0}, {"time_ms", 0.0}};
        if (!sink.write(sse(chunk))) return false;
      }
    }
    state->started = true;
    const bool going = collect([&](size_t i, runtime::SequenceEvent& e) {
      NativeJob& j = request->jobs[i];
      const runtime::GenerationStats stats = j.job->stats();
      if (e.stop) {
        if (*e.stop == runtime::StopReason::Error) {
          Json error = error_body(500, "server_error", client_message(Error(e.error, e.error_setting)));
          return sink.write(sse(error));
        }
        j.pending_text += e.text;
        j.text += e.text;
        return sink.write(sse(final_json(*request, i, stats, true)));
      }
      if (e.prompt_done >= 0) {
        if (!request->native.return_progress) return true;
        Json chunk = partial_json(*request, i, stats, "", {}, {});
        runtime::GenerationStats so_far = stats;  // the prompt as far as this event
        so_far.prompt_tokens = e.prompt_done;
        so_far.generated_tokens = 0;
        so_far.generation_seconds = 0;
        chunk["timings"] = native_timings(so_far);
        chunk["prompt_progress"] = {{"total", e.prompt_total},
                                    {"cache", stats.cached_tokens},
                                    {"processed", e.prompt_done},
                                    {"time_ms", stats.prompt_seconds * 1e3}};
        return sink.write(sse(chunk));
      }
      j.text += e.text;
      if (e.tokens.empty()) {  // text without a token: it goes out with the next one
        j.pending_text += e.text;
        return true;
      }
      std::string content = std::move(j.pending_text) + e.text;
      j.pending_text.clear();
      runtime::GenerationStats so_far = stats;  // the job may be ahead of this event
      so_far.generated_tokens = static_cast<int64_t>(j.tokens.size());
      return sink.write(sse(partial_json(*request, i, so_far, std::move(content), e.tokens, e.logprobs)));
    });
    if (!going) return false;
    if (all_finished()) {
      state->done = true;
      sink.done();
    }
    return true;
  };
}

Response ServerState::run_route(const std::string& method, const std::string& path, const Request& outer,
                                std::string body) const {
  Request inner = outer;
  inner.method = method;
  inner.path = path;
  inner.target = path;
  inner.query.clear();
  inner.body = std::move(body);
  Response res;
  const Route* route = nullptr;
  for (const auto& r : routes_)
    if (r.path == path && r.method == method) route = &r;
  if (!route) throw ApiError(400, "invalid_request_error", fmt::format("no handler registered for {}", path));
  try {
    route->handler(inner, res);
  } catch (const ApiError& e) {
    send_error(res, e);
    return res;
  }
  if (res.await)
    while (!res.await(res)) {
    }
  if (res.stream) {
    // Drained here: the body a client would have read.
    struct Collect : http::StreamSink {
      std::string text;
      bool finished = false;
      bool write(std::string_view data) override {
        text += data;
        return true;
      }
      void done() override { finished = true; }
    } sink;
    while (!sink.finished)
      if (!res.stream(sink)) break;
    res.body = std::move(sink.text);
    res.stream = nullptr;
  }
  if (res.on_stream_end) res.on_stream_end(true);
  return res;
}

void ServerState::handle_gcp_predict(const Request& req, Response& res) const {
  const Json body = parse_body(req.body);
  const auto instances = body.find("instances");
  if (instances == body.end() || !instances->is_array())
    throw_bad_request("instances", "request body must include an array field named instances");
  constexpr size_t kMaxInstances = 128;
  if (instances->size() > kMaxInstances)
    throw_bad_request("instances", "instances array exceeds maximum size of {}", kMaxInstances);
  const auto error = [](const std::string& message) {
    return Json{{"error", {{"code", 400}, {"message", message}, {"type", "invalid_request_error"}}}};
  };
  // Instances run one after another in this thread: each is a request to a route by its
  // camelCase name ("chatCompletions" is POST /v1/chat/completions; the first route of a name wins).
  Json predictions = Json::array();
  for (const auto& instance : *instances) {
    if (!instance.is_object()) {
      predictions.push_back(error("each instance must be a JSON object"));
      continue;
    }
    const auto format = instance.find("@requestFormat");
    if (format == instance.end() || !format->is_string()) {
      predictions.push_back(error("each instance must include a string @requestFormat"));
      continue;
    }
    const std::string name = format->get<std::string>();
    std::string path;
    for (const auto& r : routes_) {
      if (r.method != "POST") continue;
      if (gcp_route_alias(r.path) == name || r.path == name) {
        path = r.path;
        break;
      }
    }
    if (path.empty() || path == req.path) {
      predictions.push_back(error("no handler registered for @requestFormat: " + name));
      continue;
    }
    Json payload = instance;
    payload.erase("@requestFormat");
    if (payload.contains("stream")) payload["stream"] = false;  // a prediction is one JSON value
    const Response inner = run_route("POST", path, req, to_text(payload));
    Json parsed = Json::parse(inner.body, nullptr, false);
    predictions.push_back(parsed.is_discarded() ? Json(inner.body) : std::move(parsed));
  }
  send_json(res, 200, {{"predictions", std::move(predictions)}});
}

namespace {

// The totals of a scheduler that was unloaded (sleep) and of the one running now: the series are
// the server's, not one scheduler's. Gauges of the moment are the running one's.
runtime::SchedulerCounters carried(const runtime::SchedulerCounters& base, const runtime::SchedulerCounters& now) {
  runtime::SchedulerCounters c = now;
  c.prompt_tokens += base.prompt_tokens;
  c.cached_prompt_tokens += base.cached_prompt_tokens;
  c.generated_tokens += base.generated_tokens;
  c.requests_finished += base.requests_finished;
  c.requests_cancelled += base.requests_cancelled;
  c.forward_passes += base.forward_passes;
  c.drafted_tokens += base.drafted_tokens;
  c.accepted_tokens += base.accepted_tokens;
  c.draft_rounds += base.draft_rounds;
  c.busy_slots_in_passes += base.busy_slots_in_passes;
  c.max_sequence_tokens = std::max(c.max_sequence_tokens, base.max_sequence_tokens);
  c.prompt_seconds += base.prompt_seconds;
  c.generation_seconds += base.generation_seconds;
  return c;
}

}  // namespace

runtime::SchedulerCounters ServerState::server_counters() const {
  if (!scheduler_) return retired_counters_;
  return carried(retired_counters_, scheduler_->counters());
}

void ServerState::retire_counters() {
  if (!scheduler_) return;
  std::lock_guard lock(metrics_mutex_);
  // The gauges stay as they were, so that a sleeping server answers what it last measured.
  retired_counters_ = carried(retired_counters_, scheduler_->counters());
}

std::string ServerState::metrics_text() const {
  if (embeddings_mode()) return prometheus_embedding_text(embedding_queue_->counters());
  std::lock_guard lock(metrics_mutex_);
  // While asleep the scheduler is gone: the totals stay, and the throughput window is empty after
  // the first scrape (nothing runs), as llama-server's.
  const runtime::SchedulerCounters now = server_counters();
  std::string text = prometheus_text(now, options_.n_slots, scraped_);
  scraped_ = now;
  return text;
}

}  // namespace okapi::server
