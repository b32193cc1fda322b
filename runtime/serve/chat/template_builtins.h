// The built-ins of the chat-template interpreter (docs/architecture.md §8, chat
// templates): Jinja2's filters and tests that chat templates use, Python's str/dict
// methods, attribute and item access with Jinja2's Undefined rules, the operators, and
// the globals transformers adds (raise_exception, namespace, strftime_now, dict) plus
// range. Semantics: Jinja2 3.1 (filters.py, tests.py, environment.getattr/getitem,
// runtime.Undefined) and transformers' chat_template_utils.py.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/serve/chat/template_value.h"

namespace olmo2::chat {

/// A failure inside a built-in; the evaluator adds the template position and rethrows it
/// as InputError.
class BuiltinError : public InputError {
 public:
  using InputError::InputError;
};

/// raise_exception(message) in a template: the message is the template's own.
class TemplateRaised : public InputError {
 public:
  using InputError::InputError;
};

using Named = std::vector<std::pair<std::string, Value>>;

/// Whether a filter / test of this name exists (the parser refuses others).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

/// `v | name(args)`. Throws BuiltinError for bad arguments or values.
Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args, const Named& named);
/// `v is name(args)`.
bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args);

/// `obj.name` as Jinja2's sandbox reads it: a dict's key (Undefined if absent), a
/// namespace's attribute, a loop variable's field; Undefined for anything else. Reading
/// an attribute of Undefined throws BuiltinError ("'x' is undefined"), as Jinja2 does.
Value get_attr(const Value& obj, const std::string& name);
/// `obj[key]`: dict key, list or str index (negative from the end), Undefined when
/// absent or out of range; on Undefined throws BuiltinError.
Value get_item(const Value& obj, const Value& key);
/// `obj[start:stop:step]` of a list or str (code points).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

/// Whether `obj.name(...)` is a method call: str methods (strip, lstrip, rstrip, split,
/// startswith, endswith, upper, lower, title, capitalize, replace, find, count, join,
/// format is not supported) and dict methods (items, keys, values, get).
bool is_method(const Value& obj, const std::string& name);
Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args, const Named& named);

/// Whether `name` is a global function (raise_exception, namespace, range, dict,
/// strftime_now) and calling it. raise_exception throws TemplateRaised.
bool is_global_function(const std::string& name);
Value call_global(const std::string& name, const std::vector<Value>& args, const Named& named);

/// Binary operators: + - * / // % ** ~ with Python's semantics (int overflow, division by
/// zero and mismatched types throw BuiltinError; Undefined in arithmetic throws, in ~ is "").
Value binary_op(const std::string& op, const Value& a, const Value& b);
/// `a in b`: substring, list element, dict key; false for Undefined.
bool contains(const Value& container, const Value& item);
/// Items of `v` when iterated: list items, str code points, dict keys; Undefined gives
/// none. Throws BuiltinError for other values.
List iterate(const Value& v);

}  // namespace olmo2::chat
