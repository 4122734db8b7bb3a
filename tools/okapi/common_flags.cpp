#include "common_flags.hpp"

#include "core/input_file.hpp"
#include "grammar/grammar.hpp"
#include "grammar/json_schema.hpp"
#include "sample/sampler.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "cli_app.hpp"
#include "core/error.hpp"
#include "hub/hub.hpp"
#include "runtime/drafters.hpp"

namespace okapi::cli {
namespace {

constexpr double kMaxCount = 2147483647.0;  // counts and lengths are int32 in GGUF and the KV cache

std::string bound(double v) {
  if (v == kUnbounded) return "inf";
  if (v == -kUnbounded) return "-inf";
  return fmt::format("{}", v);
}

// "" when `text` is a finite number in [lo, hi], else the reason.
std::string check_number(const std::string& text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || std::isnan(v))
    return fmt::format("'{}' is not a number", text);
  if (!std::isfinite(v) || errno == ERANGE || v < lo || v > hi)
    return fmt::format("{} is out of range [{}, {}]", text, bound(lo), bound(hi));
  return {};
}

// ---- llama.cpp habits (accept_llama_habits) ----

enum class Takes { Nothing, Value, MaybeValue };

struct Habit {
  std::vector<std::string_view> names;  // as llama.cpp spells them
  Takes takes = Takes::Nothing;
  std::string_view values;  // what a value may be, for messages
  bool (*accepts)(std::string_view) = nullptr;
};

// Each item of a comma-separated list passes `item` (llama-bench takes lists: -ngl 0,99).
template <typename Item>
bool each_item(std::string_view list, Item item) {
  if (list.empty()) return false;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (!item(list.substr(start, comma - start))) return false;
    start = comma + 1;
  }
  return true;
}

// -ngl: a layer count (llama-bench: also lists and ranges such as 0-99+33), auto or all.
bool gpu_layers_value(std::string_view v) {
  return each_item(v, [](std::string_view item) {
    if (item == "auto" || item == "all") return true;
    const bool digits = std::any_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    return digits && std::all_of(item.begin(), item.end(), [](char c) {
             return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '*';
           });
  });
}

// -fa: on, off or auto (llama.cpp), 1 / 0 (llama-bench's older spelling), true / false.
bool flash_attn_value(std::string_view v) {
  return each_item(v, [](std::string_view item) {
    for (const std::string_view known : {"on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled"})
      if (item == known) return true;
    return false;
  });
}

const Habit kGpuLayers{{"-ngl", "--n-gpu-layers", "--gpu-layers"}, Takes::Value, "a layer count, auto or all",
                       gpu_layers_value};
const Habit kDraftGpuLayers{{"-ngld", "--n-gpu-layers-draft", "--gpu-layers-draft"}, Takes::Value,
                            "a layer count, auto or all", gpu_layers_value};
const Habit kFlashAttn{{"-fa", "--flash-attn"}, Takes::MaybeValue, "on, off or auto", flash_attn_value};
const Habit kConversation{{"-cnv", "--conversation"}, Takes::Nothing, {}, nullptr};
const Habit kInteractive{{"-i", "--interactive", "-if", "--interactive-first"}, Takes::Nothing, {}, nullptr};
const Habit kNoConversation{{"-no-cnv", "--no-conversation"}, Takes::Nothing, {}, nullptr};

enum class Action { Ignore, Refuse };

struct HabitRule {
  const Habit* habit;
  std::vector<std::string_view> verbs;
  Action action;
  std::string_view why;
};

const std::vector<HabitRule>& habit_rules() {
  static const std::vector<std::string_view> model_verbs{"run",        "chat",   "serve", "bench",
                                                          "perplexity", "logits", "embed"};
  static const std::vector<HabitRule> rules{
      {&kGpuLayers, model_verbs, Action::Ignore, "okapi runs on the CPU"},
      {&kDraftGpuLayers, {"run", "serve"}, Action::Ignore, "okapi runs on the CPU"},
      {&kFlashAttn, model_verbs, Action::Ignore,
       "okapi's attention is always tiled (computed block by block, as flash attention is)"},
      {&kNoConversation, {"run"}, Action::Ignore, "okapi run is never conversational (okapi chat is)"},
      {&kConversation, {"chat"}, Action::Ignore, "okapi chat always converses"},
      {&kInteractive, {"chat"}, Action::Ignore, "okapi chat is always interactive"},
      {&kConversation, {"run"}, Action::Refuse, "okapi run does not converse; use `okapi chat -m MODEL`"},
      {&kInteractive, {"run"}, Action::Refuse, "okapi run is not interactive; use `okapi chat -m MODEL`"},
      {&kNoConversation, {"chat"}, Action::Refuse,
       "okapi chat always converses; use `okapi run -m MODEL -p PROMPT` for one completion"},
  };
  return rules;
}

bool contains(const std::vector<std::string_view>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// llama.cpp's multi-letter single-dash spellings of the model-source flags (CLI11 would read -hf
// as -h f): the long name, or "" when `arg` is not one of them for `verb`.
std::string_view model_source_spelling(std::string_view verb, std::string_view arg) {
  static const std::vector<std::string_view> verbs{"run", "chat", "serve", "bench", "perplexity", "embed"};
  if (!contains(verbs, verb)) return {};
  if (arg == "-hf" || arg == "-hfr") return "--hf-repo";
  if (arg == "-hff") return "--hf-file";
  if (arg == "-hft") return "--hf-token";
  if (arg == "-mu") return "--model-url";
  return {};
}

int habit_usage_error(const std::string& message) {
  std::fprintf(stderr, "okapi: error: %s\n", message.c_str());
  return kExitUsage;
}

}  // namespace

int accept_llama_habits(std::vector<std::string>& args) {
  if (args.empty()) return 0;
  const std::string& verb = args.front();
  std::vector<std::string> kept{verb};
  std::set<std::string> noted;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {  // positional arguments follow: left alone
      kept.insert(kept.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (verb == "bench" && arg == "-pg") {  // llama-bench's only spelling
      kept.push_back("--pg");
      continue;
    }
    if (const std::string_view long_name = model_source_spelling(verb, arg); !long_name.empty()) {
      kept.emplace_back(long_name);
      continue;
    }
    // "--flash-attn=on": the name, and the value given with it.
    const size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
    const std::string name = arg.substr(0, eq);
    const HabitRule* rule = nullptr;
    for (const HabitRule& r : habit_rules())
      if (contains(r.verbs, verb) && contains(r.habit->names, name)) rule = &r;
    if (rule == nullptr) {
      kept.push_back(arg);
      continue;
    }
    const Habit& habit = *rule->habit;
    if (eq != std::string::npos) {
      const std::string value = arg.substr(eq + 1);
      if (habit.takes == Takes::Nothing) return habit_usage_error(fmt::format("{} takes no value", name));
      if (!habit.accepts(value))
        return habit_usage_error(fmt::format("{}: '{}' is not {}", name, value, habit.values));
    } else if (habit.takes != Takes::Nothing) {
      const bool has_next = i + 1 < args.size();
      if (has_next && habit.accepts(args[i + 1])) {
        ++i;  // the flag's value, taken out with it
      } else if (habit.takes == Takes::Value) {
        if (!has_next || args[i + 1].rfind("-", 0) == 0 || args[i + 1].empty())
          return habit_usage_error(fmt::format("{} needs a value ({})", name, habit.values));
        return habit_usage_error(fmt::format("{}: '{}' is not {}", name, args[i + 1], habit.values));
      }
    }
    if (rule->action == Action::Refuse) return habit_usage_error(fmt::format("{}: {}", name, rule->why));
    if (noted.insert(name).second) std::fprintf(stderr, "okapi: note: %s ignored: %.*s\n", name.c_str(),
                                                static_cast<int>(rule->why.size()), rule->why.data());
  }
  args = std::move(kept);
  return 0;
}

void add_model_source_flags(CLI::App* cmd, ModelSourceFlags& flags, CLI::Option* model) {
  auto* repo = cmd->add_option("--hf-repo", flags.hf_repo,
                               "Hugging Face repo USER/REPO[:QUANT] to download the model from into the cache "
                               "(also -hf, -hfr; QUANT case-insensitive, default Q4_K_M, else Q8_0, else the first GGUF)")
                   ->check(non_empty());
  cmd->add_option("--hf-file", flags.hf_file, "the repo's GGUF file to use, instead of a QUANT (also -hff)")
      ->check(non_empty())
      ->needs(repo);
  cmd->add_option("--hf-token", flags.hf_token, "Hugging Face access token (also -hft; default: $HF_TOKEN)");
  auto* url = cmd->add_option("--model-url", flags.model_url, "download the GGUF from this URL into the cache (also -mu)")
                  ->check(non_empty());
  cmd->add_flag("--offline", flags.offline,
                "use the cache only, no network: a --hf-repo or --model-url not downloaded yet is an error");
  repo->excludes(url);
  if (model != nullptr) {
    model->excludes(repo)->excludes(url);
    repo->excludes(model);
    url->excludes(model);
  }
}

std::string resolve_model_source(const std::string& model, const ModelSourceFlags& flags) {
  if (!model.empty()) return model;
  hub::HubOptions options;
  options.offline = flags.offline;
  options.token = flags.hf_token.empty() ? hub::default_token() : flags.hf_token;
  if (!flags.hf_repo.empty()) return hub::resolve_hf_model(flags.hf_repo, flags.hf_file, options).string();
  if (!flags.model_url.empty()) return hub::resolve_model_url(flags.model_url, options).string();
  return {};
}

void require_model_source(std::string_view verb, const std::string& model, const ModelSourceFlags& flags) {
  if (model.empty() && flags.hf_repo.empty() && flags.model_url.empty())
    throw_usage_error("{}: no model: pass -m FILE, --hf-repo USER/REPO[:QUANT] or --model-url URL", verb);
}

std::string process_escapes(std::string_view text) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case 'x':
        if (i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
          out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:  // not an escape: the backslash stays
        out += '\\';
        out += c;
    }
  }
  return out;
}

CLI::Validator in_range(double lo, double hi) {
  return CLI::Validator([lo, hi](std::string& value) { return check_number(value, lo, hi); },
                        fmt::format("in [{}, {}]", bound(lo), bound(hi)));
}

CLI::Validator each_in_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) {
        if (value.empty()) return std::string("the list is empty");
        size_t start = 0;
        while (start <= value.size()) {
          const size_t comma = std::min(value.find(',', start), value.size());
          const std::string item = value.substr(start, comma - start);
          if (std::string reason = check_number(item, lo, hi); !reason.empty()) return reason;
          start = comma + 1;
        }
        return std::string();
      },
      fmt::format("each in [{}, {}]", bound(lo), bound(hi)));
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& value) { return value.empty() ? std::string("the value is empty") : std::string(); }, "");
}

void add_threads_flag(CLI::App* cmd, int& threads) {
  cmd->add_option("-t,--threads", threads, "threads (default: one per core)")
      ->capture_default_str()
      ->check(in_range(1, kMaxThreads));
}

void add_pipeline_flag(CLI::App* cmd, bool& pipeline) {
  cmd->add_flag("--pipeline", pipeline,
                "under mpirun -np N: split the layers across the N ranks (pipeline parallel; rank 0 prints)");
}

void check_pipeline_flags(bool pipeline, const runtime::DrafterOptions& drafting) {
  if (pipeline && !drafting.skip_layers.empty())
    throw_usage_error("--draft-skip drafts with the model's own layers in one process; it cannot be combined with "
                      "--pipeline");
}

void add_ctx_flag(CLI::App* cmd, int64_t& n_ctx, const std::string& description) {
  cmd->add_option("-c,--ctx-size", n_ctx, description)->check(in_range(0, kMaxCount));
}

void add_batch_flag(CLI::App* cmd, int64_t& batch_size, const std::string& description) {
  cmd->add_option("-b,--batch-size", batch_size, description)->capture_default_str()->check(in_range(1, kMaxCount));
}

void add_seed_flag(CLI::App* cmd, int64_t& seed) {
  cmd->add_option("-s,--seed", seed, "RNG seed (-1: random)")->capture_default_str()->check(in_range(-1, 4294967295.0));
}

void add_cache_type_flags(CLI::App* cmd, kv::CacheTypes& cache) {
  // kv::CacheType's table is the one list of types: the validator reports its error, the callback
  // (run once the value is valid) stores the parsed type.
  const auto known_type = CLI::Validator(
      [](std::string& value) {
        try {
          (void)kv::CacheType::parse(value);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      },
      "");
  std::vector<std::string_view> names;
  for (const kv::CacheType type : kv::CacheType::all()) names.push_back(type.name());
  const std::string name_list = fmt::format("{}", fmt::join(names, ", "));
  cmd->add_option_function<std::string>(
         "--cache-type-k", [&cache](const std::string& name) { cache.k = kv::CacheType::parse(name); },
         "K cache type: " + name_list + " (also -ctk)")
      ->default_str(std::string(cache.k.name()))
      ->check(known_type);
  cmd->add_option_function<std::string>(
         "--cache-type-v", [&cache](const std::string& name) { cache.v = kv::CacheType::parse(name); },
         "V cache type: " + name_list + " (also -ctv)")
      ->default_str(std::string(cache.v.name()))
      ->check(known_type);
  cmd->add_option_function<std::string>(
         "--kv-rotate", [&cache](const std::string& name) { cache.rotation = kv::parse_kv_rotation(name); },
         "rotate K and V rows before storing them: none, or hadamard (seeded randomized Hadamard per layer and "
         "head; any head width)")
      ->default_str(std::string(kv::kv_rotation_name(cache.rotation)))
      ->check(CLI::IsMember({"none", "hadamard"}));
}

void add_drafting_flags(CLI::App* cmd, runtime::DrafterOptions& drafting) {
  auto* lookup = cmd->add_option("--lookup", drafting.lookup,
                                  "speculative decoding with prompt lookup: draft what followed the longest earlier "
                                  "match of the last N tokens")
                      ->check(in_range(1, 64));
  auto* draft_model = cmd->add_option("--draft-model,--model-draft", drafting.draft_model,
                                      "speculative decoding with a draft model of the same vocabulary (also -md; a "
                                      "smaller model, or one made by okapi compress)")
                          ->check(non_empty());
  auto* draft_skip = cmd->add_option("--draft-skip", drafting.skip_layers,
                                     "speculative decoding drafting with the model itself, these layers left out "
                                     "(0-based, e.g. 2,4-6)")
                         ->check(non_empty());
  lookup->excludes(draft_model)->excludes(draft_skip);
  draft_model->excludes(lookup)->excludes(draft_skip);
  draft_skip->excludes(lookup)->excludes(draft_model);
  cmd->add_option("--draft-max,--draft,--spec-draft-n-max,--draft-n", drafting.draft_max, "most tokens drafted a round")
      ->capture_default_str()
      ->check(in_range(1, 256));
  cmd->add_option("--draft-min,--spec-draft-n-min,--draft-n-min", drafting.draft_min, "fewest drafted tokens worth verifying (fewer: decode plainly)")
      ->capture_default_str()
      ->check(in_range(0, 256));
  cmd->add_option("--draft-p-min,--spec-draft-p-min", drafting.p_min,
                  "a model drafter stops when its pick's probability is below this")
      ->capture_default_str()
      ->check(in_range(0, 1));
}

void check_drafting_flags(const runtime::DrafterOptions& drafting) {
  if (drafting.draft_min > drafting.draft_max)
    throw_usage_error("--draft-min {} is more than --draft-max {}", drafting.draft_min, drafting.draft_max);
}

int default_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 512u)); }

void add_sampling_flags(CLI::App* cmd, sample::SamplerConfig& s) {
  cmd->add_option("--temp", s.temperature, "temperature (<= 0: greedy)")->capture_default_str()->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--top-k", s.top_k, "top-k (<= 0: off)")->capture_default_str()->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--top-p", s.top_p, "top-p (1: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--min-p", s.min_p, "min-p (0: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--typical", s.typical_p, "locally typical sampling p (1: off)")->capture_default_str()->check(in_range(0, 1));
  cmd->add_option("--repeat-penalty", s.repeat_penalty, "repetition penalty (1: off)")->capture_default_str()
      ->check(in_range(1e-6, kUnbounded));
  cmd->add_option("--repeat-last-n", s.repeat_last_n, "penalty window (0: off, -1: all)")->capture_default_str()
      ->check(in_range(-1, kUnbounded));
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "frequency penalty")->capture_default_str()
      ->check(in_range(-kUnbounded, kUnbounded));
  cmd->add_option("--presence-penalty", s.presence_penalty, "presence penalty")->capture_default_str()
      ->check(in_range(-kUnbounded, kUnbounded));
}

void add_grammar_flags(CLI::App* cmd, GrammarFlags& flags) {
  auto* g = cmd->add_option("--grammar", flags.grammar, "constrain the output with a GBNF grammar (llama.cpp's format)");
  auto* gf = cmd->add_option("--grammar-file", flags.grammar_file, "... read from a file")->check(non_empty());
  auto* j = cmd->add_option("--json-schema", flags.json_schema, "constrain the output to JSON matching a JSON Schema");
  auto* jf = cmd->add_option("--json-schema-file", flags.json_schema_file, "... read from a file")->check(non_empty());
  const std::vector<CLI::Option*> all = {g, gf, j, jf};
  for (auto* a : all)
    for (auto* b : all)
      if (a != b) a->excludes(b);
}

std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarFlags& flags) {
  std::string text, flag;
  if (!flags.grammar.empty() || !flags.grammar_file.empty()) {
    flag = flags.grammar_file.empty() ? "--grammar" : "--grammar-file";
    text = flags.grammar_file.empty() ? flags.grammar : read_input_file(flags.grammar_file, "grammar file");
  } else if (!flags.json_schema.empty() || !flags.json_schema_file.empty()) {
    flag = flags.json_schema_file.empty() ? "--json-schema" : "--json-schema-file";
    const std::string source =
        flags.json_schema_file.empty() ? flags.json_schema : read_input_file(flags.json_schema_file, "JSON schema file");
    const auto schema = nlohmann::ordered_json::parse(source, nullptr, false);
    if (schema.is_discarded()) throw_error("{}: not valid JSON", flag);
    try {
      text = grammar::json_schema_to_gbnf(schema);
    } catch (const grammar::SchemaError& e) {
      throw_error("{}: {}", flag, e.what());
    }
  } else {
    return nullptr;
  }
  try {
    return grammar::Grammar::parse(text);
  } catch (const grammar::GrammarError& e) {
    throw_error("{}: {}", flag, e.what());
  }
}

}  // namespace okapi::cli
