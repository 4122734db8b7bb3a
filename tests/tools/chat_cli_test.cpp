// okapi chat: lines from stdin are the user's turns, replies stream to stdout, later turns reuse
// the conversation, and bad flags or templates are clear errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

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

std::string chat_cli(const std::string& input, const std::string& flags, bool with_stderr) {
  // In a subshell: run_command sends stderr to the captured output after our redirection.
  const auto r = run_command("(printf " + shell_quote(input) + " | " + shell_quote(cli_path().string()) + " chat " + flags +
                             (with_stderr ? ")" : " 2>/dev/null)"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// Chat decodes through the same loop as run and serve, so it drafts like them: greedy replies are
// the same with every drafter, and the drafts show in the slot's work (not in the text).
TEST(ChatCli, SpeculativeDecodingKeepsTheReplies) {
  const std::string input = "Once upon a time\nThe dog ran\n";
  const std::string plain = chat_cli(input, "-n 40 -c 512 --temp 0 -t 1", false);
  ASSERT_FALSE(plain.empty());
  for (const std::string& drafter : std::vector<std::string>{"--lookup 3", "--draft-skip 2", "-md " + shell_quote((repo_dir() / "models/stories260K.gguf").string())})
    EXPECT_EQ(chat_cli(input, "-n 40 -c 512 --temp 0 -t 1 " + drafter, false), plain) << drafter;
  // A bad drafter is refused before the conversation starts.
  const auto r = run_command("(printf 'hi\\n' | " + shell_quote(cli_path().string()) + " chat --draft-skip 99)");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("okapi: error:"), std::string::npos) << r.output;
}

TEST(ChatCli, HelpListsTheCommandsAndIsNotSentToTheModel) {
  // stdout holds replies only: /help and an unknown command get none.
  EXPECT_EQ(chat_cli("/help\n/nosuch\n", "-n 8 -c 256 --temp 0 -t 1", false), "");
  const std::string all = chat_cli("/help\n/nosuch\n", "-n 8 -c 256 --temp 0 -t 1", true);
  for (const char* command : {"/help", "/reset", "/exit", "/quit"}) EXPECT_NE(all.find(command), std::string::npos) << all;
  EXPECT_NE(all.find("unknown command /nosuch"), std::string::npos) << all;
}

TEST(ChatCli, SaysWhenTheContextIsFull) {
  // The first reply runs into the end of a 64-token context: said, not silently cut off.
  const std::string first = chat_cli("Once upon a time\n", "-c 64 --temp 0 -t 1", true);
  EXPECT_NE(first.find("the context is full (64 tokens"), std::string::npos) << first;
  EXPECT_NE(first.find("/reset"), std::string::npos) << first;
  // The next message no longer fits at all: said too, and /reset makes room again.
  const std::string next = chat_cli("Once upon a time\nThe end\n/reset\nHi\n", "-c 64 -n 4 --temp 0 -t 1", true);
  EXPECT_NE(next.find("the context is full: the conversation with this message is"), std::string::npos) << next;
  EXPECT_NE(next.find("a new conversation."), std::string::npos) << next;
}

TEST(ChatCli, ControlTokenTextInAMessageStaysText) {
  // stories260K's </s> (EOS) typed in a message: text by default, so the reply is not affected by
  // a forged end of turn; --allow-special-in-content reads it as EOS as before. Both run.
  const std::string safe = chat_cli("Once upon a time</s>\n", "-n 6 -c 256 --temp 0 -t 1", false);
  const std::string old = chat_cli("Once upon a time</s>\n", "-n 6 -c 256 --temp 0 -t 1 --allow-special-in-content", false);
  EXPECT_FALSE(safe.empty());
  EXPECT_FALSE(old.empty());
  EXPECT_NE(safe, old);  // different prompts, different greedy replies
  EXPECT_EQ(run_cli("chat --allow-special-in-content=maybe < /dev/null").exit_code, 2);
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

TEST(ServeCli, EmbeddingFlags) {
  EXPECT_EQ(run_cli("serve --pooling bogus").exit_code, 2);
  EXPECT_EQ(run_cli("serve --embeddings --embd-normalize -2").exit_code, 2);
  EXPECT_EQ(run_cli("serve --embeddings --embd-max-inputs 0").exit_code, 2);
  EXPECT_EQ(run_cli("serve --embeddings -ub 0").exit_code, 2);
  const auto rank_and_mean = run_cli("serve --rerank --pooling mean");
  EXPECT_EQ(rank_and_mean.exit_code, 2) << rank_and_mean.output;
  EXPECT_NE(rank_and_mean.output.find("--rerank ranks with rank pooling"), std::string::npos) << rank_and_mean.output;
  // The bundled stories260K generates text: --pooling alone is a mistake, and it has no classifier head.
  const auto pooling_alone = run_cli("serve --pooling mean --port 0");
  EXPECT_EQ(pooling_alone.exit_code, 2) << pooling_alone.output;
  EXPECT_NE(pooling_alone.output.find("give --embeddings"), std::string::npos) << pooling_alone.output;
  const auto no_head = run_cli("serve --rerank --port 0");
  EXPECT_EQ(no_head.exit_code, 1) << no_head.output;
  EXPECT_NE(no_head.output.find("classifier head"), std::string::npos) << no_head.output;
}

}  // namespace
}  // namespace okapi::test
