#include "runtime/chat_prompt.hpp"

#include "core/input_file.hpp"
#include "runtime/engine.hpp"

namespace okapi::runtime {

namespace {

jinja::ChatTemplate pick_template(const Engine& engine, const std::string& file, std::string& origin) {
  if (!file.empty()) {
    origin = "file";
    return jinja::ChatTemplate::parse(read_input_file(file, "chat template file"), file);
  }
  const gguf::Value* in_model = engine.model().file().find("tokenizer.chat_template");
  if (in_model && in_model->is_string() && !in_model->as_string().empty()) {
    origin = "model";
    return jinja::ChatTemplate::parse(in_model->as_string(), "tokenizer.chat_template");
  }
  origin = "chatml";
  return jinja::ChatTemplate::parse(chatml_template(), "chatml");
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
    : tokenizer_(engine.tokenizer()),
      template_(pick_template(engine, template_file, origin_)),
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
