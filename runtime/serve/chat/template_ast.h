// The syntax tree of a parsed chat template (docs/architecture.md §8, chat templates):
// expressions and statements of the Jinja2 subset that Hugging Face chat templates use.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/serve/chat/template_value.h"

namespace olmo2::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// Arguments of a call, filter or test: positional, then name=value.
struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> named;
};

struct Expr {
  enum class Kind {
    Literal,   ///< value
    Name,      ///< name
    List,      ///< items
    Tuple,     ///< items
    Dict,      ///< items as key, value pairs: items[2i], items[2i+1]
    Attr,      ///< items[0].name
    Item,      ///< items[0][items[1]]
    Slice,     ///< items[0][items[1]:items[2]:items[3]] (absent bounds are null)
    Call,      ///< items[0](args)
    Filter,    ///< items[0] | name(args)
    Test,      ///< items[0] is [not] name(args)
    Not,       ///< not items[0]
    Neg,       ///< -items[0]
    Pos,       ///< +items[0]
    Binary,    ///< items[0] op items[1]: + - * / // % ** ~ and or
    Compare,   ///< items[0] ops[0] items[1] ops[1] items[2] … (== != < <= > >= in notin)
    Cond,      ///< items[1] if items[0] else items[2] (items[2] null: Undefined)
  };
  Kind kind;
  size_t pos = 0;  ///< byte offset in the source, for errors
  Value value;
  std::string name;  ///< Name, Attr, Filter, Test; the operator of Binary
  std::vector<std::string> ops;  ///< Compare
  std::vector<ExprPtr> items;
  Args args;
  bool negated = false;  ///< Test
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

/// A `{% macro name(params) %}` definition; shared with the values that call it.
struct MacroDef {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  ///< name, default (null: none)
  Body body;
};

struct Stmt {
  enum class Kind {
    Text,        ///< text
    Print,       ///< {{ exprs[0] }}
    If,          ///< branches: (exprs[i], bodies[i]); else: else_body
    For,         ///< for targets in exprs[0] [if exprs[1]]: bodies[0]; else: else_body
    Set,         ///< set targets = exprs[0]; ns_attr: targets[0].ns_attr = exprs[0]
    SetBlock,    ///< set targets[0]: bodies[0] rendered
    Macro,       ///< macro
    Break,
    Continue,
    Block,       ///< bodies[0] as is ({% generation %})
  };
  Kind kind;
  size_t pos = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  Body else_body;
  std::vector<std::string> targets;
  std::string ns_attr;
  std::shared_ptr<const MacroDef> macro;
};

}  // namespace olmo2::chat
