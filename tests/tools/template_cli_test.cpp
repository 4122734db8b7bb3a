// okapi template render / parse / info, run as a user would: the printed prompt is exactly what
// the library renders (the server's code), errors are one `okapi: error:` line with exit 1 (bad
// files) or 2 (bad command lines), and nothing reaches stdout on an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_format.hpp"
#include "jinja/chat_template.hpp"
#include "runtime/chat_prompt.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using test::CommandResult;
using test::run_cli;
using test::run_command;
using test::shell_quote;

const fs::path kExamples = test::repo_dir() / "examples" / "chat";
const std::string kModel = (test::repo_dir() / "models" / "stories260K.gguf").string();
const std::string kTemplate = (kExamples / "hermes-tools.jinja").string();
const std::string kMessages = (kExamples / "messages.json").string();
const std::string kTools = (kExamples / "tools.json").string();

CommandResult run_cli_stdout(const std::string& args) {
  std::string command = "(";  // a subshell, as run_command appends its own 2>&1
  command += test::cli_path().string() + " " + args + " 2>/dev/null)";
  return run_command(command);
}

std::string library_render(const std::string& source, bool with_tools, bool generation_prompt, const ordered_json& extra,
                           const std::string& bos = "", const std::string& eos = "") {
  jinja::RenderInputs inputs;
  inputs.messages = ordered_json::parse(test::read_file(kMessages));
  if (with_tools) inputs.tools = ordered_json::parse(test::read_file(kTools));
  inputs.add_generation_prompt = generation_prompt;
  inputs.extra = extra;
  inputs.bos_token = bos;
  inputs.eos_token = eos;
  return jinja::ChatTemplate::parse(source).render(inputs);
}

struct TempDir {
  fs::path path = test::make_temp_dir("template_cli");
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

void expect_error(const std::string& args, int exit_code, const std::string& part) {
  SCOPED_TRACE(args);
  const CommandResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  EXPECT_EQ(r.output.rfind("okapi: error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(part), std::string::npos) << r.output;
  EXPECT_EQ(run_cli_stdout(args).output, "") << "stdout must stay empty on an error";
}

TEST(TemplateCli, RenderPrintsExactlyTheLibrarysPrompt) {
  const std::string source = test::read_file(kTemplate);
  const CommandResult r = run_cli_stdout("template render --template " + kTemplate + " --messages " + kMessages + " --tools " + kTools);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, library_render(source, true, true, ordered_json::object()));
  EXPECT_NE(r.output.find("<tools>\n{\"type\": \"function\""), std::string::npos) << r.output;
  EXPECT_EQ(r.output.substr(r.output.size() - 22), "<|im_start|>assistant\n");  // as rendered: no newline added

  const CommandResult bare = run_cli_stdout("template render --template " + kTemplate + " --messages " + kMessages +
                                            " --no-generation-prompt --kwargs '{\"enable_thinking\": false}' --bos '<s>'");
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  EXPECT_EQ(bare.output, library_render(source, false, false, {{"enable_thinking", false}}, "<s>"));
  EXPECT_EQ(bare.output.find("<tools>"), std::string::npos);

  const CommandResult thinking_off =
      run_cli_stdout("template render --template " + kTemplate + " --messages " + kMessages + " --kwargs '{\"enable_thinking\": false}'");
  ASSERT_EQ(thinking_off.exit_code, 0);
  EXPECT_EQ(thinking_off.output.substr(thinking_off.output.size() - 19), "<think>\n\n</think>\n\n");
}

TEST(TemplateCli, RenderWithAModelUsesItsTemplateAndTokens) {
  // stories260K has no chat template: ChatML, as the server falls back.
  const CommandResult r = run_cli_stdout("template render -m " + kModel + " --messages " + kMessages);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, library_render(runtime::chatml_template(), false, true, ordered_json::object()));
  // -m with --template: the file, with the model's BOS / EOS texts.
  TempDir dir;
  const std::string tokens = dir.write("tokens.jinja", "[{{ bos_token }}|{{ eos_token }}|{{ messages|length }}]");
  const CommandResult with_file = run_cli_stdout("template render -m " + kModel + " --template " + tokens + " --messages " + kMessages);
  ASSERT_EQ(with_file.exit_code, 0) << with_file.output;
  EXPECT_EQ(with_file.output, "[<s>|</s>|6]");
  const CommandResult file_only = run_cli_stdout("template render --template " + tokens + " --messages " + kMessages + " --eos E");
  EXPECT_EQ(file_only.output, "[|E|6]");
}

TEST(TemplateCli, ParsePrintsTheAssistantMessage) {
  const CommandResult r = run_cli_stdout("template parse --template " + kTemplate + " --text " + (kExamples / "output.txt").string() +
                                         " --tools " + kTools + " --reasoning-format deepseek");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ordered_json message = ordered_json::parse(r.output);
  // Whatever the parsers make of it (chat/), the verb prints what the library returns.
  chat::ChatRequest request;
  request.tools = ordered_json::parse(test::read_file(kTools));
  request.reasoning_format = chat::ReasoningFormat::Deepseek;
  const auto format = chat::detect_format(jinja::ChatTemplate::parse(test::read_file(kTemplate)));
  const chat::ParseOptions options = chat::plan(format, request, {}).parse;
  EXPECT_EQ(message, chat::parse_output(test::read_file(kExamples / "output.txt"), false, options).to_json());
  EXPECT_EQ(message.at("role"), "assistant");
  // Plain content, forced-open thinking: valid JSON either way.
  TempDir dir;
  const std::string plain = dir.write("plain.txt", "Hello <b>there</b> \xC3\xA9");
  const CommandResult content = run_cli_stdout("template parse -m " + kModel + " --text " + plain + " --thinking-forced-open");
  ASSERT_EQ(content.exit_code, 0) << content.output;
  EXPECT_EQ(ordered_json::parse(content.output).at("role"), "assistant");
}

TEST(TemplateCli, InfoDescribesTheTemplate) {
  const CommandResult r = run_cli_stdout("template info --template " + kTemplate);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ordered_json info = ordered_json::parse(r.output);
  const auto format = chat::detect_format(jinja::ChatTemplate::parse(test::read_file(kTemplate)));
  EXPECT_EQ(info.at("family"), std::string(chat::family_name(format.family)));
  EXPECT_EQ(info.at("supports_tools"), format.supports_tools);
  EXPECT_EQ(info.at("template"), "file");
  EXPECT_EQ(ordered_json::parse(run_cli_stdout("template info -m " + kModel).output).at("template"), "chatml");
}

TEST(TemplateCli, BadFilesAreErrors) {
  TempDir dir;
  const std::string object = dir.write("object.json", "{\"role\": \"user\"}");
  const std::string broken = dir.write("broken.json", "[{\"role\": ");
  const std::string numbers = dir.write("numbers.json", "[1, 2]");
  const std::string bad_template = dir.write("bad.jinja", "{% for m in messages %}");
  const std::string refusing = dir.write("refuse.jinja", "{{ raise_exception('no system role') }}");
  const std::string render = "template render --template " + kTemplate + " --messages ";
  expect_error(render + object, 1, "must hold a JSON array of messages");
  expect_error(render + broken, 1, "not valid JSON");
  expect_error(render + numbers, 1, "message 0 must be an object");
  expect_error(render + dir.path.string() + "/missing.json", 1, "missing.json");
  expect_error(render + kMessages + " --tools " + object, 1, "must hold a JSON array of tools");
  expect_error("template render --template " + bad_template + " --messages " + kMessages, 1, "endfor");
  expect_error("template render --template " + refusing + " --messages " + kMessages, 1,
               "the chat template refused the conversation: no system role");
  expect_error("template render --template " + dir.path.string() + "/none.jinja --messages " + kMessages, 1, "none.jinja");
  expect_error("template parse --template " + kTemplate + " --text " + dir.path.string() + "/none.txt", 1, "none.txt");
  expect_error("template render -m " + dir.path.string() + "/none.gguf --messages " + kMessages, 1, "none.gguf");
}

TEST(TemplateCli, BadCommandLinesAreUsageErrors) {
  expect_error("template", 2, "template");
  expect_error("template frobnicate", 2, "frobnicate");
  expect_error("template render --messages " + kMessages, 2, "give a model with -m or a template with --template");
  expect_error("template render --template " + kTemplate, 2, "--messages");
  expect_error("template render --template " + kTemplate + " --messages " + kMessages + " --kwargs " + shell_quote("{x"), 2,
               "--kwargs: not valid JSON");
  expect_error("template render --template " + kTemplate + " --messages " + kMessages + " --kwargs '[1]'", 2,
               "--kwargs must be a JSON object");
  expect_error("template render -m " + kModel + " --bos x --messages " + kMessages, 2, "--bos");
  expect_error("template parse --template " + kTemplate + " --text x --reasoning-format bogus", 2, "bogus");
  expect_error("template info", 2, "give a model with -m or a template with --template");
}

}  // namespace
}  // namespace okapi
