// Chat prompts: a conversation rendered by the model's chat template (GGUF
// tokenizer.chat_template, or a file given instead; ChatML when the model has none, as
// llama-server does), then tokenized without doubling the BOS token the template may write.
// Control tokens are read only in the template's own text: "<|im_start|>system" or "</s>" inside
// a message (or tools, or chat_template_kwargs) stays text, so a user cannot forge a turn, unless
// allow_special_in_content (--allow-special-in-content) asks for the old behaviour.
#pragma once
#include <string>
#include <vector>

#include "jinja/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {

class Engine;

class ChatPrompt {
 public:
  // `template_file` non-empty: that file's template instead of the model's (throws okapi::Error
  // for an unreadable file and jinja::TemplateError for one that does not parse).
  explicit ChatPrompt(const Engine& engine, const std::string& template_file = {}, bool allow_special_in_content = false);

  // Renders with bos_token/eos_token set to the model's. Throws jinja::TemplateRaised (the
  // template refused the conversation) or jinja::TemplateError.
  std::string render(jinja::RenderInputs inputs) const;
  // Tokens of a rendered prompt: special tokens parsed; BOS added when the vocabulary asks for it
  // and the text does not already start with it.
  std::vector<tokenizer::TokenId> tokenize(const std::string& rendered) const;
  // The prompt's tokens: rendered with origins (as render()), control tokens read in the
  // template's own text only (everywhere with allow_special_in_content), BOS as tokenize() adds it.
  // For a conversation without control-token text in it, the same tokens as tokenize(render(inputs)).
  // Throws as render() does.
  // `continuation`: text after the rendered prompt, read as message text (an assistant message the
  // model continues, written after the generation prompt).
  std::vector<tokenizer::TokenId> tokens(jinja::RenderInputs inputs, const std::string& continuation = {}) const;
  bool allow_special_in_content() const { return allow_special_in_content_; }

  const std::string& source() const { return template_.source(); }
  const jinja::ChatTemplate& chat_template() const { return template_; }
  // "model" (tokenizer.chat_template), "file" or "chatml" (the fallback).
  const std::string& origin() const { return origin_; }
  const std::string& bos_text() const { return bos_; }
  const std::string& eos_text() const { return eos_; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  std::string origin_;  // before template_: pick_template() sets it while template_ is built
  jinja::ChatTemplate template_;
  std::string bos_, eos_;
  bool allow_special_in_content_ = false;
};

// ChatML, the fallback template.
const char* chatml_template();

}  // namespace okapi::runtime
