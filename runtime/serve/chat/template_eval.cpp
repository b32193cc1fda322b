// The chat-template evaluator (template_eval.h). Semantics: Jinja2 3.1's compiled
// templates (codegen.py: loop frames per iteration, LoopContext fields, and/or returning
// an operand, chained comparisons) with the built-ins of template_builtins.h.
#include "runtime/serve/chat/template_eval.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "runtime/serve/chat/template_builtins.h"
#include "runtime/serve/chat/template_lexer.h"

namespace olmo2::chat {
namespace {

constexpr size_t kMaxOutputBytes = size_t{64} << 20;
constexpr int kMaxMacroDepth = 100;

class Evaluator {
 public:
  Evaluator(const std::string& src, const Dict& variables) : src_(src), vars_(variables) { scopes_.emplace_back(); }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::unordered_map<std::string, Value>;

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    OLMO2_THROW(InputError, "chat template: ", what, " at ", describe_position(src_, pos));
  }

  // ---- statements ----
  Flow exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text, s.pos); return Flow::Normal;
      case Stmt::Kind::Print: append(out, to_str(eval(*s.exprs[0])), s.pos); return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.exprs.size(); ++i)
          if (eval(*s.exprs[i]).truthy()) return exec(s.bodies[i], out);
        return exec(s.else_body, out);
      case Stmt::Kind::For: return exec_for(s, out);
      case Stmt::Kind::Set: {
        const Value v = eval(*s.exprs[0]);
        if (!s.ns_attr.empty()) {
          const Value target = lookup(s.targets[0]);
          if (!target.is_namespace()) fail(s.pos, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
          target.namespace_entries().set(s.ns_attr, v);
        } else {
          assign(s.targets, v, s.pos);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string captured;
        exec(s.bodies[0], captured);
        scopes_.back()[s.targets[0]] = Value::string(std::move(captured));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: scopes_.back()[s.macro->name] = Value::macro(s.macro); return Flow::Normal;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Block: return exec(s.bodies[0], out);
    }
    return Flow::Normal;
  }

  void append(std::string& out, const std::string& text, size_t pos) {
    if (out.size() + text.size() > kMaxOutputBytes) fail(pos, "rendered text over 64 MiB");
    out += text;
  }

  // `for a, b in x`: binds the targets (unpacking when there are several) in the innermost scope.
  void assign(const std::vector<std::string>& targets, const Value& v, size_t pos) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    List items;
    try {
      items = iterate(v);
    } catch (const BuiltinError& e) {
      fail(pos, e.what());
    }
    if (items.size() != targets.size())
      fail(pos, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    const Value seq = eval(*s.exprs[0]);
    List all;
    try {
      all = iterate(seq);
    } catch (const BuiltinError& e) {
      fail(s.exprs[0]->pos, e.what());
    }
    List items;
    for (const Value& item : all) {  // the `if` filter runs before the loop: loop.length counts what passes
      if (!s.exprs[1]) {
        items.push_back(item);
        continue;
      }
      scopes_.emplace_back();
      assign(s.targets, item, s.pos);
      const bool keep = eval(*s.exprs[1]).truthy();
      scopes_.pop_back();
      if (keep) items.push_back(item);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.emplace_back();
      Dict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(n - i));
      loop.set("revindex0", Value::integer(n - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
      scopes_.back()["loop"] = Value::dict(std::move(loop));
      assign(s.targets, items[i], s.pos);
      const Flow f = exec(s.bodies[0], out);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    if (items.empty()) return exec(s.else_body, out);
    return Flow::Normal;
  }

  // ---- expressions ----
  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    if (const Value* v = vars_.find(name)) return *v;
    if (is_global_function(name)) return Value::function(name);
    return Value::undefined("'" + name + "' is undefined");
  }

  std::vector<Value> eval_all(const std::vector<ExprPtr>& exprs) {
    std::vector<Value> out;
    for (const auto& e : exprs) out.push_back(eval(*e));
    return out;
  }

  Named eval_named(const Args& args) {
    Named out;
    for (const auto& [k, e] : args.named) out.emplace_back(k, eval(*e));
    return out;
  }

  Value eval(const Expr& e) {
    try {
      return eval_node(e);
    } catch (const BuiltinError& err) {
      fail(e.pos, err.what());
    }
  }

  Value eval_node(const Expr& e) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Literal: return e.value;
      case K::Name: return lookup(e.name);
      case K::List: return Value::list(eval_all(e.items));
      case K::Tuple: return Value::tuple(eval_all(e.items));
      case K::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string()) fail(e.items[i]->pos, "dict keys must be strings, not " + key.type_name());
          d.set(key.text(), eval(*e.items[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case K::Attr: return get_attr(eval(*e.items[0]), e.name);
      case K::Item: return get_item(eval(*e.items[0]), eval(*e.items[1]));
      case K::Slice: {
        auto bound = [&](size_t k) { return e.items[k] ? eval(*e.items[k]) : Value::none(); };
        return get_slice(eval(*e.items[0]), bound(1), bound(2), bound(3));
      }
      case K::Call: return eval_call(e);
      case K::Filter: return apply_filter(e.name, eval(*e.items[0]), eval_all(e.args.positional), eval_named(e.args));
      case K::Test: {
        const bool r = apply_test(e.name, eval(*e.items[0]), eval_all(e.args.positional));
        return Value::boolean(e.negated ? !r : r);
      }
      case K::Not: return Value::boolean(!eval(*e.items[0]).truthy());
      case K::Neg:
      case K::Pos: {
        const Value v = eval(*e.items[0]);
        if (!v.is_number()) {
          if (v.is_undefined()) OLMO2_THROW(BuiltinError, v.text());
          OLMO2_THROW(BuiltinError, "bad operand type for unary ", e.kind == K::Neg ? "-" : "+", ": '", v.type_name(), "'");
        }
        if (e.kind == K::Pos) return v.is_integral() ? Value::integer(v.as_int()) : v;
        if (!v.is_integral()) return Value::number(-v.as_float());
        if (v.as_int() == INT64_MIN) OLMO2_THROW(BuiltinError, "integer overflow");
        return Value::integer(-v.as_int());
      }
      case K::Binary: {
        if (e.name == "and" || e.name == "or") {
          Value left = eval(*e.items[0]);
          if (left.truthy() == (e.name == "or")) return left;
          return eval(*e.items[1]);
        }
        return binary_op(e.name, eval(*e.items[0]), eval(*e.items[1]));
      }
      case K::Compare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case K::Cond:
        if (eval(*e.items[0]).truthy()) return eval(*e.items[1]);
        return e.items[2] ? eval(*e.items[2]) : Value::undefined("the condition was false and there is no else");
    }
    return Value::undefined("");
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return less_than(a, b) || equals(a, b);
    if (op == ">=") return less_than(b, a) || equals(a, b);
    if (op == "in") return contains(b, a);
    return !contains(b, a);  // notin
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.items[0];
    std::vector<Value> args = eval_all(e.args.positional);
    const Named named = eval_named(e.args);
    if (callee.kind == Expr::Kind::Attr) {
      const Value obj = eval(*callee.items[0]);
      if (is_method(obj, callee.name)) return call_method(obj, callee.name, args, named);
      return call_value(get_attr(obj, callee.name), args, named, e.pos);
    }
    return call_value(eval(callee), args, named, e.pos);
  }

  Value call_value(const Value& f, const std::vector<Value>& args, const Named& named, size_t pos) {
    if (f.kind() == Value::Kind::Function) return call_global(f.text(), args, named);
    if (f.kind() == Value::Kind::Macro) return call_macro(f.macro_def(), args, named, pos);
    if (f.is_undefined()) OLMO2_THROW(BuiltinError, f.text());
    OLMO2_THROW(BuiltinError, "'", f.type_name(), "' object is not callable");
  }

  Value call_macro(const MacroDef& m, const std::vector<Value>& args, const Named& named, size_t pos) {
    if (depth_ >= kMaxMacroDepth) fail(pos, "macros nested over " + std::to_string(kMaxMacroDepth) + " deep");
    if (args.size() > m.params.size()) fail(pos, "macro '" + m.name + "' takes " + std::to_string(m.params.size()) + " arguments");
    std::vector<Scope> saved(std::make_move_iterator(scopes_.begin() + 1), std::make_move_iterator(scopes_.end()));
    scopes_.resize(1);
    scopes_.emplace_back();
    auto restore = [&] {
      scopes_.resize(1);
      for (Scope& sc : saved) scopes_.push_back(std::move(sc));
      --depth_;
    };
    ++depth_;
    std::string out;
    try {
      for (const auto& [k, v] : named)
        if (std::none_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == k; }))
          fail(pos, "macro '" + m.name + "' has no parameter '" + k + "'");
      for (size_t i = 0; i < m.params.size(); ++i) {
        const auto& [name, dflt] = m.params[i];
        const auto given = std::find_if(named.begin(), named.end(), [&](const auto& p) { return p.first == name; });
        Value v = i < args.size() ? args[i]
                  : given != named.end() ? given->second
                  : dflt ? eval(*dflt)
                         : Value::undefined("parameter '" + name + "' was not provided");
        scopes_.back()[name] = std::move(v);
      }
      exec(m.body, out);
    } catch (...) {
      restore();
      throw;
    }
    restore();
    return Value::string(std::move(out));
  }

  const std::string& src_;
  const Dict& vars_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
};

}  // namespace

std::string render_body(const Body& body, const std::string& source, const Dict& variables) {
  return Evaluator(source, variables).run(body);
}

}  // namespace olmo2::chat
