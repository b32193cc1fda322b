// The chat-template parser (template_parser.h): a recursive-descent parser that follows
// the structure of Jinja2 3.1's parser.py (parse_condexpr … parse_primary, parse_postfix,
// parse_filter_expr, parse_subscribed, parse_statement).
#include "runtime/serve/chat/template_parser.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/serve/chat/template_builtins.h"
#include "runtime/serve/chat/template_lexer.h"

namespace olmo2::chat {
namespace {

class Parser {
 public:
  Parser(const std::string& src, std::vector<Token> tokens) : src_(src), t_(std::move(tokens)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  // ---- tokens ----
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == TokenType::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::Text: return "template text";
      case TokenType::VarBegin: return "'{{'";
      case TokenType::VarEnd: return "'}}'";
      case TokenType::BlockBegin: return "'{%'";
      case TokenType::BlockEnd: return "'%}'";
      case TokenType::End: return "end of template";
      case TokenType::String: return "a string";
      case TokenType::Int:
      case TokenType::Float: return "'" + t.text + "'";
      default: return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    OLMO2_THROW(InputError, "chat template: ", what, " at ", describe_position(src_, pos));
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail(cur().pos, "expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) unexpected(what);
    ++i_;
  }
  std::string expect_name() {
    if (cur().type != TokenType::Name) unexpected("a name");
    return t_[i_++].text;
  }
  ExprPtr node(Expr::Kind kind, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----
  // Statements until one of `ends` (its {% and name consumed, the name in *found) or the
  // end of the template (only when `ends` is empty).
  Body parse_body(const std::vector<std::string>& ends, std::string* found) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::End) {
        if (!ends.empty()) fail(t.pos, "unexpected end of template, expected '" + ends.back() + "'");
        return body;
      }
      if (t.type == TokenType::Text) {
        auto s = stmt(Stmt::Kind::Text, t.pos);
        s->text = t.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (t.type == TokenType::VarBegin) {
        ++i_;
        auto s = stmt(Stmt::Kind::Print, t.pos);
        s->exprs.push_back(parse_expression());
        expect(TokenType::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == TokenType::BlockBegin) {
        ++i_;
        const size_t pos = cur().pos;
        const std::string name = expect_name();
        if (std::find(ends.begin(), ends.end(), name) != ends.end()) {
          *found = name;
          return body;
        }
        body.push_back(parse_statement(name, pos));
      } else {
        unexpected("template text or a tag");
      }
    }
  }

  std::unique_ptr<Stmt> stmt(Stmt::Kind kind, size_t pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  std::unique_ptr<Stmt> parse_statement(const std::string& name, size_t pos) {
    const Nesting nesting(this, pos);
    std::string end;
    if (name == "if") {
      auto s = stmt(Stmt::Kind::If, pos);
      s->exprs.push_back(parse_expression());
      expect(TokenType::BlockEnd, "'%}'");
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
        if (end == "elif") {
          s->exprs.push_back(parse_expression());
          expect(TokenType::BlockEnd, "'%}'");
          continue;
        }
        if (end == "else") {
          expect(TokenType::BlockEnd, "'%}'");
          s->else_body = parse_body({"endif"}, &end);
        }
        expect(TokenType::BlockEnd, "'%}'");
        return s;
      }
    }
    if (name == "for") {
      auto s = stmt(Stmt::Kind::For, pos);
      s->targets = parse_targets();
      if (!skip_name("in")) unexpected("'in'");
      s->exprs.push_back(parse_expression(false));
      s->exprs.push_back(skip_name("if") ? parse_expression() : nullptr);
      if (is_name("recursive")) fail(cur().pos, "unsupported recursive for loop");
      expect(TokenType::BlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"else", "endfor"}, &end));
      if (end == "else") {
        expect(TokenType::BlockEnd, "'%}'");
        s->else_body = parse_body({"endfor"}, &end);
      }
      expect(TokenType::BlockEnd, "'%}'");
      return s;
    }
    if (name == "set") {
      auto s = stmt(Stmt::Kind::Set, pos);
      if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == ".") {
        s->targets.push_back(expect_name());
        ++i_;
        s->ns_attr = expect_name();
      } else {
        s->targets = parse_targets();
      }
      if (skip_op("=")) {
        s->exprs.push_back(parse_tuple_or_expression());
        expect(TokenType::BlockEnd, "'%}'");
        return s;
      }
      if (is_op("|")) fail(cur().pos, "unsupported filter on a set block");
      if (s->targets.size() != 1 || !s->ns_attr.empty()) fail(pos, "a set block assigns one name");
      expect(TokenType::BlockEnd, "'%}'");
      s->kind = Stmt::Kind::SetBlock;
      s->bodies.push_back(parse_body({"endset"}, &end));
      expect(TokenType::BlockEnd, "'%}'");
      return s;
    }
    if (name == "macro") {
      auto def = std::make_shared<MacroDef>();
      def->name = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!def->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        std::string param = expect_name();
        def->params.emplace_back(param, skip_op("=") ? parse_expression() : nullptr);
      }
      expect(TokenType::BlockEnd, "'%}'");
      def->body = parse_body({"endmacro"}, &end);
      if (cur().type == TokenType::Name) ++i_;  // {% endmacro name %}
      expect(TokenType::BlockEnd, "'%}'");
      auto s = stmt(Stmt::Kind::Macro, pos);
      s->macro = std::move(def);
      return s;
    }
    if (name == "break" || name == "continue") {
      expect(TokenType::BlockEnd, "'%}'");
      return stmt(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, pos);
    }
    if (name == "generation") {  // transformers' AssistantTracker: renders its body
      expect(TokenType::BlockEnd, "'%}'");
      auto s = stmt(Stmt::Kind::Block, pos);
      s->bodies.push_back(parse_body({"endgeneration"}, &end));
      expect(TokenType::BlockEnd, "'%}'");
      return s;
    }
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") fail(pos, "unexpected '" + name + "'");
    fail(pos, "unsupported tag '" + name + "'");
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) names.push_back(expect_name());
    return names;
  }

  // ---- expressions ----
  ExprPtr parse_tuple_or_expression() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto tuple = node(Expr::Kind::Tuple, pos);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::BlockEnd) break;
      tuple->items.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr = true) {
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      const size_t pos = cur().pos;
      ++i_;
      auto c = node(Expr::Kind::Cond, pos);
      c->items.push_back(parse_or());
      c->items.push_back(std::move(e));
      c->items.push_back(skip_name("else") ? parse_expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const char* op, ExprPtr left, ExprPtr right, size_t pos) {
    auto b = node(Expr::Kind::Binary, pos);
    b->name = op;
    b->items.push_back(std::move(left));
    b->items.push_back(std::move(right));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const size_t pos = t_[i_++].pos;
      left = binary("or", std::move(left), parse_and(), pos);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const size_t pos = t_[i_++].pos;
      left = binary("and", std::move(left), parse_not(), pos);
    }
    return left;
  }

  ExprPtr parse_not() {
    const Nesting nesting(this, cur().pos);
    if (is_name("not")) {
      auto n = node(Expr::Kind::Not, t_[i_++].pos);
      n->items.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = t_[i_++].text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Expr::Kind::Compare, pos);
        cmp->items.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = t_[i_++];
      left = binary(t.text == "+" ? "+" : "-", std::move(left), parse_concat(), t.pos);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const size_t pos = t_[i_++].pos;
      left = binary("~", std::move(left), parse_math2(), pos);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = t_[i_++];
      static const char* const kOps[] = {"*", "/", "//", "%"};
      const char* op = *std::find_if(std::begin(kOps), std::end(kOps), [&](const char* o) { return t.text == o; });
      left = binary(op, std::move(left), parse_pow(), t.pos);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary();
    while (is_op("**")) {
      const size_t pos = t_[i_++].pos;
      left = binary("**", std::move(left), parse_unary(), pos);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    const Nesting nesting(this, cur().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = t_[i_++];
      e = node(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.pos);
      e->items.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr literal(Value v, size_t pos) {
    auto e = node(Expr::Kind::Literal, pos);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::Name: {
        ++i_;
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.pos);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.pos);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.pos);
        auto n = node(Expr::Kind::Name, t.pos);
        n->name = t.text;
        return n;
      }
      case TokenType::String: {
        std::string s;
        while (cur().type == TokenType::String) s += t_[i_++].text;  // adjacent literals join
        return literal(Value::string(std::move(s)), t.pos);
      }
      case TokenType::Int: ++i_; return literal(Value::integer(t.int_value), t.pos);
      case TokenType::Float: ++i_; return literal(Value::number(t.float_value), t.pos);
      default: break;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return literal(Value::tuple({}), t.pos);
      ExprPtr first = parse_expression();
      if (skip_op(")")) return first;
      auto tuple = node(Expr::Kind::Tuple, t.pos);
      tuple->items.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        tuple->items.push_back(parse_expression());
      }
      expect_op(")");
      return tuple;
    }
    if (skip_op("[")) {
      auto list = node(Expr::Kind::List, t.pos);
      while (!skip_op("]")) {
        if (!list->items.empty()) expect_op(",");
        if (skip_op("]")) break;
        list->items.push_back(parse_expression());
      }
      return list;
    }
    if (skip_op("{")) {
      auto dict = node(Expr::Kind::Dict, t.pos);
      while (!skip_op("}")) {
        if (!dict->items.empty()) expect_op(",");
        if (skip_op("}")) break;
        dict->items.push_back(parse_expression());
        expect_op(":");
        dict->items.push_back(parse_expression());
      }
      return dict;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const size_t pos = cur().pos;
      if (skip_op(".")) {
        if (cur().type == TokenType::Int) {
          auto item = node(Expr::Kind::Item, pos);
          item->items.push_back(std::move(e));
          item->items.push_back(literal(Value::integer(t_[i_++].int_value), pos));
          e = std::move(item);
          continue;
        }
        auto attr = node(Expr::Kind::Attr, pos);
        attr->name = expect_name();
        attr->items.push_back(std::move(e));
        e = std::move(attr);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), pos);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // After '[': an index or a slice [a:b:c] with any bound left out.
  ExprPtr parse_subscript(ExprPtr target, size_t pos) {
    ExprPtr bounds[3];
    bool slice = false;
    if (!is_op(":")) bounds[0] = parse_expression();
    if (skip_op(":")) {
      slice = true;
      if (!is_op("]") && !is_op(":")) bounds[1] = parse_expression();
      if (skip_op(":") && !is_op("]")) bounds[2] = parse_expression();
    }
    expect_op("]");
    auto e = node(slice ? Expr::Kind::Slice : Expr::Kind::Item, pos);
    e->items.push_back(std::move(target));
    for (int k = 0; k < (slice ? 3 : 1); ++k) e->items.push_back(std::move(bounds[k]));
    return e;
  }

  Args parse_args() {
    Args args;
    expect_op("(");
    while (!skip_op(")")) {
      if (!args.positional.empty() || !args.named.empty()) expect_op(",");
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().pos, "unsupported *args or **kwargs in a call");
      if (cur().type == TokenType::Name && peek().type == TokenType::Op && peek().text == "=") {
        std::string key = expect_name();
        ++i_;
        args.named.emplace_back(key, parse_expression());
      } else {
        if (!args.named.empty()) fail(cur().pos, "positional argument after a keyword argument");
        args.positional.push_back(parse_expression());
      }
    }
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = node(Expr::Kind::Call, cur().pos);
    call->args = parse_args();
    call->items.push_back(std::move(callee));
    return call;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const size_t pos = t_[i_++].pos;
        auto f = node(Expr::Kind::Filter, pos);
        const size_t name_pos = cur().pos;
        f->name = expect_name();
        if (!is_known_filter(f->name)) fail(name_pos, "unsupported filter '" + f->name + "'");
        if (is_op("(")) f->args = parse_args();
        f->items.push_back(std::move(e));
        e = std::move(f);
      } else if (is_name("is")) {
        const size_t pos = t_[i_++].pos;
        auto t = node(Expr::Kind::Test, pos);
        t->negated = skip_name("not");
        const size_t name_pos = cur().pos;
        t->name = expect_name();
        if (!is_known_test(t->name)) fail(name_pos, "unsupported test '" + t->name + "'");
        if (is_op("(")) {
          t->args = parse_args();
        } else if ((cur().type == TokenType::Name && cur().text != "else" && cur().text != "or" &&
                    cur().text != "and" && cur().text != "is") ||
                   cur().type == TokenType::String || cur().type == TokenType::Int || cur().type == TokenType::Float ||
                   is_op("[") || is_op("{")) {
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        t->items.push_back(std::move(e));
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // The parser recurses: nesting is bounded (an InputError) instead of overflowing the stack.
  static constexpr int kMaxDepth = 200;
  struct Nesting {
    Parser* p;
    Nesting(Parser* parser, size_t pos) : p(parser) {
      if (++p->depth_ > kMaxDepth) p->fail(pos, "nested over " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nesting() { --p->depth_; }
  };

  const std::string& src_;
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& normalized_source) {
  return Parser(normalized_source, lex_template(normalized_source)).parse_all();
}

}  // namespace olmo2::chat
