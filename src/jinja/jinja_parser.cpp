#include "jinja/jinja_parser.hpp"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <limits>

#include "jinja/jinja_error.hpp"
#include "jinja/jinja_text.hpp"

namespace okapi::jinja {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : tokens_(tokens), name_(name) {}

  StmtList parse_all() {
    StmtList body = subparse({});
    if (current().type != TokenType::End) fail(fmt::format("Encountered unknown tag '{}'.", current().text));
    return body;
  }

 private:
  // Depth guard for recursive descent: parser nesting beyond kMaxParseDepth is an error.
  struct DepthGuard {
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxParseDepth) parser_.fail(fmt::format("template nesting deeper than {}", kMaxParseDepth));
    }
    ~DepthGuard() { --parser_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    Parser& parser_;
  };

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(std::size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool is_op(const char* op) const { return current().type == TokenType::Operator && current().text == op; }
  bool is_name(const char* name) const { return current().type == TokenType::Name && current().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& token) {
    switch (token.type) {
      case TokenType::End: return "end of template";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::VariableEnd: return "end of print statement";
      case TokenType::BlockBegin: return "begin of statement block";
      case TokenType::VariableBegin: return "begin of print statement";
      case TokenType::Data: return "template data";
      case TokenType::String: return "string";
      case TokenType::Integer: return "integer";
      case TokenType::Float: return "float";
      default: return "'" + token.text + "'";
    }
  }

  [[noreturn]] void fail(const std::string& message) const { fail_at(name_, current().line, message); }
  [[noreturn]] void fail_unexpected(const std::string& expected) const {
    if (current().type == TokenType::End) fail(fmt::format("unexpected end of template, expected {}.", expected));
    fail(fmt::format("expected {}, got {}", expected, describe(current())));
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_unexpected(fmt::format("'{}'", op));
  }
  void expect(TokenType type, const char* what) {
    if (current().type != type) fail_unexpected(what);
    advance();
  }
  std::string expect_name() {
    if (current().type != TokenType::Name) fail_unexpected("name");
    return advance().text;
  }

  ExprPtr node(Expr::Kind kind, int line) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    return expr;
  }

  // ---- statements ----

  // Parses until a block whose first name is one of end_names (left unconsumed, after `{%`).
  StmtList subparse(std::initializer_list<const char*> end_names) {
    DepthGuard guard(*this);
    StmtList body;
    while (current().type != TokenType::End) {
      const Token& token = current();
      if (token.type == TokenType::Data) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::Text;
        stmt->line = token.line;
        stmt->text = token.text;
        body.push_back(std::move(stmt));
        advance();
      } else if (token.type == TokenType::VariableBegin) {
        advance();
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = Stmt::Kind::Print;
        stmt->line = token.line;
        stmt->expr = parse_tuple(true, {});
        expect(TokenType::VariableEnd, "end of print statement");
        body.push_back(std::move(stmt));
      } else if (token.type == TokenType::BlockBegin) {
        advance();
        for (const char* end : end_names) {
          if (is_name(end)) return body;
        }
        body.push_back(parse_statement());
      } else {
        fail(fmt::format("unexpected {}", describe(token)));
      }
    }
    if (end_names.size() > 0) {
      std::string names;
      for (const char* end : end_names) names += (names.empty() ? "'" : " or '") + std::string(end) + "'";
      fail(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}.", names));
    }
    return body;
  }

  // After the header of a block statement: `%}` body `{% end...`.
  StmtList parse_body(std::initializer_list<const char*> end_names, bool drop_needle) {
    expect(TokenType::BlockEnd, "end of statement block");
    StmtList body = subparse(end_names);
    if (drop_needle) {
      advance();
      expect(TokenType::BlockEnd, "end of statement block");
    }
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    if (current().type != TokenType::Name) fail("tag name expected");
    const std::string tag = current().text;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = current().line;
    advance();
    if (tag == "if") {
      parse_if(*stmt);
    } else if (tag == "for") {
      parse_for(*stmt);
    } else if (tag == "set") {
      parse_set(*stmt);
    } else if (tag == "macro") {
      parse_macro(*stmt);
    } else if (tag == "call") {
      parse_call_block(*stmt);
    } else if (tag == "filter") {
      stmt->kind = Stmt::Kind::FilterBlock;
      stmt->expr = parse_filter(nullptr, true);
      stmt->body = parse_body({"endfilter"}, true);
    } else if (tag == "with") {
      parse_with(*stmt);
    } else if (tag == "generation") {
      stmt->kind = Stmt::Kind::Generation;
      stmt->body = parse_body({"endgeneration"}, true);
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      stmt->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect(TokenType::BlockEnd, "end of statement block");
    } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block") {
      fail(fmt::format("'{}' is not supported in chat templates (there are no other templates to load)", tag));
    } else {
      fail(fmt::format("Encountered unknown tag '{}'.", tag));
    }
    return stmt;
  }

  void parse_if(Stmt& stmt) {
    stmt.kind = Stmt::Kind::If;
    ExprPtr condition = parse_tuple(false, {});
    while (true) {
      StmtList body = parse_body({"elif", "else", "endif"}, false);
      stmt.branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = advance().text;
      if (tag == "elif") {
        condition = parse_tuple(false, {});
      } else if (tag == "else") {
        stmt.branches.emplace_back(nullptr, parse_body({"endif"}, true));
        return;
      } else {
        expect(TokenType::BlockEnd, "end of statement block");
        return;
      }
    }
  }

  // Assignment targets: a name, or names separated by commas (a tuple).
  void parse_targets(Stmt& stmt, const char* end_name) {
    bool parenthesized = skip_op("(");
    while (true) {
      stmt.targets.push_back(expect_name());
      if (!skip_op(",")) break;
      stmt.unpack_targets = true;
      if ((end_name != nullptr && is_name(end_name)) || is_op("=") || is_op(")")) break;
    }
    if (parenthesized) {
      expect_op(")");
      stmt.unpack_targets = true;
    }
  }

  void parse_for(Stmt& stmt) {
    stmt.kind = Stmt::Kind::For;
    parse_targets(stmt, "in");
    if (!skip_name("in")) fail_unexpected("'in'");
    stmt.expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) stmt.condition = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    ++loop_depth_;
    stmt.body = parse_body({"endfor", "else"}, false);
    --loop_depth_;
    if (advance().text == "else") {
      stmt.else_body = parse_body({"endfor"}, true);
    } else {
      expect(TokenType::BlockEnd, "end of statement block");
    }
  }

  void parse_set(Stmt& stmt) {
    if (current().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == ".") {
      stmt.namespace_name = advance().text;
      advance();
      stmt.attribute = expect_name();
    } else {
      parse_targets(stmt, nullptr);
    }
    if (skip_op("=")) {
      stmt.kind = Stmt::Kind::Set;
      stmt.expr = parse_tuple(true, {});
      expect(TokenType::BlockEnd, "end of statement block");
      return;
    }
    if (!stmt.namespace_name.empty() || stmt.unpack_targets) fail_unexpected("'='");
    stmt.kind = Stmt::Kind::SetBlock;
    if (is_op("|")) stmt.expr = parse_filter(nullptr, false);
    stmt.body = parse_body({"endset"}, true);
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam param;
      param.name = expect_name();
      if (skip_op("=")) param.default_value = parse_expression(true);
      params.push_back(std::move(param));
    }
    advance();
  }

  // Whether the tokens between two positions name `name` (a macro uses varargs/kwargs/caller).
  bool mentions(std::size_t begin, std::size_t end, const char* name) const {
    for (std::size_t i = begin; i < end && i < tokens_.size(); ++i) {
      if (tokens_[i].type == TokenType::Name && tokens_[i].text == name) return true;
    }
    return false;
  }

  void parse_macro(Stmt& stmt) {
    stmt.kind = Stmt::Kind::Macro;
    stmt.name = expect_name();
    parse_signature(stmt.params);
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    const std::size_t body_begin = pos_;
    stmt.body = parse_body({"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    stmt.uses_varargs = mentions(body_begin, pos_, "varargs");
    stmt.uses_kwargs = mentions(body_begin, pos_, "kwargs");
    stmt.uses_caller = mentions(body_begin, pos_, "caller");
  }

  void parse_call_block(Stmt& stmt) {
    stmt.kind = Stmt::Kind::CallBlock;
    if (is_op("(")) parse_signature(stmt.params);
    stmt.expr = parse_expression(true);
    if (stmt.expr->kind != Expr::Kind::Call) fail("expected call");
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    stmt.body = parse_body({"endcall"}, true);
    loop_depth_ = saved_loop_depth;
  }

  void parse_with(Stmt& stmt) {
    stmt.kind = Stmt::Kind::With;
    while (current().type != TokenType::BlockEnd) {
      if (!stmt.targets.empty()) expect_op(",");
      stmt.targets.push_back(expect_name());
      expect_op("=");
      stmt.expr_list.push_back(parse_expression(true));
    }
    stmt.body = parse_body({"endwith"}, true);
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    const Token& token = current();
    if (token.type == TokenType::VariableEnd || token.type == TokenType::BlockEnd || token.type == TokenType::End) {
      return true;
    }
    if (token.type == TokenType::Operator && token.text == ")") return true;
    for (const char* name : extra_end) {
      if (is_name(name)) return true;
    }
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_end, bool explicit_parentheses = false) {
    const int line = current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail(fmt::format("Expected an expression, got {}", describe(current())));
    }
    auto tuple = node(Expr::Kind::Tuple, line);
    tuple->children = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = advance().line;
      auto conditional = node(Expr::Kind::Conditional, line);
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      conditional->children.push_back(std::move(expr));
      conditional->children.push_back(std::move(condition));
      conditional->children.push_back(std::move(otherwise));
      expr = std::move(conditional);
    }
    return expr;
  }

  ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto expr = node(kind, line);
    expr->name = op;
    expr->children.push_back(std::move(left));
    expr->children.push_back(std::move(right));
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = advance().line;
      left = binary(Expr::Kind::Or, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = advance().line;
      left = binary(Expr::Kind::And, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      auto expr = node(Expr::Kind::Not, advance().line);
      expr->children.push_back(parse_not());
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = current().line;
    ExprPtr first = parse_math1();
    ExprPtr compare;
    while (true) {
      std::string op;
      if (current().type == TokenType::Operator &&
          (current().text == "==" || current().text == "!=" || current().text == "<" || current().text == "<=" ||
           current().text == ">" || current().text == ">=")) {
        op = advance().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        advance();
        advance();
        op = "notin";
      } else {
        break;
      }
      if (!compare) {
        compare = node(Expr::Kind::Compare, line);
        compare->children.push_back(std::move(first));
      }
      compare->operators.push_back(op);
      compare->children.push_back(parse_math1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& token = advance();
      left = binary(Expr::Kind::Binary, token.text, std::move(left), parse_concat(), token.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = current().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto concat = node(Expr::Kind::Concat, line);
    concat->children.push_back(std::move(first));
    while (skip_op("~")) concat->children.push_back(parse_math2());
    return concat;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& token = advance();
      left = binary(Expr::Kind::Binary, token.text, std::move(left), parse_pow(), token.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& token = advance();
      left = binary(Expr::Kind::Binary, token.text, std::move(left), parse_unary(true), token.line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr expr;
    if (is_op("-") || is_op("+")) {
      const Token& token = advance();
      expr = node(token.text == "-" ? Expr::Kind::Negate : Expr::Kind::Plus, token.line);
      expr->children.push_back(parse_unary(false));
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    if (with_filter) expr = parse_filter_expr(std::move(expr));
    return expr;
  }

  ExprPtr literal(Value value, int line) {
    auto expr = node(Expr::Kind::Literal, line);
    expr->literal = std::move(value);
    return expr;
  }

  Value parse_integer(const std::string& text) {
    int base = 10;
    std::string digits = text;
    if (text.size() > 2 && text[0] == '0') {
      const char prefix = static_cast<char>(text[1] | 0x20);
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : prefix == 'x' ? 16 : 10;
      if (base != 10) digits = text.substr(2);
    }
    std::int64_t value = 0;
    const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (result.ec != std::errc() || result.ptr != digits.data() + digits.size()) {
      fail(fmt::format("integer literal {} is out of range (64-bit integers only)", text));
    }
    return Value::integer(value);
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    const int line = token.line;
    switch (token.type) {
      case TokenType::Name: {
        advance();
        if (token.text == "true" || token.text == "True") return literal(Value::boolean(true), line);
        if (token.text == "false" || token.text == "False") return literal(Value::boolean(false), line);
        if (token.text == "none" || token.text == "None") return literal(Value::none(), line);
        auto name = node(Expr::Kind::Name, line);
        name->name = token.text;
        return name;
      }
      case TokenType::String: {
        std::string text;
        while (current().type == TokenType::String) text += advance().text;
        return literal(Value::string(std::move(text)), line);
      }
      case TokenType::Integer:
        advance();
        return literal(parse_integer(token.text), line);
      case TokenType::Float:
        advance();
        return literal(Value::number(std::strtod(token.text.c_str(), nullptr)), line);
      case TokenType::Operator:
        if (token.text == "(") {
          advance();
          ExprPtr expr = parse_tuple(true, {}, true);
          expect_op(")");
          return expr;
        }
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail(fmt::format("unexpected {}", describe(token)));
  }

  ExprPtr parse_list() {
    auto list = node(Expr::Kind::List, advance().line);
    while (!is_op("]")) {
      if (!list->children.empty()) expect_op(",");
      if (is_op("]")) break;
      list->children.push_back(parse_expression(true));
    }
    advance();
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = node(Expr::Kind::Dict, advance().line);
    while (!is_op("}")) {
      if (!dict->children.empty()) expect_op(",");
      if (is_op("}")) break;
      dict->children.push_back(parse_expression(true));
      expect_op(":");
      dict->children.push_back(parse_expression(true));
    }
    advance();
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        expr = parse_subscript(std::move(expr));
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr expr) {
    while (true) {
      if (is_op("|")) {
        expr = parse_filter(std::move(expr), false);
      } else if (is_name("is")) {
        expr = parse_test(std::move(expr));
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr expr) {
    DepthGuard guard(*this);
    const Token& token = advance();
    if (token.text == ".") {
      const Token& attribute = current();
      if (attribute.type == TokenType::Name) {
        advance();
        auto get = node(Expr::Kind::GetAttr, token.line);
        get->name = attribute.text;
        get->children.push_back(std::move(expr));
        return get;
      }
      if (attribute.type == TokenType::Integer) {
        advance();
        auto get = node(Expr::Kind::GetItem, token.line);
        get->children.push_back(std::move(expr));
        get->children.push_back(literal(parse_integer(attribute.text), token.line));
        return get;
      }
      fail_unexpected("name or number");
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      if (is_op("]")) break;
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto get = node(Expr::Kind::GetItem, token.line);
    get->children.push_back(std::move(expr));
    if (args.size() == 1) {
      get->children.push_back(std::move(args[0]));
    } else {
      auto tuple = node(Expr::Kind::Tuple, token.line);
      tuple->children = std::move(args);
      get->children.push_back(std::move(tuple));
    }
    return get;
  }

  ExprPtr parse_subscribed() {
    const int line = current().line;
    std::vector<ExprPtr> parts;
    if (skip_op(":")) {
      parts.push_back(nullptr);
    } else {
      ExprPtr first = parse_expression(true);
      if (!skip_op(":")) return first;
      parts.push_back(std::move(first));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    if (skip_op(":")) {
      parts.push_back(!is_op("]") && !is_op(",") ? parse_expression(true) : nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto slice = node(Expr::Kind::Slice, line);
    slice->children = std::move(parts);
    return slice;
  }

  // `(` args `)` into expr->children (after any already there) and expr->keywords.
  void parse_call_args(Expr& expr) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) {  // *list / **dict: kept as keywords named "*" / "**"
        std::string star = advance().text;
        expr.keywords.emplace_back(std::move(star), parse_expression(true));
        continue;
      }
      if (current().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        std::string key = advance().text;
        advance();
        expr.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!expr.keywords.empty()) fail("Invalid argument syntax");
        expr.children.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard guard(*this);
    auto call = node(Expr::Kind::Call, current().line);
    call->children.push_back(std::move(callee));
    parse_call_args(*call);
    return call;
  }

  // `| name(args)` chains; start_inline: the first `|` is implied ({% filter %} / {% set x | f %}).
  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
    DepthGuard guard(*this);
    if (!input) input = node(Expr::Kind::BlockBody, current().line);
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      auto filter = node(Expr::Kind::Filter, current().line);
      filter->name = expect_name();
      while (skip_op(".")) filter->name.append(".").append(expect_name());
      filter->children.push_back(std::move(input));
      if (is_op("(")) parse_call_args(*filter);
      input = std::move(filter);
    }
    return input;
  }

  ExprPtr parse_test(ExprPtr input) {
    DepthGuard guard(*this);
    auto test = node(Expr::Kind::Test, advance().line);
    if (skip_name("not")) test->negated = true;
    test->name = expect_name();
    while (skip_op(".")) test->name.append(".").append(expect_name());
    test->children.push_back(std::move(input));
    const Token& token = current();
    const bool starts_argument =
        token.type == TokenType::Name || token.type == TokenType::String || token.type == TokenType::Integer ||
        token.type == TokenType::Float ||
        (token.type == TokenType::Operator && (token.text == "(" || token.text == "[" || token.text == "{"));
    if (is_op("(")) {
      parse_call_args(*test);
    } else if (starts_argument && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      test->children.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  const std::vector<Token>& tokens_;
  const std::string& name_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StmtList parse_template(const std::vector<Token>& tokens, const std::string& template_name) {
  return Parser(tokens, template_name).parse_all();
}

}  // namespace okapi::jinja
