// The reference renderings of real chat templates (../shared/templates/cases.json: 31 templates x
// 8 conversations, by Python Jinja2 as Hugging Face renders chat templates) must come out of
// okapi's renderer byte for byte, or fail with the template's own raise_exception message.
// A subset (4 templates, 32 cases) lives in tests/data/chat so a fresh clone tests something.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/shared_dir.hpp"
#include "jinja/chat_template.hpp"
#include "support/paths.hpp"

namespace {

using nlohmann::ordered_json;
using okapi::jinja::ChatTemplate;
using okapi::jinja::RenderInputs;
using okapi::jinja::TemplateError;
using okapi::jinja::TemplateRaised;

constexpr std::time_t kCaseClock = 1785067200;  // 2026-07-26 12:00:00 UTC, as the cases were rendered

std::string show(const std::string& text, std::size_t at) {
  const std::size_t begin = at > 30 ? at - 30 : 0;
  return ordered_json(text.substr(begin, 80)).dump();
}

// Renders every case of cases_file (templates beside it) and reports each mismatch by template and
// conversation with the first differing byte. Returns the number of cases that match.
int check_cases(const std::filesystem::path& cases_file, int expected_count) {
  const ordered_json cases = ordered_json::parse(okapi::test::read_file(cases_file));
  EXPECT_EQ(static_cast<int>(cases.size()), expected_count);
  std::map<std::string, ChatTemplate> templates;
  int matched = 0;
  // strftime_now renders local time; the reference clock is UTC noon.
  setenv("TZ", "UTC", 1);
  tzset();
  for (const auto& item : cases) {
    const std::string name = item.at("template").get<std::string>();
    const std::string where = name + " / " + item.at("conversation").get<std::string>();
    auto found = templates.find(name);
    if (found == templates.end()) {
      const std::string source = okapi::test::read_file(cases_file.parent_path() / name);
      try {
        found = templates.emplace(name, ChatTemplate::parse(source, name)).first;
      } catch (const TemplateError& e) {
        ADD_FAILURE() << where << ": does not parse: " << e.what();
        continue;
      }
    }
    RenderInputs inputs;
    inputs.messages = item.at("messages");
    if (item.contains("tools")) inputs.tools = item.at("tools");
    inputs.add_generation_prompt = item.at("add_generation_prompt").get<bool>();
    inputs.bos_token = item.at("bos_token").get<std::string>();
    inputs.eos_token = item.at("eos_token").get<std::string>();
    inputs.now = kCaseClock;
    const ordered_json& expected = item.at("expected");
    try {
      const std::string prompt = found->second.render(inputs);
      if (!expected.at("ok").get<bool>()) {
        ADD_FAILURE() << where << ": rendered, but Jinja2 failed with " << expected.dump();
        continue;
      }
      const std::string want = expected.at("prompt").get<std::string>();
      if (prompt != want) {
        std::size_t at = 0;
        while (at < prompt.size() && at < want.size() && prompt[at] == want[at]) ++at;
        ADD_FAILURE() << where << ": differs at byte " << at << " (lengths " << prompt.size() << " vs " << want.size()
                      << ")\n  okapi:  " << show(prompt, at) << "\n  jinja2: " << show(want, at);
        continue;
      }
      ++matched;
    } catch (const TemplateRaised& e) {
      if (expected.at("ok").get<bool>() || expected.at("error") != "raise_exception" ||
          expected.at("message").get<std::string>() != e.what()) {
        ADD_FAILURE() << where << ": raise_exception(" << e.what() << "), expected " << expected.dump();
        continue;
      }
      ++matched;
    } catch (const TemplateError& e) {
      // Jinja2's own errors (UndefinedError, SecurityError): okapi fails too, naming the same problem.
      const std::string message = e.what();
      const std::string want = expected.value("message", "");
      if (expected.at("ok").get<bool>() || expected.at("error") == "raise_exception" ||
          message.size() < want.size() || message.compare(message.size() - want.size(), want.size(), want) != 0) {
        ADD_FAILURE() << where << ": error " << message << ", expected " << expected.dump();
        continue;
      }
      ++matched;
    }
  }
  return matched;
}

TEST(TemplateCases, AllSharedReferenceRenderingsMatch) {
  const auto cases_file = okapi::shared_dir() / "templates" / "cases.json";
  OKAPI_REQUIRE_DATA(cases_file);
  EXPECT_EQ(check_cases(cases_file, 248), 248);
}

TEST(TemplateCases, RepositorySubsetMatches) {
  const auto cases_file = okapi::test::repo_dir() / "tests" / "data" / "chat" / "cases.json";
  ASSERT_TRUE(std::filesystem::exists(cases_file)) << cases_file;
  EXPECT_EQ(check_cases(cases_file, 32), 32);
}

}  // namespace
