// Each built-in is written as llama.cpp's llm_chat_apply_template writes it (src/llama-chat.cpp,
// llama.cpp de3ff81), one branch there to one function here. Conventions of the sources:
// `c` is the message text ("" when null), `r` the role, a template literal for the usual roles (so
// that "<|user|>" built from it is read as a control token) and caller text otherwise.
#include "runtime/builtin_templates.hpp"

#include <algorithm>
#include <functional>
#include <map>

namespace okapi::runtime {

namespace {

// A Jinja expression statement writing `text` as the template's own text.
std::string lit(std::string_view text) {
  std::string out = "{{- '";
  for (const char ch : text) {
    if (ch == '\\' || ch == '\'') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out + "' -}}";
}

const std::string kEach =
    "{%- for m in messages -%}"
    "{%- set c = m.content if m.content is string else '' -%}"
    "{%- set r = 'system' if m.role == 'system' else 'user' if m.role == 'user' else 'assistant' if m.role == "
    "'assistant' else 'tool' if m.role == 'tool' else m.role -%}";
const std::string kEnd = "{%- endfor -%}";
const std::string C = "{{- c -}}";
const std::string T = "{{- c | trim -}}";
const std::string R = "{{- r -}}";

std::string gen(std::string_view text) { return "{%- if add_generation_prompt -%}" + lit(text) + "{%- endif -%}"; }
std::string when(std::string_view role, const std::string& body) { return "{%- if r == '" + std::string(role) + "' -%}" + body; }
std::string orwhen(std::string_view role, const std::string& body) {
  return "{%- elif r == '" + std::string(role) + "' -%}" + body;
}
std::string otherwise(const std::string& body) { return "{%- else -%}" + body; }
const std::string kEndIf = "{%- endif -%}";

std::string chatml() { return kEach + lit("<|im_start|>") + R + lit("\n") + C + lit("<|im_end|>\n") + kEnd + gen("<|im_start|>assistant\n"); }

std::string mistral_v7(bool tekken) {
  const std::string space = tekken ? "" : " ";
  return kEach + when("system", lit("[SYSTEM_PROMPT]" + space) + C + lit("[/SYSTEM_PROMPT]")) +
         orwhen("user", lit("[INST]" + space) + C + lit("[/INST]")) + otherwise(lit(space) + C + lit("</s>")) + kEndIf +
         kEnd;
}

enum class MistralV { V1, V3, V3Tekken };
std::string mistral(MistralV v) {
  const std::string leading = v == MistralV::V1 ? " " : "";
  const std::string trailing = v == MistralV::V3Tekken ? "" : " ";
  return "{%- set ns = namespace(inside=false) -%}" + kEach + "{%- if not ns.inside -%}" +
         lit(leading + "[INST]" + trailing) + "{%- set ns.inside = true -%}{%- endif -%}" + when("system", C + lit("\n\n")) +
         orwhen("user", C + lit(leading + "[/INST]")) +
         otherwise(lit(trailing) + (v == MistralV::V3 ? T : C) + lit("</s>") + "{%- set ns.inside = false -%}") + kEndIf +
         kEnd;
}

enum class Llama2 { Plain, Sys, SysBos, SysStrip };
std::string llama2(Llama2 v) {
  const std::string text = v == Llama2::SysStrip ? T : C;
  const std::string system = v == Llama2::Plain ? text + lit("\n") : lit("<<SYS>>\n") + text + lit("\n<</SYS>>\n\n");
  return lit("[INST] ") + "{%- set ns = namespace(inside=true) -%}" + kEach + "{%- if not ns.inside -%}" +
         "{%- set ns.inside = true -%}" + lit(v == Llama2::SysBos ? "<s>[INST] " : "[INST] ") + kEndIf +
         when("system", system) + orwhen("user", text + lit(" [/INST]")) +
         otherwise(text + lit("</s>") + "{%- set ns.inside = false -%}") + kEndIf + kEnd;
}

std::string gemma() {
  return "{%- set ns = namespace(system='') -%}" + kEach + when("system", "{%- set ns.system = ns.system + (c | trim) -%}") +
         otherwise("{%- set role = 'model' if r == 'assistant' else r -%}" + lit("<start_of_turn>") + "{{- role -}}" +
                   lit("\n") + "{%- if ns.system != '' and role != 'model' -%}{{- ns.system -}}" + lit("\n\n") +
                   "{%- set ns.system = '' -%}{%- endif -%}" + T + lit("<end_of_turn>\n")) +
         kEndIf + kEnd + gen("<start_of_turn>model\n");
}

std::string orion() {
  return "{%- set ns = namespace(system='') -%}" + kEach + when("system", "{%- set ns.system = ns.system + c -%}") +
         orwhen("user", lit("Human: ") + "{%- if ns.system != '' -%}{{- ns.system -}}" + lit("\n\n") +
                            "{%- set ns.system = '' -%}{%- endif -%}" + C + lit("\n\nAssistant: </s>")) +
         otherwise(C + lit("</s>")) + kEndIf + kEnd;
}

// Role-keyed formats: `turns` maps a role to (prefix, suffix) around the text; others write nothing.
std::string by_role(const std::vector<std::pair<std::string, std::string>>& turns, const std::string& after = {}) {
  std::string out = kEach;
  for (size_t i = 0; i < turns.size(); ++i) out += (i == 0 ? when(turns[i].first, turns[i].second) : orwhen(turns[i].first, turns[i].second));
  return out + kEndIf + kEnd + after;
}

std::string exaone(bool with_tool) {
  std::vector<std::pair<std::string, std::string>> turns = {
      {"system", lit("[|system|]") + T + lit("[|endofturn|]\n")},
      {"user", lit("[|user|]") + T + lit("\n")},
      {"assistant", lit("[|assistant|]") + T + lit("[|endofturn|]\n")}};
  if (with_tool) turns.emplace_back("tool", lit("[|tool|]") + T + lit("[|endofturn|]\n"));
  return by_role(turns, gen("[|assistant|]"));
}

std::string granite(bool v4) {
  const std::string head = v4 ? when("assistant_tool_call", lit("<|start_of_role|>assistant<|end_of_role|><|tool_call|>")) +
                                    otherwise(lit("<|start_of_role|>") + R + lit("<|end_of_role|>")) + kEndIf
                              : lit("<|start_of_role|>") + R + lit("<|end_of_role|>") +
                                    when("assistant_tool_call", lit("<|tool_call|>")) + kEndIf;
  return kEach + head + C + lit("<|end_of_text|>\n") + kEnd + gen("<|start_of_role|>assistant<|end_of_role|>");
}

std::string bailing(int kind) {  // 0 bailing, 1 bailing-think, 2 bailing2
  std::string out;
  if (kind == 2)
    out += "{%- if not (messages | length > 0 and messages[0].role == 'system') -%}" +
           lit("<role>SYSTEM</role>detailed thinking off<|role_end|>") + kEndIf;
  out += kEach + "{%- set role = 'HUMAN' if r == 'user' else r | upper -%}" + lit("<role>") + "{{- role -}}" +
         lit("</role>") + C + (kind == 2 ? lit("<|role_end|>") : std::string()) + kEnd;
  return out + gen(kind == 1 ? "<role>ASSISTANT</role><think>" : "<role>ASSISTANT</role>");
}

std::string gigachat() {
  return "{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}"
         "{%- if has_system -%}" +
         lit("<s>") + "{{- messages[0].content if messages[0].content is string else '' -}}" + lit("<|message_sep|>") +
         otherwise(lit("<s>")) + kEndIf +
         "{%- for m in (messages[1:] if has_system else messages) -%}"
         "{%- set c = m.content if m.content is string else '' -%}"
         "{%- if m.role == 'user' -%}" +
         lit("user<|role_sep|>") + C + lit("<|message_sep|>available functions<|role_sep|>[]<|message_sep|>") +
         "{%- elif m.role == 'assistant' -%}" + lit("assistant<|role_sep|>") + C + lit("<|message_sep|>") + kEndIf + kEnd +
         gen("assistant<|role_sep|>");
}

std::string hunyuan_dense() {
  return kEach + "{%- if loop.first and r == 'system' -%}" + C + lit("<｜hy_place▁holder▁no▁3｜>") + kEndIf +
         when("assistant", lit("<｜hy_Assistant｜>") + C + lit("<｜hy_place▁holder▁no▁2｜>")) +
         orwhen("user", lit("<｜hy_User｜>") + C + lit("<｜hy_Assistant｜>")) + kEndIf + kEnd;
}

std::string hunyuan_vl() {
  return lit("<｜hy_begin▁of▁sentence｜>") + kEach + "{%- if loop.first and r == 'system' -%}" + C +
         lit("<｜hy_place▁holder▁no▁3｜>") + orwhen("user", C + lit("<｜hy_User｜>")) +
         orwhen("assistant", C + lit("<｜hy_Assistant｜>")) + kEndIf + kEnd;
}

const std::map<std::string, std::function<std::string()>, std::less<>>& table() {
  static const std::map<std::string, std::function<std::string()>, std::less<>> templates = {
      {"chatml", chatml},
      {"llama2", [] { return llama2(Llama2::Plain); }},
      {"llama2-sys", [] { return llama2(Llama2::Sys); }},
      {"llama2-sys-bos", [] { return llama2(Llama2::SysBos); }},
      {"llama2-sys-strip", [] { return llama2(Llama2::SysStrip); }},
      {"mistral-v1", [] { return mistral(MistralV::V1); }},
      {"mistral-v3", [] { return mistral(MistralV::V3); }},
      {"mistral-v3-tekken", [] { return mistral(MistralV::V3Tekken); }},
      {"mistral-v7", [] { return mistral_v7(false); }},
      {"mistral-v7-tekken", [] { return mistral_v7(true); }},
      {"phi3", [] { return kEach + lit("<|") + R + lit("|>\n") + C + lit("<|end|>\n") + kEnd + gen("<|assistant|>\n"); }},
      {"phi4",
       [] {
         return kEach + lit("<|im_start|>") + R + lit("<|im_sep|>") + C + lit("<|im_end|>") + kEnd +
                gen("<|im_start|>assistant<|im_sep|>");
       }},
      {"falcon3", [] { return kEach + lit("<|") + R + lit("|>\n") + C + lit("\n") + kEnd + gen("<|assistant|>\n"); }},
      {"zephyr",
       [] { return kEach + lit("<|") + R + lit("|>\n") + C + lit("<|endoftext|>\n") + kEnd + gen("<|assistant|>\n"); }},
      {"monarch",
       [] {
         return kEach + "{%- if not loop.first -%}" + lit("<s>") + kEndIf + R + lit("\n") + C + lit("</s>\n") + kEnd +
                gen("<s>assistant\n");
       }},
      {"gemma", gemma},
      {"orion", orion},
      {"openchat",
       [] {
         return kEach + when("system", C + lit("<|end_of_turn|>")) +
                otherwise(lit("GPT4 Correct ") + "{{- (r[:1] | upper) + r[1:] -}}" + lit(": ") + C + lit("<|end_of_turn|>")) +
                kEndIf + kEnd + gen("GPT4 Correct Assistant:");
       }},
      {"vicuna",
       [] {
         return by_role({{"system", C + lit("\n\n")}, {"user", lit("USER: ") + C + lit("\n")},
                         {"assistant", lit("ASSISTANT: ") + C + lit("</s>\n")}},
                        gen("ASSISTANT:"));
       }},
      {"vicuna-orca",
       [] {
         return by_role({{"system", lit("SYSTEM: ") + C + lit("\n")}, {"user", lit("USER: ") + C + lit("\n")},
                         {"assistant", lit("ASSISTANT: ") + C + lit("</s>\n")}},
                        gen("ASSISTANT:"));
       }},
      {"deepseek",
       [] {
         return by_role({{"system", C}, {"user", lit("### Instruction:\n") + C + lit("\n")},
                         {"assistant", lit("### Response:\n") + C + lit("\n<|EOT|>\n")}},
                        gen("### Response:\n"));
       }},
      {"deepseek2",
       [] {
         return by_role({{"system", C + lit("\n\n")}, {"user", lit("User: ") + C + lit("\n\n")},
                         {"assistant", lit("Assistant: ") + C + lit("<｜end▁of▁sentence｜>")}},
                        gen("Assistant:"));
       }},
      {"deepseek3",
       [] {
         return by_role({{"system", C + lit("\n\n")}, {"user", lit("<｜User｜>") + C},
                         {"assistant", lit("<｜Assistant｜>") + C + lit("<｜end▁of▁sentence｜>")}},
                        gen("<｜Assistant｜>"));
       }},
      {"deepseek-ocr", [] { return kEach + C + kEnd; }},
      {"command-r",
       [] {
         return by_role({{"system", lit("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>") + T + lit("<|END_OF_TURN_TOKEN|>")},
                         {"user", lit("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>") + T + lit("<|END_OF_TURN_TOKEN|>")},
                         {"assistant", lit("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>") + T + lit("<|END_OF_TURN_TOKEN|>")}},
                        gen("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"));
       }},
      {"llama3",
       [] {
         return kEach + lit("<|start_header_id|>") + R + lit("<|end_header_id|>\n\n") + T + lit("<|eot_id|>") + kEnd +
                gen("<|start_header_id|>assistant<|end_header_id|>\n\n");
       }},
      {"chatglm3",
       [] { return lit("[gMASK]sop") + kEach + lit("<|") + R + lit("|>\n ") + C + kEnd + gen("<|assistant|>"); }},
      {"chatglm4",
       [] { return lit("[gMASK]<sop>") + kEach + lit("<|") + R + lit("|>\n") + C + kEnd + gen("<|assistant|>\n"); }},
      {"glmedge", [] { return kEach + lit("<|") + R + lit("|>\n") + C + kEnd + gen("<|assistant|>"); }},
      {"minicpm", [] { return kEach + when("user", lit("<用户>") + T + lit("<AI>")) + otherwise(T) + kEndIf + kEnd; }},
      {"exaone3", [] { return exaone(false); }},
      {"exaone4", [] { return exaone(true); }},
      {"exaone-moe",
       [] {
         return by_role({{"system", lit("<|system|>\n") + T + lit("<|endofturn|>\n")},
                         {"user", lit("<|user|>\n") + T + lit("<|endofturn|>\n")},
                         {"assistant", lit("<|assistant|>\n") + T + lit("<|endofturn|>\n")},
                         {"tool", lit("<|tool|>\n") + T + lit("<|endofturn|>\n")}},
                        gen("<|assistant|>\n"));
       }},
      {"rwkv-world",
       [] {
         return by_role({{"system", lit("System: ") + T + lit("\n\n")},
                         {"user", lit("User: ") + T + lit("\n\n") + "{%- if loop.last -%}" + lit("Assistant:") + kEndIf},
                         {"assistant", lit("Assistant: ") + T + lit("\n\n")}});
       }},
      {"granite", [] { return granite(false); }},
      {"granite-4.0", [] { return granite(true); }},
      {"granite-4.1", [] { return granite(true); }},
      {"gigachat", gigachat},
      {"megrez",
       [] {
         return kEach + lit("<|role_start|>") + R + lit("<|role_end|>") + C + lit("<|turn_end|>") + kEnd +
                gen("<|role_start|>assistant<|role_end|>");
       }},
      {"yandex",
       [] {
         return by_role({{"user", lit(" Пользователь: ") + C + lit("\n\n")}, {"assistant", lit(" Ассистент: ") + C + lit("\n\n")}},
                        gen(" Ассистент:[SEP]"));
       }},
      {"bailing", [] { return bailing(0); }},
      {"bailing-think", [] { return bailing(1); }},
      {"bailing2", [] { return bailing(2); }},
      {"llama4",
       [] {
         return kEach + lit("<|header_start|>") + R + lit("<|header_end|>\n\n") + T + lit("<|eot|>") + kEnd +
                gen("<|header_start|>assistant<|header_end|>\n\n");
       }},
      {"smolvlm",
       [] {
         return lit("<|im_start|>") + kEach + when("system", C + lit("\n\n")) +
                orwhen("user", lit("User: ") + C + lit("<end_of_utterance>\n")) +
                otherwise(lit("Assistant: ") + C + lit("<end_of_utterance>\n")) + kEndIf + kEnd + gen("Assistant:");
       }},
      {"hunyuan-moe",
       [] {
         return kEach + when("system", lit("<|startoftext|>") + C + lit("<|extra_4|>")) + orwhen("assistant", C + lit("<|eos|>")) +
                otherwise(lit("<|startoftext|>") + C + lit("<|extra_0|>")) + kEndIf + kEnd;
       }},
      {"gpt-oss",
       [] {
         return kEach + lit("<|start|>") + R + lit("<|message|>") + C + when("assistant", lit("<|return|>")) +
                otherwise(lit("<|end|>")) + kEndIf + kEnd + gen("<|start|>assistant");
       }},
      {"hunyuan-dense", hunyuan_dense},
      {"hunyuan-vl", hunyuan_vl},
      {"kimi-k2",
       [] {
         return kEach + when("system", lit("<|im_system|>system<|im_middle|>")) +
                orwhen("user", lit("<|im_user|>user<|im_middle|>")) +
                orwhen("assistant", lit("<|im_assistant|>assistant<|im_middle|>")) +
                orwhen("tool", lit("<|im_system|>tool<|im_middle|>")) + kEndIf + C + lit("<|im_end|>") + kEnd +
                gen("<|im_assistant|>assistant<|im_middle|>");
       }},
      {"seed_oss",
       [] {
         return kEach + lit("<seed:bos>") + R + lit("\n") + when("assistant", T) + otherwise(C) + kEndIf + lit("<seed:eos>") +
                kEnd + gen("<seed:bos>assistant\n");
       }},
      {"grok-2",
       [] {
         return by_role({{"system", lit("System: ") + T + lit("<|separator|>\n\n")},
                         {"user", lit("Human: ") + T + lit("<|separator|>\n\n")},
                         {"assistant", lit("Assistant: ") + C + lit("<|separator|>\n\n")}},
                        gen("Assistant:"));
       }},
      {"pangu-embedded",
       [] {
         return kEach + "{%- if loop.first and r != 'system' -%}" + lit("[unused9]系统：[unused10]") + kEndIf +
                when("system", lit("[unused9]系统：") + C + lit("[unused10]")) +
                orwhen("user", lit("[unused9]用户：") + C + lit("[unused10]")) +
                orwhen("assistant", lit("[unused9]助手：") + C + lit("[unused10]")) +
                orwhen("tool", lit("[unused9]工具：") + C + lit("[unused10]")) +
                orwhen("function", lit("[unused9]方法：") + C + lit("[unused10]")) + kEndIf + kEnd + gen("[unused9]助手：");
       }},
      {"solar-open",
       [] {
         return kEach + lit("<|begin|>") + R + lit("<|content|>") + C + lit("<|end|>") + kEnd + gen("<|begin|>assistant");
       }},
  };
  return templates;
}

}  // namespace

const std::vector<std::string>& builtin_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& entry : table()) out.push_back(entry.first);
    return out;
  }();
  return names;
}

std::optional<std::string> builtin_template(std::string_view name) {
  const auto it = table().find(name);
  if (it == table().end()) return std::nullopt;
  return it->second();
}

std::optional<std::string> detect_builtin_template(std::string_view tmpl) {
  if (table().contains(tmpl)) return std::string(tmpl);
  const auto has = [tmpl](std::string_view marker) { return tmpl.find(marker) != std::string_view::npos; };
  const auto name = [](const char* n) { return std::optional<std::string>(n); };
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return name("phi4");
    return has("<end_of_utterance>") ? name("smolvlm") : name("chatml");
  }
  if (tmpl.starts_with("mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return name("mistral-v7");
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return name("mistral-v1");
      if (has("\"[INST]\"")) return name("mistral-v3-tekken");
      return name("mistral-v3");
    }
    if (has("content.strip()")) return name("llama2-sys-strip");
    if (has("bos_token + '[INST]")) return name("llama2-sys-bos");
    if (has("<<SYS>>")) return name("llama2-sys");
    return name("llama2");
  }
  if (has("<|assistant|>") && has("<|end|>")) return name("phi3");
  if (has("[gMASK]<sop>")) return name("chatglm4");
  if (has("<|assistant|>") && has("<|user|>")) {
    if (has("<|tool_declare|>")) return name("exaone-moe");
    return has("</s>") ? name("falcon3") : name("glmedge");
  }
  if (has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>")) return name("glmedge");
  if (has("<|user|>") && has("<|endoftext|>")) return name("zephyr");
  if (has("bos_token + message['role']")) return name("monarch");
  if (has("<start_of_turn>")) return name("gemma");
  if (has("'\\n\\nAssistant: ' + eos_token")) return name("orion");
  if (has("GPT4 Correct ")) return name("openchat");
  if (has("USER: ") && has("ASSISTANT: ")) return has("SYSTEM: ") ? name("vicuna-orca") : name("vicuna");
  if (has("### Instruction:") && has("<|EOT|>")) return name("deepseek");
  if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return name("command-r");
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return name("llama3");
  if (has("[gMASK]sop")) return name("chatglm3");
  if (has("<用户>")) return name("minicpm");
  if (has("'Assistant: ' + message['content'] + eos_token")) return name("deepseek2");
  if (has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")) return name("deepseek3");
  if (has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]")) return has("[|tool|]") ? name("exaone4") : name("exaone3");
  if (has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}")) return name("rwkv-world");
  if (has("<|start_of_role|>")) {
    if (has("<tool_call>") || has("<tools>")) return has("g4_default_system_message") ? name("granite-4.0") : name("granite-4.1");
    return name("granite");
  }
  if (has("message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]"))
    return name("gigachat");
  if (has("<|role_start|>")) return name("megrez");
  if (has(" Ассистент:")) return name("yandex");
  if (has("<role>ASSISTANT</role>") && has("'HUMAN'")) return name("bailing");
  if (has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>")) return name("bailing-think");
  if (has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>")) return name("bailing2");
  if (has("<|header_start|>") && has("<|header_end|>")) return name("llama4");
  if (has("<|endofuserprompt|>")) return std::nullopt;  // dots1: llama.cpp has it without a name; not carried
  if (has("<|extra_0|>") && has("<|extra_4|>")) return name("hunyuan-moe");
  if (has("<|start|>") && has("<|channel|>")) return name("gpt-oss");
  if (has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>")) return name("hunyuan-vl");
  if (has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>")) return name("hunyuan-dense");
  if (has("<|im_assistant|>assistant<|im_middle|>")) return name("kimi-k2");
  if (has("<seed:bos>")) return name("seed_oss");
  if (has("'Assistant: '  + message['content'] + '<|separator|>")) return name("grok-2");
  if (has("[unused9]系统：[unused10]")) return name("pangu-embedded");
  if (has("<|begin|>") && has("<|end|>") && has("<|content|>")) return name("solar-open");
  return std::nullopt;
}

}  // namespace okapi::runtime
