// The functions a template finds without being given them: Jinja2's globals (range, dict,
// namespace, joiner) and the two Hugging Face adds (raise_exception, strftime_now).
#include <ctime>

#include "jinja/chat_template.hpp"
#include <fmt/format.h>

#include "jinja/jinja_builtins.hpp"

namespace okapi::jinja {

namespace {

void add_function(Scope& scope, const std::string& name, std::function<Value(Interpreter&, CallArgs&)> call) {
  auto function = std::make_shared<Function>();
  function->name = name;
  function->call = std::move(call);
  scope.set(name, Value::function(std::move(function)));
}

std::int64_t integer_argument(Interpreter& in, const Value& value) {
  if (value.is_int() || value.is_bool()) return value.as_int();
  if (value.is_undefined()) in.fail_undefined(value);
  in.fail(fmt::format("'{}' object cannot be interpreted as an integer", value.type_name()));
}

Value range(Interpreter& in, CallArgs& args) {
  if (args.positional.empty() || args.positional.size() > 3) in.fail("range expected 1 to 3 arguments");
  std::int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = integer_argument(in, args.positional[0]);
  } else {
    start = integer_argument(in, args.positional[0]);
    stop = integer_argument(in, args.positional[1]);
    if (args.positional.size() == 3) step = integer_argument(in, args.positional[2]);
  }
  if (step == 0) in.fail("range() arg 3 must not be zero");
  // The count first, so a huge range fails on the step limit before anything is allocated.
  const long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  const long double count = span <= 0 ? 0 : std::ceil(span / std::abs(static_cast<long double>(step)));
  if (count * 4 > static_cast<long double>(in.limits().max_steps)) in.charge(in.limits().max_steps + 1);
  std::vector<Value> items;
  items.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i) items.push_back(Value::integer(start + i * step));
  return in.make_list(std::move(items));
}

void merge_into(Interpreter& in, DictData& dict, const Value& source) {
  if (source.is_dict()) {
    for (const auto& [key, value] : source.as_dict().entries) dict.set(key, value);
    return;
  }
  for (const Value& pair : in.iterate(source)) {
    std::vector<Value> parts = in.iterate(pair);
    if (parts.size() != 2) in.fail("dictionary update sequence element has the wrong length; 2 is required");
    dict.set(parts[0], parts[1]);
  }
}

Value make_dict(Interpreter& in, CallArgs& args) {
  DictData dict;
  if (args.positional.size() > 1) in.fail(fmt::format("dict expected at most 1 argument, got {}", args.positional.size()));
  if (!args.positional.empty()) merge_into(in, dict, args.positional[0]);
  for (const auto& [key, value] : args.keyword) dict.set(in.make_string(key), value);
  in.charge(dict.entries.size());
  return Value::dict(std::move(dict));
}

Value make_namespace(Interpreter& in, CallArgs& args) {
  in.charge(16);  // a namespace costs more than a step: chains of them are built in loops
  auto ns = in.new_namespace();
  for (const Value& source : args.positional) {
    DictData initial;
    merge_into(in, initial, source);
    for (const auto& [key, value] : initial.entries) ns->set(key.str(), value);
  }
  for (const auto& [key, value] : args.keyword) ns->set(key, value);
  return Value::namespace_object(std::move(ns));
}

Value joiner(Interpreter& in, CallArgs& args) {
  const Value* separator = argument(args, 0, "sep");
  auto used = std::make_shared<bool>(false);
  auto function = std::make_shared<Function>();
  function->name = "joiner";
  const Value text = separator != nullptr ? Value::string(in.text_of(*separator)) : Value::string(", ");
  function->call = [used, text](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return text;
  };
  return Value::function(std::move(function));
}

Value raise_exception(Interpreter&, CallArgs& args) {
  throw TemplateRaised(args.positional.empty() ? std::string() : args.positional[0].str());
}

Value strftime_now(Interpreter& in, CallArgs& args) {
  const Value* format = argument(args, 0, "format");
  if (format == nullptr || !format->is_string()) in.fail("strftime_now() needs a format string");
  const std::time_t now = in.now();
  std::tm local{};
  localtime_r(&now, &local);
  const std::string& pattern = format->as_string();
  if (pattern.empty()) return Value::string("");
  // strftime gives 0 both for "too small" and for an empty result: grow the buffer a few times.
  for (std::size_t capacity = 256; capacity <= (std::size_t{1} << 20); capacity *= 8) {
    std::string buffer(capacity + pattern.size() * 8, '\0');
    const std::size_t written = std::strftime(buffer.data(), buffer.size(), pattern.c_str(), &local);
    if (written > 0) {
      buffer.resize(written);
      return in.make_string(std::move(buffer));
    }
  }
  return Value::string("");
}

}  // namespace

void add_globals(Scope& scope) {
  add_function(scope, "range", range);
  add_function(scope, "dict", make_dict);
  add_function(scope, "namespace", make_namespace);
  add_function(scope, "joiner", joiner);
  add_function(scope, "raise_exception", raise_exception);
  add_function(scope, "strftime_now", strftime_now);
}

}  // namespace okapi::jinja
