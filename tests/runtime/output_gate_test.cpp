// The output gate: a grammar applied from the start, lazily from a trigger text, or only after
// the reasoning block (never to the reasoning itself), and the reasoning budget's forced end.
// Outputs are driven token by token over a real SentencePiece vocabulary, whose tokens cross the
// markers' boundaries ("</think>" is several tokens, one of which may carry the answer's first byte).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/gguf.hpp"
#include "grammar/grammar.hpp"
#include "runtime/output_gate.hpp"
#include "support/paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace okapi::runtime {
namespace {

const tokenizer::Tokenizer& vocab() {
  static const tokenizer::Tokenizer t(tokenizer::Vocab::from_gguf(
      gguf::File::open(test::repo_dir() / "tests" / "data" / "vocab" / "ggml-vocab-llama-spm.gguf")));
  return t;
}

const grammar::TokenIndex& index() {
  static const grammar::TokenIndex i(vocab());
  return i;
}

// Tokens whose texts concatenate to exactly `text` (longest piece first; SentencePiece's own
// encoding would add a leading space).
std::vector<TokenId> tokens(const std::string& text) {
  static const auto by_piece = [] {
    std::unordered_map<std::string, TokenId> map;
    for (size_t id = 0; id < index().n_vocab(); ++id) {
      const auto token = static_cast<TokenId>(id);
      if (!index().is_end_of_generation(token) && !index().piece(token).empty()) map.emplace(index().piece(token), token);
    }
    return map;
  }();
  std::vector<TokenId> out;
  for (size_t at = 0; at < text.size();) {
    size_t length = std::min<size_t>(text.size() - at, 32);
    for (; length > 0; --length) {
      const auto it = by_piece.find(text.substr(at, length));
      if (it == by_piece.end()) continue;
      out.push_back(it->second);
      break;
    }
    if (length == 0) {
      ADD_FAILURE() << "no token for the text at " << at << " of \"" << text << "\"";
      return out;
    }
    at += length;
  }
  return out;
}

// The single token whose text is exactly `piece` (SentencePiece writes a leading space as "▁").
TokenId token(const std::string& piece) {
  for (size_t id = 0; id < index().n_vocab(); ++id)
    if (index().piece(static_cast<TokenId>(id)) == piece) return static_cast<TokenId>(id);
  ADD_FAILURE() << "no token '" << piece << "'";
  return 0;
}

OutputConstraint yes_or_no() {
  OutputConstraint c;
  c.grammar = grammar::Grammar::parse(R"(root ::= " "? ("yes" | "no") "!"?)");
  return c;
}

ReasoningRules think(bool forced_open, int64_t budget = -1) {
  ReasoningRules r;
  r.start = "<think>";
  r.end = "</think>";
  r.forced_open = forced_open;
  r.budget = budget;
  return r;
}

// Feeds `text`'s tokens; returns how many of them were constrained.
int feed(OutputGate& gate, const std::string& text) {
  int constrained = 0;
  for (const TokenId id : tokens(text)) {
    if (gate.constrains()) {
      ++constrained;
      EXPECT_TRUE(gate.filter().allows(id)) << "token '" << index().piece(id) << "' of \"" << text << "\"";
    }
    EXPECT_TRUE(gate.accept(id));
  }
  return constrained;
}

TEST(OutputGate, PlainRequestIsNotGated) {
  OutputGate gate(vocab(), nullptr, OutputConstraint{}, ReasoningRules{});
  EXPECT_FALSE(gate.enabled());
  EXPECT_FALSE(gate.constrains());
  EXPECT_FALSE(gate.forced());
}

TEST(OutputGate, GrammarFromTheFirstToken) {
  OutputGate gate(vocab(), &index(), yes_or_no(), ReasoningRules{});
  ASSERT_TRUE(gate.constrains());
  EXPECT_TRUE(gate.filter().allows(token(" yes")));
  EXPECT_FALSE(gate.filter().allows(token(" maybe")));
  const auto& mask = gate.filter().mask();
  EXPECT_TRUE(mask[static_cast<size_t>(token(" no"))]);
  EXPECT_FALSE(mask[static_cast<size_t>(token(" the"))]);
  EXPECT_FALSE(mask[static_cast<size_t>(vocab().vocab().eos)]);  // nothing yet: cannot end
  feed(gate, " yes");
  EXPECT_TRUE(gate.filter().mask()[static_cast<size_t>(vocab().vocab().eos)]);
}

TEST(OutputGate, ForcedOpenReasoningIsFreeThenTheAnswerIsConstrained) {
  OutputConstraint c = yes_or_no();
  c.after_reasoning = true;
  OutputGate gate(vocab(), &index(), c, think(true));
  EXPECT_TRUE(gate.in_reasoning());
  EXPECT_FALSE(gate.constrains());
  EXPECT_EQ(feed(gate, "Let me think about the weather, maybe"), 0);
  EXPECT_FALSE(gate.constrains());
  feed(gate, "</think>");
  EXPECT_FALSE(gate.in_reasoning());
  ASSERT_TRUE(gate.constrains());
  EXPECT_TRUE(gate.filter().allows(token(" no")));
  EXPECT_FALSE(gate.filter().allows(token(" maybe")));
}

TEST(OutputGate, MarkerEndingInsideATokenStartsTheGrammarOnTheRest) {
  OutputConstraint c = yes_or_no();
  c.after_reasoning = true;
  OutputGate gate(vocab(), &index(), c, think(true));
  // The token after "</think" may be ">" followed by nothing, or carry more: feed the answer's
  // first byte inside the same text and check the grammar followed it.
  feed(gate, "ok</think>ye");
  EXPECT_FALSE(gate.in_reasoning());
  ASSERT_TRUE(gate.constrains());
  EXPECT_TRUE(gate.filter().allows(token("s")));
  EXPECT_FALSE(gate.filter().allows(token("x")));
}

TEST(OutputGate, ReasoningMayOpenOrTheAnswerMayStart) {
  OutputConstraint c = yes_or_no();
  c.after_reasoning = true;
  {
    OutputGate gate(vocab(), &index(), c, think(false));
    ASSERT_TRUE(gate.constrains());
    EXPECT_TRUE(gate.filter().allows(tokens("<think>").front()));  // the block's opening
    EXPECT_TRUE(gate.filter().allows(token(" yes")));               // or the answer
    EXPECT_FALSE(gate.filter().allows(token(" maybe")));
    EXPECT_TRUE(gate.filter().mask()[static_cast<size_t>(tokens("<think>").front())]);
    feed(gate, "<think>");
    EXPECT_TRUE(gate.in_reasoning());
    EXPECT_FALSE(gate.constrains());
    feed(gate, " anything at all </think>");
    ASSERT_TRUE(gate.constrains());
    EXPECT_FALSE(gate.filter().allows(token(" maybe")));
  }
  {
    OutputGate gate(vocab(), &index(), c, think(false));
    feed(gate, " yes");
    EXPECT_FALSE(gate.in_reasoning());
    ASSERT_TRUE(gate.constrains());
    EXPECT_FALSE(gate.filter().allows(tokens("<think>").front()));  // too late to open the block
    EXPECT_TRUE(gate.filter().allows(token("!")));
  }
}

TEST(OutputGate, LazyGrammarStartsAtItsTrigger) {
  OutputConstraint c;
  c.grammar = grammar::Grammar::parse(R"(root ::= "<call>" [0-9]+ "</call>")");
  c.triggers = {"<call>"};
  OutputGate gate(vocab(), &index(), c, ReasoningRules{});
  EXPECT_FALSE(gate.constrains());
  EXPECT_EQ(feed(gate, "Some free text, with <cal"), 0);
  EXPECT_FALSE(gate.constrains());
  feed(gate, "l>");
  ASSERT_TRUE(gate.constrains());
  EXPECT_TRUE(gate.filter().allows(token("4")));
  EXPECT_FALSE(gate.filter().allows(token("a")));
  feed(gate, "42</call>");
  EXPECT_TRUE(gate.filter().mask()[static_cast<size_t>(vocab().vocab().eos)]);
}

TEST(OutputGate, StartTriggerFiresOnlyWhereTheAnswerStarts) {
  OutputConstraint c;
  c.grammar = grammar::Grammar::parse(R"(root ::= "{\"name\": " [0-9]+ "}")");
  c.start_triggers = {"{\"name\""};
  {
    OutputGate gate(vocab(), &index(), c, ReasoningRules{});
    feed(gate, "  {\"na");
    EXPECT_FALSE(gate.constrains());
    feed(gate, "me\"");
    ASSERT_TRUE(gate.constrains());
    EXPECT_TRUE(gate.filter().allows(token(":")));
    EXPECT_FALSE(gate.filter().allows(token("x")));
  }
  {
    OutputGate gate(vocab(), &index(), c, ReasoningRules{});
    feed(gate, "Plain text first, then {\"name\": 1}");
    EXPECT_FALSE(gate.constrains());  // inside the content it is text
  }
}

TEST(OutputGate, TriggerInsideTheReasoningDoesNotStartTheGrammar) {
  OutputConstraint c;
  c.grammar = grammar::Grammar::parse(R"(root ::= "<call>" [0-9]+ "</call>")");
  c.triggers = {"<call>"};
  c.after_reasoning = true;
  OutputGate gate(vocab(), &index(), c, think(true));
  feed(gate, "I could write <call> here");
  EXPECT_FALSE(gate.constrains());
  feed(gate, "</think>Now <call>");
  EXPECT_TRUE(gate.constrains());
}

TEST(OutputGate, BudgetForcesTheEndOfTheReasoning) {
  OutputGate gate(vocab(), nullptr, OutputConstraint{}, think(true, 3));
  EXPECT_TRUE(gate.enabled());
  const auto words = tokens(" one two three four");
  ASSERT_EQ(words.size(), 4u);
  size_t fed = 0;
  while (!gate.forced() && fed < words.size()) gate.accept(words[fed++]);
  EXPECT_EQ(fed, 3u);
  std::string forced;
  while (const auto id = gate.forced()) {
    forced += index().piece(*id);
    gate.accept(*id);
  }
  // SentencePiece's encoding adds its leading space, as llama.cpp's tokenization of the end does.
  EXPECT_TRUE(forced == "</think>" || forced == " </think>") << forced;
  EXPECT_FALSE(gate.in_reasoning());
  EXPECT_FALSE(gate.forced());
}

TEST(OutputGate, ZeroBudgetClosesTheBlockAtOnce) {
  OutputGate gate(vocab(), nullptr, OutputConstraint{}, think(true, 0));
  ASSERT_TRUE(gate.forced());
  std::string forced;
  while (const auto id = gate.forced()) {
    forced += index().piece(*id);
    gate.accept(*id);
  }
  // SentencePiece's encoding adds its leading space, as llama.cpp's tokenization of the end does.
  EXPECT_TRUE(forced == "</think>" || forced == " </think>") << forced;
}

TEST(OutputGate, ABudgetIsNotSpentOutsideTheBlock) {
  OutputGate gate(vocab(), nullptr, OutputConstraint{}, think(false, 2));
  feed(gate, " an answer with many words and no reasoning");
  EXPECT_FALSE(gate.forced());
}

}  // namespace
}  // namespace okapi::runtime
