// okapi chat: lines from stdin are the user's turns, replies stream to stdout, later turns reuse
// the conversation, and bad flags or templates are clear errors.
#include <gtest/gtest.h>

#include <fstream>

#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::test {
namespace {

TEST(ChatCli, RepliesToEachLineThroughTheTemplate) {
  const auto r = run_command("printf 'Once upon a time\\n/reset\\nOnce upon a time\\nMore\\n' | " +
                             shell_quote(cli_path().string()) + " chat -n 12 -c 512 --temp 0 -t 1 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Three replies, one a line; the first two (same conversation after /reset) are identical.
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < r.output.size()) {
    const size_t end = r.output.find('\n', begin);
    lines.push_back(r.output.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  ASSERT_GE(lines.size(), 3u) << r.output;
  EXPECT_FALSE(lines[0].empty());
}

TEST(ChatCli, BadTemplateFileIsAnError) {
  const auto dir = make_temp_dir("chat_cli");
  std::ofstream(dir / "bad.jinja") << "{% for x in %}";
  const auto r = run_cli("chat -c 256 --chat-template-file " + shell_quote((dir / "bad.jinja").string()) + " < /dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
  const auto missing = run_cli("chat --chat-template-file /nonexistent.jinja < /dev/null");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("okapi: error:"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ServeCli, BadFlagsAreUsageErrors) {
  EXPECT_EQ(run_cli("serve --port 70000").exit_code, 2);
  EXPECT_EQ(run_cli("serve -np 0").exit_code, 2);
  EXPECT_EQ(run_cli("serve --queue -1").exit_code, 2);
  const auto missing = run_cli("serve -m /nonexistent.gguf --port 0");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("okapi: error:"), std::string::npos) << missing.output;
  EXPECT_EQ(run_cli("serve --lookup 3 --draft-model x.gguf").exit_code, 2);
  EXPECT_EQ(run_cli("serve --draft-min 5 --draft-max 2").exit_code, 2);
  const auto bad_draft = run_cli("serve --draft-model /nonexistent-draft.gguf --port 0");
  EXPECT_EQ(bad_draft.exit_code, 1) << bad_draft.output;
  EXPECT_NE(bad_draft.output.find("okapi: error:"), std::string::npos) << bad_draft.output;
  const auto no_keys = run_cli("serve --api-key-file /nonexistent-keys --port 0");
  EXPECT_EQ(no_keys.exit_code, 1) << no_keys.output;
}

}  // namespace
}  // namespace okapi::test
