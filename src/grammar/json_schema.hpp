// JSON Schema -> GBNF, as llama.cpp's json-schema-to-grammar does it (same rule shapes, the same
// `space` rule between tokens, the same regex subset for `pattern`), written for okapi. Schemas
// come from clients: what cannot be expressed is a SchemaError that names the keyword.
//
// Every string the grammar matches is valid under the schema (the converter may allow fewer
// instances than the schema, never more):
//  - supported: type (and lists of types), properties / required / additionalProperties (bool or
//    schema; absent with "properties": no other keys, as llama.cpp), enum / const, items /
//    prefixItems (and draft-7 tuple items / additionalItems), minItems / maxItems, minLength /
//    maxLength, pattern (^...$, literals, classes, groups incl. (?:) and named, |, ? * + {m,n},
//    ., \d \w \s and their negations in ASCII), format date / time / date-time / uuid (other
//    formats are annotations: any string), minimum / maximum / exclusive* for integers and numbers
//    (rounded inwards to integers; a number range has no exponent), anyOf / oneOf (as alternatives:
//    oneOf's branches should not overlap), allOf (merged, distributed over anyOf/oneOf), keywords
//    beside $ref / anyOf / oneOf (they constrain each branch), local $ref ("#", "#/$defs/x",
//    "#/definitions/x", any JSON pointer; recursion allowed), {} / true = any value.
//  - SchemaError: not, if/then/else, patternProperties, propertyNames, dependent*, unevaluated*,
//    contains, multipleOf (but 1 for integers), uniqueItems (unless maxItems <= 1), remote or
//    anchor $refs, pattern features without a grammar (lookaround, backreferences, \b, \p,
//    possessive quantifiers), pattern together with minLength/maxLength or format, minProperties /
//    maxProperties the object shape does not already satisfy, contradictions (minLength >
//    maxLength, allOf parts with no common type or value, required keys additionalProperties
//    false forbids).
//  - bounds against hostile schemas: 128 levels of schemas and $refs (512 of JSON), a minimum
//    count (minItems, minLength, {m}) above 1000 is refused and a maximum above 1000 lowered to
//    1000, 1000 properties per object, 64 alternatives from distributing allOf, 100000 schema
//    visits, 4 MiB of grammar.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace okapi::grammar {

using Json = nlohmann::ordered_json;

// A schema the converter cannot express or that is malformed: keyword() is the offending keyword
// ("pattern", "$ref", "minimum", ...), the message says where ("#/properties/date/pattern: ...").
class SchemaError : public okapi::Error {
 public:
  SchemaError(const std::string& message, std::string keyword) : okapi::Error(message), keyword_(std::move(keyword)) {}
  const std::string& keyword() const { return keyword_; }

 private:
  std::string keyword_;
};

// Builds one grammar out of several schemas and hand-written rules (a tool-call grammar is a
// choice between the tools' argument schemas wrapped in the model's call syntax).
class GrammarBuilder {
 public:
  GrammarBuilder();
  ~GrammarBuilder();
  GrammarBuilder(const GrammarBuilder&) = delete;
  GrammarBuilder& operator=(const GrammarBuilder&) = delete;
  // Adds the rules matching `schema` (JSON text with the `space` rule between tokens) and returns
  // the rule name to reference. `name` is a hint ("root", "get-weather-args"); it is made unique.
  // Local "$ref"s ("#/$defs/x", "#/definitions/x", "#") resolve against `schema` itself.
  std::string add_schema(const std::string& name, const Json& schema);
  // Adds a rule with a GBNF body and returns its (unique) name. Bodies may reference rules added
  // before or after, and the common rules every schema grammar has (`space`, `string`, `value`, ...).
  std::string add_rule(const std::string& name, const std::string& body);
  // The grammar's text, rules sorted by name. Throws SchemaError when no `root` rule was added.
  std::string text() const;

 private:
  struct Impl;
  Impl* impl_;
};

// A GBNF string literal matching `text` byte for byte (quotes and escapes written out).
std::string gbnf_literal(std::string_view text);

// GBNF for one schema, its root rule `root`. Throws SchemaError.
std::string json_schema_to_gbnf(const Json& schema);
// GBNF for any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace okapi::grammar
