// Attribute and item access, operators, str/dict methods and global functions of the
// chat-template interpreter (template_builtins.h). Sources: Jinja2 3.1's
// sandbox.SandboxedEnvironment.getattr/getitem and runtime.Undefined; Python's operator
// semantics (floor division and modulo round toward negative infinity); transformers'
// chat_template_utils.py for raise_exception, namespace, strftime_now and dict.
#include "runtime/serve/chat/template_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "runtime/serve/chat/python_str.h"

namespace olmo2::chat {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  OLMO2_THROW(BuiltinError, v.text().empty() ? std::string("value is undefined") : v.text());
}

const Value* named_arg(const Named& named, const char* key) {
  for (const auto& [k, v] : named)
    if (k == key) return &v;
  return nullptr;
}

/// Argument `index` (positional) or `key` (named), or nullptr when absent or None.
const Value* arg(const std::vector<Value>& args, const Named& named, size_t index, const char* key) {
  const Value* v = index < args.size() ? &args[index] : named_arg(named, key);
  return v && !v->is_none() ? v : nullptr;
}

std::string str_arg(const Value* v, const char* what) {
  if (!v->is_string()) OLMO2_THROW(BuiltinError, what, " must be a string, not ", v->type_name());
  return v->text();
}

long int_arg(const Value* v, const char* what) {
  if (!v->is_integral()) OLMO2_THROW(BuiltinError, what, " must be an integer, not ", v->type_name());
  return static_cast<long>(v->as_int());
}

/// a op b for op one of __builtin_{add,sub,mul}_overflow; throws on overflow.
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) OLMO2_THROW(BuiltinError, "integer overflow");
  return r;
}
const auto kAdd = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
const auto kSub = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
const auto kMul = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };

Value string_method(const std::string& s, const std::string& name, const std::vector<Value>& args, const Named& named) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = arg(args, named, 0, "chars");
    std::optional<std::string> set;
    if (chars) set = str_arg(chars, "strip argument");
    return Value::string(py_strip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* what = arg(args, named, 0, "prefix");
    if (!what) OLMO2_THROW(BuiltinError, name, " takes a string or a tuple of strings");
    const List options = what->is_list() ? what->items() : List{*what};
    for (const Value& o : options) {
      const std::string p = str_arg(&o, name.c_str());
      const bool hit = name == "startswith" ? s.compare(0, p.size(), p) == 0
                                            : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "split") {
    const Value* sep = arg(args, named, 0, "sep");
    const Value* max = arg(args, named, 1, "maxsplit");
    std::optional<std::string> sep_text;
    if (sep) sep_text = str_arg(sep, "split separator");
    List parts;
    for (std::string& p : py_split(s, sep_text, max ? int_arg(max, "maxsplit") : -1)) parts.push_back(Value::string(std::move(p)));
    return Value::list(std::move(parts));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "replace") {
    const Value* old = arg(args, named, 0, "old");
    const Value* repl = arg(args, named, 1, "new");
    const Value* count = arg(args, named, 2, "count");
    if (!old || !repl) OLMO2_THROW(BuiltinError, "replace takes two strings");
    return Value::string(py_replace(s, str_arg(old, "replace argument"), str_arg(repl, "replace argument"),
                                    count ? int_arg(count, "count") : -1));
  }
  if (name == "find" || name == "count") {
    const Value* sub = arg(args, named, 0, "sub");
    if (!sub) OLMO2_THROW(BuiltinError, name, " takes a string");
    const std::string needle = str_arg(sub, name.c_str());
    if (name == "find") {
      const size_t at = s.find(needle);
      return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(py_len(s.substr(0, at))));
    }
    if (needle.empty()) return Value::integer(static_cast<int64_t>(py_len(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + needle.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value* items = arg(args, named, 0, "iterable");
    if (!items) OLMO2_THROW(BuiltinError, "join takes an iterable");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*items)) {
      out += (first ? "" : s) + str_arg(&item, "joined item");
      first = false;
    }
    return Value::string(std::move(out));
  }
  OLMO2_THROW(BuiltinError, "unsupported method str.", name);
}

Value dict_method(const Dict& d, const std::string& name, const std::vector<Value>& args) {
  if (name == "items" || name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : d.entries) {
      if (name == "items") out.push_back(Value::tuple({Value::string(k), v}));
      if (name == "keys") out.push_back(Value::string(k));
      if (name == "values") out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    if (args.empty()) OLMO2_THROW(BuiltinError, "get expected at least 1 argument, got 0");
    const Value* found = args[0].is_string() ? d.find(args[0].text()) : nullptr;
    if (found) return *found;
    return args.size() > 1 ? args[1] : Value::none();
  }
  OLMO2_THROW(BuiltinError, "unsupported method dict.", name);
}

/// Jinja2's object_type_repr: "dict object", "list object", "None".
std::string to_repr_type(const Value& obj) { return obj.is_none() ? "None" : obj.type_name() + " object"; }

/// The Undefined of a missing attribute or item, with Jinja2's message for it.
Value missing(const Value& obj, const Value& key) {
  if (key.is_string()) return Value::undefined(detail::concat("'", to_repr_type(obj), "' has no attribute ", to_repr(key)));
  return Value::undefined(detail::concat(to_repr_type(obj), " has no element ", to_repr(key)));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    const Value* v = obj.entries().find(name);
    if (v) return *v;
  }
  return missing(obj, Value::string(name));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const Value* v = obj.entries().find(key.text());
    if (v) return *v;
    return missing(obj, key);
  }
  if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.items().size() : py_len(obj.text()));
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.items()[static_cast<size_t>(i)];
      return Value::string(encode_utf8(std::u32string(1, decode_utf8(obj.text())[static_cast<size_t>(i)])));
    }
  }
  return missing(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj);
  auto bound = [](const Value& v, bool* ok) -> std::optional<long> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_integral()) *ok = false;
    return static_cast<long>(v.as_int());
  };
  bool ok = obj.is_list() || obj.is_string();
  const auto b = bound(start, &ok), e = bound(stop, &ok), s = bound(step, &ok);
  if (!ok) return Value::undefined("invalid slice of " + obj.type_name());  // Jinja2 catches the TypeError
  if (obj.is_list()) {
    List out;
    for (size_t i : slice_positions(obj.items().size(), b, e, s)) out.push_back(obj.items()[i]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  const std::u32string cps = decode_utf8(obj.text());
  std::u32string out;
  for (size_t i : slice_positions(cps.size(), b, e, s)) out.push_back(cps[i]);
  return Value::string(encode_utf8(out));
}

bool is_method(const Value& obj, const std::string& name) {
  static const char* const kStr[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper", "lower",
                                     "title", "capitalize", "replace", "find", "count", "join"};
  static const char* const kDict[] = {"items", "keys", "values", "get"};
  if (obj.is_string()) return std::find(std::begin(kStr), std::end(kStr), name) != std::end(kStr);
  if (obj.is_dict()) return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
  return false;
}

Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args, const Named& named) {
  if (obj.is_string()) return string_method(obj.text(), name, args, named);
  if (obj.is_dict()) return dict_method(obj.entries(), name, args);
  OLMO2_THROW(BuiltinError, "unsupported method ", obj.type_name(), ".", name);
}

bool is_global_function(const std::string& name) {
  return name == "raise_exception" || name == "namespace" || name == "range" || name == "dict" ||
         name == "strftime_now";
}

Value call_global(const std::string& name, const std::vector<Value>& args, const Named& named) {
  if (name == "raise_exception") {
    OLMO2_THROW(TemplateRaised, args.empty() ? std::string() : to_str(args[0]));
  }
  if (name == "namespace" || name == "dict") {
    Dict d;
    for (const Value& a : args) {
      if (!a.is_dict()) OLMO2_THROW(BuiltinError, name, "() takes a dict and keyword arguments, not ", a.type_name());
      for (const auto& [k, v] : a.entries().entries) d.set(k, v);
    }
    for (const auto& [k, v] : named) d.set(k, v);
    return name == "dict" ? Value::dict(std::move(d)) : Value::name_space(std::move(d));
  }
  if (name == "range") {
    if (args.empty() || args.size() > 3) OLMO2_THROW(BuiltinError, "range expected 1 to 3 arguments");
    long start = 0, stop, step = 1;
    if (args.size() == 1) {
      stop = int_arg(&args[0], "range bound");
    } else {
      start = int_arg(&args[0], "range bound");
      stop = int_arg(&args[1], "range bound");
      if (args.size() == 3) step = int_arg(&args[2], "range step");
    }
    if (step == 0) OLMO2_THROW(BuiltinError, "range() arg 3 must not be zero");
    List out;
    for (long i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) OLMO2_THROW(BuiltinError, "range too big (Jinja2's sandbox allows 100000 items)");
      out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  }
  if (name == "strftime_now") {
    if (args.empty() || !args[0].is_string()) OLMO2_THROW(BuiltinError, "strftime_now takes a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, args[0].text().c_str(), &local);
    return Value::string(std::string(buf, n));
  }
  OLMO2_THROW(BuiltinError, "'", name, "' is undefined");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = a.is_integral() && b.is_integral();
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::integer(checked(kAdd, a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value::string(a.text() + b.text());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
  } else if (op == "-") {
    if (ints) return Value::integer(checked(kSub, a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_float() - b.as_float());
  } else if (op == "*") {
    if (ints) return Value::integer(checked(kMul, a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_float() * b.as_float());
    const Value& seq = a.is_integral() ? b : a;
    const Value& times = a.is_integral() ? a : b;
    if (times.is_integral() && (seq.is_string() || seq.is_list())) {
      const int64_t n = times.as_int();
      if (n > 0 && (seq.is_string() ? seq.text().size() : seq.items().size()) * static_cast<uint64_t>(n) > (1u << 26))
        OLMO2_THROW(BuiltinError, "repetition too large");
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.text();
        return Value::string(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
      return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
  } else if (op == "/" || op == "//" || op == "%") {
    if (nums) {
      if (b.as_float() == 0.0) OLMO2_THROW(BuiltinError, "division by zero");
      if (op == "/") return Value::number(a.as_float() / b.as_float());
      if (ints) {
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
        return Value::integer(op == "//" ? q : m);
      }
      const double x = a.as_float(), y = b.as_float();
      if (op == "//") return Value::number(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
    if (op == "%" && a.is_string()) OLMO2_THROW(BuiltinError, "unsupported: printf-style string formatting with %");
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {  // exponentiation by squaring
      int64_t acc = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) acc = checked(kMul, acc, base);
        if (e > 1) base = checked(kMul, base, base);
      }
      return Value::integer(acc);
    }
    if (nums) return Value::number(std::pow(a.as_float(), b.as_float()));
  }
  OLMO2_THROW(BuiltinError, "unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        OLMO2_THROW(BuiltinError, "'in <string>' requires string as left operand, not ", item.type_name());
      return container.text().find(item.text()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.items())
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict: return item.is_string() && container.entries().find(item.text()) != nullptr;
    default: OLMO2_THROW(BuiltinError, "argument of type '", container.type_name(), "' is not iterable");
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.items();
    case Value::Kind::String: {
      List out;
      for (char32_t c : decode_utf8(v.text())) out.push_back(Value::string(encode_utf8(std::u32string(1, c))));
      return out;
    }
    case Value::Kind::Dict: {
      List out;
      for (const auto& [k, e] : v.entries().entries) out.push_back(Value::string(k));
      return out;
    }
    default: OLMO2_THROW(BuiltinError, "'", v.type_name(), "' object is not iterable");
  }
}

}  // namespace olmo2::chat
