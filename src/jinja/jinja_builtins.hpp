// Jinja's built-in filters, tests, methods of str / dict / list, and the global functions a chat
// template can call (range, dict, namespace, cycler, joiner, raise_exception, strftime_now).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "jinja/jinja_interpreter.hpp"
#include "jinja/jinja_value.hpp"

namespace okapi::jinja {

using FilterFunction = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFunction = bool (*)(Interpreter&, const Value&, CallArgs&);

FilterFunction find_filter(std::string_view name);
TestFunction find_test(std::string_view name);

// A method of a str / dict / list bound to its receiver (`'a,b'.split`), an unsafe-attribute
// Undefined for mutating methods as Jinja's ImmutableSandboxedEnvironment gives, or nullopt.
std::optional<Value> find_method(const Value& receiver, const std::string& name);

void add_globals(Scope& scope);

// Positional argument `index`, else keyword `name`, else null.
const Value* argument(const CallArgs& args, std::size_t index, std::string_view name);

// Python's printf-style formatting: "%s and %d" % (a, b), the `format` filter.
// Both keep origins: the format string's text as it was, each field as its value's (see TaggedText).
TaggedText percent_format(Interpreter& interpreter, const TaggedText& format, const std::vector<Value>& values,
                          const Value* mapping);
// Markup % values (and the format filter on Markup): the values' strings HTML-escaped first, a Markup result.
Value markup_percent_format(Interpreter& interpreter, const Value& format, const std::vector<Value>& values,
                            const Value* mapping);
// Python's str.format: "{} and {name}".format(a, name=b).
TaggedText python_str_format(Interpreter& interpreter, const TaggedText& format, const CallArgs& args);

}  // namespace okapi::jinja
