// Family detection over real chat templates: each published template is read as its family.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "chat/chat_format.hpp"
#include "core/shared_dir.hpp"
#include "support/paths.hpp"

namespace okapi::chat {
namespace {

// ../shared/templates first, then the copies carried in the repository, then llama.cpp's tree.
std::filesystem::path find_template(const std::string& file) {
  const std::vector<std::filesystem::path> dirs = {
      okapi::shared_dir() / "templates",
      test::repo_dir() / "tests" / "data" / "templates",
      test::repo_dir() / "tests" / "data" / "chat",
      "/tmp/llama.cpp-src/llama.cpp/models/templates",
  };
  for (const auto& dir : dirs) {
    if (std::filesystem::exists(dir / file)) return dir / file;
  }
  return dirs.front() / file;
}

struct Expected {
  const char* file;
  Family family;
  bool thinks;  // reasoning markers expected
};

class DetectTest : public ::testing::TestWithParam<Expected> {};

TEST_P(DetectTest, ReadsTheFamily) {
  const Expected& expected = GetParam();
  const auto path = find_template(expected.file);
  OKAPI_REQUIRE_DATA(path);
  const auto chat_template = jinja::ChatTemplate::parse(test::read_file(path), expected.file);
  const ChatFormat format = detect_format(chat_template);
  EXPECT_EQ(family_name(format.family), family_name(expected.family)) << expected.file;
  EXPECT_EQ(!format.reasoning_start.empty(), expected.thinks) << expected.file;
  EXPECT_EQ(format.reasoning_start.empty(), format.reasoning_end.empty());
  // DeepSeek's templates write calls but never render `tools` (the tools go into a system message).
  if (expected.family != Family::Generic && expected.family != Family::DeepSeekR1 &&
      expected.family != Family::DeepSeekV3) {
    EXPECT_TRUE(format.supports_tools) << expected.file;
  }
}

const Expected kTemplates[] = {
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", Family::Hermes, false},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", Family::Hermes, false},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", Family::Hermes, false},
    {"Qwen-Qwen3-0.6B.jinja", Family::Hermes, true},
    {"Qwen-QwQ-32B.jinja", Family::Hermes, true},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", Family::Llama3, false},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", Family::Llama3, false},
    {"meta-llama-Llama-3.3-70B-Instruct.jinja", Family::Llama3, false},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", Family::Mistral, false},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", Family::MistralArgs, false},
    {"unsloth-mistral-Devstral-Small-2507.jinja", Family::MistralArgs, false},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", Family::MistralArgs, false},
    {"openai-gpt-oss-120b.jinja", Family::GptOss, false},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", Family::DeepSeekR1, true},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", Family::DeepSeekR1, true},
    {"deepseek-ai-DeepSeek-V3.1.jinja", Family::DeepSeekV3, true},
    {"Qwen3-Coder.jinja", Family::Qwen3Coder, false},
    {"GLM-4.6.jinja", Family::Glm45, true},
    {"GLM-4.7-Flash.jinja", Family::Glm45, true},
    {"meetkai-functionary-medium-v3.2.jinja", Family::FunctionaryV32, false},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", Family::CommandR7B, true},
    {"microsoft-Phi-3.5-mini-instruct.jinja", Family::Generic, false},
    {"google-gemma-2-2b-it.jinja", Family::Generic, false},
};

INSTANTIATE_TEST_SUITE_P(RealTemplates, DetectTest, ::testing::ValuesIn(kTemplates),
                         [](const ::testing::TestParamInfo<Expected>& param_info) {
                           std::string name;
                           const std::string file = param_info.param.file;
                           for (const char c : file.substr(0, file.size() - 6)) {  // less ".jinja"
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           }
                           return name;
                         });

TEST(Detect, TemplateWithoutToolSyntaxIsGeneric) {
  const auto chat_template = jinja::ChatTemplate::parse(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}");
  const ChatFormat format = detect_format(chat_template);
  EXPECT_EQ(format.family, Family::Generic);
  EXPECT_FALSE(format.supports_tools);
  EXPECT_FALSE(format.supports_enable_thinking);
  EXPECT_TRUE(format.reasoning_start.empty());
}

TEST(Detect, FileNameDoesNotMatter) {
  // A Hermes-style template named like a Llama one is still Hermes.
  const auto chat_template = jinja::ChatTemplate::parse(
      "{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}"
      "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
      "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n"
      "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>{% endif %}",
      "meta-llama-Llama-3.1-8B-Instruct.jinja");
  const ChatFormat format = detect_format(chat_template);
  EXPECT_EQ(format.family, Family::Hermes);
  EXPECT_TRUE(format.supports_tools);
  EXPECT_TRUE(format.supports_enable_thinking);
  EXPECT_EQ(format.reasoning_start, "<think>");
  EXPECT_EQ(format.reasoning_end, "</think>");
}

}  // namespace
}  // namespace okapi::chat
