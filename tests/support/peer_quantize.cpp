#include "support/peer_quantize.hpp"

#include <fstream>
#include <stdexcept>

#include "support/cli.hpp"
#include "support/paths.hpp"
#include "support/peer_logits.hpp"

namespace okapi::test {

namespace {

std::string joined_args(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    out += ' ';
    out += shell_quote(a);
  }
  return out;
}

}  // namespace

std::filesystem::path peer_quantize_tool() { return peer_dump_logits_tool().parent_path() / "llama-quantize"; }
std::filesystem::path peer_imatrix_tool() { return peer_dump_logits_tool().parent_path() / "llama-imatrix"; }

void peer_quantize(const std::filesystem::path& input, const std::filesystem::path& output, const std::string& type,
                   const std::filesystem::path& imatrix, const std::vector<std::string>& extra_args) {
  std::string command = shell_quote(peer_quantize_tool().string()) + joined_args(extra_args);
  if (!imatrix.empty()) command.append(" --imatrix ").append(shell_quote(imatrix.string()));
  command.append(" ").append(shell_quote(input.string())).append(" ").append(shell_quote(output.string()));
  command.append(" ").append(shell_quote(type)).append(" 1");
  const CommandResult r = run_command(command);
  if (r.exit_code != 0) throw std::runtime_error("llama-quantize failed (" + command + "):\n" + r.output);
}

void peer_imatrix(const std::filesystem::path& model, const std::filesystem::path& text,
                  const std::filesystem::path& output, int ctx, const std::vector<std::string>& extra_args) {
  const std::string command = shell_quote(peer_imatrix_tool().string()) + " -m " + shell_quote(model.string()) +
                              " -f " + shell_quote(text.string()) + " -o " + shell_quote(output.string()) +
                              " -c " + std::to_string(ctx) + " -t 2" + joined_args(extra_args);
  const CommandResult r = run_command(command);
  if (r.exit_code != 0) throw std::runtime_error("llama-imatrix failed (" + command + "):\n" + r.output);
}

std::filesystem::path write_calibration_text(const std::filesystem::path& path, int n_words) {
  std::ofstream out(path);
  // peer_test_prompt's text repeated to length: ordinary words, deterministic.
  std::string text;
  while (static_cast<int>(text.size()) < n_words * 6) text += peer_test_prompt(60) + "\n";
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path;
}

}  // namespace okapi::test
