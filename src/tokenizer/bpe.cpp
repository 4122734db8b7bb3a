// Byte-level BPE as llama.cpp's llm_tokenizer_bpe_session: pre-tokenize with the family's regexes,
// map each word's bytes to GPT-2's printable codepoints, then merge adjacent symbols by merge rank
// (lowest rank first, leftmost on ties) until no adjacent pair has a rank.
#include <algorithm>
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace okapi::tokenizer {
namespace {

struct Symbol {
  size_t offset;  // into the word
  size_t length;  // 0 once merged into its left neighbour
  int prev;
  int next;
};

struct Bigram {
  int rank;
  int left;
  int right;
  std::string text;  // the merged text when queued; a stale entry no longer matches the symbols
};

struct LaterBigram {  // priority_queue puts the "largest" first: make that the lowest rank, then leftmost
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

std::string merge_key(std::string_view left, std::string_view right) {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key.push_back('\0');  // byte-level token texts never contain a raw NUL (it maps to U+0100)
  key.append(right);
  return key;
}

class BpeSession final : public Session {
 public:
  explicit BpeSession(const Vocab& vocab)
      : token_to_id_(vocab.token_to_id), family_(pre_tokenizer_family(vocab.pre)), pre_tokenizer_(family_.regexes) {
    ranks_.reserve(vocab.merges.size());
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      ranks_.emplace(merge_key(vocab.merges[i].first, vocab.merges[i].second), static_cast<int>(i));
    }
  }

  void encode_fragment(std::string_view text, std::vector<TokenId>& out) const override {
    for (const std::string& word : pre_tokenizer_.split(text)) encode_word(bpe_byte_encode(word), out);
  }

 private:
  TokenId find(const std::string& text) const {
    const auto it = token_to_id_.find(text);
    return it == token_to_id_.end() ? kNoToken : it->second;
  }

  void encode_word(const std::string& word, std::vector<TokenId>& out) const {
    if (word.empty()) return;
    std::vector<Symbol> symbols;
    if (family_.ignore_merges && find(word) != kNoToken) {
      symbols.push_back({0, word.size(), -1, -1});
    } else {
      for (size_t offset = 0; offset < word.size();) {
        const size_t length = std::min(word.size() - offset, utf8_sequence_length(word[offset]));
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({offset, length, index - 1, offset + length == word.size() ? -1 : index + 1});
        offset += length;
      }
    }

    std::priority_queue<Bigram, std::vector<Bigram>, LaterBigram> queue;
    auto piece = [&](int i) {
      return std::string_view(word).substr(symbols[static_cast<size_t>(i)].offset, symbols[static_cast<size_t>(i)].length);
    };
    auto add_bigram = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const auto it = ranks_.find(merge_key(piece(left), piece(right)));
      if (it == ranks_.end()) return;
      std::string merged(piece(left));
      merged.append(piece(right));
      queue.push({it->second, left, right, std::move(merged)});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_bigram(i - 1, i);

    while (!queue.empty()) {
      const Bigram bigram = queue.top();
      queue.pop();
      Symbol& left = symbols[static_cast<size_t>(bigram.left)];
      Symbol& right = symbols[static_cast<size_t>(bigram.right)];
      if (left.length == 0 || right.length == 0) continue;
      if (left.next != bigram.right || left.length + right.length != bigram.text.size() ||
          word.compare(left.offset, bigram.text.size(), bigram.text) != 0) {
        continue;  // stale: one side has merged with something else since this pair was queued
      }
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
      add_bigram(left.prev, bigram.left);
      add_bigram(bigram.left, left.next);
    }

    for (const Symbol& symbol : symbols) {
      if (symbol.length == 0) continue;
      const std::string text = word.substr(symbol.offset, symbol.length);
      const TokenId id = find(text);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
      // As llama.cpp: an unknown piece falls back to its single bytes that are tokens; others vanish.
      for (const char byte : text) {
        const TokenId byte_id = find(std::string(1, byte));
        if (byte_id != kNoToken) out.push_back(byte_id);
      }
    }
  }

  // A copy, not a reference: the Tokenizer that owns both the Vocab and this session may move.
  std::unordered_map<std::string, TokenId> token_to_id_;
  PreTokenizerFamily family_;
  PreTokenizer pre_tokenizer_;
  std::unordered_map<std::string, int> ranks_;
};

}  // namespace

std::unique_ptr<Session> make_bpe_session(const Vocab& vocab) { return std::make_unique<BpeSession>(vocab); }

}  // namespace okapi::tokenizer
