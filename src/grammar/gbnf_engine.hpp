// The compiled form of a GBNF grammar and the pushdown engine shared by Matcher (grammar.cpp) and
// the vocabulary walk (token_index.cpp). Internal to grammar/.
//
// Rules are flattened into one array of elements as llama.cpp does: a rule is its alternatives,
// each a run of elements, separated by Alt and closed by End. A stack is a list of element
// indices, its top the next element to match; a matcher state is a set of stacks whose tops are
// all terminals (a character set or a token), the empty stack meaning "the root is complete".
//
// The engine interns stacks as nodes of a tree (element, parent node), so a stack is one id and
// popping is a parent link, and interns sets of stacks, so a state is one id. Transitions between
// sets are memoized: inside a JSON string the set maps to itself for nearly every character, and
// the vocabulary walk costs one table look-up per trie node.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace okapi::grammar {

enum class ElementKind : uint8_t { End, Alt, RuleRef, Chars, Token, TokenNot };

struct Element {
  ElementKind kind;
  uint32_t value;  // RuleRef: rule id; Chars: char set index; Token/TokenNot: token id
};

// One terminal position: a literal character, a class [a-z...], a negated class or '.'.
struct CharSet {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive code point ranges
  std::array<uint64_t, 2> ascii{};                     // matches() for code points < 128
  // Whether every code point from 128 up gets the same answer (high_match): true for '.', [^"\\]
  // and all-ASCII classes, which lets the engine step non-ASCII characters without looking at them.
  bool high_uniform = false;
  bool high_match = false;
  void finish();                                       // fills ascii from ranges and negated
  bool matches(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    bool in = false;
    for (const auto& [lo, hi] : ranges) in |= (lo <= cp && cp <= hi);
    return in != negated;
  }
  // Whether some code point in [lo, hi] matches.
  bool matches_some(uint32_t lo, uint32_t hi) const;
  bool operator==(const CharSet& other) const { return negated == other.negated && ranges == other.ranges; }
};

struct GrammarImpl {
  std::vector<Element> elements;
  std::vector<uint32_t> rule_start;      // per rule, index of its first element
  std::vector<std::string> rule_names;
  std::vector<CharSet> char_sets;
  uint32_t start_element = 0;            // a RuleRef to the root followed by End
  uint64_t serial = 0;                   // unique per parsed grammar (engine caches key on it)
  bool is_end_of_sequence(uint32_t element) const {
    const ElementKind kind = elements[element].kind;
    return kind == ElementKind::End || kind == ElementKind::Alt;
  }
};

// A UTF-8 character split across accept() calls: the bits so far and the bytes still expected.
struct PartialUtf8 {
  uint32_t value = 0;
  uint8_t remaining = 0;
  bool operator==(const PartialUtf8&) const = default;
};

// The bounds that keep a hostile grammar or input from exhausting memory or time.
inline constexpr size_t kMaxStacks = 4096;          // stacks in one state
inline constexpr size_t kMaxStackDepth = 2048;      // elements in one stack (JSON nests some 4 per level)
inline constexpr size_t kMaxExpansionSteps = 1 << 18;  // rule expansions for one character

struct MatcherState {
  std::vector<std::vector<uint32_t>> stacks;  // sorted, distinct; the top is back()
  PartialUtf8 partial;
  bool operator==(const MatcherState&) const = default;
  uint64_t hash() const;
};

// The code points [lo, hi] a partial UTF-8 sequence can complete to; false when none can (an
// overlong 2-byte start).
bool partial_range(PartialUtf8 partial, uint32_t& lo, uint32_t& hi);

class Engine {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;
  static constexpr uint32_t kEmptyStack = 0;

  explicit Engine(const GrammarImpl& grammar);
  const GrammarImpl& grammar() const { return *grammar_; }
  uint64_t serial() const { return serial_; }

  // The interned set for a matcher state's stacks (kDead if it exceeds the bounds).
  int32_t import_stacks(const std::vector<std::vector<uint32_t>>& stacks);
  // The stacks of a set, sorted as MatcherState keeps them.
  void export_stacks(int32_t set, std::vector<std::vector<uint32_t>>& stacks) const;
  // The set of the grammar's start (the root's alternatives, expanded).
  int32_t start_set();

  // The set after one complete code point, or kDead.
  int32_t step(int32_t set, uint32_t cp) {
    if (cp < 128) {
      const int32_t cached = sets_[set].ascii_next[cp];
      if (cached != kUnknown) return cached;
      const int32_t next = compute_step(set, cp);  // may grow sets_: index again after it
      sets_[set].ascii_next[cp] = next;
      return next;
    }
    const int32_t uniform = high_step(set);
    return uniform != kNotUniform ? uniform : step_slow(set, cp);
  }
  // The set after any code point >= 128 when all of them lead to the same set, else kNotUniform.
  static constexpr int32_t kNotUniform = -3;
  // Byte categories (byte_category()) whose every byte keeps the set where it is, with no partial
  // character pending: a trie subtree using only these bytes is allowed wholesale (a JSON string's
  // body: everything but '"', '\\' and controls).
  uint64_t self_loops(int32_t set) {
    if (!sets_[set].loops_known) compute_self_loops(set);
    return sets_[set].loops;
  }
  int32_t high_step(int32_t set) {
    const int32_t cached = sets_[set].high_next;
    if (cached != kUnknown) return cached;
    const int32_t next = compute_high_step(set);
    sets_[set].high_next = next;
    return next;
  }
  // Whether some completion of a partial character is allowed by the set.
  bool partial_allowed(int32_t set, PartialUtf8 partial);
  bool can_end(int32_t set) const { return sets_[set].can_end; }
  bool has_token_tops(int32_t set) const { return sets_[set].has_token_tops; }
  // The stacks (node ids) of a set and the top element of a node.
  std::pair<const uint32_t*, size_t> members(int32_t set) const {
    const Set& s = sets_[set];
    return {set_pool_.data() + s.offset, s.size};
  }
  uint32_t top(uint32_t node) const { return nodes_[node].element; }
  // The set after a token element matched (stacks whose top is Token/TokenNot matching id).
  int32_t step_token(int32_t set, int32_t token_id);
  // Union of two sets (either may be kDead).
  int32_t unite(int32_t a, int32_t b);
  // Memory held, to let callers drop an engine that grew too large.
  size_t footprint() const;

 private:
  struct Node {
    uint32_t element;
    uint32_t parent;
  };
  struct Set {
    uint32_t offset, size;
    bool can_end, has_token_tops;
    int32_t high_next;  // high_step's memo (kUnknown until computed)
    bool loops_known;
    uint64_t loops;
    std::array<int32_t, 128> ascii_next;
  };
  int32_t compute_high_step(int32_t set);
  void compute_self_loops(int32_t set);
  uint32_t intern_node(uint32_t element, uint32_t parent);
  // Adds to scratch_ every terminal-topped stack reachable from node by expanding rule refs.
  bool expand(uint32_t node);
  int32_t intern_scratch();
  int32_t compute_step(int32_t set, uint32_t cp);
  int32_t step_slow(int32_t set, uint32_t cp);
  void memo_store(size_t slot, uint64_t key, int32_t value);

  const GrammarImpl* grammar_;
  uint64_t serial_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> depth_;
  // Open-addressing tables: node (element, parent) -> id; set content hash -> id; memo for
  // non-ASCII steps and partial checks, keyed by (set, symbol).
  std::vector<uint64_t> node_keys_;
  std::vector<uint32_t> node_ids_;
  std::vector<Set> sets_;
  std::vector<uint32_t> set_pool_;
  std::vector<uint64_t> set_hashes_;
  std::vector<int32_t> set_table_;
  std::vector<uint64_t> memo_keys_;
  std::vector<int32_t> memo_values_;
  size_t memo_used_ = 0;
  // Scratch for one step: the stacks produced, the nodes already expanded (by stamp).
  std::vector<uint32_t> scratch_;
  std::vector<uint32_t> todo_;
  std::vector<uint32_t> seen_stamp_;
  uint32_t stamp_ = 0;
  size_t steps_ = 0;
  int32_t start_set_ = kDead;
};

// Bytes grouped into 64 categories for self_loops(): letters, digits, each punctuation character
// and common control on its own, and three categories above ASCII (continuation, lead, invalid).
inline constexpr uint8_t kCategoryContinuation = 61, kCategoryLead = 62, kCategoryInvalid = 63;
inline uint8_t byte_category(uint8_t b) {
  if (b >= 0x80) {
    if (b < 0xC0) return kCategoryContinuation;
    return (b >= 0xC2 && b <= 0xF4) ? kCategoryLead : kCategoryInvalid;
  }
  if (b >= 'a' && b <= 'z') return 0;
  if (b >= 'A' && b <= 'Z') return 1;
  if (b >= '0' && b <= '9') return 2;
  if (b == '\t') return 3;
  if (b == '\n') return 4;
  if (b == '\r') return 5;
  if (b < 0x20) return 6;
  if (b == 0x7F) return 7;
  // The 33 characters from ' ' to '/', ':' to '@', '[' to '`', '{' to '~': categories 8..40.
  if (b <= '/') return static_cast<uint8_t>(8 + (b - ' '));
  if (b <= '@') return static_cast<uint8_t>(24 + (b - ':'));
  if (b <= '`') return static_cast<uint8_t>(31 + (b - '['));
  return static_cast<uint8_t>(37 + (b - '{'));
}

// This thread's engine for a grammar (a few are kept per thread, keyed by GrammarImpl::serial).
Engine& engine_for(const GrammarImpl& grammar);

// One byte of UTF-8: Complete with the code point, Partial (more bytes expected) or Invalid (a
// stray continuation, an overlong or out-of-range sequence).
enum class Utf8Step : uint8_t { Complete, Partial, Invalid };
inline Utf8Step utf8_next(PartialUtf8& partial, uint8_t byte, uint32_t& cp) {
  if (partial.remaining == 0) {
    if (byte < 0x80) {
      cp = byte;
      return Utf8Step::Complete;
    }
    if (byte < 0xC2 || byte > 0xF4) return Utf8Step::Invalid;
    if (byte < 0xE0) partial = {byte & 0x1Fu, 1};
    else if (byte < 0xF0) partial = {byte & 0x0Fu, 2};
    else partial = {byte & 0x07u, 3};
    return Utf8Step::Partial;
  }
  if ((byte & 0xC0) != 0x80) return Utf8Step::Invalid;
  // The first continuation byte rules out overlong 3- and 4-byte forms and code points past U+10FFFF.
  if (partial.remaining == 2 && partial.value == 0 && byte < 0xA0) return Utf8Step::Invalid;
  if (partial.remaining == 3 && ((partial.value == 0 && byte < 0x90) || (partial.value == 4 && byte > 0x8F))) {
    return Utf8Step::Invalid;
  }
  partial.value = (partial.value << 6) | (byte & 0x3Fu);
  if (--partial.remaining > 0) return Utf8Step::Partial;
  cp = partial.value;
  partial.value = 0;
  return Utf8Step::Complete;
}

}  // namespace okapi::grammar
