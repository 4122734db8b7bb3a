// GBNF: parsing (llama.cpp's syntax and its errors) and the matcher's accept/reject behaviour per
// construct. Accept/reject strings follow llama.cpp's tests/test-grammar-integration.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "grammar/gbnf_engine.hpp"
#include "grammar/grammar.hpp"
#include "support/paths.hpp"

namespace okapi::grammar {
namespace {

// The whole string is a sentence of the grammar.
bool complete(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  Matcher matcher(grammar);
  return matcher.accept(text) && matcher.can_end();
}

// Fed one byte at a time, the matcher agrees with feeding the whole string at once.
bool complete_bytewise(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  Matcher matcher(grammar);
  for (char c : text) {
    if (!matcher.accept(std::string_view(&c, 1))) return false;
  }
  return matcher.can_end();
}

void expect_language(const std::string& gbnf, const std::vector<std::string>& passing, const std::vector<std::string>& failing) {
  SCOPED_TRACE(gbnf);
  const auto grammar = Grammar::parse(gbnf);
  for (const std::string& s : passing) {
    EXPECT_TRUE(complete(grammar, s)) << "should pass: " << s;
    EXPECT_TRUE(complete_bytewise(grammar, s)) << "should pass byte by byte: " << s;
  }
  for (const std::string& s : failing) {
    EXPECT_FALSE(complete(grammar, s)) << "should fail: " << s;
    EXPECT_FALSE(complete_bytewise(grammar, s)) << "should fail byte by byte: " << s;
  }
}

// The error's line and column, and that its message names them and contains `needle`.
void expect_error(const std::string& gbnf, int line, int column, const std::string& needle) {
  SCOPED_TRACE(gbnf);
  try {
    Grammar::parse(gbnf);
    ADD_FAILURE() << "parsed, expected an error containing: " << needle;
  } catch (const GrammarError& e) {
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
    const std::string message = e.what();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
    if (line > 0) {
      EXPECT_NE(message.find("line " + std::to_string(line) + ", column " + std::to_string(column)), std::string::npos) << message;
    }
  }
}

TEST(Gbnf, Quantifiers) {
  expect_language(R"(root ::= "a"*)", {"", "a", "aaaaa", std::string(60, 'a')}, {"b", "ab", "aab", "ba", std::string(60, 'a') + "b"});
  expect_language(R"(root ::= "a"+)", {"a", "aaaaa", std::string(60, 'a')}, {"", "b", "ab", "aab", "ba"});
  expect_language(R"(root ::= "a"?)", {"", "a"}, {"b", "ab", "aa", "ba"});
  expect_language(R"(
      root ::= cons+ vowel* cons? (vowel cons)*
      vowel ::= [aeiouy]
      cons ::= [bcdfghjklmnpqrstvwxyz]
  )", {"yes", "no", "noyes", "crwth", "four", "bryyyy"}, {"yess", "yesno", "forty", "catyyy"});
}

TEST(Gbnf, RepetitionBounds) {
  expect_language(R"(root ::= [ab]{4})", {"aaaa", "bbbb", "abab"}, {"a", "b", "aaa", "aaaaa"});
  expect_language(R"(root ::= [ab]{4,})", {"aaaa", "aaaaab", "bbbb", "ababab"}, {"", "aba"});
  expect_language(R"(root ::= [ab]{0,4})", {"", "a", "aa", "aaa", "aaab"}, {"aaaaa", "bbbbbb"});
  expect_language(R"(root ::= [a]{,2} "b")", {"b", "ab", "aab"}, {"aaab", "a"});
  expect_language(R"(root ::= [ab]{2,4} [cd]{1,2})", {"aac", "abcd", "abbbdc"}, {"ac", "aaaaac", "abcdd", "ab"});
  expect_language(R"(root ::= ("ab" | "c"){2,3})", {"abab", "cc", "abcab", "ccc"}, {"ab", "c", "abababab", "cccc", "aba"});
  // A maximum over the limit is treated as no maximum (as llama.cpp does).
  expect_language(R"(root ::= "x"{1,5000})", {"x", std::string(3000, 'x')}, {""});
}

TEST(Gbnf, CharacterClasses) {
  expect_language(R"(root ::= [a-z]+)", {"abc", "z"}, {"", "A", "abC", "a1"});
  expect_language(R"(root ::= [a-zA-Z_][a-zA-Z0-9_]*)", {"x", "_a1", "Zz9"}, {"1a", "", "a-b"});
  expect_language(R"(root ::= [^abc]+)", {"xyz", "d", "é"}, {"a", "xa", ""});
  expect_language(R"(root ::= [\-\]a]+)", {"-", "]", "a-]"}, {"b", "\\"});
  expect_language(R"(root ::= [a-]+)", {"a", "-", "a-a"}, {"b"});
  expect_language(R"(root ::= [\x00-\x1F]*)", {"\n\t", std::string(1, '\0')}, {" "});
  expect_language(R"(root ::= . "c")", {"ac", "\xC3\xA9" "c", "\xF0\x9F\x94\xB5" "c"}, {"c", "abc"});
  // JSON's string body: anything but quote, backslash and controls.
  expect_language(R"(root ::= "\"" [^"\\\x7F\x00-\x1F]* "\"")", {"\"\"", "\"hello world\"", "\"caf\xC3\xA9\""},
                  {"\"a\"b\"", "\"a\\\"", "\"\n\"", "\""});
}

TEST(Gbnf, LiteralsAndEscapes) {
  expect_language(R"(root ::= "a\tb\n\r\\\"\x41\u00e9\U0001F535")",
                  {"a\tb\n\r\\\"A\xC3\xA9\xF0\x9F\x94\xB5"}, {"a\tb\n\r\\\"A\xC3\xA9", "a\\tb"});
  expect_language(R"(root ::= "[" "]" "-")", {"[]-"}, {"[]"});
}

TEST(Gbnf, NestedRulesAndAlternatives) {
  expect_language(R"(
      root ::= expr
      expr ::= term ("+" term)*
      term ::= number
      number ::= [0-9]+)", {"42", "1+2+3+4+5", "123+456"}, {"+", "/ 3", "1+2+3+4+5+", "12a45"});
  expect_language(R"g(
      root ::= expression
      expression ::= term ws (("+"|"-") ws term)*
      term ::= factor ws (("*"|"/") ws factor)*
      factor ::= number | variable | "(" expression ")" | function-call
      number ::= [0-9]+
      variable ::= [a-zA-Z_][a-zA-Z0-9_]*
      function-call ::= variable ws "(" (expression ("," ws expression)*)? ")"
      ws ::= [ \t\n\r]?)g",
                  {"42", "1*2*3*4*5", "x", "x+10", "(a+b)*(c-d)", "func()", "func(x,y+2)", "f(g(x),h(y,z))", "x + 10",
                   "a * (b + c) - d / e", "123+456*789-123/456+789*123-456/789+123*456-789/123"},
                  {"+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)", "42 +", "func(",
                   "f(g(x), h(y, z)"});
  // Newlines inside parentheses and after '|', comments, rule names with '-'.
  expect_language("root ::= (\n  \"a\" # first\n  | \"b\"\n) tail-part\ntail-part ::= \"!\" |\n  \"?\"\n",
                  {"a!", "b?"}, {"a", "c!", "ab!"});
}

TEST(Gbnf, Utf8InLiteralsAndClasses) {
  expect_language(R"(root ::= ... "abc" ...)", {"abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"},
                  {"aaabcccc", "aaaaabcccc", "aaaabccc", "🔵🟠✅❌abc❌✅🟠🔵", "🔵🟠abc🟠🔵"});
  expect_language(R"(root ::= [α-ω]+ "日本")", {"αβγ日本", "ω日本"}, {"a日本", "αβ日", "αβ"});
  expect_language(R"(root ::= [^α-ω]+)", {"abc", "日本"}, {"aβc"});
  // Invalid UTF-8 is never accepted, even by '.'.
  expect_language(R"(root ::= .+)", {"x", "é"}, {"\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xF5\x80\x80\x80", "\xED"});
}

TEST(Gbnf, PartialUtf8AcrossCalls) {
  const auto grammar = Grammar::parse(R"(root ::= "é" [日-本] "x")");
  Matcher m(grammar);
  EXPECT_TRUE(m.accept("\xC3"));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept("\xA9\xE6"));
  EXPECT_TRUE(m.accept("\x97"));
  EXPECT_TRUE(m.accept("\xA5x"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.finished());

  // A lead byte whose completions all miss the class is refused at once.
  Matcher n(grammar);
  EXPECT_FALSE(n.accept("\xC4"));  // U+0100..U+013F cannot be é
  EXPECT_TRUE(n.accept("\xC3"));
  EXPECT_FALSE(n.accept("\xA8"));  // è
  EXPECT_TRUE(n.accept("\xA9"));
  // A rejected call leaves the state as it was.
  EXPECT_FALSE(n.accept("\xE6\x97\xA5y"));
  EXPECT_TRUE(n.accept("\xE6\x97\xA5x"));
  EXPECT_TRUE(n.can_end());
}

TEST(Gbnf, StateHashFollowsState) {
  const auto grammar = Grammar::parse(R"(root ::= "\"" [a-z]* "\"")");
  Matcher a(grammar), b(grammar);
  a.accept("\"abc");
  b.accept("\"xy");
  EXPECT_EQ(a.state_hash(), b.state_hash());  // same position inside the string
  EXPECT_TRUE(a.state() == b.state());
  b.accept("\"");
  EXPECT_NE(a.state_hash(), b.state_hash());
  EXPECT_TRUE(b.finished());
  EXPECT_FALSE(a.can_end());
}

TEST(Gbnf, TokenReferences) {
  const auto grammar = Grammar::parse(R"(
      root ::= <[10]> content <[11]>
      content ::= (!<[11]>)*)");
  // Each part is a token: ids 10-19 are special, text characters are tokens 1000 + byte.
  auto run = [&](const std::vector<std::variant<int, char>>& parts) {
    Matcher m(grammar);
    for (const auto& part : parts) {
      bool ok = false;
      if (std::holds_alternative<int>(part)) ok = m.accept_token(std::get<int>(part), "<special>");
      else ok = m.accept_token(1000 + std::get<char>(part), std::string(1, std::get<char>(part)));
      if (!ok) return false;
    }
    return m.can_end();
  };
  EXPECT_TRUE(run({10, 'h', 'i', 11}));
  EXPECT_TRUE(run({10, 11}));
  EXPECT_TRUE(run({10, 12, 'a', 13, 11}));
  EXPECT_FALSE(run({10, 'a'}));
  EXPECT_FALSE(run({'a', 11}));
  EXPECT_FALSE(run({10, 11, 11}));
  EXPECT_FALSE(run({11, 10}));
}

TEST(Gbnf, JsonGrammar) {
  const std::string json = test::read_file(test::repo_dir() / "examples" / "grammars" / "json.gbnf");
  expect_language(json, {R"({})", R"({"a": 1})", R"({"a": [1, 2.5, -3e4, "x\u00e9\n", {"b": null}], "c": true})", "{\n  \"k\": \"v\"\n}"},
                  {R"({"a" 1})", R"({"a": 01x})", R"([1])", R"({"a": "\q"})", R"({"a": tru})", R"({"a": 1,})"});
}

TEST(Gbnf, ParseErrorsNameLineAndColumn) {
  expect_error("root ::= \"a\"\nitem = \"b\"\n", 2, 6, "expected '::='");
  expect_error("root ::= \"abc\n", 1, 10, "not closed");
  expect_error("root ::= [abc\n", 1, 10, "not closed");
  expect_error("root ::= ( \"a\" \n", 2, 1, "expected ')'");
  expect_error("root ::= \"a\" )\n", 1, 14, "expected the end of the line");
  expect_error("root ::= \"\\q\"\n", 1, 11, "unknown escape");
  expect_error("root ::= \"\\x4\"\n", 1, 13, "hex digits");
  expect_error("root ::= * \"a\"\n", 1, 10, "needs an item before it");
  expect_error("root ::= \"a\"{3,2}\n", 1, 13, "minimum exceeds the maximum");
  expect_error("root ::= \"a\"{x}\n", 1, 14, "expected an integer");
  expect_error("\n\n  root ::= item\n", 3, 12, "rule 'item' is never defined");
  expect_error("root ::= <hello>\n", 1, 10, "needs a vocabulary");
  expect_error("root ::= \"\xC3(\"\n", 1, 11, "invalid UTF-8");
}

TEST(Gbnf, RefusedGrammars) {
  expect_error("item ::= \"a\"\n", 0, 0, "no rule 'root'");
  EXPECT_NO_THROW(Grammar::parse("item ::= \"a\"\n", "item"));
  expect_error("root ::= root \"a\" | \"b\"\n", 0, 0, "left-recursive");
  expect_error("root ::= x\nx ::= y \"a\"\ny ::= z\nz ::= \"\" | x\n", 0, 0, "left-recursive");
  expect_error("root ::= e? root \"a\"\ne ::= \"e\"\n", 0, 0, "left-recursive");  // through a nullable prefix
  expect_error("root ::= \"a\" root\n", 0, 0, "can never end");
  expect_error("root ::= x\nx ::= \"(\" x \")\" | \"[\" x\n", 0, 0, "can never end");
  expect_error("root ::= \"a\"{2001}\n", 1, 13, "exceed the limit");
  expect_error("root ::= (\"a\"{0,50}){0,50}\n", 1, 21, "multiply");
  // Right recursion is fine, and so is a rule referenced before its definition.
  expect_language("root ::= \"a\" root | \"b\"\n", {"b", "aab"}, {"a", "ba"});
}

TEST(Gbnf, DeadEndAlternativesAreDropped) {
  // `loop` never ends: entering it could never finish, so the matcher refuses its first byte.
  const auto grammar = Grammar::parse("root ::= \"a\" | loop\nloop ::= \"b\" loop\n");
  Matcher m(grammar);
  EXPECT_FALSE(m.allows("b"));
  EXPECT_TRUE(m.accept("a"));
  EXPECT_TRUE(m.finished());
}

TEST(Gbnf, HostileSizesAreRefusedNotOverflowed) {
  expect_error("root ::= " + std::string(1 << 20, '('), 1, 10 + 128, "nest deeper");
  // Long flat inputs parse quickly.
  std::string many = "root ::= x0\n";
  for (int i = 0; i < 3000; ++i) many += fmt::format("x{} ::= \"a\" x{} | \"b\"\n", i, i + 1);
  many += "x3000 ::= \"c\"\n";
  const auto chain = Grammar::parse(many);
  EXPECT_TRUE(complete(chain, std::string(2999, 'a') + "b"));
  // Deep nesting in the input is bounded: the matcher rejects instead of growing without end.
  const auto nest = Grammar::parse("root ::= \"(\" root \")\" | \"x\"\n");
  Matcher m(nest);
  bool refused = false;
  for (int i = 0; i < 5000 && !refused; ++i) refused = !m.accept("(");
  EXPECT_TRUE(refused);
  // Exponentially many paths collapse into few stacks.
  const auto ambiguous = Grammar::parse("root ::= (\"a\" | \"a\" | [a-z] | .)* \"!\"\n");
  Matcher a(ambiguous);
  EXPECT_TRUE(a.accept(std::string(2000, 'a') + "!"));
  EXPECT_TRUE(a.can_end());
}

}  // namespace
}  // namespace okapi::grammar
