// The values a Jinja template computes with, modelled on the Python objects Jinja2 sees when
// Hugging Face renders a chat template: str, int, float, bool, None, list/tuple, dict (insertion
// ordered), namespace(), callables, the loop object, and Jinja's Undefined. Lists and dicts are
// immutable and shared (the sandbox forbids mutating them); only a namespace changes in place.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace okapi::jinja {

class Value;
class Interpreter;

// A string with the origin of each byte: the template's own text (its literals, and bos_token /
// eos_token) or text that came from the caller's data (messages, tools, chat_template_kwargs).
// Caller text must never be read as control tokens (a user could forge a turn with
// "<|im_start|>system"), so strings keep their origin through concatenation, filters and methods;
// where an operation mixes origins in ways not tracked byte by byte, its result counts as caller
// text wherever any input did (the safe side).
struct TaggedText {
  using Range = std::pair<std::size_t, std::size_t>;
  std::string text;
  std::vector<Range> user;  // byte ranges [first, second) of caller text: sorted, disjoint, not touching, not empty

  TaggedText() = default;
  explicit TaggedText(std::string s, bool is_user = false);
  void append(std::string_view s, bool is_user);
  void append(const TaggedText& other);
  void append(const TaggedText& other, std::size_t begin, std::size_t end);  // bytes [begin, end) of other
  TaggedText substr(std::size_t begin, std::size_t end) const;                 // bytes [begin, end)
  bool has_user() const { return !user.empty(); }
  bool all_user() const { return text.empty() || (user.size() == 1 && user[0].first == 0 && user[0].second == text.size()); }

 private:
  void mark_user(std::size_t begin, std::size_t end);
};

// Lists and dicts nest at most this deep (a template could otherwise build a chain a million
// levels deep whose printing or destruction would overflow the stack).
inline constexpr int kMaxValueDepth = 256;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
  bool has_user = false;  // some string inside holds caller text
  // The generator that Jinja2's select / reject / map filters return: iterable like a list, but
  // always true, without len(), not reversible, not JSON, not subscriptable. (Unlike Python's, it
  // is not used up by iterating it.)
  bool is_generator = false;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;
  bool has_user = false;  // some key or value holds caller text
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // only while building a new dict
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

// Why a value is undefined, as Jinja2's UndefinedError / SecurityError would say when something
// is done with it that an undefined value cannot do.
struct UndefinedData {
  std::string message;
  bool security = false;  // a sandbox refusal (calling list.append): SecurityError
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  bool user_keywords = false;  // some keyword name came from caller text (**mapping)
  const Value* find_keyword(std::string_view name) const;
  bool carries_user() const;
};

struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
  bool is_macro = false;
  bool user_receiver = false;  // a method bound to a value that holds caller text
};

struct LoopData;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Loop };

  Value();  // Undefined with no message
  static Value undefined(std::string message, bool security = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value number(double f);
  static Value string(std::string s);  // the template's own text
  static Value string(TaggedText s);
  // Jinja2's Markup (|safe, |escape): a str whose `+`, `%`, format() and join() HTML-escape their
  // plain-str operands, and whose str methods return Markup again.
  static Value markup(TaggedText s);
  static Value user_string(std::string s);  // caller text
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value generator(std::vector<Value> items);  // see ListData::is_generator
  static Value dict(DictData data);
  static Value namespace_object(std::shared_ptr<Namespace> ns);
  static Value function(std::shared_ptr<const Function> fn);
  static Value loop(std::shared_ptr<const LoopData> loop);
  // The caller's data: every string in it (keys included) is caller text. Throws TemplateError past kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& json, int depth = 0);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_markup() const { return markup_; }
  bool is_generator() const { return is_list() && as_list().is_generator; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_namespace() const { return kind() == Kind::Namespace; }
  bool is_function() const { return kind() == Kind::Function; }
  bool is_loop() const { return kind() == Kind::Loop; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const;  // Int or Bool
  double as_double() const;     // Int, Bool or Float
  const std::string& as_string() const { return std::get<std::shared_ptr<const TaggedText>>(data_)->text; }
  const TaggedText& as_tagged() const { return *std::get<std::shared_ptr<const TaggedText>>(data_); }
  // Holds caller text: a string with some, a list / dict with some inside; a namespace always
  // counts (its attributes change, so nothing is cached for it).
  bool carries_user() const;
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const std::shared_ptr<Namespace>& namespace_ptr() const { return std::get<std::shared_ptr<Namespace>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const LoopData& as_loop() const { return *std::get<std::shared_ptr<const LoopData>>(data_); }
  const UndefinedData& as_undefined() const { return *std::get<std::shared_ptr<const UndefinedData>>(data_); }

  bool truthy() const;                  // Python bool()
  std::string str() const;              // Python str(): what {{ x }} prints
  std::string repr(int depth = 0) const;  // Python repr(); throws TemplateError for namespace chains past kMaxValueDepth
  std::string type_name() const;        // Python type name: str, int, dict, NoneType, ...
  std::string object_type_repr() const; // Jinja2's "dict object", "None", ... in messages
  int nesting_depth() const;            // 1 + the deepest list / dict inside, 0 for other values

 private:
  std::variant<std::shared_ptr<const UndefinedData>, std::monostate, bool, std::int64_t, double,
               std::shared_ptr<const TaggedText>, std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
               std::shared_ptr<Namespace>, std::shared_ptr<const Function>, std::shared_ptr<const LoopData>>
      data_;
  bool markup_ = false;  // a String that is Markup
};

struct LoopData {
  std::int64_t index0 = 0;
  std::int64_t length = 0;
  std::int64_t depth0 = 0;
  Value previous_item, next_item;  // Undefined at the ends
  std::shared_ptr<std::optional<Value>> changed_last;  // loop.changed()'s memory, shared by the iterations
};

// Python equality (1 == 1.0 == True, lists element-wise, dicts as mappings).
bool equals(const Value& a, const Value& b);
// Python ordering for <, >, sort, min, max: numbers, strings, lists; otherwise throws TypeError
// through the callback's message (returns nullopt so the caller can word the error).
std::optional<int> compare(const Value& a, const Value& b);
std::string python_float_repr(double value);

// HF's tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
// Returns nullopt and sets error for a value JSON cannot hold (Undefined, a namespace, ...).
struct JsonOptions {
  std::optional<std::string> indent;  // None: one line
  std::size_t max_bytes = std::size_t{16} << 20;  // longer output is an error, not a huge allocation
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
bool to_json(const Value& value, const JsonOptions& options, std::string& out, std::string& error, int depth = 0);

}  // namespace okapi::jinja
