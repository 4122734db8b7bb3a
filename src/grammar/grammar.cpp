#include "grammar/grammar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <unordered_map>

#include "grammar/gbnf_engine.hpp"

// GBNF as llama.cpp parses it (src/llama-grammar.cpp, grammars/README.md): the same syntax, the
// same rewriting of repetitions into helper rules (and the same limit on them), the same element
// layout. Differences, all refusals of grammars llama.cpp would accept and then misbehave on or
// crash with: nesting and size limits, `{m,n}` with m > n, invalid UTF-8, `<token>` by text (needs
// a vocabulary; `<[ID]>` works), and a root that derives no finite string. Alternatives that can
// never complete (they reference a rule with no finite derivation) are dropped, so a model is
// never steered into a dead end.
namespace okapi::grammar {

namespace {

constexpr uint64_t kMaxRepetitions = 2000;  // llama.cpp's MAX_REPETITION_THRESHOLD
constexpr int kMaxNesting = 128;            // ( ) groups inside each other
constexpr size_t kMaxElements = size_t{1} << 22;
constexpr size_t kMaxTextBytes = size_t{64} << 20;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::shared_ptr<GrammarImpl> parse(std::string_view root_name);

 private:
  struct Symbol {
    std::string name;
    bool defined = false;
    size_t first_use = std::string_view::npos;  // where it was first referenced
  };

  char at(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }
  bool at_end() const { return pos_ >= text_.size(); }
  [[noreturn]] void fail(size_t where, const std::string& message) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < std::min(where, text_.size()); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw GrammarError(fmt::format("grammar, line {}, column {}: {}", line, column, message), line, column);
  }
  std::string shown_here() const {
    if (at_end()) return "end of input";
    const char c = text_[pos_];
    if (c == '\n' || c == '\r') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20) return fmt::format("byte 0x{:02X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    return fmt::format("'{}'", c);
  }

  void skip_space(bool newline_ok);
  std::string_view parse_name();
  uint64_t parse_int();
  uint32_t parse_char();
  uint32_t parse_utf8();
  uint32_t parse_hex(int digits);
  uint32_t symbol(std::string_view name, size_t used_at);
  uint32_t new_symbol(const std::string& base);
  void add_rule(uint32_t id, std::vector<Element> rule);
  uint32_t char_set(CharSet set);
  void parse_rule();
  void parse_alternates(const std::string& rule_name, uint32_t rule_id, bool nested);
  void parse_sequence(const std::string& rule_name, std::vector<Element>& rule, bool nested);
  void check_size(size_t more);

  std::string_view text_;
  size_t pos_ = 0;
  int nesting_ = 0;
  size_t total_elements_ = 0;
  std::unordered_map<std::string, uint32_t> symbol_ids_;
  std::vector<Symbol> symbols_;
  std::vector<std::vector<Element>> rules_;
  std::vector<CharSet> char_sets_;
  std::map<std::pair<bool, std::vector<std::pair<uint32_t, uint32_t>>>, uint32_t> char_set_ids_;
};

void Parser::skip_space(bool newline_ok) {
  while (!at_end()) {
    const char c = text_[pos_];
    if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
      ++pos_;
    } else if (c == '#') {
      while (!at_end() && text_[pos_] != '\r' && text_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string_view Parser::parse_name() {
  const size_t start = pos_;
  while (is_word_char(at(pos_))) ++pos_;
  if (pos_ == start) fail(start, fmt::format("expected a rule name, found {}", shown_here()));
  return text_.substr(start, pos_ - start);
}

uint64_t Parser::parse_int() {
  const size_t start = pos_;
  uint64_t value = 0;
  while (is_digit(at(pos_))) {
    // Saturate: anything past the limits is refused or treated as unbounded by the callers.
    value = std::min<uint64_t>(value * 10 + static_cast<uint64_t>(text_[pos_] - '0'), uint64_t{1} << 40);
    ++pos_;
  }
  if (pos_ == start) fail(start, fmt::format("expected an integer, found {}", shown_here()));
  return value;
}

uint32_t Parser::parse_hex(int digits) {
  const size_t start = pos_;
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = at(pos_);
    uint32_t digit = 0;
    if (c >= '0' && c <= '9') digit = static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') digit = static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = static_cast<uint32_t>(c - 'A' + 10);
    else fail(start, fmt::format("expected {} hex digits", digits));
    value = (value << 4) | digit;
    ++pos_;
  }
  if (value > 0x10FFFF) fail(start, fmt::format("code point 0x{:X} is beyond U+10FFFF", value));
  return value;
}

uint32_t Parser::parse_utf8() {
  PartialUtf8 partial;
  uint32_t cp = 0;
  const size_t start = pos_;
  while (true) {
    if (at_end()) fail(start, "the grammar ends inside a UTF-8 character");
    const Utf8Step step = utf8_next(partial, static_cast<uint8_t>(text_[pos_++]), cp);
    if (step == Utf8Step::Complete) return cp;
    if (step == Utf8Step::Invalid) fail(start, "invalid UTF-8");
  }
}

uint32_t Parser::parse_char() {
  if (at_end()) fail(pos_, "unexpected end of input");
  if (text_[pos_] != '\\') return parse_utf8();
  const size_t start = pos_;
  const char escape = at(pos_ + 1);
  pos_ += 2;
  switch (escape) {
    case 'x': return parse_hex(2);
    case 'u': return parse_hex(4);
    case 'U': return parse_hex(8);
    case 't': return '\t';
    case 'r': return '\r';
    case 'n': return '\n';
    case '\\': case '"': case '[': case ']': case '-': return static_cast<uint32_t>(escape);
    default: break;
  }
  pos_ = start;
  fail(start, escape == '\0' ? std::string("unexpected end of input after '\\'") : fmt::format("unknown escape '\\{}'", escape));
}

uint32_t Parser::symbol(std::string_view name, size_t used_at) {
  auto [it, inserted] = symbol_ids_.emplace(std::string(name), static_cast<uint32_t>(symbols_.size()));
  if (inserted) symbols_.push_back({std::string(name), false, std::string_view::npos});
  Symbol& s = symbols_[it->second];
  if (used_at != std::string_view::npos && s.first_use == std::string_view::npos) s.first_use = used_at;
  return it->second;
}

uint32_t Parser::new_symbol(const std::string& base) {
  // llama.cpp's names for generated rules: base_N, N the symbol count.
  const auto id = static_cast<uint32_t>(symbols_.size());
  std::string name = fmt::format("{}_{}", base, id);
  symbol_ids_[name] = id;
  symbols_.push_back({std::move(name), false, std::string_view::npos});
  return id;
}

void Parser::check_size(size_t more) {
  total_elements_ += more;
  if (total_elements_ > kMaxElements) fail(pos_, fmt::format("the grammar is too large (over {} elements)", kMaxElements));
}

void Parser::add_rule(uint32_t id, std::vector<Element> rule) {
  check_size(rule.size());
  if (rules_.size() <= id) rules_.resize(id + 1);
  symbols_[id].defined = true;
  rules_[id] = std::move(rule);  // a rule defined twice keeps its last definition, as in llama.cpp
}

uint32_t Parser::char_set(CharSet set) {
  set.finish();
  auto key = std::make_pair(set.negated, set.ranges);
  auto [it, inserted] = char_set_ids_.emplace(std::move(key), static_cast<uint32_t>(char_sets_.size()));
  if (inserted) char_sets_.push_back(std::move(set));
  return it->second;
}

void Parser::parse_alternates(const std::string& rule_name, uint32_t rule_id, bool nested) {
  std::vector<Element> rule;
  parse_sequence(rule_name, rule, nested);
  while (at(pos_) == '|') {
    rule.push_back({ElementKind::Alt, 0});
    ++pos_;
    skip_space(true);
    parse_sequence(rule_name, rule, nested);
  }
  rule.push_back({ElementKind::End, 0});
  add_rule(rule_id, std::move(rule));
}

void Parser::parse_sequence(const std::string& rule_name, std::vector<Element>& rule, bool nested) {
  size_t last_item = rule.size();
  uint64_t previous_rules = 1;  // rules the last item already stands for (nested repetitions)

  // S{m,n} -> S (m times) followed by n-m nested optional rules; S{m,} -> S (m times) S*; as llama.cpp.
  auto repeat = [&](size_t at_pos, uint64_t min_times, uint64_t max_times, bool unbounded) {
    if (last_item == rule.size()) fail(at_pos, "a repetition needs an item before it");
    const std::vector<Element> item(rule.begin() + static_cast<std::ptrdiff_t>(last_item), rule.end());
    uint64_t total = 1;
    if (!unbounded && max_times > 0) total = max_times;
    else if (min_times > 0) total = min_times;
    if (previous_rules * total > kMaxRepetitions) {
      fail(at_pos, fmt::format("repetitions multiply to more than {} copies", kMaxRepetitions));
    }
    check_size(item.size() * (min_times + (unbounded ? 1 : max_times - min_times)));
    if (min_times == 0) {
      rule.resize(last_item);
    } else {
      for (uint64_t i = 1; i < min_times; ++i) rule.insert(rule.end(), item.begin(), item.end());
    }
    const uint64_t optional = unbounded ? 1 : max_times - min_times;
    uint32_t last_helper = 0;
    for (uint64_t i = 0; i < optional; ++i) {
      std::vector<Element> helper = item;
      const uint32_t helper_id = new_symbol(rule_name);
      if (i > 0 || unbounded) helper.push_back({ElementKind::RuleRef, unbounded ? helper_id : last_helper});
      helper.push_back({ElementKind::Alt, 0});
      helper.push_back({ElementKind::End, 0});
      add_rule(helper_id, std::move(helper));
      last_helper = helper_id;
    }
    if (optional > 0) rule.push_back({ElementKind::RuleRef, last_helper});
    previous_rules *= total;
  };

  while (!at_end()) {
    const size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      last_item = rule.size();
      previous_rules = 1;
      while (at(pos_) != '"') {
        if (at_end()) fail(start, "a string literal is not closed");
        CharSet one;
        const uint32_t cp = parse_char();
        one.ranges.push_back({cp, cp});
        rule.push_back({ElementKind::Chars, char_set(std::move(one))});
      }
      ++pos_;
      skip_space(nested);
    } else if (c == '[') {
      ++pos_;
      CharSet set;
      if (at(pos_) == '^') {
        set.negated = true;
        ++pos_;
      }
      while (at(pos_) != ']') {
        if (at_end()) fail(start, "a character class is not closed");
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (at(pos_) == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
          ++pos_;
          hi = parse_char();
        }
        set.ranges.push_back({lo, hi});
      }
      ++pos_;
      last_item = rule.size();
      previous_rules = 1;
      rule.push_back({ElementKind::Chars, char_set(std::move(set))});
      skip_space(nested);
    } else if (c == '<' || c == '!') {
      ElementKind kind = ElementKind::Token;
      if (c == '!') {
        kind = ElementKind::TokenNot;
        ++pos_;
        if (at(pos_) != '<') fail(pos_, fmt::format("expected '<' after '!', found {}", shown_here()));
      }
      ++pos_;
      if (at(pos_) != '[') fail(start, "a token by its text (<...>) needs a vocabulary; write it by id, <[ID]>");
      ++pos_;
      const size_t id_at = pos_;
      const uint64_t id = parse_int();
      if (id > static_cast<uint64_t>(std::numeric_limits<TokenId>::max())) fail(id_at, "token id out of range");
      if (at(pos_) != ']') fail(pos_, fmt::format("expected ']', found {}", shown_here()));
      if (at(pos_ + 1) != '>') fail(pos_ + 1, "expected '>' after ']'");
      pos_ += 2;
      last_item = rule.size();
      previous_rules = 1;
      rule.push_back({kind, static_cast<uint32_t>(id)});
      skip_space(nested);
    } else if (is_word_char(c)) {
      const std::string_view name = parse_name();
      const uint32_t id = symbol(name, start);
      skip_space(nested);
      last_item = rule.size();
      previous_rules = 1;
      rule.push_back({ElementKind::RuleRef, id});
    } else if (c == '(') {
      if (++nesting_ > kMaxNesting) fail(start, fmt::format("groups nest deeper than {}", kMaxNesting));
      ++pos_;
      skip_space(true);
      const size_t symbols_before = symbols_.size();
      const uint32_t group_id = new_symbol(rule_name);
      parse_alternates(rule_name, group_id, true);
      previous_rules = std::max<uint64_t>(1, symbols_.size() - symbols_before);
      last_item = rule.size();
      rule.push_back({ElementKind::RuleRef, group_id});
      if (at(pos_) != ')') fail(pos_, fmt::format("expected ')' to close the group at column {}, found {}", start + 1, shown_here()));
      ++pos_;
      --nesting_;
      skip_space(nested);
    } else if (c == '.') {
      ++pos_;
      last_item = rule.size();
      previous_rules = 1;
      CharSet any;
      any.negated = true;
      rule.push_back({ElementKind::Chars, char_set(std::move(any))});
      skip_space(nested);
    } else if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      skip_space(nested);
      repeat(start, c == '+' ? 1 : 0, c == '?' ? 1 : 0, c != '?');
    } else if (c == '{') {
      ++pos_;
      skip_space(nested);
      // {,n} is read as {0,n} (llama.cpp requires the 0).
      if (!is_digit(at(pos_)) && at(pos_) != ',') fail(pos_, fmt::format("expected an integer after '{{', found {}", shown_here()));
      const uint64_t min_times = at(pos_) == ',' ? 0 : parse_int();
      skip_space(nested);
      uint64_t max_times = min_times;
      bool unbounded = false;
      if (at(pos_) == '}') {
        ++pos_;
      } else if (at(pos_) == ',') {
        ++pos_;
        skip_space(nested);
        unbounded = true;
        if (is_digit(at(pos_))) {
          max_times = parse_int();
          unbounded = false;
          skip_space(nested);
        }
        if (at(pos_) != '}') fail(pos_, fmt::format("expected '}}', found {}", shown_here()));
        ++pos_;
      } else {
        fail(pos_, fmt::format("expected ',' or '}}', found {}", shown_here()));
      }
      skip_space(nested);
      if (min_times > kMaxRepetitions) fail(start, fmt::format("{} repetitions exceed the limit of {}", min_times, kMaxRepetitions));
      if (!unbounded && max_times < min_times) fail(start, fmt::format("{{{},{}}}: the minimum exceeds the maximum", min_times, max_times));
      if (!unbounded && max_times > kMaxRepetitions) unbounded = true;  // as llama.cpp: a huge maximum is no maximum
      repeat(start, min_times, unbounded ? 0 : max_times, unbounded);
    } else {
      break;
    }
  }
}

void Parser::parse_rule() {
  const size_t start = pos_;
  const std::string name(parse_name());
  const uint32_t id = symbol(name, std::string_view::npos);
  skip_space(false);
  if (text_.substr(pos_, 3) != "::=") fail(pos_, fmt::format("expected '::=' after rule name '{}', found {}", name, shown_here()));
  (void)start;
  pos_ += 3;
  skip_space(true);
  parse_alternates(name, id, false);
  if (at(pos_) == '\r') {
    pos_ += at(pos_ + 1) == '\n' ? 2 : 1;
  } else if (at(pos_) == '\n') {
    ++pos_;
  } else if (!at_end()) {
    fail(pos_, fmt::format("expected the end of the line, found {}", shown_here()));
  }
  skip_space(true);
}

// The alternatives of every rule as ranges of its elements.
struct Alternative {
  uint32_t rule;
  size_t begin, end;  // elements [begin, end) of rules[rule]
};

std::vector<Alternative> alternatives_of(const std::vector<std::vector<Element>>& rules) {
  std::vector<Alternative> out;
  for (uint32_t r = 0; r < rules.size(); ++r) {
    size_t begin = 0;
    for (size_t i = 0; i < rules[r].size(); ++i) {
      const ElementKind kind = rules[r][i].kind;
      if (kind == ElementKind::Alt || kind == ElementKind::End) {
        out.push_back({r, begin, i});
        begin = i + 1;
      }
    }
  }
  return out;
}

// Least fixed point: a rule holds when one of its alternatives has only terminals that pass
// `terminal_ok` and references to rules that hold. Linear: each alternative counts its pending
// references, each rule that becomes true releases the alternatives that wait on it.
std::vector<bool> rules_holding(const std::vector<std::vector<Element>>& rules, const std::vector<Alternative>& alternatives,
                                bool terminals_allowed) {
  std::vector<bool> holds(rules.size(), false);
  std::vector<size_t> pending(alternatives.size(), 0);
  std::vector<std::vector<uint32_t>> waiting(rules.size());
  std::vector<uint32_t> ready;
  for (uint32_t a = 0; a < alternatives.size(); ++a) {
    const Alternative& alt = alternatives[a];
    bool blocked = false;
    for (size_t i = alt.begin; i < alt.end; ++i) {
      const Element& e = rules[alt.rule][i];
      if (e.kind == ElementKind::RuleRef) {
        ++pending[a];
        waiting[e.value].push_back(a);
      } else if (!terminals_allowed) {
        blocked = true;
      }
    }
    if (blocked) pending[a] = std::numeric_limits<size_t>::max();
    else if (pending[a] == 0) ready.push_back(alt.rule);
  }
  while (!ready.empty()) {
    const uint32_t rule = ready.back();
    ready.pop_back();
    if (holds[rule]) continue;
    holds[rule] = true;
    for (uint32_t a : waiting[rule]) {
      if (pending[a] == std::numeric_limits<size_t>::max()) continue;
      if (--pending[a] == 0) ready.push_back(alternatives[a].rule);
    }
  }
  return holds;
}

std::shared_ptr<GrammarImpl> Parser::parse(std::string_view root_name) {
  if (text_.size() > kMaxTextBytes) throw GrammarError(fmt::format("the grammar is {} bytes, over the limit of {}", text_.size(), kMaxTextBytes));
  skip_space(true);
  while (!at_end()) parse_rule();

  rules_.resize(symbols_.size());
  for (const Symbol& s : symbols_) {
    if (!s.defined) fail(s.first_use, fmt::format("rule '{}' is never defined", s.name));
  }
  const auto root_it = symbol_ids_.find(std::string(root_name));
  if (root_it == symbol_ids_.end() || !symbols_[root_it->second].defined) {
    throw GrammarError(fmt::format("the grammar has no rule '{}' to start from", root_name));
  }
  const uint32_t root = root_it->second;

  const std::vector<Alternative> alternatives = alternatives_of(rules_);
  const std::vector<bool> nullable = rules_holding(rules_, alternatives, false);

  // Left recursion: a rule reaching itself through the first elements of alternatives (past
  // nullable rules). Iterative depth-first search, so deep chains cannot overflow the stack.
  {
    std::vector<std::vector<uint32_t>> leftmost(rules_.size());
    for (const Alternative& alt : alternatives) {
      for (size_t i = alt.begin; i < alt.end; ++i) {
        const Element& e = rules_[alt.rule][i];
        if (e.kind != ElementKind::RuleRef) break;
        leftmost[alt.rule].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
    enum : uint8_t { kUnvisited, kOnPath, kDone };
    std::vector<uint8_t> mark(rules_.size(), kUnvisited);
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < rules_.size(); ++start) {
      if (mark[start] != kUnvisited) continue;
      path.push_back({start, 0});
      mark[start] = kOnPath;
      while (!path.empty()) {
        auto& [rule, next] = path.back();
        if (next == leftmost[rule].size()) {
          mark[rule] = kDone;
          path.pop_back();
          continue;
        }
        const uint32_t target = leftmost[rule][next++];
        if (mark[target] == kOnPath) {
          // Name the user's rule: generated helpers are named after it (base_N).
          throw GrammarError(fmt::format("rule '{}' is left-recursive (it can reach itself before matching any character); "
                                         "rewrite it with repetition, e.g. item (\",\" item)*",
                                         symbols_[target].name));
        }
        if (mark[target] == kUnvisited) {
          mark[target] = kOnPath;
          path.push_back({target, 0});
        }
      }
    }
  }

  const std::vector<bool> productive = rules_holding(rules_, alternatives, true);
  if (!productive[root]) {
    throw GrammarError(fmt::format("the grammar can never end: rule '{}' matches no finite string (every alternative recurses forever)", root_name));
  }

  auto impl = std::make_shared<GrammarImpl>();
  for (uint32_t r = 0; r < rules_.size(); ++r) {
    impl->rule_start.push_back(static_cast<uint32_t>(impl->elements.size()));
    impl->rule_names.push_back(symbols_[r].name);
    bool first = true;
    bool any = false;
    for (const Alternative& alt : alternatives) {
      if (alt.rule != r) continue;
      bool completes = true;
      for (size_t i = alt.begin; i < alt.end; ++i) {
        const Element& e = rules_[r][i];
        if (e.kind == ElementKind::RuleRef && !productive[e.value]) completes = false;
      }
      if (!completes && productive[r]) continue;
      if (!first) impl->elements.push_back({ElementKind::Alt, 0});
      first = false;
      any = true;
      impl->elements.insert(impl->elements.end(), rules_[r].begin() + static_cast<std::ptrdiff_t>(alt.begin),
                            rules_[r].begin() + static_cast<std::ptrdiff_t>(alt.end));
    }
    (void)any;
    impl->elements.push_back({ElementKind::End, 0});
  }
  impl->start_element = static_cast<uint32_t>(impl->elements.size());
  impl->elements.push_back({ElementKind::RuleRef, root});
  impl->elements.push_back({ElementKind::End, 0});
  impl->char_sets = std::move(char_sets_);
  static std::atomic<uint64_t> next_serial{1};
  impl->serial = next_serial.fetch_add(1);
  return impl;
}

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text, std::string_view root) {
  Parser parser(text);
  std::shared_ptr<Grammar> grammar(new Grammar());
  grammar->impl_ = parser.parse(root);
  grammar->source_ = std::string(text);
  return grammar;
}

// The matcher keeps its stacks as plain vectors (copyable, comparable, hashable); each call runs
// them through this thread's engine for the grammar, whose memo makes repeated steps cheap.
namespace {

int32_t import_state(Engine& engine, const MatcherState& state) { return engine.import_stacks(state.stacks); }

// Advances a set over bytes; kDead when they are not allowed.
int32_t feed(Engine& engine, int32_t set, PartialUtf8& partial, std::string_view bytes) {
  for (char byte : bytes) {
    uint32_t cp = 0;
    const Utf8Step step = utf8_next(partial, static_cast<uint8_t>(byte), cp);
    if (step == Utf8Step::Invalid) return Engine::kDead;
    if (step == Utf8Step::Partial) continue;
    set = engine.step(set, cp);
    if (set == Engine::kDead) return set;
  }
  if (partial.remaining > 0 && !engine.partial_allowed(set, partial)) return Engine::kDead;
  return set;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)), state_(std::make_unique<MatcherState>()) {
  Engine& engine = engine_for(grammar_->impl());
  const int32_t start = engine.start_set();
  if (start == Engine::kDead) throw GrammarError("the grammar's start expands past the matcher's limits");
  engine.export_stacks(start, state_->stacks);
}
Matcher::Matcher(const Matcher& other) : grammar_(other.grammar_), state_(std::make_unique<MatcherState>(*other.state_)) {}
Matcher& Matcher::operator=(const Matcher& other) {
  if (this == &other) return *this;
  grammar_ = other.grammar_;
  state_ = std::make_unique<MatcherState>(*other.state_);
  return *this;
}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

bool Matcher::accept(std::string_view bytes) {
  if (bytes.empty()) return true;
  Engine& engine = engine_for(grammar_->impl());
  PartialUtf8 partial = state_->partial;
  const int32_t set = feed(engine, import_state(engine, *state_), partial, bytes);
  if (set == Engine::kDead) return false;
  engine.export_stacks(set, state_->stacks);
  state_->partial = partial;
  return true;
}

bool Matcher::allows(std::string_view bytes) const {
  if (bytes.empty()) return true;
  Engine& engine = engine_for(grammar_->impl());
  PartialUtf8 partial = state_->partial;
  return feed(engine, import_state(engine, *state_), partial, bytes) != Engine::kDead;
}

bool Matcher::accept_token(TokenId id, std::string_view piece) {
  Engine& engine = engine_for(grammar_->impl());
  const int32_t set = import_state(engine, *state_);
  PartialUtf8 partial = state_->partial;
  int32_t by_text = piece.empty() ? Engine::kDead : feed(engine, set, partial, piece);
  // Token elements match by id, and only between characters.
  const int32_t by_id = state_->partial.remaining == 0 ? engine.step_token(set, id) : Engine::kDead;
  if (by_text == Engine::kDead && by_id == Engine::kDead) return false;
  if (by_text == Engine::kDead) partial = {};
  if (by_id != Engine::kDead && by_text != Engine::kDead && partial.remaining != 0) {
    by_text = Engine::kDead;  // one partial state per matcher: keep the token-id path whole
    partial = {};
  }
  engine.export_stacks(engine.unite(by_text, by_id), state_->stacks);
  state_->partial = partial;
  return true;
}

bool Matcher::allows_token(TokenId id, std::string_view piece) const {
  Matcher copy(*this);
  return copy.accept_token(id, piece);
}

bool Matcher::can_end() const {
  return state_->partial.remaining == 0 && !state_->stacks.empty() && state_->stacks.front().empty();
}

bool Matcher::finished() const { return can_end() && state_->stacks.size() == 1; }

uint64_t Matcher::state_hash() const { return state_->hash(); }

}  // namespace okapi::grammar
