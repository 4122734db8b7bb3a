// SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm: the text (spaces already
// escaped to U+2581) starts as one symbol per UTF-8 character; the adjacent pair whose
// concatenation is the highest-scoring vocabulary token is merged first (ties: leftmost), using a
// priority queue, so the whole pass is O(n log n). Symbols that are not tokens are re-split along
// the merges that built them, down to <0xNN> byte tokens.
#include <memory>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::tokenizer {
namespace {

// Length of a UTF-8 sequence from its first byte, as llama.cpp's unicode_len_utf8: continuation
// and invalid bytes count as one-byte characters, so any byte string is accepted.
size_t utf8_length(unsigned char first) {
  static constexpr size_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[first >> 4];
}

struct Symbol {
  int prev = -1;
  int next = -1;
  size_t offset = 0;  // into the fragment
  size_t n = 0;       // bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int left = 0;
  int right = 0;
  float score = 0;
  size_t size = 0;
};

// Highest score first; among equal scores the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession final : public Session {
 public:
  explicit SpmSession(const Vocab& vocab) : vocab_(vocab) {}

  void encode_fragment(std::string_view text, std::vector<TokenId>& out) const override {
    Run run(vocab_, text);
    run.tokenize(out);
  }

 private:
  // The state of one call (the session itself stays immutable and thread-safe).
  struct Run {
    Run(const Vocab& v, std::string_view t) : vocab(v), text(t) {}
    const Vocab& vocab;
    std::string_view text;
    std::vector<Symbol> symbols;
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    // Which pair last produced a given text. Keyed by text as in llama.cpp (a later pair with the
    // same text replaces an earlier one); resegment() follows it.
    std::unordered_map<std::string_view, std::pair<int, int>> rev_merge;

    std::string_view piece(const Symbol& s) const { return text.substr(s.offset, s.n); }

    void tokenize(std::vector<TokenId>& out) {
      size_t offset = 0;
      while (offset < text.size()) {
        Symbol s;
        s.offset = offset;
        s.n = std::min(utf8_length(static_cast<unsigned char>(text[offset])), text.size() - offset);
        offset += s.n;
        s.prev = static_cast<int>(symbols.size()) - 1;
        s.next = offset == text.size() ? -1 : static_cast<int>(symbols.size()) + 1;
        symbols.push_back(s);
      }
      for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

      while (!queue.empty()) {
        const Bigram bigram = queue.top();
        queue.pop();
        Symbol& left = symbols[static_cast<size_t>(bigram.left)];
        Symbol& right = symbols[static_cast<size_t>(bigram.right)];
        // Stale entry: one side was merged away since it was queued.
        if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
        try_add_bigram(left.prev, bigram.left);
        try_add_bigram(bigram.left, left.next);
      }
      if (symbols.empty()) return;
      for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
        resegment(symbols[static_cast<size_t>(i)], out, 0);
      }
    }

    void try_add_bigram(int left, int right) {
      if (left == -1 || right == -1) return;
      const Symbol& l = symbols[static_cast<size_t>(left)];
      const std::string_view joined = text.substr(l.offset, l.n + symbols[static_cast<size_t>(right)].n);
      const TokenId id = vocab.find(joined);
      if (id == kNoToken) return;
      queue.push(Bigram{left, right, vocab.score(id), joined.size()});
      rev_merge[joined] = {left, right};
    }

    void resegment(const Symbol& symbol, std::vector<TokenId>& out, int depth) {
      const std::string_view p = piece(symbol);
      if (const TokenId id = vocab.find(p); id != kNoToken) {
        out.push_back(id);
        return;
      }
      const auto it = rev_merge.find(p);
      // The depth bound only guards against a cycle through rev_merge's text keys; real merges
      // are at most as deep as the fragment is long.
      if (it == rev_merge.end() || depth > static_cast<int>(text.size())) {
        for (char c : p) out.push_back(byte_token(static_cast<unsigned char>(c)));
        return;
      }
      resegment(symbols[static_cast<size_t>(it->second.first)], out, depth + 1);
      resegment(symbols[static_cast<size_t>(it->second.second)], out, depth + 1);
    }

    // llama.cpp's byte_to_token: <0xNN>, else the byte itself as a one-character token. Where
    // llama.cpp would throw (neither exists), okapi falls back to the unknown token.
    TokenId byte_token(unsigned char byte) const {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const char name[6] = {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
      if (TokenId id = vocab.find(std::string_view(name, 6)); id != kNoToken) return id;
      const char single = static_cast<char>(byte);
      if (TokenId id = vocab.find(std::string_view(&single, 1)); id != kNoToken) return id;
      if (vocab.unk != kNoToken) return vocab.unk;
      throw_error("SPM tokenizer: byte 0x{:02X} has no <0x{:02X}> token and the vocabulary has no unknown token",
                  byte, byte);
    }
  };

  const Vocab& vocab_;
};

}  // namespace

std::unique_ptr<Session> make_spm_session(const Vocab& vocab) { return std::make_unique<SpmSession>(vocab); }

}  // namespace okapi::tokenizer
