// The variables every chat template gets from okapi serve as from llama-server: today's date in
// the two formats templates read, `functions` for firefunction-v2 only, --chat-template-kwargs and
// --reasoning; and the flags' parsing.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.hpp"
#include "server/template_context.hpp"

namespace okapi::server {
namespace {

std::time_t noon_utc_2026_11_28() {
  setenv("TZ", "UTC", 1);
  tzset();
  return 1795867200;  // 2026-11-28 12:00:00 UTC
}

TEST(TemplateContext, DatesAsLlamaServerFormatsThem) {
  const Json context = template_context({}, Json(), "{{ messages }}", noon_utc_2026_11_28());
  EXPECT_EQ(context.at("datetime"), "Nov 28 2026");     // firefunction-v2's "Today is ..."
  EXPECT_EQ(context.at("date_string"), "28 Nov 2026");  // Llama 3.x's "Today Date: ..."
  EXPECT_FALSE(context.contains("functions"));
  EXPECT_FALSE(context.contains("enable_thinking"));  // auto: decided per request
}

TEST(TemplateContext, FunctionsOnlyForFirefunction) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  const std::string firefunction = "Available functions as JSON spec:\n{{ functions }}";
  EXPECT_EQ(template_context({}, tools, firefunction, 0).at("functions"), tools.dump(2));
  EXPECT_EQ(template_context({}, Json(), firefunction, 0).at("functions"), "");
  EXPECT_FALSE(template_context({}, tools, "{{ tools }}", 0).contains("functions"));
}

TEST(TemplateContext, FlagsSetDefaults) {
  TemplateDefaults defaults;
  defaults.kwargs = parse_template_kwargs_flag(R"({"custom": 1, "date_string": "then"})");
  defaults.reasoning = parse_reasoning_mode("off");
  Json context = template_context(defaults, Json(), "", 0);
  EXPECT_EQ(context.at("custom"), 1);
  EXPECT_EQ(context.at("date_string"), "then");
  EXPECT_EQ(context.at("enable_thinking"), false);
  defaults.reasoning = parse_reasoning_mode("on");
  EXPECT_EQ(template_context(defaults, Json(), "", 0).at("enable_thinking"), true);
  EXPECT_EQ(parse_reasoning_mode("auto"), ReasoningMode::Auto);
  EXPECT_THROW(parse_reasoning_mode("maybe"), Error);
  EXPECT_THROW(parse_template_kwargs_flag("[1]"), Error);
  EXPECT_THROW(parse_template_kwargs_flag("{not json"), Error);
}

}  // namespace
}  // namespace okapi::server
