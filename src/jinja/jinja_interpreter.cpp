#include "jinja/jinja_interpreter.hpp"

#include <cmath>
#include <limits>

#include "jinja/jinja_builtins.hpp"
#include "jinja/jinja_error.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* scope = this; scope != nullptr; scope = scope->parent.get()) {
    for (const auto& [key, value] : scope->variables) {
      if (key == name) return &value;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [key, existing] : variables) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  variables.emplace_back(name, std::move(value));
}

struct Interpreter::DepthGuard {
  explicit DepthGuard(Interpreter& interpreter) : interpreter_(interpreter) {
    if (++interpreter_.eval_depth_ > interpreter_.limits_.max_eval_depth) {
      interpreter_.fail(fmt::format("template evaluation nested deeper than {}", interpreter_.limits_.max_eval_depth));
    }
  }
  ~DepthGuard() { --interpreter_.eval_depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
  Interpreter& interpreter_;
};

// While a builtin given caller text runs, the strings it makes are caller text; a macro body
// (template text again) runs outside that.
struct Interpreter::UserContext {
  UserContext(Interpreter& interpreter, bool user) : interpreter_(interpreter), saved_(interpreter.user_context_) {
    interpreter_.user_context_ = user;
  }
  ~UserContext() { interpreter_.user_context_ = saved_; }
  UserContext(const UserContext&) = delete;
  UserContext& operator=(const UserContext&) = delete;
  Interpreter& interpreter_;
  bool saved_;
};

Interpreter::Interpreter(const std::string& template_name, std::time_t now, Limits limits)
    : template_name_(template_name), now_(now), limits_(limits) {}

Interpreter::~Interpreter() {
  // A namespace can hold itself (ns.self = ns), or a chain of namespaces a million long. Detach
  // every namespace's attributes while all of them are still alive, then drop the attributes, then
  // the namespaces: nothing is freed recursively and no cycle outlives the render.
  std::vector<std::shared_ptr<Namespace>> alive;
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) alive.push_back(std::move(ns));
  }
  std::vector<std::vector<std::pair<std::string, Value>>> contents;
  contents.reserve(alive.size());
  for (auto& ns : alive) {
    contents.push_back(std::move(ns->attributes));
    ns->attributes.clear();
  }
  contents.clear();
  alive.clear();
}

void Interpreter::fail(const std::string& message) const { fail_at(template_name_, line_, message); }

void Interpreter::fail_undefined(const Value& undefined) const {
  const std::string& message = undefined.as_undefined().message;
  fail(message.empty() ? "the value is undefined" : message);
}

void Interpreter::charge(std::size_t units) {
  steps_ += units;
  if (steps_ > limits_.max_steps) fail(fmt::format("template needs more than {} steps", limits_.max_steps));
}

void Interpreter::check_size(std::size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    fail(fmt::format("template output larger than {} bytes", limits_.max_output_bytes));
  }
}

Value Interpreter::make_string(std::string text) {
  check_size(text.size());
  charge(text.size() / 16);
  return Value::string(TaggedText(std::move(text), user_context_));
}

Value Interpreter::make_string(TaggedText text) {
  check_size(text.text.size());
  charge(text.text.size() / 16);
  return Value::string(std::move(text));
}

TaggedText Interpreter::text_of(const Value& value) const {
  if (value.is_string()) return value.as_tagged();
  return TaggedText(value.str(), value.carries_user());
}

Value Interpreter::escape_html(const Value& value) {
  if (value.is_markup()) return value;
  const TaggedText text = text_of(value);
  // Escaped caller text stays caller text: each replacement takes the origin of the byte it replaces.
  TaggedText out;
  std::size_t plain_from = 0;
  for (std::size_t i = 0; i < text.text.size(); ++i) {
    const char* replacement = nullptr;
    switch (text.text[i]) {
      case '&': replacement = "&amp;"; break;
      case '<': replacement = "&lt;"; break;
      case '>': replacement = "&gt;"; break;
      case '"': replacement = "&#34;"; break;
      case '\'': replacement = "&#39;"; break;
      default: continue;
    }
    out.append(text, plain_from, i);
    const TaggedText original = text.substr(i, i + 1);
    out.append(replacement, original.has_user());
    plain_from = i + 1;
  }
  out.append(text, plain_from, text.text.size());
  check_size(out.text.size());
  charge(out.text.size() / 16);
  return Value::markup(std::move(out));
}

Value Interpreter::markup_operand(const Value& value) {
  if (value.is_none() || value.is_number() || value.is_undefined()) return value;
  return escape_html(value);
}

Value Interpreter::make_list(std::vector<Value> items, bool is_tuple) {
  charge(items.size() * 4);
  return Value::list(std::move(items), is_tuple);
}

std::shared_ptr<Namespace> Interpreter::new_namespace() {
  auto ns = std::make_shared<Namespace>();
  namespaces_.push_back(ns);
  return ns;
}

void Interpreter::write(std::string_view text) {
  check_size(out_->text.size() + text.size());
  charge(text.size() / 16);
  out_->append(text, false);
}

void Interpreter::write(const TaggedText& text) {
  check_size(out_->text.size() + text.text.size());
  charge(text.text.size() / 16);
  out_->append(text);
}

TaggedText Interpreter::render(const StmtList& body, const ScopePtr& root) {
  TaggedText out;
  out_ = &out;
  root_ = root;
  exec_list(body, root);
  return out;
}

// ---- statements ----

Interpreter::Flow Interpreter::exec_list(const StmtList& body, const ScopePtr& scope) {
  for (const auto& stmt : body) {
    const Flow flow = exec(*stmt, scope);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

TaggedText Interpreter::capture(const StmtList& body, const ScopePtr& scope) {
  TaggedText captured;
  TaggedText* saved = out_;
  out_ = &captured;
  try {
    exec_list(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return captured;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const ScopePtr& scope) {
  DepthGuard guard(*this);
  charge(1);
  line_ = stmt.line;
  switch (stmt.kind) {
    case Stmt::Kind::Text:
      write(stmt.text);
      break;
    case Stmt::Kind::Print: {
      const Value value = eval(*stmt.expr, scope);
      line_ = stmt.line;
      write(text_of(value));
      break;
    }
    case Stmt::Kind::If:
      for (const auto& [condition, body] : stmt.branches) {
        if (condition == nullptr || eval(*condition, scope).truthy()) return exec_list(body, scope);
      }
      break;
    case Stmt::Kind::For:
      return exec_for(stmt, scope);
    case Stmt::Kind::Set:
    case Stmt::Kind::SetBlock:
      exec_set(stmt, scope);
      break;
    case Stmt::Kind::Macro:
      define_macro(stmt, scope);
      break;
    case Stmt::Kind::CallBlock: {
      const Stmt* block = &stmt;
      std::weak_ptr<Scope> closure = scope;
      auto caller = std::make_shared<Function>();
      caller->name = "caller";
      caller->is_macro = true;
      caller->call = [block, closure](Interpreter& interpreter, CallArgs& args) {
        return interpreter.call_macro(*block, closure, args);
      };
      const Value caller_value = Value::function(std::move(caller));
      const Value result = eval_call(*stmt.expr, scope, &caller_value);
      write(text_of(result));
      break;
    }
    case Stmt::Kind::FilterBlock: {
      block_bodies_.push_back(Value::string(capture(stmt.body, scope)));
      Value result;
      try {
        result = eval(*stmt.expr, scope);
      } catch (...) {
        block_bodies_.pop_back();
        throw;
      }
      block_bodies_.pop_back();
      write(text_of(result));
      break;
    }
    case Stmt::Kind::With: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      for (std::size_t i = 0; i < stmt.targets.size(); ++i) inner->set(stmt.targets[i], eval(*stmt.expr_list[i], scope));
      return exec_list(stmt.body, inner);
    }
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
    case Stmt::Kind::Generation:
      return exec_list(stmt.body, scope);
  }
  return Flow::Normal;
}

void Interpreter::assign_targets(const Stmt& stmt, Scope& scope, const Value& value) {
  if (!stmt.unpack_targets) {
    scope.set(stmt.targets[0], value);
    return;
  }
  std::vector<Value> parts = iterate(value);
  if (parts.size() != stmt.targets.size()) {
    if (parts.size() > stmt.targets.size()) fail(fmt::format("too many values to unpack (expected {})", stmt.targets.size()));
    fail(fmt::format("not enough values to unpack (expected {}, got {})", stmt.targets.size(), parts.size()));
  }
  for (std::size_t i = 0; i < parts.size(); ++i) scope.set(stmt.targets[i], parts[i]);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& stmt, const ScopePtr& scope) {
  std::vector<Value> items = iterate(eval(*stmt.expr, scope));
  if (stmt.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign_targets(stmt, *probe, item);
      if (eval(*stmt.condition, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  charge(items.size());
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    return exec_list(stmt.else_body, inner) == Flow::Normal ? Flow::Normal : Flow::Normal;
  }
  auto changed_last = std::make_shared<std::optional<Value>>();
  // loop.changed(loop.changed) would store a function holding its own memory: forget it at the end.
  struct ForgetChanged {
    std::shared_ptr<std::optional<Value>>& last;
    ~ForgetChanged() { last->reset(); }
  } forget_changed{changed_last};
  const auto length = static_cast<std::int64_t>(items.size());
  for (std::int64_t i = 0; i < length; ++i) {
    auto iteration = std::make_shared<Scope>();
    iteration->parent = scope;
    const auto index = static_cast<std::size_t>(i);
    assign_targets(stmt, *iteration, items[index]);
    auto loop = std::make_shared<LoopData>();
    loop->index0 = i;
    loop->length = length;
    if (i > 0) loop->previous_item = items[index - 1];
    if (i + 1 < length) loop->next_item = items[index + 1];
    loop->changed_last = changed_last;
    iteration->set("loop", Value::loop(std::move(loop)));
    line_ = stmt.line;
    if (exec_list(stmt.body, iteration) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& stmt, const ScopePtr& scope) {
  Value value;
  if (stmt.kind == Stmt::Kind::Set) {
    value = eval(*stmt.expr, scope);
  } else {
    value = Value::string(capture(stmt.body, scope));
    if (stmt.expr) {
      block_bodies_.push_back(value);
      try {
        value = eval(*stmt.expr, scope);
      } catch (...) {
        block_bodies_.pop_back();
        throw;
      }
      block_bodies_.pop_back();
    }
  }
  line_ = stmt.line;
  if (!stmt.namespace_name.empty()) {
    const Value* target = scope->find(stmt.namespace_name);
    if (target == nullptr || !target->is_namespace()) fail("cannot assign attribute on non-namespace object");
    target->as_namespace().set(stmt.attribute, std::move(value));
    return;
  }
  assign_targets(stmt, *scope, value);
}

void Interpreter::define_macro(const Stmt& stmt, const ScopePtr& scope) {
  const Stmt* macro = &stmt;
  std::weak_ptr<Scope> closure = scope;  // weak: a macro stored in its own scope must not keep it alive
  auto function = std::make_shared<Function>();
  function->name = stmt.name;
  function->is_macro = true;
  function->call = [macro, closure](Interpreter& interpreter, CallArgs& args) {
    return interpreter.call_macro(*macro, closure, args);
  };
  scope->set(stmt.name, Value::function(std::move(function)));
}

Value Interpreter::call_macro(const Stmt& macro, const std::weak_ptr<Scope>& closure, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) fail(fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
  const UserContext template_text(*this, false);
  const std::string name = macro.kind == Stmt::Kind::CallBlock ? "caller" : macro.name;
  auto frame = std::make_shared<Scope>();
  frame->parent = closure.lock();
  if (!frame->parent) frame->parent = root_;
  const auto& params = macro.params;
  if (args.positional.size() > params.size() && !macro.uses_varargs && macro.kind == Stmt::Kind::Macro) {
    fail(fmt::format("macro '{}' takes not more than {} argument(s)", name, params.size()));
  }
  std::vector<bool> bound(params.size(), false);
  for (std::size_t i = 0; i < params.size() && i < args.positional.size(); ++i) {
    frame->set(params[i].name, args.positional[i]);
    bound[i] = true;
  }
  DictData extra_keywords;
  Value caller;
  for (auto& [key, value] : args.keyword) {
    bool matched = false;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (params[i].name == key) {
        if (bound[i]) fail(fmt::format("macro '{}' got multiple values for argument '{}'", name, key));
        frame->set(key, value);
        bound[i] = true;
        matched = true;
      }
    }
    if (matched) continue;
    if (key == "caller" && macro.kind == Stmt::Kind::Macro) {
      caller = value;
    } else if (macro.uses_kwargs || macro.kind == Stmt::Kind::CallBlock) {
      extra_keywords.set(args.user_keywords ? Value::user_string(key) : Value::string(key), value);
    } else {
      fail(fmt::format("macro '{}' takes no keyword argument '{}'", name, key));
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    if (params[i].default_value) {
      frame->set(params[i].name, eval(*params[i].default_value, frame));
    } else {
      frame->set(params[i].name, Value::undefined(fmt::format("parameter '{}' was not provided", params[i].name)));
    }
  }
  std::vector<Value> varargs;
  for (std::size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  frame->set("varargs", Value::list(std::move(varargs), true));
  frame->set("kwargs", Value::dict(std::move(extra_keywords)));
  if (macro.kind == Stmt::Kind::Macro) {
    frame->set("caller", caller.is_undefined() ? Value::undefined("'caller' is undefined") : caller);
  }
  ++call_depth_;
  const int saved_line = line_;
  TaggedText output;
  try {
    output = capture(macro.body, frame);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  line_ = saved_line;
  return make_string(std::move(output));
}

// ---- expressions ----

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  DepthGuard guard(*this);
  charge(1);
  line_ = expr.line;
  switch (expr.kind) {
    case Expr::Kind::Literal:
      return expr.literal;
    case Expr::Kind::Name: {
      if (const Value* value = scope->find(expr.name)) return *value;
      return Value::undefined(fmt::format("{} is undefined", python_repr(expr.name)));
    }
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const auto& child : expr.children) items.push_back(eval(*child, scope));
      return make_list(std::move(items), expr.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      DictData dict;
      for (std::size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        Value key = eval(*expr.children[i], scope);
        if (key.is_list() && !key.as_list().is_tuple) fail("unhashable type: 'list'");
        if (key.is_dict()) fail("unhashable type: 'dict'");
        dict.set(std::move(key), eval(*expr.children[i + 1], scope));
      }
      charge(dict.entries.size() * dict.entries.size() / 16);
      return Value::dict(std::move(dict));
    }
    case Expr::Kind::Not:
      return Value::boolean(!eval(*expr.children[0], scope).truthy());
    case Expr::Kind::Negate:
    case Expr::Kind::Plus: {
      const Value operand = eval(*expr.children[0], scope);
      line_ = expr.line;
      const bool negate = expr.kind == Expr::Kind::Negate;
      if (operand.is_float()) return Value::number(negate ? -operand.as_double() : operand.as_double());
      if (operand.is_number()) {
        const std::int64_t value = operand.as_int();
        if (negate && value == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
        return Value::integer(negate ? -value : value);
      }
      if (operand.is_undefined()) fail_undefined(operand);
      fail(fmt::format("bad operand type for unary {}: '{}'", negate ? '-' : '+', operand.type_name()));
    }
    case Expr::Kind::Binary: {
      const Value left = eval(*expr.children[0], scope);
      const Value right = eval(*expr.children[1], scope);
      line_ = expr.line;
      return eval_binary(expr, left, right);
    }
    case Expr::Kind::Concat: {
      TaggedText text;
      for (const auto& child : expr.children) {
        text.append(text_of(eval(*child, scope)));
        check_size(text.text.size());
      }
      return make_string(std::move(text));
    }
    case Expr::Kind::And: {
      Value left = eval(*expr.children[0], scope);
      if (!left.truthy()) return left;
      return eval(*expr.children[1], scope);
    }
    case Expr::Kind::Or: {
      Value left = eval(*expr.children[0], scope);
      if (left.truthy()) return left;
      return eval(*expr.children[1], scope);
    }
    case Expr::Kind::Compare:
      return eval_compare(expr, scope);
    case Expr::Kind::Conditional: {
      if (eval(*expr.children[1], scope).truthy()) return eval(*expr.children[0], scope);
      if (expr.children[2]) return eval(*expr.children[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line));
    }
    case Expr::Kind::GetAttr: {
      const Value object = eval(*expr.children[0], scope);
      line_ = expr.line;
      return get_attribute(object, expr.name);
    }
    case Expr::Kind::GetItem: {
      const Value object = eval(*expr.children[0], scope);
      if (expr.children[1]->kind == Expr::Kind::Slice) return slice(object, *expr.children[1], scope);
      const Value key = eval(*expr.children[1], scope);
      line_ = expr.line;
      return get_item(object, key);
    }
    case Expr::Kind::Slice:
      fail("a slice outside of []");
    case Expr::Kind::Call:
      return eval_call(expr, scope);
    case Expr::Kind::Filter: {
      Value input;
      if (expr.children[0]->kind == Expr::Kind::BlockBody) {
        input = block_bodies_.empty() ? Value::string("") : block_bodies_.back();
      } else {
        input = eval(*expr.children[0], scope);
      }
      CallArgs args;
      eval_args(expr, 1, scope, args);
      line_ = expr.line;
      return apply_filter(expr.name, input, args);
    }
    case Expr::Kind::Test: {
      const Value input = eval(*expr.children[0], scope);
      CallArgs args;
      eval_args(expr, 1, scope, args);
      line_ = expr.line;
      return Value::boolean(apply_test(expr.name, input, args) != expr.negated);
    }
    case Expr::Kind::BlockBody:
      return block_bodies_.empty() ? Value::string("") : block_bodies_.back();
  }
  return Value();
}

void Interpreter::eval_args(const Expr& expr, std::size_t first, const ScopePtr& scope, CallArgs& args) {
  for (std::size_t i = first; i < expr.children.size(); ++i) args.positional.push_back(eval(*expr.children[i], scope));
  for (const auto& [key, value] : expr.keywords) {
    if (key == "*") {
      for (Value& item : iterate(eval(*value, scope))) args.positional.push_back(std::move(item));
    } else if (key == "**") {
      const Value mapping = eval(*value, scope);
      if (!mapping.is_dict()) fail(fmt::format("argument after ** must be a mapping, not {}", mapping.type_name()));
      for (const auto& [name, item] : mapping.as_dict().entries) {
        if (!name.is_string()) fail("keywords must be strings");
        if (name.carries_user()) args.user_keywords = true;
        args.keyword.emplace_back(name.as_string(), item);
      }
    } else {
      args.keyword.emplace_back(key, eval(*value, scope));
    }
  }
}

Value Interpreter::eval_call(const Expr& expr, const ScopePtr& scope, const Value* caller) {
  const Value callee = eval(*expr.children[0], scope);
  CallArgs args;
  eval_args(expr, 1, scope, args);
  if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
  line_ = expr.line;
  return call(callee, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_function()) fail(fmt::format("'{}' object is not callable", callee.type_name()));
  const int saved_line = line_;
  const Function& function = callee.as_function();
  // A macro's body is template text (call_macro sees to that); a builtin's strings are caller
  // text when anything it was given is.
  const UserContext context(*this, user_context_ || (!function.is_macro && (function.user_receiver || args.carries_user())));
  Value result = function.call(*this, args);
  line_ = saved_line;
  return result;
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  FilterFunction filter = find_filter(name);
  if (filter == nullptr) fail(fmt::format("No filter named '{}'.", name));
  const UserContext context(*this, user_context_ || input.carries_user() || args.carries_user());
  return filter(*this, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  TestFunction test = find_test(name);
  if (test == nullptr) fail(fmt::format("No test named '{}'.", name));
  return test(*this, input, args);
}

namespace {

bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) { return __builtin_add_overflow(a, b, &out); }
bool sub_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) { return __builtin_sub_overflow(a, b, &out); }
bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) { return __builtin_mul_overflow(a, b, &out); }

// Python's float divmod (Objects/floatobject.c).
std::pair<double, double> float_divmod(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floordiv = 0.0;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
  return {floordiv, mod};
}

}  // namespace

Value Interpreter::eval_binary(const Expr& expr, const Value& left, const Value& right) {
  const std::string& op = expr.name;
  if (left.is_number() && right.is_number()) {
    const bool as_float = left.is_float() || right.is_float();
    if (op == "/") {
      if (right.as_double() == 0.0) fail("division by zero");
      return Value::number(left.as_double() / right.as_double());
    }
    if (as_float) {
      const double a = left.as_double(), b = right.as_double();
      if (op == "+") return Value::number(a + b);
      if (op == "-") return Value::number(a - b);
      if (op == "*") return Value::number(a * b);
      if (op == "//" || op == "%") {
        if (b == 0.0) fail(op == "%" ? "float modulo" : "float floor division by zero");
        const auto [quotient, remainder] = float_divmod(a, b);
        return Value::number(op == "//" ? quotient : remainder);
      }
      if (op == "**") {
        if (a == 0.0 && b < 0) fail("0.0 cannot be raised to a negative power");
        return Value::number(std::pow(a, b));
      }
    } else {
      const std::int64_t a = left.as_int(), b = right.as_int();
      std::int64_t result = 0;
      if (op == "+" && !add_overflows(a, b, result)) return Value::integer(result);
      if (op == "-" && !sub_overflows(a, b, result)) return Value::integer(result);
      if (op == "*" && !mul_overflows(a, b, result)) return Value::integer(result);
      if (op == "//" || op == "%") {
        if (b == 0) fail("integer division or modulo by zero");
        if (a == std::numeric_limits<std::int64_t>::min() && b == -1) fail("integer overflow");
        std::int64_t quotient = a / b, remainder = a % b;
        if (remainder != 0 && ((remainder < 0) != (b < 0))) {
          remainder += b;
          quotient -= 1;
        }
        return Value::integer(op == "//" ? quotient : remainder);
      }
      if (op == "**") {
        if (b < 0) {
          if (a == 0) fail("0.0 cannot be raised to a negative power");
          return Value::number(std::pow(static_cast<double>(a), static_cast<double>(b)));
        }
        std::int64_t base = a, exponent = b, power = 1;
        while (exponent > 0) {
          if ((exponent & 1) != 0 && mul_overflows(power, base, power)) fail("integer overflow");
          exponent >>= 1;
          if (exponent > 0 && mul_overflows(base, base, base)) fail("integer overflow");
        }
        return Value::integer(power);
      }
      fail("integer overflow (templates compute with 64-bit integers)");
    }
  }
  if (op == "+") {
    if (left.is_string() && right.is_string()) {
      // Markup + str and str + Markup escape the plain operand and give Markup.
      const bool markup = left.is_markup() || right.is_markup();
      TaggedText joined = markup ? escape_html(left).as_tagged() : left.as_tagged();
      joined.append(markup ? escape_html(right).as_tagged() : right.as_tagged());
      if (markup) {
        check_size(joined.text.size());
        return Value::markup(std::move(joined));
      }
      return make_string(std::move(joined));
    }
    if (left.is_list() && right.is_list() && left.as_list().is_tuple == right.as_list().is_tuple && !left.is_generator() &&
        !right.is_generator()) {
      charge((left.as_list().items.size() + right.as_list().items.size()) * 4);
      std::vector<Value> items = left.as_list().items;
      items.insert(items.end(), right.as_list().items.begin(), right.as_list().items.end());
      return make_list(std::move(items), left.as_list().is_tuple);
    }
  }
  if (op == "*") {
    const bool left_sequence = left.is_string() || (left.is_list() && !left.is_generator());
    const bool right_sequence = right.is_string() || (right.is_list() && !right.is_generator());
    if ((left_sequence && (right.is_int() || right.is_bool())) || (right_sequence && (left.is_int() || left.is_bool()))) {
      const Value& sequence = left_sequence ? left : right;
      const std::int64_t count = std::max<std::int64_t>(0, left_sequence ? right.as_int() : left.as_int());
      if (sequence.is_string()) {
        const std::size_t size = sequence.as_string().size();
        if (size > 0 && static_cast<std::uint64_t>(count) > limits_.max_output_bytes / size) check_size(limits_.max_output_bytes + 1);
        TaggedText text;
        for (std::int64_t i = 0; i < count; ++i) text.append(sequence.as_tagged());
        if (sequence.is_markup()) return Value::markup(make_string(std::move(text)).as_tagged());
        return make_string(std::move(text));
      }
      const auto& items = sequence.as_list().items;
      if (!items.empty() && static_cast<std::uint64_t>(count) > limits_.max_steps / items.size()) charge(limits_.max_steps + 1);
      charge(items.size() * static_cast<std::size_t>(count) * 4);
      std::vector<Value> repeated;
      for (std::int64_t i = 0; i < count; ++i) repeated.insert(repeated.end(), items.begin(), items.end());
      return make_list(std::move(repeated), sequence.as_list().is_tuple);
    }
  }
  if (op == "%" && left.is_string()) {
    if (left.is_markup()) {
      if (right.is_list() && right.as_list().is_tuple) return markup_percent_format(*this, left, right.as_list().items, nullptr);
      if (right.is_dict()) return markup_percent_format(*this, left, {}, &right);
      return markup_percent_format(*this, left, {right}, nullptr);
    }
    if (right.is_list() && right.as_list().is_tuple) return make_string(percent_format(*this, left.as_tagged(), right.as_list().items, nullptr));
    if (right.is_dict()) return make_string(percent_format(*this, left.as_tagged(), {}, &right));
    return make_string(percent_format(*this, left.as_tagged(), {right}, nullptr));
  }
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, left.type_name(), right.type_name()));
}

bool Interpreter::contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) fail(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      charge(container.as_list().items.size());
      for (const auto& element : container.as_list().items) {
        if (equals(element, item)) return true;
      }
      return false;
    case Value::Kind::Dict:
      charge(container.as_dict().entries.size());
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      fail(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

Value Interpreter::eval_compare(const Expr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.children[0], scope);
  for (std::size_t i = 0; i < expr.operators.size(); ++i) {
    Value right = eval(*expr.children[i + 1], scope);
    line_ = expr.line;
    const std::string& op = expr.operators[i];
    bool result = false;
    if (op == "==") {
      result = equals(left, right);
    } else if (op == "!=") {
      result = !equals(left, right);
    } else if (op == "in") {
      result = contains(right, left);
    } else if (op == "notin") {
      result = !contains(right, left);
    } else {
      const std::optional<int> order = compare(left, right);
      if (!order) {
        if (left.is_undefined()) fail_undefined(left);
        if (right.is_undefined()) fail_undefined(right);
        fail(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, left.type_name(), right.type_name()));
      }
      if (op == "<") result = *order < 0;
      if (op == "<=") result = *order <= 0;
      if (op == ">") result = *order > 0;
      if (op == ">=") result = *order >= 0;
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

std::vector<Value> Interpreter::iterate(const Value& iterable) {
  switch (iterable.kind()) {
    case Value::Kind::List:
      charge(iterable.as_list().items.size());
      return iterable.as_list().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(iterable.as_dict().entries.size());
      for (const auto& [key, value] : iterable.as_dict().entries) keys.push_back(key);
      charge(keys.size());
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> characters;
      const TaggedText& text = iterable.as_tagged();
      const std::vector<std::size_t> offsets = code_point_offsets(text.text);
      characters.reserve(offsets.size() - 1);
      for (std::size_t i = 0; i + 1 < offsets.size(); ++i) characters.push_back(Value::string(text.substr(offsets[i], offsets[i + 1])));
      charge(characters.size());
      return characters;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      fail(fmt::format("'{}' object is not iterable", iterable.type_name()));
  }
}

Value Interpreter::loop_attribute(const Value& loop_value, const std::string& name) {
  const LoopData& loop = loop_value.as_loop();
  if (name == "index") return Value::integer(loop.index0 + 1);
  if (name == "index0") return Value::integer(loop.index0);
  if (name == "revindex") return Value::integer(loop.length - loop.index0);
  if (name == "revindex0") return Value::integer(loop.length - loop.index0 - 1);
  if (name == "first") return Value::boolean(loop.index0 == 0);
  if (name == "last") return Value::boolean(loop.index0 + 1 == loop.length);
  if (name == "length") return Value::integer(loop.length);
  if (name == "depth") return Value::integer(loop.depth0 + 1);
  if (name == "depth0") return Value::integer(loop.depth0);
  if (name == "previtem") return loop.index0 > 0 ? loop.previous_item : Value::undefined("there is no previous item");
  if (name == "nextitem") return loop.index0 + 1 < loop.length ? loop.next_item : Value::undefined("there is no next item");
  if (name == "cycle") {
    auto function = std::make_shared<Function>();
    function->name = "cycle";
    const std::int64_t index0 = loop.index0;
    function->call = [index0](Interpreter& interpreter, CallArgs& args) {
      if (args.positional.empty()) interpreter.fail("no items for cycling given");
      return args.positional[static_cast<std::size_t>(index0) % args.positional.size()];
    };
    return Value::function(std::move(function));
  }
  if (name == "changed") {
    auto function = std::make_shared<Function>();
    function->name = "changed";
    std::shared_ptr<std::optional<Value>> last = loop.changed_last;
    function->call = [last](Interpreter& interpreter, CallArgs& args) {
      Value current = interpreter.make_list(args.positional);
      if (last->has_value() && equals(**last, current)) return Value::boolean(false);
      *last = std::move(current);
      return Value::boolean(true);
    };
    return Value::function(std::move(function));
  }
  return Value::undefined(fmt::format("'LoopContext object' has no attribute {}", python_repr(name)));
}

Value Interpreter::get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::Undefined:
      fail_undefined(object);
    case Value::Kind::Dict: {
      if (auto method = find_method(object, name)) return *method;
      if (const Value* value = object.as_dict().find(name)) return *value;
      break;
    }
    case Value::Kind::Namespace: {
      if (const Value* value = object.as_namespace().find(name)) return *value;
      return Value::undefined(fmt::format("'jinja2.utils.Namespace object' has no attribute {}", python_repr(name)));
    }
    case Value::Kind::Loop:
      return loop_attribute(object, name);
    case Value::Kind::String:
    case Value::Kind::List:
      if (object.is_generator()) break;
      if (auto method = find_method(object, name)) return *method;
      break;
    default:
      break;
  }
  return Value::undefined(fmt::format("{} has no attribute {}", python_repr(object.object_type_repr()), python_repr(name)));
}

Value Interpreter::get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::Undefined:
      fail_undefined(object);
    case Value::Kind::Dict:
      if (const Value* value = object.as_dict().find(key)) return *value;
      break;
    case Value::Kind::List:
    case Value::Kind::String:
      if (object.is_generator()) break;  // not subscriptable: Jinja2 gives Undefined
      if (key.is_int() || key.is_bool()) {
        std::int64_t index = key.as_int();
        if (object.is_list()) {
          const auto size = static_cast<std::int64_t>(object.as_list().items.size());
          if (index < 0) index += size;
          if (index >= 0 && index < size) return object.as_list().items[static_cast<std::size_t>(index)];
        } else {
          const std::vector<std::size_t> offsets = code_point_offsets(object.as_string());
          const auto size = static_cast<std::int64_t>(offsets.size()) - 1;
          if (index < 0) index += size;
          if (index >= 0 && index < size) {
            const auto i = static_cast<std::size_t>(index);
            TaggedText character = object.as_tagged().substr(offsets[i], offsets[i + 1]);
            return object.is_markup() ? Value::markup(std::move(character)) : Value::string(std::move(character));
          }
        }
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object.object_type_repr(), key.repr()));
}

Value Interpreter::slice(const Value& object, const Expr& slice_expr, const ScopePtr& scope) {
  std::optional<std::int64_t> parts[3];
  for (std::size_t i = 0; i < 3; ++i) {
    if (!slice_expr.children[i]) continue;
    const Value part = eval(*slice_expr.children[i], scope);
    if (part.is_none()) continue;
    if (!part.is_int() && !part.is_bool()) {
      if (part.is_undefined()) fail_undefined(part);
      fail("slice indices must be integers or None");
    }
    parts[i] = part.as_int();
  }
  line_ = slice_expr.line;
  if (object.is_undefined()) fail_undefined(object);
  const std::int64_t step = parts[2].value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  auto select = [&](std::int64_t length, auto&& take) {
    // Python's PySlice_AdjustIndices.
    auto adjust = [&](std::optional<std::int64_t> value, std::int64_t fallback, bool is_stop) {
      if (!value) return fallback;
      std::int64_t v = *value;
      if (v < 0) {
        v += length;
        if (v < 0) v = step < 0 ? -1 : 0;
      } else if (v >= length) {
        v = step < 0 ? length - 1 : length;
      }
      (void)is_stop;
      return v;
    };
    const std::int64_t start = adjust(parts[0], step < 0 ? length - 1 : 0, false);
    const std::int64_t stop = adjust(parts[1], step < 0 ? -1 : length, true);
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) take(static_cast<std::size_t>(i));
  };
  if (object.is_list() && !object.is_generator()) {
    const auto& items = object.as_list().items;
    std::vector<Value> out;
    select(static_cast<std::int64_t>(items.size()), [&](std::size_t i) { out.push_back(items[i]); });
    return make_list(std::move(out), object.as_list().is_tuple);
  }
  if (object.is_string()) {
    const TaggedText& text = object.as_tagged();
    const std::vector<std::size_t> offsets = code_point_offsets(text.text);
    TaggedText out;
    select(static_cast<std::int64_t>(offsets.size()) - 1, [&](std::size_t i) { out.append(text, offsets[i], offsets[i + 1]); });
    Value sliced = make_string(std::move(out));
    return object.is_markup() ? Value::markup(sliced.as_tagged()) : sliced;
  }
  fail(fmt::format("'{}' object is not subscriptable", object.type_name()));
}

}  // namespace okapi::jinja
