// The syntax tree of a parsed template: expressions and statements as Jinja2's parser builds them.
// One node type each with a kind and the few fields kinds use; the tree is immutable after parsing,
// so one parsed template can render on several threads at once.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_value.hpp"

namespace okapi::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    List,         // children
    Tuple,        // children
    Dict,         // children: key, value, key, value, ...
    Not,          // children[0]
    Negate,       // children[0]
    Plus,         // children[0]
    Binary,       // name: + - * / // % ** ; children[0], children[1]
    Concat,       // children (the ~ operands)
    And,          // children[0], children[1]
    Or,           // children[0], children[1]
    Compare,      // children[0] then operators[i] against children[i + 1]
    Conditional,  // children: value-if-true, condition, value-if-false (may be null)
    GetAttr,      // children[0], name
    GetItem,      // children[0], children[1] (the key; a Slice node for slices)
    Slice,        // children: start, stop, step (each may be null)
    Call,         // children[0] callee, children[1..] positional; keywords
    Filter,       // name; children[0] the input (null: the body of a filter/set block), then args
    Test,         // name, negated; children[0] the input, then args
    BlockBody,    // the rendered body a {% filter %} / {% set x | f %} block feeds its filters
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> operators;  // Compare: == != < <= > >= in notin
  bool negated = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none
};

struct Stmt {
  enum class Kind {
    Text,        // text
    Print,       // expr
    If,          // branches (condition null for else)
    For,         // targets, expr (iterable), condition (filter), body, else_body
    Set,         // targets or namespace_name + attribute, expr
    SetBlock,    // targets, body, expr (filter chain over BlockBody; may be null)
    Macro,       // name, params, body, uses_varargs / uses_kwargs / uses_caller
    CallBlock,   // expr (the call), params (caller's), body
    FilterBlock, // expr (filter chain over BlockBody), body
    With,        // targets + values (expr_list), body
    Break,
    Continue,
    Generation,  // body
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  std::vector<std::string> targets;
  bool unpack_targets = false;  // `for a, b in` / `set a, b =`: targets form a tuple
  std::string namespace_name, attribute;
  std::vector<ExprPtr> expr_list;
  StmtList body, else_body;
  std::string name;
  std::vector<MacroParam> params;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

}  // namespace okapi::jinja
