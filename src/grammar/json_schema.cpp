#include "grammar/json_schema.hpp"

// Stub: the JSON Schema converter is being written (issue 29).
namespace okapi::grammar {

struct GrammarBuilder::Impl {};
GrammarBuilder::GrammarBuilder() : impl_(new Impl) {}
GrammarBuilder::~GrammarBuilder() { delete impl_; }
std::string GrammarBuilder::add_schema(const std::string&, const Json&) { throw SchemaError("JSON schemas are not implemented yet", "type"); }
std::string GrammarBuilder::add_rule(const std::string& name, const std::string&) { return name; }
std::string GrammarBuilder::text() const { throw SchemaError("JSON schemas are not implemented yet", "type"); }
std::string json_schema_to_gbnf(const Json&) { throw SchemaError("JSON schemas are not implemented yet", "type"); }
std::string json_object_gbnf() { throw SchemaError("JSON schemas are not implemented yet", "type"); }

}  // namespace okapi::grammar
