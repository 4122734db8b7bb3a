#include "grammar/grammar.hpp"

// Stub: the vocabulary trie and masks are being written (issue 29).
namespace okapi::grammar {

struct TokenTrie {};

TokenIndex::TokenIndex(const tokenizer::Tokenizer& tokenizer) : trie_(std::make_unique<TokenTrie>()) {
  pieces_.resize(tokenizer.vocab().size());
}
TokenIndex::~TokenIndex() = default;
void TokenIndex::allowed(const Matcher&, std::vector<uint8_t>& allowed) const { allowed.assign(pieces_.size(), 0); }
bool TokenIndex::allows(const Matcher&, TokenId) const { return false; }
bool TokenIndex::advance(Matcher&, TokenId) const { return false; }
bool TokenIndex::is_end_of_generation(TokenId) const { return false; }

MaskCache::MaskCache(const TokenIndex& index, size_t max_entries) : index_(index), max_entries_(max_entries) {}
const std::vector<uint8_t>& MaskCache::mask(const Matcher& matcher) {
  ++misses_;
  entries_.resize(1);
  index_.allowed(matcher, entries_[0].mask);
  return entries_[0].mask;
}

}  // namespace okapi::grammar
