#include "grammar/gbnf_engine.hpp"

#include <algorithm>
#include <memory>

namespace okapi::grammar {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t kEmptyKey = ~0ull;

}  // namespace

void CharSet::finish() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& range : ranges) {
    if (range.first > range.second) continue;  // an empty range such as [z-a] matches nothing
    if (!merged.empty() && range.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  ranges = std::move(merged);
  const bool touches_high = !ranges.empty() && ranges.back().second >= 128;
  const bool covers_high = std::any_of(ranges.begin(), ranges.end(), [](const auto& r) { return r.first <= 128 && r.second >= 0x10FFFF; });
  high_uniform = !touches_high || covers_high;
  high_match = covers_high != negated;
  ascii = {};
  for (uint32_t cp = 0; cp < 128; ++cp) {
    bool in = false;
    for (const auto& [lo, hi] : ranges) in |= (lo <= cp && cp <= hi);
    if (in != negated) ascii[cp >> 6] |= 1ull << (cp & 63);
  }
}

bool CharSet::matches_some(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& range : ranges) {
      if (range.first <= hi && lo <= range.second) return true;
    }
    return false;
  }
  // Negated: some code point of [lo, hi] lies outside every (sorted, merged) range.
  uint64_t next = lo;
  for (const auto& range : ranges) {
    if (range.second < next) continue;
    if (range.first > next) return true;
    next = uint64_t{range.second} + 1;
    if (next > hi) return false;
  }
  return next <= hi;
}

uint64_t MatcherState::hash() const {
  uint64_t h = mix(stacks.size() ^ (uint64_t{partial.value} << 8) ^ (uint64_t{partial.remaining} << 40));
  for (const auto& stack : stacks) {
    h = mix(h ^ stack.size());
    for (uint32_t element : stack) h = mix(h ^ element);
  }
  return h;
}

bool partial_range(PartialUtf8 partial, uint32_t& lo, uint32_t& hi) {
  if (partial.remaining == 0) return false;
  const unsigned shift = 6u * partial.remaining;
  lo = partial.value << shift;
  hi = lo | ((1u << shift) - 1);
  // Right after a lead byte the overlong and out-of-range values are excluded (utf8_next refuses them).
  if (partial.remaining == 2) lo = std::max(lo, 0x800u);
  if (partial.remaining == 3) {
    lo = std::max(lo, 0x10000u);
    hi = std::min(hi, 0x10FFFFu);
  }
  return lo <= hi;
}

Engine::Engine(const GrammarImpl& grammar) : grammar_(&grammar), serial_(grammar.serial) {
  nodes_.push_back({0, 0});  // the empty stack
  depth_.push_back(0);
  seen_stamp_.push_back(0);
  node_keys_.assign(1024, kEmptyKey);
  node_ids_.assign(1024, 0);
  set_table_.assign(256, -1);
  memo_keys_.assign(1024, kEmptyKey);
  memo_values_.assign(1024, 0);
}

size_t Engine::footprint() const {
  return nodes_.capacity() * (sizeof(Node) + 8) + node_keys_.capacity() * 12 + sets_.capacity() * sizeof(Set) +
         set_pool_.capacity() * 4 + set_table_.capacity() * 4 + set_hashes_.capacity() * 8 + memo_keys_.capacity() * 12;
}

uint32_t Engine::intern_node(uint32_t element, uint32_t parent) {
  const uint64_t key = (uint64_t{element} << 32) | parent;
  size_t mask = node_keys_.size() - 1;
  size_t slot = mix(key) & mask;
  while (node_keys_[slot] != kEmptyKey) {
    if (node_keys_[slot] == key) return node_ids_[slot];
    slot = (slot + 1) & mask;
  }
  const auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({element, parent});
  depth_.push_back(depth_[parent] + 1);
  seen_stamp_.push_back(0);
  node_keys_[slot] = key;
  node_ids_[slot] = id;
  if (nodes_.size() * 2 > node_keys_.size()) {
    std::vector<uint64_t> keys(node_keys_.size() * 2, kEmptyKey);
    std::vector<uint32_t> ids(keys.size(), 0);
    mask = keys.size() - 1;
    for (size_t i = 0; i < node_keys_.size(); ++i) {
      if (node_keys_[i] == kEmptyKey) continue;
      size_t s = mix(node_keys_[i]) & mask;
      while (keys[s] != kEmptyKey) s = (s + 1) & mask;
      keys[s] = node_keys_[i];
      ids[s] = node_ids_[i];
    }
    node_keys_ = std::move(keys);
    node_ids_ = std::move(ids);
  }
  return id;
}

bool Engine::expand(uint32_t node) {
  const GrammarImpl& g = *grammar_;
  todo_.clear();
  todo_.push_back(node);
  while (!todo_.empty()) {
    const uint32_t current = todo_.back();
    todo_.pop_back();
    if (seen_stamp_[current] == stamp_) continue;
    seen_stamp_[current] = stamp_;
    if (++steps_ > kMaxExpansionSteps) return false;
    if (current == kEmptyStack) {
      scratch_.push_back(current);
      continue;
    }
    const uint32_t element = nodes_[current].element;
    const Element& e = g.elements[element];
    if (e.kind != ElementKind::RuleRef) {
      scratch_.push_back(current);  // a terminal: Chars, Token or TokenNot
      continue;
    }
    // Replace the reference by each alternative of the rule, followed by what came after it.
    const uint32_t parent = nodes_[current].parent;
    uint32_t continuation = parent;
    if (!g.is_end_of_sequence(element + 1)) {
      if (depth_[parent] + 1 > kMaxStackDepth) return false;
      continuation = intern_node(element + 1, parent);
    }
    uint32_t alternative = g.rule_start[e.value];
    while (true) {
      if (g.is_end_of_sequence(alternative)) {
        todo_.push_back(continuation);
      } else {
        if (depth_[continuation] + 1 > kMaxStackDepth) return false;
        todo_.push_back(intern_node(alternative, continuation));
      }
      while (!g.is_end_of_sequence(alternative)) ++alternative;
      if (g.elements[alternative].kind != ElementKind::Alt) break;
      ++alternative;
    }
  }
  return true;
}

int32_t Engine::intern_scratch() {
  if (scratch_.empty()) return kDead;
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.size() > kMaxStacks) return kDead;
  uint64_t h = mix(scratch_.size());
  for (uint32_t node : scratch_) h = mix(h ^ node);
  size_t mask = set_table_.size() - 1;
  size_t slot = h & mask;
  while (set_table_[slot] >= 0) {
    const int32_t candidate = set_table_[slot];
    const Set& s = sets_[candidate];
    if (set_hashes_[candidate] == h && s.size == scratch_.size() &&
        std::equal(scratch_.begin(), scratch_.end(), set_pool_.begin() + s.offset)) {
      return candidate;
    }
    slot = (slot + 1) & mask;
  }
  const auto id = static_cast<int32_t>(sets_.size());
  Set s{};
  s.offset = static_cast<uint32_t>(set_pool_.size());
  s.size = static_cast<uint32_t>(scratch_.size());
  s.can_end = scratch_.front() == kEmptyStack;
  s.has_token_tops = false;
  for (uint32_t node : scratch_) {
    if (node == kEmptyStack) continue;
    const ElementKind kind = grammar_->elements[nodes_[node].element].kind;
    if (kind == ElementKind::Token || kind == ElementKind::TokenNot) s.has_token_tops = true;
  }
  s.ascii_next.fill(kUnknown);
  s.high_next = kUnknown;
  s.loops_known = false;
  s.loops = 0;
  set_pool_.insert(set_pool_.end(), scratch_.begin(), scratch_.end());
  sets_.push_back(s);
  set_hashes_.push_back(h);
  set_table_[slot] = id;
  if (sets_.size() * 2 > set_table_.size()) {
    std::vector<int32_t> table(set_table_.size() * 2, -1);
    mask = table.size() - 1;
    for (size_t i = 0; i < sets_.size(); ++i) {
      size_t t = set_hashes_[i] & mask;
      while (table[t] >= 0) t = (t + 1) & mask;
      table[t] = static_cast<int32_t>(i);
    }
    set_table_ = std::move(table);
  }
  return id;
}

int32_t Engine::compute_step(int32_t set, uint32_t cp) {
  const GrammarImpl& g = *grammar_;
  ++stamp_;
  steps_ = 0;
  scratch_.clear();
  const Set s = sets_[set];
  for (uint32_t i = 0; i < s.size; ++i) {
    const uint32_t node = set_pool_[s.offset + i];
    if (node == kEmptyStack) continue;
    const uint32_t element = nodes_[node].element;
    const Element& e = g.elements[element];
    if (e.kind != ElementKind::Chars || !g.char_sets[e.value].matches(cp)) continue;
    uint32_t next = nodes_[node].parent;
    if (!g.is_end_of_sequence(element + 1)) {
      if (depth_[next] + 1 > kMaxStackDepth) return kDead;
      next = intern_node(element + 1, next);
    }
    if (!expand(next)) return kDead;
  }
  return intern_scratch();
}

int32_t Engine::compute_high_step(int32_t set) {
  const GrammarImpl& g = *grammar_;
  const Set s = sets_[set];
  for (uint32_t i = 0; i < s.size; ++i) {
    const uint32_t node = set_pool_[s.offset + i];
    if (node == kEmptyStack) continue;
    const Element& e = g.elements[nodes_[node].element];
    if (e.kind == ElementKind::Chars && !g.char_sets[e.value].high_uniform) return kNotUniform;
  }
  return compute_step(set, 0x10FFFF);  // any code point from 128 up stands for all of them
}

void Engine::compute_self_loops(int32_t set) {
  uint64_t loops = ~0ull;
  for (uint32_t b = 0; b < 128; ++b) {
    if (step(set, b) != set) loops &= ~(1ull << byte_category(static_cast<uint8_t>(b)));
  }
  loops &= ~(1ull << kCategoryInvalid);
  if (high_step(set) != set) loops &= ~((1ull << kCategoryContinuation) | (1ull << kCategoryLead));
  sets_[set].loops = loops;
  sets_[set].loops_known = true;
}

int32_t Engine::step_token(int32_t set, int32_t token_id) {
  const GrammarImpl& g = *grammar_;
  if (set < 0 || !sets_[set].has_token_tops) return kDead;
  ++stamp_;
  steps_ = 0;
  scratch_.clear();
  const Set s = sets_[set];
  for (uint32_t i = 0; i < s.size; ++i) {
    const uint32_t node = set_pool_[s.offset + i];
    if (node == kEmptyStack) continue;
    const uint32_t element = nodes_[node].element;
    const Element& e = g.elements[element];
    const auto id = static_cast<uint32_t>(token_id);
    const bool matched = (e.kind == ElementKind::Token && e.value == id) || (e.kind == ElementKind::TokenNot && e.value != id);
    if (!matched) continue;
    uint32_t next = nodes_[node].parent;
    if (!g.is_end_of_sequence(element + 1)) {
      if (depth_[next] + 1 > kMaxStackDepth) return kDead;
      next = intern_node(element + 1, next);
    }
    if (!expand(next)) return kDead;
  }
  return intern_scratch();
}

int32_t Engine::unite(int32_t a, int32_t b) {
  if (a < 0) return b;
  if (b < 0 || a == b) return a;
  scratch_.clear();
  for (int32_t set : {a, b}) {
    const Set s = sets_[set];
    scratch_.insert(scratch_.end(), set_pool_.begin() + s.offset, set_pool_.begin() + s.offset + s.size);
  }
  return intern_scratch();
}

namespace {
uint64_t memo_key(int32_t set, uint32_t symbol) { return (uint64_t{static_cast<uint32_t>(set)} << 32) | symbol; }
}  // namespace

void Engine::memo_store(size_t slot, uint64_t key, int32_t value) {
  memo_keys_[slot] = key;
  memo_values_[slot] = value;
  if (++memo_used_ * 2 <= memo_keys_.size()) return;
  std::vector<uint64_t> keys(memo_keys_.size() * 2, kEmptyKey);
  std::vector<int32_t> values(keys.size(), 0);
  const size_t mask = keys.size() - 1;
  for (size_t i = 0; i < memo_keys_.size(); ++i) {
    if (memo_keys_[i] == kEmptyKey) continue;
    size_t t = mix(memo_keys_[i]) & mask;
    while (keys[t] != kEmptyKey) t = (t + 1) & mask;
    keys[t] = memo_keys_[i];
    values[t] = memo_values_[i];
  }
  memo_keys_ = std::move(keys);
  memo_values_ = std::move(values);
}

int32_t Engine::step_slow(int32_t set, uint32_t cp) {
  const uint64_t key = memo_key(set, cp);
  const size_t mask = memo_keys_.size() - 1;
  size_t slot = mix(key) & mask;
  while (memo_keys_[slot] != kEmptyKey) {
    if (memo_keys_[slot] == key) return memo_values_[slot];
    slot = (slot + 1) & mask;
  }
  const int32_t next = compute_step(set, cp);
  memo_store(slot, key, next);
  return next;
}

bool Engine::partial_allowed(int32_t set, PartialUtf8 partial) {
  // Every completion is >= 128: when those all step alike, the answer is whether they step at all.
  const int32_t uniform = high_step(set);
  if (uniform != kNotUniform) {
    uint32_t lo = 0, hi = 0;
    return uniform != kDead && partial_range(partial, lo, hi);
  }
  // Memoized next to the steps: code points are below 2^21, partial keys have the top bit set.
  const uint32_t symbol = 0x80000000u | (uint32_t{partial.remaining} << 24) | partial.value;
  const uint64_t key = memo_key(set, symbol);
  const size_t mask = memo_keys_.size() - 1;
  size_t slot = mix(key) & mask;
  while (memo_keys_[slot] != kEmptyKey) {
    if (memo_keys_[slot] == key) return memo_values_[slot] != 0;
    slot = (slot + 1) & mask;
  }
  bool allowed = false;
  uint32_t lo = 0, hi = 0;
  if (partial_range(partial, lo, hi)) {
    const GrammarImpl& g = *grammar_;
    const Set& s = sets_[set];
    for (uint32_t i = 0; i < s.size && !allowed; ++i) {
      const uint32_t node = set_pool_[s.offset + i];
      if (node == kEmptyStack) continue;
      const Element& e = g.elements[nodes_[node].element];
      allowed = e.kind == ElementKind::Chars && g.char_sets[e.value].matches_some(lo, hi);
    }
  }
  memo_store(slot, key, allowed ? 1 : 0);
  return allowed;
}

int32_t Engine::import_stacks(const std::vector<std::vector<uint32_t>>& stacks) {
  std::vector<uint32_t> tops;
  tops.reserve(stacks.size());
  for (const auto& stack : stacks) {
    uint32_t node = kEmptyStack;
    for (uint32_t element : stack) node = intern_node(element, node);
    tops.push_back(node);
  }
  scratch_ = std::move(tops);
  return intern_scratch();
}

void Engine::export_stacks(int32_t set, std::vector<std::vector<uint32_t>>& stacks) const {
  stacks.clear();
  if (set < 0) return;
  const Set& s = sets_[set];
  stacks.resize(s.size);
  for (uint32_t i = 0; i < s.size; ++i) {
    std::vector<uint32_t>& stack = stacks[i];
    for (uint32_t node = set_pool_[s.offset + i]; node != kEmptyStack; node = nodes_[node].parent) {
      stack.push_back(nodes_[node].element);
    }
    std::reverse(stack.begin(), stack.end());
  }
  std::sort(stacks.begin(), stacks.end());
}

int32_t Engine::start_set() {
  if (start_set_ != kDead) return start_set_;
  ++stamp_;
  steps_ = 0;
  scratch_.clear();
  if (!expand(intern_node(grammar_->start_element, kEmptyStack))) return kDead;
  start_set_ = intern_scratch();
  return start_set_;
}

Engine& engine_for(const GrammarImpl& grammar) {
  // A few engines per thread, most recent first: a thread serving several sequences keeps each
  // grammar's memoized transitions. An engine that grew past the budget starts over.
  constexpr size_t kEnginesPerThread = 4;
  constexpr size_t kEngineBudgetBytes = size_t{256} << 20;
  thread_local std::vector<std::unique_ptr<Engine>> engines;
  for (size_t i = 0; i < engines.size(); ++i) {
    if (engines[i]->serial() != grammar.serial) continue;
    if (engines[i]->footprint() > kEngineBudgetBytes) engines[i] = std::make_unique<Engine>(grammar);
    std::rotate(engines.begin(), engines.begin() + static_cast<std::ptrdiff_t>(i), engines.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return *engines.front();
  }
  if (engines.size() == kEnginesPerThread) engines.pop_back();
  engines.insert(engines.begin(), std::make_unique<Engine>(grammar));
  return *engines.front();
}

}  // namespace okapi::grammar
