// The values a chat template computes with: Python's None, bool, int, float, str, list
// and dict as Jinja2 sees them, plus Jinja2's Undefined, namespace() objects and macros
// (docs/architecture.md §8, chat templates). Conversions follow Python: str(), repr(),
// truthiness, ==, < and json.dumps (transformers' tojson filter).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace olmo2::chat {

class Value;
struct MacroDef;

/// The items of a Python list or tuple.
using List = std::vector<Value>;

/// A Python dict with string keys, in insertion order (what JSON objects and template dict
/// literals produce). Lookup is linear: chat messages have a handful of keys.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  /// The value under `key`, or nullptr.
  const Value* find(const std::string& key) const;
  /// Sets `key` (replacing in place, or appending).
  void set(const std::string& key, Value value);
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Macro, Function };

  /// Jinja2's Undefined; `hint` says what was missing ("'foo' is undefined"), for errors.
  static Value undefined(std::string hint);
  /// None, bool, int (64-bit: Python's big ints are not modelled), float, str (UTF-8), list.
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items);
  /// A tuple: a list that prints as "(a, b)" and is never equal to a list (dict items,
  /// `(a, b)` literals, `set a, b = …`).
  static Value tuple(List items);
  static Value dict(Dict d);
  /// A namespace() object: a dict that `{% set ns.attr = … %}` may change, shared by copies.
  static Value name_space(Dict d);
  static Value macro(std::shared_ptr<const MacroDef> m);
  /// A built-in global function (raise_exception, namespace, range, dict, strftime_now).
  static Value function(std::string name);
  /// JSON → Value: objects become dicts (in the JSON value's key order: sorted for
  /// nlohmann::json, as written for nlohmann::ordered_json), arrays lists, numbers int or
  /// float, null None. Throws InputError for an unsigned integer above INT64_MAX and for
  /// nesting over 256 levels (the conversions recurse).
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  /// Kind tests; a bool is also integral and a number, as in Python.
  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  /// int or bool (Python's bool is an int).
  bool is_integral() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }
  bool is_number() const { return is_integral() || kind_ == Kind::Float; }
  /// A list or a tuple.
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && b_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }

  bool as_bool() const { return b_; }
  /// int value of an int or bool.
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }
  /// float value of any number.
  double as_float() const;
  /// The text of a string, the hint of an Undefined, the name of a function.
  const std::string& text() const { return s_; }
  const List& items() const { return *list_; }
  /// The dict of a Dict or Namespace.
  const Dict& entries() const { return *dict_; }
  /// A namespace's dict, to assign to.
  Dict& namespace_entries() const { return *dict_; }
  const MacroDef& macro_def() const { return *macro_; }

  /// Python truthiness (Undefined is false).
  bool truthy() const;
  /// Python's type name, for error messages ("str", "list", "NoneType", "Undefined").
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;  // Bool: the value; List: a tuple
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const MacroDef> macro_;
};

/// Python's str(v) as Jinja2 prints it: Undefined → "", None → "None", True → "True",
/// floats as repr (shortest round-trip digits), lists and dicts as their repr.
std::string to_str(const Value& v);
/// Python's repr(v): strings quoted and escaped as Python does.
std::string to_repr(const Value& v);
/// Python's float repr: "1.0", "0.1", "1e-05", "1e+16", "inf", "nan".
std::string float_repr(double f);
/// Python ==. Numbers compare by value across int, bool and float; Undefined equals only
/// Undefined (Jinja2's Undefined.__eq__).
bool equals(const Value& a, const Value& b);
/// Python <: numbers, strings (by code point) and lists (lexicographic). Throws InputError
/// naming both types for any other pair.
bool less_than(const Value& a, const Value& b);

/// Options of json.dumps that transformers' tojson filter exposes.
struct JsonOptions {
  int indent = -1;             ///< -1: one line; n ≥ 0: newline and n spaces per level
  bool ensure_ascii = false;   ///< escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
  bool sort_keys = false;
  std::string item_separator;  ///< "" means the default: ", " without indent, "," with it
  std::string key_separator = ": ";
};
/// json.dumps(v, ...) byte for byte: Python's escapes (\" \\ \n \r \t \b \f, other
/// controls as \u00XX), floats as repr, NaN/Infinity as Python writes them. Throws
/// InputError for an Undefined, a namespace or a macro (not JSON serializable).
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace olmo2::chat
