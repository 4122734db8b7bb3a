#include "chat/chat_format.hpp"

// Stub: family detection is being written (issue 29).
namespace okapi::chat {

ChatFormat detect_format(const jinja::ChatTemplate&) { return {}; }

}  // namespace okapi::chat
