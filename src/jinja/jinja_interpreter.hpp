// Renders a parsed template: Jinja2's evaluation rules (Python semantics for values, scoping of
// loops and macros, Undefined) with hard limits on output size, work and nesting, so a template
// from an untrusted client cannot hang or exhaust the server. One Interpreter per render.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/jinja_ast.hpp"
#include "jinja/jinja_value.hpp"

namespace okapi::jinja {

struct Limits {
  std::size_t max_output_bytes = std::size_t{16} << 20;  // any one string, the output included
  std::size_t max_steps = 5'000'000;  // evaluation steps + 4 per list element + 1 per 16 string bytes built
  int max_call_depth = 100;                               // nested macro / caller calls
  int max_eval_depth = 600;                               // nested statements and expressions at run time
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> variables;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(const std::string& template_name, std::time_t now, Limits limits = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // The output, with the origin of each byte (see TaggedText).
  TaggedText render(const StmtList& body, const ScopePtr& root);

  // For filters, tests and methods.
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_undefined(const Value& undefined) const;
  void charge(std::size_t units);
  void check_size(std::size_t bytes) const;
  // A string a builtin computed: caller text while a filter, method or function that was given
  // caller text runs (it cannot say which bytes came from where), else the template's own.
  Value make_string(std::string text);
  Value make_string(TaggedText text);  // origins given byte by byte
  // What {{ value }} prints, with origins: a string's own; a list / dict printed as caller text if
  // any string inside is; numbers and the like as the template's own.
  TaggedText text_of(const Value& value) const;
  bool in_user_context() const { return user_context_; }
  // markupsafe.escape(): Markup as it is; anything else printed, HTML-escaped (& < > ' "), as Markup.
  Value escape_html(const Value& value);
  // An operand of Markup's %, format() and join(): strings escaped as escape_html does, numbers,
  // booleans and None as they are (they format as numbers), other values printed and escaped.
  Value markup_operand(const Value& value);
  Value make_list(std::vector<Value> items, bool is_tuple = false);
  std::vector<Value> iterate(const Value& iterable);
  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);
  Value get_attribute(const Value& object, const std::string& name);
  Value get_item(const Value& object, const Value& key);
  std::shared_ptr<Namespace> new_namespace();
  std::time_t now() const { return now_; }
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { Normal, Break, Continue };
  struct DepthGuard;
  struct UserContext;

  Flow exec_list(const StmtList& body, const ScopePtr& scope);
  Flow exec(const Stmt& stmt, const ScopePtr& scope);
  Flow exec_for(const Stmt& stmt, const ScopePtr& scope);
  void exec_set(const Stmt& stmt, const ScopePtr& scope);
  void define_macro(const Stmt& stmt, const ScopePtr& scope);
  TaggedText capture(const StmtList& body, const ScopePtr& scope);
  Value call_macro(const Stmt& macro, const std::weak_ptr<Scope>& closure, CallArgs& args);
  void assign_targets(const Stmt& stmt, Scope& scope, const Value& value);
  void write(std::string_view text);  // the template's own text
  void write(const TaggedText& text);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_binary(const Expr& expr, const Value& left, const Value& right);
  Value eval_compare(const Expr& expr, const ScopePtr& scope);
  Value eval_call(const Expr& expr, const ScopePtr& scope, const Value* caller = nullptr);
  void eval_args(const Expr& expr, std::size_t first, const ScopePtr& scope, CallArgs& args);
  Value slice(const Value& object, const Expr& slice, const ScopePtr& scope);
  bool contains(const Value& container, const Value& item);
  Value loop_attribute(const Value& loop, const std::string& name);

  const std::string& template_name_;
  std::time_t now_;
  Limits limits_;
  TaggedText* out_ = nullptr;
  bool user_context_ = false;  // a builtin given caller text is running (see make_string)
  std::size_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int line_ = 0;
  ScopePtr root_;
  std::vector<Value> block_bodies_;  // innermost {% filter %} / {% set | f %} body on top
  std::vector<std::weak_ptr<Namespace>> namespaces_;  // cleared at the end: no reference cycles outlive a render
};

}  // namespace okapi::jinja
