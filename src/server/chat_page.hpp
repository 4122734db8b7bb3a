// The chat page served at / (src/server/ui/chat.html, embedded into the binary at build time).
#pragma once
#include <string_view>

namespace okapi::server {

std::string_view chat_page_html();

}  // namespace okapi::server
