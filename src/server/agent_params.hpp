// The request fields of agents and structured output: tools, tool_choice, parallel_tool_calls,
// response_format, json_schema, grammar, reasoning_format, reasoning_budget_tokens. Each is
// type-checked, and a bad one is a 400 naming it (ApiError), as request_params.hpp does for the rest.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "chat/chat_format.hpp"
#include "server/request_params.hpp"

namespace okapi::server {

struct AgentParams {
  chat::ChatRequest chat;       // tools, tool_choice, the constraint and the reasoning format
  std::string constraint_field;  // the field that gave json_schema / grammar ("response_format", ...)
  int64_t reasoning_budget = -1;  // reasoning_budget_tokens / thinking_budget_tokens; -1: the server's
  bool budget_given = false;
};

// `chat`: tools and tool_choice are read too (text completions take only the constraint).
AgentParams parse_agent_params(const Json& body, bool chat, chat::ReasoningFormat default_format);

}  // namespace okapi::server
