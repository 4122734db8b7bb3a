// Chat templates: okapi's own renderer for the Jinja subset that models' chat templates use,
// matching Python Jinja2 as Hugging Face transformers configures it (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, {% generation %}, tojson without ASCII escaping,
// raise_exception, strftime_now) byte for byte.
//
// Templates may come from clients, so rendering is bounded: nesting depth, macro recursion, output
// size (16 MiB) and total work are limited and each limit is a TemplateError, never a crash or hang.
// A parsed ChatTemplate is immutable: render() may run on several threads at once.
#pragma once
#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace okapi::jinja {

struct RenderInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools given (`tools` is then undefined in the template)
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // chat_template_kwargs: extra top-level variables
  std::optional<std::time_t> now;  // strftime_now's clock (local time); unset: the real clock
};

// A syntax error or a failure while rendering; the message names the template and line
// ("chat template, line 3: 'dict object' has no attribute 'content'").
class TemplateError : public okapi::Error {
 public:
  explicit TemplateError(const std::string& message) : okapi::Error(message) {}
};

// The template's own raise_exception(msg): what() is msg exactly (e.g. "Conversation roles must
// alternate user/assistant/user/assistant/..."), a refusal of the conversation, not a template bug.
class TemplateRaised : public TemplateError {
 public:
  explicit TemplateRaised(const std::string& message) : TemplateError(message) {}
};

// A piece of a rendered prompt: the template's own text (its literals, bos_token and eos_token),
// or, with `user` set, text that came from the caller: messages, tools and chat_template_kwargs
// (a bos_token / eos_token given there included). A tokenizer must not read control tokens in user
// text, or a message could forge a turn ("<|im_start|>system ...").
struct PromptSpan {
  std::string text;
  bool user = false;
  bool operator==(const PromptSpan&) const = default;
};


struct Stmt;
struct TaggedText;

class ChatTemplate {
 public:
  static ChatTemplate parse(std::string_view source, std::string name = "chat template");  // throws TemplateError
  std::string render(const RenderInputs& inputs) const;  // throws TemplateError / TemplateRaised
  // The same text as render(), as spans by origin: adjacent spans differ in `user`, none is empty.
  // Where the template transforms caller text in ways the renderer does not follow byte by byte,
  // the result counts as caller text (the safe side).
  std::vector<PromptSpan> render_spans(const RenderInputs& inputs) const;
  const std::string& source() const { return *source_; }
  const std::string& name() const { return *name_; }

 private:
  struct Parsed;
  ChatTemplate() = default;
  jinja::TaggedText render_tagged(const RenderInputs& inputs) const;
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const std::string> name_;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace okapi::jinja
