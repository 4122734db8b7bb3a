#include "cli_app.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <string_view>
#include <system_error>

#include "common_flags.hpp"
#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "verbs.hpp"

namespace okapi::cli {
namespace {

constexpr std::string_view kVersion = "okapi 0.1.0";

// llama.cpp spells some flags with multi-letter single dashes (-ctk); CLI11 only accepts one-letter
// short names, so they are rewritten to their long forms before parsing.
std::string llama_style_flag(const std::string& arg) {
  if (arg == "-ctk") return "--cache-type-k";
  if (arg == "-ctv") return "--cache-type-v";
  if (arg == "-md") return "--draft-model";
  if (arg == "-np") return "--parallel";
  if (arg == "-ub") return "--ubatch-size";
  if (arg == "-cb") return "--cont-batching";
  if (arg == "-kvu") return "--kv-unified";
  if (arg == "-sps") return "--slot-prompt-similarity";
  return arg;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" when one candidate is close enough to be a likely typo.
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (!best || d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  if (!best || best_distance > std::max<size_t>(2, word.size() / 3)) return {};
  return fmt::format(" (did you mean '{}'?)", *best);
}

std::vector<std::string> verb_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> flag_names(const CLI::App& verb) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : verb.get_options()) {
    for (const auto& s : opt->get_snames()) names.push_back("-" + s);
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
  }
  return names;
}

// The text that follows "okapi: error: " for a CLI11 parse error inside `verb`.
std::string describe_parse_error(const CLI::ParseError& e, const CLI::App& verb) {
  const std::string name = verb.get_name();
  const std::string help = fmt::format("; see 'okapi {} --help'", name);
  // An unknown flag first, whatever else failed: a typo explains the other errors best.
  const std::vector<std::string> extras = verb.remaining();
  if (!extras.empty()) {
    const std::string& first = extras.front();
    if (!first.empty() && first[0] == '-')
      return fmt::format("{}: unknown flag '{}'{}{}", name, first, suggestion(first, flag_names(verb)), help);
    return fmt::format("{}: unexpected argument '{}'{}", name, first, help);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    // CLI11: "-m: 1 required TEXT missing" / "Expected exactly 1 arguments to ...".
    std::string what = e.what();
    const size_t colon = what.find(':');
    if (colon != std::string::npos && what.rfind("missing") != std::string::npos)
      return fmt::format("{}: {} needs a value{}", name, what.substr(0, colon), help);
    return fmt::format("{}: {}{}", name, what, help);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    std::string what = e.what();  // "Could not convert: --top-p = abc"
    constexpr std::string_view kPrefix = "Could not convert: ";
    if (what.rfind(kPrefix, 0) == 0) {
      const std::string rest = what.substr(kPrefix.size());
      const size_t eq = rest.find(" = ");
      if (eq != std::string::npos)
        return fmt::format("{}: {} '{}' is not a valid value for this flag{}", name, rest.substr(0, eq),
                           rest.substr(eq + 3), help);
    }
    return fmt::format("{}: {}{}", name, what, help);
  }
  return fmt::format("{}: {}{}", name, e.what(), help);
}

// "the context holds only 512 tokens" + " (-c)"; a run that does not fit in memory + "; try a
// smaller -c or a smaller -b".
std::string with_flag(const Error& e) {
  const std::string_view flag = setting_flag(e.setting());
  std::string text = flag.empty() ? std::string(e.what()) : fmt::format("{} ({})", e.what(), flag);
  return text + remedy_advice(e.remedies(), setting_flag);
}

// Library warnings (okapi::warn) name the flag as errors do.
void print_warning(const std::string& message, Setting setting) {
  const std::string_view flag = setting_flag(setting);
  if (flag.empty()) {
    std::fprintf(stderr, "okapi: warning: %s\n", message.c_str());
  } else {
    std::fprintf(stderr, "okapi: warning: %s (%.*s)\n", message.c_str(), static_cast<int>(flag.size()), flag.data());
  }
}

void print_error(const std::string& message) { std::fprintf(stderr, "okapi: error: %s\n", message.c_str()); }

int usage_error(const std::string& message) {
  print_error(message);
  return kExitUsage;
}

// A verb's exit code; the errno when it returned (why a write to stdout failed, if one did); and
// whether it stopped because a write to stdout failed.
struct Outcome {
  Outcome(int code, int err = 0, bool failed = false) : exit_code(code), stdout_errno(err), stdout_failed(failed) {}
  int exit_code;
  int stdout_errno;
  bool stdout_failed;
  bool every_rank_exits = false;  // VerbResult::every_rank_exits
};

// Flushes stdout (and std::cout, whose bytes go through it) and returns the errno of a write to
// it that failed, now or earlier (then `seen`, the errno saved when the verb returned), or 0.
int stdout_write_error(int seen) {
  errno = 0;
  std::cout.flush();  // synced with stdio: flushes stdout
  if (std::cout.bad() && errno != 0) return errno;
  errno = 0;
  if (std::fflush(stdout) != 0) return errno != 0 ? errno : EIO;
  if (std::ferror(stdout) != 0 || std::cout.bad()) return seen != 0 ? seen : EIO;
  return 0;
}

Outcome run_verb(const std::vector<std::string>& args, const CliMode& mode) {
  CLI::App app{"okapi: run, compress and train transformer language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(kVersion));
  // As llama.cpp: a flag given twice takes its last value. List flags (bench -p 64,128) keep all.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  VerbResult result;
  result.dry_run = mode.dry_run;
  register_inspect(app, result);
  register_convert(app, result);
  register_quantize(app, result);
  register_imatrix(app, result);
  register_tokenize(app, result);
  register_synth(app, result);
  register_logits(app, result);
  register_run(app, result);
  register_perplexity(app, result);
  register_bench(app, result);
  register_kv_eval(app, result);
  register_analyze(app, result);
  register_compress(app, result);
  register_train(app, result);
  register_serve(app, result);
  register_chat(app, result);
  register_template(app, result);
  register_embed(app, result);

  const std::vector<std::string> verbs = verb_names(app);
  const std::string verb_list = join(verbs);
  if (args.empty())
    return usage_error(fmt::format("no verb given; usage: okapi <verb> [flags], where <verb> is one of: {}; "
                                   "'okapi <verb> --help' lists a verb's flags",
                                   verb_list));
  const std::string& first = args.front();
  const bool top_level_flag = first == "-h" || first == "--help" || first == "--version";
  if (!top_level_flag && std::find(verbs.begin(), verbs.end(), first) == verbs.end()) {
    if (!first.empty() && first[0] == '-')
      return usage_error(fmt::format("'{}' comes before a verb; usage: okapi <verb> [flags], where <verb> is one of: {}",
                                     first, verb_list));
    return usage_error(fmt::format("unknown verb '{}'{}; the verbs are: {}", first, suggestion(first, verbs), verb_list));
  }
  CLI::App* verb = top_level_flag ? nullptr : app.get_subcommand(first);

  // CLI11 takes the arguments in reverse order.
  std::vector<std::string> reversed;
  reversed.reserve(args.size());
  for (auto it = args.rbegin(); it != args.rend(); ++it) reversed.push_back(llama_style_flag(*it));
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help, --version
      const int code = app.exit(e);
      return Outcome{code, errno};  // why printing failed, if it did
    }
    if (verb == nullptr) return usage_error(fmt::format("{}; see 'okapi --help'", e.what()));
    return usage_error(describe_parse_error(e, *verb));
  } catch (const UsageError& e) {
    return usage_error(with_flag(e));
  } catch (const Error& e) {
    print_error(with_flag(e));
    return kExitError;
  } catch (const std::bad_alloc&) {
    print_error("out of memory; try a smaller context (-c), batch (-b) or model");
    return kExitError;
  } catch (const std::exception& e) {
    // fmt::print throws std::system_error when its write fails: that is stdout, not okapi.
    if (std::ferror(stdout) != 0) {
      const auto* system = dynamic_cast<const std::system_error*>(&e);
      return Outcome{kExitError, system != nullptr && system->code().value() != 0 ? system->code().value() : EIO, true};
    }
    print_error(fmt::format("internal error: {} (please report this with the command line)", e.what()));
    return kExitError;
  }
  Outcome outcome{result.exit_code, errno};
  outcome.every_rank_exits = result.every_rank_exits;
  return outcome;
}

}  // namespace

int run_command_line(const std::vector<std::string>& arguments, const CliMode& mode) {
  // llama.cpp's -ngl, -fa, -cnv, ... first: CLI11 would read -fa as -f a and -cnv as -c nv.
  std::vector<std::string> args = arguments;
  set_warning_handler(print_warning);
  if (const int code = accept_llama_habits(args); code != 0) return code;
  const Outcome outcome = run_verb(args, mode);
  // One rank of an MPI job that failed has printed why; the job stops with it, or the other ranks
  // would wait for it forever.
  if (outcome.exit_code != 0 && !outcome.every_rank_exits) dist::abort_job_if_distributed(outcome.exit_code);
  // A verb that failed has said why; one that succeeded has not yet checked its stdout (run,
  // tokenize and bench print and flush without looking): a full disk or a closed pipe is an error.
  const bool check = outcome.exit_code == 0 || outcome.stdout_failed;
  const int err = check ? stdout_write_error(outcome.stdout_errno) : 0;
  if (err == 0) return outcome.exit_code;
  print_error(fmt::format("writing to stdout: {}", std::strerror(err)));
  return kExitError;
}

}  // namespace okapi::cli
