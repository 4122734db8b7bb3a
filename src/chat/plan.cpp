#include "chat/chat_format.hpp"

// Stub: the request plans (grammars, triggers) are being written (issue 29).
namespace okapi::chat {

ChatPlan plan(const ChatFormat& format, const ChatRequest& request, std::string_view) {
  ChatPlan p;
  p.parse.family = format.family;
  p.parse.reasoning_format = request.reasoning_format;
  return p;
}

}  // namespace okapi::chat
