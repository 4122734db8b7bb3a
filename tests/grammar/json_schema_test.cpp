// JSON Schema -> GBNF: the grammar text for schemas whose expected grammar llama.cpp's
// tests/test-json-schema-to-grammar.cpp lists (equal where okapi agrees; the differences are
// noted), then acceptance: a Matcher over the converted grammar accepts valid instances and
// rejects invalid ones, and what cannot be expressed is a SchemaError naming the keyword.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.hpp"
#include "grammar/json_schema.hpp"

namespace okapi::grammar {
namespace {

const char* const kSpace = R"(space ::= | " " | "\n"{1,2} [ \t]{0,20})";
// okapi's `number` exponent has at most 2 digits (llama.cpp's up to 16: 1e9999999 is no double).
// llama.cpp's `char` writes any \uXXXX; okapi's leaves out surrogates (D800-DFFF), which strict
// JSON parsers (nlohmann) reject when unpaired.
const char* const kChar =
    R"(char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))";
const char* const kString = R"(string ::= "\"" char* "\"")";
const char* const kNumberRules = R"(decimal-part ::= [0-9]{1,16}
integral-part ::= [0] | [1-9] [0-9]{0,15}
number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})?)";

// The expected grammar's lines, sorted (the converter writes rules sorted by name).
std::string sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    lines.push_back(line.substr(start));
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

void expect_grammar(const char* schema, const std::string& expected) {
  const std::string actual = json_schema_to_gbnf(Json::parse(schema));
  EXPECT_EQ(sorted_lines(actual), sorted_lines(expected)) << "schema: " << schema;
  // Every grammar the converter writes parses.
  EXPECT_NO_THROW(Grammar::parse(actual)) << actual;
}

std::string lines(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& part : parts) out += part + "\n";
  return out;
}

TEST(JsonSchemaGolden, IntegerRanges) {
  struct Case {
    const char* schema;
    const char* root;
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": 0})", R"(root ::= ([0] | [1-9] [0-9]{0,15}))"},
      {R"({"type": "integer", "minimum": 1})", R"(root ::= ([1-9] [0-9]{0,15}))"},
      {R"({"type": "integer", "minimum": 3})", R"(root ::= ([1-2] [0-9]{1,15} | [3-9] [0-9]{0,15}))"},
      {R"({"type": "integer", "minimum": 9})", R"(root ::= ([1-8] [0-9]{1,15} | [9] [0-9]{0,15}))"},
      {R"({"type": "integer", "minimum": 10})", R"(root ::= ([1] ([0-9]{1,15}) | [2-9] [0-9]{1,15}))"},
      {R"({"type": "integer", "minimum": 25})", R"(root ::= ([1] [0-9]{2,15} | [2] ([0-4] [0-9]{1,14} | [5-9] [0-9]{0,14}) | [3-9] [0-9]{1,15}))"},
      {R"({"type": "integer", "maximum": 30})", R"(root ::= ("-" [1-9] [0-9]{0,15} | [0-9] | ([1-2] [0-9] | [3] "0")))"},
      {R"({"type": "integer", "minimum": -5})", R"(root ::= ("-" ([0-5]) | [0] | [1-9] [0-9]{0,15}))"},
      {R"({"type": "integer", "minimum": -123})",
       R"(root ::= ("-" ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-1] [0-9] | [2] [0-3])) | [0] | [1-9] [0-9]{0,15}))"},
      // llama.cpp: "-" ([0-4] [0-9]{1,15} | ...), which writes "-05" (not JSON).
      {R"({"type": "integer", "maximum": -5})", R"(root ::= ("-" ([1-4] [0-9]{1,15} | [5-9] [0-9]{0,15})))"},
      {R"({"type": "integer", "maximum": 1})", R"(root ::= ("-" [1-9] [0-9]{0,15} | [0-1]))"},
      {R"({"type": "integer", "maximum": 100})", R"(root ::= ("-" [1-9] [0-9]{0,15} | [0-9] | ([1-8] [0-9] | [9] [0-9]) | "100"))"},
      {R"({"type": "integer", "minimum": 0, "maximum": 23})", R"(root ::= ([0-9] | ([1] [0-9] | [2] [0-3])))"},
      {R"({"type": "integer", "minimum": 15, "maximum": 300})", R"(root ::= (([1] ([5-9]) | [2-9] [0-9]) | ([1-2] [0-9]{2} | [3] "00")))"},
      {R"({"type": "integer", "minimum": 5, "maximum": 30})", R"(root ::= ([5-9] | ([1-2] [0-9] | [3] "0")))"},
      {R"({"type": "integer", "minimum": -123, "maximum": 42})",
       R"(root ::= ("-" ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-1] [0-9] | [2] [0-3])) | [0-9] | ([1-3] [0-9] | [4] [0-2])))"},
      {R"({"type": "integer", "minimum": -10, "maximum": 10})", R"(root ::= ("-" ([0-9] | "10") | [0-9] | "10"))"},
      // Exclusive and fractional bounds are rounded inwards.
      {R"({"type": "integer", "exclusiveMinimum": 0, "maximum": 9.5})", R"(root ::= ([1-9]))"},
  };
  for (const Case& c : cases) expect_grammar(c.schema, lines({c.root, kSpace}));
}

TEST(JsonSchemaGolden, Primitives) {
  expect_grammar(R"({"type": "string"})", lines({kChar, R"(root ::= "\"" char* "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "minLength": 1})", lines({kChar, R"(root ::= "\"" char+ "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "minLength": 3})", lines({kChar, R"(root ::= "\"" char{3,} "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "maxLength": 3})", lines({kChar, R"(root ::= "\"" char{0,3} "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "minLength": 1, "maxLength": 4})", lines({kChar, R"(root ::= "\"" char{1,4} "\"")", kSpace}));
  expect_grammar(R"({"type": "boolean"})", lines({R"(root ::= ("true" | "false"))", kSpace}));
  expect_grammar(R"({"type": "integer"})", lines({"integral-part ::= [0] | [1-9] [0-9]{0,15}", R"(root ::= ("-"? integral-part))", kSpace}));
  expect_grammar(R"({"type": "number"})",
                 lines({"decimal-part ::= [0-9]{1,16}", "integral-part ::= [0] | [1-9] [0-9]{0,15}",
                        R"(root ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})?)", kSpace}));
  expect_grammar(R"({"const": "foo"})", lines({R"(root ::= "\"foo\"")", kSpace}));
  expect_grammar(R"({"const": 123})", lines({R"(root ::= "123")", kSpace}));
  expect_grammar(R"({"enum": ["red", "amber", "green", null, 42, ["foo"]]})",
                 lines({R"(root ::= ("\"red\"" | "\"amber\"" | "\"green\"" | "null" | "42" | "[\"foo\"]"))", kSpace}));
  // The type rules enum values out (llama.cpp keeps them).
  expect_grammar(R"({"type": "string", "enum": ["a", 1, null]})", lines({R"(root ::= ("\"a\""))", kSpace}));
}

TEST(JsonSchemaGolden, AnyValue) {
  const std::string any = lines({R"(array ::= "[" space ( value ("," space value)* )? space "]")", R"(boolean ::= ("true" | "false"))", kChar,
                                 kNumberRules, R"(null ::= "null")",
                                 R"(object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}")",
                                 "root ::= value", kSpace, kString, "value ::= object | array | string | number | boolean | null"});
  expect_grammar("{}", any);
  expect_grammar("true", any);
  expect_grammar(R"({"description": "The 0-based index of the last line", "title": "End"})", any);
  std::string object = any;
  object.replace(object.find("root ::= value"), 14, "root ::= object");
  expect_grammar(R"({"type": "object"})", object);
  expect_grammar(R"({"type": "object", "additionalProperties": true})", object);
  EXPECT_EQ(json_object_gbnf(), json_schema_to_gbnf(Json{{"type", "object"}}));
}

TEST(JsonSchemaGolden, Arrays) {
  expect_grammar(R"({"type": "array", "prefixItems": {"type": "string"}})",
                 lines({kChar, R"(root ::= "[" space (string ("," space string)*)? space "]")", kSpace, kString}));
  expect_grammar(R"({"type": ["array", "null"], "prefixItems": {"type": "string"}})",
                 lines({R"(alternative-0 ::= "[" space (string ("," space string)*)? space "]")", kChar, R"(null ::= "null")",
                        "root ::= alternative-0 | null", kSpace, kString}));
  expect_grammar(R"({"prefixItems": [{"type": "string"}]})", lines({kChar, R"(root ::= "[" space string space "]")", kSpace, kString}));
  expect_grammar(R"({"prefixItems": [{"type": "string"}, {"type": "number"}]})",
                 lines({kChar, kNumberRules, R"(root ::= "[" space string "," space number space "]")", kSpace, kString}));
  expect_grammar(R"({"items": {"type": "boolean"}, "minItems": 2})",
                 lines({R"(boolean ::= ("true" | "false"))", R"(root ::= "[" space boolean ("," space boolean)+ space "]")", kSpace}));
  expect_grammar(R"({"items": {"type": "boolean"}, "maxItems": 0})",
                 lines({R"(boolean ::= ("true" | "false"))", R"(root ::= "[" space  space "]")", kSpace}));
  expect_grammar(R"({"items": {"type": "boolean"}, "maxItems": 1})",
                 lines({R"(boolean ::= ("true" | "false"))", R"(root ::= "[" space boolean? space "]")", kSpace}));
  expect_grammar(R"({"items": {"type": "boolean"}, "maxItems": 2})",
                 lines({R"(boolean ::= ("true" | "false"))", R"(root ::= "[" space (boolean ("," space boolean)?)? space "]")", kSpace}));
  expect_grammar(R"({"items": {"type": ["number", "integer"]}, "minItems": 3, "maxItems": 5})",
                 lines({kNumberRules, R"(root ::= "[" space number ("," space number){2,4} space "]")", kSpace}));
  expect_grammar(R"({"items": {"type": "integer", "minimum": 12, "maximum": 207}, "minItems": 3, "maxItems": 5})",
                 lines({R"(item ::= (([1] ([2-9]) | [2-9] [0-9]) | ([1] [0-9]{2} | [2] "0" [0-7])))",
                        R"(root ::= "[" space item ("," space item){2,4} space "]")", kSpace}));
}

TEST(JsonSchemaGolden, Formats) {
  // llama.cpp's date allows 2023-02-31 and year 0000; okapi's only real days.
  expect_grammar(R"({"items": [{"format": "date"}, {"format": "uuid"}, {"format": "time"}, {"format": "date-time"}]})",
                 lines({R"(date ::= [1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [1-2] [0-9] | "30" ) | "02" "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ))",
                        R"(date-string ::= "\"" date "\"")", R"(date-time ::= date "T" time)", R"(date-time-string ::= "\"" date-time "\"")",
                        R"(root ::= "[" space tuple-0 "," space uuid "," space tuple-2 "," space tuple-3 space "]")", kSpace,
                        R"(time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
                        R"(time-string ::= "\"" time "\"")", "tuple-0 ::= date-string", "tuple-2 ::= time-string", "tuple-3 ::= date-time-string",
                        R"(uuid ::= "\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"")"}));
}

TEST(JsonSchemaGolden, Patterns) {
  expect_grammar(R"({"type": "string", "pattern": "^abc?d*efg+(hij)?kl$"})",
                 lines({R"(root ::= "\"" ("ab" "c"? "d"* "ef" "g"+ ("hij")? "kl") "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^\\[\\]\\{\\}\\(\\)\\|\\+\\*\\?$"})", lines({R"(root ::= "\"" ("[]{}()|+*?") "\"")", kSpace}));
  // A quote in the pattern is an escaped quote in the JSON string (llama.cpp writes a bare one).
  expect_grammar(R"({"type": "string", "pattern": "^\"$"})", lines({R"(root ::= "\"" ("\\\"") "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^A|B|C|D$"})", lines({R"(root ::= "\"" ("A" | "B" | "C" | "D") "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^(?:foo|bar)baz$"})", lines({R"(root ::= "\"" (("foo" | "bar") "baz") "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^(?:(?:ab)+c)?d$"})", lines({R"(root ::= "\"" ((("ab")+ "c")? "d") "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^[a-z\\-]+$"})", lines({R"(root ::= "\"" ([\x2Da-z]+) "\"")", kSpace}));
  expect_grammar(R"({"type": "string", "pattern": "^a\\-b$"})", lines({R"(root ::= "\"" ("a-b") "\"")", kSpace}));
  // \d is ASCII digits; bounded repetitions of compound items get their own rule.
  expect_grammar(R"({"type": "string", "pattern": "^\\d{3}(-\\d{2}){2}$"})",
                 lines({R"(root ::= "\"" ([0-9]{3,3} root-1{2,2}) "\"")", R"(root-1 ::= ("-" [0-9]{2,2}))", kSpace}));
}

TEST(JsonSchemaGolden, Objects) {
  expect_grammar(R"({"type": "object", "properties": {"b": {"type": "string"}, "c": {"type": "string"}, "a": {"type": "string"}},
                     "required": ["a", "b", "c"], "additionalProperties": false, "definitions": {}})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space string)", R"(b-kv ::= "\"b\"" space ":" space string)",
                        R"(c-kv ::= "\"c\"" space ":" space string)", kChar,
                        R"(root ::= "{" space b-kv "," space c-kv "," space a-kv space "}")", kSpace, kString}));
  expect_grammar(R"({"properties": {"a": {"type": "string"}}, "additionalProperties": false})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space string)", kChar, R"(root ::= "{" space  (a-kv )? space "}")", kSpace, kString}));
  expect_grammar(R"({"properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}}, "additionalProperties": false})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space string)", R"(a-rest ::= ( "," space b-kv )? b-rest)",
                        R"(b-kv ::= "\"b\"" space ":" space string)", R"(b-rest ::= ( "," space c-kv )?)",
                        R"(c-kv ::= "\"c\"" space ":" space string)", kChar,
                        R"(root ::= "{" space  (a-kv a-rest | b-kv b-rest | c-kv )? space "}")", kSpace, kString}));
  expect_grammar(R"({"properties": {"b": {"type": "string"}, "a": {"type": "string"}, "d": {"type": "string"}, "c": {"type": "string"}},
                     "required": ["a", "b"], "additionalProperties": false})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space string)", R"(b-kv ::= "\"b\"" space ":" space string)",
                        R"(c-kv ::= "\"c\"" space ":" space string)", kChar, R"(d-kv ::= "\"d\"" space ":" space string)",
                        R"(d-rest ::= ( "," space c-kv )?)",
                        R"(root ::= "{" space b-kv "," space a-kv ( "," space ( d-kv d-rest | c-kv ) )? space "}")", kSpace, kString}));
  expect_grammar(R"({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"}}})",
                 lines({R"(additional-kv ::= string ":" space additional-value)",
                        R"(additional-value ::= "[" space (number ("," space number)*)? space "]")", kChar, kNumberRules,
                        R"(root ::= "{" space  (additional-kv ( "," space additional-kv )* )? space "}")", kSpace, kString}));
  expect_grammar(R"({"type": "object", "additionalProperties": false})", lines({R"(root ::= "{" space "}")", kSpace}));
  // Tools without parameters: "properties": {} is the empty object only.
  expect_grammar(R"({"type": "object", "properties": {}})", lines({R"(root ::= "{" space "}")", kSpace}));
  // Extra keys are written without escapes (so "\u0061" cannot stand in for "a"): key-char.
  expect_grammar(R"({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"], "additionalProperties": {"type": "string"}})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space number)", R"(additional-k ::= ["] ( [a] key-char+ | [^\x00-\x1F\x22\x5Ca\x7F] key-char* )? ["])",
                        R"(additional-kv ::= additional-k ":" space string)", kChar, kNumberRules, R"(key-char ::= [^"\\\x7F\x00-\x1F])",
                        R"(root ::= "{" space a-kv ( "," space ( additional-kv ( "," space additional-kv )* ) )? space "}")", kSpace, kString}));
  expect_grammar(R"({"type": "object", "properties": {"number": {"type": "object", "properties": {"number": {"type": "object",
                     "properties": {"root": {"type": "number"}}, "required": ["root"], "additionalProperties": false}},
                     "required": ["number"], "additionalProperties": false}}, "required": ["number"], "additionalProperties": false})",
                 lines({kNumberRules, R"(number- ::= "{" space number-number-kv space "}")", R"(number-kv ::= "\"number\"" space ":" space number-)",
                        R"(number-number ::= "{" space number-number-root-kv space "}")",
                        R"(number-number-kv ::= "\"number\"" space ":" space number-number)",
                        R"(number-number-root-kv ::= "\"root\"" space ":" space number)", R"(root ::= "{" space number-kv space "}")", kSpace}));
  expect_grammar(R"({"properties": {"code": {"const": " \r \n \" \\ ", "type": "string"}}, "required": ["code"], "type": "object"})",
                 lines({R"(code ::= "\" \\r \\n \\\" \\\\ \"")", R"(code-kv ::= "\"code\"" space ":" space code)",
                        R"(root ::= "{" space code-kv space "}")", kSpace}));
}

TEST(JsonSchemaGolden, RefsAndCombinations) {
  expect_grammar(R"({"$ref": "#/definitions/foo", "definitions": {"foo": {"type": "object", "properties": {"a": {"type": "string"}},
                     "required": ["a"], "additionalProperties": false}}})",
                 lines({kChar, R"(ref-definitions-foo ::= "{" space ref-definitions-foo-a-kv space "}")",
                        R"(ref-definitions-foo-a-kv ::= "\"a\"" space ":" space string)", "root ::= ref-definitions-foo", kSpace, kString}));
  expect_grammar(R"({"anyOf": [{"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"}], "definitions": {
                     "foo": {"properties": {"a": {"type": "number"}}}, "bar": {"properties": {"b": {"type": "number"}}}}})",
                 lines({"alternative-0 ::= ref-definitions-foo", "alternative-1 ::= ref-definitions-bar", kNumberRules,
                        R"(ref-definitions-bar ::= "{" space  (ref-definitions-bar-b-kv )? space "}")",
                        R"(ref-definitions-bar-b-kv ::= "\"b\"" space ":" space number)",
                        R"(ref-definitions-foo ::= "{" space  (ref-definitions-foo-a-kv )? space "}")",
                        R"(ref-definitions-foo-a-kv ::= "\"a\"" space ":" space number)", "root ::= alternative-0 | alternative-1", kSpace}));
  // allOf merges every part (llama.cpp gives the same grammar for this tsconfig-like mix, but
  // keeps the anyOf's properties optional; okapi distributes, one alternative per branch).
  expect_grammar(R"({"allOf": [{"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"}],
                     "definitions": {"foo": {"properties": {"a": {"type": "number"}}, "required": ["a"]},
                                     "bar": {"properties": {"b": {"type": "number"}}, "required": ["b"]}}, "type": "object"})",
                 lines({R"(a-kv ::= "\"a\"" space ":" space number)", R"(b-kv ::= "\"b\"" space ":" space number)", kNumberRules,
                        R"(root ::= "{" space a-kv "," space b-kv space "}")", kSpace}));
  expect_grammar(R"({"allOf": [{"$ref": "#/definitions/foo"}, {"$ref": "#/definitions/bar"}], "definitions": {
                     "foo": {"type": "string", "enum": ["a", "b", "c"]}, "bar": {"type": "string", "enum": ["b", "c", "d"]}}})",
                 lines({R"(root ::= ("\"b\"" | "\"c\""))", kSpace}));
}

// ---- acceptance: the converted grammar over real instances -----------------------------------

bool matches(const std::shared_ptr<const Grammar>& grammar, const std::string& text) {
  Matcher matcher(grammar);
  return matcher.accept(text) && matcher.can_end();
}

void expect_instances(const Json& schema, const std::vector<std::string>& valid, const std::vector<std::string>& invalid) {
  const std::string text = json_schema_to_gbnf(schema);
  const auto grammar = Grammar::parse(text);
  for (const std::string& instance : valid) EXPECT_TRUE(matches(grammar, instance)) << schema.dump() << "\nshould accept: " << instance << "\n" << text;
  for (const std::string& instance : invalid) EXPECT_FALSE(matches(grammar, instance)) << schema.dump() << "\nshould reject: " << instance << "\n" << text;
}

TEST(JsonSchemaAccept, IntegerRangesMatchTheirBounds) {
  // Every integer in a window around the bounds: in range <=> accepted.
  const std::pair<int, int> ranges[] = {{0, 23}, {-123, 42}, {-10, 10}, {15, 300}, {-300, -15}, {7, 7}, {-5, 1000}};
  for (const auto& [lo, hi] : ranges) {
    const auto grammar = Grammar::parse(json_schema_to_gbnf(Json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}));
    for (int v = lo - 40; v <= hi + 40; ++v) EXPECT_EQ(matches(grammar, std::to_string(v)), v >= lo && v <= hi) << lo << ".." << hi << ": " << v;
    EXPECT_FALSE(matches(grammar, "01"));
    EXPECT_FALSE(matches(grammar, "-01"));
  }
  const int minima[] = {-123, -5, 0, 1, 9, 10, 25, 100};
  for (int lo : minima) {
    const auto grammar = Grammar::parse(json_schema_to_gbnf(Json{{"type", "integer"}, {"minimum", lo}}));
    for (int v = lo - 150; v <= lo + 1200; ++v) EXPECT_EQ(matches(grammar, std::to_string(v)), v >= lo) << "min " << lo << ": " << v;
    EXPECT_FALSE(matches(grammar, "-05"));
  }
  const int maxima[] = {-123, -5, 0, 1, 30, 100};
  for (int hi : maxima) {
    const auto grammar = Grammar::parse(json_schema_to_gbnf(Json{{"type", "integer"}, {"maximum", hi}}));
    for (int v = hi - 1200; v <= hi + 150; ++v) EXPECT_EQ(matches(grammar, std::to_string(v)), v <= hi) << "max " << hi << ": " << v;
    EXPECT_FALSE(matches(grammar, "-05"));
    EXPECT_FALSE(matches(grammar, "-0123"));
  }
}

TEST(JsonSchemaAccept, NumberRanges) {
  expect_instances(Json::parse(R"({"type": "number", "minimum": -90, "maximum": 90})"),
                   {"0", "-0", "90", "-90", "89.999", "-89.5", "12.25", "90.000", "-90.0"}, {"90.5", "-90.01", "100", "1e3", "-91"});
  expect_instances(Json::parse(R"({"type": "number", "minimum": 0})"), {"0", "0.5", "123456.75"}, {"-0.5", "-1"});
  expect_instances(Json::parse(R"({"type": "number", "exclusiveMaximum": 0})"), {"-1", "-1.5", "-1000"}, {"0", "0.5", "-0.5"});
}

TEST(JsonSchemaAccept, StringsPatternsFormats) {
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^\\d{3}-\\d{4}$"})"), {R"("555-1234")"}, {R"("5551234")", R"("555-12345")", "555"});
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}( [A-Z0-9]{4})*$"})"), {R"("GB82 WEST 1234")", R"("DE44")"},
                   {R"("gb82")", R"("GB82 WES")"});
  // Quotes and backslashes in patterns are escaped in the JSON text.
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^a\"b\\\\c$"})"), {R"("a\"b\\c")"}, {R"("a"b\c")"});
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^[^,]+$"})"), {R"("abc")", R"("a\"b")"}, {R"("a,b")", R"("")", "\"a\nb\""});
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^.{2}$"})"), {R"("ab")", R"("\\x")", R"("é!")"}, {R"("a")", "\"a\nb\""});
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^(?<year>[0-9]{4})-(?P<m>0[1-9]|1[0-2])$"})"), {R"("2024-12")"}, {R"("2024-13")"});
  // A repeated single character takes minLength/maxLength as its count.
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 5})"), {R"("ab-1")", R"("abcde")"},
                   {R"("abcdef")", R"("")", R"("AB")"});
  expect_instances(Json::parse(R"({"type": "string", "pattern": "^.*$", "minLength": 2, "maxLength": 3})"), {R"("ab")", R"("a\"c")"},
                   {R"("a")", R"("abcd")"});
  // Enum values pass the other keywords too.
  expect_instances(Json::parse(R"({"type": "integer", "enum": [1, 5, 10, 20], "minimum": 5, "maximum": 10})"), {"5", "10"}, {"1", "20"});
  expect_instances(Json::parse(R"({"enum": ["2024-01-31", "2024-02-31", "soon"], "format": "date"})"), {R"("2024-01-31")"},
                   {R"("2024-02-31")", R"("soon")"});
  expect_instances(Json::parse(R"({"type": "string", "format": "date"})"), {R"("2024-02-28")", R"("1999-12-31")", R"("2024-04-30")"},
                   {R"("2024-02-30")", R"("2024-04-31")", R"("2024-13-01")", R"("0000-01-01")", R"("2024-1-01")"});
  expect_instances(Json::parse(R"({"type": "string", "format": "date-time"})"), {R"("2024-05-01T12:30:00Z")", R"("2024-05-01T23:59:59.123+02:00")"},
                   {R"("2024-05-01 12:30:00Z")", R"("2024-05-01T24:00:00Z")", R"("2024-05-01T12:30:00")"});
  expect_instances(Json::parse(R"({"type": "string", "format": "uuid"})"), {R"("123e4567-e89b-12d3-a456-426614174000")"},
                   {R"("123e4567e89b12d3a456426614174000")"});
  expect_instances(Json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"), {R"("ab")", R"("a\nc")", R"("\u00e9\u00e9")"},
                   {R"("a")", R"("abcd")", R"("\ud83d\ude00x")"});
}

TEST(JsonSchemaAccept, ObjectsArraysRefs) {
  const Json weather = Json::parse(R"({
    "type": "object",
    "properties": {
      "location": {"type": "string", "description": "City and country"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 14}
    },
    "required": ["location"],
    "additionalProperties": false})");
  expect_instances(weather,
                   {R"({"location": "Paris"})", R"({"location":"Paris","unit":"celsius"})", R"({ "location": "Oslo", "days": 14 })",
                    "{\n  \"location\": \"Rome\",\n  \"unit\": \"fahrenheit\",\n  \"days\": 3\n}"},
                   {R"({"unit": "celsius"})", R"({"location": "Paris", "days": 15})", R"({"location": "Paris", "unit": "kelvin"})",
                    R"({"location": "Paris", "extra": 1})", R"({"location": 5})"});
  const Json tree = Json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  expect_instances(tree, {R"({"value": 1})", R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]})"},
                   {R"({"value": 1, "children": [{"children": []}]})", R"({"value": "x"})"});
  expect_instances(Json::parse(R"({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3})"),
                   {R"(["a"])", R"(["a", "b", "c"])"}, {"[]", R"(["a", "b", "c", "d"])", "[1]"});
  expect_instances(Json::parse(R"({"type": "array", "prefixItems": [{"type": "number"}, {"type": "string"}], "items": false})"),
                   {R"([1.5, "x"])"}, {R"(["x", 1.5])", R"([1.5, "x", 2])"});
  // Additional properties: any key but the declared ones (which take their own schema).
  expect_instances(Json::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                                   "additionalProperties": {"type": "string"}})"),
                   {R"({"id": 1, "name": "x", "i": "y"})", R"({"id": 1, "idx": "z"})"}, {R"({"id": 1, "id": "x"})", R"({"id": 1, "n": 2})"});
  // Odd property names: empty (llama.cpp's rule for it takes the name "root"), leading digits, quotes.
  expect_instances(Json::parse(R"({"type": "object", "properties": {"": {"type": "integer"}, "1st": {"type": "string"}, "a\"b": {"type": "boolean"}},
                                   "required": [""], "additionalProperties": false})"),
                   {R"({"": 1})", R"({"": 1, "1st": "x", "a\"b": true})"}, {R"({"1st": "x"})", R"({"": "x"})", "1"});
  // Required names that properties does not declare are required all the same.
  expect_instances(Json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]})"),
                   {R"({"a": "x", "b": 1})"}, {R"({"a": "x"})"});
  // Keywords beside anyOf constrain every branch.
  expect_instances(Json::parse(R"({"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
                                   "anyOf": [{"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["r"]},
                                             {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["side"]}]})"),
                   {R"({"kind": "circle", "r": 2})", R"({"kind": "square", "side": 1})"}, {R"({"kind": "circle", "side": 2})", R"({"kind": "circle"})"});
}

TEST(JsonSchemaBuilder, SeveralSchemasAndHandWrittenRules) {
  GrammarBuilder builder;
  const std::string weather = builder.add_schema("get-weather-args", Json::parse(R"({"type": "object", "properties": {
      "city": {"$ref": "#/$defs/city"}}, "required": ["city"], "$defs": {"city": {"type": "string", "minLength": 1}}})"));
  const std::string search = builder.add_schema("search-args", Json::parse(R"({"type": "object", "properties": {
      "city": {"$ref": "#/$defs/city"}}, "required": ["city"], "$defs": {"city": {"enum": ["Paris", "Oslo"]}}})"));
  EXPECT_NE(weather, search);
  builder.add_rule("call", "\"<tool_call>\" space (" + weather + " | " + search + ") space \"</tool_call>\"");
  builder.add_rule("root", "call | string");  // `string` is a common rule, added because it is named
  const std::string text = builder.text();
  const auto grammar = Grammar::parse(text);
  EXPECT_TRUE(matches(grammar, R"(<tool_call>{"city": "Berlin"}</tool_call>)")) << text;
  EXPECT_TRUE(matches(grammar, R"(<tool_call> {"city": "Oslo"} </tool_call>)"));
  EXPECT_TRUE(matches(grammar, R"("free text")"));
  EXPECT_FALSE(matches(grammar, R"(<tool_call>{"city": ""}</tool_call>)"));
  GrammarBuilder empty;
  empty.add_rule("call", "\"x\"");
  EXPECT_THROW(empty.text(), SchemaError);
}

// ---- what cannot be expressed ------------------------------------------------------------------

void expect_error(const char* schema, const std::string& keyword, const std::string& pointer) {
  try {
    json_schema_to_gbnf(Json::parse(schema));
    ADD_FAILURE() << "no error for " << schema;
  } catch (const SchemaError& error) {
    EXPECT_EQ(error.keyword(), keyword) << schema << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(pointer), std::string::npos) << schema << ": " << error.what();
  }
}

TEST(JsonSchemaErrors, NameTheKeywordAndWhere) {
  expect_error(R"({"type": "kaboom"})", "type", "#/type");
  expect_error(R"({"type": 123})", "type", "#/type");
  expect_error(R"({"properties": {"a": {"not": {"type": "string"}}}})", "not", "#/properties/a/not");
  expect_error(R"({"properties": {"when": {"type": "string", "pattern": "^(?=a)a$"}}})", "pattern", "#/properties/when/pattern");
  expect_error(R"({"type": "string", "pattern": "^(a$"})", "pattern", "#/pattern");
  expect_error(R"({"type": "string", "pattern": "^(a)\\1$"})", "pattern", "#/pattern");
  expect_error(R"({"type": "string", "pattern": "^\\bword$"})", "pattern", "#/pattern");
  expect_error(R"({"$ref": "https://example.com/schema.json"})", "$ref", "#/$ref");
  expect_error(R"({"$ref": "#/$defs/missing"})", "$ref", "#/$ref");
  expect_error(R"({"if": {"type": "string"}, "then": {"minLength": 1}})", "if", "#/if");
  expect_error(R"({"type": "object", "patternProperties": {"^x-": {}}})", "patternProperties", "#/patternProperties");
  expect_error(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": true})", "uniqueItems", "#/uniqueItems");
  expect_error(R"({"type": "number", "multipleOf": 0.5})", "multipleOf", "#/multipleOf");
  expect_error(R"({"type": "string", "minLength": 5, "maxLength": 2})", "minLength", "#/minLength");
  expect_error(R"({"type": "array", "minItems": 1000000000})", "minItems", "#/minItems");
  expect_error(R"({"type": "integer", "minimum": 10, "maximum": 5})", "minimum", "#/minimum");
  expect_error(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "type", "#/type");
  expect_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": false})", "required", "#/required");
  expect_error(R"({"type": "string", "enum": [1, 2]})", "enum", "#/enum");
  expect_error(R"({"type": "string", "pattern": "^(ab)+$", "maxLength": 6})", "maxLength", "#/maxLength");
  expect_error(R"({"type": "string", "pattern": "^[a-z]{2,3}$", "minLength": 4})", "pattern", "#/pattern");
  expect_error(R"({"enum": ["a", "b"], "minLength": 2})", "enum", "#/enum");
}

TEST(JsonSchemaErrors, HostileSchemasAreBounded) {
  // 10k levels of nesting: refused, no stack overflow.
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}";
  for (int i = 0; i < 10000; ++i) deep += "}";
  EXPECT_THROW(json_schema_to_gbnf(Json::parse(deep)), SchemaError);
  // $ref cycles with no object or array in between (left-recursive rules), and allOf through itself.
  expect_error(R"({"$ref": "#"})", "$ref", "#");
  expect_error(R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"})", "$ref", "#/$defs/a/anyOf/0/$ref");
  EXPECT_THROW(json_schema_to_gbnf(Json::parse(R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})")), SchemaError);
  // Huge maxItems/maxLength are lowered (fewer is still valid), not unrolled.
  const std::string capped = json_schema_to_gbnf(Json::parse(R"({"type": "array", "items": {"type": "string", "maxLength": 1000000000}, "maxItems": 1000000000})"));
  EXPECT_NE(capped.find("char{0,1000}"), std::string::npos) << capped;
  EXPECT_NO_THROW(Grammar::parse(capped));
  // allOf over many anyOfs multiplies out: refused past the limit.
  Json wide = {{"allOf", Json::array()}};
  for (int i = 0; i < 8; ++i) wide["allOf"].push_back(Json{{"anyOf", Json::array({Json{{"minLength", 1}}, Json{{"maxLength", 5}}})}});
  EXPECT_THROW(json_schema_to_gbnf(wide), SchemaError);
  // Keywords beside anyOf are copied into each branch: nested, the copies multiply (8^12 here).
  Json nested = {{"type", "string"}};
  for (int level = 0; level < 12; ++level) {
    Json branches = Json::array();
    for (int b = 0; b < 8; ++b) branches.push_back(Json{{"properties", {{fmt::format("b{}", b), {{"type", "integer"}}}}}});
    nested = Json{{"type", "object"}, {"properties", {{"x", nested}}}, {"anyOf", branches}};
  }
  EXPECT_THROW(json_schema_to_gbnf(nested), SchemaError);
  // Too many properties for one object; many optional ones are fine (each -rest rule once).
  Json many = {{"type", "object"}, {"properties", Json::object()}};
  for (int p = 0; p < 1001; ++p) many["properties"][fmt::format("p{}", p)] = {{"type", "boolean"}};
  EXPECT_THROW(json_schema_to_gbnf(many), SchemaError);
  many["properties"].erase("p1000");
  const auto grammar = Grammar::parse(json_schema_to_gbnf(many));
  EXPECT_TRUE(matches(grammar, R"({"p3": true, "p999": false})"));
  EXPECT_FALSE(matches(grammar, R"({"p999": false, "p3": true})"));  // declaration order
}

}  // namespace
}  // namespace okapi::grammar
