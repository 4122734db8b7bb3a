#include "chat/chat_format.hpp"

// Stub: the output parsers are being written (issue 29).
namespace okapi::chat {

Json ChatMessage::to_json() const {
  Json j = {{"role", "assistant"}, {"content", content}};
  return j;
}

ChatMessage parse_output(std::string_view text, bool, const ParseOptions&) {
  ChatMessage m;
  m.content = std::string(text);
  return m;
}

StreamParser::StreamParser(ParseOptions options, std::string id_prefix)
    : options_(std::move(options)), id_prefix_(std::move(id_prefix)) {}

std::vector<Json> StreamParser::push(std::string_view text) {
  text_ += text;
  std::vector<Json> out;
  if (!text.empty()) out.push_back(Json{{"content", std::string(text)}});
  message_.content = text_;
  return out;
}

std::vector<Json> StreamParser::finish() { return {}; }

}  // namespace okapi::chat
