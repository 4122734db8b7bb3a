// Constrained decoding: llama.cpp's GBNF grammar format (grammars/README.md upstream), an
// incremental matcher over the bytes a model generates, and token masks over a whole vocabulary.
//
// Grammar    a parsed grammar, immutable, shared by every matcher (and thread) that uses it.
// Matcher    one sequence's position in the grammar: fed the bytes of each chosen token.
// TokenIndex the vocabulary as a byte trie, built once per tokenizer; says which tokens a matcher
//            allows next (the mask applied to the logits before sampling).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::grammar {

using tokenizer::TokenId;

// A grammar that does not parse or cannot be used: the message names the line and column
// ("grammar, line 3, column 12: expected '::='") or the rule ("rule 'item' is never defined").
class GrammarError : public okapi::Error {
 public:
  GrammarError(const std::string& message, int line = 0, int column = 0)
      : okapi::Error(message), line_(line), column_(column) {}
  int line() const { return line_; }      // 1-based; 0 when the error is not about one place
  int column() const { return column_; }  // 1-based, in bytes
 private:
  int line_, column_;
};

struct GrammarImpl;  // the compiled rules (grammar.cpp)

class Grammar {
 public:
  // Parses GBNF text. Throws GrammarError for syntax errors (line and column), an undefined rule,
  // a missing `root` rule, left recursion, and a grammar whose root can never end (no finite string
  // matches it).
  static std::shared_ptr<const Grammar> parse(std::string_view text, std::string_view root = "root");
  const GrammarImpl& impl() const { return *impl_; }
  const std::string& source() const { return source_; }

 private:
  Grammar() = default;
  std::shared_ptr<const GrammarImpl> impl_;
  std::string source_;
};

struct MatcherState;  // the positions the matcher can be in (grammar.cpp)

// Where the bytes so far can be in the grammar. Bytes may end inside a UTF-8 character (a token
// can carry half of one); the character's code point is matched when it is complete. Copyable.
class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);
  Matcher(const Matcher&);
  Matcher& operator=(const Matcher&);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  // Feeds bytes: true when the grammar allows them (the state advances), false when not (the
  // state is unchanged).
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed, without advancing.
  bool allows(std::string_view bytes) const;
  // Feeds one token: its text for the grammar's characters, its id for token elements (<[ID]>,
  // !<[ID]>). False (state unchanged) when neither path allows it.
  bool accept_token(TokenId id, std::string_view piece);
  bool allows_token(TokenId id, std::string_view piece) const;
  // The bytes so far form a complete string of the grammar (end of generation is allowed).
  bool can_end() const;
  // Complete and nothing may follow.
  bool finished() const;
  // Equal states give equal hashes (masks are cached by it).
  uint64_t state_hash() const;
  const Grammar& grammar() const { return *grammar_; }
  const MatcherState& state() const { return *state_; }
  MatcherState& state() { return *state_; }

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::unique_ptr<MatcherState> state_;
};

struct TokenTrie;  // grammar/token_index.cpp

// Which tokens a matcher allows next, over a whole vocabulary. A token is matched by its text with
// control tokens written out (llama.cpp's token_to_piece with special = true); end-of-generation
// tokens are allowed exactly when the matcher can end; tokens with no text never are. Thread-safe
// after construction.
class TokenIndex {
 public:
  explicit TokenIndex(const tokenizer::Tokenizer& tokenizer);
  ~TokenIndex();
  size_t n_vocab() const { return pieces_.size(); }
  // allowed[id] = 1 for every token the matcher allows next, 0 for the rest (resized to n_vocab).
  void allowed(const Matcher& matcher, std::vector<uint8_t>& allowed) const;
  // Whether one token is allowed (faster than a whole mask when only the sampled token is checked).
  bool allows(const Matcher& matcher, TokenId id) const;
  // Feeds a chosen token to the matcher (its text; nothing for end-of-generation tokens). Returns
  // false when the grammar does not allow it.
  bool advance(Matcher& matcher, TokenId id) const;
  const std::string& piece(TokenId id) const { return pieces_[static_cast<size_t>(id)]; }
  bool is_end_of_generation(TokenId id) const;

 private:
  std::vector<std::string> pieces_;
  std::vector<TokenId> end_of_generation_;
  std::unique_ptr<TokenTrie> trie_;
};

// A sequence's masks, cached by matcher state (a JSON string's body repeats the same state for
// every token inside it). Not thread-safe: one per sequence.
class MaskCache {
 public:
  explicit MaskCache(const TokenIndex& index, size_t max_entries = 64);
  // The mask for the matcher's state (computed on a miss).
  const std::vector<uint8_t>& mask(const Matcher& matcher);
  size_t hits() const { return hits_; }
  size_t misses() const { return misses_; }

 private:
  const TokenIndex& index_;
  size_t max_entries_;
  struct Entry {
    uint64_t hash;
    std::shared_ptr<const MatcherState> state;  // compared on a hit: equal hashes are not trusted
    std::vector<uint8_t> mask;
    uint64_t last_use;
  };
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  size_t hits_ = 0, misses_ = 0;
};

}  // namespace okapi::grammar
