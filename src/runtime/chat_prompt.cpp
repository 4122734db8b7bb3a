#include "runtime/chat_prompt.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "runtime/builtin_templates.hpp"
#include "runtime/engine.hpp"

namespace okapi::runtime {

namespace {

// A --chat-template value that reads as a name (one word of name characters), not as a template.
bool looks_like_a_name(std::string_view text) {
  return !text.empty() && text.size() <= 64 && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::string builtin_list() {
  std::string out;
  for (const auto& name : builtin_template_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

jinja::ChatTemplate pick_template(const Engine& engine, const ChatTemplateChoice& choice, std::string& origin) {
  std::string source, name;
  if (!choice.file.empty()) {
    origin = "file";
    name = choice.file;
    source = read_input_file(choice.file, "chat template file");
  } else if (!choice.text.empty()) {
    std::error_code ec;
    if (auto builtin = builtin_template(choice.text)) {
      origin = "builtin";
      return jinja::ChatTemplate::parse(*builtin, choice.text);
    } else if (std::filesystem::is_regular_file(choice.text, ec)) {
      origin = "file";
      name = choice.text;
      source = read_input_file(choice.text, "chat template file");
    } else if (looks_like_a_name(choice.text)) {
      throw_usage_error("--chat-template: '{}' is not one of the built-in templates ({}) nor a file; give Jinja "
                        "source or --chat-template-file",
                        choice.text, builtin_list());
    } else {
      origin = "flag";
      name = "--chat-template";
      source = choice.text;
    }
  } else if (const gguf::Value* in_model = engine.model().file().find("tokenizer.chat_template");
             in_model && in_model->is_string() && !in_model->as_string().empty()) {
    origin = "model";
    name = "tokenizer.chat_template";
    source = in_model->as_string();
  } else {
    origin = "chatml";
    return jinja::ChatTemplate::parse(chatml_template(), "chatml");
  }
  if (!choice.jinja) {
    // llama-server without --jinja: the built-in format the template resembles (llama.cpp's
    // llm_chat_detect_template), or a refusal for a given one; a model's unknown one stays Jinja.
    if (const auto detected = detect_builtin_template(source)) {
      origin = "builtin";
      return jinja::ChatTemplate::parse(*builtin_template(*detected), *detected);
    }
    if (origin != "model")
      throw_usage_error("the chat template given ({}) is not one llama.cpp's built-in formats supports, which "
                        "--no-jinja asks for; drop --no-jinja to render it as Jinja (built-ins: {})",
                        name, builtin_list());
  }
  return jinja::ChatTemplate::parse(source, name);
}

std::string token_text(const tokenizer::Vocab& vocab, tokenizer::TokenId id) {
  if (id < 0 || static_cast<size_t>(id) >= vocab.size()) return {};
  return vocab.tokens[static_cast<size_t>(id)];
}

}  // namespace

const char* chatml_template() {
  return "{%- for message in messages -%}\n"
         "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' -}}\n"
         "{%- endfor -%}\n"
         "{%- if add_generation_prompt -%}\n"
         "{{- '<|im_start|>assistant\\n' -}}\n"
         "{%- endif -%}\n";
}

ChatPrompt::ChatPrompt(const Engine& engine, const std::string& template_file, bool allow_special_in_content)
    : ChatPrompt(Chosen{}, engine, ChatTemplateChoice{template_file, {}, true}, allow_special_in_content) {}

ChatPrompt ChatPrompt::chosen(const Engine& engine, const ChatTemplateChoice& choice, bool allow_special_in_content) {
  return ChatPrompt(Chosen{}, engine, choice, allow_special_in_content);
}

ChatPrompt::ChatPrompt(Chosen, const Engine& engine, const ChatTemplateChoice& choice, bool allow_special_in_content)
    : tokenizer_(engine.tokenizer()),
      template_(pick_template(engine, choice, origin_)),
      allow_special_in_content_(allow_special_in_content) {
  const auto& vocab = tokenizer_.vocab();
  bos_ = token_text(vocab, vocab.bos);
  eos_ = token_text(vocab, vocab.eos);
}

std::string ChatPrompt::render(jinja::RenderInputs inputs) const {
  inputs.bos_token = bos_;
  inputs.eos_token = eos_;
  return template_.render(inputs);
}

std::vector<tokenizer::TokenId> ChatPrompt::tokens(jinja::RenderInputs inputs, const std::string& continuation) const {
  inputs.bos_token = bos_;
  inputs.eos_token = eos_;
  if (allow_special_in_content_) return tokenize(template_.render(inputs) + continuation);
  const std::vector<jinja::PromptSpan> spans = template_.render_spans(inputs);
  std::vector<tokenizer::TextPiece> pieces;
  pieces.reserve(spans.size() + 1);
  for (const auto& span : spans) pieces.push_back(tokenizer::TextPiece{span.text, !span.user});
  if (!continuation.empty()) pieces.push_back(tokenizer::TextPiece{continuation, false});
  tokenizer::EncodeOptions options;
  options.parse_special = true;
  // The template usually writes the BOS text itself; the vocabulary's automatic BOS would double
  // it. Only the template's own BOS text counts: one from the caller is plain text.
  const bool has_bos_text = !bos_.empty() && !spans.empty() && !spans.front().user &&
                            spans.front().text.compare(0, bos_.size(), bos_) == 0;
  options.add_special = !has_bos_text;
  return tokenizer_.encode(std::span<const tokenizer::TextPiece>(pieces), options);
}

std::vector<tokenizer::TokenId> ChatPrompt::tokenize(const std::string& rendered) const {
  tokenizer::EncodeOptions options;
  options.parse_special = true;
  // The template usually writes the BOS text itself; the vocabulary's automatic BOS would double it.
  const bool has_bos_text = !bos_.empty() && rendered.compare(0, bos_.size(), bos_) == 0;
  options.add_special = !has_bos_text;
  return tokenizer_.encode(rendered, options);
}

}  // namespace okapi::runtime
