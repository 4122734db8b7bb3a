#include <algorithm>
#include <numeric>

#include "grammar/gbnf_engine.hpp"
#include "grammar/grammar.hpp"

// The vocabulary as a byte trie laid out in depth-first order: a node's subtree is the run of
// nodes up to its `skip`, so pruning a dead subtree is one jump and the walk is a linear scan.
// The walk carries, per depth, the engine's set id and the partial UTF-8 state; a step on an
// ASCII byte is one table look-up in the engine (memoized per set), so a JSON string's body,
// where nearly every token is allowed, costs a few nanoseconds per node.
namespace okapi::grammar {

struct TokenTrie {
  struct Node {
    uint32_t skip;         // first node after this node's subtree
    uint32_t token_begin;  // the subtree's tokens are token_ids[token_begin, next node's token_begin);
                           // those whose piece ends here come first, token_count of them
    uint16_t depth;        // bytes from the root
    uint16_t token_count;
    uint8_t byte;
  };
  std::vector<Node> nodes;  // nodes[0] is the root (the empty prefix)
  std::vector<uint64_t> below;     // per node, the byte categories in its subtree (itself excluded)
  std::vector<TokenId> token_ids;  // sorted by piece
  std::vector<uint8_t> valid_utf8;  // per sorted token, its piece is valid UTF-8 (maybe cut short)
  uint32_t token_begin(uint32_t node) const {
    return node < nodes.size() ? nodes[node].token_begin : static_cast<uint32_t>(token_ids.size());
  }
  size_t max_depth = 0;
};

namespace {

constexpr size_t kMaxPieceBytes = 65535;  // depth is 16-bit; longer pieces are never allowed

struct WalkLevel {
  int32_t set;
  PartialUtf8 partial;
};

}  // namespace

TokenIndex::TokenIndex(const tokenizer::Tokenizer& tokenizer) : trie_(std::make_unique<TokenTrie>()) {
  const tokenizer::Vocab& vocab = tokenizer.vocab();
  const size_t n = vocab.size();
  pieces_.resize(n);
  for (size_t id = 0; id < n; ++id) pieces_[id] = tokenizer.token_to_piece(static_cast<TokenId>(id), /*special=*/true);
  for (TokenId id : {vocab.eos, vocab.eot}) {
    if (id >= 0 && static_cast<size_t>(id) < n &&
        std::find(end_of_generation_.begin(), end_of_generation_.end(), id) == end_of_generation_.end()) {
      end_of_generation_.push_back(id);
    }
  }

  std::vector<TokenId> order;
  for (size_t id = 0; id < n; ++id) {
    const auto token = static_cast<TokenId>(id);
    if (pieces_[id].empty() || pieces_[id].size() > kMaxPieceBytes || is_end_of_generation(token)) continue;
    order.push_back(token);
  }
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    const int c = pieces_[a].compare(pieces_[b]);
    return c != 0 ? c < 0 : a < b;
  });

  TokenTrie& trie = *trie_;
  trie.token_ids = order;
  trie.nodes.push_back({0, 0, 0, 0, 0});
  trie.below.push_back(0);
  std::vector<uint32_t> path{0};  // node index per depth along the current piece
  auto close = [&] {
    const uint32_t node = path.back();
    path.pop_back();
    trie.nodes[node].skip = static_cast<uint32_t>(trie.nodes.size());
    if (!path.empty()) trie.below[path.back()] |= trie.below[node] | (1ull << byte_category(trie.nodes[node].byte));
  };
  std::string_view previous;
  for (uint32_t k = 0; k < order.size(); ++k) {
    const std::string_view piece = pieces_[order[k]];
    PartialUtf8 partial;
    uint32_t cp = 0;
    bool valid = true;
    for (char c : piece) valid = valid && utf8_next(partial, static_cast<uint8_t>(c), cp) != Utf8Step::Invalid;
    trie.valid_utf8.push_back(valid ? 1 : 0);
    size_t common = 0;
    while (common < previous.size() && common < piece.size() && previous[common] == piece[common]) ++common;
    while (path.size() > common + 1) close();
    for (size_t d = common; d < piece.size(); ++d) {
      path.push_back(static_cast<uint32_t>(trie.nodes.size()));
      trie.nodes.push_back({0, k, static_cast<uint16_t>(d + 1), 0, static_cast<uint8_t>(piece[d])});
      trie.below.push_back(0);
    }
    ++trie.nodes[path.back()].token_count;  // equal pieces sort next to each other
    trie.max_depth = std::max(trie.max_depth, piece.size());
    previous = piece;
  }
  while (!path.empty()) close();
}

TokenIndex::~TokenIndex() = default;

bool TokenIndex::is_end_of_generation(TokenId id) const {
  return std::find(end_of_generation_.begin(), end_of_generation_.end(), id) != end_of_generation_.end();
}

void TokenIndex::allowed(const Matcher& matcher, std::vector<uint8_t>& allowed) const {
  allowed.assign(pieces_.size(), 0);
  const MatcherState& state = matcher.state();
  Engine& engine = engine_for(matcher.grammar().impl());
  const int32_t root = engine.import_stacks(state.stacks);
  if (matcher.can_end()) {
    for (TokenId id : end_of_generation_) allowed[static_cast<size_t>(id)] = 1;
  }
  if (root == Engine::kDead) return;

  const TokenTrie& trie = *trie_;
  thread_local std::vector<WalkLevel> levels;
  levels.resize(trie.max_depth + 1);
  levels[0] = {root, state.partial};
  const TokenTrie::Node* nodes = trie.nodes.data();
  const TokenId* token_ids = trie.token_ids.data();
  const uint8_t* valid = trie.valid_utf8.data();
  const bool clean_start = state.partial.remaining == 0;
  uint8_t* out = allowed.data();
  const auto n_nodes = static_cast<uint32_t>(trie.nodes.size());
  for (uint32_t i = 1; i < n_nodes;) {
    const TokenTrie::Node& node = nodes[i];
    const WalkLevel& parent = levels[node.depth - 1];
    PartialUtf8 partial = parent.partial;
    int32_t set = parent.set;
    uint32_t cp = 0;
    const Utf8Step step = utf8_next(partial, node.byte, cp);
    if (step == Utf8Step::Complete) {
      set = engine.step(set, cp);
      if (set == Engine::kDead) {
        i = node.skip;
        continue;
      }
    } else if (step == Utf8Step::Invalid || !engine.partial_allowed(set, partial)) {
      i = node.skip;
      continue;
    }
    // A subtree whose bytes all keep the set in place is allowed whole (its valid UTF-8 tokens):
    // inside a JSON string this skips nearly the whole walk.
    // (valid_utf8 reads pieces from a clean start: not usable after a character left pending.)
    if (clean_start && partial.remaining == 0 && node.skip > i + 1 && (trie.below[i] & ~engine.self_loops(set)) == 0) {
      const uint32_t end = trie.token_begin(node.skip);
      for (uint32_t t = node.token_begin; t < end; ++t) out[token_ids[t]] |= valid[t];
      i = node.skip;
      continue;
    }
    levels[node.depth] = {set, partial};
    for (uint32_t t = 0; t < node.token_count; ++t) out[token_ids[node.token_begin + t]] = 1;
    ++i;
  }

  // Token elements (<[ID]>, !<[ID]>) match by id, between characters only.
  if (state.partial.remaining != 0 || !engine.has_token_tops(root)) return;
  const auto [members, count] = engine.members(root);
  const GrammarImpl& g = engine.grammar();
  for (size_t m = 0; m < count; ++m) {
    if (members[m] == Engine::kEmptyStack) continue;
    const Element& e = g.elements[engine.top(members[m])];
    const auto eligible = [&](size_t id) { return !pieces_[id].empty() && !is_end_of_generation(static_cast<TokenId>(id)); };
    if (e.kind == ElementKind::Token) {
      if (e.value < pieces_.size() && eligible(e.value)) out[e.value] = 1;
    } else if (e.kind == ElementKind::TokenNot) {
      for (size_t id = 0; id < pieces_.size(); ++id) {
        if (id != e.value && eligible(id)) out[id] = 1;
      }
    }
  }
}

bool TokenIndex::allows(const Matcher& matcher, TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return false;
  if (is_end_of_generation(id)) return matcher.can_end();
  const std::string& text = pieces_[static_cast<size_t>(id)];
  if (text.empty()) return false;
  return matcher.allows_token(id, text);
}

bool TokenIndex::advance(Matcher& matcher, TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return false;
  if (is_end_of_generation(id)) return matcher.can_end();
  const std::string& text = pieces_[static_cast<size_t>(id)];
  if (text.empty()) return false;
  return matcher.accept_token(id, text);
}

MaskCache::MaskCache(const TokenIndex& index, size_t max_entries) : index_(index), max_entries_(std::max<size_t>(1, max_entries)) {}

const std::vector<uint8_t>& MaskCache::mask(const Matcher& matcher) {
  ++clock_;
  const uint64_t hash = matcher.state_hash();
  for (Entry& entry : entries_) {
    if (entry.hash == hash && *entry.state == matcher.state()) {
      ++hits_;
      entry.last_use = clock_;
      return entry.mask;
    }
  }
  ++misses_;
  Entry* slot = nullptr;
  if (entries_.size() < max_entries_) {
    slot = &entries_.emplace_back();
  } else {
    slot = &*std::min_element(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
  }
  slot->hash = hash;
  slot->state = std::make_shared<const MatcherState>(matcher.state());
  slot->last_use = clock_;
  index_.allowed(matcher, slot->mask);
  return slot->mask;
}

}  // namespace okapi::grammar
