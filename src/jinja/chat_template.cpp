#include "jinja/chat_template.hpp"

#include "jinja/jinja_builtins.hpp"
#include "jinja/jinja_interpreter.hpp"
#include "jinja/jinja_lexer.hpp"
#include "jinja/jinja_parser.hpp"

namespace okapi::jinja {

struct ChatTemplate::Parsed {
  jinja::StmtList body;
};

ChatTemplate ChatTemplate::parse(std::string_view source, std::string name) {
  ChatTemplate result;
  result.source_ = std::make_shared<const std::string>(source);
  result.name_ = std::make_shared<const std::string>(std::move(name));
  auto parsed = std::make_shared<Parsed>();
  parsed->body = jinja::parse_template(jinja::tokenize(*result.source_, *result.name_), *result.name_);
  result.parsed_ = std::move(parsed);
  return result;
}

jinja::TaggedText ChatTemplate::render_tagged(const RenderInputs& inputs) const {
  using jinja::Value;
  auto root = std::make_shared<jinja::Scope>();
  jinja::add_globals(*root);
  // The variables the reference renderings were made with: messages, tools (undefined when none
  // are given: `tools is defined` is false), add_generation_prompt and the special tokens; then
  // chat_template_kwargs, which may override any of them. Strings from the caller's JSON are
  // caller text; bos_token and eos_token (the model's) are the template's own.
  root->set("messages", Value::from_json(inputs.messages));
  if (!inputs.tools.is_null()) root->set("tools", Value::from_json(inputs.tools));
  root->set("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
  root->set("bos_token", Value::string(inputs.bos_token));
  root->set("eos_token", Value::string(inputs.eos_token));
  if (inputs.extra.is_object()) {
    for (const auto& [key, value] : inputs.extra.items()) root->set(key, Value::from_json(value));
  }
  const std::time_t now = inputs.now ? *inputs.now : std::time(nullptr);
  // Declared after root, so destroyed first: it empties the namespaces (breaking any cycles and
  // long chains a template made of them) before the root scope lets go of the values.
  jinja::Interpreter interpreter(*name_, now);
  return interpreter.render(parsed_->body, root);
}

std::string ChatTemplate::render(const RenderInputs& inputs) const { return render_tagged(inputs).text; }

std::vector<PromptSpan> ChatTemplate::render_spans(const RenderInputs& inputs) const {
  const jinja::TaggedText tagged = render_tagged(inputs);
  std::vector<PromptSpan> spans;
  std::size_t pos = 0;
  for (const auto& [begin, end] : tagged.user) {
    if (begin > pos) spans.push_back(PromptSpan{tagged.text.substr(pos, begin - pos), false});
    spans.push_back(PromptSpan{tagged.text.substr(begin, end - begin), true});
    pos = end;
  }
  if (pos < tagged.text.size()) spans.push_back(PromptSpan{tagged.text.substr(pos), false});
  return spans;
}

}  // namespace okapi::jinja
