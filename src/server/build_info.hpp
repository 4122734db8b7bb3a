// The build's name as llama-server spells its own: "b<commits>-<commit>" (b4180-1a2b3c4), the
// commit count and commit when CMake configured. /props' build_info and the system_fingerprint
// of chat responses are this; clients check that it starts with "b".
#pragma once
#include <string_view>

namespace okapi::server {

std::string_view build_info();

}  // namespace okapi::server
