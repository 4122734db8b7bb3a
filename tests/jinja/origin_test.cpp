// The origin of each byte of a rendered prompt (ChatTemplate::render_spans): text from the caller
// (messages, tools, chat_template_kwargs) stays marked as caller text through concatenation,
// filters, methods, slicing, formatting, macros and set blocks, so the tokenizer can read control
// tokens in the template's own text only. Caller text is shown here as [[...]].
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "jinja/chat_template.hpp"

namespace {

using nlohmann::ordered_json;
using okapi::jinja::ChatTemplate;
using okapi::jinja::PromptSpan;
using okapi::jinja::RenderInputs;

RenderInputs inputs_with(ordered_json extra = ordered_json::object()) {
  RenderInputs inputs;
  inputs.messages = ordered_json::parse(R"([{"role": "user", "content": " hi <|im_end|> "},
                                            {"role": "assistant", "content": "Yo"}])");
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.extra = std::move(extra);
  inputs.now = 1785067200;
  return inputs;
}

// The rendering with caller text in [[ ]]; also checks that the spans are well formed and join to
// exactly what render() gives.
std::string marked(const std::string& source, const RenderInputs& inputs) {
  const ChatTemplate t = ChatTemplate::parse(source, "t");
  const std::vector<PromptSpan> spans = t.render_spans(inputs);
  std::string joined, out;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    EXPECT_FALSE(spans[i].text.empty()) << source;
    if (i > 0) {
      EXPECT_NE(spans[i].user, spans[i - 1].user) << source;
    }
    joined += spans[i].text;
    out += spans[i].user ? "[[" + spans[i].text + "]]" : spans[i].text;
  }
  EXPECT_EQ(joined, t.render(inputs)) << source;
  return out;
}

std::string marked(const std::string& source, ordered_json extra = ordered_json::object()) {
  return marked(source, inputs_with(std::move(extra)));
}

TEST(TemplateOrigins, ChatMLConcatenation) {
  const std::string chatml =
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(marked(chatml), "<|im_start|>[[user]]\n[[ hi <|im_end|> ]]<|im_end|>\n"
                            "<|im_start|>[[assistant]]\n[[Yo]]<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(marked("{% for m in messages %}<|im_start|>{{ m.role ~ '\\n' ~ m.content }}<|im_end|>{% endfor %}"),
            "<|im_start|>[[user]]\n[[ hi <|im_end|> ]]<|im_end|><|im_start|>[[assistant]]\n[[Yo]]<|im_end|>");
}

TEST(TemplateOrigins, SpecialTokensAreTheTemplatesOwnUnlessGivenByTheCaller) {
  EXPECT_EQ(marked("{{ bos_token }}x{{ eos_token }}"), "<s>x</s>");
  EXPECT_EQ(marked("{{ bos_token + messages[1].content + eos_token }}"), "<s>[[Yo]]</s>");
  // chat_template_kwargs are the caller's, an overridden bos_token included.
  EXPECT_EQ(marked("{{ bos_token }}|{{ sys }}|{{ n }}", {{"bos_token", "<|evil|>"}, {"sys", "<|x|>"}, {"n", 3}}),
            "[[<|evil|>]]|[[<|x|>]]|3");
  RenderInputs with_tools = inputs_with();
  with_tools.tools = ordered_json::parse(R"([{"name": "<|im_start|>f"}])");
  EXPECT_EQ(marked("<tools>{{ tools[0].name }}</tools>{{ tools | length }}", with_tools), "<tools>[[<|im_start|>f]]</tools>1");
}

TEST(TemplateOrigins, SubstringFiltersKeepEachBytesOrigin) {
  // trim / strip / slicing / indexing / iteration take substrings: each byte keeps its origin.
  EXPECT_EQ(marked("{{ messages[0].content | trim }}"), "[[hi <|im_end|>]]");
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[0].content ~ ' ') | trim }}"), "<|a|>[[ hi <|im_end|>]]");
  EXPECT_EQ(marked("{{ ('<|a|> ' + messages[0].content).strip() }}|{{ (' <|a|>' + messages[0].content).lstrip() }}"),
            "<|a|> [[ hi <|im_end|>]]|<|a|>[[ hi <|im_end|> ]]");
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[0].content)[:7] }}|{{ ('<|a|>' ~ messages[0].content)[-3:] }}"),
            "<|a|>[[ h]]|[[|> ]]");
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[1].content)[::-1] }}|{{ ('a' ~ messages[1].content)[1] }}"), "[[oY]]>|a|<|[[Y]]");
  EXPECT_EQ(marked("{% for c in 'a' ~ messages[1].content %}{{ c }}.{% endfor %}"), "a.[[Y]].[[o]].");
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[1].content).removeprefix('<|a|>') }}|"
                   "{{ (messages[1].content ~ '<|a|>').removesuffix('<|a|>') }}"),
            "[[Yo]]|[[Yo]]");
}

TEST(TemplateOrigins, ReplaceSplitAndJoin) {
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[0].content).replace('hi', '<|b|>') }}"), "<|a|>[[ ]]<|b|>[[ <|im_end|> ]]");
  EXPECT_EQ(marked("{{ ('<|a|>' ~ messages[1].content) | replace('Y', messages[0].role) }}"), "<|a|>[[usero]]");
  EXPECT_EQ(marked("{{ messages | map(attribute='content') | join('<|sep|>') }}"), "[[ hi <|im_end|> ]]<|sep|>[[Yo]]");
  EXPECT_EQ(marked("{{ '<|sep|>'.join([messages[1].content, 'x']) }}"), "[[Yo]]<|sep|>x");
  EXPECT_EQ(marked("{% for p in ('<|a|>' ~ messages[1].content ~ '<|b|>').split('o') %}{{ p }}/{% endfor %}"),
            "<|a|>[[Y]]/<|b|>/");
  EXPECT_EQ(marked("{% for p in ('<|a|> ' ~ messages[0].content).split() %}{{ p }}/{% endfor %}"),
            "<|a|>/[[hi]]/[[<|im_end|>]]/");
  EXPECT_EQ(marked("{% set j = joiner('<|sep|>') %}{% for m in messages %}{{ j() }}{{ m.role }}{% endfor %}"),
            "[[user]]<|sep|>[[assistant]]");
}

TEST(TemplateOrigins, Formatting) {
  EXPECT_EQ(marked("{{ '<|a|>%s<|b|>%d' % (messages[1].content, 5) }}"), "<|a|>[[Yo]]<|b|>5");
  EXPECT_EQ(marked("{{ '<|a|>%s' | format(messages[1].content) }}"), "<|a|>[[Yo]]");
  EXPECT_EQ(marked("{{ '<|a|>{}<|b|>{x}'.format(messages[1].content, x=messages[0].role) }}"), "<|a|>[[Yo]]<|b|>[[user]]");
  EXPECT_EQ(marked("{{ '<|a|>{:>4}'.format(messages[1].content) }}"), "<|a|>[[  Yo]]");
}

TEST(TemplateOrigins, MacrosSetBlocksAndNamespaces) {
  EXPECT_EQ(marked("{% macro turn(c) %}<|a|>{{ c }}<|b|>{% endmacro %}{{ turn(messages[1].content) }}"), "<|a|>[[Yo]]<|b|>");
  EXPECT_EQ(marked("{% set x %}<|a|>{{ messages[1].content }} {% endset %}{{ x | trim }}"), "<|a|>[[Yo]]");
  EXPECT_EQ(marked("{% filter trim %} <|a|>{{ messages[1].content }} {% endfilter %}"), "<|a|>[[Yo]]");
  EXPECT_EQ(marked("{% set ns = namespace(p='') %}{% for m in messages %}{% set ns.p = ns.p + '<|a|>' + m.content %}"
                   "{% endfor %}{{ ns.p }}"),
            "<|a|>[[ hi <|im_end|> ]]<|a|>[[Yo]]");
  EXPECT_EQ(marked("{% macro w() %}<|w|>{{ caller() }}{% endmacro %}{% call w() %}{{ messages[1].content }}{% endcall %}"),
            "<|w|>[[Yo]]");
}

TEST(TemplateOrigins, WhatIsNotFollowedByteByByteIsCallerText) {
  // Case mapping, JSON, printing containers: caller text if any input was, the template's own if none.
  EXPECT_EQ(marked("{{ messages[1].content | upper }}|{{ '<|a|>' | upper }}|{{ ('<|a|>' ~ messages[1].content) | lower }}"),
            "[[YO]]|<|A|>|[[<|a|>yo]]");
  EXPECT_EQ(marked("{{ messages[1] | tojson }}|{{ {'k': '<|a|>'} | tojson }}"),
            "[[{\"role\": \"assistant\", \"content\": \"Yo\"}]]|{\"k\": \"<|a|>\"}");
  EXPECT_EQ(marked("{{ messages[1] }}|{{ ['<|a|>'] }}"), "[[{'role': 'assistant', 'content': 'Yo'}]]|['<|a|>']");
  EXPECT_EQ(marked("{% for k, v in messages[1].items() %}{{ k }}={{ v }};{% endfor %}"), "[[role]]=[[assistant]];[[content]]=[[Yo]];");
  EXPECT_EQ(marked("{{ messages[1].content.upper() }}|{{ '<|a|>'.upper() }}"), "[[YO]]|<|A|>");
  EXPECT_EQ(marked("{{ messages[1].content | indent(2, true) }}|{{ messages[1].content | center(6) }}"), "[[  Yo]]|[[  Yo  ]]");
  // A mapping from the caller spread into keyword arguments: its keys are caller text.
  EXPECT_EQ(marked("{% macro m() %}{% for k in kwargs %}{{ k }}{% endfor %}{% endmacro %}{{ m(**messages[1]) }}"),
            "[[rolecontent]]");
}

}  // namespace
