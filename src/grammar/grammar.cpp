#include "grammar/grammar.hpp"

// Stub: the GBNF parser and matcher are being written (issue 29).
namespace okapi::grammar {

struct GrammarImpl {};
struct MatcherState {};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view, std::string_view) {
  throw GrammarError("grammars are not implemented yet");
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)), state_(std::make_unique<MatcherState>()) {}
Matcher::Matcher(const Matcher& other) : grammar_(other.grammar_), state_(std::make_unique<MatcherState>(*other.state_)) {}
Matcher& Matcher::operator=(const Matcher& other) {
  grammar_ = other.grammar_;
  state_ = std::make_unique<MatcherState>(*other.state_);
  return *this;
}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;
bool Matcher::accept(std::string_view) { return false; }
bool Matcher::allows(std::string_view) const { return false; }
bool Matcher::can_end() const { return false; }
bool Matcher::finished() const { return false; }
uint64_t Matcher::state_hash() const { return 0; }

}  // namespace okapi::grammar
